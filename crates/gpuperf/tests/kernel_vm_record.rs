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

use common::{Record, cuda13, gpuperf, nvcc, show, sim, sim_app, text, work_dir};
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

/// The ioctls the simulated driver makes (`sim/src/nvdev.h`) in an
/// allocation (`NV_ESC_RM_ALLOC`, `NV_ESC_RM_MAP_MEMORY`).
const ALLOC_IOCTLS: u64 = 2;

/// One recording in the guest, with what the module counted during it.
struct Recording {
    all: String,
    trace: DriverTrace,
    json: serde_json::Value,
    report: String,
    ioctls: u64,
    opens: u64,
    isrs: u64,
    bhs: u64,
}

fn record(tag: &str, args: &[&str]) -> Recording {
    let app = std::env::var("GPUPERF_SIM_APP").expect("the host passes GPUPERF_SIM_APP");
    let cupti = std::env::var("GPUPERF_SIM_CUPTI").expect("the host passes GPUPERF_SIM_CUPTI");
    let before = ["ioctls", "opens", "isrs", "bhs"].map(counter);
    let dir = work_dir(tag);
    let o = Record::bare(&dir)
        .flags(["--driver", "--raw-dir", "raw", "-c", "t.json"])
        .cupti(std::path::Path::new(&cupti))
        .program(&app, args)
        .output()
        .unwrap();
    let all = show(&o);
    assert_eq!(o.status.code(), Some(0), "{all}");
    let after = ["ioctls", "opens", "isrs", "bhs"].map(counter);
    let err = text(&o.stderr);
    // This guest has no DRM scheduler loaded: said in one line.
    assert_eq!(
        err.lines().filter(|l| l.contains("not present")).count(),
        1,
        "{all}"
    );
    let trace = DriverTrace::open(&dir.join("raw/driver.tsv")).unwrap();
    assert!(trace.diagnostics.is_empty(), "{:?}", trace.diagnostics);
    assert_eq!(trace.total_dropped(), 0, "{all}");
    assert_eq!(trace.simulated, ["nvidia_sim"], "{all}");
    let json = serde_json::from_str(&std::fs::read_to_string(dir.join("t.json")).unwrap()).unwrap();
    let r = gpuperf(&dir)
        .arg("report")
        .arg(dir.join("raw"))
        .output()
        .unwrap();
    assert!(r.status.success(), "{}", show(&r));
    let report = text(&r.stdout);
    eprintln!("{tag}:{report}");
    Recording {
        all,
        trace,
        json,
        report,
        ioctls: after[0] - before[0],
        opens: after[1] - before[1],
        isrs: after[2] - before[2],
        bhs: after[3] - before[3],
    }
}

impl Recording {
    fn count(&self, k: DriverKind) -> u64 {
        self.trace.events.iter().filter(|e| e.kind == k).count() as u64
    }

    /// The driver events, exactly those the module counted: none of other
    /// processes, none lost.
    fn check_counts(&self) {
        let all = &self.all;
        assert_eq!(self.count(DriverKind::Ioctl), self.ioctls, "{all}");
        assert_eq!(self.count(DriverKind::Open), self.opens, "{all}");
        assert_eq!(self.count(DriverKind::Irq), self.isrs, "{all}");
        assert_eq!(self.count(DriverKind::IrqBottomHalf), self.bhs, "{all}");
    }

    /// Ioctls per CUDA function in the timeline, each checked to lie inside
    /// the call its `api` names, on its thread; `none` for those outside
    /// every call, which must come before each of their process's calls.
    fn nested(&self) -> BTreeMap<String, u64> {
        let events = self.json["traceEvents"].as_array().unwrap();
        let calls: Vec<&serde_json::Value> =
            events.iter().filter(|e| e["cat"] == "cuda_api").collect();
        let f = |v: &serde_json::Value| v.as_f64().unwrap();
        let mut nested = BTreeMap::new();
        for e in events.iter().filter(|e| e["cat"] == "driver") {
            if !e["name"].as_str().unwrap().starts_with("ioctl ") {
                continue;
            }
            let api = e["args"]["api"].as_str().unwrap();
            let (ts, end) = (f(&e["ts"]), f(&e["ts"]) + f(&e["dur"]));
            let same_thread =
                |c: &&&serde_json::Value| c["pid"] == e["pid"] && c["tid"] == e["tid"];
            if api == "none" {
                assert!(
                    calls
                        .iter()
                        .filter(|c| c["pid"] == e["pid"])
                        .all(|c| f(&c["ts"]) > end),
                    "{e} is after a recorded call"
                );
            } else {
                let around = calls
                    .iter()
                    .filter(same_thread)
                    .find(|c| f(&c["ts"]) <= ts && f(&c["ts"]) + f(&c["dur"]) >= end)
                    .unwrap_or_else(|| panic!("{e} is in no CUDA call"));
                assert_eq!(around["name"].as_str(), Some(api), "{e}");
            }
            *nested.entry(api.to_owned()).or_default() += 1;
        }
        nested
    }

