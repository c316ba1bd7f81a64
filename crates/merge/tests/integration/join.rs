//! The join and every writer, on gpuperf's own formats and on the reference's.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

use gpuperf_merge::join::{self, NoStack, Summary};
use gpuperf_merge::model::{ActivityKind, Record, StringTable};
use gpuperf_merge::read::cpu::CpuTrace;
use gpuperf_merge::read::input::GpuInputs;
use gpuperf_merge::write::chrome;
use gpuperf_merge::write::folded::Folder;
use gpuperf_merge::write::report::Reporter;
use gpuperf_test_support::traces::Trace;
use serde_json::Value;

use crate::scenario::{
    self, STACK_FAILED, STACK_GRAPH, STACK_MATMUL, STACK_ORPHAN, STACK_SOFTMAX, STACK_WORKER,
};
use crate::{data, golden};

struct Out {
    summary: Summary,
    folded: String,
    chrome: String,
    report: String,
}

/// Runs the join with every writer on files.
fn run(gpu: &[PathBuf], cpu: Option<&Path>) -> Out {
    let mut strings = StringTable::new();
    let inputs = GpuInputs::open(gpu, &mut strings).unwrap();
    let mut cpu = cpu.map(|p| CpuTrace::open(p).unwrap());
    let mut folder = Folder::new();
    let mut chrome = chrome::Writer::new(Vec::new()).unwrap();
    let mut report = Reporter::new();
    let summary = join::merge(
        cpu.as_mut(),
        &inputs,
        &mut strings,
        &join::Options::default(),
        &mut [&mut folder, &mut chrome, &mut report],
    )
    .unwrap();
    let mut f = Vec::new();
    folder.write(&mut f).unwrap();
    let mut r = Vec::new();
    report.write(&mut r, 20).unwrap();
    Out {
        summary,
        folded: String::from_utf8(f).unwrap(),
        chrome: String::from_utf8(chrome.into_inner()).unwrap(),
        report: String::from_utf8(r).unwrap(),
    }
}

fn write_tmp(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    fs::write(&p, bytes).unwrap();
    p
}

fn folded_map(folded: &str) -> HashMap<String, u64> {
    folded
        .lines()
        .map(|l| {
            let (s, w) = l.rsplit_once(' ').unwrap();
            (s.to_owned(), w.parse().unwrap())
        })
        .collect()
}

/// Pretty JSON, so golden diffs point at one event.
fn pretty(json: &str) -> String {
    let v: Value = serde_json::from_str(json).expect("valid JSON");
    serde_json::to_string_pretty(&v).unwrap() + "\n"
}

#[test]
fn own_format__exact_join__goldens() {
    let sc = scenario::build();
    let dir = tempfile::tempdir().unwrap();
    let gpu = write_tmp(dir.path(), "gpu.trace", &sc.gpu_bytes());
    let cpu = write_tmp(dir.path(), "cpu.txt", &sc.cpu_gpuperf());
    let out = run(&[gpu], Some(&cpu));
    golden::check(&data("join/own.expected.folded"), &out.folded);
    golden::check(
        &data("join/own.expected.summary.txt"),
        &out.summary.to_string(),
    );
    golden::check(&data("join/own.expected.chrome.json"), &pretty(&out.chrome));
    golden::check(&data("join/own.expected.report.txt"), &out.report);

    let s = &out.summary;
    assert_eq!((s.kernels, s.kernels_matched, s.graph_kernels), (8, 6, 3));
    assert_eq!(s.kernels_unmatched[&NoStack::NoCpuEvent], 1);
    assert_eq!(s.kernels_unmatched[&NoStack::NoApiRecord], 1);
    assert_eq!((s.launches_without_gpu, s.launches_without_api), (1, 1));
    assert_eq!((s.cpu_dropped, s.other_activities), (1, 3));
    assert_eq!(s.gpu_dropped.values().sum::<u64>(), 2);

    let f = folded_map(&out.folded);
    // Every kernel of the graph is charged to the graph launch's stack.
    assert_eq!(f[&format!("{STACK_GRAPH};[GPU_Kernel]gemm()")], 4);
    assert_eq!(f[&format!("{STACK_GRAPH};[GPU_Kernel]relu()")], 1);
    assert_eq!(
        f[&format!("{STACK_MATMUL};[GPU_Kernel]matmul(float*, float*, float*, int)")],
        2
    );
    assert_eq!(
        f[&format!("{STACK_SOFTMAX};[GPU_Kernel]softmax(float*, int)")],
        1
    );
    assert_eq!(
        f[&format!("{STACK_WORKER};[GPU_Kernel]reduceSum(float*, int)")],
        1
    );
    assert_eq!(f[&format!("{STACK_FAILED};[GPU_Launch_Pending]")], 0);
    assert_eq!(f[&format!("{STACK_ORPHAN};[GPU_Launch_Pending]")], 0);
    assert_eq!(
        f["[no CPU stack];cudaLaunchKernel;[GPU_Kernel]matmul(float*, float*, float*, int)"],
        1
    );
    assert_eq!(f["[no CPU stack];[GPU_Kernel]softmax(float*, int)"], 0);
    assert_eq!(f["[no CPU stack];cudaMemcpy;[GPU_Memcpy HtoD]"], 25);
    assert_eq!(f["[no CPU stack];cudaMemsetAsync;[GPU_Memset]"], 0);
    assert!(
        !out.folded.contains("Sync"),
        "sync is CPU wait time, not GPU time"
    );
}

