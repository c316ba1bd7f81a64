//! A flush inside a CUDA callback (tests/data/host_reset.c: a device reset,
//! while the other device's context lives, or of the last context live) only
//! has CUPTI hand its buffers back; they wait for the flush thread, which
//! decodes them. So the reset's
//! thread allocates nothing for them: while the program's allocator refuses
//! the library everything on that thread, the program runs on unchanged
//! (before, decoding there aborted it) and no record is lost. The program
//! runs on the simulated CUDA runtime.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use gpuperf_merge::model::{ActivityKind, Record, StringTable};

use crate::support::{
    Sim, gcc, inject_lib, log_count, read_logs, read_traces, run_within, stdout_of,
};

fn host_reset(sim: &Sim) -> PathBuf {
    let flags = sim.cflags();
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    gcc("host_reset.c", "host_reset", &flags)
}

/// Runs host_reset in `mode` with `launches`, with the library (recording
/// into `dir`, its periodic flush too rare to take the reset's records) or
/// without it; with `env` set too (HOST_RESET_LAST: the reset destroys the
/// last context live).
fn run(sim: &Sim, dir: Option<&Path>, mode: &str, launches: u32, env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(host_reset(sim));
    match dir {
        Some(d) => c.arg(inject_lib()).env("GPUPERF_GPU_TRACE", d),
        None => c.arg("none"),
    };
    c.args([mode, &launches.to_string()])
        .env("GPUPERF_CUPTI_PATH", sim.cupti())
        // The longest period there is (60000 was refused, and 500 used): a
        // periodic flush running at the reset makes the reset skip its own
        // flush, and then nothing waits for the flush thread.
        .env("GPUPERF_FLUSH_MS", "10000")
        .envs(env.iter().copied());
    run_within(c, &format!("host_reset {mode}"), Duration::from_secs(120))
}

/// Kernels by name, and copies, in the trace.
fn counts(records: &[Record], strings: &StringTable) -> (usize, usize, usize, usize) {
    let (mut pending, mut after, mut other, mut copies) = (0, 0, 0, 0);
    for r in records {
        if let Record::Activity(a) = r {
            match a.kind {
                ActivityKind::Kernel { name, .. } => match strings.get(name) {
                    "_Z7pendingv" => pending += 1,
                    "_Z5afterv" => after += 1,
                    _ => other += 1,
                },
                ActivityKind::Memcpy { .. } => copies += 1,
                _ => {}
            }
        }
    }
    (pending, after, other, copies)
}

#[test]
fn sim_device_reset_while_malloc_refuses_the_library_loses_no_record() {
    reset_refused(false);
}

/// The same where the reset destroys the last context live: CUPTI's flush is
/// then forced (no flush can follow without a context), and its buffers wait
/// for the flush thread all the same (before, they were decoded there).
#[test]
fn sim_reset_of_the_last_context_while_malloc_refuses_the_library_loses_no_record() {
    reset_refused(true);
}

/// The last context's flush refused by CUPTI: the program runs on unchanged,
/// and the refusal, which may have cost records, is counted and noted with
/// CUPTI's reason.
///
/// The reset's own flush, just before, wakes the flush thread to decode what
/// it handed back. That thread made a CUPTI flush of its own then, under the
/// flush lock, and the last context's flush, finding the lock held, was
/// skipped (CI, now and then). Woken within its period it now makes no CUPTI
/// call, and the last context's flush waits for its decoding.
#[test]
fn sim_flush_refused_inside_the_last_contexts_destruction_is_noted() {
    let Some(sim) = Sim::find() else { return };
    let env = [
        ("HOST_RESET_LAST", "1"),
        (
            "GPUSIM_CUPTI_FORCED_FLUSH_ERROR",
            "CUPTI_ERROR_INVALID_OPERATION",
        ),
    ];
    let plain = run(&sim, None, "plain", 100, &env);
    let dir = tempfile::tempdir().unwrap();
    let out = run(&sim, Some(dir.path()), "plain", 100, &env);
    let log = read_logs(dir.path());
    assert_eq!(stdout_of(&out, &log), stdout_of(&plain, ""), "{log}");
    let (records, _, _) = read_traces(dir.path());
    let note = records
        .iter()
        .find_map(|r| match r {
            Record::Note(n) if n.text.contains("inside CUDA callbacks") => Some(n.text.as_str()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no note of the refused flush\n{log}"));
    assert!(
        note.starts_with("1 flushes inside CUDA callbacks (a context destroyed, a device reset) refused by CUPTI, the last: cuptiActivityFlushAll")
            && note.contains("CUPTI_ERROR_INVALID_OPERATION"),
        "{note}"
    );
    assert!(log.contains(note), "{log}");
    assert!(!log.contains("was skipped"), "{log}");
}

fn reset_refused(last: bool) {
    let Some(sim) = Sim::find() else { return };
    let launches = 3000;
    let env: &[(&str, &str)] = if last {
        &[("HOST_RESET_LAST", "1")]
    } else {
        &[]
    };
    let plain = run(&sim, None, "refuse", launches, env);
    let expected = stdout_of(&plain, "");
    let mut seen = Vec::new();
    for mode in ["refuse", "plain"] {
        let dir = tempfile::tempdir().unwrap();
        let out = run(&sim, Some(dir.path()), mode, launches, env);
        let log = read_logs(dir.path());
        assert_eq!(stdout_of(&out, &log), expected, "{mode}\n{log}");
        let (records, strings, _) = read_traces(dir.path());
        let n = counts(&records, &strings);
        let launches = launches as usize;
        assert_eq!(n, (launches, launches, 0, launches), "{mode}\n{log}");
        // The reset's buffers waited for the flush thread.
        assert!(
            log_count(
                &log,
                " buffers from flushes in callbacks decoded by the flush thread"
            ) > 0,
            "{log}"
        );
        assert!(log.contains("(0 in the callback: the queue full"), "{log}");
        seen.push(n);
    }
    assert_eq!(seen[0], seen[1]);
}
