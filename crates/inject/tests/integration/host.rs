//! The library loaded the way the CUDA driver loads it, into a C host program.

use std::collections::HashMap;
use std::path::Path;

use gpuperf_merge::model::{ActivityKind, ApiDomain, DropSource, MemcpyKind, PeerDevices, Record};

use crate::support::{
    HostRun, Sim, inject_lib, mock, notes_beside_simulated, read_logs, read_traces, run_host,
    wheels,
};

pub fn notes(records: &[Record]) -> Vec<String> {
    records
        .iter()
        .filter_map(|r| match r {
            Record::Note(n) => Some(n.text.clone()),
            _ => None,
        })
        .collect()
}

/// Runs the plain host with and without the library; everything the app shows
/// must be identical, and the trace must say why it is empty.
fn graceful(env: &[(&str, &Path)], why: &str) {
    graceful_with(&|inject, env| run_host(inject, "plain", env), env, why);
}

/// [`graceful`] for the host program on the simulated CUDA runtime.
fn graceful_sim(sim: &Sim, env: &[(&str, &Path)], why: &str) {
    graceful_with(&|inject, env| sim.run_host(inject, "plain", env), env, why);
}

fn graceful_with(run: &HostRun, env: &[(&str, &Path)], why: &str) {
    let dir = tempfile::tempdir().unwrap();
    let mut env = env.to_vec();
    env.push(("GPUPERF_GPU_TRACE", dir.path()));
    let without = run(None, &env);
    let with = run(Some(&inject_lib()), &env);
    assert_eq!(with.status.code(), Some(3));
    assert_eq!(with.status.code(), without.status.code());
    assert_eq!(
        String::from_utf8_lossy(&with.stdout),
        String::from_utf8_lossy(&without.stdout)
    );
    assert_eq!(String::from_utf8_lossy(&with.stderr), "");
    let (records, _, files) = read_traces(dir.path());
    assert_eq!(files, 1);
    assert!(
        matches!(records.first(), Some(Record::Process(_))),
        "{records:?}"
    );
    let notes = notes(&records);
    assert_eq!(notes.len(), 1, "{records:?}");
    assert!(notes[0].contains(why), "note {:?} lacks {why:?}", notes[0]);
    assert!(read_logs(dir.path()).contains(why));
}

#[test]
fn real_libcupti13_without_driver_leaves_the_app_unchanged() {
    let Some(w) = wheels() else { return };
    let lib = w.lib13.join("libcupti.so.13");
    graceful(&[("GPUPERF_CUPTI_PATH", &lib)], "cuptiSubscribe failed");
}

/// Confidential computing: CUPTI refuses, and the trace says so in plain words.
#[test]
fn sim_libcupti_refusing_confidential_computing_is_said_plainly() {
    let Some(sim) = Sim::find() else { return };
    graceful_sim(
        &sim,
        &[(
            "GPUSIM_CUPTI_SUBSCRIBE_ERROR",
            Path::new("CUPTI_ERROR_CONFIDENTIAL_COMPUTING_NOT_SUPPORTED"),
        )],
        "CUPTI_ERROR_CONFIDENTIAL_COMPUTING_NOT_SUPPORTED (CUPTI is unavailable while \
         confidential computing is on",
    );
}

#[test]
fn real_libcupti12_found_on_the_loader_path() {
    let Some(w) = wheels() else { return };
    graceful(&[("LD_LIBRARY_PATH", &w.lib12)], "cuptiSubscribe failed");
}

#[test]
fn missing_libcupti_is_reported_in_the_trace() {
    graceful(
        &[(
            "GPUPERF_CUPTI_PATH",
            Path::new("/nonexistent/libcupti.so.13"),
        )],
        "/nonexistent/libcupti.so.13",
    );
}

/// Another tool holds CUPTI (its one subscriber): the trace says so and the app
/// runs as without gpuperf.
#[test]
fn sim_busy_cupti_is_reported_and_the_app_unchanged() {
    let Some(sim) = Sim::find() else { return };
    graceful_sim(
        &sim,
        &[(
            "GPUSIM_CUPTI_SUBSCRIBE_ERROR",
            Path::new("CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED"),
        )],
        "another profiler",
    );
}

pub fn field<'a>(stdout: &'a str, key: &str) -> &'a str {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .unwrap_or_else(|| panic!("no {key:?} in {stdout}"))
        .trim()
}

#[test]
fn mock_cupti_plumbing_records_everything_with_exact_ids() {
    let Some(w) = wheels() else { return };
    let m = mock(&w);
    let dir = tempfile::tempdir().unwrap();
    plumbing(
        dir.path(),
        &[
            ("GPUPERF_CUPTI_PATH", &m),
            ("GPUPERF_GPU_TRACE", dir.path()),
        ],
    );
}