#[test]
fn own_format__ordered_join_without_ids__same_folded_output() {
    let sc = scenario::build();
    let dir = tempfile::tempdir().unwrap();
    let gpu = write_tmp(dir.path(), "gpu.trace", &sc.gpu_bytes());
    let exact = run(
        std::slice::from_ref(&gpu),
        Some(&write_tmp(dir.path(), "a.txt", &sc.cpu_gpuperf())),
    );
    let ordered = run(
        &[gpu],
        Some(&write_tmp(dir.path(), "b.txt", &sc.cpu_reference())),
    );
    assert_eq!(ordered.folded, exact.folded);
    let p = &ordered.summary.pairings[0];
    // Same clock: any offset found is the probe-to-CUPTI latency, under a µs.
    assert!(
        !p.exact && p.per_thread && p.offset_ns.abs() < 1_000,
        "{p:?}"
    );
    assert_eq!((p.paired, p.unpaired_cpu), (5, 1));
}

/// 300 launches on one thread, each with its own stack and kernel, CPU side without
/// correlation ids (the reference's situation).
fn numbered(drop_cpu: Option<usize>, extra_cpu: Option<usize>) -> (Vec<u8>, Vec<u8>) {
    let mut t = Trace::new();
    t.process(7, "a", 0);
    let mut cpu = String::new();
    for i in 0..300u32 {
        // Irregular gaps, some shorter than the slack, as in launch-bound loops.
        let start = 1_000_000 + u64::from(i) * 9_000 + u64::from(i * 7919 % 13) * 500;
        t.api(7, 8, i + 1, (start, start + 2_500), "cudaLaunchKernel", 211)
            .kernel(
                7,
                i + 1,
                (start + 40_000, start + 41_000),
                7,
                &format!("kernel_{i}"),
            );
        if Some(i as usize) == extra_cpu {
            cpu.push_str(&format!(
                "{} app 7 8 0 main;spurious;cudaLaunchKernel\n",
                start - 4_000
            ));
        }
        if Some(i as usize) != drop_cpu {
            cpu.push_str(&format!(
                "{} app 7 8 0 main;step_{i};cudaLaunchKernel\n",
                start - 300
            ));
        }
    }
    (t.gputrace(), cpu.into_bytes())
}

fn check_numbered(out: &Out, unmatched: &[usize]) {
    let f = folded_map(&out.folded);
    for i in 0..300 {
        let line = format!("main;step_{i};cudaLaunchKernel;[GPU_Kernel]kernel_{i}");
        if unmatched.contains(&i) {
            assert!(!f.contains_key(&line), "launch {i} should be unmatched");
            assert_eq!(
                f[&format!("[no CPU stack];cudaLaunchKernel;[GPU_Kernel]kernel_{i}")],
                1
            );
        } else {
            assert_eq!(
                f.get(&line),
                Some(&1),
                "launch {i} is paired with the wrong stack"
            );
        }
    }
}

