//! The recorder against CUPTI behaviour that a real driver shows and a naive
//! client gets wrong, played by the simulated CUPTI and its faults (failed
//! start-up, fatal errors, corrupt records, late buffers, capture windows,
//! flushes with kernels in flight, libcupti selection and fallback, another
//! CUPTI client in the same process, CUPTI's internal lock).

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use gpuperf_merge::model::{ActivityKind, DropSource, Record, StringTable};

use crate::host::{field, sim_scene};
use crate::support::{Sim, inject_lib, notes_beside_simulated, read_logs, read_traces};

/// Kernel records by correlation id: (start, end).
fn kernels(records: &[Record]) -> HashMap<u32, (u64, u64)> {
    let mut k = HashMap::new();
    for r in records {
        if let Record::Activity(a) = r
            && let ActivityKind::Kernel { .. } = a.kind
        {
            assert!(
                k.insert(a.correlation_id, (a.start_ns, a.end_ns)).is_none(),
                "kernel {} twice",
                a.correlation_id
            );
        }
    }
    k
}

fn stdout_of(out: &std::process::Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(
        out.status.code(),
        Some(3),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
    stdout
}

/// A kernel that runs across many flush periods keeps its true end: periodic
/// flushes are not forced, the one forced flush comes at exit after the kinds
/// are disabled, and what it returns incomplete is counted, not written.
#[test]
fn sim_kernel_running_across_flush_periods_keeps_its_end() {
    let Some(sim) = Sim::find() else { return };
    let (out, dir) = sim.run("long", &[("GPUPERF_FLUSH_MS", Path::new("50"))]);
    let stdout = stdout_of(&out);
    let (records, strings, _) = read_traces(dir.path());
    let mut by_name: HashMap<&str, Vec<(u64, u64)>> = HashMap::new();
    for r in &records {
        if let Record::Activity(a) = r
            && let ActivityKind::Kernel { name, .. } = a.kind
        {
            assert!(
                a.start_ns != 0 && a.end_ns != 0 && a.end_ns >= a.start_ns,
                "{a:?}"
            );
            by_name
                .entry(strings.get(name))
                .or_default()
                .push((a.start_ns, a.end_ns));
        }
    }
    // Its whole duration by the simulation's cost model: 1 µs plus 400000000
    // blocks of 256 threads at 256 threads per ns.
    let long = &by_name["_Z4longv"];
    assert_eq!(long.len(), 1);
    assert_eq!(long[0].1 - long[0].0, 400_001_000, "{long:?}");
    assert_eq!(by_name["_Z6kernelPfi"].len(), 10);
    assert_eq!(by_name["_Z6behindv"].len(), 5);
    assert!(
        !by_name.contains_key("_Z7runningv"),
        "a kernel still running at exit has no end"
    );
    let incomplete: u64 = records
        .iter()
        .filter_map(|r| match r {
            Record::Dropped(d) if d.source == DropSource::Incomplete => Some(d.count),
            _ => None,
        })
        .sum();
    assert_eq!(incomplete, 1);

    // Flag 1 once, last, before every kind is disabled (whether disabling
    // first gives up records of work still running is undocumented); flag 0
    // before it.
    let events: Vec<&str> = field(&stdout, "cupti events").split(' ').collect();
    let forced: Vec<usize> = (0..events.len()).filter(|&i| events[i] == "F1").collect();
    assert_eq!(forced.len(), 1, "{events:?}");
    let last_flush = events.iter().rposition(|e| e.starts_with('F')).unwrap();
    assert_eq!(forced[0], last_flush, "{events:?}");
    let disabled: Vec<usize> = (0..events.len())
        .filter(|&i| events[i].starts_with('D'))
        .collect();
    assert!(
        !disabled.is_empty() && disabled.iter().all(|&i| i > forced[0]),
        "{events:?}"
    );
    assert!(
        events[..forced[0]].iter().filter(|e| **e == "F0").count() >= 3,
        "{events:?}"
    );
}

/// Two simulated libcuptis in one CUDA install: `libcupti.so.13`, whose
/// subscribe fails as the real one's does without a GPU, and `libcupti.so.12`
/// (API 28), which works: the library takes the next one.
#[test]
fn sim_libcupti_failing_to_subscribe_gives_way_to_the_next() {
    gives_way("CUPTI_ERROR_UNKNOWN", "CUPTI_ERROR_UNKNOWN");
}

/// A libcupti whose subscribe refuses with a code gpuperf did not expect (here
/// CUPTI's code for a virtualized device) gives way to the next one, and the
/// log says in plain words what the code means.
#[test]
fn sim_libcupti_refusing_with_another_code_gives_way_to_the_next() {
    gives_way(
        "CUPTI_ERROR_VIRTUALIZED_DEVICE_NOT_SUPPORTED",
        "CUPTI_ERROR_VIRTUALIZED_DEVICE_NOT_SUPPORTED (CUPTI does not support this virtualized GPU",
    );
}

/// Records the sim host's scene with a CUDA install whose `libcupti.so.13`
/// refuses to subscribe with `error` and whose `libcupti.so.12` works; the log
/// must say `said` of the first.
fn gives_way(error: &str, said: &str) {
    let Some(sim) = Sim::find() else { return };
    let root = tempfile::tempdir().unwrap();
    let home = sim.cuda_home(root.path(), &["libcupti.so.13", "libcupti.so.12"]);
    let refusal = format!("{error}@libcupti.so.13");
    let (_, dir) = sim_scene(
        &sim.unpinned(),
        &[
            ("CUDA_HOME", &home),
            ("GPUSIM_CUPTI_SUBSCRIBE_ERROR", Path::new(&refusal)),
            ("GPUSIM_CUPTI_VERSION", Path::new("28@libcupti.so.12")),
        ],
    );
    let log = read_logs(dir.path());
    let bad = home.join("lib64/libcupti.so.13");
    let good = home.join("lib64/libcupti.so.12");
    assert!(
        log.contains(&format!(
            "`{}` rejected: cuptiSubscribe failed: {said}",
            bad.display()
        )),
        "{log}"
    );
    assert!(
        log.contains(&format!("CUPTI API version 28 from `{}`", good.display())),
        "{log}"
    );
}

/// A CUDA 12.8 driver (the simulation's `GPUSIM_DRIVER_VERSION`): of a CUDA
/// install holding a libcupti 13 and a libcupti 12 (API 28), the 13 is skipped
/// before it is loaded, and the 12 records.
#[test]
fn sim_libcupti_newer_than_the_driver_is_skipped() {
    let Some(sim) = Sim::find() else { return };
    let root = tempfile::tempdir().unwrap();
    let home = sim.cuda_home(root.path(), &["libcupti.so.13", "libcupti.so.12"]);
    let (_, dir) = sim_scene(
        &sim.unpinned(),
        &[
            ("CUDA_HOME", &home),
            ("GPUSIM_DRIVER_VERSION", Path::new("12080")),
            ("GPUSIM_CUPTI_VERSION", Path::new("28@libcupti.so.12")),
        ],
    );
    let log = read_logs(dir.path());
    let new = home.join("lib64/libcupti.so.13");
    let old = home.join("lib64/libcupti.so.12");
    assert!(
        log.contains(&format!(
            "`{}` rejected: CUDA 13 is newer than the driver (CUDA 12.8)",
            new.display()
        )),
        "{log}"
    );
    assert!(log.contains("driver: CUDA 12.8"), "{log}");
    assert!(
        log.contains(&format!("CUPTI API version 28 from `{}`", old.display())),
        "{log}"
    );
}

/// torch.profiler (Kineto) started later in the same process: its subscribe
/// fails, it registers its own buffers and clock anyway, and disables the kinds
/// when it stops. The trace must say so.
#[test]
fn sim_second_cupti_client_taking_over_is_noted() {
    let Some(sim) = Sim::find() else { return };
    let (out, dir) = sim.run("takeover", &[("GPUPERF_FLUSH_MS", Path::new("50"))]);
    let stdout = stdout_of(&out);
    // CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED, ignored as Kineto does.
    assert_eq!(field(&stdout, "second subscribe"), "39");
    assert_ne!(field(&stdout, "second client got"), "0 bytes");
    let (records, strings, _) = read_traces(dir.path());
    assert_eq!(launch_calls(&records, &strings), 150);
    assert_eq!(
        kernel_names(&records, &strings),
        [("_Z6kernelPfi".to_owned(), 100)]
    );
    assert_eq!(
        notes_beside_simulated(&records),
        [
            "GPU activity stopped after 100 launches, copies and memsets: another CUPTI client (e.g. torch.profiler) took over"
        ]
    );
}

/// A second client that only registers its own timestamp clock: the records
/// that reach us are not on CLOCK_MONOTONIC, so they are dropped and noted.
#[test]
fn sim_second_cupti_client_changing_the_clock_is_noted() {
    let Some(sim) = Sim::find() else { return };
    let (out, dir) = sim.run(
        "takeover",
        &[
            ("GPUPERF_FLUSH_MS", Path::new("50")),
            ("HOST_TAKEOVER", Path::new("clock")),
        ],
    );
    stdout_of(&out);
    let (records, strings, _) = read_traces(dir.path());
    assert_eq!(launch_calls(&records, &strings), 120);
    assert_eq!(
        kernel_names(&records, &strings),
        [("_Z6kernelPfi".to_owned(), 100)]
    );
    assert_eq!(
        notes_beside_simulated(&records),
        [
            "GPU activity stopped after 100 launches, copies and memsets: another CUPTI client (e.g. torch.profiler) took over"
        ]
    );
    let log = read_logs(dir.path());
    assert!(
        log.contains("20 activity records not on CLOCK_MONOTONIC"),
        "{log}"
    );
}

/// The number of `cudaLaunchKernel` API records.
fn launch_calls(records: &[Record], strings: &StringTable) -> usize {
    records
        .iter()
        .filter(|r| matches!(r, Record::Api(a) if strings.get(a.name) == "cudaLaunchKernel"))
        .count()
}

/// The kernel records by name, sorted: (name, count).
fn kernel_names(records: &[Record], strings: &StringTable) -> Vec<(String, usize)> {
    let mut n: HashMap<String, usize> = HashMap::new();
    for r in records {
        if let Record::Activity(a) = r
            && let ActivityKind::Kernel { name, .. } = a.kind
        {
            *n.entry(strings.get(name).to_owned()).or_default() += 1;
        }
    }
    let mut v: Vec<_> = n.into_iter().collect();
    v.sort();
    v
}

/// CUPTI's internal lock is held while its thread delivers buffers, while it
/// runs resource callbacks and cudaDeviceReset, and is taken again by
/// cuptiActivityGetNumDroppedRecords and cuptiActivityFlushAll (the simulated
/// CUPTI does all that with GPUSIM_CUPTI_WORKER_US). Launches on several
/// threads while another resets its device must not deadlock; the test fails
/// by timeout if they do.
fn lock_stress(teardown_us: &str) {
    let Some(sim) = Sim::find() else { return };
    let dir = tempfile::tempdir().unwrap();
    let env = [
        ("GPUPERF_GPU_TRACE", dir.path()),
        ("GPUPERF_FLUSH_MS", Path::new("50")),
        ("GPUSIM_CUPTI_WORKER_US", Path::new("100")),
        ("HOST_TEARDOWN_US", Path::new(teardown_us)),
    ];
    let out = sim.run_host_with(
        Some(&inject_lib()),
        "stress",
        &["3000"],
        &env,
        Duration::from_secs(60),
    );
    let stdout = stdout_of(&out);
    let made: usize = stdout
        .split("stress launches ")
        .nth(1)
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("{stdout}"));
    let (records, strings, _) = read_traces(dir.path());
    let launches = records
        .iter()
        .filter(|r| matches!(r, Record::Api(a) if strings.get(a.name) == "cudaLaunchKernel"))
        .count();
    let k = kernels(&records);
    assert!(launches > 1000, "{launches}");
    assert_eq!(launches, made, "{}", read_logs(dir.path()));
    assert_eq!(k.len(), launches);
}

