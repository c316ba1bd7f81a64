//! Launches made during a stream capture: accounted for by the graph, never
//! reported as launches without GPU work.

use serde_json::{Value, json};

use crate::imported::run;

/// A Kineto trace of one thread that captures two launches into a graph,
/// replays it twice, and makes one launch that fails (no kernel).
pub(crate) fn capture_trace() -> Value {
    let api = |name: &str, ts: u64, corr: u64| {
        json!({"ph": "X", "cat": "cuda_runtime", "name": name, "pid": 7, "tid": 7,
               "ts": ts, "dur": 2, "args": {"correlation": corr}})
    };
    let kernel = |name: &str, ts: u64, corr: u64, node: u64| {
        json!({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": "stream 7",
               "ts": ts, "dur": 5, "args": {"correlation": corr, "device": 0, "stream": 7,
               "graph id": 1, "graph node id": node}})
    };
    json!({"traceEvents": [
        api("cudaStreamBeginCapture", 10, 1),
        api("cudaLaunchKernel", 20, 2),
        api("cudaLaunchKernel", 30, 3),
        api("cudaStreamEndCapture", 40, 4),
        api("cudaGraphLaunch", 100, 5),
        kernel("k_a", 110, 5, 1),
        kernel("k_b", 120, 5, 2),
        api("cudaGraphLaunch", 200, 6),
        kernel("k_a", 210, 6, 1),
        kernel("k_b", 220, 6, 2),
        // After the capture ended: a launch that ran nothing.
        api("cudaLaunchKernel", 300, 7),
    ]})
}

#[test]
fn kineto_capture__captured_launches_counted_as_captured_not_pending() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("capture.pt.trace.json");
    std::fs::write(&path, capture_trace().to_string()).unwrap();
    let out = run(&[path]);
    let s = &out.summary;
    assert_eq!(
        (s.launches_captured, s.launches_without_gpu, s.graph_kernels),
        (2, 1, 4),
        "{s}"
    );
    let text = s.to_string();
    assert!(
        text.contains("  CPU launches captured into CUDA graphs: 2 "),
        "{text}"
    );
    assert!(
        text.contains("  unmatched CPU launches: 1 with no GPU activity"),
        "{text}"
    );
    // Only the failed launch is pending in the folded stacks.
    let pending: Vec<&str> = out
        .folded
        .lines()
        .filter(|l| l.contains("[GPU_Launch_Pending]"))
        .collect();
    assert_eq!(pending.len(), 1, "{}", out.folded);
    // The timeline draws each captured launch as captured.
    let doc: Value = serde_json::from_str(&out.chrome).unwrap();
    let markers = |name: &str| {
        doc["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["cat"] == "launch" && e["name"] == name)
            .count()
    };
    assert_eq!(markers("launch captured into a CUDA graph"), 2);
    assert_eq!(markers("launch without GPU activity"), 1);
}

#[test]
fn kineto_capture_left_open__launches_after_begin_are_captured() {
    let mut trace = capture_trace();
    let events = trace["traceEvents"].as_array_mut().unwrap();
    // No end call: the capture covers the rest of the thread's trace.
    events.retain(|e| e["name"] != "cudaStreamEndCapture");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("open.pt.trace.json");
    std::fs::write(&path, trace.to_string()).unwrap();
    let out = run(&[path]);
    assert_eq!(
        (
            out.summary.launches_captured,
            out.summary.launches_without_gpu
        ),
        (3, 0),
        "{}",
        out.summary
    );
}