#[test]
fn ordered_join__one_lost_cpu_event__only_that_launch_unmatched() {
    let (gpu, cpu) = numbered(Some(150), None);
    let dir = tempfile::tempdir().unwrap();
    let out = run(
        &[write_tmp(dir.path(), "g", &gpu)],
        Some(&write_tmp(dir.path(), "c", &cpu)),
    );
    assert_eq!(out.summary.kernels_matched, 299, "{}", out.summary);
    assert_eq!(out.summary.kernels_unmatched[&NoStack::NoCpuEvent], 1);
    check_numbered(&out, &[150]);
}

#[test]
fn ordered_join__one_extra_cpu_event__no_launch_shifts() {
    let (gpu, cpu) = numbered(None, Some(77));
    let dir = tempfile::tempdir().unwrap();
    let out = run(
        &[write_tmp(dir.path(), "g", &gpu)],
        Some(&write_tmp(dir.path(), "c", &cpu)),
    );
    assert_eq!(out.summary.kernels_matched, 300, "{}", out.summary);
    assert_eq!(out.summary.launches_without_api, 1);
    check_numbered(&out, &[]);
}

#[test]
fn reference_recording__offset_estimated__exact_totals() {
    let log = data("cupti_log/reference-cupti-log.txt");
    let out = run(
        std::slice::from_ref(&log),
        Some(&data("join/reference-cpu.txt")),
    );
    let s = &out.summary;
    assert_eq!((s.kernels, s.kernels_matched), (2115, 2115), "{s}");
    let p = &s.pairings[0];
    assert!(p.offset_estimated && !p.per_thread, "{p:?}");
    golden::check(&data("join/reference.expected.folded"), &out.folded);
    golden::check(&data("join/reference.expected.summary.txt"), &s.to_string());

    // Per kernel name, the folded total equals the exact sum of durations within 1 µs.
    let mut strings = StringTable::new();
    let inputs = GpuInputs::open(&[log], &mut strings).unwrap();
    let mut exact: HashMap<String, u64> = HashMap::new();
    inputs
        .visit(&mut strings, &mut |r, names| {
            if let Record::Activity(a) = r
                && let ActivityKind::Kernel { name, .. } = a.kind
            {
                let n = names.get(name).to_owned();
                *exact.entry(n).or_default() += a.duration_ns();
            }
        })
        .unwrap();
    let mut folded: HashMap<String, u64> = HashMap::new();
    for (stack, w) in folded_map(&out.folded) {
        if let Some((_, k)) = stack.rsplit_once("[GPU_Kernel]") {
            *folded
                .entry(k.split('(').next().unwrap().to_owned())
                .or_default() += w;
        }
    }
    assert_eq!(exact.len(), 5);
    for (mangled, ns) in exact {
        let short = mangled
            .trim_start_matches("_Z")
            .trim_start_matches(char::is_numeric);
        let short = &short[..short.find('P').unwrap()];
        let us = folded[short] as f64;
        assert!(
            (us - ns as f64 / 1000.0).abs() <= 1.0,
            "{short}: folded {us} µs, exact {ns} ns"
        );
    }
}