/// CUPTI's thread holds its lock while it hands a buffer over (and waits for
/// the sink), while the flush thread, holding the sink, asks for dropped
/// counts; resets are rare.
#[test]
fn sim_cupti_lock_stress_buffer_delivery_does_not_deadlock() {
    lock_stress("2000");
}

/// Device resets flush from inside callbacks that run under CUPTI's lock,
/// while the flush thread waits for that lock in cuptiActivityFlushAll.
#[test]
fn sim_cupti_lock_stress_teardown_flushes_do_not_deadlock() {
    lock_stress("500");
}

/// A start that fails after cuptiSubscribe (here: one callback id refused)
/// leaves no subscriber and no enabled kind, so other tools can use CUPTI.
#[test]
fn sim_failed_start_leaves_cupti_unsubscribed_and_disabled() {
    let Some(sim) = Sim::find() else { return };
    // The runtime domain's cudaLaunchKernel_v7000.
    let (out, dir) = sim.run(
        "probe",
        &[("GPUSIM_CUPTI_REFUSE_CALLBACK", Path::new("2:211"))],
    );
    let stdout = stdout_of(&out);
    assert_eq!(
        field(&stdout, "subscribed"),
        "0 kinds 0 callbacks 0",
        "{stdout}"
    );
    let (records, _, _) = read_traces(dir.path());
    let n = notes_beside_simulated(&records);
    assert_eq!(n.len(), 1, "{n:?}");
    assert!(n[0].contains("cuptiEnableCallback failed"), "{n:?}");
}

