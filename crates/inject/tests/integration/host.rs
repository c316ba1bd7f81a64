//! The library loaded the way the CUDA driver loads it, into a C host program.

use std::collections::HashMap;
use std::path::Path;

use gpuperf_merge::model::{ActivityKind, DropSource, MemcpyKind, PeerDevices, Record};

use crate::support::{
    HostRun, Sim, inject_lib, notes_beside_simulated, read_logs, read_traces, run_host, wheels,
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

/// Every kind of call the recorder links to its GPU work, on the simulated
/// runtime: launches on two threads, a graph launch, the program's own driver
/// launch, copies to the host and between devices, syncs of a stream and of a
/// device; each record keeps the API call that made it, on the app's clock,
/// and CUPTI's dropped count reaches the trace.
#[test]
fn sim_cupti_plumbing_links_every_record_to_its_call() {
    let Some(sim) = Sim::find() else { return };
    let (out, dir) = sim.run("plumbing", &[("GPUSIM_CUPTI_DROPPED", Path::new("5"))]);
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
    let name = |c: u32| strings.get(apis[&c].name).to_owned();
    let mut calls: HashMap<String, usize> = HashMap::new();
    for c in apis.keys() {
        *calls.entry(name(*c)).or_default() += 1;
    }
    // The driver calls the runtime makes are not recorded, the program's own
    // is; cudaGetLastError never is.
    assert_eq!(calls.get("cuLaunchKernel"), Some(&1), "{calls:?}");
    assert_eq!(calls.get("cudaGetLastError"), None, "{calls:?}");
    assert_eq!(calls.get("cudaLaunchKernel"), Some(&16), "{calls:?}");

    // By kernel name: (calling API, its tid, graph id, graph node id).
    let mut kernels: HashMap<String, Vec<(String, u32, u32, u64)>> = HashMap::new();
    let mut copies = Vec::new();
    let mut syncs = Vec::new();
    let mut dropped = 0;
    for r in &records {
        match r {
            Record::Activity(a) => {
                assert!(
                    apis.contains_key(&a.correlation_id),
                    "{a:?} has no API record"
                );
                assert!(before <= a.start_ns && a.end_ns <= after, "{a:?}");
                let api = name(a.correlation_id);
                match a.kind {
                    ActivityKind::Kernel { name, .. } => kernels
                        .entry(strings.get(name).to_owned())
                        .or_default()
                        .push((
                            api,
                            apis[&a.correlation_id].tid,
                            a.graph_id.unwrap_or(0),
                            a.graph_node_id.unwrap_or(0),
                        )),
                    ActivityKind::Memcpy { bytes, kind, peer } => {
                        copies.push((api, kind, bytes, a.device, peer))
                    }
                    ActivityKind::Sync { .. } => syncs.push((api, a.device, a.stream)),
                    _ => {}
                }
            }
            Record::Dropped(d) if d.source == DropSource::CuptiActivity => dropped += d.count,
            _ => {}
        }
    }
    let launch = |tid| ("cudaLaunchKernel".to_owned(), tid, 0, 0);
    assert_eq!(kernels["_Z6kernelPfi"][..10], vec![launch(main_tid); 10]);
    assert_eq!(kernels["_Z6kernelPfi"].len(), 11, "one on device 1");
    assert_eq!(kernels["_Z6workerv"], vec![launch(worker_tid); 5]);
    assert_eq!(
        kernels["_Z6duringv"],
        [("cuLaunchKernel".to_owned(), main_tid, 0, 0)]
    );
    // A graph launch: three kernels, one call, one graph, three nodes.
    let graph = &kernels["_Z5afterv"];
    assert_eq!(graph.len(), 3, "{graph:?}");
    let mut nodes: Vec<u64> = graph.iter().map(|k| k.3).collect();
    nodes.sort();
    nodes.dedup();
    assert!(
        graph
            .iter()
            .all(|k| k.0 == "cudaGraphLaunch" && k.2 != 0 && k.2 == graph[0].2)
            && nodes.len() == 3
            && nodes[0] != 0,
        "{graph:?}"
    );
    assert_eq!(
        copies,
        [
            (
                "cudaMemcpy".to_owned(),
                MemcpyKind::DtoH,
                1 << 20,
                Some(0),
                None
            ),
            (
                "cudaMemcpyPeer".to_owned(),
                MemcpyKind::PtoP,
                4096,
                Some(0),
                Some(PeerDevices { src: 0, dst: 1 })
            )
        ]
    );
    // The device of a sync comes from its context; a device sync has no stream.
    let stream_sync = syncs
        .iter()
        .find(|s| s.0 == "cudaStreamSynchronize")
        .unwrap_or_else(|| panic!("{syncs:?}"));
    assert!(
        stream_sync.1 == Some(1) && stream_sync.2.is_some(),
        "{syncs:?}"
    );
    assert!(
        syncs.contains(&("cudaDeviceSynchronize".to_owned(), Some(1), None)),
        "{syncs:?}"
    );
    assert_eq!(dropped, 5);
    let log = read_logs(dir.path());
    assert!(log.contains(" nested driver calls ("), "{log}");
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
