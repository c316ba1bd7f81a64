//! Both timelines read back as Perfetto reads them, each format on its own:
//! the protobuf as the trace processor imports track events (a stable sort by
//! time; on each track an end closes the innermost open slice), the JSON as its
//! JSON importer does (a complete event that overlaps an open one on its thread
//! partially is dropped: `slice_drop_overlapping_complete_event`). Every
//! kernel's, copy's, memset's and sync's start and duration must read as the
//! trace has them, and every flow must end at the work of its call.
//!
//! The protobuf is also read by `protoc --decode` against Perfetto's published
//! `perfetto_trace.proto` (`tests/data/perfetto/`), which knows nothing of this
//! crate. Without `protoc` on `PATH` the protoc checks print "skipped: …" and
//! pass, unless `GPUPERF_REQUIRE_PROTOC=1`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use gpuperf_merge::join::stacks;
use gpuperf_merge::join::{self, Context, Match, Sink};
use gpuperf_merge::model::Symbolize;
use gpuperf_merge::model::{ActivityKind, Module, Record, StringTable};
use gpuperf_merge::read::cpu::CpuTrace;
use gpuperf_merge::read::driver::DriverTrace;
use gpuperf_merge::read::input::GpuInputs;
use gpuperf_merge::read::symbols::{Cached, SymbolCache};
use gpuperf_merge::write::folded::Folder;
use gpuperf_merge::write::perfetto::{self, proto};
use gpuperf_merge::write::{chrome, pprof};
use prost::Message as _;
use serde_json::Value;

use crate::imported::{A100, B200, V100, real};
use crate::{data, golden, scenario};

/// A slice or marker as the reader holds it.
#[derive(Clone, Debug)]
struct Slice {
    track: String,
    cat: String,
    name: String,
    start: u64,
    dur: u64,
    args: BTreeMap<String, Value>,
}

/// A timeline as Perfetto's importer reads it.
#[derive(Debug, Default)]
struct Read {
    slices: Vec<Slice>,
    instants: Vec<Slice>,
    /// (category, from slice, to slice).
    flows: Vec<(String, usize, usize)>,
    /// Complete events dropped for overlapping an open one partially (JSON).
    dropped: usize,
    /// What the importer would count as an error.
    errors: Vec<String>,
    processes: Vec<String>,
    tracks: Vec<TrackName>,
}

/// (process name, track name).
type TrackName = (String, String);

/// The GPU work of the input: (category, start, duration), sorted.
#[derive(Default)]
struct Work(Vec<(String, u64, u64)>);

impl Sink for Work {
    fn record(
        &mut self,
        _: &Context<'_>,
        rec: &Record,
        _: &Match<'_>,
    ) -> gpuperf_merge::Result<()> {
        if let Record::Activity(a) = rec {
            let cat = match a.kind {
                ActivityKind::Kernel { .. } => "kernel",
                ActivityKind::Memcpy { .. } => "memcpy",
                ActivityKind::Memset { .. } => "memset",
                ActivityKind::Sync { .. } => "sync",
                _ => "other",
            };
            self.0.push((cat.to_owned(), a.start_ns, a.duration_ns()));
        }
        Ok(())
    }
}

/// The outputs of one join: both timelines (with idle slices) and the work.
struct Run {
    json: String,
    pb: Vec<u8>,
    work: Vec<(String, u64, u64)>,
}

/// Runs the join once with both timeline writers, as `gpuperf merge` sets
/// them up (idle slices on).
fn run_with(gpu: &[PathBuf], cpu: Option<&Path>, driver: Option<&DriverTrace>) -> Run {
    let mut strings = StringTable::new();
    let inputs = GpuInputs::open(gpu, &mut strings).unwrap();
    let mut cpu = cpu.map(|p| CpuTrace::open(p).unwrap());
    run_on(inputs, &mut strings, cpu.as_mut(), driver, None)
}

fn run_on(
    inputs: GpuInputs,
    strings: &mut StringTable,
    cpu: Option<&mut CpuTrace>,
    driver: Option<&DriverTrace>,
    more: Option<(&mut Folder, &mut pprof::Builder)>,
) -> Run {
    let mut json = chrome::Writer::new(Vec::new()).unwrap().with_idle_slices();
    let mut pb = perfetto::Writer::new(Vec::new())
        .unwrap()
        .with_idle_slices();
    if let Some(d) = driver {
        json = json.with_driver(d.clone());
        pb = pb.with_driver(d.clone());
    }
    let mut work = Work::default();
    let mut sinks: Vec<&mut dyn Sink> = vec![&mut json, &mut pb, &mut work];
    if let Some((f, p)) = more {
        sinks.push(f);
        sinks.push(p);
    }
    join::merge(cpu, &inputs, strings, &join::Options::default(), &mut sinks).unwrap();
    drop(sinks);
    let mut w = work.0;
    w.sort();
    Run {
        json: String::from_utf8(json.into_inner()).unwrap(),
        pb: pb.into_inner(),
        work: w,
    }
}

