//! Every timeline the writers make, in both formats, read back by Perfetto's
//! own trace processor (`gpuperf_test_support::perfetto`): the repository's
//! real traces, the simulated recordings and the driver-event recordings.
//! For each, Perfetto must report no error or data-loss stat; every kernel,
//! copy, memset and sync must be there at the trace's start and duration;
//! every flow must run from the API call to the GPU work of the same
//! correlation id; and processes, threads and tracks must have sensible names.
//!
//! All inputs are checked before a test fails, and the failure lists every
//! timeline's findings with their figures. Without Node.js or the trace
//! processor the tests print "skipped: …" and pass, unless
//! `GPUPERF_REQUIRE_TRACE_PROCESSOR=1`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};

use gpuperf_merge::join::{self, Context, Match, Sink};
use gpuperf_merge::model::{ActivityKind, Record, StringTable};
use gpuperf_merge::read::cpu::CpuTrace;
use gpuperf_merge::read::driver::DriverTrace;
use gpuperf_merge::read::input::GpuInputs;
use gpuperf_merge::write::{chrome, perfetto};
use gpuperf_test_support::perfetto::{Table, TraceProcessor};
use serde_json::Value;

use crate::imported::{A100, ALEXNET, B200, EVENT_SYNC, V100, real};
use crate::{data, scenario};

/// The GPU work kinds, as the timelines' categories name them.
const KINDS: [&str; 4] = ["kernel", "memcpy", "memset", "sync"];

/// One piece of GPU work as gpuperf read it.
#[derive(Clone, Debug)]
struct Work {
    kind: &'static str,
    /// The pid of its timeline process ([`chrome::gpu_pid`]).
    gpid: u64,
    corr: u32,
    start_ns: u64,
    dur_ns: u64,
    /// Whether the API call that caused it is known (it gets a flow).
    has_api: bool,
}

/// What the writers were given: every activity, in file order.
#[derive(Default)]
struct Expected {
    work: Vec<Work>,
    /// CPU pids with API calls.
    cpu_pids: HashSet<u32>,
}

impl Sink for Expected {
    fn record(
        &mut self,
        _: &Context<'_>,
        rec: &Record,
        m: &Match<'_>,
    ) -> gpuperf_merge::Result<()> {
        match rec {
            Record::Api(a) => {
                self.cpu_pids.insert(a.pid);
            }
            Record::Activity(a) => self.work.push(Work {
                kind: match a.kind {
                    ActivityKind::Kernel { .. } => "kernel",
                    ActivityKind::Memcpy { .. } => "memcpy",
                    ActivityKind::Memset { .. } => "memset",
                    ActivityKind::Sync { .. } => "sync",
                    _ => "other",
                },
                gpid: chrome::gpu_pid(a.pid, a.device),
                corr: a.correlation_id,
                start_ns: a.start_ns,
                dur_ns: a.duration_ns(),
                has_api: m.api.is_some(),
            }),
            _ => {}
        }
        Ok(())
    }
}

/// A timeline input: GPU traces, maybe a CPU trace and driver events.
struct Input {
    name: String,
    gpu: Vec<PathBuf>,
    cpu: Option<PathBuf>,
    driver: Option<DriverTrace>,
}

impl Input {
    fn gpu(name: &str, path: PathBuf) -> Self {
        Input {
            name: name.to_owned(),
            gpu: vec![path],
            cpu: None,
            driver: None,
        }
    }
}

/// Both timelines of `input`, as `gpuperf merge -c` writes them (idle slices
/// included), and what the writers were given.
fn write(input: &Input) -> (Expected, Vec<u8>, Vec<u8>) {
    let mut strings = StringTable::new();
    let inputs = GpuInputs::open(&input.gpu, &mut strings).unwrap();
    let mut cpu = input.cpu.as_ref().map(|p| CpuTrace::open(p).unwrap());
    let mut json = chrome::Writer::new(Vec::new()).unwrap().with_idle_slices();
    let mut pb = perfetto::Writer::new(Vec::new())
        .unwrap()
        .with_idle_slices();
    if let Some(d) = &input.driver {
        json = json.with_driver(d.clone());
        pb = pb.with_driver(d.clone());
    }
    let mut expected = Expected::default();
    join::merge(
        cpu.as_mut(),
        &inputs,
        &mut strings,
        &join::Options::default(),
        &mut [&mut expected, &mut json, &mut pb],
    )
    .unwrap();
    (expected, json.into_inner(), pb.into_inner())
}