#[test]
fn chrome_trace__structure_loads_in_viewers() {
    let sc = scenario::build();
    let dir = tempfile::tempdir().unwrap();
    let gpu = write_tmp(dir.path(), "gpu.trace", &sc.gpu_bytes());
    let cpu = write_tmp(dir.path(), "cpu.txt", &sc.cpu_gpuperf());
    let out = run(&[gpu], Some(&cpu));
    let v: Value = serde_json::from_str(&out.chrome).unwrap();
    let events = v["traceEvents"].as_array().unwrap();
    let mut starts = HashMap::new();
    let mut finishes = HashMap::new();
    let mut thread_names = Vec::new();
    for e in events {
        assert!(
            e["pid"].is_u64() && e["tid"].is_u64(),
            "numeric pid/tid: {e}"
        );
        let ph = e["ph"].as_str().unwrap();
        if ph != "M" {
            assert!(e["ts"].is_f64() || e["ts"].is_u64(), "{e}");
        }
        match ph {
            "s" => assert!(
                starts
                    .insert(e["id"].as_u64().unwrap(), e.clone())
                    .is_none()
            ),
            "f" => {
                assert_eq!(e["bp"], "e");
                assert!(
                    finishes
                        .insert(e["id"].as_u64().unwrap(), e.clone())
                        .is_none()
                );
            }
            "M" if e["name"] == "thread_name" => {
                thread_names.push(e["args"]["name"].as_str().unwrap().to_owned())
            }
            _ => {}
        }
    }
    // One arrow per activity with a known API call: 6 kernels + memcpy + memset + sync + 1 lost-CPU kernel.
    assert_eq!(starts.len(), 10);
    assert_eq!(
        starts.keys().collect::<std::collections::BTreeSet<_>>(),
        finishes.keys().collect()
    );
    for t in [
        "stream 7",
        "stream 8",
        "stream 9",
        "train (101)",
        "train (102)",
    ] {
        assert!(
            thread_names.iter().any(|n| n == t),
            "{t} in {thread_names:?}"
        );
    }
    // Sub-µs precision: the softmax kernel lasts 0.8 µs.
    let softmax = events
        .iter()
        .find(|e| e["name"] == "softmax(float*, int)" && e["args"]["correlation_id"] == 4)
        .unwrap();
    assert_eq!(softmax["dur"].as_f64(), Some(0.8));
    // The stack is on the launch's API slice, not repeated on its kernel.
    assert_eq!(softmax["args"]["stack"], Value::Null);
    let call = events
        .iter()
        .find(|e| e["cat"] == "cuda_api" && e["args"]["correlation_id"] == 4)
        .unwrap();
    assert_eq!(call["args"]["stack"], STACK_SOFTMAX);
}

#[test]
fn gputrace_reader__golden() {
    let sc = scenario::build();
    let path = data("gputrace/scenario.trace");
    // The committed binary is the reader's input; regenerate it only when blessing.
    if !path.exists() || std::env::var_os("GPUPERF_BLESS").is_some_and(|v| v == "1") {
        fs::write(&path, sc.gpu_bytes()).unwrap();
    }
    let mut strings = StringTable::new();
    let mut records = Vec::new();
    let stats = gpuperf_merge::read::gputrace::read(
        fs::File::open(&path).unwrap(),
        &path,
        &mut strings,
        &mut |r, _| records.push(r.clone()),
    )
    .unwrap();
    assert!(stats.diagnostics.is_empty() && stats.truncated_at.is_none());
    golden::check(
        &data("gputrace/scenario.expected.txt"),
        &golden::render_records(&records, &strings),
    );
}

#[test]
fn cpu_readers__golden() {
    for case in ["reference", "gpuperf"] {
        let path = data(&format!("cpu/{case}.txt"));
        let t = CpuTrace::open(&path).unwrap();
        let mut out = format!(
            "format {:?} dropped {} lines {}\n",
            t.format, t.dropped, t.lines
        );
        for l in &t.launches {
            out.push_str(&format!(
                "{} pid {} tid {} corr {} comm {:?} stack {}\n",
                l.ts_ns,
                l.pid,
                l.tid,
                l.correlation_id.map_or(0, |c| c.get()),
                t.comms[&(l.pid, l.tid)],
                t.stacks.text(l.stack)
            ));
        }
        for d in &t.diagnostics.first {
            out.push_str(&format!("# {}\n", d.message));
        }
        golden::check(&data(&format!("cpu/{case}.expected.txt")), &out);
    }
}