/// µs (a JSON number, three decimals) → ns.
fn ns(v: &Value) -> i64 {
    (v.as_f64().unwrap() * 1000.0).round() as i64
}

/// Reads the JSON as Perfetto's JSON importer does: complete events sorted by
/// time per thread, each nested in the open one or dropped; `s`/`f` flow ends
/// bound to the slice enclosing their timestamp on their thread.
fn read_json(text: &str) -> Read {
    let doc: Value = serde_json::from_str(text).unwrap();
    let base = doc["otherData"]["time_base_ns"].as_i64().unwrap();
    let events = doc["traceEvents"].as_array().unwrap();
    let mut names: HashMap<(u64, u64), String> = HashMap::new();
    let mut r = Read::default();
    for e in events.iter().filter(|e| e["ph"] == "M") {
        let (pid, tid) = (e["pid"].as_u64().unwrap(), e["tid"].as_u64().unwrap());
        if tid > u64::from(u32::MAX) {
            r.errors.push(format!("tid {tid} does not fit 32 bits"));
        }
        match e["name"].as_str().unwrap() {
            "process_name" => {
                let n = e["args"]["name"].as_str().unwrap().to_owned();
                r.processes.push(n.clone());
                names.insert((pid, u64::MAX), n);
            }
            "thread_name" => {
                names.insert((pid, tid), e["args"]["name"].as_str().unwrap().to_owned());
            }
            _ => {}
        }
    }
    let track = |pid: u64, tid: u64| -> TrackName {
        (
            names[&(pid, u64::MAX)].clone(),
            names
                .get(&(pid, tid))
                .cloned()
                .unwrap_or_else(|| format!("thread {tid}")),
        )
    };
    let mut per_track: HashMap<(u64, u64), Vec<&Value>> = HashMap::new();
    for e in events {
        match e["ph"].as_str().unwrap() {
            "X" => per_track
                .entry((e["pid"].as_u64().unwrap(), e["tid"].as_u64().unwrap()))
                .or_default()
                .push(e),
            "i" => r.instants.push(slice(
                e,
                track(e["pid"].as_u64().unwrap(), e["tid"].as_u64().unwrap()),
                base,
            )),
            _ => {}
        }
    }
    // Slices kept per track, for the flows' binding.
    let mut kept: HashMap<(u64, u64), Vec<usize>> = HashMap::new();
    let mut kept_order: Vec<*const Value> = Vec::new();
    let mut keys: Vec<_> = per_track.keys().copied().collect();
    keys.sort();
    for key in keys {
        let mut v = per_track.remove(&key).unwrap();
        v.sort_by_key(|e| (ns(&e["ts"]), -ns(&e["dur"])));
        let mut open: Vec<i64> = Vec::new();
        r.tracks.push(track(key.0, key.1));
        for e in v {
            let (ts, end) = (ns(&e["ts"]), ns(&e["ts"]) + ns(&e["dur"]));
            while open.last().is_some_and(|&o| o <= ts) {
                open.pop();
            }
            if open.last().is_some_and(|&o| o < end) {
                r.dropped += 1;
                continue;
            }
            open.push(end);
            kept.entry(key).or_default().push(r.slices.len());
            kept_order.push(e as *const Value);
            r.slices.push(slice(e, track(key.0, key.1), base));
        }
    }
    // Flow ends in file order (the sort is stable): each binds to the slice
    // on top of its thread, the one written last if it spans the timestamp.
    let index: HashMap<*const Value, usize> = r
        .slices
        .iter()
        .enumerate()
        .map(|(i, _)| i)
        .zip(kept_order.iter().copied())
        .map(|(i, e)| (e, i))
        .collect();
    let mut last: HashMap<(u64, u64), usize> = HashMap::new();
    let mut starts: HashMap<u64, usize> = HashMap::new();
    for e in events {
        let key = || (e["pid"].as_u64().unwrap(), e["tid"].as_u64().unwrap());
        let ph = e["ph"].as_str().unwrap();
        if ph == "X" {
            if let Some(&i) = index.get(&(e as *const Value)) {
                last.insert(key(), i);
            }
            continue;
        }
        if ph != "s" && ph != "f" {
            continue;
        }
        let ts = (ns(&e["ts"]) + base) as u64;
        let on_top = last.get(&key()).copied().filter(|&i| {
            let s = &r.slices[i];
            s.start <= ts && ts <= s.start + s.dur
        });
        let bound = on_top.or_else(|| {
            kept.get(&key())?
                .iter()
                .copied()
                .filter(|&i| r.slices[i].start <= ts && ts <= r.slices[i].start + r.slices[i].dur)
                .max_by_key(|&i| (r.slices[i].start, std::cmp::Reverse(r.slices[i].dur)))
        });
        let id = e["id"].as_u64().unwrap();
        match (ph, bound) {
            ("s", Some(i)) => {
                starts.insert(id, i);
            }
            ("f", Some(to)) => match starts.get(&id) {
                Some(&from) => r
                    .flows
                    .push((e["cat"].as_str().unwrap().to_owned(), from, to)),
                None => r.errors.push(format!("flow {id} ends before it starts")),
            },
            _ => r.errors.push(format!("flow end binds to no slice: {e}")),
        }
    }
    r
}

