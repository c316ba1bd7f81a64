//! Stacks taken under CPython frames, in a Python program that launches on the
//! simulated CUDA runtime with ctypes (its driver loads the injection library).

use std::process::Command;
use std::time::Duration;

use gpuperf_merge::model::{Record, StackEnd, StackFrame};
use gpuperf_test_support::python::pythons;
use gpuperf_test_support::test_data;

use crate::support::{Sim, inject_lib, read_logs, read_traces, run_within};

/// Issue 22: a 3.12/3.13 stack cut at 256 Python frames counted as truncated
/// with no reason given. The log's stack summary names the cut.
#[test]
fn python_3_12_and_3_13_launch_under_300_python_calls_cut_counted_with_its_reason_in_the_log() {
    let Some(sim) = Sim::find() else { return };
    let pythons: Vec<_> = pythons()
        .into_iter()
        .filter(|(name, _)| name == "pyenv 3.12" || name == "pyenv 3.13")
        .collect();
    for (name, py) in pythons {
        let dir = tempfile::tempdir().unwrap();
        let mut c = Command::new(&py);
        c.arg(test_data("inject", "deep_python_launch.py"))
            .arg(inject_lib())
            .arg(sim.dir.join("libcudart.so.13"))
            .env("GPUPERF_CUPTI_PATH", sim.cupti())
            .env("GPUPERF_GPU_TRACE", dir.path());
        let out = run_within(c, &name, Duration::from_secs(120));
        let log = read_logs(dir.path());
        assert!(
            out.status.success() && String::from_utf8_lossy(&out.stdout).contains("launched 2"),
            "{name}: {:?}\n{}\n{log}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let summary = log
            .lines()
            .find(|l| l.contains("stacks: "))
            .unwrap_or_else(|| panic!("{name}: no stack summary in the log:\n{log}"));
        // Both stacks have Python frames; the deep one was cut at the depth cap,
        // and that is its reason for counting as truncated.
        for want in [
            "stacks: 2 taken (2 distinct)",
            " 1 at the depth cap,",
            " 2 with Python frames (1 cut at the depth cap)",
        ] {
            assert!(summary.contains(want), "{name}: `{want}` not in\n{summary}");
        }
        // The trace agrees: one stack, its Python frames cut at the depth cap.
        let (records, _, _) = read_traces(dir.path());
        let cut: Vec<(usize, usize)> = records
            .iter()
            .filter_map(|r| match r {
                Record::Stack(s) if s.end == StackEnd::DepthLimit && s.python_truncated => Some((
                    s.frames.len(),
                    s.frames
                        .iter()
                        .filter(|f| matches!(f, StackFrame::Python { .. }))
                        .count(),
                )),
                _ => None,
            })
            .collect();
        assert_eq!(cut.len(), 1, "{name}: {cut:?}\n{summary}");
        let (frames, python) = cut[0];
        assert!(
            python > 200 && frames <= gpuperf_unwind::MAX_FRAMES,
            "{name}: {python} Python frames of {frames}"
        );
    }
}
