//! `gpuperf record --driver` in the kernel VM of `sim/kernel/` (Debian's 6.1
//! and 6.12 under QEMU), on `sim_app` built by nvcc against the simulated CUDA
//! runtime, with the stand-in NVIDIA module loaded: the simulated driver then
//! makes ioctls inside its calls (`sim/src/nvdev.h`). Every ioctl the module
//! counted is in the recording, from both processes of a forking program,
//! nested under the CUDA call that made it, in the timeline and in the report.
//!
//! The `on_linux_*` tests build the programs on the host and boot a guest that
//! runs this binary's `in_vm_*` test; that one does nothing outside a guest.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use common::{cuda13, nvcc, show, sim, sim_app, text, work_dir};
use gpuperf_merge::model::DriverKind;
use gpuperf_merge::read::driver::DriverTrace;
use gpuperf_test_support::vm;

fn on_guest(series: &str) {
    if vm::inside().is_some() {
        return;
    }
    let Some(guest) = vm::kernel(series) else {
        return;
    };
    let Some(cuda) = cuda13() else {
        return;
    };
    let Some(nvcc) = nvcc(&cuda) else {
        return;
    };
    let app = sim_app(&cuda, &nvcc);
    let cupti = sim(&cuda).join("libcupti.so.13");
    let exe = std::env::current_exe().unwrap();
    let out = guest.run(
        &[
            exe.as_os_str(),
            "in_vm_".as_ref(),
            "--test-threads=1".as_ref(),
            "--nocapture".as_ref(),
            "--color=never".as_ref(),
        ],
        &[
            ("GPUPERF_SIM_APP", app.to_str().unwrap()),
            ("GPUPERF_SIM_CUPTI", cupti.to_str().unwrap()),
        ],
    );
    let log = show(&out);
    assert!(
        out.status.success(),
        "in the {} guest:\n{log}",
        guest.release
    );
    assert!(log.contains("test result: ok. 1 passed"), "{log}");
    assert!(!log.contains("skipped:"), "{log}");
}

#[test]
fn on_linux_6_1_record_driver_nests_every_ioctl_under_its_cuda_call() {
    on_guest("6.1");
}

#[test]
fn on_linux_6_12_record_driver_nests_every_ioctl_under_its_cuda_call() {
    on_guest("6.12");
}

fn counter(name: &str) -> u64 {
    let p = format!("/sys/kernel/debug/nvidia_sim/{name}");
    std::fs::read_to_string(&p)
        .unwrap_or_else(|e| panic!("{p}: {e}"))
        .trim()
        .parse()
        .unwrap()
}

/// The CUDA calls of the simulated runtime that make ioctls, and how many
/// each makes (`sim/src/nvdev.h`).
const IOCTLS_PER_CALL: [(&str, u64); 2] = [("cudaMalloc", 2), ("cudaDeviceSynchronize", 1)];