fn slice(e: &Value, track: TrackName, base: i64) -> Slice {
    Slice {
        track: track.1,
        cat: e["cat"].as_str().unwrap().to_owned(),
        name: e["name"].as_str().unwrap().to_owned(),
        start: (ns(&e["ts"]) + base) as u64,
        dur: e.get("dur").map_or(0, |d| ns(d) as u64),
        args: e["args"]
            .as_object()
            .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default(),
    }
}

/// Reads a protobuf trace as Perfetto's trace processor imports track events:
/// interned ids resolved in file order (each defined before use, after the
/// state is cleared); then every event sorted by time, stably; on each track
/// a begin opens a slice and an end closes the innermost open one; flows by id.
fn read_pftrace(bytes: &[u8]) -> Read {
    let trace = decode(bytes);
    let mut r = Read::default();
    let mut names: HashMap<u64, String> = HashMap::new();
    let mut cats: HashMap<u64, String> = HashMap::new();
    let mut arg_names: HashMap<u64, String> = HashMap::new();
    let mut strings: HashMap<u64, String> = HashMap::new();
    let mut processes: HashMap<u64, (i32, String)> = HashMap::new();
    let mut pids: HashMap<i32, String> = HashMap::new();
    let mut tracks: HashMap<u64, proto::TrackDescriptor> = HashMap::new();
    let mut cleared = false;
    let mut events = Vec::new();
    for (i, p) in trace.packet.iter().enumerate() {
        let flags = p.sequence_flags.unwrap_or(0);
        cleared |= flags & proto::SEQ_INCREMENTAL_STATE_CLEARED != 0;
        if let Some(d) = &p.interned_data {
            assert!(
                cleared,
                "packet {i}: interned data before the state is cleared"
            );
            for e in &d.event_names {
                names.insert(e.iid.unwrap(), e.name.clone().unwrap());
            }
            for e in &d.event_categories {
                cats.insert(e.iid.unwrap(), e.name.clone().unwrap());
            }
            for e in &d.debug_annotation_names {
                arg_names.insert(e.iid.unwrap(), e.name.clone().unwrap());
            }
            for e in &d.debug_annotation_string_values {
                strings.insert(
                    e.iid.unwrap(),
                    String::from_utf8(e.str.clone().unwrap()).unwrap(),
                );
            }
        }
        if let Some(d) = &p.track_descriptor {
            if let Some(pr) = &d.process {
                let name = pr.process_name.clone().unwrap();
                processes.insert(d.uuid.unwrap(), (pr.pid.unwrap(), name.clone()));
                pids.insert(pr.pid.unwrap(), name.clone());
                r.processes.push(name);
            }
            tracks.insert(d.uuid.unwrap(), d.clone());
        }
        if let Some(e) = &p.track_event {
            assert_ne!(flags & proto::SEQ_NEEDS_INCREMENTAL_STATE, 0, "packet {i}");
            let resolve = |e: &proto::TrackEvent| -> (String, String, BTreeMap<String, Value>) {
                let name = e.name_iid.map(|n| {
                    names
                        .get(&n)
                        .unwrap_or_else(|| panic!("packet {i}: name iid {n} undefined"))
                        .clone()
                });
                let cat = e.category_iids.first().map(|c| cats[c].clone());
                let args = e
                    .debug_annotations
                    .iter()
                    .map(|a| (arg_names[&a.name_iid.unwrap()].clone(), value(a, &strings)))
                    .collect();
                (cat.unwrap_or_default(), name.unwrap_or_default(), args)
            };
            events.push((p.timestamp.unwrap(), e.clone(), resolve(e)));
        }
    }
    let track_name = |uuid: u64| -> TrackName {
        let d = &tracks[&uuid];
        if let Some(th) = &d.thread {
            return (
                pids[&th.pid.unwrap()].clone(),
                th.thread_name.clone().unwrap(),
            );
        }
        let parent = processes[&d.parent_uuid.expect("a named track has a parent")]
            .1
            .clone();
        (parent, d.name.clone().unwrap())
    };
    let mut seen_tracks = HashSet::new();
    events.sort_by_key(|e| e.0);
    let mut open: HashMap<u64, Vec<usize>> = HashMap::new();
    let mut flows: HashMap<u64, usize> = HashMap::new();
    for (ts, e, (cat, name, args)) in events {
        let uuid = e.track_uuid.unwrap();
        if seen_tracks.insert(uuid) {
            r.tracks.push(track_name(uuid));
        }
        let (_, track) = track_name(uuid);
        let s = Slice {
            track,
            cat,
            name,
            start: ts,
            dur: 0,
            args,
        };
        match e.r#type.unwrap() {
            proto::TYPE_SLICE_BEGIN => {
                let i = r.slices.len();
                open.entry(uuid).or_default().push(i);
                r.slices.push(s);
                for f in &e.flow_ids {
                    if let Some(from) = flows.insert(*f, i) {
                        r.flows.push((String::new(), from, i));
                    }
                }
                for f in &e.terminating_flow_ids {
                    match flows.remove(f) {
                        Some(from) => r.flows.push((String::new(), from, i)),
                        None => r.errors.push(format!("flow {f} ends without a start")),
                    }
                }
            }
            proto::TYPE_SLICE_END => match open.get_mut(&uuid).and_then(Vec::pop) {
                Some(i) => r.slices[i].dur = ts - r.slices[i].start,
                None => r
                    .errors
                    .push(format!("end at {ts} on track {uuid} closes nothing")),
            },
            proto::TYPE_INSTANT => r.instants.push(s),
            other => panic!("event type {other}"),
        }
    }
    if open.values().any(|v| !v.is_empty()) {
        r.errors.push("slices left open".into());
    }
    r
}

