//! Idle time by CPU stack: gaps of each cause, exact to the ns.

use std::collections::BTreeMap;
use std::path::Path;

use gpuperf_merge::join;
use gpuperf_merge::model::StringTable;
use gpuperf_merge::read::input::GpuInputs;
use gpuperf_merge::write::chrome;
use gpuperf_merge::write::idle::{DeviceIdle, DeviceKey, IdleFolder, StreamIdle};
use serde_json::{Value, json};

use crate::idle_hta::{hta_python, idle_of, run_hta};
use crate::imported::real;

/// One thread launching four kernels on stream 7, with a stream sync between
/// the second and the third. Times in µs, as Kineto writes them.
pub fn trace() -> Value {
    let op = |name: &str, ts: f64, dur: f64| {
        json!({"ph": "X", "cat": "cpu_op", "name": name, "pid": 7, "tid": 7,
               "ts": ts, "dur": dur, "args": {}})
    };
    let api = |name: &str, ts: f64, dur: f64, corr: u64| {
        json!({"ph": "X", "cat": "cuda_runtime", "name": name, "pid": 7, "tid": 7,
               "ts": ts, "dur": dur, "args": {"correlation": corr}})
    };
    let kernel = |name: &str, ts: f64, dur: f64, corr: u64| {
        json!({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": "stream 7",
               "ts": ts, "dur": dur, "args": {"correlation": corr, "device": 0, "stream": 7}})
    };
    json!({"traceEvents": [
        op("step_a", 9.0, 4.0),
        api("cudaLaunchKernel", 10.0, 2.0, 1),
        kernel("k1", 20.0, 10.0, 1),
        // The stream is idle from 30: the call comes 20 µs late, the work
        // 5.25 µs after it.
        op("step_b", 49.0, 4.0),
        api("cudaLaunchKernel", 50.0, 2.0, 2),
        kernel("k2", 55.25, 5.0, 2),
        // Idle from 60.25: the thread waits in a sync until 80, then launches at 85.
        op("wait", 61.0, 20.0),
        api("cudaStreamSynchronize", 62.0, 18.0, 3),
        json!({"ph": "X", "cat": "cuda_sync", "name": "Stream Sync", "pid": 0, "tid": "stream 7",
               "ts": 62.0, "dur": 18.0, "args": {"correlation": 3, "device": 0, "stream": 7}}),
        op("step_c", 84.0, 4.0),
        api("cudaLaunchKernel", 85.0, 2.0, 4),
        kernel("k3", 90.0, 10.0, 4),
        // Called while k3 runs; starts 10 µs after it ends.
        op("step_d", 94.0, 4.0),
        api("cudaLaunchKernel", 95.0, 2.0, 5),
        kernel("k4", 110.0, 10.0, 5),
    ]})
}

#[test]
fn kineto_gaps_of_each_cause__exact_to_the_ns_and_charged_to_their_stacks() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idle.pt.trace.json");
    std::fs::write(&path, trace().to_string()).unwrap();
    let mut strings = StringTable::new();
    let inputs = GpuInputs::open(&[path], &mut strings).unwrap();
    let mut idle = IdleFolder::new();
    join::merge(
        None,
        &inputs,
        &mut strings,
        &join::Options::default(),
        &mut [&mut idle],
    )
    .unwrap();
    let streams = idle.streams();
    assert_eq!(streams.len(), 1);
    assert_eq!(streams[0].0.stream, Some(7));
    assert_eq!(
        streams[0].1,
        StreamIdle {
            span_ns: 100_000,
            idle_ns: 65_000,
            // CPU late 20 + 6.75, host sync 18, launch latency 5.25 + 5 + 10.
            by_cause_ns: [26_750, 18_000, 20_250, 0, 0, 0],
            gaps: 3,
            // The gaps before k2 and k3: the calls came after the stream went idle.
            host_wait_ns: 25_250 + 29_750,
        }
    );
    let mut f = Vec::new();
    idle.write(&mut f).unwrap();
    let folded = String::from_utf8(f).unwrap();
    let lines: Vec<(&str, u64)> = folded
        .lines()
        .map(|l| {
            let (s, w) = l.rsplit_once(' ').unwrap();
            (s, w.parse().unwrap())
        })
        .collect();
    let total: u64 = lines.iter().map(|l| l.1).sum();
    assert_eq!(total, 65, "{folded}");
    let weight = |suffix: &str| {
        lines
            .iter()
            .filter(|l| l.0.ends_with(suffix))
            .map(|l| l.1)
            .sum::<u64>()
    };
    assert_eq!(weight("step_b;cudaLaunchKernel;[GPU_Idle: CPU late]"), 20);
    assert_eq!(
        weight("wait;cudaStreamSynchronize;[GPU_Idle: host sync]"),
        18,
        "{folded}"
    );
    assert_eq!(
        weight("step_d;cudaLaunchKernel;[GPU_Idle: launch latency]"),
        10
    );
    // 6.75 µs late and 5 µs of latency for k3, 5.25 µs of latency for k2.
    let c = weight("step_c;cudaLaunchKernel;[GPU_Idle: CPU late]")
        + weight("step_c;cudaLaunchKernel;[GPU_Idle: launch latency]");
    assert!((11..=12).contains(&c), "{folded}");
}