/// CUPTI reports a fatal error and stops itself (it finalizes, as documented):
/// the trace says so, and keeps what was recorded before.
#[test]
fn sim_cupti_fatal_error_is_noted() {
    let Some(sim) = Sim::find() else { return };
    let (out, dir) = sim.run("fatal", &[("GPUSIM_CUPTI_FATAL_AFTER", Path::new("10"))]);
    stdout_of(&out);
    let (records, strings, _) = read_traces(dir.path());
    let names: Vec<&str> = records
        .iter()
        .filter_map(|r| match r {
            Record::Activity(a) => match a.kind {
                ActivityKind::Kernel { name, .. } => Some(strings.get(name)),
                _ => None,
            },
            _ => None,
        })
        .collect();
    assert_eq!(names, ["_Z6kernelPfi"; 10]);
    assert_eq!(
        notes_beside_simulated(&records),
        [
            "CUPTI stopped itself after a fatal error (CUPTI_ERROR_UNKNOWN): simulated fatal error; GPU activity after it is missing"
        ]
    );
}

/// A record CUPTI cannot parse (cuptiActivityGetNextRecord fails with
/// CUPTI_ERROR_INVALID_KIND) ends its buffer's walk: what came before is kept,
/// and the loss is noted.
#[test]
fn sim_corrupt_record_cuts_its_buffer_short_and_is_noted() {
    let Some(sim) = Sim::find() else { return };
    let (out, dir) = sim.run("plain", &[("GPUSIM_CUPTI_INVALID_RECORD", Path::new("10"))]);
    stdout_of(&out);
    let (records, _, _) = read_traces(dir.path());
    assert_eq!(kernels(&records).len(), 9);
    let n = notes_beside_simulated(&records);
    assert_eq!(n.len(), 1, "{n:?}");
    assert!(
        n[0].starts_with(
            "1 activity buffers were cut short by CUPTI (first: cuptiActivityGetNextRecord: \
             CUPTI_ERROR_INVALID_KIND after "
        ),
        "{n:?}"
    );
}