/// An argument's value as JSON.
fn value(a: &proto::DebugAnnotation, strings: &HashMap<u64, String>) -> Value {
    if let Some(v) = a.uint_value {
        Value::from(v)
    } else if let Some(v) = a.int_value {
        Value::from(v)
    } else if let Some(s) = a.string_value_iid {
        Value::from(strings[&s].clone())
    } else {
        Value::Array(a.array_values.iter().map(|x| value(x, strings)).collect())
    }
}

/// The GPU work each reader sees: (category, start, duration), sorted.
fn gpu_work(r: &Read) -> Vec<(String, u64, u64)> {
    let mut v: Vec<_> = r
        .slices
        .iter()
        .filter(|s| matches!(s.cat.as_str(), "kernel" | "memcpy" | "memset" | "sync"))
        .map(|s| (s.cat.clone(), s.start, s.dur))
        .collect();
    v.sort();
    v
}

/// Every launch flow runs from an API slice to GPU work of the same call.
fn check_flows(what: &str, r: &Read) {
    assert!(
        r.errors.is_empty(),
        "{what}: {:?}",
        &r.errors[..r.errors.len().min(5)]
    );
    for (_, from, to) in &r.flows {
        let (a, b) = (&r.slices[*from], &r.slices[*to]);
        if a.cat == "driver" && a.name == "submit job" {
            // A DRM job's flow, from its submitting thread to its queue slice.
            assert_eq!(a.dur, 0, "{what}: {a:?}");
            assert!(
                b.cat == "driver" && b.track.ends_with(" queue"),
                "{what}: {a:?} to {b:?}"
            );
            assert_eq!(a.start, b.start, "{what}: {a:?} to {b:?}");
            continue;
        }
        if b.cat == "sync"
            && b.args.contains_key("wait_on_event_record_correlation_id")
            && a.args.get("correlation_id") == b.args.get("wait_on_event_record_correlation_id")
        {
            continue;
        }
        assert_eq!(a.cat, "cuda_api", "{what}: a flow from {a:?}");
        assert_eq!(
            a.args.get("correlation_id"),
            b.args.get("correlation_id"),
            "{what}: the flow from {} at {} ends at {} at {} on {}",
            a.name,
            a.start,
            b.name,
            b.start,
            b.track
        );
    }
}

/// Checks one run: each format read on its own has every piece of GPU work
/// with its start and duration, no error, no dropped slice, flows to the right
/// work, named processes; protoc reads what gpuperf wrote.
fn check_run(run: &Run) -> (Read, Read) {
    let json = read_json(&run.json);
    let pb = read_pftrace(&run.pb);
    assert!(!run.work.is_empty(), "the input has GPU work");
    assert_eq!(
        json.dropped, 0,
        "JSON slices Perfetto drops for overlapping"
    );
    assert_eq!(gpu_work(&json), run.work, "GPU work in the JSON");
    let got = gpu_work(&pb);
    if got != run.work {
        let wrong = got.iter().zip(&run.work).filter(|(a, b)| a != b).count();
        panic!(
            "{wrong} of {} pieces of GPU work read wrong from the protobuf: {:?}",
            run.work.len(),
            got.iter().zip(&run.work).find(|(a, b)| a != b)
        );
    }
    check_flows("JSON", &json);
    check_flows("protobuf", &pb);
    for r in [&json, &pb] {
        for p in &r.processes {
            assert!(
                !p.starts_with(' ') && !p.starts_with('('),
                "process named {p:?}"
            );
        }
    }
    if let Some(text) = protoc_decode(&run.pb) {
        let theirs = from_text(&parse_text(&text));
        assert_eq!(
            theirs,
            decode(&run.pb),
            "protoc reads other values than gpuperf wrote"
        );
    }
    (json, pb)
}

/// Checks one input (see [`check_run`]); returns both timelines.
fn check(gpu: &[PathBuf], cpu: Option<&Path>) -> (String, Vec<u8>) {
    check_with(gpu, cpu, None)
}

/// [`check`], with a recording's driver events on both timelines.
pub fn check_with(
    gpu: &[PathBuf],
    cpu: Option<&Path>,
    driver: Option<&DriverTrace>,
) -> (String, Vec<u8>) {
    let run = run_with(gpu, cpu, driver);
    check_run(&run);
    (run.json, run.pb)
}