/// gpuperf's idle time of one trace over the whole trace (steps or not): per
/// stream (all devices and processes of the trace together, as HTA keys
/// streams), (idle, HTA's host wait, gaps), ns.
fn gpuperf_idle(trace: &Path) -> BTreeMap<u32, (u64, u64, u64)> {
    let mut strings = StringTable::new();
    let inputs = GpuInputs::open(&[trace.to_path_buf()], &mut strings).unwrap();
    let mut idle = IdleFolder::new();
    join::merge(
        None,
        &inputs,
        &mut strings,
        &join::Options::default(),
        &mut [&mut idle],
    )
    .unwrap();
    let mut per = BTreeMap::new();
    for (key, s) in idle.streams_whole() {
        let e: &mut (u64, u64, u64) = per.entry(key.stream.unwrap()).or_default();
        e.0 += s.idle_ns;
        e.1 += s.host_wait_ns;
        e.2 += s.gaps;
    }
    per
}

/// HTA's idle time breakdown of one trace, by `tests/data/idle/hta_idle.py`,
/// counting every step: per stream, (host wait, kernel wait + other), ns.
/// Without `round`, HTA's rounding to the µs is disabled. `None` when HTA is
/// not installed (the test then skips, unless `GPUPERF_REQUIRE_HTA=1`).
fn hta_idle(trace: &Path, round: bool) -> Option<BTreeMap<u32, (u64, u64)>> {
    let python = hta_python()?;
    let flags: &[&str] = if round {
        &["--all-steps"]
    } else {
        &["--all-steps", "--exact"]
    };
    let v = run_hta(&python, trace, flags);
    let mut per = BTreeMap::new();
    for (stream, cats) in v["streams"].as_object().unwrap() {
        let get = |c: &str| cats.get(c).and_then(Value::as_u64).unwrap_or(0);
        for c in cats.as_object().unwrap().keys() {
            assert!(
                ["host_wait", "kernel_wait", "other"].contains(&c.as_str()),
                "HTA category {c} unknown to the mapping"
            );
        }
        per.insert(
            stream.parse().unwrap(),
            (get("host_wait"), get("kernel_wait") + get("other")),
        );
    }
    Some(per)
}

/// Whether `a` is within 1 % of `b` (or both are under a µs).
fn within_1pct(a: u64, b: u64) -> bool {
    a.abs_diff(b) * 100 <= a.max(b) || a.abs_diff(b) < 1_000
}

const KINETO_REAL: [&str; 4] = [
    "a100_alexnet_kineto_syncs.pt.trace.json.gz",
    "a100_event_sync_kineto.pt.trace.json.gz",
    "b200_vllm_gpt_oss.pt.trace.json.gz",
    "v100_resnet50_kineto2021.pt.trace.json.gz",
];

