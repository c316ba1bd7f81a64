//! Reader for PyTorch profiler (Kineto) traces: the Chrome-trace JSON that
//! `torch.profiler` writes (`*.pt.trace.json`, usually gzipped).
//!
//! # What is read
//!
//! Both schemas are read; an event's category says which it is.
//!
//! | category (PyTorch ≥ 1.10) | category (2021) | becomes |
//! |---|---|---|
//! | `cuda_runtime`, `cuda_driver` | `Runtime` | [`Record::Api`] |
//! | `kernel` | `Kernel` | [`ActivityKind::Kernel`](crate::model::ActivityKind::Kernel) |
//! | `gpu_memcpy` | `Memcpy` | [`ActivityKind::Memcpy`](crate::model::ActivityKind::Memcpy), direction from the name |
//! | `gpu_memset` | `Memset` | [`ActivityKind::Memset`](crate::model::ActivityKind::Memset) |
//! | `cuda_sync` | — | [`ActivityKind::Sync`](crate::model::ActivityKind::Sync), type from `args.cuda_sync_kind` |
//! | `python_function` | — | a Python frame of the CPU stacks |
//! | `cpu_op`, `user_annotation` | `Operator` | an operator frame of the CPU stacks |
//! | `process_name`, `thread_name` metadata | the same | process and thread names |
//! | `fwdbwd` flows (`ph` `s`/`f`) | — | links from forward to backward ops |
//! | anything else (other flows, instants, `ac2g`, `overhead`, …) | | skipped, counted |
//!
//! API calls and GPU work are joined on `args.correlation`. GPU events carry the
//! device as their `pid`, so each activity takes the process of the API call with
//! its correlation id.
//!
//! - Kernels, copies and memsets of a replayed CUDA graph carry `args."graph id"`
//!   and `args."graph node id"` (Kineto with CUDA 12 and later; `0` outside graphs, read
//!   as `None`), read into [`Activity::graph_id`](crate::model::Activity::graph_id) and [`Activity::graph_node_id`](crate::model::Activity::graph_node_id). They share
//!   the `cudaGraphLaunch` call's correlation id, so they are charged to its stack.
//! - A peer-to-peer copy names its devices `args.fromDevice` and `args.toDevice`,
//!   and the device that ran it `args.inDevice`: they become the copy's
//!   [`PeerDevices`](crate::model::PeerDevices) and its device.
//! - A `cuda_sync` event (CUPTI's synchronization record: `Stream Sync`,
//!   `Context Sync`, `Event Sync`, `Stream Wait Event`) is placed on its device and
//!   stream (`args.device`, `args.stream`); context and event syncs have no stream
//!   (`-1`, or `4294967295` in older traces). Its API call (`cudaStreamSynchronize`,
//!   …) is the `cuda_runtime` event with the same correlation id. Syncs that
//!   name no device, whose call is missing, or of an unknown kind are counted in
//!   the reader's notes.
//! - An event sync or a stream's wait on an event names the event it waited on:
//!   `args.wait_on_stream` (the stream the event was recorded on),
//!   `args.wait_on_cuda_event_record_corr_id` (the correlation id of the
//!   `cudaEventRecord` call) and `args.wait_on_cuda_event_id`, each `-1` when
//!   Kineto does not know. They become the sync's [`SyncWait`](crate::model::SyncWait). Waits whose
//!   recording call is not known, or not in the trace, are counted in the notes.
//!
//! # CPU stacks
//!
//! The trace holds the CPU stack of every API call, and the reader gives it to the
//! join as [`Imported::launch_stacks`] (exact matching on (pid, correlation id)):
//!
//! - The frames are the events that enclose the call on its thread, outermost first:
//!   Python functions, operators (`cpu_op`) and annotations (`user_annotation`,
//!   such as `ProfilerStep#3`); the API call is the leaf.
//! - Python frames are chained by `args."Python id"` / `args."Python parent id"`
//!   from the innermost Python frame enclosing the call, so the chain also reaches
//!   roots recorded on another thread id. Where a parent is missing (a trimmed
//!   trace), the chain goes on with the next Python frame that encloses the last one
//!   in time.
//! - In the 2021 schema, operators carry the Python stack they were called from in
//!   `args."Call stack"` (innermost first); each operator frame is preceded by the
//!   Python frames of its call stack that its enclosing frames do not already show.
//!   Operators on threads without Python (autograd's backward thread) keep their
//!   nesting alone.
//!
//! Stacks are built for launch calls (kernels and graph launches) and for every
//! call that caused GPU work (copies, memsets).
//!
//! # Backward ops charged to their forward line
//!
//! Autograd runs backward ops on its own thread, where no Python frame encloses
//! them. PyTorch links each backward op to the forward op that made it, and with
//! [`Options::link_backward`] (the default) a call under a linked backward op
//! gets the forward op's whole stack (its Python frames, enclosing ops and the
//! op itself), then a `[backward]` frame, then its own stack on the backward
//! thread from the root down. A flamegraph then shows a model line's forward
//! and backward GPU time under that line, and nothing of the native backward
//! stack is lost. The link is found:
//!
//! - by `fwdbwd` flow events (`"cat": "fwdbwd"`, a start at the forward op and
//!   a finish at the backward op with the same `id`; PyTorch ≥ 1.12 or so).
//!   Among ops that start at a flow's end, the forward op is the innermost one
//!   with a sequence number, the backward op the outermost one with a
//!   `Fwd thread id` above 0;
//! - otherwise by `args."Sequence number"`: a backward op (`args."Fwd thread
//!   id"` above 0) carries the number of its forward op (`Fwd thread id` 0).
//!   Several nested forward ops share a number; the one that made the autograd
//!   node starts last, so the nearest forward op starting before the backward
//!   op, on another thread of the process, is taken. `Fwd thread id` is
//!   PyTorch's own small thread index, not an OS thread id, so the trace cannot
//!   say which thread it names; where several threads run forward passes with
//!   colliding numbers, the nearest preceding op wins.
//!
//! A call is charged through the outermost linked backward op that encloses it.
//! Kernels under a backward op whose forward op is not in the trace (trimmed
//! traces, `AccumulateGrad` of a leaf) keep their own stack. Both counts are
//! one note of the summary.
//!
//! gpuperf's own recordings link backward launches to the same shape from the
//! autograd ids the injection library reads in process
//! ([`crate::join::backward`], which owns the `[backward]` frame).
//!
//! # Time
//!
//! Timestamps are µs, integers in the 2021 schema and decimals with ns digits in
//! later ones; they are converted to ns from their decimal text, so no digit is lost
//! to floating point. When the trace gives `baseTimeNanoseconds`, timestamps are
//! relative to it and it is added. The clock is wall-clock time
//! ([`Clock::Realtime`]).
//!
//! # Reading
//!
//! The JSON is streamed: the top-level object and the `traceEvents` array are
//! walked by hand, and each event is read on its own from a window of the input,
//! so memory does not grow with the file's size beyond the model. The window is
//! checked as UTF-8 once; the events profilers write (strings without escapes,
//! plain numbers) are then read by a fast path (`kineto/scan.rs`) that borrows
//! the text, and every other event by serde_json, which also decides on every
//! error. A
//! malformed event is counted in the diagnostics with its byte offset and skipped;
//! input that stops mid-event (a truncated `.json.gz`) keeps every event before it
//! and is reported as truncated; a JSON document without `traceEvents` is not a
//! trace.
//!
//! # Files
//!
//! One per step above: `stream.rs` walks the JSON (Reading), `event.rs` holds
//! one event as the JSON has it and converts its numbers (Time), `scan.rs` is
//! the fast path, `records.rs` turns events into the model's records (What is
//! read), and `stacks.rs` builds the CPU stacks and links backward ops (CPU
//! stacks, Backward ops). This file holds the entry points and the builder
//! they share.
//!
//! # Cost
//!
//! `cargo bench -p gpuperf-merge --bench kineto -- --runs 5` reads a trace of 1 M
//! kernels made by repeating the V100 trace of `samples/recordings/real/` (3.45 GB
//! of JSON, 8.6 M events), joins it and writes folded stacks, on one core. On a
//! 2-core x86-64 VM shared with other jobs: 4.8–5.0 s wall and on the CPU (medians
//! of 5, in three runs of the bench; about 4.4 s reading, 0.45 s joining and
//! folding), 617 MiB peak RSS. About half of the time is the fast path reading
//! events, a sixth the kernel copying the file and mapping memory.

