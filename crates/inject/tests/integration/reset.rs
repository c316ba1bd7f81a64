//! A flush inside a CUDA callback (tests/data/host_reset.c: a device reset
//! while the other device's context lives) only has CUPTI hand its buffers
//! back; they wait for the flush thread, which decodes them. So the reset's
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
/// without it.
fn run(sim: &Sim, dir: Option<&Path>, mode: &str, launches: u32) -> Output {
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
        .env("GPUPERF_FLUSH_MS", "10000");
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
    let Some(sim) = Sim::find() else { return };
    let launches = 3000;
    let plain = run(&sim, None, "refuse", launches);
    let expected = stdout_of(&plain, "");
    let mut seen = Vec::new();
    for mode in ["refuse", "plain"] {
        let dir = tempfile::tempdir().unwrap();
        let out = run(&sim, Some(dir.path()), mode, launches);
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