#[test]
fn in_vm_record_driver_of_a_forking_program() {
    if vm::inside().is_none() {
        return;
    }
    let o = Command::new("modprobe").arg("nvidia_sim").output().unwrap();
    assert!(o.status.success(), "modprobe: {}", show(&o));
    let app = std::env::var("GPUPERF_SIM_APP").expect("the host passes GPUPERF_SIM_APP");
    let cupti = std::env::var("GPUPERF_SIM_CUPTI").expect("the host passes GPUPERF_SIM_CUPTI");
    let (opens0, ioctls0, isrs0, bhs0) = (
        counter("opens"),
        counter("ioctls"),
        counter("isrs"),
        counter("bhs"),
    );
    let dir = work_dir("record-driver");
    // `fork 3`: two processes, each one cudaMalloc, six launches and one
    // cudaDeviceSynchronize.
    let o = Command::new(env!("CARGO_BIN_EXE_gpuperf"))
        .current_dir(&dir)
        .args([
            "--driver",
            "--raw-dir",
            "raw",
            "-c",
            "t.json",
            "--cupti",
            &cupti,
        ])
        .args(["--", &app, "fork", "3", "0"])
        .output()
        .unwrap();
    let all = show(&o);
    assert_eq!(o.status.code(), Some(0), "{all}");
    let err = text(&o.stderr);
    // This guest has no DRM scheduler loaded: said in one line.
    assert_eq!(
        err.lines().filter(|l| l.contains("not present")).count(),
        1,
        "{all}"
    );
    let t = DriverTrace::open(&dir.join("raw/driver.tsv")).unwrap();
    assert!(t.diagnostics.is_empty(), "{:?}", t.diagnostics);
    assert_eq!(t.total_dropped(), 0, "{all}");
    assert_eq!(t.simulated, ["nvidia_sim"], "{all}");
    let count = |k: DriverKind| t.events.iter().filter(|e| e.kind == k).count() as u64;
    // Exactly what the module counted, no more (nothing of other processes).
    assert_eq!(
        count(DriverKind::Ioctl),
        counter("ioctls") - ioctls0,
        "{all}"
    );
    assert_eq!(count(DriverKind::Open), counter("opens") - opens0, "{all}");
    assert_eq!(count(DriverKind::Irq), counter("isrs") - isrs0, "{all}");
    assert_eq!(
        count(DriverKind::IrqBottomHalf),
        counter("bhs") - bhs0,
        "{all}"
    );
    let per_process: u64 = IOCTLS_PER_CALL.iter().map(|(_, n)| n).sum();
    assert_eq!(count(DriverKind::Ioctl), 2 * per_process, "{all}");
    assert_eq!(count(DriverKind::Open), 2, "{all}");
    let pids: BTreeSet<u32> = t
        .events
        .iter()
        .filter(|e| e.kind == DriverKind::Ioctl)
        .map(|e| e.pid)
        .collect();
    assert_eq!(pids.len(), 2, "both processes of the fork: {all}");

    // The timeline: each ioctl inside the CUDA call its `api` names, on its thread.
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("t.json")).unwrap()).unwrap();
    let events = json["traceEvents"].as_array().unwrap();
    let calls: Vec<&serde_json::Value> = events.iter().filter(|e| e["cat"] == "cuda_api").collect();
    let mut nested: BTreeMap<String, u64> = BTreeMap::new();
    for e in events.iter().filter(|e| e["cat"] == "driver") {
        let name = e["name"].as_str().unwrap();
        if !name.starts_with("ioctl ") {
            continue;
        }
        let api = e["args"]["api"].as_str().unwrap();
        let (ts, dur) = (e["ts"].as_f64().unwrap(), e["dur"].as_f64().unwrap());
        let around = calls.iter().find(|c| {
            c["pid"] == e["pid"]
                && c["tid"] == e["tid"]
                && c["ts"].as_f64().unwrap() <= ts
                && c["ts"].as_f64().unwrap() + c["dur"].as_f64().unwrap() >= ts + dur
        });
        let around = around.unwrap_or_else(|| panic!("{e} is in no CUDA call"));
        assert_eq!(around["name"].as_str(), Some(api), "{e}");
        *nested.entry(api.to_owned()).or_default() += 1;
    }
    let want: BTreeMap<String, u64> = IOCTLS_PER_CALL
        .iter()
        .map(|(f, n)| ((*f).to_owned(), 2 * n))
        .collect();
    assert_eq!(nested, want, "{all}");
    assert!(
        events.iter().any(|e| e["name"] == "process_name"
            && e["args"]["name"] == "GPU driver (simulated: nvidia_sim)"),
        "the driver's tracks are labelled simulated"
    );
    assert_eq!(
        events.iter().filter(|e| e["name"] == "irq").count() as u64,
        counter("isrs") - isrs0
    );

    // The report: ioctls and calls per CUDA function.
    let r = Command::new(env!("CARGO_BIN_EXE_gpuperf"))
        .args(["report"])
        .arg(dir.join("raw"))
        .output()
        .unwrap();
    let report = text(&r.stdout);
    assert!(r.status.success(), "{}", show(&r));
    for (f, n) in IOCTLS_PER_CALL {
        let row = report
            .lines()
            .find(|l| l.ends_with(&format!("  {f}")) && l.split_whitespace().count() > 4)
            .unwrap_or_else(|| panic!("no {f} row in:\n{report}"));
        let w: Vec<&str> = row.split_whitespace().collect();
        assert_eq!((w[0], w[1]), ("2", &*(2 * n).to_string()), "{report}");
    }
    assert!(
        report.contains(&format!("interrupts: {} (", counter("isrs") - isrs0)),
        "{report}"
    );
    eprintln!("{report}");
}