/// A directory of `samples/recordings/`.
fn recording(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../samples/recordings")
        .join(rel)
}

#[test]
fn own_format__durations_flows_and_golden() {
    let sc = scenario::build();
    let dir = tempfile::tempdir().unwrap();
    let gpu = dir.path().join("gpu.trace");
    std::fs::write(&gpu, sc.gpu_bytes()).unwrap();
    let cpu = dir.path().join("cpu.txt");
    std::fs::write(&cpu, sc.cpu_gpuperf()).unwrap();
    let (_, pb) = check(&[gpu], Some(&cpu));
    golden::check(&data("perfetto/own.expected.txt"), &packet_lines(&pb));
}

#[test]
fn kineto_small__durations_flows_and_golden() {
    let (_, pb) = check(&[data("kineto/small.pt.trace.json")], None);
    golden::check(
        &data("perfetto/kineto_small.expected.txt"),
        &packet_lines(&pb),
    );
}

#[test]
fn kineto_capture__markers_in_both_formats() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("capture.pt.trace.json");
    std::fs::write(&path, crate::captured::capture_trace().to_string()).unwrap();
    let run = run_with(&[path], None, None);
    let (json, pb) = check_run(&run);
    for r in [&json, &pb] {
        assert!(
            r.instants
                .iter()
                .any(|s| s.name == "launch captured into a CUDA graph")
        );
    }
}

/// Perfetto's trace processor read the protobuf of these with most GPU work at
/// 0 ns: idle slices were written after the work on the same track, and the
/// end of a gap at the instant the next kernel began closed the kernel.
#[test]
fn real_recordings__every_gpu_duration_reads_as_the_trace_has_it() {
    for name in [
        B200,
        V100,
        A100,
        crate::imported::ALEXNET,
        crate::imported::EVENT_SYNC,
    ] {
        let run = run_with(&[real(name)], None, None);
        check_run(&run);
        assert!(
            run.pb.len() < run.json.len(),
            "{name}: {} protobuf bytes against {} JSON bytes",
            run.pb.len(),
            run.json.len()
        );
    }
}

#[test]
fn simulated_recording__every_gpu_duration_reads_as_the_trace_has_it() {
    check(&[recording("simulated/gpt2_small_eager")], None);
}

/// 74 pairs of kernels on one stream of the B200 trace overlap (programmatic
/// dependent launch): each overlapping kernel gets a lane of its own.
#[test]
fn b200__overlapping_kernels_get_a_lane_in_both_formats() {
    let run = run_with(&[real(B200)], None, None);
    let (json, pb) = check_run(&run);
    for (what, r) in [("JSON", &json), ("protobuf", &pb)] {
        let lanes: Vec<_> = r
            .slices
            .iter()
            .filter(|s| s.cat == "kernel" && s.track.contains("(overlap "))
            .collect();
        assert!(
            lanes.len() >= 38,
            "{what}: {} kernels in lanes",
            lanes.len()
        );
        assert!(
            lanes.iter().all(|s| s.track.starts_with("stream ")),
            "{what}"
        );
    }
}

/// A launch's stack is on its API slice only, not repeated on its GPU work.
#[test]
fn b200__stacks_only_on_api_slices() {
    let run = run_with(&[real(B200)], None, None);
    let (json, pb) = check_run(&run);
    for r in [&json, &pb] {
        let api = r
            .slices
            .iter()
            .filter(|s| s.cat == "cuda_api" && s.args.contains_key("stack"))
            .count();
        assert!(api > 100, "{api} API slices with a stack");
        assert!(
            r.slices
                .iter()
                .filter(|s| s.cat != "cuda_api")
                .all(|s| !s.args.contains_key("stack"))
        );
    }
    let doc: Value = serde_json::from_str(&run.json).unwrap();
    let names: Vec<&str> = doc["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"] == "process_name")
        .map(|e| e["args"]["name"].as_str().unwrap())
        .collect();
    // The trace names no executable: the main thread's name stands in, with
    // the rank its distributedInfo gives (rank 0 of an 8-rank job).
    assert!(
        names.contains(&"python (pid 6583, rank 0 of 8)"),
        "{names:?}"
    );
}

#[test]
fn interned_names__each_written_once() {
    let run = run_with(&[real(B200)], None, None);
    let trace = decode(&run.pb);
    let mut seen = HashSet::new();
    for d in trace.packet.iter().filter_map(|p| p.interned_data.as_ref()) {
        for e in &d.event_names {
            assert!(
                seen.insert(e.name.clone().unwrap()),
                "{:?} interned twice",
                e.name
            );
        }
    }
    assert!(seen.len() > 10);
}

