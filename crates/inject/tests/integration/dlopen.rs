//! A library loaded after CUDA started, whose first launches are captured
//! while the program's malloc refuses (tests/data/host_dlopen_refuse.c): the
//! table of the new module cannot be built, which is counted and noted, the
//! program runs on unchanged, and its later launches have the library in
//! their stacks.

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use gpuperf_merge::model::{Record, StackFrame};

use crate::support::{Sim, gcc, inject_lib, log_count, read_logs, read_traces, run_within};

/// The bytes of a module table's region index (8192 `u32` slots), which the
/// mock allocator refuses: the one allocation of its size a table needs.
const SLOTS_BYTES: &str = "32768";

/// Runs host_dlopen_refuse on the simulated runtime, with the library
/// (recording into `dir`) or without it.
fn run(sim: &Sim, dir: Option<&Path>, lib: &Path, launches: u32) -> Output {
    let flags = sim.cflags();
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let mut c = Command::new(gcc(
        "host_dlopen_refuse.c",
        "host_dlopen_refuse",
        &[&flags[..], &["-ldl"]].concat(),
    ));
    match dir {
        Some(d) => c.arg(inject_lib()).env("GPUPERF_GPU_TRACE", d),
        None => c.arg("none"),
    };
    c.arg(lib)
        .args([SLOTS_BYTES, &launches.to_string()])
        .env("GPUPERF_CUPTI_PATH", sim.cupti())
        // No periodic flush: only the launching thread reads the new module.
        .env("GPUPERF_FLUSH_MS", "10000");
    run_within(c, "host_dlopen_refuse", Duration::from_secs(60))
}

#[test]
fn sim_dlopened_library_whose_table_cannot_be_allocated_runs_on_and_is_read_later() {
    let Some(sim) = Sim::find() else { return };
    let lib = gcc(
        "reuse_lib.c",
        "liblate_refused.so",
        &["-shared", "-fPIC", "-DLIB_FN=in_late"],
    );
    let launches = 4;
    let dir = tempfile::tempdir().unwrap();
    let out = run(&sim, Some(dir.path()), &lib, launches);
    let log = read_logs(dir.path());
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(3), "{out:?}\n{log}");
    let plain = run(&sim, None, &lib, launches);
    assert_eq!(plain.status.code(), Some(3), "{plain:?}");
    assert_eq!(String::from_utf8_lossy(&plain.stdout), stdout);

    // Each refused launch's capture tried once, and was refused.
    let what = " tables of modules loaded since the last (a dlopen) not built";
    assert_eq!(log_count(&log, what), u64::from(launches), "{log}");
    let (records, strings, _) = read_traces(dir.path());
    assert!(
        records.iter().any(|r| matches!(r, Record::Note(n)
            if n.text.starts_with("stacks short of memory:") && n.text.contains(what))),
        "no note of the tables not built\n{log}"
    );
    // Every launch has its stack; the later ones' run through the library.
    let lib_ids: Vec<u32> = records
        .iter()
        .filter_map(|r| match r {
            Record::Module(m) if Path::new(&m.path) == lib => Some(m.id),
            _ => None,
        })
        .collect();
    let through_lib = |stack: u32| {
        records.iter().any(|r| match r {
            Record::Stack(s) if s.id == stack => s.frames.iter().any(
                |f| matches!(f, StackFrame::Native { module, .. } if lib_ids.contains(module)),
            ),
            _ => false,
        })
    };
    let mut last_api = None;
    let mut stacks = Vec::new();
    for r in &records {
        match r {
            Record::Api(a) => {
                last_api = (strings.get(a.name) == "cudaLaunchKernel").then_some(a.correlation_id);
            }
            Record::CallStack(c) if Some(c.correlation_id) == last_api => {
                stacks.push((c.correlation_id, through_lib(c.stack)));
            }
            _ => {}
        }
    }
    stacks.sort();
    let through: Vec<bool> = stacks.into_iter().map(|(_, t)| t).collect();
    let n = launches as usize;
    let want: Vec<bool> = (0..3 * n).map(|i| i >= 2 * n).collect();
    assert_eq!(through, want, "{log}");
}
