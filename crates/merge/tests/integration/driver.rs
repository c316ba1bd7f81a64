//! A recording's GPU driver events (`record --driver`) joined with the CUDA
//! API calls, on a small hand-made event file over the scenario's trace:
//! ioctls nested under their call (or outside every call), jobs per ring with
//! overlapping ones on a second lane, interrupts and an Xid; both timelines
//! agree, and the report's driver section.

use std::path::PathBuf;

use gpuperf_merge::join;
use gpuperf_merge::model::StringTable;
use gpuperf_merge::read::cpu::CpuTrace;
use gpuperf_merge::read::driver::DriverTrace;
use gpuperf_merge::read::input::GpuInputs;
use gpuperf_merge::write::driver::Reporter;
use serde_json::Value;

use crate::{data, golden, perfetto, scenario};

fn inputs(dir: &std::path::Path) -> (PathBuf, PathBuf) {
    let sc = scenario::build();
    let gpu = dir.join("gpu.trace");
    std::fs::write(&gpu, sc.gpu_bytes()).unwrap();
    let cpu = dir.join("cpu.txt");
    std::fs::write(&cpu, sc.cpu_gpuperf()).unwrap();
    (gpu, cpu)
}

fn small() -> DriverTrace {
    let t = DriverTrace::open(&data("driver/small.tsv")).unwrap();
    assert!(t.diagnostics.is_empty(), "{:?}", t.diagnostics);
    t
}