/// A peer-to-peer copy keeps both devices, and a sync whose device the recorder
/// could not tell stays "device unknown" instead of becoming GPU 65535.
#[test]
fn chrome_trace__peer_copy_and_unknown_device() {
    use gpuperf_merge::model::{Activity, MemcpyKind, PeerDevices, Process};
    use gpuperf_merge::read::gputrace;

    let strings = StringTable::new();
    let mut w = gputrace::Writer::new(Vec::new()).unwrap();
    let activity = |correlation_id, device, stream, kind| {
        Record::Activity(Activity {
            pid: 42,
            start_ns: 1000 + u64::from(correlation_id),
            end_ns: 2000,
            correlation_id,
            device,
            context: 9,
            stream,
            graph_id: None,
            graph_node_id: None,
            kind,
        })
    };
    for r in [
        Record::Process(Process {
            pid: 42,
            ppid: Some(1),
            exe: "/bin/app".into(),
            start_ns: 1,
            start_realtime_ns: Some(2),
        }),
        activity(
            1,
            Some(0),
            Some(7),
            ActivityKind::Memcpy {
                kind: MemcpyKind::PtoP,
                bytes: 64,
                peer: Some(PeerDevices { src: 0, dst: 1 }),
            },
        ),
        activity(
            2,
            None,
            None,
            ActivityKind::Sync {
                sync_type: 4,
                wait: None,
            },
        ),
    ] {
        w.write(&r, &strings).unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let p = write_tmp(dir.path(), "gpu.gputrace", &w.into_inner());
    let out = run(&[p], None);
    let v: Value = serde_json::from_str(&out.chrome).unwrap();
    let events = v["traceEvents"].as_array().unwrap();
    let copy = events.iter().find(|e| e["cat"] == "memcpy").unwrap();
    assert_eq!(
        (&copy["args"]["src_device"], &copy["args"]["dst_device"]),
        (&Value::from(0), &Value::from(1))
    );
    let names: Vec<&str> = events
        .iter()
        .filter(|e| e["name"] == "process_name")
        .filter_map(|e| e["args"]["name"].as_str())
        .collect();
    assert!(
        names.contains(&"GPU ? (device unknown, pid 42)"),
        "{names:?}"
    );
    assert!(!names.iter().any(|n| n.contains("65535")), "{names:?}");
}

/// A recording whose 32-bit correlation ids wrap: ids advance in steps under
/// 2^31 (calls the recording skipped) past 2^32 and begin again at 1. GPU
/// records arrive slightly out of order, one of them across the wrap.
fn wrapping() -> (Vec<u8>, Vec<u8>) {
    let ids: [u32; 9] = [
        1,
        2,
        0x4000_0000,
        0x8000_0000,
        0xC000_0000,
        0xFFFF_FFFF,
        1,
        2,
        3,
    ];
    let start = |i: usize| 1_000_000 + i as u64 * 10_000;
    let mut t = Trace::new();
    t.process(7, "a", 0);
    let mut cpu = String::from("# gpuperf-cpu v1\n");
    for (i, &corr) in ids.iter().enumerate() {
        t.api(
            7,
            8,
            corr,
            (start(i), start(i) + 2_500),
            "cudaLaunchKernel",
            211,
        );
        cpu.push_str(&format!(
            "{} app 7 8 0 {corr} main;step_{i};cudaLaunchKernel\n",
            start(i) + 100
        ));
    }
    for i in [1, 0, 2, 3, 4, 6, 5, 8, 7] {
        let at = start(i) + 40_000;
        t.kernel(7, ids[i], (at, at + 1_000), 7, &format!("kernel_{i}"));
    }
    (t.gputrace(), cpu.into_bytes())
}

#[test]
fn exact_join__correlation_ids_that_wrap_past_2_32__each_kernel_keeps_its_own_stack() {
    let (gpu, cpu) = wrapping();
    let dir = tempfile::tempdir().unwrap();
    let out = run(
        &[write_tmp(dir.path(), "g", &gpu)],
        Some(&write_tmp(dir.path(), "c", &cpu)),
    );
    assert_eq!(out.summary.duplicate_cpu_ids, 0, "{}", out.summary);
    assert_eq!(out.summary.kernels_matched, 9, "{}", out.summary);
    let f = folded_map(&out.folded);
    for i in 0..9 {
        assert_eq!(
            f.get(&format!(
                "main;step_{i};cudaLaunchKernel;[GPU_Kernel]kernel_{i}"
            )),
            Some(&1),
            "kernel {i} charged to another call's stack:\n{}",
            out.folded
        );
    }
}
