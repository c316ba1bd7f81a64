//! `gpuperf record --capture-range` and `--delay` end to end on the simulated CUDA
//! runtime (`sim/`, no GPU, no root: stacks are taken in process): a program that
//! builds a "model", runs a first step, then steps inside a window and more work
//! after it (`sim/tests/capture_app.c`). Only the window's calls and GPU work
//! are written, and the summary names the window.
//!
//! Needs NVIDIA's CUDA 13 wheels (headers); skips without them unless
//! `GPUPERF_REQUIRE_CUDA_WHEELS=1`. The NVTX cases also need NVTX v3's header
//! (the nvidia-nvtx wheel, which PyTorch's wheel installs).
#![allow(non_snake_case)]

use crate::common;

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Output;

use common::{Record, Recording, cuda13, nvtx_include, show, sim, text, work_dir};
use gpuperf_merge::model::ActivityKind;

/// `sim/tests/capture_app.c` built against the simulation, with NVTX when
/// `nvtx` names the directory holding `nvtx3/`.
fn capture_app(cuda: &Path, nvtx: Option<&Path>) -> PathBuf {
    let libs = ["cudart", "cuda"];
    match nvtx {
        Some(n) => common::sim_c_program_as(
            cuda,
            "capture_app",
            "capture_app_nvtx",
            &["-DHAVE_NVTX".as_ref(), "-idirafter".as_ref(), n.as_os_str()],
            &libs,
        ),
        None => common::sim_c_program(cuda, "capture_app", &libs),
    }
}

/// Records `app WINDOW` with `flags`, raw traces kept; returns gpuperf's output,
/// the recording, and the raw trace files' bytes.
fn record(
    name: &str,
    cuda: &Path,
    app: &Path,
    flags: &[&str],
    window: &str,
) -> (Output, Recording, Vec<u8>) {
    let dir = work_dir(name);
    let cupti = sim(cuda).join("libcupti.so.13");
    let mut all = vec!["--stacks", "inject", "--raw-dir", "raw", "-p", "cpu.txt"];
    all.extend_from_slice(flags);
    let o = Record::new(&dir)
        .flags(&all)
        .cupti(&cupti)
        .program(app, [window])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", show(&o));
    assert!(
        text(&o.stdout).contains(&format!("capture_app {window}: 19 kernels")),
        "the program's output: {}",
        show(&o)
    );
    let raw = dir.join("raw");
    let mut bytes = Vec::new();
    for e in fs::read_dir(&raw).unwrap().flatten() {
        if e.path().extension().is_some_and(|x| x == "gputrace") {
            bytes.extend(fs::read(e.path()).unwrap());
        }
    }
    (o, Recording::open(&raw), bytes)
}

/// GPU work (no syncs) by label.
fn work(r: &Recording) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for a in &r.activities {
        if !matches!(a.kind, ActivityKind::Sync { .. }) {
            *m.entry(r.label(a)).or_default() += 1;
        }
    }
    m
}

fn expect(pairs: &[(&str, usize)]) -> BTreeMap<String, usize> {
    pairs.iter().map(|(l, n)| (l.to_string(), *n)).collect()
}

/// Nothing of the calls outside the window is in the trace: no kernel name,
/// no API record, no stack of the functions that ran only outside it.
fn assert_only_the_window(o: &Output, r: &Recording, raw: &[u8], want: &BTreeMap<String, usize>) {
    assert_eq!(&work(r), want, "{}", show(o));
    for outside in ["build_kernel", "warmup_kernel", "after_kernel"] {
        assert!(
            !raw.windows(outside.len()).any(|w| w == outside.as_bytes()),
            "`{outside}` is in the raw trace"
        );
    }
    let launches = r.apis.iter().filter(|(_, n)| n.contains("Launch")).count();
    assert_eq!(launches, 12, "{:?}", r.apis);
    assert!(
        !r.apis
            .iter()
            .any(|(_, n)| n.contains("Memcpy") || n.contains("Malloc")),
        "{:?}",
        r.apis
    );
}