#[test]
fn real_kineto_traces__idle_per_stream_equals_hta_within_1pct_differs_by_exactly_the_overlap_and_host_wait_maps_onto_hta()
 {
    for name in KINETO_REAL {
        let trace = real(name);
        let ours = gpuperf_idle(&trace);
        let Some(hta) = hta_idle(&trace, false) else {
            return;
        };
        let overlap = consecutive_overlap_ns(&trace);
        // HTA lists only streams with a gap or an ungapped first kernel.
        let ours_streams: Vec<u32> = ours
            .iter()
            .filter(|(_, v)| v.2 > 0)
            .map(|(s, _)| *s)
            .collect();
        let hta_streams: Vec<u32> = hta
            .iter()
            .filter(|(_, v)| v.0 + v.1 > 0)
            .map(|(s, _)| *s)
            .collect();
        assert_eq!(ours_streams, hta_streams, "{name}: streams with idle time");
        for (stream, &(host_wait, rest)) in &hta {
            let (idle, ours_host_wait, _) = ours.get(stream).copied().unwrap_or_default();
            let total = host_wait + rest;
            assert!(
                within_1pct(idle, total),
                "{name} stream {stream}: gpuperf idle {idle} ns, HTA {total} ns"
            );
            assert!(
                within_1pct(ours_host_wait, host_wait),
                "{name} stream {stream}: gpuperf host wait {ours_host_wait} ns, HTA {host_wait} ns"
            );
            // The whole difference: HTA counts an overlap of consecutive work
            // negative. HTA's µs sums are printed in whole ns: a few ns of rounding.
            assert!(
                idle.abs_diff(total + overlap[stream]) <= 10,
                "{name} stream {stream}: gpuperf {idle} ns, HTA {total} ns + overlap {} ns",
                overlap[stream]
            );
            eprintln!(
                "{name} stream {stream}: idle gpuperf {idle} HTA {total} ns; host wait gpuperf {ours_host_wait} HTA {host_wait} ns"
            );
        }
    }
}

/// Per stream, the sum over consecutive GPU work items (in start order) of the
/// time an item starts before the previous one ends, ns, from the trace's JSON:
/// the amount by which HTA's idle time (which sums `start - previous end`, so
/// an overlap counts negative) falls short of gpuperf's (which counts only time
/// with nothing on the stream).
fn consecutive_overlap_ns(trace: &Path) -> BTreeMap<u32, u64> {
    let bytes = std::fs::read(trace).unwrap();
    let v: Value = serde_json::from_reader(flate2::read::GzDecoder::new(&bytes[..])).unwrap();
    let mut items: BTreeMap<u32, Vec<(f64, f64)>> = BTreeMap::new();
    for e in v["traceEvents"].as_array().unwrap() {
        let cat = e["cat"].as_str().unwrap_or("");
        let gpu = [
            "kernel",
            "Kernel",
            "gpu_memcpy",
            "Memcpy",
            "gpu_memset",
            "Memset",
        ];
        if e["ph"] == "X" && gpu.contains(&cat) {
            let (ts, dur) = (e["ts"].as_f64().unwrap(), e["dur"].as_f64().unwrap());
            let stream = e["args"]["stream"].as_u64().unwrap() as u32;
            items.entry(stream).or_default().push((ts, ts + dur));
        }
    }
    items
        .into_iter()
        .map(|(stream, mut v)| {
            v.sort_by(|a, b| a.partial_cmp(b).unwrap());
            let us: f64 = v.windows(2).map(|w| (w[0].1 - w[1].0).max(0.0)).sum();
            (stream, (us * 1000.0).round() as u64)
        })
        .collect()
}

#[test]
fn real_b200_trace__hta_rounding_to_whole_us_adds_under_2us_per_gap() {
    let trace = real("b200_vllm_gpt_oss.pt.trace.json.gz");
    let (Some(exact), Some(rounded)) = (hta_idle(&trace, false), hta_idle(&trace, true)) else {
        return;
    };
    let ours = gpuperf_idle(&trace);
    for (stream, &(h, r)) in &exact {
        let (rh, rr) = rounded[stream];
        let gaps = ours[stream].2;
        let added = (rh + rr) as i64 - (h + r) as i64;
        // Start rounded up, end down: each gap grows by [0, 2) µs.
        assert!(
            (0..2_000 * gaps as i64).contains(&added),
            "stream {stream}: rounding added {added} ns over {gaps} gaps"
        );
        // The trace has fractional µs: the rounding shows.
        assert!(added > 0, "stream {stream}");
    }
}