mod event;
mod records;
mod scan;
mod stacks;
mod stream;

use std::io::Read;
use std::path::Path;

use rustc_hash::{FxHashMap, FxHashSet};

use crate::diag::Diagnostics;
use crate::error::{Error, Result};
use crate::model::{ApiDomain, Clock, Record, StringId, StringTable};
use crate::read::cpu::ProfilerStep;
use crate::read::imported::Imported;
use event::{
    Args, DeviceProp, DistributedInfo, Event, Raw, number_text, parse_int, parse_u32, parse_us,
};
use stream::{Walk, Window, walk};

/// Whether the start of a file looks like a Kineto trace: a JSON object. (Which
/// JSON objects are traces is known only once `traceEvents` is found.)
pub(crate) fn looks_like_kineto(head: &[u8]) -> bool {
    let head = head.strip_prefix(b"\xef\xbb\xbf").unwrap_or(head);
    head.iter()
        .find(|b| !b.is_ascii_whitespace())
        .is_some_and(|&b| b == b'{')
}

/// Reads a whole trace from `input` (already decompressed). `path` names it in
/// messages; kernel and API names are interned into `strings`.
///
/// Fails when the input cannot be read, is not a JSON object, or has no
/// `traceEvents`. Malformed events are counted, and a cut-off input keeps what came
/// before the cut.
pub fn read<R: Read>(input: R, path: &Path, strings: &mut StringTable) -> Result<Imported> {
    read_with(input, path, strings, &Options::default())
}

