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
            ("ioctl 0xc000462b", "cudaMalloc"),
            ("ioctl 0xc000464e", "cudaMalloc"),
            ("ioctl 0xc00046f0", "cudaMemcpy"),
            ("ioctl 0xc000462a", "none"),
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
/// without being queued (a page flip's).
#[test]
fn driver_vblank__tracks_per_crtc_events_under_their_process_goldens() {
    let dir = tempfile::tempdir().unwrap();
    let (gpu, cpu) = inputs(dir.path());
    let (json, _) = perfetto::check_with(&[gpu], Some(&cpu), Some(&vblank()));
    let doc: Value = serde_json::from_str(&json).unwrap();
    let events = doc["traceEvents"].as_array().unwrap();
    let driver: Vec<&Value> = events.iter().filter(|e| e["cat"] == "driver").collect();
    let vblanks = |pid: u64| {
        driver
            .iter()
            .filter(|e| e["name"] == "vblank" && e["pid"] == pid)
            .count()
    };
    assert_eq!(vblanks(1_073_741_823), 7);
    // Each event queued and delivered is a slice from one to the other, in
    // the asking process.
    let slices: Vec<(f64, f64, &str)> = driver
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
        .chain(events.iter().filter(|e| {
            // The driver's tracks, and the process's own vblank event tracks.
            e["ph"] == "M"
                && (e["pid"] == 1_073_741_823
                    || (e["pid"] == 100 && e["tid"].as_u64() > Some(1 << 29)))
        }))
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
