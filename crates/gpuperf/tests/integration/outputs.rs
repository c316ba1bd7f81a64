//! What `gpuperf merge` writes and says when there is little or nothing to draw.
// Test names are `<input>__<what is checked>`.
#![allow(non_snake_case)]

use crate::common;

use std::fs;
use std::path::Path;
use std::process::{Output, Stdio};

use gpuperf_test_support::traces::Trace;

/// A gpuperf GPU trace of one process: `calls` API calls by name, each followed
/// by a kernel of `kernel_ns` when that is given.
fn trace(dir: &Path, calls: &[&str], kernel_ns: Option<u64>) -> std::path::PathBuf {
    let mut t = Trace::new();
    t.strings.intern("tiny");
    t.process(42, "/bin/app", 1_000);
    for (i, name) in calls.iter().enumerate() {
        let corr = i as u32 + 1;
        let at = u64::from(corr) * 100_000;
        t.api(42, 42, corr, (at, at + 5_000), name, 0);
        if let Some(ns) = kernel_ns {
            t.kernel(42, corr, (at + 10_000, at + 10_000 + ns), 7, "tiny");
        }
    }
    let path = dir.join("gpu-42.gputrace");
    fs::write(&path, t.gputrace()).unwrap();
    path
}

fn merge(dir: &Path, gpu: &Path) -> Output {
    common::gpuperf_cmd()
        .arg("merge")
        .arg(gpu)
        .arg("-o")
        .arg(dir.join("f.svg"))
        .arg("-m")
        .arg(dir.join("m.folded"))
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

#[test]
fn only_malloc_and_free__says_no_gpu_work_valid_svg_exit_0() {
    let dir = tempfile::tempdir().unwrap();
    let gpu = trace(dir.path(), &["cudaMalloc", "cudaFree"], None);
    let o = merge(dir.path(), &gpu);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    assert!(!stderr.contains("ERROR"), "{stderr}");
    assert!(
        stderr.contains("f.svg`: it only says that there was no GPU work to draw"),
        "{stderr}"
    );
    let svg = fs::read_to_string(dir.path().join("f.svg")).unwrap();
    assert!(svg.starts_with("<?xml") && svg.trim_end().ends_with("</svg>"));
    assert!(svg.contains("No GPU work to draw"), "{svg}");
    assert!(!svg.contains("ERROR"), "{svg}");
}

#[test]
fn kernels_shorter_than_a_microsecond_in_all__weights_in_ns() {
    let dir = tempfile::tempdir().unwrap();
    // Three launches of a 100 ns kernel: 0.3 µs in all, which µs rounds to 0.
    let gpu = trace(dir.path(), &["cudaLaunchKernel"; 3], Some(100));
    let o = merge(dir.path(), &gpu);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    assert!(!stderr.contains("ERROR"), "{stderr}");
    assert!(stderr.contains("weights in ns"), "{stderr}");
    let folded = fs::read_to_string(dir.path().join("m.folded")).unwrap();
    assert_eq!(
        folded,
        "[no CPU stack];cudaLaunchKernel;[GPU_Kernel]tiny 300\n"
    );
    let svg = fs::read_to_string(dir.path().join("f.svg")).unwrap();
    assert!(svg.contains("[GPU_Kernel]tiny (300 ns"), "{svg}");
}

/// Process `pid` (executable `/opt/bin/rank`, main thread named otherwise in
/// no trace) with one launch and its kernel.
fn add_process(t: &mut Trace, pid: u32) {
    let at = u64::from(pid) * 1_000_000;
    t.process(pid, "/opt/bin/rank", at)
        .api(
            pid,
            pid + 1,
            1,
            (at + 100, at + 5_000),
            "cudaLaunchKernel",
            0,
        )
        .kernel(pid, 1, (at + 10_000, at + 20_000), 7, "k");
}

fn write_trace(path: &Path, pids: &[u32]) {
    let mut t = Trace::new();
    for &pid in pids {
        add_process(&mut t, pid);
    }
    fs::write(path, t.gputrace()).unwrap();
}

fn folded_of(args: &[&std::ffi::OsStr]) -> String {
    let o = common::gpuperf_cmd()
        .arg("merge")
        .args(args)
        .args(["-m", "-"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap()
}

#[test]
fn ranks_as_directory_files_or_one_file__same_per_process_roots() {
    let dir = tempfile::tempdir().unwrap();
    let ranks = dir.path().join("ranks");
    fs::create_dir(&ranks).unwrap();
    let (a, b) = (ranks.join("gpu-42.gputrace"), ranks.join("gpu-43.gputrace"));
    write_trace(&a, &[42]);
    write_trace(&b, &[43]);
    let both = dir.path().join("both.gputrace");
    write_trace(&both, &[42, 43]);

    let as_dir = folded_of(&[ranks.as_os_str()]);
    let as_files = folded_of(&["-g".as_ref(), a.as_os_str(), "-g".as_ref(), b.as_os_str()]);
    let as_one = folded_of(&[both.as_os_str()]);
    let want = "rank [pid 42];[no CPU stack];cudaLaunchKernel;[GPU_Kernel]k 10\n\
                rank [pid 43];[no CPU stack];cudaLaunchKernel;[GPU_Kernel]k 10\n";
    assert_eq!(as_dir, want);
    assert_eq!(as_files, want);
    assert_eq!(as_one, want);
    // One process: no root frame, however it is given.
    assert_eq!(
        folded_of(&["-g".as_ref(), a.as_os_str()]),
        "[no CPU stack];cudaLaunchKernel;[GPU_Kernel]k 10\n"
    );
}

#[test]
fn idle__gaps_charged_by_cause_and_summing_to_the_streams_idle_time() {
    let dir = tempfile::tempdir().unwrap();
    // Calls every 100 µs, each kernel 10 µs after its call and 100 ns long: the
    // stream waits 89.9 µs for each next call, then 10 µs for its work.
    let gpu = trace(dir.path(), &["cudaLaunchKernel"; 3], Some(100));
    let o = common::gpuperf_cmd()
        .arg("merge")
        .arg(&gpu)
        .arg("--idle")
        .arg(dir.path().join("idle.folded"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    assert!(
        stderr.contains("idle.folded`: idle-time folded stacks (µs)"),
        "{stderr}"
    );
    assert_eq!(
        fs::read_to_string(dir.path().join("idle.folded")).unwrap(),
        "[no CPU stack];cudaLaunchKernel;[GPU_Idle: CPU late] 180\n\
         [no CPU stack];cudaLaunchKernel;[GPU_Idle: launch latency] 20\n"
    );
}

#[test]
fn report__idle_share_and_causes_per_stream_and_the_stacks_that_made_it_wait() {
    let dir = tempfile::tempdir().unwrap();
    let gpu = trace(dir.path(), &["cudaLaunchKernel"; 3], Some(100));
    let o = common::gpuperf_cmd()
        .arg("report")
        .arg(&gpu)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // Active from the first kernel's start to the last one's end: 200.1 µs, of
    // which 199.8 µs idle (2 × 89.9 late, 2 × 10 latency); no profiler steps,
    // so the whole trace's figure is the same; no wait on another stream, no
    // collective, nothing else.
    let row = stdout
        .lines()
        .find(|l| l.trim_start().starts_with("42 "))
        .unwrap_or_else(|| panic!("{stdout}"));
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        cells,
        [
            "42", "0", "7", "99.9%", "199.80", "199.80", "179.80", "0.00", "20.00", "0.00", "0.00",
            "0.00"
        ],
        "{stdout}"
    );
    assert!(
        // Leaf first, as every stack of the report reads.
        stdout
            .contains("           180  [GPU_Idle: CPU late] ← cudaLaunchKernel ← [no CPU stack]\n"),
        "{stdout}"
    );
}

#[test]
fn idle_svg_and_timeline__idle_flamegraph_and_idle_slices_on_the_stream_and_device_tracks() {
    let dir = tempfile::tempdir().unwrap();
    let gpu = trace(dir.path(), &["cudaLaunchKernel"; 3], Some(100));
    let (svg, timeline) = (dir.path().join("idle.svg"), dir.path().join("t.json"));
    let o = common::gpuperf_cmd()
        .arg("merge")
        .arg(&gpu)
        .arg("--idle-svg")
        .arg(&svg)
        .arg("-c")
        .arg(&timeline)
        .args(["--title", "three launches, recorded by hand"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    assert!(
        stderr.contains("idle.svg`: open it in a web browser"),
        "{stderr}"
    );
    let svg = fs::read_to_string(&svg).unwrap();
    assert!(svg.contains("GPU idle time by the CPU stack that made it wait"));
    // The run's title is the idle flamegraph's subtitle.
    assert!(svg.contains("three launches, recorded by hand"), "{svg}");
    // inferno's tooltip: the frame, its µs and share.
    assert!(
        svg.contains("[GPU_Idle: CPU late] (180 µs, 90.00%)"),
        "{svg}"
    );
    assert!(svg.contains("[GPU_Idle: launch latency] (20 µs, 10.00%)"));
    let doc: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(&timeline).unwrap()).unwrap();
    let idle: Vec<(String, f64)> = doc["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["cat"] == "idle")
        .map(|e| {
            (
                e["name"].as_str().unwrap().to_owned(),
                e["dur"].as_f64().unwrap(),
            )
        })
        .collect();
    let total = |name: &str| -> f64 {
        idle.iter()
            .filter(|s| s.0 == name)
            .map(|s| s.1)
            .sum::<f64>()
    };
    assert_eq!(total("GPU idle: CPU late"), 179.8, "{idle:?}");
    assert_eq!(total("GPU idle: launch latency"), 20.0, "{idle:?}");
    assert_eq!(total("GPU idle (no stream busy)"), 199.8, "{idle:?}");
}

#[test]
fn report__device_idle_share_and_gaps() {
    let dir = tempfile::tempdir().unwrap();
    let gpu = trace(dir.path(), &["cudaLaunchKernel"; 3], Some(100));
    let o = common::gpuperf_cmd()
        .arg("report")
        .arg(&gpu)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let (_, devices) = stdout
        .split_once("GPU idle time by device")
        .unwrap_or_else(|| panic!("{stdout}"));
    let row = devices
        .lines()
        .find(|l| l.trim_start().starts_with("42 "))
        .unwrap_or_else(|| panic!("{stdout}"));
    let cells: Vec<&str> = row.split_whitespace().collect();
    // No profiler steps: the idle time counted is the whole trace's.
    assert_eq!(
        cells,
        ["42", "0", "99.9%", "199.80", "199.80", "2"],
        "{stdout}"
    );
}
