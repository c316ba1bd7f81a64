//! `gpuperf monitor` on this machine (the driver events themselves are tested
//! in the kernel VM, `tests/kernel_vm.rs`).

use crate::common;

use std::process::Command;

use gpuperf_profiler::driver::{Source, available};
use gpuperf_test_support::process::{show, text};
use gpuperf_test_support::require;

fn gpuperf() -> Command {
    common::gpuperf_cmd()
}

#[test]
fn monitor_rejects_bad_arguments_in_one_line() {
    for (args, expect) in [
        (&["--sample", "0"][..], "--sample <N>"),
        (&["--interval", "0"][..], "not a positive number of seconds"),
        (&["--duration", "x"][..], "not a positive number of seconds"),
        (&["--duration", "0"][..], "not a positive number of seconds"),
        (
            &["--event", "gpu"][..],
            "possible values: nvidia, irq, xid, drm_sched, dma_fence, vblank",
        ),
        (&["--max-rate", "0"][..], "--max-rate <EVENTS/S>"),
    ] {
        let o = gpuperf().arg("monitor").args(args).output().unwrap();
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", show(&o));
        assert!(text(&o.stderr).contains(expect), "{args:?}: {}", show(&o));
    }
}

/// Without the drivers (this host has no kprobes and no DRM), each missing
/// source is one line, nothing fails, and `--duration` ends the run.
/// With none of the sources asked for present, the monitor says nothing can
/// be watched and fails (it used to say "attached; Ctrl-C stops" and wait).
#[test]
fn monitor_with_no_source_present_says_so_and_fails() {
    if !require::bpf(gpuperf_profiler::preflight::check()) {
        return;
    }
    let kallsyms = std::fs::read_to_string("/proc/kallsyms").unwrap();
    let (present, _) = available(&kallsyms, &[Source::NvidiaCalls]);
    if !present.is_empty() {
        eprintln!("skipped: NVIDIA's driver is loaded here");
        return;
    }
    let o = gpuperf()
        .args(["monitor", "--event", "nvidia", "--duration", "30"])
        .output()
        .unwrap();
    let err = text(&o.stderr);
    assert!(!o.status.success(), "{}", show(&o));
    assert!(err.contains("nothing can be watched"), "{err}");
    assert!(!err.contains("attached; Ctrl-C stops"), "{err}");
}

#[test]
fn monitor_says_which_sources_are_missing_and_ends_at_its_duration() {
    if !require::bpf(gpuperf_profiler::preflight::check()) {
        return;
    }
    let o = gpuperf()
        .args(["monitor", "--duration", "0.5", "--interval", "0.2"])
        .output()
        .unwrap();
    let err = text(&o.stderr);
    let kallsyms = std::fs::read_to_string("/proc/kallsyms").unwrap();
    let (_, absent) = available(&kallsyms, &Source::ALL);
    // With none present there is nothing to watch: it says so and fails.
    let nothing = absent.len() == Source::ALL.len();
    assert_eq!(o.status.success(), !nothing, "{}", show(&o));
    for (_, why) in &absent {
        assert!(
            err.contains(&format!("gpuperf monitor: not present, skipped: {why}\n")),
            "{err}"
        );
    }
    assert_eq!(
        err.matches("not present, skipped").count(),
        absent.len(),
        "{err}"
    );
    if nothing {
        assert!(err.contains("nothing can be watched"), "{err}");
    } else {
        assert!(err.contains(" events kept, "), "{err}");
        assert!(!err.contains("BPF cost"), "only with -v: {err}");
    }
}

/// The statistics go to stdout, each interval under its time (an interval
/// with no events says so), then the whole run's; the BPF programs' cost is
/// said with `-v` (on stderr). They went to stderr, an empty interval was
/// not printed, and the cost always was.
#[test]
fn monitor_prints_each_interval_and_the_whole_run_on_stdout() {
    if !require::bpf(gpuperf_profiler::preflight::check()) {
        return;
    }
    let kallsyms = std::fs::read_to_string("/proc/kallsyms").unwrap();
    let (_, absent) = available(&kallsyms, &Source::ALL);
    if absent.len() == Source::ALL.len() {
        eprintln!("skipped: no source of driver events here");
        return;
    }
    let (present, _) = available(&kallsyms, &Source::ALL);
    let o = gpuperf()
        .args([
            "-v",
            "monitor",
            "--event",
            present[0].name(),
            "--duration",
            "1.2",
        ])
        .args(["--interval", "0.3"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", show(&o));
    let out = text(&o.stdout);
    let intervals = out.matches("--- ").count();
    assert!(intervals >= 2, "{}", show(&o));
    if text(&o.stderr).contains("gpuperf monitor: 0 events kept") {
        assert_eq!(out.matches(" s\nno events\n").count(), intervals, "{out}");
    }
    assert!(out.contains("=== whole run, "), "{out}");
    assert!(!text(&o.stderr).contains("--- "), "{}", show(&o));
    assert!(text(&o.stderr).contains("BPF cost: "), "{}", show(&o));
}
