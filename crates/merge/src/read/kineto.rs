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
//! | `kernel` | `Kernel` | [`ActivityKind::Kernel`] |
//! | `gpu_memcpy` | `Memcpy` | [`ActivityKind::Memcpy`], direction from the name |
//! | `gpu_memset` | `Memset` | [`ActivityKind::Memset`] |
//! | `cuda_sync` | — | [`ActivityKind::Sync`], type from `args.cuda_sync_kind` |
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
//!   and `args."graph node id"` (Kineto with CUDA 12 and later; `0` outside graphs),
//!   read into [`Activity::graph_id`] and [`Activity::graph_node_id`]. They share
//!   the `cudaGraphLaunch` call's correlation id, so they are charged to its stack.
//! - A peer-to-peer copy names its devices `args.fromDevice` and `args.toDevice`,
//!   and the device that ran it `args.inDevice`: they become the copy's
//!   [`PeerDevices`] and its device.
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
//!   Kineto does not know. They become the sync's [`SyncWait`]. Waits whose
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
//! gpuperf's own recordings cannot link backward ops yet: the autograd
//! sequence number and the forward thread index live in libtorch's private
//! thread-local state (the current `RecordFunction` and autograd node), which
//! has no stable C interface and no fixed layout to read from another library
//! without PyTorch's cooperation.
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
//! # Cost
//!
//! `cargo bench -p gpuperf-merge --bench kineto -- --runs 5` reads a trace of 1 M
//! kernels made by repeating the V100 trace of `samples/recordings/real/` (3.45 GB
//! of JSON, 8.6 M events), joins it and writes folded stacks, on one core. On a
//! 2-core x86-64 VM shared with other jobs: 4.8–5.0 s wall and on the CPU (medians
//! of 5, in three runs of the bench; about 4.4 s reading, 0.45 s joining and
//! folding), 617 MiB peak RSS. About half of the time is the fast path reading
//! events, a sixth the kernel copying the file and mapping memory.

mod scan;

use std::borrow::Cow;
use std::io::{self, Read};
use std::path::Path;

use rustc_hash::{FxHashMap, FxHashSet};
use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::value::RawValue;

use crate::diag::Diagnostics;
use crate::error::{Error, Result};
use crate::model::{
    Activity, ActivityKind, ApiCall, ApiDomain, Clock, Device, MemcpyKind, PeerDevices, Process,
    Record, StringId, StringTable, SyncWait, UNKNOWN_DEVICE, api_base_name, is_launch_api,
};
use crate::read::cpu::{CpuLaunch, CpuTrace, ProfilerStep, StackId};
use crate::read::imported::Imported;

/// Whether the start of a file looks like a Kineto trace: a JSON object. (Which
/// JSON objects are traces is known only once `traceEvents` is found.)
pub fn looks_like_kineto(head: &[u8]) -> bool {
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
    let outcome = walk(&mut window, &mut b).map_err(|source| Error::Io {
        action: "read",
        path: path.to_owned(),
        source,
    })?;
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

// ---------------------------------------------------------------------------
// Streaming: a window over the input that grows until one value fits.

/// A sliding window over the input: `buf[pos..end]` is unread.
struct Window<R> {
    input: R,
    buf: Vec<u8>,
    pos: usize,
    end: usize,
    /// File offset of `buf[0]`.
    base: u64,
    eof: bool,
    /// `buf[text_at..checked]` is valid UTF-8 (see [`Window::check_text`]).
    checked: usize,
    /// `pos` when `check_text` last ran, `usize::MAX` once the content moved.
    text_at: usize,
}

/// How far the walk got.
#[derive(Debug)]
enum Walk {
    Done,
    /// The input ended inside a value that starts at this offset.
    Cut(u64),
    /// Not JSON at this offset.
    Malformed(u64, String),
}

/// What parsing one value from the window gave.
enum Step<T> {
    Value(T, usize),
    NeedMore,
    Bad(serde_json::Error),
}

/// A serde_json error without its line and column, which count from the window's
/// start, not the file's (the message names the byte offset instead).
fn message(e: &serde_json::Error) -> String {
    let text = e.to_string();
    match text.rfind(" at line ") {
        Some(i) => text[..i].to_owned(),
        None => text,
    }
}

/// Where in `slice` serde_json stopped with `e` (it reports a line and column).
fn error_offset(slice: &[u8], e: &serde_json::Error) -> usize {
    let mut start = 0;
    for _ in 1..e.line() {
        match memchr::memchr(b'\n', &slice[start..]) {
            Some(i) => start += i + 1,
            None => return slice.len(),
        }
    }
    (start + e.column()).min(slice.len())
}

fn parse_one<'a, T: Deserialize<'a>>(slice: &'a [u8]) -> Step<T> {
    step(
        slice,
        serde_json::Deserializer::from_slice(slice).into_iter::<T>(),
    )
}

/// [`parse_one`] on text known to be UTF-8: serde_json then need not check each
/// string again, which was a fifth of the reading time.
fn parse_one_str<'a, T: Deserialize<'a>>(text: &'a str) -> Step<T> {
    step(
        text.as_bytes(),
        serde_json::Deserializer::from_str(text).into_iter::<T>(),
    )
}

fn step<'a, R: serde_json::de::Read<'a>, T: Deserialize<'a>>(
    slice: &[u8],
    mut it: serde_json::StreamDeserializer<'a, R, T>,
) -> Step<T> {
    match it.next() {
        Some(Ok(v)) => {
            let n = it.byte_offset();
            Step::Value(v, n)
        }
        Some(Err(e)) if e.is_eof() => Step::NeedMore,
        // A value cut by the window's end can look malformed (`12.` is an invalid
        // number); only an error before the end is one.
        Some(Err(e)) if error_offset(slice, &e) + 1 >= slice.len() => Step::NeedMore,
        Some(Err(e)) => Step::Bad(e),
        None => Step::NeedMore,
    }
}

impl<R: Read> Window<R> {
    const CHUNK: usize = 4 << 20;

    fn new(input: R) -> Self {
        Self {
            input,
            buf: vec![0; Self::CHUNK],
            pos: 0,
            end: 0,
            base: 0,
            eof: false,
            checked: 0,
            text_at: usize::MAX,
        }
    }

    /// Checks the unread input as UTF-8, for [`Window::text`]. Each byte is checked
    /// once.
    fn check_text(&mut self) {
        let (pos, end) = (self.pos, self.end);
        // `pos` moved past what was checked, or into a character (only in input
        // that is not JSON): check again from `pos`.
        if self.checked < pos || self.checked > pos && (0x80..0xc0).contains(&self.buf[pos]) {
            self.checked = pos;
        }
        if self.checked < end {
            let more = match std::str::from_utf8(&self.buf[self.checked..end]) {
                Ok(_) => end - self.checked,
                Err(e) => e.valid_up_to(),
            };
            self.checked += more;
        }
        self.text_at = pos;
    }

    /// The unread input as text, as far as [`Window::check_text`] found it valid
    /// UTF-8: all of it but a character cut by the window's end, unless the input
    /// is not UTF-8.
    fn text(&self) -> &str {
        if self.text_at != self.pos {
            return "";
        }
        let valid = &self.buf[self.pos..self.checked];
        // SAFETY: `check_text` ran at this `pos` and the content has not moved
        // since (`fill` resets `text_at`); it left `buf[pos..checked]` valid
        // UTF-8: every byte in it was checked by `from_utf8`, now or at an earlier
        // call (since the content last moved, `fill` shifting `checked` with it),
        // the checked runs join at character boundaries (`valid_up_to` ends on
        // one), and `pos` is not a continuation byte (`10xxxxxx`), so the slice
        // starts on a boundary too.
        unsafe { std::str::from_utf8_unchecked(valid) }
    }

    fn offset(&self) -> u64 {
        self.base + self.pos as u64
    }

    fn unread(&self) -> &[u8] {
        &self.buf[self.pos..self.end]
    }