/// A buffer CUPTI hands back after the final flush (its worker racing the
/// exit) is counted, never written into the closed trace.
#[test]
fn sim_buffer_after_the_final_flush_is_counted_not_written() {
    let Some(sim) = Sim::find() else { return };
    let (out, dir) = sim.run("plain", &[("GPUSIM_CUPTI_LATE_BUFFER", Path::new("1"))]);
    stdout_of(&out);
    let (records, _, _) = read_traces(dir.path());
    assert_eq!(kernels(&records).len(), 10);
    assert!(!kernels(&records).contains_key(&0x7fff_ffff));
    let log = read_logs(dir.path());
    assert!(
        log.contains("1 activity records arrived after the trace was closed"),
        "{log}"
    );
}

/// Large allocations fail while the program launches from eight new threads
/// (as when the address space is full): the 4 MiB buffers cannot be
/// allocated, and CUPTI gets reserve buffers instead, or the discard buffer,
/// whose loss is counted. Here the simulated CUPTI of API 26
/// (`GPUSIM_CUPTI_VERSION=26`: a null buffer aborts it, as CUPTI before API 27
/// could), where each runtime launch also makes a nested driver call. The new
/// threads' stacks are captured, but their kept walks' buffers cannot be
/// allocated either: counted, never an abort of the program (as the first
/// allocation of them did).
#[test]
fn sim_buffers_from_the_reserve_when_memory_runs_out() {
    let Some(sim) = Sim::find() else { return };
    let (out, dir) = sim.run("oom", &[("GPUSIM_CUPTI_VERSION", Path::new("26"))]);
    let stdout = stdout_of(&out);
    reserve_used(&stdout, dir.path());
    let log = read_logs(dir.path());
    assert!(
        log_count(&log, " walks not kept for lack of memory") > 0,
        "{log}"
    );
}