/// A cell as an integer (the trace processor's integers are exact in JSON).
fn int(v: &Value) -> Option<i64> {
    v.as_i64()
}

fn text(v: &Value) -> Option<&str> {
    v.as_str()
}

/// An argument of a slice, whichever format wrote it (`args.` in the JSON,
/// `debug.` in the protobuf).
fn arg(slice: &str, key: &str) -> String {
    format!(
        "coalesce(extract_arg({slice}.arg_set_id, 'args.{key}'), \
         extract_arg({slice}.arg_set_id, 'debug.{key}'))"
    )
}

/// Each slice's process pid and track name, thread or process track alike.
const SLICE_PLACE: &str = "
    left join thread_track tt on tt.id = s.track_id
    left join thread th on th.utid = tt.utid
    left join track tr on tr.id = s.track_id
    left join process_track pt on pt.id = s.track_id
    left join process p on p.upid = coalesce(th.upid, pt.upid)";

/// Runs `sql`, panicking with the trace's name on a query error.
fn query(tp: &TraceProcessor, label: &str, sql: &str) -> Table {
    tp.query(sql).unwrap_or_else(|e| panic!("{label}: {e}"))
}

/// What the trace processor read from one timeline against what was written;
/// each finding is one line with its figures.
fn findings(tp: &TraceProcessor, label: &str, exp: &Expected, base_ns: u64) -> Vec<String> {
    let mut out = Vec::new();
    let q = |sql: &str| query(tp, label, sql);

    // 1. Import errors and data losses.
    let stats = q("select name, idx, severity, source, value from stats \
                   where (severity = 'error' or severity = 'data_loss') and value > 0");
    for r in &stats.rows {
        out.push(format!(
            "{label}: stat {} = {} ({})",
            text(&r[0]).unwrap_or("?"),
            r[4],
            text(&r[2]).unwrap_or("?")
        ));
    }

    // 2. Every piece of GPU work at its start and duration.
    let gpu = q(&format!(
        "select s.id, s.ts, s.dur, s.category, p.pid, {corr} as corr, \
         coalesce(th.name, tr.name) as track
         from slice s {SLICE_PLACE}
         where s.category in ('kernel', 'memcpy', 'memset', 'sync')",
        corr = arg("s", "correlation_id")
    ));
    let mut seen: HashMap<(&str, u64, u32, u64, u64), usize> = HashMap::new();
    let mut tp_count: BTreeMap<&str, (usize, usize, i64)> = BTreeMap::new();
    let mut unnamed_tracks = 0;
    for r in &gpu.rows {
        let kind = KINDS.into_iter().find(|k| text(&r[3]) == Some(*k)).unwrap();
        let (ts, dur) = (int(&r[1]).unwrap(), int(&r[2]).unwrap());
        let e = tp_count.entry(kind).or_default();
        e.0 += 1;
        e.1 += usize::from(dur == 0);
        e.2 += dur.max(0);
        let key = (
            kind,
            int(&r[4]).unwrap_or(-1) as u64,
            int(&r[5]).unwrap_or(-1) as u32,
            ts as u64 + base_ns,
            dur as u64,
        );
        *seen.entry(key).or_default() += 1;
        if text(&r[6]).is_none_or(|n| n.trim().is_empty()) {
            unnamed_tracks += 1;
        }
    }
    let mut exp_count: BTreeMap<&str, (usize, u64, usize)> = BTreeMap::new();
    for w in &exp.work {
        let e = exp_count.entry(w.kind).or_default();
        e.0 += 1;
        e.1 += w.dur_ns;
        let key = (w.kind, w.gpid, w.corr, w.start_ns, w.dur_ns);
        if let Some(n) = seen.get_mut(&key).filter(|n| **n > 0) {
            *n -= 1;
            e.2 += 1;
        }
    }
    for (kind, (n, ns, right)) in exp_count {
        let (tp_n, tp_zero, tp_ns) = tp_count.get(kind).copied().unwrap_or_default();
        if right != n || tp_n != n {
            out.push(format!(
                "{label}: {kind}: {right} of {n} at the trace's start and duration; \
                 Perfetto has {tp_n} ({tp_zero} at 0 ns), {tp_ns} ns in all against {ns} ns"
            ));
        }
    }
    if unnamed_tracks > 0 {
        out.push(format!(
            "{label}: {unnamed_tracks} GPU slices on tracks without a name"
        ));
    }

    // 3. Flows: from the API call (or, chained, from earlier work of the same
    // call) to work of the same correlation id, or to a wait on the event
    // that call recorded. Each piece of work with a known call must be
    // reached from that call's slice, not from a neighbour's.
    let flows = q(&format!(
        "select so.category, {out_corr}, si.category, {in_corr}, {in_wait}, si.id, {out_wait}
         from flow f join slice so on so.id = f.slice_out join slice si on si.id = f.slice_in
         where si.category in ('kernel', 'memcpy', 'memset', 'sync')",
        out_corr = arg("so", "correlation_id"),
        in_corr = arg("si", "correlation_id"),
        in_wait = arg("si", "wait_on_event_record_correlation_id"),
        out_wait = arg("so", "wait_on_event_record_correlation_id"),
    ));
    let (mut wrong, mut reached) = (Vec::new(), HashSet::new());
    for r in &flows.rows {
        let (from, out_corr) = (text(&r[0]).unwrap_or("?"), int(&r[1]));
        let (in_corr, in_wait) = (int(&r[3]), int(&r[4]));
        let from_api = from == "cuda_api";
        let from_work = KINDS.contains(&from);
        let same = out_corr.is_some() && out_corr == in_corr;
        // A wait's arrow comes from the call that recorded the event or, in
        // the protobuf's chain, from an earlier wait on the same event.
        let out_wait = int(&r[6]).or(out_corr);
        let waited = in_wait.is_some() && out_wait == in_wait;
        if (from_api || from_work) && (same || waited) {
            if same {
                reached.insert(int(&r[5]));
            }
        } else {
            wrong.push(format!(
                "{from} {out_corr:?} -> {} {in_corr:?}",
                text(&r[2]).unwrap_or("?")
            ));
        }
    }
    if !wrong.is_empty() {
        out.push(format!(
            "{label}: {} of {} flows into GPU work come from another call's slice, e.g. {:?}",
            wrong.len(),
            flows.rows.len(),
            &wrong[..wrong.len().min(3)]
        ));
    }
    let with_api = exp.work.iter().filter(|w| w.has_api).count();
    if reached.len() != with_api {
        out.push(format!(
            "{label}: {} of {with_api} GPU slices with a known API call have a flow from it",
            reached.len()
        ));
    }

    // 4. Names: every process and every thread with slices is named, without
    // an empty program name (" (pid 6583)"), and every CPU process is there.
    let procs = q("select distinct p.pid, p.name from slice s
                   left join thread_track tt on tt.id = s.track_id
                   left join thread th on th.utid = tt.utid
                   left join process_track pt on pt.id = s.track_id
                   join process p on p.upid = coalesce(th.upid, pt.upid)");
    let mut pids = HashSet::new();
    for r in &procs.rows {
        let name = text(&r[1]).unwrap_or("");
        pids.insert(int(&r[0]).unwrap_or(-1));
        if name.is_empty() || name != name.trim() || name.starts_with('(') {
            out.push(format!("{label}: process {} is named {name:?}", r[0]));
        }
    }
    for pid in &exp.cpu_pids {
        if !pids.contains(&i64::from(*pid)) {
            out.push(format!("{label}: no process {pid} with slices"));
        }
    }
    let threads = q("select distinct th.tid, th.name, p.pid from slice s
                     join thread_track tt on tt.id = s.track_id
                     join thread th on th.utid = tt.utid
                     left join process p on p.upid = th.upid");
    for r in &threads.rows {
        let name = text(&r[1]).unwrap_or("");
        if name.trim().is_empty() {
            out.push(format!(
                "{label}: thread {} of process {} has no name",
                r[0], r[2]
            ));
        }
    }
    out
}

/// The (pid, tid) pairs of a Chrome JSON trace's events, and its time base.
fn json_threads(json: &[u8]) -> (HashSet<(i64, i64)>, u64) {
    let doc: Value = serde_json::from_slice(json).unwrap();
    let threads = doc["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| Some((e["pid"].as_i64()?, e["tid"].as_i64()?)))
        .collect();
    (threads, doc["otherData"]["time_base_ns"].as_u64().unwrap())
}

/// Loads `bytes` into the trace processor; `None` when it is missing.
fn load(dir: &Path, file: &str, bytes: &[u8]) -> Option<TraceProcessor> {
    let path = dir.join(file);
    std::fs::write(&path, bytes).unwrap();
    TraceProcessor::load(&path).unwrap_or_else(|e| panic!("{file}: {e}"))
}

/// Checks both timelines of every input; panics listing every finding.
fn check_all(inputs: &[Input]) {
    let dir = tempfile::tempdir().unwrap();
    let mut all = Vec::new();
    for input in inputs {
        let (exp, json, pb) = write(input);
        assert!(!exp.work.is_empty(), "{}: no GPU work", input.name);
        let (threads, base) = json_threads(&json);
        let Some(tp) = load(dir.path(), "t.json", &json) else {
            return;
        };
        let label = format!("{} (JSON)", input.name);
        all.extend(findings(&tp, &label, &exp, base));
        // Each thread Perfetto made is one the JSON named (a tid over 32 bits
        // is cut, and lands on another thread).
        let tp_threads = query(
            &tp,
            &label,
            "select th.tid, p.pid from thread th join process p using (upid)
             where th.utid in (select utid from thread_track)",
        );
        for r in &tp_threads.rows {
            let key = (int(&r[1]).unwrap(), int(&r[0]).unwrap());
            if !threads.contains(&key) {
                all.push(format!(
                    "{label}: Perfetto has thread {} in process {}, which the JSON never names",
                    key.1, key.0
                ));
            }
        }
        drop(tp);
        let Some(tp) = load(dir.path(), "t.pftrace", &pb) else {
            return;
        };
        all.extend(findings(&tp, &format!("{} (pftrace)", input.name), &exp, 0));
    }
    assert!(
        all.is_empty(),
        "Perfetto's trace processor reads the timelines otherwise than gpuperf wrote them:\n{}",
        all.join("\n")
    );
}

#[test]
fn real_traces__perfetto_reads_every_gpu_slice_flow_and_name() {
    let inputs: Vec<Input> = [B200, V100, A100, ALEXNET, EVENT_SYNC]
        .into_iter()
        .map(|n| Input::gpu(n, real(n)))
        .collect();
    check_all(&inputs);
}

#[test]
fn simulated_recordings__perfetto_reads_every_gpu_slice_flow_and_name() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../samples/recordings/simulated");
    let mut inputs: Vec<Input> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            Input::gpu(&name, p)
        })
        .collect();
    inputs.sort_by(|a, b| a.name.cmp(&b.name));
    assert!(inputs.len() >= 6, "{root:?}");
    check_all(&inputs);
}

#[test]
fn driver_recordings__perfetto_reads_every_gpu_slice_flow_and_name() {
    let dir = tempfile::tempdir().unwrap();
    let sc = scenario::build();
    let gpu = dir.path().join("gpu.trace");
    std::fs::write(&gpu, sc.gpu_bytes()).unwrap();
    let cpu = dir.path().join("cpu.txt");
    std::fs::write(&cpu, sc.cpu_gpuperf()).unwrap();
    let inputs: Vec<Input> = ["driver/small.tsv", "driver/vblank.tsv"]
        .into_iter()
        .map(|d| Input {
            name: format!("scenario with {d}"),
            gpu: vec![gpu.clone()],
            cpu: Some(cpu.clone()),
            driver: Some(DriverTrace::open(&data(d)).unwrap()),
        })
        .collect();
    check_all(&inputs);
}
