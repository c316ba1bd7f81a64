//! The Perfetto protobuf timeline against the Chrome JSON one on the same input:
//! the same tracks, slices per track with their names and arguments (values
//! included, the CPU stack too), flows, instant markers and process labels. The protobuf is read twice: with the writer's own prost messages, and
//! by `protoc --decode` against Perfetto's published `perfetto_trace.proto`
//! (`tests/data/perfetto/`), which knows nothing of this crate.
//!
//! Without `protoc` on `PATH` the protoc checks print "skipped: …" and pass,
//! unless `GPUPERF_REQUIRE_PROTOC=1`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use gpuperf_merge::join;
use gpuperf_merge::model::StringTable;
use gpuperf_merge::read::cpu::CpuTrace;
use gpuperf_merge::read::driver::DriverTrace;
use gpuperf_merge::read::input::GpuInputs;
use gpuperf_merge::write::chrome;
use gpuperf_merge::write::perfetto::{self, proto};
use prost::Message as _;
use serde_json::Value;

use crate::imported::{A100, B200, V100, real};
use crate::{data, golden, scenario};

/// (process name, track name).
type TrackName = (String, String);

/// What both timelines must agree on.
#[derive(Debug, Default, PartialEq, Eq)]
struct Timeline {
    /// Slice names per track, sorted.
    slices: BTreeMap<TrackName, Vec<String>>,
    /// Instant marker names per track, sorted.
    instants: BTreeMap<TrackName, Vec<String>>,
    /// Flow arrows.
    flows: usize,
    /// Process labels (the recorders' notes), sorted.
    labels: BTreeMap<String, Vec<String>>,
}

/// Runs the join once with both timeline writers.
fn run(gpu: &[PathBuf], cpu: Option<&Path>) -> (String, Vec<u8>) {
    run_with(gpu, cpu, None)
}

/// [`run`], the writers also drawing `driver`'s events.
fn run_with(
    gpu: &[PathBuf],
    cpu: Option<&Path>,
    driver: Option<&DriverTrace>,
) -> (String, Vec<u8>) {
    let mut strings = StringTable::new();
    let inputs = GpuInputs::open(gpu, &mut strings).unwrap();
    let mut cpu = cpu.map(|p| CpuTrace::open(p).unwrap());
    let mut json = chrome::Writer::new(Vec::new()).unwrap();
    let mut pb = perfetto::Writer::new(Vec::new()).unwrap();
    if let Some(d) = driver {
        json = json.with_driver(d.clone());
        pb = pb.with_driver(d.clone());
    }
    join::merge(
        cpu.as_mut(),
        &inputs,
        &mut strings,
        &join::Options::default(),
        &mut [&mut json, &mut pb],
    )
    .unwrap();
    (
        String::from_utf8(json.into_inner()).unwrap(),
        pb.into_inner(),
    )
}

fn from_json(text: &str) -> Timeline {
    let doc: Value = serde_json::from_str(text).unwrap();
    let events = doc["traceEvents"].as_array().unwrap();
    let mut names: HashMap<(u64, u64), String> = HashMap::new();
    let mut t = Timeline::default();
    let mut labels = Vec::new();
    for e in events.iter().filter(|e| e["ph"] == "M") {
        let key = (e["pid"].as_u64().unwrap(), e["tid"].as_u64().unwrap());
        match e["name"].as_str().unwrap() {
            "process_name" | "thread_name" => {
                names.insert(key, e["args"]["name"].as_str().unwrap().to_owned());
            }
            "process_labels" => labels.push((key.0, e["args"]["labels"].as_str().unwrap())),
            _ => {}
        }
    }
    let track = |e: &Value| {
        let (pid, tid) = (e["pid"].as_u64().unwrap(), e["tid"].as_u64().unwrap());
        let thread = names
            .get(&(pid, tid))
            .cloned()
            .unwrap_or_else(|| format!("thread {tid}"));
        (names[&(pid, 0)].clone(), thread)
    };
    for e in events {
        let name = e["name"].as_str().unwrap_or_default().to_owned();
        match e["ph"].as_str().unwrap() {
            "X" => t
                .slices
                .entry(track(e))
                .or_default()
                .push(with_args(name, &e["args"])),
            "i" => t
                .instants
                .entry(track(e))
                .or_default()
                .push(with_args(name, &e["args"])),
            "f" => t.flows += 1,
            _ => {}
        }
    }
    for (pid, l) in labels {
        t.labels
            .entry(names[&(pid, 0)].clone())
            .or_default()
            .push(l.to_owned());
    }
    t.sort();
    t
}

