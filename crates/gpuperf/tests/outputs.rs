//! What `gpuperf merge` writes and says when there is little or nothing to draw.
// Test names are `<input>__<what is checked>`.
#![allow(non_snake_case)]

use std::fs;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use gpuperf_merge::model::{
    Activity, ActivityKind, ApiCall, ApiDomain, Process, Record, StringTable,
};
use gpuperf_merge::read::gputrace;

/// A gpuperf GPU trace of one process: `calls` API calls by name, each followed
/// by a kernel of `kernel_ns` when that is given.
fn trace(dir: &Path, calls: &[&str], kernel_ns: Option<u64>) -> std::path::PathBuf {
    let mut strings = StringTable::new();
    let kernel = strings.intern("tiny");
    let mut recs = vec![Record::Process(Process {
        pid: 42,
        ppid: 1,
        exe: "/bin/app".into(),
        start_ns: 1_000,
        start_realtime_ns: 0,
    })];
    for (i, name) in calls.iter().enumerate() {
        let corr = i as u32 + 1;
        let t = u64::from(corr) * 100_000;
        recs.push(Record::Api(ApiCall {
            pid: 42,
            tid: 42,
            start_ns: t,
            end_ns: t + 5_000,
            correlation_id: corr,
            cbid: 0,
            domain: ApiDomain::Runtime,
            name: strings.intern(name),
        }));
        if let Some(ns) = kernel_ns {
            recs.push(Record::Activity(Activity {
                pid: 42,
                start_ns: t + 10_000,
                end_ns: t + 10_000 + ns,
                correlation_id: corr,
                device: 0,
                context: 1,
                stream: 7,
                graph_id: 0,
                graph_node_id: 0,
                kind: ActivityKind::Kernel {
                    name: kernel,
                    grid: [1, 1, 1],
                    block: [32, 1, 1],
                },
            }));
        }
    }
    let mut w = gputrace::Writer::new(Vec::new()).unwrap();
    for r in &recs {
        w.write(r, &strings).unwrap();
    }
    let path = dir.join("gpu-42.gputrace");
    fs::write(&path, w.into_inner()).unwrap();
    path
}

fn merge(dir: &Path, gpu: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gpuperf"))
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