/// Reader options.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Options {
    /// Charge GPU work launched under a backward op to the stack of the forward
    /// op that made it: the forward op's stack, then `[backward]`, then the
    /// backward thread's own stack, so forward and backward of a model line read
    /// together and no frame is lost. Default is `true`.
    pub link_backward: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            link_backward: true,
        }
    }
}

/// [`read`] with options.
pub fn read_with<R: Read>(
    input: R,
    path: &Path,
    strings: &mut StringTable,
    options: &Options,
) -> Result<Imported> {
    let mut window = Window::new(input);
    let mut b = Builder::new(path, strings);
    b.link_backward = options.link_backward;
    let outcome = walk(&mut window, &mut b).map_err(Error::io("read", path))?;
    match &outcome {
        Walk::Done => {}
        Walk::Cut(at) => b.truncated_at = Some(*at),
        Walk::Malformed(at, msg) => {
            b.bad(*at, format!("malformed JSON, reading stopped here: {msg}"));
            b.truncated_at = Some(*at);
        }
    }
    if !b.saw_events || b.events == 0 && !matches!(outcome, Walk::Done) {
        let found = match outcome {
            Walk::Done => "it is a JSON object without `traceEvents`".to_owned(),
            Walk::Cut(at) => format!("it ends at byte {at} before any complete event"),
            Walk::Malformed(at, msg) => format!("malformed JSON at byte {at}: {msg}"),
        };
        return Err(Error::NotATrace {
            path: path.to_owned(),
            expected: "PyTorch profiler trace",
            found,
        });
    }
    Ok(b.finish())
}

const NONE: u32 = u32::MAX;
const NO_PARENT: u64 = u64::MAX;

/// A CPU event that can enclose API calls: a Python function or an operator.
struct Span {
    pid: u32,
    tid: u32,
    start: u64,
    end: u64,
    /// Frame name (in `Builder::frames`).
    frame: u32,
    /// Python id, `NO_PARENT` for operators.
    python_id: u64,
    /// Python parent id, `NO_PARENT` when none.
    parent: u64,
    /// The 2021 schema's `Call stack` (in `Builder::call_stacks`), `NONE` when absent.
    call_stack: u32,
    /// `args."Sequence number"`, `-1` when absent.
    seq: i64,
    /// `args."Fwd thread id"`: `0` for forward ops, more for backward ops, `-1`
    /// when absent.
    fwd_thread: i64,
}

impl Span {
    fn is_python(&self) -> bool {
        self.python_id != NO_PARENT
    }
}

/// What the stack builder needs of an API call.
struct ApiRef {
    pid: u32,
    tid: u32,
    start: u64,
    correlation_id: u32,
    /// Frame of its name.
    frame: u32,
    launch: bool,
}