#[test]
fn driver_small__timelines_agree_and_goldens() {
    let dir = tempfile::tempdir().unwrap();
    let (gpu, cpu) = inputs(dir.path());
    let (json, _) = perfetto::check_with(&[gpu], Some(&cpu), Some(&small()));
    let doc: Value = serde_json::from_str(&json).unwrap();
    let events = doc["traceEvents"].as_array().unwrap();
    let driver: Vec<&Value> = events.iter().filter(|e| e["cat"] == "driver").collect();
    // Every ioctl names the call whose slice holds it, on its thread.
    let apis: Vec<(&str, &str)> = driver
        .iter()
        .filter(|e| e["name"].as_str().unwrap().starts_with("ioctl "))
        .map(|e| {
            (
                e["name"].as_str().unwrap(),
                e["args"]["api"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        apis,
        [
            ("ioctl NV_ESC_RM_ALLOC", "cudaMalloc"),
            ("ioctl NV_ESC_RM_MAP_MEMORY", "cudaMalloc"),
            ("ioctl 'F' 0xf0", "cudaMemcpy"),
            ("ioctl NV_ESC_RM_CONTROL", "none"),
        ]
    );
    let pretty: Vec<String> = driver
        .iter()
        .chain(
            events
                .iter()
                .filter(|e| e["pid"] == 1_073_741_823 && e["ph"] == "M")
                .collect::<Vec<_>>()
                .iter(),
        )
        .map(|e| serde_json::to_string(e).unwrap())
        .collect();
    golden::check(
        &data("driver/small.expected.chrome.txt"),
        &(pretty.join("\n") + "\n"),
    );
}

/// The report's driver section of `trace`, joined with the sample recording.
fn report(trace: DriverTrace) -> String {
    let dir = tempfile::tempdir().unwrap();
    let (gpu, cpu) = inputs(dir.path());
    let mut strings = StringTable::new();
    let inputs = GpuInputs::open(&[gpu], &mut strings).unwrap();
    let mut cpu = CpuTrace::open(&cpu).unwrap();
    let mut rep = Reporter::new(trace);
    join::merge(
        Some(&mut cpu),
        &inputs,
        &mut strings,
        &join::Options::default(),
        &mut [&mut rep],
    )
    .unwrap();
    rep.text(10)
}

#[test]
fn driver_small__report_section_golden() {
    let text = report(small());
    golden::check(&data("driver/small.expected.report.txt"), &text);
    // Job queue latencies on sim-ring0: 2, 10 and 1 µs; run: 7, 8 and 25 µs.
    assert!(text.contains("sim-ring0"), "{text}");
}

fn vblank() -> DriverTrace {
    let t = DriverTrace::open(&data("driver/vblank.tsv")).unwrap();
    assert!(t.diagnostics.is_empty(), "{:?}", t.diagnostics);
    t
}

/// Vblanks on two CRTCs; vblank events of two threads of one process: one
/// delivered at the vblank asked for, two asked for at once (overlapping,
/// the later-asked delivered first), one never delivered, one delivered
/// without being queued (a page flip's). Perfetto's trace processor reads
/// both formats with nothing lost.
#[test]
fn driver_vblank__tracks_per_crtc_events_under_their_process_goldens() {
    let dir = tempfile::tempdir().unwrap();
    let (gpu, cpu) = inputs(dir.path());
    let (json, pb) = perfetto::check_with(&[gpu], Some(&cpu), Some(&vblank()));
    // Perfetto's own reader: nothing lost, 7 vblanks on the CRTCs' tracks,
    // the 5 vblank events on the process's tracks (3 queued and delivered,
    // one never delivered, one delivered unqueued).
    for (file, _, per_track) in perfetto_reads(dir.path(), "v", &json, &pb) {
        // Slices on the tracks whose names start so.
        let on = |prefix: &str| -> i64 {
            per_track
                .iter()
                .filter(|(k, _)| k.starts_with(prefix))
                .map(|(_, n)| n)
                .sum()
        };
        assert_eq!(on("vblank crtc "), 7, "{file}: {per_track:?}");
        assert_eq!(on("vblank events crtc "), 5, "{file}: {per_track:?}");
    }
    let doc: Value = serde_json::from_str(&json).unwrap();
    let events = doc["traceEvents"].as_array().unwrap();
    let driver: Vec<&Value> = events.iter().filter(|e| e["cat"] == "driver").collect();
    let slices = async_slices(&driver);
    let vblanks = |pid: u64| {
        slices
            .iter()
            .filter(|e| e["name"] == "vblank" && e["pid"] == pid)
            .count()
    };
    assert_eq!(vblanks(1_073_741_823), 7);
    // Each event queued and delivered is a slice from one to the other, in
    // the asking process.
    let slices: Vec<(f64, f64, &str)> = slices
        .iter()
        .filter(|e| e["name"] == "vblank event")
        .map(|e| {
            assert_eq!(e["pid"], 100);
            (
                e["ts"].as_f64().unwrap(),
                e["dur"].as_f64().unwrap(),
                e["args"]["delivered at vblank"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        slices,
        [
            (1005.0, 11.1, "101"),
            (1017.0, 31.1, "103"),
            (1018.0, 14.1, "102")
        ]
    );
    let pretty: Vec<String> = driver
        .iter()
        .copied()
        .chain(
            events
                .iter()
                .filter(|e| e["ph"] == "M" && e["pid"] == 1_073_741_823),
        )
        .map(|e| serde_json::to_string(e).unwrap())
        .collect();
    golden::check(
        &data("driver/vblank.expected.chrome.txt"),
        &(pretty.join("\n") + "\n"),
    );
}

#[test]
fn driver_vblank__report_section_golden() {
    let text = report(vblank());
    golden::check(&data("driver/vblank.expected.report.txt"), &text);
    // crtc 0: latencies 11.1, 14.1 and 31.1 µs (nearest rank).
    assert!(text.contains("14.10 µs    31.10 µs  crtc 0"), "{text}");
}

/// The driver's slices and instants of a JSON timeline as the reader sees
/// them: an async track's `b`/`e` pair (by process and id) as one slice
/// with a `dur`, its events' own name as `name`, and its track as `track`.
fn async_slices(events: &[&Value]) -> Vec<Value> {
    let mut open: std::collections::HashMap<(i64, String), Vec<Value>> = Default::default();
    let mut out = Vec::new();
    for e in events {
        let key = || (e["pid"].as_i64().unwrap(), e["id2"]["local"].to_string());
        let named = || {
            let mut v = (*e).clone();
            v["track"] = e["name"].clone();
            v["name"] = e["args"]["event"].clone();
            v
        };
        match e["ph"].as_str().unwrap() {
            "b" => open.entry(key()).or_default().push(named()),
            "n" => out.push(named()),
            "e" => {
                let mut b = open.get_mut(&key()).unwrap().pop().unwrap();
                let dur = e["ts"].as_f64().unwrap() - b["ts"].as_f64().unwrap();
                b["dur"] = serde_json::json!((dur * 1000.0).round() / 1000.0);
                out.push(b);
            }
            _ => out.push((*e).clone()),
        }
    }
    assert!(open.values().all(Vec::is_empty), "async slices left open");
    out.sort_by(|a, b| {
        a["ts"]
            .as_f64()
            .unwrap()
            .total_cmp(&b["ts"].as_f64().unwrap())
    });
    out
}

/// A driver event file past a handful of jobs: 120 jobs on one ring (queued
/// all at once, three running at a time), 12 fence contexts of 5 fences
/// each (all overlapping), 40 vblanks, and an Xid long before the program's
/// first CUDA call.
fn many() -> DriverTrace {
    let mut s = String::from(gpuperf_merge::read::driver::HEADER);
    s.push('\n');
    let mut line = |ts: u64, kind: &str, ring: &str, arg: u32, id: u64, msg: &str| {
        s += &format!("{ts}\t{kind}\t100\t102\ttrain\t{ring}\t{arg:#x}\t0\t0\t{id:#x}\t{msg}\n");
    };
    line(500_000, "xid", "0000:00:00.0", 79, 0, "fell off the bus");
    let t0 = 2_000_000;
    for j in 0..120u64 {
        let id = 0xffff_8880_0000_0000 + 64 * j;
        line(t0 + j, "job_queue", "sim-ring0", 0, id, "");
        let run = t0 + 1_000 + 100 * j;
        line(run, "job_run", "sim-ring0", 0, id, "");
        line(run + 250, "job_done", "sim-ring0", 0, id, "");
    }
    for c in 0..12u64 {
        for n in 1..=5u64 {
            let id = (100 + c) << 32 | n;
            line(t0 + 10 * c + n, "fence_init", "", 0, id, "");
            line(t0 + 5_000 + 10 * c + n, "fence_signaled", "", 0, id, "");
        }
    }
    for v in 0..40u32 {
        line(t0 + 300 * u64::from(v), "vblank", "crtc 0", v, 0, "");
    }
    let t = DriverTrace::parse(s.as_bytes(), "many.tsv").unwrap();
    assert!(t.diagnostics.is_empty(), "{:?}", t.diagnostics);
    t
}

/// What Perfetto's trace processor reads from a driver timeline: every
/// error or data-loss stat, and per track name the slices on all tracks of
/// that name (the UI stacks async tracks of one name as one).
fn perfetto_read(
    tp: &gpuperf_test_support::perfetto::TraceProcessor,
) -> (Vec<String>, std::collections::BTreeMap<String, i64>) {
    let stats = tp
        .query(
            "select name, value from stats \
             where (severity = 'error' or severity = 'data_loss') and value > 0",
        )
        .unwrap();
    let stats = stats
        .rows
        .iter()
        .map(|r| format!("{} = {}", r[0], r[1]))
        .collect();
    let per_track = tp
        .query(
            "select coalesce(th.name, t.name), count(*) from slice s \
             join track t on t.id = s.track_id \
             left join thread_track tt on tt.id = s.track_id \
             left join thread th using (utid) \
             where s.category = 'driver' group by 1",
        )
        .unwrap();
    let per_track = per_track
        .rows
        .iter()
        .map(|r| {
            (
                r[0].as_str().unwrap_or("").to_owned(),
                r[1].as_i64().unwrap(),
            )
        })
        .collect();
    (stats, per_track)
}

/// Both timelines, `STEM.json` and `STEM.pftrace` written in `dir`, as
/// Perfetto's trace processor reads them, each checked to have no error or
/// data-loss stat: (file name, the reader, slices per track name as
/// [`perfetto_read`] counts them). Empty where there is no trace processor
/// (the tests skip what they would read).
fn perfetto_reads(
    dir: &std::path::Path,
    stem: &str,
    json: &str,
    pb: &[u8],
) -> Vec<(
    String,
    gpuperf_test_support::perfetto::TraceProcessor,
    std::collections::BTreeMap<String, i64>,
)> {
    let mut out = Vec::new();
    for (ext, bytes) in [("json", json.as_bytes()), ("pftrace", pb)] {
        let file = format!("{stem}.{ext}");
        let path = dir.join(&file);
        std::fs::write(&path, bytes).unwrap();
        let Some(tp) = gpuperf_test_support::perfetto::TraceProcessor::load(&path).unwrap() else {
            return Vec::new();
        };
        let (stats, per_track) = perfetto_read(&tp);
        assert_eq!(stats, Vec::<String>::new(), "{file}");
        out.push((file, tp, per_track));
    }
    out
}

/// Past a handful of jobs no slice lands on another track's name and
/// Perfetto drops nothing: the ring's run track holds its 120 jobs, each
/// linked to its submit mark by a flow, each
/// fence context its 5 fences, the CRTC its 40 vblanks; the Xid before the
/// first CUDA call stays on the timeline (the JSON's time base is the
/// earliest event of any kind).
#[test]
fn driver_many__perfetto_reads_every_slice_on_its_named_track() {
    let dir = tempfile::tempdir().unwrap();
    let (gpu, cpu) = inputs(dir.path());
    let (json, pb) = perfetto::check_with(&[gpu], Some(&cpu), Some(&many()));
    let doc: Value = serde_json::from_str(&json).unwrap();
    let negative = doc["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ts"].as_f64().is_some_and(|t| t < 0.0))
        .count();
    assert_eq!(negative, 0, "JSON events before the time base");
    assert_eq!(doc["otherData"]["time_base_ns"], 500_000);
    for (file, tp, per_track) in perfetto_reads(dir.path(), "many", &json, &pb) {
        let n = |name: &str| per_track.get(name).copied().unwrap_or(0);
        let mut expected = vec![
            ("sim-ring0 run".to_owned(), 120),
            // Each job queued, no dependency waits.
            ("sim-ring0 queue".to_owned(), 120),
            ("vblank crtc 0".to_owned(), 40),
            ("Xid errors 0000:00:00.0".to_owned(), 1),
            // Each job's submit mark, on the thread that queued it.
            ("train (102)".to_owned(), 120),
        ];
        for c in 100..112 {
            expected.push((format!("fence context {c}"), 5));
        }
        let got: Vec<(String, i64)> = expected.iter().map(|(k, _)| (k.clone(), n(k))).collect();
        assert_eq!(got, expected, "{file}: slices per track name {per_track:?}");
        let total: i64 = per_track.values().sum();
        assert_eq!(
            total,
            120 + 120 + 40 + 1 + 60 + 120,
            "{file}: {per_track:?}"
        );
        // Each submit mark's flow ends at its own job's queue slice.
        let flows = tp
            .query(
                "select count(*) from flow f join slice so on so.id = f.slice_out \
                 join slice si on si.id = f.slice_in \
                 where so.name = 'submit job' and si.ts = so.ts",
            )
            .unwrap();
        assert_eq!(flows.rows[0][0].as_i64(), Some(120), "{file}");
    }
}

fn attribution() -> DriverTrace {
    let t = DriverTrace::open(&data("driver/attribution.tsv")).unwrap();
    assert!(t.diagnostics.is_empty(), "{:?}", t.diagnostics);
    t
}

/// The names Perfetto's trace processor gives processes and threads of
/// `pids`, as `pid name` and `tid name` lines.
fn perfetto_names(tp: &gpuperf_test_support::perfetto::TraceProcessor, pids: &str) -> Vec<String> {
    let mut out = Vec::new();
    for sql in [
        format!("select pid, name from process where pid in ({pids}) order by pid"),
        format!(
            "select tid, thread.name from thread join process using (upid) \
             where process.pid in ({pids}) order by tid"
        ),
    ] {
        let t = tp.query(&sql).unwrap();
        out.extend(
            t.rows
                .iter()
                .map(|r| format!("{} {}", r[0], r[1].as_str().unwrap_or("-"))),
        );
    }
    out
}

/// A process that made no CUDA call (the compositor, pid 300) is named by
/// the command names its driver events carry, in both timelines as
/// Perfetto reads them, where it was `pid 300` and `thread 301`; its ioctls
/// are named by type and number (`0xc00046f0` and `0x46f0` are one ioctl)
/// or by NVIDIA's escape name; its jobs name it as their submitter.
#[test]
fn driver_attribution__processes_without_cuda_calls_named_by_command_and_ioctls_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let (gpu, cpu) = inputs(dir.path());
    let (json, pb) = perfetto::check_with(&[gpu], Some(&cpu), Some(&attribution()));
    let doc: Value = serde_json::from_str(&json).unwrap();
    let events = doc["traceEvents"].as_array().unwrap();
    let meta = |what: &str, pid: u64| -> Vec<String> {
        events
            .iter()
            .filter(|e| e["ph"] == "M" && e["name"] == what && e["pid"] == pid)
            .map(|e| e["args"]["name"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(meta("process_name", 300), ["compositor (pid 300)"]);
    let mut threads = meta("thread_name", 300);
    threads.sort();
    assert_eq!(threads, ["comp-io (301)", "compositor (300)"]);
    let ioctls: Vec<(&str, &str)> = events
        .iter()
        .filter(|e| e["cat"] == "driver" && e["name"].as_str().unwrap().starts_with("ioctl "))
        .map(|e| {
            (
                e["name"].as_str().unwrap(),
                e["args"]["cmd"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        ioctls,
        [
            ("ioctl 'F' 0xf0", "0xc00046f0"),
            ("ioctl 'F' 0xf0", "0x46f0"),
            ("ioctl NV_ESC_RM_CONTROL", "0xc020462a"),
        ]
    );
    let driver: Vec<&Value> = events.iter().filter(|e| e["cat"] == "driver").collect();
    let slices = async_slices(&driver);
    let submitters: Vec<&str> = slices
        .iter()
        .filter(|e| e["name"] == "job")
        .map(|e| e["args"]["submitter"].as_str().unwrap())
        .collect();
    assert_eq!(submitters, ["comp-io (pid 300, tid 301)"]);
    for (file, tp, _) in perfetto_reads(dir.path(), "a", &json, &pb) {
        assert_eq!(
            perfetto_names(&tp, "300"),
            [
                "300 compositor (pid 300)",
                "300 compositor (300)",
                "301 comp-io (301)"
            ],
            "{file}"
        );
    }
}

/// Each Xid names its process: the task it was raised in when that is a
/// recorded process, the process its message names (marked as another
/// process than those recorded), or none when raised in an interrupt on an
/// idle CPU; the report says the same, and has the compositor's jobs under
/// its name.
#[test]
fn driver_attribution__xids_name_their_process_and_mark_other_processes() {
    let dir = tempfile::tempdir().unwrap();
    let (gpu, cpu) = inputs(dir.path());
    let (json, _) = perfetto::check_with(&[gpu], Some(&cpu), Some(&attribution()));
    let doc: Value = serde_json::from_str(&json).unwrap();
    let driver: Vec<&Value> = doc["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["cat"] == "driver")
        .collect();
    let slices = async_slices(&driver);
    let xids: Vec<(&str, &str)> = slices
        .iter()
        .filter(|e| e["name"].as_str().is_some_and(|n| n.starts_with("Xid ")))
        .map(|e| {
            (
                e["args"]["xid"].as_str().unwrap(),
                e["args"]["process"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        xids,
        [
            ("79", "comp-io (pid 300)"),
            ("31", "unknown (raised in interrupt context)"),
            (
                "43",
                "other_app (pid 555), another process than those recorded"
            ),
        ]
    );
    let text = report(attribution());
    assert!(
        text.contains("Xid 43 on 0000:00:00.0, process other_app (pid 555), another process than those recorded"),
        "{text}"
    );
    assert!(
        text.contains("Xid 79 on 0000:00:00.0, process comp-io (pid 300):"),
        "{text}"
    );
    let by_process = text
        .split("DRM scheduler jobs by submitting process\n")
        .nth(1)
        .unwrap_or_else(|| panic!("{text}"));
    let row = by_process.lines().nth(1).unwrap();
    assert!(row.ends_with("  compositor (pid 300)"), "{text}");
    assert!(row.trim_start().starts_with("1 "), "{text}");
}

/// A DRM job's link to the thread that submitted it: a `submit job` slice
/// of no duration on the submitting thread, at the job's queueing, and a flow
/// from it to the job's queue slice, read by Perfetto's trace processor from
/// both timeline formats (the JSON's async slices bind it as flow v2).
#[test]
fn driver_jobs__a_flow_runs_from_the_submitting_thread_to_each_jobs_queue_slice() {
    let dir = tempfile::tempdir().unwrap();
    let (gpu, cpu) = inputs(dir.path());
    let (json, pb) = perfetto::check_with(&[gpu], Some(&cpu), Some(&attribution()));
    for (file, tp, _) in perfetto_reads(dir.path(), "a", &json, &pb) {
        let flows = tp
            .query(
                "select th.tid, so.name, so.dur, si.ts - so.ts, ti.name from flow f \
                 join slice so on so.id = f.slice_out \
                 join slice si on si.id = f.slice_in \
                 join thread_track tt on tt.id = so.track_id \
                 join thread th using (utid) \
                 join track ti on ti.id = si.track_id \
                 where so.name = 'submit job'",
            )
            .unwrap();
        let got: Vec<String> = flows
            .rows
            .iter()
            .map(|r| {
                format!(
                    "{} {} {} {} {}",
                    r[0],
                    r[1].as_str().unwrap(),
                    r[2],
                    r[3],
                    r[4].as_str().unwrap()
                )
            })
            .collect();
        assert_eq!(got, ["301 submit job 0 0 sim-ring0 queue"], "{file}");
    }
}