#[test]
fn record_capture_range_cudaProfilerApi__only_the_steps_not_construction_or_first_step() {
    let Some(cuda) = cuda13() else { return };
    let app = capture_app(&cuda, None);
    // The runtime's calls, and the driver's that a program may call itself.
    for window in ["runtime", "driver"] {
        let (o, r, raw) = record(
            &format!("capture_profiler_api_{window}"),
            &cuda,
            &app,
            &["--capture-range", "cudaProfilerApi"],
            window,
        );
        assert_only_the_window(
            &o,
            &r,
            &raw,
            &expect(&[("step_kernel", 12), ("Memset 4096", 1)]),
        );
        let err = text(&o.stderr);
        assert!(err.contains("matched 12 of 12 kernels (100.0%)"), "{err}");
        assert!(
            err.contains(
                "capture window between cudaProfilerStart and cudaProfilerStop: 1 window recorded"
            ),
            "{err}"
        );
        // Outside: 5 build and 3 warmup launches and a copy before it, 2
        // launches after (`capture_app.c`). CUPTI makes no record of their
        // work while the window is closed: the calls are what is counted.
        assert!(
            err.contains(
                "left out: 11 calls that make GPU work (launches, copies, memsets) entered \
                 outside it, and 0 GPU records of calls outside it"
            ),
            "{err}"
        );
    }
}

#[test]
fn record_without_a_window__the_whole_run() {
    let Some(cuda) = cuda13() else { return };
    let app = capture_app(&cuda, None);
    let (o, r, _) = record("capture_none", &cuda, &app, &[], "runtime");
    assert_eq!(
        work(&r),
        expect(&[
            ("build_kernel", 5),
            ("warmup_kernel", 3),
            ("step_kernel", 12),
            ("after_kernel", 2),
            ("Memcpy HtoD 4096", 1),
            ("Memset 4096", 1),
        ]),
        "{}",
        show(&o)
    );
    assert!(!text(&o.stderr).contains("capture window"), "{}", show(&o));
}

#[test]
fn record_capture_range_nvtx__push_pop_and_start_end_ranges_by_name() {
    let Some(cuda) = cuda13() else { return };
    let Some(nvtx) = nvtx_include(&cuda) else {
        return;
    };
    let app = capture_app(&cuda, Some(&nvtx));
    // "steps" is pushed around all four steps and the memset; each "step" is
    // started and ended around one step's kernels.
    for (range, want) in [
        (
            "nvtx:steps",
            expect(&[("step_kernel", 12), ("Memset 4096", 1)]),
        ),
        ("nvtx:step", expect(&[("step_kernel", 12)])),
    ] {
        let name = format!("capture_{}", range.replace(':', "_"));
        let (o, r, raw) = record(&name, &cuda, &app, &["--capture-range", range], "nvtx");
        assert_only_the_window(&o, &r, &raw, &want);
        let n = range.trim_start_matches("nvtx:");
        let windows = if n == "step" { 4 } else { 1 };
        assert!(
            text(&o.stderr).contains(&format!(
                "capture window inside NVTX ranges `{n}`: {windows} window"
            )),
            "{}",
            show(&o)
        );
    }
}

#[test]
fn record_delay__nothing_before_it() {
    let Some(cuda) = cuda13() else { return };
    let app = capture_app(&cuda, None);
    // The program sleeps 2.5 s after its first step (done within a few ms of
    // its start): a 1.5 s delay ends in that sleep, a second from either end.
    let (o, r, raw) = record("capture_delay", &cuda, &app, &["--delay", "1.5"], "sleep");
    assert_eq!(
        work(&r),
        expect(&[("step_kernel", 12), ("Memset 4096", 1), ("after_kernel", 2)]),
        "{}",
        show(&o)
    );
    for outside in ["build_kernel", "warmup_kernel"] {
        assert!(!raw.windows(outside.len()).any(|w| w == outside.as_bytes()));
    }
    assert!(
        text(&o.stderr).contains("capture window after a delay of 1.500 s: 1 window recorded"),
        "{}",
        show(&o)
    );
}