#[test]
fn idle_slices__in_both_formats_on_a_synthetic_and_a_real_trace() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idle.pt.trace.json");
    std::fs::write(&path, crate::idle::trace().to_string()).unwrap();
    let run = run_with(&[path], None, None);
    let (json, pb) = check_run(&run);
    for r in [&json, &pb] {
        let idle = r
            .slices
            .iter()
            .filter(|s| s.name.starts_with("GPU idle"))
            .count();
        // 7 pieces of the stream's 3 gaps, and the device's 3 gaps.
        assert_eq!(idle, 10);
        assert!(
            r.tracks
                .iter()
                .any(|(_, t)| t == "GPU idle (no stream busy)")
        );
    }
    let run = run_with(
        &[real("a100_alexnet_kineto_syncs.pt.trace.json.gz")],
        None,
        None,
    );
    let (json, pb) = check_run(&run);
    for r in [&json, &pb] {
        assert!(
            r.slices
                .iter()
                .any(|s| s.name.starts_with("GPU idle: host sync"))
        );
    }
}

/// Names no frame: the recording's `symbols.txt` names them.
struct NoNames;

impl Symbolize for NoNames {
    fn symbolize(&mut self, _: &Module, offsets: &[u64]) -> Vec<Vec<String>> {
        vec![Vec::new(); offsets.len()]
    }
}

/// A key of the totals: the CPU stack and API frame the time is charged to.
fn charged(stack: Option<&str>, api: Option<&str>) -> String {
    let mut s = stack.unwrap_or("[no CPU stack]").to_owned();
    if let Some(api) = api.filter(|a| s.rsplit(';').next() != Some(*a)) {
        s.push(';');
        s.push_str(api);
    }
    s
}

/// GPU time per charged stack in a timeline: a slice's own `stack`, else its
/// call's stack and API frame.
fn timeline_totals(r: &Read) -> BTreeMap<String, u64> {
    let mut call: HashMap<usize, usize> = HashMap::new();
    for (_, from, to) in &r.flows {
        if r.slices[*from].cat == "cuda_api" && r.slices[*to].cat != "sync" {
            call.insert(*to, *from);
        }
    }
    let mut t = BTreeMap::new();
    for (i, s) in r.slices.iter().enumerate() {
        if !matches!(s.cat.as_str(), "kernel" | "memcpy" | "memset") {
            continue;
        }
        let key = match (s.args.get("stack"), call.get(&i)) {
            (Some(own), _) => own.as_str().unwrap().to_owned(),
            (None, Some(&c)) => {
                let a = &r.slices[c];
                charged(a.args.get("stack").and_then(Value::as_str), Some(&a.name))
            }
            (None, None) => charged(None, None),
        };
        *t.entry(key).or_default() += s.dur;
    }
    t
}

/// One recording with CUDA graphs: folded stacks, pprof and both timelines
/// charge each CPU stack the same GPU time. (pprof charged a replayed graph's
/// kernels to the launch's stack, the others to the node's capture stack.)
#[test]
fn graph_recording__folded_pprof_and_timelines_charge_each_stack_alike() {
    let dir = recording("simulated/gpt2_small_cudagraphs");
    let mut strings = StringTable::new();
    let mut inputs = GpuInputs::open(std::slice::from_ref(&dir), &mut strings).unwrap();
    let kept = SymbolCache::read(&dir.join("symbols.txt")).unwrap();
    let st = stacks::collect(&inputs, &mut strings, &mut Cached::new(NoNames, kept))
        .unwrap()
        .expect("the recording carries stacks");
    assert!(st.stats.graph_nodes > 0, "graph nodes with a known origin");
    inputs.add_launch_stacks(st.trace);
    let mut folder = Folder::new();
    let mut profile = pprof::Builder::new();
    let run = run_on(
        inputs,
        &mut strings,
        None,
        None,
        Some((&mut folder, &mut profile)),
    );
    let (json, pb) = check_run(&run);
    // Folded: µs, each line rounded once.
    let mut f = Vec::new();
    folder.write(&mut f).unwrap();
    let mut folded: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for l in String::from_utf8(f).unwrap().lines() {
        let (stack, w) = l.rsplit_once(' ').unwrap();
        let (stack, leaf) = stack.rsplit_once(';').unwrap();
        if leaf.starts_with("[GPU_") && !leaf.starts_with("[GPU_Idle") {
            let e = folded.entry(stack.to_owned()).or_default();
            e.0 += w.parse::<u64>().unwrap();
            e.1 += 1;
        }
    }
    // pprof: ns.
    let mut gz = Vec::new();
    profile.write(&mut gz).unwrap();
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(&gz[..])
        .read_to_end(&mut raw)
        .unwrap();
    let p = pprof::proto::Profile::decode(&raw[..]).unwrap();
    let frame = |loc: u64| -> String {
        let l = &p.location[loc as usize - 1];
        let f = &p.function[l.line[0].function_id as usize - 1];
        let name = &p.string_table[f.name as usize];
        match p.string_table[f.filename as usize].as_str() {
            "" => name.clone(),
            file => format!("{file}({}): {name}", l.line[0].line),
        }
    };
    let mut prof: BTreeMap<String, u64> = BTreeMap::new();
    for s in &p.sample {
        let frames: Vec<String> = s.location_id.iter().rev().map(|&l| frame(l)).collect();
        let (leaf, stack) = frames.split_last().unwrap();
        if leaf.starts_with("[GPU_") && s.value[0] > 0 {
            *prof.entry(stack.join(";")).or_default() += s.value[0] as u64;
        }
    }
    prof.retain(|_, v| *v > 0);
    assert_eq!(
        timeline_totals(&pb),
        prof,
        "protobuf timeline against pprof"
    );
    assert_eq!(timeline_totals(&json), prof, "JSON timeline against pprof");
    assert_eq!(
        folded.keys().collect::<Vec<_>>(),
        prof.keys().collect::<Vec<_>>(),
        "folded stacks against pprof's"
    );
    for (k, (us, lines)) in &folded {
        let ns = prof[k];
        assert!(
            (us * 1000).abs_diff(ns) <= 1000 * lines,
            "{k}: {us} µs folded, {ns} ns in pprof"
        );
    }
    assert!(
        pb.slices
            .iter()
            .any(|s| s.cat == "kernel" && s.args.contains_key("stack")),
        "graph kernels charged to their nodes' stacks"
    );
}