/// The simulated runtime's scene: launches on two threads and a copy, each with
/// its API record, on the app's CLOCK_MONOTONIC, with Linux thread ids; returns
/// the host's stdout.
pub fn sim_scene(sim: &Sim, env: &[(&str, &Path)]) -> (String, tempfile::TempDir) {
    let (out, dir) = sim.run("scene", env);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(
        out.status.code(),
        Some(3),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let before: u64 = field(&stdout, "clock before").parse().unwrap();
    let after: u64 = field(&stdout, "clock after").parse().unwrap();
    let main_tid: u32 = field(&stdout, "main tid").parse().unwrap();
    let worker_tid: u32 = field(&stdout, "worker tid").parse().unwrap();
    let (records, strings, files) = read_traces(dir.path());
    assert_eq!(files, 1);
    assert!(
        notes_beside_simulated(&records).is_empty(),
        "{:?}",
        notes(&records)
    );
    let mut apis = HashMap::new();
    for r in &records {
        if let Record::Api(a) = r {
            assert!(apis.insert(a.correlation_id, *a).is_none(), "{a:?}");
            // Timestamps are the app's own CLOCK_MONOTONIC.
            assert!(
                before <= a.start_ns && a.start_ns <= a.end_ns && a.end_ns <= after,
                "{a:?} not within {before}..{after}"
            );
        }
    }
    let mut kernels: HashMap<String, Vec<u32>> = HashMap::new();
    let mut copies = 0;
    for r in &records {
        if let Record::Activity(a) = r {
            assert!(
                before <= a.start_ns && a.start_ns <= a.end_ns && a.end_ns <= after,
                "{a:?} not within {before}..{after}"
            );
            let api = || {
                apis.get(&a.correlation_id)
                    .unwrap_or_else(|| panic!("{a:?} has no API record"))
            };
            match a.kind {
                ActivityKind::Kernel { name, .. } => {
                    assert_eq!(strings.get(api().name), "cudaLaunchKernel");
                    kernels
                        .entry(strings.get(name).to_owned())
                        .or_default()
                        .push(api().tid);
                }
                ActivityKind::Memcpy { kind, bytes, .. } => {
                    assert_eq!(strings.get(api().name), "cudaMemcpy");
                    assert_eq!((kind, bytes), (MemcpyKind::HtoD, 1024));
                    copies += 1;
                }
                _ => {}
            }
        }
    }
    assert_eq!(kernels["_Z6kernelPfi"], [main_tid; 10]);
    assert_eq!(kernels["_Z6workerv"], [worker_tid; 5]);
    assert_eq!(copies, 1);
    (stdout, dir)
}

#[test]
fn sim_cupti_scene_records_every_launch_and_copy_on_the_apps_clock() {
    let Some(sim) = Sim::find() else { return };
    let (_, dir) = sim_scene(&sim, &[]);
    let log = read_logs(dir.path());
    assert!(!log.contains("converted from CUPTI's own clock"), "{log}");
}

/// CUPTI refuses the timestamp callback: records keep its default clock
/// (CLOCK_REALTIME), and the pair of readings taken at start converts them, so
/// that everything is recorded, on CLOCK_MONOTONIC.
#[test]
fn sim_cupti_refusing_the_timestamp_callback_records_on_its_default_clock() {
    let Some(sim) = Sim::find() else { return };
    let (_, dir) = sim_scene(
        &sim,
        &[(
            "GPUSIM_CUPTI_TIMESTAMP_ERROR",
            Path::new("CUPTI_ERROR_NOT_SUPPORTED"),
        )],
    );
    let log = read_logs(dir.path());
    assert!(
        log.contains("GPU times converted from CUPTI's own clock"),
        "{log}"
    );
}

/// A second `InitializeInjection` (NVIDIA's sample guards against it) must leave
/// the live trace alone.
#[test]
fn sim_cupti_second_initialize_keeps_the_trace() {
    let Some(sim) = Sim::find() else { return };
    let (stdout, dir) = sim_scene(&sim, &[("HOST_INIT_TWICE", Path::new("1"))]);
    assert_eq!(field(&stdout, "host: second init returned"), "1");
    // The log of the recording in progress is intact too.
    let log = read_logs(dir.path());
    assert!(
        log.lines().all(|l| l.starts_with("gpuperf-inject[")),
        "{log}"
    );
    assert!(log.contains("recording to"), "{log}");
    assert!(
        log.contains("InitializeInjection called again; already initialized"),
        "{log}"
    );
}

/// Runs the host's "mock" scene and checks everything it plays reached the trace
/// in `dir`; returns the host's stdout.
pub fn plumbing(dir: &Path, env: &[(&str, &Path)]) -> String {
    let out = run_host(Some(&inject_lib()), "mock", env);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(
        out.status.code(),
        Some(3),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Thread ids are Linux TIDs, and only the needed callbacks are on.
    assert_eq!(field(&stdout, "thread id type"), "1");
    assert_eq!(
        field(&stdout, "enabled"),
        "launch=1 graph=1 memcpy=1 sync=1 culaunch=1 getlasterror=0 ctxgetcurrent=0"
    );
    let before: u64 = field(&stdout, "clock before").parse().unwrap();
    let after: u64 = field(&stdout, "clock after").parse().unwrap();
    let main_tid: u32 = field(&stdout, "main tid").parse().unwrap();
    let worker_tid: u32 = field(&stdout, "worker tid").parse().unwrap();

    let (records, strings, files) = read_traces(dir);
    assert_eq!(files, 1);
    assert!(notes(&records).is_empty(), "{:?}", notes(&records));
    let mut apis = HashMap::new();
    for r in &records {
        if let Record::Api(a) = r {
            assert!(
                apis.insert(a.correlation_id, *a).is_none(),
                "duplicate {a:?}"
            );
            // Timestamps are the app's own CLOCK_MONOTONIC.
            assert!(
                before <= a.start_ns && a.start_ns <= a.end_ns && a.end_ns <= after,
                "{a:?}"
            );
        }
    }
    // 100 + 50 launches, one graph launch, one runtime launch with a nested driver
    // call (recorded once), one driver launch, two copies, three syncs;
    // cudaGetLastError never.
    assert_eq!(apis.len(), 158);
    let name = |c: u32| strings.get(apis[&c].name).to_owned();
    assert_eq!(name(1), "cudaLaunchKernel");
    assert_eq!(name(2), "__cudaLaunchKernel");
    assert_eq!(name(2000), "cudaGraphLaunch");
    assert_eq!(name(3000), "cudaLaunchKernel");
    assert_eq!(name(3500), "cuLaunchKernel");
    assert_eq!(apis[&3500].domain, ApiDomain::Driver);
    assert_eq!(name(4000), "cudaMemcpy");
    assert_eq!(name(4500), "cudaMemcpyPeer");
    assert!(!apis.contains_key(&3001) && !apis.contains_key(&5000));
    for c in 1..=100 {
        assert_eq!(apis[&c].tid, main_tid);
    }
    for c in 1001..=1050 {
        assert_eq!(apis[&c].tid, worker_tid);
    }

    let mut kernels: HashMap<u32, Vec<(u32, u64)>> = HashMap::new();
    let mut copies = Vec::new();
    let mut syncs = HashMap::new();
    let mut dropped = 0;
    for r in &records {
        match r {
            Record::Activity(a) => match a.kind {
                ActivityKind::Kernel { .. } => {
                    assert!(before <= a.start_ns && a.end_ns <= after + 10_000, "{a:?}");
                    kernels
                        .entry(a.correlation_id)
                        .or_default()
                        .push((a.graph_id.unwrap_or(0), a.graph_node_id.unwrap_or(0)));
                }
                ActivityKind::Memcpy { bytes, kind, peer } => {
                    copies.push((a.correlation_id, kind, bytes, a.device, peer))
                }
                ActivityKind::Sync { .. } => {
                    syncs.insert(a.correlation_id, (a.device, a.stream));
                }
                _ => {}
            },
            Record::Dropped(d) if d.source == DropSource::CuptiActivity => dropped += d.count,
            _ => {}
        }
    }
    // Every kernel has the API record of its launch.
    for c in kernels.keys() {
        assert!(
            apis.contains_key(c),
            "kernel with correlation id {c} has no API record"
        );
    }
    assert_eq!(kernels.len(), 153);
    assert_eq!(kernels[&2000], [(7, 1), (7, 2), (7, 3)]);
    // The nested driver call's kernel is charged to the runtime call.
    assert_eq!(kernels[&3000].len(), 1);
    assert_eq!(
        copies,
        [
            (4000, MemcpyKind::DtoH, 1 << 20, Some(0), None),
            (
                4500,
                MemcpyKind::PtoP,
                4096,
                Some(0),
                Some(PeerDevices { src: 0, dst: 1 })
            )
        ]
    );
    // The device of a sync comes from its context; a context CUPTI never
    // announced leaves it unknown, never device 65535.
    assert_eq!(syncs[&4600], (Some(2), Some(9)));
    assert_eq!(
        syncs[&4700],
        (Some(2), None),
        "a context sync has no stream"
    );
    assert_eq!(syncs[&4800], (None, Some(3)));
    assert_eq!(dropped, 5);
    let log = read_logs(dir);
    assert!(
        log.contains("1 nested driver calls (1 activities charged"),
        "{log}"
    );
    stdout
}

/// SIGKILL skips every exit path: what the periodic flush wrote before it stays.
#[test]
fn sim_cupti_sigkill_keeps_records_older_than_the_flush_period() {
    let Some(sim) = Sim::find() else { return };
    let (out, dir) = sim.run("kill", &[("GPUPERF_FLUSH_MS", Path::new("200"))]);
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(out.status.signal(), Some(9));
    let (records, strings, _) = read_traces(dir.path());
    let launches = records
        .iter()
        .filter(|r| matches!(r, Record::Api(a) if strings.get(a.name) == "cudaLaunchKernel"))
        .count();
    let kernels = records
        .iter()
        .filter(
            |r| matches!(r, Record::Activity(a) if matches!(a.kind, ActivityKind::Kernel { .. })),
        )
        .count();
    assert_eq!((launches, kernels), (100, 100));
}