    /// Reads more input after what is unread; false at the end of the input.
    fn fill(&mut self) -> io::Result<bool> {
        if self.eof {
            return Ok(false);
        }
        if self.pos > 0 {
            self.buf.copy_within(self.pos..self.end, 0);
            self.base += self.pos as u64;
            self.end -= self.pos;
            self.checked = self.checked.saturating_sub(self.pos);
            self.text_at = usize::MAX;
            self.pos = 0;
        }
        if self.end == self.buf.len() {
            // One value larger than the window: grow it.
            self.buf.resize(self.buf.len() * 2, 0);
        }
        loop {
            match self.input.read(&mut self.buf[self.end..]) {
                Ok(0) => {
                    self.eof = true;
                    return Ok(false);
                }
                Ok(n) => {
                    self.end += n;
                    return Ok(true);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // A gzip stream cut off early: the data simply ends here.
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                    self.eof = true;
                    return Ok(false);
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// The next byte that is not whitespace, without consuming it.
    fn peek(&mut self) -> io::Result<Option<u8>> {
        loop {
            if let Some(i) = self.unread().iter().position(|b| !b.is_ascii_whitespace()) {
                self.pos += i;
                return Ok(Some(self.buf[self.pos]));
            }
            self.pos = self.end;
            if !self.fill()? {
                return Ok(None);
            }
        }
    }

    /// Parses one value, reading more input until it is whole, and hands it to `f`.
    /// `Ok(Err(walk))` when the input ends or is not JSON.
    fn value<T, F>(&mut self, f: F) -> io::Result<std::result::Result<(), Walk>>
    where
        T: for<'a> Deserialize<'a>,
        F: FnOnce(T),
    {
        let at = self.offset();
        loop {
            match parse_one::<T>(self.unread()) {
                // A number that ends with the window may go on after it.
                Step::Value(_, n) if n == self.end - self.pos && !self.eof => {
                    if !self.fill()? {
                        continue;
                    }
                }
                Step::Value(v, n) => {
                    f(v);
                    self.pos += n;
                    return Ok(Ok(()));
                }
                Step::NeedMore => {
                    if !self.fill()? {
                        return Ok(Err(Walk::Cut(at)));
                    }
                }
                Step::Bad(e) => return Ok(Err(Walk::Malformed(at, message(&e)))),
            }
        }
    }
}

/// Walks `{ …, "traceEvents": [ event, … ], … }`.
fn walk<R: Read>(w: &mut Window<R>, b: &mut Builder<'_>) -> io::Result<Walk> {
    macro_rules! next {
        ($e:expr) => {
            match $e? {
                Ok(()) => {}
                Err(walk) => return Ok(walk),
            }
        };
    }
    match w.peek()? {
        Some(b'{') => w.pos += 1,
        Some(_) => return Ok(Walk::Malformed(w.offset(), "not a JSON object".into())),
        None => return Ok(Walk::Cut(w.offset())),
    }
    loop {
        match w.peek()? {
            Some(b'}') => return Ok(Walk::Done),
            Some(b',') => w.pos += 1,
            Some(b'"') => {
                let mut key = String::new();
                next!(w.value::<Cow<'_, str>, _>(|k| key = k.into_owned()));
                match w.peek()? {
                    Some(b':') => w.pos += 1,
                    Some(_) => return Ok(Walk::Malformed(w.offset(), "expected `:`".into())),
                    None => return Ok(Walk::Cut(w.offset())),
                }
                match key.as_str() {
                    "traceEvents" => {
                        b.saw_events = true;
                        if let done @ (Walk::Cut(_) | Walk::Malformed(..)) = events(w, b)? {
                            return Ok(done);
                        }
                    }
                    "deviceProperties" => {
                        next!(w.value::<Option<Vec<DeviceProp>>, _>(|d| {
                            b.devices = d.unwrap_or_default();
                        }))
                    }
                    "baseTimeNanoseconds" => {
                        next!(w.value::<Box<RawValue>, _>(|v| {
                            b.base_ns = parse_ns_int(v.get());
                        }))
                    }
                    _ => next!(w.value::<IgnoredAny, _>(|_| ())),
                }
            }
            Some(_) => return Ok(Walk::Malformed(w.offset(), "expected a key or `}`".into())),
            None => return Ok(Walk::Cut(w.offset())),
        }
    }
}

/// Walks `[ event, … ]`, one event at a time.
fn events<R: Read>(w: &mut Window<R>, b: &mut Builder<'_>) -> io::Result<Walk> {
    match w.peek()? {
        Some(b'[') => w.pos += 1,
        Some(b'n') => {
            // `null`: no events.
            return Ok(match w.value::<IgnoredAny, _>(|_| ())? {
                Ok(()) => Walk::Done,
                Err(e) => e,
            });
        }
        Some(_) => {
            return Ok(Walk::Malformed(
                w.offset(),
                "`traceEvents` is not an array".into(),
            ));
        }
        None => return Ok(Walk::Cut(w.offset())),
    }
    loop {
        match w.peek()? {
            Some(b']') => {
                w.pos += 1;
                return Ok(Walk::Done);
            }
            Some(b',') => w.pos += 1,
            Some(_) => {
                let at = w.offset();
                // Parsed in place so that the event's strings borrow the window.
                loop {
                    let whole = w.end - w.pos;
                    // The UTF-8 text first; where the event goes on past it (cut by
                    // the window, or around bytes that are not UTF-8), the bytes.
                    w.check_text();
                    let text = w.text();
                    let step = match scan::event(text) {
                        Some((ev, n)) if n < text.len() => Step::Value(ev, n),
                        _ => match parse_one_str::<Event<'_>>(text) {
                            Step::Value(ev, n) if n < text.len() => Step::Value(ev, n),
                            Step::Bad(e)
                                if e.classify() != serde_json::error::Category::Eof
                                    && error_offset(text.as_bytes(), &e) + 1 < text.len() =>
                            {
                                Step::Bad(e)
                            }
                            _ => parse_one::<Event<'_>>(w.unread()),
                        },
                    };
                    match step {
                        Step::Value(_, n) if n == whole && !w.eof => {
                            w.fill()?;
                        }
                        Step::Value(ev, n) => {
                            b.event(&ev, at);
                            w.pos += n;
                            break;
                        }
                        Step::NeedMore => {
                            if !w.fill()? {
                                return Ok(Walk::Cut(at));
                            }
                        }
                        Step::Bad(e) if e.classify() == serde_json::error::Category::Data => {
                            // Valid JSON of an unexpected shape: skip this event only.
                            let msg = format!("event skipped: {}", message(&e));
                            match w.value::<IgnoredAny, _>(|_| ())? {
                                Ok(()) => b.bad(at, msg),
                                Err(walk) => return Ok(walk),
                            }
                            break;
                        }
                        Step::Bad(e) => return Ok(Walk::Malformed(at, message(&e))),
                    }
                }
            }
            None => return Ok(Walk::Cut(w.offset())),
        }
    }
}

// ---------------------------------------------------------------------------
// Events.

#[derive(Deserialize, Default, Debug, PartialEq)]
struct Event<'a> {
    #[serde(borrow, default)]
    ph: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    cat: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pid: Option<Raw<'a>>,
    #[serde(borrow, default)]
    tid: Option<Raw<'a>>,
    #[serde(borrow, default)]
    ts: Option<Raw<'a>>,
    #[serde(borrow, default)]
    dur: Option<Raw<'a>>,
    // Boxed: the event is moved several times on its way out of serde, and most
    // of its size is here.
    #[serde(borrow, default)]
    args: Option<Box<Args<'a>>>,
    /// A flow event's id (`fwdbwd` flows link a forward op to its backward op).
    #[serde(borrow, default)]
    id: Option<Raw<'a>>,
}

#[derive(Deserialize, Default, Debug, PartialEq)]
struct Args<'a> {
    #[serde(borrow, default)]
    correlation: Option<Raw<'a>>,
    #[serde(borrow, default)]
    cbid: Option<Raw<'a>>,
    #[serde(borrow, default)]
    device: Option<Raw<'a>>,
    #[serde(borrow, default)]
    context: Option<Raw<'a>>,
    #[serde(borrow, default)]
    stream: Option<Raw<'a>>,
    #[serde(borrow, default)]
    bytes: Option<Raw<'a>>,
    #[serde(default)]
    grid: Option<[u32; 3]>,
    #[serde(default)]
    block: Option<[u32; 3]>,
    #[serde(borrow, default, rename = "Python id")]
    python_id: Option<Raw<'a>>,
    #[serde(borrow, default, rename = "Python parent id")]
    python_parent: Option<Raw<'a>>,
    #[serde(borrow, default, rename = "Call stack")]
    call_stack: Option<Cow<'a, str>>,
    /// Metadata events' value.
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    /// A `cuda_sync` event's kind (`Stream Sync`, …), as its name.
    #[serde(borrow, default)]
    cuda_sync_kind: Option<Cow<'a, str>>,
    /// An event sync's or stream wait's event: the stream it was recorded on,
    /// the correlation id of the `cudaEventRecord` call, CUPTI's event id (`-1`
    /// when Kineto does not know).
    #[serde(borrow, default)]
    wait_on_stream: Option<Raw<'a>>,
    #[serde(borrow, default)]
    wait_on_cuda_event_record_corr_id: Option<Raw<'a>>,
    #[serde(borrow, default)]
    wait_on_cuda_event_id: Option<Raw<'a>>,
    /// An operator's autograd sequence number: a backward op carries its
    /// forward op's.
    #[serde(borrow, default, rename = "Sequence number")]
    sequence_number: Option<Raw<'a>>,
    /// An operator's forward thread: `0` for forward ops, a small thread index
    /// (not an OS tid) for backward ops.
    #[serde(borrow, default, rename = "Fwd thread id")]
    fwd_thread_id: Option<Raw<'a>>,
    #[serde(borrow, default, rename = "graph id")]
    graph_id: Option<Raw<'a>>,
    #[serde(borrow, default, rename = "graph node id")]
    graph_node_id: Option<Raw<'a>>,
    /// A peer-to-peer copy's devices: from, to, and the one that ran it.
    #[serde(borrow, default, rename = "fromDevice")]
    from_device: Option<Raw<'a>>,
    #[serde(borrow, default, rename = "toDevice")]
    to_device: Option<Raw<'a>>,
    #[serde(borrow, default, rename = "inDevice")]
    in_device: Option<Raw<'a>>,
    /// The context of the device that ran a peer-to-peer copy.
    #[serde(borrow, default, rename = "inContext")]
    in_context: Option<Raw<'a>>,
}

/// The text of a JSON value, as serde_json's `RawValue` gives it (the fast path
/// in [`scan`] makes it too).
#[derive(Clone, Copy, Debug, PartialEq)]
struct Raw<'a>(&'a str);

impl<'de: 'a, 'a> Deserialize<'de> for Raw<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        <&RawValue>::deserialize(d).map(|r| Raw(r.get()))
    }
}