/// A slice's name and its arguments, `name {"key":value,…}` with the keys in order.
fn with_args(name: String, args: &Value) -> String {
    let args: BTreeMap<&String, &Value> = args
        .as_object()
        .map(|m| m.iter().filter(|(_, v)| !v.is_null()).collect())
        .unwrap_or_default();
    format!("{name} {}", serde_json::to_string(&args).unwrap())
}

impl Timeline {
    fn sort(&mut self) {
        for v in self
            .slices
            .values_mut()
            .chain(self.instants.values_mut())
            .chain(self.labels.values_mut())
        {
            v.sort();
        }
    }
}

/// Reads a decoded trace as Perfetto's trace processor would, checking what it
/// relies on: the sequence's interned state is cleared before it is used and
/// every interned id is defined before it is used; every event's track is
/// described; ends close the slice open on their track, in time.
fn from_proto(trace: &proto::Trace) -> Timeline {
    #[derive(Default)]
    struct Desc {
        process: Option<(i32, String, Vec<String>)>,
        thread: Option<(i32, String)>,
        name: Option<String>,
        parent: Option<u64>,
    }
    let mut descs: HashMap<u64, Desc> = HashMap::new();
    let mut names: HashMap<u64, String> = HashMap::new();
    let mut cats: HashSet<u64> = HashSet::new();
    let mut arg_names: HashMap<u64, String> = HashMap::new();
    let mut strings: HashMap<u64, String> = HashMap::new();
    let mut cleared = false;
    let mut events = Vec::new();
    for (i, p) in trace.packet.iter().enumerate() {
        let flags = p.sequence_flags.unwrap_or(0);
        if flags & proto::SEQ_INCREMENTAL_STATE_CLEARED != 0 {
            cleared = true;
        }
        if let Some(d) = &p.interned_data {
            assert!(
                cleared,
                "packet {i}: interned data before the state is cleared"
            );
            for e in &d.event_names {
                names.insert(e.iid.unwrap(), e.name.clone().unwrap());
            }
            cats.extend(d.event_categories.iter().map(|e| e.iid.unwrap()));
            for e in &d.debug_annotation_names {
                arg_names.insert(e.iid.unwrap(), e.name.clone().unwrap());
            }
            for e in &d.debug_annotation_string_values {
                let s = String::from_utf8(e.str.clone().unwrap()).unwrap();
                strings.insert(e.iid.unwrap(), s);
            }
        }
        if let Some(d) = &p.track_descriptor {
            let uuid = d.uuid.unwrap();
            let e = descs.entry(uuid).or_default();
            if let Some(pr) = &d.process {
                let old = e.process.take();
                assert!(
                    old.is_none_or(|o| o.0 == pr.pid.unwrap()),
                    "uuid {uuid} changed pid"
                );
                e.process = Some((
                    pr.pid.unwrap(),
                    pr.process_name.clone().unwrap(),
                    pr.process_labels.clone(),
                ));
            }
            if let Some(th) = &d.thread {
                e.thread = Some((th.pid.unwrap(), th.thread_name.clone().unwrap()));
            }
            e.name = d.name.clone().or(e.name.take());
            e.parent = d.parent_uuid.or(e.parent);
        }
        if let Some(e) = &p.track_event {
            assert_ne!(flags & proto::SEQ_NEEDS_INCREMENTAL_STATE, 0, "packet {i}");
            assert_eq!(p.trusted_packet_sequence_id, Some(1), "packet {i}");
            if let Some(n) = e.name_iid {
                assert!(names.contains_key(&n), "packet {i}: name iid {n} undefined");
            }
            for c in &e.category_iids {
                assert!(cats.contains(c), "packet {i}: category iid {c} undefined");
            }
            for a in &e.debug_annotations {
                let n = a.name_iid.unwrap();
                assert!(
                    arg_names.contains_key(&n),
                    "packet {i}: arg name iid {n} undefined"
                );
                if let Some(s) = a.string_value_iid {
                    assert!(
                        strings.contains_key(&s),
                        "packet {i}: string iid {s} undefined"
                    );
                }
            }
            events.push((p.timestamp.unwrap(), e.clone()));
        }
    }
    // Process names by pid: the last descriptor wins, as in Perfetto.
    let pname: HashMap<i32, (String, Vec<String>)> = descs
        .values()
        .filter_map(|d| d.process.clone())
        .map(|(pid, n, l)| (pid, (n, l)))
        .collect();
    let track_name = |uuid: u64| -> TrackName {
        let d = descs
            .get(&uuid)
            .unwrap_or_else(|| panic!("track {uuid} undescribed"));
        if let Some((pid, name)) = &d.thread {
            return (pname[pid].0.clone(), name.clone());
        }
        let parent = &descs[&d.parent.expect("a named track has a parent")];
        let pid = parent.process.as_ref().expect("its parent is a process").0;
        (pname[&pid].0.clone(), d.name.clone().unwrap())
    };
    let mut t = Timeline::default();
    for (name, labels) in pname.values() {
        if !labels.is_empty() {
            t.labels.insert(name.clone(), labels.clone());
        }
    }
    // In time order (stable, like the trace processor's sort): slices and flows.
    events.sort_by_key(|e| e.0);
    let mut open: HashMap<u64, Vec<u64>> = HashMap::new();
    let mut active: HashSet<u64> = HashSet::new();
    for (ts, e) in &events {
        let uuid = e.track_uuid.unwrap();
        let name = || {
            let args: BTreeMap<&String, Value> = e
                .debug_annotations
                .iter()
                .map(|a| (&arg_names[&a.name_iid.unwrap()], value(a, &strings)))
                .collect();
            let name = &names[&e.name_iid.unwrap()];
            format!("{name} {}", serde_json::to_string(&args).unwrap())
        };
        match e.r#type.unwrap() {
            proto::TYPE_SLICE_BEGIN => {
                t.slices.entry(track_name(uuid)).or_default().push(name());
                open.entry(uuid).or_default().push(*ts);
            }
            proto::TYPE_SLICE_END => {
                let start = open.get_mut(&uuid).and_then(Vec::pop);
                assert!(
                    start.is_some_and(|s| s <= *ts),
                    "end at {ts} on {uuid} closes nothing"
                );
            }
            proto::TYPE_INSTANT => t.instants.entry(track_name(uuid)).or_default().push(name()),
            other => panic!("event type {other}"),
        }
        for f in &e.flow_ids {
            if !active.insert(*f) {
                t.flows += 1;
            }
        }
    }
    assert!(open.values().all(Vec::is_empty), "slices left open");
    t.sort();
    t
}