#[test]
fn real_nsys_trace__idle_per_stream_equals_an_independent_sql_computation() {
    let trace = real("a100_saxpy_mpi_nsys.sqlite");
    let db =
        rusqlite::Connection::open_with_flags(&trace, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap();
    // Each item's gap: its start after the latest end of the items before it on
    // its stream; a host wait when its runtime call started after that end.
    let sql = "
        WITH work AS (
            SELECT start, end, deviceId, streamId, globalPid, correlationId FROM CUPTI_ACTIVITY_KIND_KERNEL
            UNION ALL SELECT start, end, deviceId, streamId, globalPid, correlationId FROM CUPTI_ACTIVITY_KIND_MEMCPY
            UNION ALL SELECT start, end, deviceId, streamId, globalPid, correlationId FROM CUPTI_ACTIVITY_KIND_MEMSET
        ), busy AS (
            SELECT w.*, MAX(w.end) OVER (PARTITION BY globalPid, deviceId, streamId ORDER BY w.start, w.end
                ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS busy_until
            FROM work w
        )
        SELECT streamId, COUNT(*), SUM(b.start - busy_until),
            SUM(CASE WHEN (SELECT MIN(r.start) FROM CUPTI_ACTIVITY_KIND_RUNTIME r
                           WHERE r.correlationId = b.correlationId
                             AND r.globalTid / 16777216 = b.globalPid / 16777216) > busy_until
                THEN b.start - busy_until ELSE 0 END)
        FROM busy b WHERE b.start > busy_until GROUP BY streamId ORDER BY streamId";
    let mut stmt = db.prepare(sql).unwrap();
    let expected: BTreeMap<u32, (u64, u64, u64)> = stmt
        .query_map([], |r| {
            Ok((
                r.get::<_, u32>(0)?,
                (
                    r.get::<_, i64>(2)? as u64,
                    r.get::<_, i64>(3)? as u64,
                    r.get::<_, i64>(1)? as u64,
                ),
            ))
        })
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert!(!expected.is_empty());
    let ours = gpuperf_idle(&trace);
    let ours: BTreeMap<u32, (u64, u64, u64)> = ours.into_iter().filter(|(_, v)| v.2 > 0).collect();
    assert_eq!(ours, expected);
}

#[test]
fn kineto_gaps_of_each_cause__timeline_slices_by_cause_with_the_blamed_frame_and_device_gaps() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idle.pt.trace.json");
    std::fs::write(&path, trace().to_string()).unwrap();
    let mut strings = StringTable::new();
    let inputs = GpuInputs::open(&[path], &mut strings).unwrap();
    let mut json = chrome::Writer::new(Vec::new()).unwrap().with_idle_slices();
    let mut idle = IdleFolder::new();
    join::merge(
        None,
        &inputs,
        &mut strings,
        &join::Options::default(),
        &mut [&mut json, &mut idle],
    )
    .unwrap();
    // One stream: the device is idle exactly when the stream is.
    assert_eq!(
        idle.devices(),
        &[(
            DeviceKey {
                pid: 7,
                device: Some(0)
            },
            DeviceIdle {
                span_ns: 100_000,
                idle_ns: 65_000,
                gaps: 3
            }
        )]
    );
    let doc: Value = serde_json::from_slice(&json.into_inner()).unwrap();
    let events = doc["traceEvents"].as_array().unwrap();
    let k1 = events.iter().find(|e| e["name"] == "k1").unwrap();
    let base = k1["ts"].as_f64().unwrap() - 20.0;
    let mut slices: Vec<(String, f64, f64, String, String)> = events
        .iter()
        .filter(|e| e["cat"] == "idle")
        .map(|e| {
            assert_eq!(e["pid"], k1["pid"], "on the GPU's pseudo-process");
            let on_stream = e["tid"] == k1["tid"];
            let name = e["name"].as_str().unwrap();
            assert_eq!(on_stream, name != "GPU idle (no stream busy)", "{e}");
            (
                name.to_owned(),
                e["ts"].as_f64().unwrap() - base,
                e["dur"].as_f64().unwrap(),
                e["args"]["blamed_frame"].as_str().unwrap_or("").to_owned(),
                e["args"]["api"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    slices.sort_by(|a, b| (a.1, &a.0).partial_cmp(&(b.1, &b.0)).unwrap());
    let s = |name: &str, ts: f64, dur: f64, leaf: &str, api: &str| {
        (name.to_owned(), ts, dur, leaf.to_owned(), api.to_owned())
    };
    let (late, sync, latency, device) = (
        "GPU idle: CPU late",
        "GPU idle: host sync",
        "GPU idle: launch latency",
        "GPU idle (no stream busy)",
    );
    let launch = "cudaLaunchKernel";
    assert_eq!(
        slices,
        vec![
            s(device, 30.0, 25.25, "", ""),
            s(late, 30.0, 20.0, "step_b", launch),
            s(latency, 50.0, 5.25, "step_b", launch),
            s(device, 60.25, 29.75, "", ""),
            s(late, 60.25, 1.75, "step_c", launch),
            s(sync, 62.0, 18.0, "wait", "cudaStreamSynchronize"),
            s(late, 80.0, 5.0, "step_c", launch),
            s(latency, 85.0, 5.0, "step_c", launch),
            s(device, 100.0, 10.0, "", ""),
            s(latency, 100.0, 10.0, "step_d", launch),
        ]
    );
}

/// Two streams of one device: the device is idle only when neither is busy.
#[test]
fn two_streams__device_idle_only_when_no_stream_is_busy() {
    let kernel = |name: &str, ts: f64, dur: f64, stream: u32| {
        json!({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": format!("stream {stream}"),
               "ts": ts, "dur": dur, "args": {"correlation": 0, "device": 0, "stream": stream}})
    };
    let doc = json!({"traceEvents": [
        kernel("a1", 0.0, 10.0, 7),
        kernel("a2", 30.0, 10.0, 7),
        // Covers stream 7's gap from 10 to 25: the device waits 25 to 30 only.
        kernel("b1", 5.0, 20.0, 8),
        kernel("b2", 50.0, 5.0, 8),
    ]});
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("two.pt.trace.json");
    std::fs::write(&path, doc.to_string()).unwrap();
    let idle = idle_of(&path);
    let idle_of = |stream: u32| {
        idle.streams()
            .iter()
            .find(|s| s.0.stream == Some(stream))
            .unwrap()
            .1
            .idle_ns
    };
    assert_eq!((idle_of(7), idle_of(8)), (20_000, 25_000));
    assert_eq!(idle.devices().len(), 1);
    assert_eq!(
        idle.devices()[0].1,
        DeviceIdle {
            span_ns: 55_000,
            idle_ns: 15_000,
            gaps: 2
        }
    );
    let gaps: Vec<(u64, u64)> = idle.device_gaps().iter().map(|g| (g.1, g.2)).collect();
    let t0 = gaps[0].0 - 25_000;
    let rel: Vec<(u64, u64)> = gaps.iter().map(|g| (g.0 - t0, g.1 - t0)).collect();
    assert_eq!(rel, vec![(25_000, 30_000), (40_000, 50_000)]);
}

/// A process that marks profiler steps has its device idle time counted within
/// them, as its streams' is: with one stream, the device is idle exactly when
/// the stream is, within the steps and over the whole trace (the report's
/// device table said "39.4 %" of the steps beside the whole trace's µs).
#[test]
fn real_v100_with_profiler_steps__device_idle_within_the_steps_as_the_streams() {
    let idle = idle_of(&real("v100_resnet50_kineto2021.pt.trace.json.gz"));
    assert!(!idle.step_windows().is_empty());
    let [(_, stream)] = idle.streams() else {
        panic!("{:?}", idle.streams())
    };
    let [(_, stream_whole)] = idle.streams_whole() else {
        panic!("{:?}", idle.streams_whole())
    };
    let [(_, device)] = idle.devices() else {
        panic!("{:?}", idle.devices())
    };
    let [(_, device_whole)] = idle.devices_whole() else {
        panic!("{:?}", idle.devices_whole())
    };
    assert!(
        stream.idle_ns < stream_whole.idle_ns,
        "{stream:?} {stream_whole:?}"
    );
    assert_eq!(
        (device.idle_ns, device.span_ns, device.gaps),
        (stream.idle_ns, stream.span_ns, stream.gaps)
    );
    assert_eq!(
        (
            device_whole.idle_ns,
            device_whole.span_ns,
            device_whole.gaps
        ),
        (
            stream_whole.idle_ns,
            stream_whole.span_ns,
            stream_whole.gaps
        )
    );
}