/// The same where every allocation of 16 KiB and more fails: the new threads'
/// capture state cannot be built (as their first capture did, aborting the
/// program, which runs to its end without gpuperf): their captures are
/// skipped and counted, the program's output and exit code unchanged.
#[test]
fn sim_capture_state_skipped_when_16_kib_cannot_be_allocated() {
    let Some(sim) = Sim::find() else { return };
    let env = [
        ("GPUSIM_CUPTI_VERSION", Path::new("26")),
        ("HOST_REFUSE_BYTES", Path::new("16384")),
    ];
    let (out, dir) = sim.run("oom", &env);
    let stdout = stdout_of(&out);
    reserve_used(&stdout, dir.path());
    let log = read_logs(dir.path());
    assert!(log_count(&log, " skipped for lack of memory") > 0, "{log}");
    let plain = sim.run_host(None, "oom", &env);
    assert_eq!(stdout_of(&plain), stdout);
}

/// Threads whose first CUDA calls come while malloc refuses blocks of 1.5
/// to 4 KiB: the list of open calls the library allocates for each thread
/// (1.75 KiB) is refused, and the program runs on unchanged, its calls
/// counted as not recorded and named in a note. (Blocks of 4 KiB and more
/// still come: glibc allocates the simulated CUPTI's thread-local data, 4
/// KiB, at each thread's first access, and aborts when it cannot.)
#[test]
fn sim_threads_whose_call_list_cannot_be_allocated_run_on() {
    let Some(sim) = Sim::find() else { return };
    let env = [
        ("GPUSIM_CUPTI_VERSION", Path::new("26")),
        ("HOST_REFUSE_BYTES", Path::new("1536")),
        ("HOST_REFUSE_BELOW", Path::new("4096")),
    ];
    let (out, dir) = sim.run("oom", &env);
    let stdout = stdout_of(&out);
    assert!(stdout.contains("oom launches done"), "{stdout}");
    let log = read_logs(dir.path());
    assert!(
        log_count(&log, " calls not recorded for lack of memory") > 0,
        "{log}"
    );
    // The merge's summary reads the reason from the trace.
    let (records, _, _) = read_traces(dir.path());
    assert!(
        records.iter().any(|r| matches!(r, Record::Note(n)
            if n.text.contains("CUDA calls were not recorded for lack of memory"))),
        "no note of the calls not recorded"
    );
    let plain = sim.run_host(None, "oom", &env);
    assert_eq!(stdout_of(&plain), stdout);
}

/// The number just before `what` in the log.
fn log_count(log: &str, what: &str) -> u64 {
    log.split(what)
        .next()
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count before {what:?}: {log}"))
}

/// The reserve was used, and the 100 kernels before the squeeze are kept
/// (counted by name).
fn reserve_used(stdout: &str, dir: &Path) {
    assert!(stdout.contains("oom launches done"), "{stdout}");
    let log = read_logs(dir);
    let reserve: u64 = log
        .split(" buffers from the reserve")
        .next()
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{log}"));
    assert!(reserve > 0, "{log}");
    let (records, strings, _) = read_traces(dir);
    let before = records
        .iter()
        .filter(|r| {
            matches!(r, Record::Activity(a) if matches!(a.kind,
                ActivityKind::Kernel { name, .. } if strings.get(name) == "_Z6kernelPfi"))
        })
        .count();
    assert_eq!(before, 100);
}

/// While a capture window is closed CUPTI makes no activity records: the
/// kinds are off (a launch outside the window costs CUPTI no record and
/// gpuperf no decoding). The window here never opens.
#[test]
fn sim_closed_capture_window_turns_the_activity_kinds_off() {
    let Some(sim) = Sim::find() else { return };
    let (out, _dir) = sim.run("probe", &[]);
    let stdout = stdout_of(&out);
    let open = field(&stdout, "subscribed");
    assert!(
        open.starts_with("1 ") && !open.contains("kinds 0 "),
        "no window: kinds on: {open}"
    );
    let (out, _dir) = sim.run(
        "probe",
        &[("GPUPERF_CAPTURE_RANGE", Path::new("cudaProfilerApi"))],
    );
    let stdout = stdout_of(&out);
    let closed = field(&stdout, "subscribed");
    assert!(closed.starts_with("1 kinds 0 "), "window closed: {closed}");
}