    /// The report's row for `f`: (calls, ioctls).
    fn report_row(&self, f: &str) -> (u64, u64) {
        let row = self
            .report
            .lines()
            .find(|l| l.ends_with(&format!("  {f}")) && l.split_whitespace().count() > 4)
            .unwrap_or_else(|| panic!("no {f} row in:\n{}", self.report));
        let w: Vec<&str> = row.split_whitespace().collect();
        (w[0].parse().unwrap(), w[1].parse().unwrap())
    }
}

fn map(v: &[(&str, u64)]) -> BTreeMap<String, u64> {
    v.iter().map(|(k, n)| ((*k).to_owned(), *n)).collect()
}

#[test]
fn in_vm_record_driver_nests_ioctls_and_follows_forks() {
    if vm::inside().is_none() {
        return;
    }
    let o = Command::new("modprobe").arg("nvidia_sim").output().unwrap();
    assert!(o.status.success(), "modprobe: {}", show(&o));

    // Copies: allocations, blocking copies and stream syncs (sim_app.cu's
    // main and run_copies), each making its ioctls inside its call: the
    // first call (a cudaMalloc) included, and none outside every call.
    let r = record("record-driver-copies", &["copies"]);
    r.check_counts();
    let want = [
        ("cudaMalloc", 3 * ALLOC_IOCTLS),
        ("cudaMallocHost", ALLOC_IOCTLS),
        ("cudaMemcpy", 3),
        ("cudaStreamSynchronize", 2),
    ];
    assert_eq!(r.nested(), map(&want), "{}", r.all);
    assert_eq!(
        r.count(DriverKind::Ioctl),
        want.iter().map(|w| w.1).sum::<u64>()
    );
    assert_eq!(r.report_row("cudaMalloc"), (3, 3 * ALLOC_IOCTLS));
    assert_eq!(r.report_row("cudaMallocHost"), (1, ALLOC_IOCTLS));
    assert_eq!(r.report_row("cudaMemcpy"), (3, 3));
    assert_eq!(r.report_row("cudaStreamSynchronize"), (2, 2));
    assert!(
        r.report
            .contains(&format!("interrupts: {}, bottom halves: {}", r.isrs, r.bhs)),
        "{}",
        r.report
    );
    let events = r.json["traceEvents"].as_array().unwrap();
    assert!(
        events.iter().any(|e| e["name"] == "process_name"
            && e["args"]["name"] == "GPU driver (simulated: nvidia_sim)"),
        "the driver's tracks are labelled simulated"
    );
    assert_eq!(
        // Instants on the interrupts track (`n`), their own name in `args.event`.
        events
            .iter()
            .filter(|e| e["ph"] == "n" && e["args"]["event"] == "irq")
            .count() as u64,
        r.isrs
    );

    // A forking program: both processes' events, from their first call on.
    let r = record("record-driver-fork", &["fork", "3", "0"]);
    r.check_counts();
    assert_eq!(
        r.nested(),
        map(&[
            ("cudaDeviceSynchronize", 2),
            ("cudaMalloc", 2 * ALLOC_IOCTLS)
        ]),
        "{}",
        r.all
    );
    let pids: BTreeSet<u32> = r
        .trace
        .events
        .iter()
        .filter(|e| e.kind == DriverKind::Ioctl)
        .map(|e| e.pid)
        .collect();
    assert_eq!(pids.len(), 2, "both processes of the fork: {}", r.all);
    assert_eq!(r.count(DriverKind::Open), 2, "{}", r.all);
    assert_eq!(r.report_row("cudaDeviceSynchronize"), (2, 2));
    assert_eq!(r.report_row("cudaMalloc"), (2, 2 * ALLOC_IOCTLS));
}