/// One line per packet, so golden diffs point at one event.
fn packet_lines(bytes: &[u8]) -> String {
    decode(bytes)
        .packet
        .iter()
        .map(|p| format!("{p:?}\n"))
        .collect()
}

fn decode(bytes: &[u8]) -> proto::Trace {
    proto::Trace::decode(bytes).expect("the trace decodes")
}

/// `perfetto_trace.proto` as published, or `None` (after saying why) without
/// `protoc`.
fn protoc_decode(bytes: &[u8]) -> Option<String> {
    let schema = data("perfetto");
    let child = Command::new("protoc")
        .arg("--decode=perfetto.protos.Trace")
        .arg(format!("--proto_path={}", schema.display()))
        .arg("perfetto_trace.proto")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => {
            gpuperf_test_support::require::Need::Protoc.missing(format!(
                "protoc not found ({e}; Debian: apt-get install protobuf-compiler)"
            ));
            return None;
        }
    };
    let mut stdin = child.stdin.take().unwrap();
    let input = bytes.to_vec();
    let writer = std::thread::spawn(move || std::io::Write::write_all(&mut stdin, &input));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert!(
        out.status.success(),
        "protoc cannot decode the trace: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(String::from_utf8(out.stdout).unwrap())
}

/// protoc's text format as a tree: (field name, scalar text or message).
#[derive(Debug)]
enum Field {
    Scalar(String),
    Message(Vec<(String, Field)>),
}

fn parse_text(text: &str) -> Vec<(String, Field)> {
    let mut stack: Vec<(String, Vec<(String, Field)>)> = vec![(String::new(), Vec::new())];
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if line == "}" {
            let (name, fields) = stack.pop().unwrap();
            stack
                .last_mut()
                .unwrap()
                .1
                .push((name, Field::Message(fields)));
        } else if let Some(name) = line.strip_suffix(" {") {
            stack.push((name.to_owned(), Vec::new()));
        } else {
            let (name, value) = line.split_once(": ").expect("`name: value`");
            // A field number instead of a name is a field the schema does not have.
            assert!(
                !name.starts_with(|c: char| c.is_ascii_digit()),
                "field {name} is not in perfetto_trace.proto"
            );
            stack
                .last_mut()
                .unwrap()
                .1
                .push((name.to_owned(), Field::Scalar(value.to_owned())));
        }
    }
    assert_eq!(stack.len(), 1, "unbalanced braces");
    stack.pop().unwrap().1
}

/// A text-format string literal's bytes (C escapes, octal for non-ASCII).
fn unquote(s: &str) -> String {
    let b = s
        .strip_prefix('"')
        .and_then(|s| s.strip_suffix('"'))
        .unwrap()
        .as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'\\' {
            out.push(b[i]);
            i += 1;
            continue;
        }
        let c = b[i + 1];
        i += 2;
        out.push(match c {
            b'n' => b'\n',
            b't' => b'\t',
            b'r' => b'\r',
            b'0'..=b'7' => {
                let digits = b[i - 1..]
                    .iter()
                    .take(3)
                    .take_while(|d| (b'0'..=b'7').contains(d));
                let n = digits.count();
                let v = u8::from_str_radix(std::str::from_utf8(&b[i - 1..i - 1 + n]).unwrap(), 8);
                i += n - 1;
                v.unwrap()
            }
            other => other,
        });
    }
    String::from_utf8(out).unwrap()
}

fn num<T: std::str::FromStr>(f: &Field) -> T
where
    T::Err: std::fmt::Debug,
{
    match f {
        Field::Scalar(s) => match s.as_str() {
            "TYPE_SLICE_BEGIN" | "DICT" => "1",
            "TYPE_SLICE_END" | "ARRAY" => "2",
            "TYPE_INSTANT" | "EXPLICIT" => "3",
            s => s,
        }
        .parse()
        .unwrap(),
        Field::Message(_) => panic!("a message where a number was expected"),
    }
}

fn msg(f: &Field) -> &[(String, Field)] {
    match f {
        Field::Message(m) => m,
        Field::Scalar(s) => panic!("scalar {s} where a message was expected"),
    }
}