struct Builder<'s> {
    path: &'s Path,
    strings: &'s mut StringTable,
    /// Names of stack frames.
    frames: StringTable,
    /// The 2021 schema's call-stack strings.
    call_stacks: StringTable,
    /// What an API call's name gives, by name: its interned name, its frame and
    /// whether it launches. Looked up once per call, worked out once per name.
    api_names: FxHashMap<Box<str>, (StringId, u32, bool)>,
    /// The frame of a Python function's or operator's name, by name.
    span_frames: FxHashMap<Box<str>, u32>,
    records: Vec<Record>,
    apis: Vec<ApiRef>,
    /// Indices in `records` of activities, whose pid comes from their API call.
    activities: Vec<usize>,
    /// Indices in `records` of synchronizations.
    syncs: Vec<usize>,
    /// `cuda_sync` events of a kind this reader does not know.
    unknown_sync_kinds: u64,
    /// `cuda_sync` events that name no device.
    syncs_without_device: u64,
    /// `cuda_sync` events that name the event they waited on.
    waits: u64,
    spans: Vec<Span>,
    /// `ProfilerStep#N` ranges, times from the trace's base.
    steps: Vec<ProfilerStep>,
    /// `fwdbwd` flow events: start (at the forward op) or finish (at the
    /// backward op), pid, tid, time, id.
    flows: Vec<(bool, u32, u32, u64, u64)>,
    /// See [`Options::link_backward`].
    link_backward: bool,
    process_names: FxHashMap<u32, String>,
    thread_names: FxHashMap<(u32, u32), String>,
    text_tids: FxHashMap<String, u32>,
    devices: Vec<DeviceProp>,
    distributed: Option<DistributedInfo>,
    base_ns: Option<u64>,
    saw_events: bool,
    /// Events parsed (used or not).
    events: u64,
    skipped: u64,
    diagnostics: Diagnostics,
    truncated_at: Option<u64>,
}

impl<'s> Builder<'s> {
    fn new(path: &'s Path, strings: &'s mut StringTable) -> Self {
        Self {
            path,
            strings,
            frames: StringTable::new(),
            call_stacks: StringTable::new(),
            api_names: FxHashMap::default(),
            span_frames: FxHashMap::default(),
            records: Vec::new(),
            apis: Vec::new(),
            activities: Vec::new(),
            syncs: Vec::new(),
            unknown_sync_kinds: 0,
            syncs_without_device: 0,
            waits: 0,
            spans: Vec::new(),
            steps: Vec::new(),
            flows: Vec::new(),
            link_backward: true,
            process_names: FxHashMap::default(),
            thread_names: FxHashMap::default(),
            text_tids: FxHashMap::default(),
            devices: Vec::new(),
            distributed: None,
            base_ns: None,
            saw_events: false,
            events: 0,
            skipped: 0,
            diagnostics: Diagnostics::default(),
            truncated_at: None,
        }
    }

    fn bad(&mut self, at: u64, msg: String) {
        let path = self.path;
        self.diagnostics
            .push(|| format!("{}@{at}", path.display()), || msg);
    }

    /// A CPU thread id: a number, a string holding one, or any other string
    /// (mapped to an id of its own, counting down from `u32::MAX`).
    fn tid(&mut self, raw: Option<Raw<'_>>) -> Option<u32> {
        let raw = raw?;
        if let Ok(t) = number_text(raw).parse::<i64>() {
            return Some(t as u32);
        }
        let text = number_text(raw);
        let n = self.text_tids.len() as u32;
        Some(
            *self
                .text_tids
                .entry(text.to_owned())
                .or_insert(u32::MAX - n),
        )
    }

    fn event(&mut self, ev: &Event<'_>, at: u64) {
        self.events += 1;
        let ph = ev.ph.as_deref().unwrap_or("");
        if ph == "M" {
            return self.metadata(ev);
        }
        let cat = ev.cat.as_deref().unwrap_or("");
        if let ("s" | "f", "fwdbwd") = (ph, cat) {
            return self.flow(ev, ph == "s", at);
        }
        let kind = match (ph, cat) {
            ("X", "cuda_runtime" | "Runtime") => What::Api(ApiDomain::Runtime),
            ("X", "cuda_driver" | "Driver") => What::Api(ApiDomain::Driver),
            ("X", "kernel" | "Kernel") => What::Kernel,
            ("X", "gpu_memcpy" | "Memcpy") => What::Memcpy,
            ("X", "gpu_memset" | "Memset") => What::Memset,
            ("X", "cuda_sync") => What::Sync,
            ("X", "python_function") => What::Python,
            ("X", "cpu_op" | "Operator" | "user_annotation") => What::Op,
            _ => {
                self.skipped += 1;
                return;
            }
        };
        let (Some(start), dur) = (parse_us(ev.ts), parse_us(ev.dur)) else {
            return self.bad(at, format!("`{cat}` event without a valid `ts`"));
        };
        let empty = Args::default();
        let x = Slice {
            ev,
            args: ev.args.as_deref().unwrap_or(&empty),
            name: ev.name.as_deref().unwrap_or(""),
            cat,
            start,
            end: start.saturating_add(dur.unwrap_or(0)),
            at,
        };
        match kind {
            What::Api(domain) => self.api_event(&x, domain),
            What::Kernel | What::Memcpy | What::Memset | What::Sync => {
                self.activity_event(&x, kind)
            }
            What::Python | What::Op => self.span_event(&x, kind),
        }
    }

