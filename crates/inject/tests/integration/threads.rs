//! A thread's first recorded call (tests/data/host_threads.c): its shard
//! comes from the spares of threads that exited, or is allocated then,
//! fallibly; a refusal is counted, never an abort of the program. The
//! programs run on the simulated CUDA runtime; their kernels are told apart by
//! name.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use gpuperf_merge::model::{ActivityKind, Record, StringTable};

use crate::support::{
    Sim, gcc, inject_lib, log_count, read_logs, read_traces, run_within, stdout_of,
};

/// The size of the library's `Shard` (its allocation on a thread's first
/// recorded call) in this build, which the mock allocator refuses.
const SHARD_BYTES: &str = "96";

fn host_threads(sim: &Sim) -> PathBuf {
    let mut flags = sim.cflags();
    flags.push("-lpthread".to_owned());
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    gcc("host_threads.c", "host_threads", &flags)
}

/// Runs host_threads with `args` on the simulated runtime, with the library
/// (recording into `dir`, flushing every 50 ms) or without it.
fn run(sim: &Sim, dir: Option<&Path>, args: &[&str]) -> Output {
    let mut c = Command::new(host_threads(sim));
    match dir {
        Some(d) => c.arg(inject_lib()).env("GPUPERF_GPU_TRACE", d),
        None => c.arg("none"),
    };
    c.args(args)
        .env("GPUPERF_CUPTI_PATH", sim.cupti())
        .env("GPUPERF_FLUSH_MS", "50");
    run_within(
        c,
        &format!("host_threads {}", args[0]),
        Duration::from_secs(120),
    )
}

/// The kernels named `name`: their correlation ids.
fn kernels(records: &[Record], strings: &StringTable, name: &str) -> HashSet<u32> {
    records
        .iter()
        .filter_map(|r| match r {
            Record::Activity(a) => match a.kind {
                ActivityKind::Kernel { name: n, .. } if strings.get(n) == name => {
                    Some(a.correlation_id)
                }
                _ => None,
            },
            _ => None,
        })
        .collect()
}

/// The `cudaLaunchKernel` records of `kernels`, by thread.
fn launches_by_thread(
    records: &[Record],
    strings: &StringTable,
    kernels: &HashSet<u32>,
) -> HashMap<u32, usize> {
    let mut by_thread: HashMap<u32, usize> = HashMap::new();
    for r in records {
        if let Record::Api(a) = r
            && strings.get(a.name) == "cudaLaunchKernel"
            && kernels.contains(&a.correlation_id)
        {
            *by_thread.entry(a.tid).or_default() += 1;
        }
    }
    by_thread
}

/// The thread names written, with their thread ids.
fn thread_names(records: &[Record]) -> HashMap<String, u32> {
    records
        .iter()
        .filter_map(|r| match r {
            Record::Thread(t) => Some((t.name.clone(), t.tid)),
            _ => None,
        })
        .collect()
}

/// 200 threads, 20 at a time in 10 rounds with a few flushes between them,
/// each making 10 launches and renaming itself before it exits: the shards
/// of a round's threads serve the next round's (not one allocated per
/// thread), every launch has its API record and kernel, and every thread's
/// names are written, the one it took just before its exit among them.
#[test]
fn sim_two_hundred_short_lived_threads_reuse_shards_and_lose_no_record() {
    let Some(sim) = Sim::find() else { return };
    let (rounds, threads, launches) = (10, 20, 10);
    let dir = tempfile::tempdir().unwrap();
    let args = [rounds, threads, launches, 300].map(|n| n.to_string());
    let args: Vec<&str> = std::iter::once("churn")
        .chain(args.iter().map(String::as_str))
        .collect();
    let out = run(&sim, Some(dir.path()), &args);
    let log = read_logs(dir.path());
    stdout_of(&out, &log);
    let (records, strings, _) = read_traces(dir.path());
    let churned = kernels(&records, &strings, "_Z5churnv");
    assert_eq!(churned.len(), rounds * threads * launches);
    let by_thread = launches_by_thread(&records, &strings, &churned);
    assert_eq!(by_thread.len(), rounds * threads, "{log}");
    assert!(
        by_thread.values().all(|&n| n == launches),
        "{by_thread:?}\n{log}"
    );
    let names = thread_names(&records);
    for r in 0..rounds {
        for i in 0..threads {
            let (first, last) = (format!("churn-{r}-{i}"), format!("exit-{r}-{i}"));
            let tid = names.get(&first);
            assert!(tid.is_some(), "no thread named {first}\n{log}");
            assert_eq!(names.get(&last), tid, "{last}\n{log}");
            assert!(by_thread.contains_key(tid.unwrap()));
        }
    }
    // One per thread of a round, and the main thread's; twice that leaves
    // room for a flush late between two rounds. Without reuse: 201.
    let made = log_count(&log, " thread shards allocated");
    assert!(made <= 2 * threads as u64 + 1, "{made}\n{log}");
    assert!(
        log_count(&log, " reused from threads that exited") >= 100,
        "{log}"
    );
}

/// Eight threads make their first CUDA calls while the program's malloc (a
/// mock of the allocator) refuses them blocks of the shard's size: their
/// calls are not recorded but counted, with the reason, in the log and in a
/// note, and the program runs on unchanged (before, the allocation aborted
/// it). With memory back, the same threads' next calls are recorded, their
/// names with them.
#[test]
fn sim_threads_whose_shard_cannot_be_allocated_run_on_and_record_later() {
    let Some(sim) = Sim::find() else { return };
    let (threads, launches) = (8, 20);
    let dir = tempfile::tempdir().unwrap();
    let args = ["refuse", SHARD_BYTES, "8", "20"];
    let out = run(&sim, Some(dir.path()), &args);
    let log = read_logs(dir.path());
    let stdout = stdout_of(&out, &log);
    let plain = run(&sim, None, &args);
    assert_eq!(stdout_of(&plain, ""), stdout);
    // Each launch is two calls, cudaLaunchKernel and the cuLaunchKernel it
    // makes, which without the outer call open is refused on its own.
    assert_eq!(
        log_count(&log, " calls not recorded for lack of memory"),
        2 * threads * launches,
        "the shard is no longer {SHARD_BYTES} bytes?\n{log}"
    );
    assert!(
        log.contains(&format!(
            "({}: their thread's shard of records could not be allocated)",
            2 * threads * launches
        )),
        "{log}"
    );
    let (records, strings, _) = read_traces(dir.path());
    assert!(
        records.iter().any(|r| matches!(r, Record::Note(n)
            if n.text.contains("CUDA calls were not recorded for lack of memory")
                && n.text.contains("their thread's shard of records could not be allocated"))),
        "no note of the calls not recorded\n{log}"
    );
    // The refused calls' GPU work is there, without API records.
    let early = kernels(&records, &strings, "_Z7refusedv");
    assert_eq!(early.len() as u64, threads * launches);
    assert!(launches_by_thread(&records, &strings, &early).is_empty());
    let later = kernels(&records, &strings, "_Z5afterv");
    let by_thread = launches_by_thread(&records, &strings, &later);
    let names = thread_names(&records);
    for i in 0..threads {
        let tid = names.get(&format!("refused-{i}"));
        assert!(tid.is_some(), "no thread refused-{i}\n{log}");
        assert_eq!(by_thread.get(tid.unwrap()), Some(&(launches as usize)));
    }
    assert_eq!(
        by_thread.values().sum::<usize>() as u64,
        (threads + 1) * launches
    );
}