fn text(f: &Field) -> String {
    match f {
        Field::Scalar(s) => unquote(s),
        Field::Message(_) => panic!("a message where a string was expected"),
    }
}

/// Builds the messages from protoc's names for the fields. A field name the
/// timeline does not use fails: gpuperf wrote a tag that means something else.
fn from_text(fields: &[(String, Field)]) -> proto::Trace {
    fn name_entry(m: &[(String, Field)]) -> proto::NameEntry {
        let mut e = proto::NameEntry::default();
        for (k, v) in m {
            match k.as_str() {
                "iid" => e.iid = Some(num(v)),
                "name" => e.name = Some(text(v)),
                k => panic!("unexpected field {k}"),
            }
        }
        e
    }
    fn annotation(m: &[(String, Field)]) -> proto::DebugAnnotation {
        let mut a = proto::DebugAnnotation::default();
        for (k, v) in m {
            match k.as_str() {
                "name_iid" => a.name_iid = Some(num(v)),
                "uint_value" => a.uint_value = Some(num(v)),
                "int_value" => a.int_value = Some(num(v)),
                "string_value_iid" => a.string_value_iid = Some(num(v)),
                "array_values" => a.array_values.push(annotation(msg(v))),
                k => panic!("unexpected field {k}"),
            }
        }
        a
    }
    let mut trace = proto::Trace::default();
    for (k, v) in fields {
        assert_eq!(k, "packet");
        let mut p = proto::TracePacket::default();
        for (k, v) in msg(v) {
            match k.as_str() {
                "timestamp" => p.timestamp = Some(num(v)),
                "trusted_packet_sequence_id" => p.trusted_packet_sequence_id = Some(num(v)),
                "sequence_flags" => p.sequence_flags = Some(num(v)),
                "interned_data" => {
                    let mut d = proto::InternedData::default();
                    for (k, v) in msg(v) {
                        match k.as_str() {
                            "event_names" => d.event_names.push(name_entry(msg(v))),
                            "event_categories" => d.event_categories.push(name_entry(msg(v))),
                            "debug_annotation_names" => {
                                d.debug_annotation_names.push(name_entry(msg(v)));
                            }
                            "debug_annotation_string_values" => {
                                let mut s = proto::InternedString::default();
                                for (k, v) in msg(v) {
                                    match k.as_str() {
                                        "iid" => s.iid = Some(num(v)),
                                        "str" => s.str = Some(text(v).into_bytes()),
                                        k => panic!("unexpected field {k}"),
                                    }
                                }
                                d.debug_annotation_string_values.push(s);
                            }
                            k => panic!("unexpected field {k}"),
                        }
                    }
                    p.interned_data = Some(d);
                }
                "track_descriptor" => {
                    let mut d = proto::TrackDescriptor::default();
                    for (k, v) in msg(v) {
                        match k.as_str() {
                            "uuid" => d.uuid = Some(num(v)),
                            "parent_uuid" => d.parent_uuid = Some(num(v)),
                            "name" => d.name = Some(text(v)),
                            "child_ordering" => d.child_ordering = Some(num(v)),
                            "sibling_order_rank" => d.sibling_order_rank = Some(num(v)),
                            "process" => {
                                let mut pr = proto::ProcessDescriptor::default();
                                for (k, v) in msg(v) {
                                    match k.as_str() {
                                        "pid" => pr.pid = Some(num(v)),
                                        "process_name" => pr.process_name = Some(text(v)),
                                        "process_labels" => pr.process_labels.push(text(v)),
                                        k => panic!("unexpected field {k}"),
                                    }
                                }
                                d.process = Some(pr);
                            }
                            "thread" => {
                                let mut th = proto::ThreadDescriptor::default();
                                for (k, v) in msg(v) {
                                    match k.as_str() {
                                        "pid" => th.pid = Some(num(v)),
                                        "tid" => th.tid = Some(num(v)),
                                        "thread_name" => th.thread_name = Some(text(v)),
                                        k => panic!("unexpected field {k}"),
                                    }
                                }
                                d.thread = Some(th);
                            }
                            k => panic!("unexpected field {k}"),
                        }
                    }
                    p.track_descriptor = Some(d);
                }
                "track_event" => {
                    let mut e = proto::TrackEvent::default();
                    for (k, v) in msg(v) {
                        match k.as_str() {
                            "category_iids" => e.category_iids.push(num(v)),
                            "name_iid" => e.name_iid = Some(num(v)),
                            "type" => e.r#type = Some(num(v)),
                            "track_uuid" => e.track_uuid = Some(num(v)),
                            "flow_ids" => e.flow_ids.push(num(v)),
                            "terminating_flow_ids" => e.terminating_flow_ids.push(num(v)),
                            "debug_annotations" => e.debug_annotations.push(annotation(msg(v))),
                            k => panic!("unexpected field {k}"),
                        }
                    }
                    p.track_event = Some(e);
                }
                k => panic!("unexpected field {k}"),
            }
        }
        trace.packet.push(p);
    }
    trace
}