    /// A `fwdbwd` flow event, which links a forward op (start) to the backward
    /// op it made (finish).
    fn flow(&mut self, ev: &Event<'_>, start: bool, at: u64) {
        let (Some(pid), Some(tid), Some(ts), Some(id)) = (
            parse_u32(ev.pid),
            self.tid(ev.tid),
            parse_us(ev.ts),
            parse_int(ev.id),
        ) else {
            return self.bad(
                at,
                "`fwdbwd` flow without a valid `pid`, `tid`, `ts` and `id`".into(),
            );
        };
        self.flows.push((start, pid, tid, ts, id as u64));
    }

    fn metadata(&mut self, ev: &Event<'_>) {
        let value = ev.args.as_ref().and_then(|a| a.name.as_deref());
        let (Some(pid), Some(value)) = (parse_u32(ev.pid), value) else {
            self.skipped += 1;
            return;
        };
        match ev.name.as_deref() {
            Some("process_name") => {
                self.process_names.insert(pid, value.to_owned());
            }
            Some("thread_name") => {
                if let Some(tid) = self.tid(ev.tid) {
                    self.thread_names.insert((pid, tid), value.to_owned());
                }
            }
            _ => self.skipped += 1,
        }
    }

    fn finish(mut self) -> Imported {
        let base = self.base_ns.unwrap_or(0);
        let owners = self.assign_pids();
        let mut notes = self.sync_notes(&owners);
        if let Some(d) = self.devices.iter().find_map(|d| {
            d.name
                .as_deref()
                .filter(|n| n.contains(crate::model::SIMULATED_DEVICE_MARK))
        }) {
            notes.push(format!(
                "{}: the trace's device `{d}` is gpuperf's simulated CUDA runtime; no GPU ran this trace",
                crate::model::SIMULATED_GPU_NOTE
            ));
        }
        let (mut stacks, backward) = self.build_stacks(&owners);
        if backward.linked + backward.unlinked > 0 {
            notes.push(format!(
                "{} kernels launched under a backward op: {} charged to their forward op's stack under `[backward]`, {} left on the backward thread's stack (no forward op found)",
                backward.linked + backward.unlinked,
                backward.linked,
                backward.unlinked
            ));
        }
        for l in &mut stacks.launches {
            l.ts_ns = l.ts_ns.saturating_add(base);
        }
        stacks.steps = std::mem::take(&mut self.steps);
        for s in &mut stacks.steps {
            s.start_ns = s.start_ns.saturating_add(base);
            s.end_ns = s.end_ns.saturating_add(base);
        }
        let head = self.head_records(base, &owners);
        for l in &stacks.launches {
            let (pid, tid) = (l.pid, l.tid);
            stacks.comms.entry((pid, tid)).or_insert_with(|| {
                self.thread_names
                    .get(&(pid, tid))
                    .or_else(|| self.process_names.get(&pid))
                    .cloned()
                    .unwrap_or_else(|| "python".to_owned())
            });
        }

        let mut imp = Imported::new(self.path, "PyTorch profiler trace", Clock::Realtime);
        imp.records = head;
        imp.launch_stacks = (!stacks.launches.is_empty()).then_some(stacks);
        imp.skipped = self.skipped;
        imp.diagnostics = self.diagnostics;
        imp.truncated_at = self.truncated_at;
        imp.notes = notes;
        imp
    }
}

/// Which process each correlation id belongs to, and who made the calls.
struct Owners {
    pid_of: FxHashMap<u32, u32>,
    /// API calls per process.
    calls: FxHashMap<u32, usize>,
    /// The process that made the most calls: owner of activities without one.
    main_pid: u32,
    /// (pid, correlation id) of calls that caused GPU work.
    with_work: FxHashSet<(u32, u32)>,
    /// Kernels per (pid, correlation id).
    kernels: FxHashMap<(u32, u32), u64>,
}

/// One complete (`"ph": "X"`) event, with what every handler reads of it.
struct Slice<'e, 'a> {
    ev: &'e Event<'a>,
    args: &'e Args<'a>,
    name: &'e str,
    cat: &'e str,
    start: u64,
    end: u64,
    /// Where the event is in the file, for messages.
    at: u64,
}

#[derive(Clone, Copy)]
enum What {
    Api(ApiDomain),
    Kernel,
    Memcpy,
    Memset,
    Sync,
    Python,
    Op,
}

#[cfg(test)]
mod tests;