#[derive(Deserialize)]
struct DeviceProp {
    #[serde(default)]
    id: Option<u32>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default, rename = "computeMajor")]
    major: Option<u16>,
    #[serde(default, rename = "computeMinor")]
    minor: Option<u16>,
}

/// A JSON number's text, or a string holding one (Kineto writes some ids as
/// strings), without quotes.
fn number_text(raw: Raw<'_>) -> &str {
    let t = raw.0;
    t.strip_prefix('"')
        .and_then(|t| t.strip_suffix('"'))
        .unwrap_or(t)
}

fn parse_int(raw: Option<Raw<'_>>) -> Option<i64> {
    number_text(raw?).parse().ok()
}

fn parse_u32(raw: Option<Raw<'_>>) -> Option<u32> {
    u32::try_from(parse_int(raw)?).ok()
}

/// An integer number of ns.
fn parse_ns_int(t: &str) -> Option<u64> {
    t.trim_matches('"').parse().ok()
}

/// A non-negative decimal number of µs (`12`, `12.5`, `1.25e3`) as ns, from its
/// text: exact up to the ns, rounded half up below it.
fn us_to_ns(text: &str) -> Option<u64> {
    // Twice per event: the usual forms, `123` and `123.456`, take one pass.
    let text = text.as_bytes();
    let mut ns: u64 = 0;
    let mut decimals: Option<u32> = None;
    let usual = text.first().is_some_and(u8::is_ascii_digit)
        && text.iter().all(|&b| match (b, &mut decimals) {
            (b'.', d @ None) => {
                *d = Some(0);
                true
            }
            (b'0'..=b'9', Some(3)) => false,
            (b'0'..=b'9', d) => {
                if let Some(d) = d {
                    *d += 1;
                }
                match ns
                    .checked_mul(10)
                    .and_then(|v| v.checked_add(u64::from(b - b'0')))
                {
                    Some(v) => {
                        ns = v;
                        true
                    }
                    None => false,
                }
            }
            _ => false,
        });
    if usual {
        return ns.checked_mul(10u64.pow(3 - decimals.unwrap_or(0)));
    }
    // Any other form, without allocating.
    let (mantissa, exp) = match text.iter().position(|&b| b == b'e' || b == b'E') {
        Some(i) => (
            &text[..i],
            std::str::from_utf8(&text[i + 1..])
                .ok()?
                .parse::<i32>()
                .ok()?,
        ),
        None => (text, 0),
    };
    let (int, frac) = match mantissa.iter().position(|&b| b == b'.') {
        Some(i) => (&mantissa[..i], &mantissa[i + 1..]),
        None => (mantissa, &mantissa[mantissa.len()..]),
    };
    if int.is_empty() && frac.is_empty()
        || !int.iter().all(u8::is_ascii_digit)
        || !frac.iter().all(u8::is_ascii_digit)
    {
        return None;
    }
    // value = digits × 10^(exp − len(frac)) µs = digits × 10^(exp − len(frac) + 3) ns,
    // where digits is int and frac written together, without leading zeros: the
    // bytes of `hi` then `lo`.
    let zeros = |d: &[u8]| d.iter().take_while(|&&b| b == b'0').count();
    let (hi, lo) = match zeros(int) {
        z if z < int.len() => (&int[z..], frac),
        _ => (&int[int.len()..], &frac[zeros(frac)..]),
    };
    let len = hi.len() + lo.len();
    // The first `n` digits as a number, if it fits.
    let value = |n: usize| -> Option<u64> {
        let (h, l) = (&hi[..n.min(hi.len())], &lo[..n.saturating_sub(hi.len())]);
        h.iter().chain(l).try_fold(0u64, |v, &d| {
            v.checked_mul(10)?.checked_add(u64::from(d - b'0'))
        })
    };
    let nth = |i: usize| {
        if i < hi.len() {
            hi[i]
        } else {
            lo[i - hi.len()]
        }
    };
    let shift = exp
        .checked_sub(i32::try_from(frac.len()).ok()?)?
        .checked_add(3)?;
    if len == 0 {
        return Some(0);
    }
    if shift >= 0 {
        return value(len)?.checked_mul(10u64.checked_pow(u32::try_from(shift).ok()?)?);
    }
    let cut = usize::try_from(-shift).ok()?;
    if cut > len {
        // Below 1 ns: rounds to 0 or 1.
        let first = if cut == len + 1 { nth(0) } else { b'0' };
        return Some(u64::from(first >= b'5'));
    }
    let keep = len - cut;
    value(keep)?.checked_add(u64::from(nth(keep) >= b'5'))
}

/// CUPTI's `CUpti_ActivitySynchronizationType` of a `cuda_sync` event, from the
/// name Kineto gives each type.
fn sync_type(kind: &str) -> Option<u8> {
    match kind {
        "Unknown Sync" => Some(0),
        "Event Sync" => Some(1),
        "Stream Wait Event" => Some(2),
        "Stream Sync" => Some(3),
        "Context Sync" => Some(4),
        _ => None,
    }
}

fn parse_us(raw: Option<Raw<'_>>) -> Option<u64> {
    us_to_ns(number_text(raw?))
}

