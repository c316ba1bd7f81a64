//! Idle time by CPU stack: gaps of each cause, exact to the ns.

use gpuperf_merge::join;
use gpuperf_merge::model::StringTable;
use gpuperf_merge::read::input::GpuInputs;
use gpuperf_merge::write::idle::{IdleFolder, StreamIdle};
use serde_json::{Value, json};

/// One thread launching four kernels on stream 7, with a stream sync between
/// the second and the third. Times in µs, as Kineto writes them.
fn trace() -> Value {
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
    assert_eq!(streams[0].0.2, 7);
    assert_eq!(
        streams[0].1,
        StreamIdle {
            span_ns: 100_000,
            idle_ns: 65_000,
            // CPU late 20 + 6.75, host sync 18, launch latency 5.25 + 5 + 10.
            by_cause_ns: [26_750, 18_000, 20_250],
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