/// One line per packet, so golden diffs point at one event.
fn packet_lines(bytes: &[u8]) -> String {
    decode(bytes)
        .packet
        .iter()
        .map(|p| format!("{p:?}\n"))
        .collect()
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

/// Checks one input: both decodings agree with each other and with the JSON.
fn check(gpu: &[PathBuf], cpu: Option<&Path>) -> (String, Vec<u8>) {
    check_with(gpu, cpu, None)
}

/// [`check`], with a recording's driver events on both timelines.
pub fn check_with(
    gpu: &[PathBuf],
    cpu: Option<&Path>,
    driver: Option<&DriverTrace>,
) -> (String, Vec<u8>) {
    let (json, pb) = run_with(gpu, cpu, driver);
    let own = decode(&pb);
    let expected = from_json(&json);
    assert!(!expected.slices.is_empty(), "the input has slices");
    assert_eq!(from_proto(&own), expected);
    if let Some(text) = protoc_decode(&pb) {
        let theirs = from_text(&parse_text(&text));
        assert_eq!(theirs, own, "protoc reads other values than gpuperf wrote");
    }
    (json, pb)
}

#[test]
fn own_format__perfetto_matches_chrome_and_golden() {
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
fn kineto_small__perfetto_matches_chrome_and_golden() {
    let (_, pb) = check(&[data("kineto/small.pt.trace.json")], None);
    golden::check(
        &data("perfetto/kineto_small.expected.txt"),
        &packet_lines(&pb),
    );
}

#[test]
fn kineto_capture__markers_and_graph_flows_match_chrome() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("capture.pt.trace.json");
    std::fs::write(&path, crate::captured::capture_trace().to_string()).unwrap();
    let (json, _) = check(&[path], None);
    assert!(json.contains("launch captured into a CUDA graph"));
}

#[test]
fn real_recordings__perfetto_matches_chrome_and_is_smaller() {
    for name in [B200, V100, A100] {
        let (json, pb) = check(&[real(name)], None);
        assert!(
            pb.len() * 2 < json.len(),
            "{name}: {} protobuf bytes against {} JSON bytes",
            pb.len(),
            json.len()
        );
    }
}

#[test]
fn interned_names__each_written_once() {
    let (_, pb) = run(&[real(B200)], None);
    let trace = decode(&pb);
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

/// Both timelines with the idle slices: the same slices on the same tracks.
fn check_idle(gpu: &[PathBuf]) -> Timeline {
    let mut strings = StringTable::new();
    let inputs = GpuInputs::open(gpu, &mut strings).unwrap();
    let mut json = chrome::Writer::new(Vec::new()).unwrap().with_idle_slices();
    let mut pb = perfetto::Writer::new(Vec::new())
        .unwrap()
        .with_idle_slices();
    join::merge(
        None,
        &inputs,
        &mut strings,
        &join::Options::default(),
        &mut [&mut json, &mut pb],
    )
    .unwrap();
    let json = String::from_utf8(json.into_inner()).unwrap();
    let pb = pb.into_inner();
    let expected = from_json(&json);
    let own = decode(&pb);
    assert_eq!(from_proto(&own), expected);
    if let Some(text) = protoc_decode(&pb) {
        assert_eq!(from_text(&parse_text(&text)), own);
    }
    expected
}

#[test]
fn idle_slices__perfetto_matches_chrome_on_a_synthetic_and_a_real_trace() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idle.pt.trace.json");
    std::fs::write(&path, crate::idle::trace().to_string()).unwrap();
    let t = check_idle(&[path]);
    let idle: Vec<&String> = t
        .slices
        .iter()
        .flat_map(|(track, v)| v.iter().map(move |s| (track, s)))
        .filter(|(_, s)| s.starts_with("GPU idle"))
        .map(|(_, s)| s)
        .collect();
    // 7 pieces of the stream's 3 gaps, and the device's 3 gaps.
    assert_eq!(idle.len(), 10, "{idle:#?}");
    assert!(
        t.slices
            .keys()
            .any(|(_, track)| track == "GPU idle (no stream busy)"),
        "{:?}",
        t.slices.keys()
    );
    let real = real("a100_alexnet_kineto_syncs.pt.trace.json.gz");
    let t = check_idle(&[real]);
    assert!(
        t.slices
            .values()
            .flatten()
            .any(|s| s.starts_with("GPU idle: host sync"))
    );
}