/// Frames never hold `;` or line breaks (the folded format's separators).
fn frame_text(s: &str) -> Cow<'_, str> {
    if s.contains([';', '\n', '\r']) {
        Cow::Owned(
            s.chars()
                .map(|c| match c {
                    ';' => ':',
                    '\n' | '\r' => ' ',
                    c => c,
                })
                .collect(),
        )
    } else {
        Cow::Borrowed(s)
    }
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

    /// A runtime or driver API call.
    fn api_event(&mut self, x: &Slice<'_, '_>, domain: ApiDomain) {
        let (args, name, at) = (x.args, x.name, x.at);
        let (Some(pid), Some(tid)) = (parse_u32(x.ev.pid), self.tid(x.ev.tid)) else {
            return self.bad(
                at,
                format!("`{}` event without a valid `pid` and `tid`", x.cat),
            );
        };
        let Some(correlation_id) = parse_u32(args.correlation) else {
            return self.bad(
                at,
                format!("`{name}` call without a valid `args.correlation`"),
            );
        };
        let (name_id, frame, launch) = match self.api_names.get(name) {
            Some(&known) => known,
            None => {
                let base = api_base_name(name);
                let known = (
                    self.strings.intern(base),
                    self.frames.intern(&frame_text(base)).0,
                    is_launch_api(base),
                );
                self.api_names.insert(name.into(), known);
                known
            }
        };
        self.apis.push(ApiRef {
            pid,
            tid,
            start: x.start,
            correlation_id,
            frame,
            launch,
        });
        self.records.push(Record::Api(ApiCall {
            pid,
            tid,
            start_ns: x.start,
            end_ns: x.end,
            correlation_id,
            cbid: parse_u32(args.cbid).unwrap_or(0),
            domain,
            name: name_id,
        }));
    }

    /// A kernel, copy, memset or synchronization on the GPU side.
    fn activity_event(&mut self, x: &Slice<'_, '_>, what: What) {
        let (args, name, at) = (x.args, x.name, x.at);
        let Some(correlation_id) = parse_u32(args.correlation) else {
            return self.bad(
                at,
                format!("`{}` event without a valid `args.correlation`", x.cat),
            );
        };
        let mut device = parse_u32(args.device);
        let mut context = parse_u32(args.context);
        let mut stream = parse_u32(args.stream).unwrap_or(0);
        let kind = match what {
            What::Kernel => ActivityKind::Kernel {
                name: self.strings.intern(name),
                grid: args.grid.unwrap_or_default(),
                block: args.block.unwrap_or_default(),
            },
            What::Memcpy => {
                device = device.or(parse_u32(args.in_device));
                context = context.or(parse_u32(args.in_context));
                self.memcpy_kind(x)
            }
            What::Memset => ActivityKind::Memset {
                bytes: parse_int(args.bytes).map_or(0, |b| b.max(0) as u64),
                value: 0,
            },
            _ => {
                // No stream (context and event syncs): `-1`, or CUPTI's
                // all-ones in older traces.
                stream = parse_int(args.stream)
                    .and_then(|s| u32::try_from(s).ok())
                    .unwrap_or(u32::MAX);
                if device.is_none() {
                    self.syncs_without_device += 1;
                }
                device = device.or(Some(UNKNOWN_DEVICE));
                self.sync_kind(x)
            }
        };
        let (graph_id, graph_node_id) = self.graph_ids(x);
        self.activities.push(self.records.len());
        self.records.push(Record::Activity(Activity {
            pid: 0,
            start_ns: x.start,
            end_ns: x.end,
            correlation_id,
            device: device.unwrap_or(0),
            context: context.unwrap_or(0),
            stream,
            graph_id,
            graph_node_id,
            kind,
        }));
    }

    fn memcpy_kind(&mut self, x: &Slice<'_, '_>) -> ActivityKind {
        let args = x.args;
        // A peer-to-peer copy names its devices `fromDevice` and `toDevice`, and
        // the one that ran it `inDevice`.
        let peer = match (parse_u32(args.from_device), parse_u32(args.to_device)) {
            (Some(src), Some(dst)) => Some(PeerDevices { src, dst }),
            (None, None) => None,
            _ => {
                self.bad(
                    x.at,
                    "peer-to-peer copy naming one device of two: read as a copy on one device"
                        .into(),
                );
                None
            }
        };
        ActivityKind::Memcpy {
            // "Memcpy HtoD (Pageable -> Device)"
            kind: x
                .name
                .split_whitespace()
                .nth(1)
                .and_then(MemcpyKind::from_name)
                .unwrap_or(MemcpyKind::Unknown),
            bytes: parse_int(args.bytes).map_or(0, |b| b.max(0) as u64),
            peer,
        }
    }

    /// A sync's kind and wait; the record about to be pushed is noted as a sync.
    fn sync_kind(&mut self, x: &Slice<'_, '_>) -> ActivityKind {
        let kind = x.args.cuda_sync_kind.as_deref().unwrap_or(x.name);
        let sync_type = sync_type(kind).unwrap_or_else(|| {
            self.unknown_sync_kinds += 1;
            0
        });
        self.syncs.push(self.records.len());
        let wait = self.sync_wait(x.args, x.at);
        ActivityKind::Sync { sync_type, wait }
    }

    /// The CUDA graph and node an activity ran from, `(0, 0)` when none.
    fn graph_ids(&mut self, x: &Slice<'_, '_>) -> (u32, u64) {
        let (g, n) = (x.args.graph_id, x.args.graph_node_id);
        if g.is_none() && n.is_none() {
            return (0, 0);
        }
        let id = g.map(|g| number_text(g).parse::<u32>().ok());
        let node = n.map(|n| number_text(n).parse::<u64>().ok());
        if matches!(id, Some(None)) || matches!(node, Some(None)) {
            self.bad(
                x.at,
                format!("`{}` event whose `graph id` or `graph node id` is not a number: read as not from a graph", x.cat),
            );
            return (0, 0);
        }
        (id.flatten().unwrap_or(0), node.flatten().unwrap_or(0))
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

    /// A Python function or an operator: a CPU span that launch stacks are built
    /// from.
    fn span_event(&mut self, x: &Slice<'_, '_>, what: What) {
        let (args, name, at) = (x.args, x.name, x.at);
        let (Some(pid), Some(tid)) = (parse_u32(x.ev.pid), self.tid(x.ev.tid)) else {
            return self.bad(
                at,
                format!("`{}` event without a valid `pid` and `tid`", x.cat),
            );
        };
        let (python_id, parent) = if let What::Python = what {
            let Some(id) = parse_int(args.python_id) else {
                return self.bad(at, "Python frame without `args.\"Python id\"`".into());
            };
            (
                id as u64 & !(1 << 63),
                parse_int(args.python_parent).map_or(NO_PARENT, |p| p as u64 & !(1 << 63)),
            )
        } else {
            (NO_PARENT, NO_PARENT)
        };
        let call_stack = match &args.call_stack {
            Some(cs) if !cs.is_empty() => self.call_stacks.intern(cs).0,
            _ => NONE,
        };
        let frame = match self.span_frames.get(name) {
            Some(&f) => f,
            None => {
                let f = self.frames.intern(&frame_text(name)).0;
                self.span_frames.insert(name.into(), f);
                f
            }
        };
        if let Some(number) = name
            .strip_prefix("ProfilerStep#")
            .and_then(|n| n.parse().ok())
        {
            self.steps.push(ProfilerStep {
                pid,
                number,
                start_ns: x.start,
                end_ns: x.end,
            });
        }
        self.spans.push(Span {
            pid,
            tid,
            start: x.start,
            end: x.end,
            frame,
            python_id,
            parent,
            call_stack,
            seq: parse_int(args.sequence_number).unwrap_or(-1),
            fwd_thread: parse_int(args.fwd_thread_id).unwrap_or(-1),
        });
    }

    /// The event a sync waited on (`args.wait_on_…`), when the event names any
    /// of it. `-1` is Kineto's "not known"; a value that is not an integer is
    /// reported and read as not known.
    fn sync_wait(&mut self, args: &Args<'_>, at: u64) -> Option<SyncWait> {
        let fields = [
            ("wait_on_stream", args.wait_on_stream),
            (
                "wait_on_cuda_event_record_corr_id",
                args.wait_on_cuda_event_record_corr_id,
            ),
            ("wait_on_cuda_event_id", args.wait_on_cuda_event_id),
        ];
        if fields.iter().all(|(_, v)| v.is_none()) {
            return None;
        }
        let [stream, record, event] = fields.map(|(key, raw)| {
            let raw = raw?;
            match number_text(raw).parse::<i64>() {
                Ok(-1) => None,
                Ok(v) if (0..=i64::from(u32::MAX)).contains(&v) => Some(v as u32),
                _ => {
                    self.bad(
                        at,
                        format!(
                            "`cuda_sync` event whose `args.{key}` is not an id: read as not known"
                        ),
                    );
                    None
                }
            }
        });
        self.waits += 1;
        Some(SyncWait {
            stream,
            record_correlation_id: record,
            event_id: event,
        })
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

    /// Activities take the process of their API call; those without one go to
    /// the process that made the most calls.
    fn assign_pids(&mut self) -> Owners {
        let mut pid_of: FxHashMap<u32, u32> = FxHashMap::default();
        let mut calls: FxHashMap<u32, usize> = FxHashMap::default();
        for a in &self.apis {
            pid_of.entry(a.correlation_id).or_insert(a.pid);
            *calls.entry(a.pid).or_default() += 1;
        }
        let main_pid = calls
            .iter()
            .max_by_key(|(p, n)| (**n, std::cmp::Reverse(**p)))
            .map(|(p, _)| *p)
            .or_else(|| self.process_names.keys().min().copied())
            .unwrap_or(0);
        let mut with_work: FxHashSet<(u32, u32)> = FxHashSet::default();
        let mut kernels: FxHashMap<(u32, u32), u64> = FxHashMap::default();
        for &i in &self.activities {
            if let Record::Activity(a) = &mut self.records[i] {
                a.pid = pid_of.get(&a.correlation_id).copied().unwrap_or(main_pid);
                with_work.insert((a.pid, a.correlation_id));
                if let ActivityKind::Kernel { .. } = a.kind {
                    *kernels.entry((a.pid, a.correlation_id)).or_default() += 1;
                }
            }
        }
        Owners {
            pid_of,
            calls,
            main_pid,
            with_work,
            kernels,
        }
    }

    /// What the user should know about the trace's synchronizations.
    fn sync_notes(&self, owners: &Owners) -> Vec<String> {
        let (pid_of, main_pid) = (&owners.pid_of, owners.main_pid);
        let mut notes = Vec::new();
        let orphan_syncs = self
            .syncs
            .iter()
            .filter(|&&i| {
                matches!(&self.records[i], Record::Activity(a) if !pid_of.contains_key(&a.correlation_id))
            })
            .count();
        if orphan_syncs > 0 {
            notes.push(format!(
                "{orphan_syncs} of {} synchronization events have no API call with their correlation id in the trace: shown in process {main_pid}, on their GPU track only",
                self.syncs.len()
            ));
        }
        if self.syncs_without_device > 0 {
            notes.push(format!(
                "{} of {} synchronization events name no device: shown on the timeline's `GPU ?` track",
                self.syncs_without_device,
                self.syncs.len()
            ));
        }
        if self.unknown_sync_kinds > 0 {
            notes.push(format!(
                "{} of {} synchronization events are of a kind gpuperf does not know: read as CUPTI's unknown type (0)",
                self.unknown_sync_kinds,
                self.syncs.len()
            ));
        }
        // An event wait's recording call is found by the join on the wait's
        // process and the call's correlation id.
        let (mut unknown_record, mut missing_record) = (0u64, 0u64);
        for &i in &self.syncs {
            if let Record::Activity(Activity {
                pid,
                kind: ActivityKind::Sync { wait: Some(w), .. },
                ..
            }) = &self.records[i]
            {
                match w.record_correlation_id {
                    None => unknown_record += 1,
                    Some(c) if pid_of.get(&c) != Some(pid) => missing_record += 1,
                    Some(_) => {}
                }
            }
        }
        if unknown_record > 0 {
            notes.push(format!(
                "{unknown_record} of {} waits on a CUDA event do not name the call that recorded the event (recorded before tracing began): shown without an arrow from it",
                self.waits
            ));
        }
        if missing_record > 0 {
            notes.push(format!(
                "{missing_record} of {} waits on a CUDA event name a recording call (`cudaEventRecord`) that is not in the trace's process: shown without an arrow from it",
                self.waits
            ));
        }
        notes
    }

    /// Moves every record to the trace's base time, and returns the processes and
    /// devices followed by the events in file order.
    fn head_records(&mut self, base: u64, owners: &Owners) -> Vec<Record> {
        let main_pid = owners.main_pid;
        // Processes and devices first, then the events in file order.
        let mut first = u64::MAX;
        for r in &mut self.records {
            match r {
                Record::Api(a) => {
                    a.start_ns = a.start_ns.saturating_add(base);
                    a.end_ns = a.end_ns.saturating_add(base);
                    first = first.min(a.start_ns);
                }
                Record::Activity(a) => {
                    a.start_ns = a.start_ns.saturating_add(base);
                    a.end_ns = a.end_ns.saturating_add(base);
                    first = first.min(a.start_ns);
                }
                _ => {}
            }
        }
        let first = if first == u64::MAX { base } else { first };
        let mut pids: Vec<u32> = owners.calls.keys().copied().collect();
        if pids.is_empty() && !self.activities.is_empty() {
            pids.push(main_pid);
        }
        pids.sort_unstable();
        let mut head = Vec::new();
        for &pid in &pids {
            head.push(Record::Process(Process {
                pid,
                ppid: 0,
                exe: self.process_names.get(&pid).cloned().unwrap_or_default(),
                start_ns: first,
                start_realtime_ns: first,
            }));
            for (i, d) in self.devices.iter().enumerate() {
                head.push(Record::Device(Device {
                    pid,
                    id: d.id.unwrap_or(i as u32),
                    name: d.name.clone().unwrap_or_default(),
                    compute_capability: (d.major.unwrap_or(0), d.minor.unwrap_or(0)),
                }));
            }
        }
        head.append(&mut self.records);

        head
    }

    /// The CPU stack of every launch call and of every call that caused GPU work.
    /// With [`Options::link_backward`], a call under a backward op linked to its
    /// forward op gets the forward op's stack, then `[backward]`, then its own.
    fn build_stacks(&mut self, owners: &Owners) -> (CpuTrace, BackwardCounts) {
        let mut out = CpuTrace::with_correlation_ids();
        let mut calls: Vec<u32> = (0..self.apis.len() as u32)
            .filter(|&i| {
                let a = &self.apis[i as usize];
                a.launch || owners.with_work.contains(&(a.pid, a.correlation_id))
            })
            .collect();
        calls.sort_by_key(|&i| {
            let a = &self.apis[i as usize];
            (a.pid, a.tid, a.start)
        });
        let mut order: Vec<u32> = (0..self.spans.len() as u32).collect();
        order.sort_by_key(|&i| {
            let s = &self.spans[i as usize];
            (s.pid, s.tid, s.start, std::cmp::Reverse(s.end))
        });
        let mut paths = Paths::new(&self.spans, self.call_stacks.len());
        let mut trie = Trie::default();
        let links = if self.link_backward {
            backward_links(&self.spans, &self.flows)
        } else {
            FxHashMap::default()
        };

        // Each call's own stack (a trie node) and the outermost backward op
        // enclosing it (`NONE` when none).
        let spans = &self.spans;
        let apis = &self.apis;
        let mut own: Vec<(u32, u32)> = Vec::with_capacity(calls.len());
        sweep(
            spans,
            &order,
            calls.iter().map(|&ci| {
                let a = &apis[ci as usize];
                (a.pid, a.tid, a.start)
            }),
            |qi, snapshot| {
                let bwd = snapshot
                    .iter()
                    .copied()
                    .find(|o| links.contains_key(o))
                    .unwrap_or(NONE);
                paths.build(spans, &self.call_stacks, &mut self.frames, snapshot);
                paths.path.push(apis[calls[qi] as usize].frame);
                own.push((trie.node(NONE, &paths.path), bwd));
            },
        );

        // The stack of every forward op a charged call links to, the op itself
        // its leaf.
        let mut forward: Vec<u32> = own
            .iter()
            .filter_map(|&(_, b)| links.get(&b).copied().flatten())
            .collect();
        forward.sort_by_key(|&f| {
            let s = &spans[f as usize];
            (s.pid, s.tid, s.start, f)
        });
        forward.dedup();
        let backward = self.frames.intern("[backward]").0;
        let mut forward_node: FxHashMap<u32, u32> = FxHashMap::default();
        sweep(
            spans,
            &order,
            forward.iter().map(|&f| {
                let s = &spans[f as usize];
                (s.pid, s.tid, s.start)
            }),
            |qi, snapshot| {
                let f = forward[qi];
                let cut = snapshot
                    .iter()
                    .position(|&o| o == f)
                    .map_or(snapshot.len(), |p| p + 1);
                paths.build(spans, &self.call_stacks, &mut self.frames, &snapshot[..cut]);
                if cut == snapshot.len() && snapshot.last() != Some(&f) {
                    paths.path.push(spans[f as usize].frame);
                }
                let node = trie.node(NONE, &paths.path);
                forward_node.insert(f, trie.node(node, &[backward]));
            },
        );

        let mut counts = BackwardCounts::default();
        for (&ci, &(mut node, bwd)) in calls.iter().zip(&own) {
            let call = &self.apis[ci as usize];
            if bwd != NONE {
                let kernels = owners
                    .kernels
                    .get(&(call.pid, call.correlation_id))
                    .copied()
                    .unwrap_or(0);
                match links[&bwd].and_then(|f| forward_node.get(&f)) {
                    Some(&under) => {
                        let path = trie.path(node);
                        node = trie.node(under, &path);
                        counts.linked += kernels;
                    }
                    None => counts.unlinked += kernels,
                }
            }
            let stack = trie.stack(node, &self.frames, &mut out);
            out.launches.push(CpuLaunch {
                ts_ns: call.start,
                pid: call.pid,
                tid: call.tid,
                correlation_id: call.correlation_id,
                stack,
            });
        }
        // File order of the calls, as a CPU trace would list them.
        out.launches.sort_by_key(|l| (l.ts_ns, l.pid, l.tid));
        (out, counts)
    }
}

/// Kernels launched under a backward op.
#[derive(Default, Debug)]
struct BackwardCounts {
    /// Charged to their forward op's stack.
    linked: u64,
    /// Left on the backward thread's stack: no forward op was found.
    unlinked: u64,
}

/// Links each backward op (a span) to the forward op that made it, or to
/// `None` when the trace names none: by `fwdbwd` flows where the trace has
/// them, otherwise by sequence number.
fn backward_links(
    spans: &[Span],
    flows: &[(bool, u32, u32, u64, u64)],
) -> FxHashMap<u32, Option<u32>> {
    let mut links: FxHashMap<u32, Option<u32>> = FxHashMap::default();

    // Flows: the op where each end lies, found by (pid, tid, start).
    let ends: FxHashSet<(u32, u32, u64)> =
        flows.iter().map(|&(_, p, t, ts, _)| (p, t, ts)).collect();
    let mut at: FxHashMap<(u32, u32, u64), Vec<u32>> = FxHashMap::default();
    for (i, s) in spans.iter().enumerate() {
        if !s.is_python() && ends.contains(&(s.pid, s.tid, s.start)) {
            at.entry((s.pid, s.tid, s.start))
                .or_default()
                .push(i as u32);
        }
    }
    // Among ops starting together, the forward end is the innermost op with a
    // sequence number, the backward end the outermost backward op.
    let pick = |key: (u32, u32, u64), start: bool| -> Option<u32> {
        let ops = at.get(&key)?;
        let dur = |i: &&u32| spans[**i as usize].end - spans[**i as usize].start;
        if start {
            let with_seq = ops.iter().filter(|&&i| spans[i as usize].seq >= 0);
            with_seq
                .min_by_key(dur)
                .or_else(|| ops.iter().min_by_key(dur))
                .copied()
        } else {
            let bwd = ops.iter().filter(|&&i| spans[i as usize].fwd_thread > 0);
            bwd.max_by_key(dur)
                .or_else(|| ops.iter().max_by_key(dur))
                .copied()
        }
    };
    // Each flow id's ends (pid, tid, time): start, finish.
    type Ends = [Option<(u32, u32, u64)>; 2];
    let mut by_id: FxHashMap<u64, Ends> = FxHashMap::default();
    for &(start, p, t, ts, id) in flows {
        by_id.entry(id).or_default()[usize::from(!start)] = Some((p, t, ts));
    }
    for ends in by_id.values() {
        if let [fwd, Some(bwd)] = *ends
            && let Some(b) = pick(bwd, false)
        {
            let f = fwd.and_then(|f| pick(f, true));
            links.entry(b).or_insert(f);
        }
    }

    // Sequence numbers: a backward op (`Fwd thread id` > 0) takes the nearest
    // preceding forward op of its process with its number, on another thread.
    let mut forward: FxHashMap<(u32, i64), Vec<u32>> = FxHashMap::default();
    for (i, s) in spans.iter().enumerate() {
        if !s.is_python() && s.seq >= 0 && s.fwd_thread <= 0 {
            forward.entry((s.pid, s.seq)).or_default().push(i as u32);
        }
    }
    for ops in forward.values_mut() {
        ops.sort_by_key(|&i| (spans[i as usize].start, i));
    }
    for (i, b) in spans.iter().enumerate() {
        if b.is_python() || b.seq < 0 || b.fwd_thread <= 0 {
            continue;
        }
        let found = forward.get(&(b.pid, b.seq)).and_then(|ops| {
            ops.iter()
                .rev()
                .map(|&f| (f, &spans[f as usize]))
                .find(|(_, f)| f.tid != b.tid && f.start <= b.start)
                .map(|(f, _)| f)
        });
        let link = links.entry(i as u32).or_insert(None);
        if link.is_none() {
            *link = found;
        }
    }
    links
}

/// Walks each thread's spans once, in time order, and calls `visit` with each
/// query's index and the spans open at its time, outermost first. Queries are
/// (pid, tid, time), sorted.
fn sweep(
    spans: &[Span],
    order: &[u32],
    queries: impl Iterator<Item = (u32, u32, u64)>,
    mut visit: impl FnMut(usize, &[u32]),
) {
    let mut open: Vec<u32> = Vec::new();
    let mut snapshot: Vec<u32> = Vec::new();
    let mut k = 0;
    let mut thread = (u32::MAX, u32::MAX);
    for (qi, (pid, tid, t)) in queries.enumerate() {
        if (pid, tid) != thread {
            thread = (pid, tid);
            open.clear();
            // Skip spans of threads before this one.
            while k < order.len() && {
                let s = &spans[order[k] as usize];
                (s.pid, s.tid) < thread
            } {
                k += 1;
            }
        }
        // Open every span of this thread that starts at or before the query.
        while k < order.len() {
            let s = &spans[order[k] as usize];
            if (s.pid, s.tid) != thread || s.start > t {
                break;
            }
            while open
                .last()
                .is_some_and(|&o| spans[o as usize].end < s.start)
            {
                open.pop();
            }
            open.push(order[k]);
            k += 1;
        }
        while open.last().is_some_and(|&o| spans[o as usize].end < t) {
            open.pop();
        }
        snapshot.clear();
        snapshot.extend(open.iter().copied().filter(|&o| spans[o as usize].end >= t));
        visit(qi, &snapshot);
    }
}

/// Turns the spans open at a time into stack frames, reusing its buffers.
struct Paths {
    python_index: FxHashMap<u64, u32>,
    call_stack_frames: Vec<Option<Vec<u32>>>,
    chain: Vec<u32>,
    frames: Vec<(u64, u64, bool, u32)>,
    emitted_python: Vec<u32>,
    /// The last frames built, outermost first.
    path: Vec<u32>,
}

impl Paths {
    fn new(spans: &[Span], call_stacks: usize) -> Self {
        let mut python_index: FxHashMap<u64, u32> = FxHashMap::default();
        for (i, s) in spans.iter().enumerate() {
            if s.is_python() {
                python_index.entry(s.python_id).or_insert(i as u32);
            }
        }
        Self {
            python_index,
            call_stack_frames: vec![None; call_stacks],
            chain: Vec::new(),
            frames: Vec::new(),
            emitted_python: Vec::new(),
            path: Vec::new(),
        }
    }

    /// The frames of the spans open at a time (`snapshot`, outermost first)
    /// into `self.path`.
    fn build(
        &mut self,
        spans: &[Span],
        call_stacks: &StringTable,
        names: &mut StringTable,
        snapshot: &[u32],
    ) {
        python_chain(spans, snapshot, &self.python_index, &mut self.chain);
        self.frames.clear();
        self.frames.extend(self.chain.iter().map(|&p| {
            let s = &spans[p as usize];
            (s.start, s.end, true, p)
        }));
        self.frames.extend(snapshot.iter().filter_map(|&o| {
            let s = &spans[o as usize];
            (!s.is_python()).then_some((s.start, s.end, false, o))
        }));
        // Outermost first; a Python frame before an operator starting with it.
        self.frames
            .sort_by_key(|&(start, end, py, _)| (start, std::cmp::Reverse(end), !py));
        frame_path(
            spans,
            call_stacks,
            names,
            &self.frames,
            &mut self.call_stack_frames,
            &mut self.emitted_python,
            &mut self.path,
        );
    }
}

/// The frames of a launch's stack from its enclosing spans (outermost
/// first): each span's recorded call stack, where it has one, without the
/// frames the previous one already gave, then the span itself.
fn frame_path(
    spans: &[Span],
    call_stacks: &StringTable,
    names: &mut StringTable,
    frames: &[(u64, u64, bool, u32)],
    call_stack_frames: &mut [Option<Vec<u32>>],
    emitted_python: &mut Vec<u32>,
    path: &mut Vec<u32>,
) {
    path.clear();
    emitted_python.clear();
    for &(_, _, _, i) in frames {
        let s = &spans[i as usize];
        if s.call_stack != NONE {
            let cs = call_stack_frames[s.call_stack as usize].get_or_insert_with(|| {
                let text = call_stacks.get(StringId(s.call_stack));
                let mut f: Vec<u32> = text
                    .split(';')
                    .filter(|f| !f.is_empty())
                    .map(|f| names.intern(&frame_text(f)).0)
                    .collect();
                f.reverse();
                f
            });
            let common = emitted_python
                .iter()
                .zip(cs.iter())
                .take_while(|(a, b)| a == b)
                .count();
            path.extend_from_slice(&cs[common..]);
            emitted_python.clone_from(cs);
        }
        path.push(s.frame);
    }
}

/// The Python frames enclosing a call, innermost first: by parent ids from the
/// innermost Python span open at the call (`snapshot`, outermost first), falling
/// back to the next enclosing Python span where a parent is missing.
fn python_chain(
    spans: &[Span],
    snapshot: &[u32],
    python_index: &FxHashMap<u64, u32>,
    chain: &mut Vec<u32>,
) {
    chain.clear();
    if let Some(pos) = snapshot
        .iter()
        .rposition(|&o| spans[o as usize].is_python())
    {
        let mut cur = snapshot[pos];
        let mut pos = Some(pos);
        while chain.len() < 4096 {
            chain.push(cur);
            let parent = spans[cur as usize].parent;
            if parent == NO_PARENT {
                break;
            }
            match python_index.get(&parent) {
                Some(&p) if p != cur => {
                    cur = p;
                    pos = None;
                }
                _ => {
                    // Missing parent: the next Python frame enclosing this one.
                    let at = pos.or_else(|| snapshot.iter().position(|&o| o == cur));
                    match at.and_then(|at| {
                        snapshot[..at]
                            .iter()
                            .rposition(|&o| spans[o as usize].is_python())
                    }) {
                        Some(q) => {
                            cur = snapshot[q];
                            pos = Some(q);
                        }
                        None => break,
                    }
                }
            }
        }
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

/// Interns frame paths: one node per (parent node, frame), so a stack costs one
/// hash look-up per frame and no string until it is first rendered.
#[derive(Default)]
struct Trie {
    children: FxHashMap<(u32, u32), u32>,
    nodes: Vec<(u32, u32)>,
    stacks: Vec<Option<StackId>>,
}

impl Trie {
    /// The node of `path` below `node` (`NONE`: the root).
    fn node(&mut self, mut node: u32, path: &[u32]) -> u32 {
        for &f in path {
            let next = self.nodes.len() as u32;
            let child = *self.children.entry((node, f)).or_insert(next);
            if child == next {
                self.nodes.push((node, f));
            }
            node = child;
        }
        node
    }

    /// The frames from the root to `node`.
    fn path(&self, mut node: u32) -> Vec<u32> {
        let mut path = Vec::new();
        while node != NONE {
            let (parent, f) = self.nodes[node as usize];
            path.push(f);
            node = parent;
        }
        path.reverse();
        path
    }

    fn stack(&mut self, node: u32, frames: &StringTable, out: &mut CpuTrace) -> StackId {
        if node == NONE {
            return out.stacks.intern(b"");
        }
        if let Some(Some(s)) = self.stacks.get(node as usize) {
            return *s;
        }
        let mut names = Vec::new();
        let mut n = node;
        while n != NONE {
            let (parent, f) = self.nodes[n as usize];
            names.push(frames.get(StringId(f)));
            n = parent;
        }
        names.reverse();
        let id = out.stacks.intern(names.join(";").as_bytes());
        if self.stacks.len() <= node as usize {
            self.stacks.resize(node as usize + 1, None);
        }
        self.stacks[node as usize] = Some(id);
        id
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn microseconds_become_exact_nanoseconds() {
        for (text, ns) in [
            ("0", Some(0)),
            ("12", Some(12_000)),
            ("1623142623460111", Some(1_623_142_623_460_111_000)),
            ("1365627862814.773", Some(1_365_627_862_814_773)),
            ("0.001", Some(1)),
            ("0.0005", Some(1)),
            ("0.0004", Some(0)),
            ("2.0804", Some(2_080)),
            ("2.0806", Some(2_081)),
            ("1.25e0", Some(1_250)),
            ("1.5E3", Some(1_500_000)),
            ("7e-6", Some(0)),
            ("5e-4", Some(1)),
            ("3e-3", Some(3)),
            (".5", Some(500)),
            ("5.", Some(5_000)),
            ("000.250", Some(250)),
            ("-1", None),
            ("1e", None),
            ("", None),
            (".", None),
            ("1.2.3", None),
            ("NaN", None),
            ("99999999999999999999", None),
        ] {
            assert_eq!(us_to_ns(text), ns, "{text}");
        }
    }

    fn read_str(text: &str) -> Result<Imported> {
        let mut strings = StringTable::new();
        read(text.as_bytes(), Path::new("t.json"), &mut strings)
    }

    /// Reads `text` handed out 7 bytes at a time into a window of 16 bytes, so
    /// that every value crosses a refill.
    fn read_trickled(text: &[u8]) -> Imported {
        struct Trickle<'a>(&'a [u8]);
        impl Read for Trickle<'_> {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                let n = self.0.len().min(buf.len()).min(7);
                buf[..n].copy_from_slice(&self.0[..n]);
                self.0 = &self.0[n..];
                Ok(n)
            }
        }
        let mut strings = StringTable::new();
        let mut w = Window::new(Trickle(text));
        w.buf = vec![0; 16];
        let mut b = Builder::new(Path::new("t"), &mut strings);
        let outcome = walk(&mut w, &mut b).unwrap();
        assert!(matches!(outcome, Walk::Done), "{outcome:?}");
        b.finish()
    }

    fn small_trace() -> Vec<u8> {
        std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/data/kineto/small.pt.trace.json"
        ))
        .unwrap()
    }

    fn same_import(a: Imported, b: Imported) {
        assert_eq!(a.records, b.records);
        assert_eq!(
            (a.skipped, a.diagnostics.count),
            (b.skipped, b.diagnostics.count)
        );
        let (a, b) = (a.launch_stacks.unwrap(), b.launch_stacks.unwrap());
        assert_eq!(a.launches, b.launches);
        let names = |t: &CpuTrace| -> Vec<String> {
            (0..t.stacks.len())
                .map(|i| t.stacks.text(StackId(i as u32)).to_owned())
                .collect()
        };
        assert_eq!(names(&a), names(&b));
    }

    #[test]
    fn events_split_across_window_refills_read_the_same() {
        let text = small_trace();
        let mut strings = StringTable::new();
        let whole = read(&text[..], Path::new("t"), &mut strings).unwrap();
        same_import(whole, read_trickled(&text));
    }

    #[test]
    fn text_that_is_not_utf8_reads_as_before() {
        // Characters of 2 and 3 bytes in a frame name (cut by refills when
        // trickled), and bytes that are not UTF-8 in a field gpuperf does not read:
        // serde_json skips such a field without looking into it, and so must the
        // faster path for text.
        let text = String::from_utf8(small_trace()).unwrap();
        let text = text.replace("train.py(10): step", "train\\u00e9é✓.py(10): step");
        let at = text.find(r#""args": {"Python parent id": 2"#).unwrap() + 9;
        let with = |junk: &[u8]| {
            let mut t = text.as_bytes()[..at].to_vec();
            t.extend_from_slice(br#""junk": ""#);
            t.extend_from_slice(junk);
            t.extend_from_slice(b"\", ");
            t.extend_from_slice(&text.as_bytes()[at..]);
            t
        };
        let (bad, good) = (with(b"\xff\xfe\xc3"), with(b"ok"));
        let read_all = |t: &[u8]| read(t, Path::new("t"), &mut StringTable::new()).unwrap();
        let imp = read_all(&bad);
        let stacks = imp.launch_stacks.as_ref().unwrap();
        assert!(
            (0..stacks.stacks.len()).any(|i| stacks
                .stacks
                .text(StackId(i as u32))
                .contains("trainéé✓.py(10): step")),
            "the frame keeps its characters"
        );
        same_import(read_all(&good), read_trickled(&bad));
        same_import(read_all(&good), imp);
    }

    #[test]
    fn events_that_are_not_objects_are_counted_not_fatal() {
        let imp = read_str(
            r#"{"traceEvents": [1, "x", null, {"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1, "args": {"correlation": 2}}, []]}"#,
        )
        .unwrap();
        assert_eq!(imp.records.len(), 2, "process and kernel");
        // `[]` reads as an event with no fields, of no kind gpuperf uses.
        assert_eq!((imp.diagnostics.count, imp.skipped), (3, 1));
    }

    #[test]
    fn sync_wait_that_is_not_a_number_is_one_diagnostic_and_the_sync_kept() {
        let sync = r#"{"ph": "X", "cat": "cuda_sync", "name": "Stream Wait Event", "ts": 1, "dur": 1, "args": {"cuda_sync_kind": "Stream Wait Event", "wait_on_stream": "seven", "wait_on_cuda_event_record_corr_id": 5, "wait_on_cuda_event_id": -1, "stream": 3, "device": 0, "correlation": 6}}"#;
        let text = format!(r#"{{"traceEvents": [{sync}]}}"#);
        let imp = read_str(&text).unwrap();
        assert_eq!(imp.diagnostics.count, 1);
        let d = &imp.diagnostics.first[0];
        assert_eq!(d.location, format!("t.json@{}", text.find(sync).unwrap()));
        assert_eq!(
            d.message,
            "`cuda_sync` event whose `args.wait_on_stream` is not an id: read as not known"
        );
        assert!(!d.to_string().contains('\n'));
        let wait = imp.records.iter().find_map(|r| match r {
            Record::Activity(Activity {
                kind: ActivityKind::Sync { sync_type: 2, wait },
                stream: 3,
                ..
            }) => Some(*wait),
            _ => None,
        });
        assert_eq!(
            wait,
            Some(Some(SyncWait {
                stream: None,
                record_correlation_id: Some(5),
                event_id: None,
            }))
        );
        // Its recording call is not in the trace: counted.
        assert!(
            imp.notes
                .iter()
                .any(|n| n.starts_with("1 of 1 waits on a CUDA event name a recording call")),
            "{:?}",
            imp.notes
        );
    }

    #[test]
    fn empty_and_null_event_lists() {
        assert!(
            read_str(r#"{"traceEvents": []}"#)
                .unwrap()
                .records
                .is_empty()
        );
        assert!(
            read_str(r#"{"traceEvents": null}"#)
                .unwrap()
                .records
                .is_empty()
        );
        assert!(read_str(r#"{"traceEvents": 5}"#).is_err());
        assert!(read_str("").is_err());
        assert!(read_str("{").is_err());
        assert!(looks_like_kineto(b"\xef\xbb\xbf \n{"));
        assert!(!looks_like_kineto(b"[{}]"));
    }

    fn never_panics(bytes: &[u8]) -> std::result::Result<(), TestCaseError> {
        let _ = looks_like_kineto(bytes);
        let mut strings = StringTable::new();
        if let Ok(imp) = read(bytes, Path::new("p.json"), &mut strings) {
            prop_assert!(imp.diagnostics.first.len() as u64 <= imp.diagnostics.count);
            if let Some(stacks) = &imp.launch_stacks {
                for l in &stacks.launches {
                    prop_assert!(l.stack.index() < stacks.stacks.len());
                }
            }
        }
        Ok(())
    }

    /// Pieces that make mutations reach the reader's edge cases.
    const TOKENS: &[&str] = &[
        "{",
        "}",
        "[",
        "]",
        "\"",
        ",",
        ":",
        " ",
        "null",
        "-1",
        "1e999",
        "0.0000001",
        "\"traceEvents\": [",
        "\"ph\": \"X\"",
        "\"cat\": \"kernel\"",
        "\"cat\": \"python_function\"",
        "\"Python parent id\": 3",
        "\"Python id\": 3",
        "\"correlation\": 7",
        "\"ts\": ",
        "\"Call stack\": \"a;b;;c\"",
        "\\u0000",
        "\\\"",
        "\u{fffd}",
    ];

    /// µs → ns as first written, with a string per number: the reference for the
    /// faster [`us_to_ns`].
    fn us_to_ns_reference(text: &str) -> Option<u64> {
        let (mantissa, exp) = match text.find(['e', 'E']) {
            Some(i) => (&text[..i], text[i + 1..].parse::<i32>().ok()?),
            None => (text, 0),
        };
        let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
        if int.is_empty() && frac.is_empty()
            || !int.bytes().all(|b| b.is_ascii_digit())
            || !frac.bytes().all(|b| b.is_ascii_digit())
        {
            return None;
        }
        let digits = format!("{int}{frac}");
        let digits = digits.trim_start_matches('0');
        let shift = exp
            .checked_sub(i32::try_from(frac.len()).ok()?)?
            .checked_add(3)?;
        if digits.is_empty() {
            return Some(0);
        }
        if shift >= 0 {
            let v: u64 = digits.parse().ok()?;
            return v.checked_mul(10u64.checked_pow(u32::try_from(shift).ok()?)?);
        }
        let cut = usize::try_from(-shift).ok()?;
        if cut > digits.len() {
            let first = if cut == digits.len() + 1 {
                digits.as_bytes()[0]
            } else {
                b'0'
            };
            return Some(u64::from(first >= b'5'));
        }
        let (keep, drop) = digits.split_at(digits.len() - cut);
        let v: u64 = if keep.is_empty() {
            0
        } else {
            keep.parse().ok()?
        };
        v.checked_add(u64::from(drop.as_bytes()[0] >= b'5'))
    }

    proptest! {
        #[test]
        fn microseconds_match_the_reference(
            text in "[0-9]{0,12}(\\.[0-9]{0,6})?|[0-9]{0,22}(\\.[0-9]{0,9})?([eE][+-]?[0-9]{1,3})?|[0-9.eE+-]{0,6}|.{0,4}"
        ) {
            prop_assert_eq!(us_to_ns(&text), us_to_ns_reference(&text), "{}", text);
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
            never_panics(&bytes)?;
        }

        #[test]
        fn mutated_traces_never_panic(
            edits in proptest::collection::vec(
                (any::<proptest::sample::Index>(), 0u8..8, proptest::collection::vec(any::<u8>(), 0..8),
                 any::<proptest::sample::Index>()),
                0..12,
            )
        ) {
            let mut text = include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/kineto/small.pt.trace.json")).to_vec();
            crate::golden::apply_edits(&mut text, edits, TOKENS);
            never_panics(&text)?;
        }

        #[test]
        fn decimal_microseconds_round_trip(ns in 0u64..4_000_000_000_000_000_000, exp in -3i32..4) {
            // The same ns written as µs with 3 decimals, and in exponent form.
            let text = format!("{}.{:03}", ns / 1000, ns % 1000);
            prop_assert_eq!(us_to_ns(&text), Some(ns));
            let digits = ns.to_string();
            let shifted = format!("{digits}e{}", exp - 3 - exp);
            prop_assert_eq!(us_to_ns(&shifted), Some(ns));
        }
    }
}
