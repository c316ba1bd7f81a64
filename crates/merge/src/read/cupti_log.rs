//! Reader for the reference tooling's CUPTI text log: the activity records that
//! NVIDIA's CUPTI sample printer (`helper_cupti_activity.h`, `PrintActivity`)
//! writes, one record per header line plus indented continuation lines.
//!
//! # Format
//!
//! ```text
//! RUNTIME [ 1761183645346161185, 1761183645346437073 ] duration 275888, "cudaLaunchKernel_v7000", cbid 211, processId 2384094, threadId 2830733312, correlationId 166
//! CONCURRENT_KERNEL [ 1761183645346438172, 1761183645346759804 ] duration 321632, "_Z12attentionQKTPfS_S_iii", correlationId 166, cacheConfigRequested 0, cacheConfigExecuted 0
//! <TAB>grid [ 32, 32, 8 ], block [ 16, 16, 1 ], cluster [ 0, 0, 0 ], sharedMemory (static 0, dynamic 0)
//! <TAB>deviceId 0, contextId 1, streamId 13, graphId 0, graphNodeId 0, channelId 1, channelType COMPUTE
//! MEMCPY "HtoD" [ 1761183645336312834, 1761183645336313570 ] duration 736, size 4096, copyCount 1, srcKind PAGEABLE, dstKind DEVICE, correlationId 132
//! <TAB>deviceId 0, contextId 1, streamId 7, graphId 0, graphNodeId 0, channelId 0, channelType COMPUTE
//! MEMSET [ 3000, 3100 ] duration 100, value 255, size 4096, correlationId 4
//! <TAB>deviceId 0, contextId 1, streamId 7, graphId 0, graphNodeId 0, channelId 0, channelType COMPUTE
//! SYNCHRONIZATION [ 5000, 5200 ] duration 200, type STREAM_SYNCHRONIZE, contextId 1, streamId 13, correlationId 8, eventId -1, cudaEventSyncId 0
//! OVERHEAD LAZY_FUNCTION_LOADING [ 1761183645346438502, 1761183645346448118 ] duration 9616, THREAD, id 2830733312, correlation id 167
//! MEMORY2 [ 1761183645310290248 ] memoryOperationType ALLOCATE, memoryKind DEVICE, size 4, address 131367933313024, pc 0,
//!   deviceId 0, contextId 1, streamId 4294967295, processId 2384094, correlationId 119, isAsync 0,
//!   memoryPool INVALID, memoryPoolAddress 0,  memoryPoolThreshold 0
//!   source (null)
//! <empty line>
//! ```
//!
//! A header line is `KIND [prefix] [ start, end ] items`: the prefix is the copy
//! direction for `MEMCPY` (`"HtoD"`) and the overhead kind for `OVERHEAD`. Items are
//! comma-separated at bracket and parenthesis depth 0, so `grid [ 32, 32, 8 ]` and
//! `sharedMemory (static 0, dynamic 0)` are single items; each is `key value`,
//! except the quoted API or kernel name, which is taken whole even when it holds
//! commas, spaces and quotes (a demangled name): it ends at the last `"` on the line
//! that is followed by a comma or the end of the line. Continuation lines start with a tab
//! (kernels, copies, memsets) or two spaces (`MEMORY2`). Timestamps are epoch
//! nanoseconds (`CLOCK_REALTIME`, CUPTI's default clock). Activity records usually
//! come before the API record that caused them: the printer writes CUPTI's buffer
//! order, not time order.
//!
//! # What is read
//!
//! | kind | becomes |
//! |---|---|
//! | `RUNTIME`, `DRIVER` | [`Record::Api`], name without its `_v7000` suffix ([`api_base_name`]) |
//! | `CONCURRENT_KERNEL`, `KERNEL` | [`ActivityKind::Kernel`], mangled name as printed |
//! | `MEMCPY`, `MEMCPY2` | [`ActivityKind::Memcpy`] |
//! | `MEMSET` | [`ActivityKind::Memset`] |
//! | `SYNCHRONIZATION` | [`ActivityKind::Sync`], `type` mapped to CUPTI's numbering |
//! | `OVERHEAD` | [`Record::Overhead`] |
//! | `MEMORY2`, `MEMORY`, `DEVICE`, `CONTEXT`, `NAME`, `MARKER`, ... | skipped, counted in [`CuptiLog::skipped_kinds`] |
//!
//! Things the log does not say, and what this reader does about them:
//!
//! - Activity records carry no process id. Every activity and overhead record gets
//!   the `processId` of the first API record in the file (0 if there is none); the
//!   reference tooling writes one log per process.
//! - `threadId` is CUPTI's `threadId`, a truncated `pthread_self()`, not a Linux
//!   TID. It is printed as an unsigned number that may exceed `u32` in other
//!   printers; only its low 32 bits are kept in [`ApiCall::tid`].
//! - Ids that the printer writes with `%d` (a synchronization's `streamId`) can be
//!   `-1`; negative values are read as their `u32` bit pattern (`u32::MAX`).
//! - A record whose continuation lines are missing (a file cut off mid-record) is
//!   still emitted, with the missing fields 0, and counted as a diagnostic.
//!
//! The reference injection library also writes its own lines to the same stdout
//! (`Calling CUPTI API: cuptiSubscribe(...)`, `Enabling CUPTI_ACTIVITY_KIND_MEMCPY.`,
//! `Found 2 devices`), so saved logs hold such lines before, between and after the
//! records. A line that is neither a record header (`KIND [ … ]`) nor a continuation
//! is one of those: it is skipped and counted in [`CuptiLog::other_lines`], and it
//! does not end the record before it.
//!
//! Every malformed line is counted in [`CuptiLog::diagnostics`] with its place
//! (`path:line`, 1-based) and parsing goes on. A line is counted at most once, plus
//! once more if it starts a record whose continuation lines never came. Invalid UTF-8
//! is read lossily and CRLF line ends are accepted.

use std::borrow::Cow;
use std::path::Path;

use crate::diag::Diagnostics;
use crate::model::{
    Activity, ActivityKind, ApiCall, ApiDomain, MemcpyKind, Overhead, Record, StringTable,
    api_base_name,
};

/// A parsed reference log: all records in file order, plus problems found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CuptiLog {
    /// API calls, GPU activities and CUPTI overhead, in file order.
    pub records: Vec<Record>,
    /// Malformed lines and records cut short, with the first few places.
    pub diagnostics: Diagnostics,
    /// Lines in the file, blank ones included.
    pub lines: u64,
    /// Records of kinds the printer knows but gpuperf does not use (`MEMORY2`,
    /// `DEVICE`, `MARKER`, ...), skipped with their continuation lines.
    pub skipped_kinds: u64,
    /// Lines that are not records: what the reference injection library itself
    /// prints (`Calling CUPTI API: …`, `Found 2 devices`), skipped.
    pub other_lines: u64,
}

/// Whether the start of a file looks like a reference CUPTI text log: one of its
/// lines, wherever it is, starts with a record kind that the CUPTI sample printer
/// writes, followed by a space. Lines that the reference tooling prints besides
/// the records may come first.
pub fn looks_like_cupti_log(head: &[u8]) -> bool {
    let head = head.strip_prefix(b"\xef\xbb\xbf").unwrap_or(head);
    head.split(|&b| b == b'\n').any(|line| {
        let Some(space) = line.iter().position(|&b| b == b' ') else {
            return false;
        };
        let word = &line[..space];
        let word = word.strip_suffix(b":").unwrap_or(word);
        std::str::from_utf8(word).is_ok_and(|w| kind_of(w).is_some())
    })
}

/// Whether a line that starts with an unknown word still has a record header's
/// shape, `WORD [ …`: then it is a record of a kind this reader does not know,
/// not a line of the tool's own output.
fn is_record_shaped(word: &str, rest: &str) -> bool {
    !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
        && rest.trim_start().starts_with('[')
}

/// Parses a whole log. `path` only names the file in diagnostics. Names are interned
/// into `strings`.
///
/// Never fails: malformed lines are counted in [`CuptiLog::diagnostics`] and skipped.
pub fn parse(text: &[u8], path: &Path, strings: &mut StringTable) -> CuptiLog {
    let mut p = Parser {
        path,
        strings,
        log: CuptiLog::default(),
        open: Open::Nothing,
        trailer: &[],
        first_pid: None,
        api_without_pid: Vec::new(),
    };
    let body = text.strip_suffix(b"\n").unwrap_or(text);
    if !text.is_empty() {
        for raw in body.split(|&b| b == b'\n') {
            p.log.lines += 1;
            let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
            p.line(p.log.lines, &String::from_utf8_lossy(raw));
        }
    }
    p.finish()
}

/// How a header line is read.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Kind {
    Api(ApiDomain),
    Kernel,
    Memcpy,
    Memset,
    Sync,
    Overhead,
    /// Known but unused; the strings are prefixes of unindented lines that the
    /// printer writes as part of such a record.
    Skipped(&'static [&'static str]),
}

/// Prefix of the line the reference injection prints after a kernel or copy that a
/// graph node created.
const GRAPH_NODE_LINE: &str = "Graph node was created using API ";

/// The other kinds `GetActivityKindString` names, all unused by gpuperf.
const SKIPPED: &[&str] = &[
    "MEMORY",
    "DEVICE",
    "CONTEXT",
    "NAME",
    "MARKER",
    "MARKER_DATA",
    "SOURCE_LOCATOR",
    "GLOBAL_ACCESS",
    "BRANCH",
    "CDP_KERNEL",
    "PREEMPTION",
    "ENVIRONMENT",
    "INSTRUCTION_EXECUTION",
    "UNIFIED_MEMORY_COUNTER",
    "FUNCTION",
    "MODULE",
    "DEVICE_ATTRIBUTE",
    "SHARED_ACCESS",
    "PC_SAMPLING",
    "PC_SAMPLING_RECORD_INFO",
    "INSTRUCTION_CORRELATION",
    "OPENACC_DATA",
    "OPENACC_LAUNCH",
    "OPENACC_OTHER",
    "CUDA_EVENT",
    "STREAM",
    "EXTERNAL_CORRELATION",
    "NVLINK",
    "PCIE",
    "OPENMP",
    "INTERNAL_LAUNCH_API",
    "MEMORY_POOL",
    "GRAPH_TRACE",
];

fn kind_of(word: &str) -> Option<Kind> {
    Some(match word {
        "RUNTIME" => Kind::Api(ApiDomain::Runtime),
        "DRIVER" => Kind::Api(ApiDomain::Driver),
        "CONCURRENT_KERNEL" | "KERNEL" => Kind::Kernel,
        "MEMCPY" | "MEMCPY2" => Kind::Memcpy,
        "MEMSET" => Kind::Memset,
        "SYNCHRONIZATION" => Kind::Sync,
        "OVERHEAD" => Kind::Overhead,
        // MEMORY2 with a local or imported pool appends a line starting with ", ".
        "MEMORY2" => Kind::Skipped(&[","]),
        "JIT" => Kind::Skipped(&["jitEntryType "]),
        "MEM_DECOMPRESS" => Kind::Skipped(&["channelId "]),
        _ if SKIPPED.contains(&word) => Kind::Skipped(&[]),
        _ => return None,
    })
}

/// CUPTI's `CUpti_ActivitySynchronizationType` from the printer's name or number.
fn sync_type(s: &str) -> u8 {
    match s {
        "EVENT_SYNCHRONIZE" => 1,
        "STREAM_WAIT_EVENT" => 2,
        "STREAM_SYNCHRONIZE" => 3,
        "CONTEXT_SYNCHRONIZE" => 4,
        _ => s.parse().unwrap_or(0),
    }
}

/// The record whose continuation lines may follow.
enum Open {
    /// None: a continuation line here is out of place.
    Nothing,
    /// An activity already pushed at `index`, read from header line `line`.
    Activity {
        index: usize,
        line: u64,
        kernel: bool,
        need_grid: bool,
        need_device: bool,
    },
    /// A skipped record, or a malformed one already counted: its continuation
    /// lines are ignored.
    Ignored,
}

/// What a line is wrong with; becomes a diagnostic message.
type Bad = Cow<'static, str>;

struct Parser<'p> {
    path: &'p Path,
    strings: &'p mut StringTable,
    log: CuptiLog,
    open: Open,
    /// Prefixes of unindented lines that still belong to the last record.
    trailer: &'static [&'static str],
    first_pid: Option<u32>,
    api_without_pid: Vec<usize>,
}

impl Parser<'_> {
    fn line(&mut self, no: u64, line: &str) {
        if line.trim().is_empty() {
            return;
        }
        if line.trim() == "<unknown>" {
            // What the printer writes, indented, for a record kind it does not know.
            self.close();
            self.trailer = &[];
            self.log.skipped_kinds += 1;
            self.open = Open::Ignored;
            return;
        }
        if line.starts_with([' ', '\t']) {
            return self.continuation(no, line.trim());
        }
        if self.trailer.iter().any(|t| line.starts_with(t)) {
            return;
        }
        let (word, rest) = line.split_once([' ', '\t']).unwrap_or((line, ""));
        let word = word.strip_suffix(':').unwrap_or(word);
        let kind = kind_of(word);
        if kind.is_none() && !is_record_shaped(word, rest) {
            // The tool's own output, possibly printed between a record's lines.
            self.log.other_lines += 1;
            return;
        }
        self.close();
        self.trailer = &[];
        let Some(kind) = kind else {
            self.open = Open::Ignored;
            return self.bad(no, format!("unknown record kind `{}`", clip(word)).into());
        };
        if let Kind::Skipped(trailer) = kind {
            self.log.skipped_kinds += 1;
            self.open = Open::Ignored;
            self.trailer = trailer;
            return;
        }
        match self.header(no, kind, rest) {
            Ok(open) => self.open = open,
            Err(msg) => {
                self.open = Open::Ignored;
                self.bad(no, msg);
            }
        }
    }

    /// Reads a header line of a kind that becomes a record and pushes the record.
    fn header(&mut self, no: u64, kind: Kind, rest: &str) -> Result<Open, Bad> {
        let h = Header::parse(rest)?;
        let items = Items::parse(h.items);
        let (start_ns, end_ns) = (h.start, h.end);
        let activity = |correlation_id, kind| Activity {
            pid: 0,
            start_ns,
            end_ns,
            correlation_id,
            device: 0,
            context: 0,
            stream: 0,
            graph_id: 0,
            graph_node_id: 0,
            kind,
        };
        let index = self.log.records.len();
        let mut warning: Option<Bad> = None;
        let mut open = Open::Activity {
            index,
            line: no,
            kernel: false,
            need_grid: false,
            need_device: true,
        };
        let record = match kind {
            Kind::Api(domain) => {
                open = Open::Nothing;
                self.api(&items, domain, (start_ns, end_ns), index)?
            }
            Kind::Kernel => {
                let name = items.name()?;
                let correlation_id = items.required("correlationId", parse_u32)?;
                let name = self.strings.intern(name);
                open = Open::Activity {
                    index,
                    line: no,
                    kernel: true,
                    need_grid: true,
                    need_device: true,
                };
                self.trailer = &[GRAPH_NODE_LINE];
                Record::Activity(activity(
                    correlation_id,
                    ActivityKind::Kernel {
                        name,
                        grid: [0; 3],
                        block: [0; 3],
                    },
                ))
            }
            Kind::Memcpy => {
                let bytes = items.required("size", parse_u64)?;
                let correlation_id = items.required("correlationId", parse_u32)?;
                let (kind, unknown) = memcpy_kind(h.prefix);
                warning = unknown;
                self.trailer = &[GRAPH_NODE_LINE];
                Record::Activity(activity(
                    correlation_id,
                    ActivityKind::Memcpy {
                        kind,
                        bytes,
                        peer: None,
                    },
                ))
            }
            Kind::Memset => {
                let bytes = items.required("size", parse_u64)?;
                let value = items.optional("value", parse_u32)?.unwrap_or(0);
                let correlation_id = items.required("correlationId", parse_u32)?;
                Record::Activity(activity(
                    correlation_id,
                    ActivityKind::Memset { bytes, value },
                ))
            }
            Kind::Sync => {
                let correlation_id = items.required("correlationId", parse_u32)?;
                let sync_type = items.get("type").map_or(0, sync_type);
                let mut a = activity(
                    correlation_id,
                    ActivityKind::Sync {
                        sync_type,
                        wait: None,
                    },
                );
                a.context = items.optional("contextId", parse_u32)?.unwrap_or(0);
                a.stream = items.optional("streamId", parse_u32)?.unwrap_or(0);
                // The printer writes no device line for synchronizations; accept one.
                open = Open::Activity {
                    index,
                    line: no,
                    kernel: false,
                    need_grid: false,
                    need_device: false,
                };
                Record::Activity(a)
            }
            Kind::Overhead => {
                let kind = h.prefix;
                if kind.is_empty() || kind.contains(char::is_whitespace) {
                    return Err("missing overhead kind before `[`".into());
                }
                open = Open::Nothing;
                // Printed when a command buffer overflowed.
                self.trailer = &["CUpti_ActivityOverheadCommandBufferFullData"];
                Record::Overhead(Overhead {
                    pid: 0,
                    kind: self.strings.intern(kind),
                    correlation_id: 0,
                    start_ns,
                    end_ns,
                })
            }
            Kind::Skipped(_) => return Ok(Open::Ignored),
        };
        self.log.records.push(record);
        if let Some(msg) = warning {
            self.bad(no, msg);
        }
        Ok(open)
    }

    /// An API call's record; one without a pid is noted, to take the log's.
    fn api(
        &mut self,
        items: &Items<'_>,
        domain: ApiDomain,
        (start_ns, end_ns): (u64, u64),
        index: usize,
    ) -> Result<Record, Bad> {
        let name = items.name()?;
        let correlation_id = items.required("correlationId", parse_u32)?;
        let cbid = items.optional("cbid", parse_u32)?.unwrap_or(0);
        // CUPTI's threadId is a truncated pthread id; keep its low 32 bits.
        let tid = items.optional("threadId", parse_u64)?.unwrap_or(0) as u32;
        let pid = items.optional("processId", parse_u32)?;
        match pid {
            Some(pid) => {
                self.first_pid.get_or_insert(pid);
            }
            None => self.api_without_pid.push(index),
        }
        let name = self.strings.intern(api_base_name(name));
        Ok(Record::Api(ApiCall {
            pid: pid.unwrap_or(0),
            tid,
            start_ns,
            end_ns,
            correlation_id,
            cbid,
            domain,
            name,
        }))
    }

    fn continuation(&mut self, no: u64, line: &str) {
        match self.open {
            Open::Ignored => {}
            Open::Nothing => self.bad(no, "continuation line without a record to continue".into()),
            Open::Activity {
                index,
                kernel,
                ref mut need_grid,
                ref mut need_device,
                ..
            } => {
                let items = Items::parse(line);
                let first = items.pairs.first().map_or("", |p| p.0);
                let result = match first {
                    "grid" if kernel => {
                        *need_grid = false;
                        items.grid().map(|(grid, block)| Cont::Grid(grid, block))
                    }
                    "deviceId" => {
                        *need_device = false;
                        items.device().map(Cont::Device)
                    }
                    // MEMCPY2's second line: peer devices, not used.
                    "srcDeviceId" => return,
                    _ => Err(format!(
                        "unexpected continuation line starting with `{}`",
                        clip(first)
                    )
                    .into()),
                };
                match result {
                    Ok(cont) => {
                        if let Some(Record::Activity(a)) = self.log.records.get_mut(index) {
                            cont.apply(a);
                        }
                    }
                    Err(msg) => self.bad(no, msg),
                }
            }
        }
    }

    /// Ends the open record, counting it if its continuation lines never came.
    fn close(&mut self) {
        if let Open::Activity {
            line,
            need_grid,
            need_device,
            ..
        } = self.open
        {
            if need_grid {
                self.bad(line, "record cut off: no `grid` continuation line".into());
            } else if need_device {
                self.bad(
                    line,
                    "record cut off: no `deviceId` continuation line".into(),
                );
            }
        }
        self.open = Open::Nothing;
    }

    fn finish(mut self) -> CuptiLog {
        self.close();
        let pid = self.first_pid.unwrap_or(0);
        for &i in &self.api_without_pid {
            if let Some(Record::Api(a)) = self.log.records.get_mut(i) {
                a.pid = pid;
            }
        }
        for r in &mut self.log.records {
            match r {
                Record::Activity(a) => a.pid = pid,
                Record::Overhead(o) => o.pid = pid,
                _ => {}
            }
        }
        self.log
    }

    fn bad(&mut self, no: u64, msg: Bad) {
        let path = self.path;
        self.log
            .diagnostics
            .push(|| format!("{}:{no}", path.display()), || msg.into_owned());
    }
}

/// Fields read from a continuation line.
enum Cont {
    Grid([u32; 3], [u32; 3]),
    Device(Placement),
}

struct Placement {
    device: u32,
    context: u32,
    stream: u32,
    graph_id: u32,
    graph_node_id: u64,
}

impl Cont {
    fn apply(self, a: &mut Activity) {
        match self {
            Cont::Grid(g, b) => {
                if let ActivityKind::Kernel { grid, block, .. } = &mut a.kind {
                    *grid = g;
                    *block = b;
                }
            }
            Cont::Device(p) => {
                a.device = p.device;
                a.context = p.context;
                a.stream = p.stream;
                a.graph_id = p.graph_id;
                a.graph_node_id = p.graph_node_id;
            }
        }
    }
}

/// A copy's kind from the name before its `[`, with a warning when the name is
/// not one CUPTI prints.
fn memcpy_kind(prefix: &str) -> (MemcpyKind, Option<Bad>) {
    let name = prefix.trim_matches('"');
    match MemcpyKind::from_name(name) {
        Some(k) => (k, None),
        None if matches!(name, "UNKNOWN" | "<unknown>") => (MemcpyKind::Unknown, None),
        None => (
            MemcpyKind::Unknown,
            Some(format!("unknown memcpy kind `{}`", clip(name)).into()),
        ),
    }
}

/// The parts of a header line after its kind word.
struct Header<'a> {
    /// Text between the kind and `[`: `"HtoD"`, `CUPTI_INSTRUMENTATION`, or nothing.
    prefix: &'a str,
    start: u64,
    end: u64,
    /// Text after `]`.
    items: &'a str,
}

impl<'a> Header<'a> {
    fn parse(rest: &'a str) -> Result<Self, Bad> {
        let open = rest.find('[').ok_or("missing `[ start, end ]`")?;
        let prefix = rest[..open].trim();
        let after = &rest[open + 1..];
        let close = after.find(']').ok_or("missing `]` after timestamps")?;
        let mut ts = after[..close].split(',').map(str::trim);
        let mut stamp = |what: &str| -> Result<u64, Bad> {
            let s = ts.next().unwrap_or("");
            parse_u64(s).ok_or_else(|| format!("bad {what} timestamp `{}`", clip(s)).into())
        };
        let start = stamp("start")?;
        let end = stamp("end")?;
        if ts.next().is_some() {
            return Err("more than two timestamps".into());
        }
        Ok(Self {
            prefix,
            start,
            end,
            items: &after[close + 1..],
        })
    }
}

/// Most items a line can have that are looked at; later ones are ignored.
const MAX_ITEMS: usize = 24;

/// The items of one line: `key value` pairs and at most one quoted name.
struct Items<'a> {
    pairs: ArrayVec<(&'a str, &'a str)>,
    /// `Some(Err(()))` when a quoted name is not closed.
    quoted: Option<Result<&'a str, ()>>,
}

/// A fixed-capacity list, so that reading a line allocates nothing.
struct ArrayVec<T> {
    items: [T; MAX_ITEMS],
    len: usize,
}

impl<T: Copy> ArrayVec<T> {
    fn push(&mut self, v: T) {
        if let Some(slot) = self.items.get_mut(self.len) {
            *slot = v;
            self.len += 1;
        }
    }
    fn as_slice(&self) -> &[T] {
        self.items.get(..self.len).unwrap_or(&[])
    }
    fn first(&self) -> Option<&T> {
        self.as_slice().first()
    }
}

impl<'a> Items<'a> {
    /// Splits `s` at commas at bracket and parenthesis depth 0.
    fn parse(s: &'a str) -> Self {
        let mut items = Items {
            pairs: ArrayVec {
                items: [("", ""); MAX_ITEMS],
                len: 0,
            },
            quoted: None,
        };
        let mut rest = s;
        loop {
            rest = rest.trim_start_matches([' ', '\t', ',']);
            if rest.is_empty() {
                break;
            }
            if let Some(body) = rest.strip_prefix('"') {
                // The printer writes no quote after the name, so the last candidate
                // is the end even when the name holds `", `.
                let close = body.rmatch_indices('"').map(|(i, _)| i).find(|&i| {
                    let after = body[i + 1..].trim_start();
                    after.is_empty() || after.starts_with(',')
                });
                match close {
                    Some(i) => {
                        items.quoted.get_or_insert(Ok(&body[..i]));
                        rest = &body[i + 1..];
                    }
                    None => {
                        items.quoted.get_or_insert(Err(()));
                        break;
                    }
                }
                continue;
            }
            let mut depth = 0i32;
            let end = rest
                .bytes()
                .position(|b| {
                    match b {
                        b'[' | b'(' => depth += 1,
                        b']' | b')' => depth -= 1,
                        b',' if depth <= 0 => return true,
                        _ => {}
                    }
                    false
                })
                .unwrap_or(rest.len());
            let item = rest[..end].trim();
            rest = &rest[end..];
            let (key, value) = item.split_once([' ', '\t']).unwrap_or((item, ""));
            items.pairs.push((key, value.trim()));
        }
        items
    }

    fn get(&self, key: &str) -> Option<&'a str> {
        self.pairs
            .as_slice()
            .iter()
            .find(|p| p.0 == key)
            .map(|p| p.1)
    }

    fn name(&self) -> Result<&'a str, Bad> {
        match self.quoted {
            Some(Ok(name)) => Ok(name),
            Some(Err(())) => Err("unterminated quoted name".into()),
            None => Err("missing quoted name".into()),
        }
    }

    fn optional<T>(
        &self,
        key: &'static str,
        parse: fn(&str) -> Option<T>,
    ) -> Result<Option<T>, Bad> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => parse(v)
                .map(Some)
                .ok_or_else(|| format!("bad `{key}` value `{}`", clip(v)).into()),
        }
    }

    fn required<T>(&self, key: &'static str, parse: fn(&str) -> Option<T>) -> Result<T, Bad> {
        self.optional(key, parse)?
            .ok_or_else(|| format!("missing `{key}`").into())
    }

    /// `grid [ x, y, z ], block [ x, y, z ], ...`
    fn grid(&self) -> Result<([u32; 3], [u32; 3]), Bad> {
        Ok((
            self.required("grid", parse_dim3)?,
            self.required("block", parse_dim3)?,
        ))
    }

    /// `deviceId D, contextId C, streamId S, graphId G, graphNodeId N, ...`
    fn device(&self) -> Result<Placement, Bad> {
        Ok(Placement {
            device: self.required("deviceId", parse_u32)?,
            context: self.required("contextId", parse_u32)?,
            stream: self.required("streamId", parse_u32)?,
            graph_id: self.optional("graphId", parse_u32)?.unwrap_or(0),
            graph_node_id: self.optional("graphNodeId", parse_u64)?.unwrap_or(0),
        })
    }
}

fn parse_u64(s: &str) -> Option<u64> {
    s.parse().ok()
}

/// A `u32`, or a negative `i32` (printed with `%d`) as its bit pattern.
fn parse_u32(s: &str) -> Option<u32> {
    s.parse()
        .ok()
        .or_else(|| s.parse::<i32>().ok().map(|v| v as u32))
}

/// `[ x, y, z ]`
fn parse_dim3(s: &str) -> Option<[u32; 3]> {
    let inner = s.strip_prefix('[')?.strip_suffix(']')?;
    let mut it = inner.split(',').map(|v| v.trim().parse::<u32>());
    let dims = [it.next()?.ok()?, it.next()?.ok()?, it.next()?.ok()?];
    it.next().is_none().then_some(dims)
}

/// At most 40 characters of user text, for messages.
fn clip(s: &str) -> Cow<'_, str> {
    match s.char_indices().nth(40) {
        Some((i, _)) => format!("{}...", &s[..i]).into(),
        None => s.into(),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::fmt::Write as _;
    use std::path::PathBuf;

    use proptest::prelude::*;

    use super::*;

    fn data(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/cupti_log")
            .join(name)
    }

    fn read(name: &str) -> Vec<u8> {
        let path = data(name);
        std::fs::read(&path).unwrap_or_else(|e| panic!("failed to read `{}`: {e}", path.display()))
    }

    fn parse_str(text: &str) -> (CuptiLog, StringTable) {
        let mut strings = StringTable::new();
        let log = parse(text.as_bytes(), Path::new("t.log"), &mut strings);
        (log, strings)
    }

    /// One line per record with names resolved, then the counts and kept diagnostics.
    fn render(log: &CuptiLog, strings: &StringTable) -> String {
        let mut out = crate::golden::render_records(&log.records, strings);
        let _ = writeln!(
            out,
            "# lines {} skipped {} diagnostics {}",
            log.lines, log.skipped_kinds, log.diagnostics.count
        );
        for d in &log.diagnostics.first {
            let _ = writeln!(out, "# {d}");
        }
        out
    }

    fn check_golden(expected: &Path, actual: &str) {
        crate::golden::check(expected, actual);
    }

    #[test]
    fn reference_log_counts_match_its_readme() {
        let text = read("reference-cupti-log.txt");
        assert!(looks_like_cupti_log(&text[..256]));
        let mut strings = StringTable::new();
        let log = parse(&text, Path::new("reference-cupti-log.txt"), &mut strings);
        assert!(log.diagnostics.is_empty(), "{:?}", log.diagnostics);
        assert_eq!(log.lines, 10_317);
        assert_eq!(log.skipped_kinds, 72, "MEMORY2 records");

        let launch = strings
            .lookup("cudaLaunchKernel")
            .expect("cudaLaunchKernel interned");
        let (mut runtime, mut driver, mut launches, mut memcpy, mut overhead) = (0, 0, 0, 0, 0);
        let mut launch_corr: HashMap<u32, u32> = HashMap::new();
        let mut kernels: HashMap<&str, u32> = HashMap::new();
        let mut kernel_corr = Vec::new();
        let mut copies: HashMap<MemcpyKind, u32> = HashMap::new();
        let mut kernel_streams: HashMap<u32, u32> = HashMap::new();
        for r in &log.records {
            match r {
                Record::Api(a) => {
                    assert_eq!(a.pid, 2_384_094);
                    assert_eq!(a.tid, 2_830_733_312);
                    assert!(a.start_ns <= a.end_ns && a.start_ns > 1_700_000_000_000_000_000);
                    match a.domain {
                        ApiDomain::Runtime => runtime += 1,
                        ApiDomain::Driver => driver += 1,
                    }
                    if a.name == launch {
                        launches += 1;
                        *launch_corr.entry(a.correlation_id).or_default() += 1;
                    }
                }
                Record::Activity(a) => {
                    assert_eq!(a.pid, 2_384_094);
                    assert_eq!(
                        (a.device, a.context, a.graph_id, a.graph_node_id),
                        (0, 1, 0, 0)
                    );
                    match a.kind {
                        ActivityKind::Kernel { name, grid, block } => {
                            *kernels.entry(strings.get(name)).or_default() += 1;
                            kernel_corr.push(a.correlation_id);
                            assert!(grid.iter().chain(&block).all(|&d| d > 0), "{a:?}");
                            *kernel_streams.entry(a.stream).or_default() += 1;
                        }
                        ActivityKind::Memcpy { kind, bytes, .. } => {
                            assert_eq!(a.stream, 7);
                            memcpy += 1;
                            *copies.entry(kind).or_default() += 1;
                            assert!(bytes > 0);
                        }
                        other => panic!("unexpected {other:?}"),
                    }
                }
                Record::Overhead(o) => {
                    assert_eq!(o.pid, 2_384_094);
                    overhead += 1;
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        assert_eq!(
            (runtime, driver, launches, memcpy, overhead),
            (2905, 117, 2115, 288, 14)
        );
        assert_eq!(log.records.len(), 2905 + 117 + 2115 + 288 + 14);
        assert_eq!(kernels.len(), 5, "{kernels:?}");
        assert!(kernels.values().all(|&n| n == 423), "{kernels:?}");
        assert_eq!(kernel_corr.len(), 2115);
        for c in kernel_corr {
            assert_eq!(
                launch_corr.get(&c),
                Some(&1),
                "kernel with correlation id {c}"
            );
        }
        assert_eq!(
            (copies[&MemcpyKind::HtoD], copies[&MemcpyKind::DtoH]),
            (147, 141)
        );
        // Three streams (three `cudaStreamCreate` calls), 705 kernels each.
        assert_eq!(
            kernel_streams,
            HashMap::from([(13, 705), (14, 705), (15, 705)])
        );

        // The first kernel, lines 375-377 of the file.
        let first = log.records.iter().find_map(|r| match r {
            Record::Activity(
                a @ Activity {
                    kind: ActivityKind::Kernel { .. },
                    ..
                },
            ) => Some(*a),
            _ => None,
        });
        let name = strings.intern("_Z12attentionQKTPfS_S_iii");
        assert_eq!(
            first,
            Some(Activity {
                pid: 2_384_094,
                start_ns: 1_761_183_645_346_438_172,
                end_ns: 1_761_183_645_346_759_804,
                correlation_id: 166,
                device: 0,
                context: 1,
                stream: 13,
                graph_id: 0,
                graph_node_id: 0,
                kind: ActivityKind::Kernel {
                    name,
                    grid: [32, 32, 8],
                    block: [16, 16, 1]
                },
            })
        );
    }

    #[test]
    fn small_log_matches_golden_file() {
        let text = read("small.log");
        let mut strings = StringTable::new();
        let log = parse(&text, Path::new("small.log"), &mut strings);
        check_golden(&data("small.expected.txt"), &render(&log, &strings));
    }

    #[test]
    fn small_log_reads_the_same_with_crlf() {
        let text = String::from_utf8(read("small.log")).unwrap();
        let (lf, lf_strings) = parse_str(&text);
        let (crlf, crlf_strings) = parse_str(&text.replace('\n', "\r\n"));
        assert!(crlf.diagnostics.is_empty(), "{:?}", crlf.diagnostics);
        assert_eq!(render(&crlf, &crlf_strings), render(&lf, &lf_strings));
    }

    #[test]
    fn small_log_fields() {
        let (log, strings) = parse_str(&String::from_utf8(read("small.log")).unwrap());
        assert!(log.diagnostics.is_empty(), "{:?}", log.diagnostics);
        assert_eq!(log.skipped_kinds, 3);
        let Some(Record::Api(cu_init)) = log.records.first() else {
            panic!("{:?}", log.records)
        };
        assert_eq!(cu_init.tid, (5_000_000_001u64 & 0xffff_ffff) as u32);
        assert_eq!(cu_init.domain, ApiDomain::Driver);
        let activities: Vec<&Activity> = log
            .records
            .iter()
            .filter_map(|r| {
                if let Record::Activity(a) = r {
                    Some(a)
                } else {
                    None
                }
            })
            .collect();
        let kernel = activities.iter().find(|a| a.correlation_id == 5).unwrap();
        let ActivityKind::Kernel { name, .. } = kernel.kind else {
            panic!("{kernel:?}")
        };
        assert_eq!(
            strings.get(name),
            "void gemm<float, (int)128>(float const*, float*, int)"
        );
        let graph = activities.iter().find(|a| a.correlation_id == 6).unwrap();
        assert_eq!(
            (graph.device, graph.graph_id, graph.graph_node_id),
            (1, 3, 4_294_967_297)
        );
        let ctx_sync = activities.iter().find(|a| a.correlation_id == 10).unwrap();
        assert_eq!(
            (ctx_sync.stream, ctx_sync.kind),
            (
                u32::MAX,
                ActivityKind::Sync {
                    sync_type: 4,
                    wait: None
                }
            )
        );
        let api = |c: u32| {
            log.records.iter().find_map(|r| match r {
                Record::Api(a) if a.correlation_id == c => Some(strings.get(a.name)),
                _ => None,
            })
        };
        assert_eq!(api(5), Some("cudaLaunchKernel"));
        assert_eq!(api(6), Some("cudaGraphLaunch"));
    }

    #[test]
    fn sniffs_logs_and_nothing_else() {
        assert!(looks_like_cupti_log(b"RUNTIME [ 1, 2 ] duration 1"));
        assert!(looks_like_cupti_log(b"\xef\xbb\xbf\r\n\nDRIVER [ 1, 2 ]"));
        assert!(looks_like_cupti_log(b"MEMORY2 [ 1 ] memoryOperationType"));
        assert!(looks_like_cupti_log(b"ENVIRONMENT: kind=SPEED, deviceId 0"));
        assert!(!looks_like_cupti_log(b""));
        assert!(!looks_like_cupti_log(b"RUNTIME"));
        assert!(!looks_like_cupti_log(b"GPUPERF\0\x01\x00"));
        assert!(!looks_like_cupti_log(b"1761183645 app 42 42 0 main;foo 1"));
        assert!(!looks_like_cupti_log(b"\tgrid [ 1, 1, 1 ]"));
        assert!(!looks_like_cupti_log(b"RUNTIMES [ 1, 2 ]"));
    }

    /// `(input, records, [(line, message fragment)])`: every diagnostic, in order.
    type Case = (&'static str, usize, &'static [(u64, &'static str)]);

    const KERNEL: &str = "CONCURRENT_KERNEL [ 10, 20 ] duration 10, \"_Z1kv\", correlationId 5, cacheConfigRequested 0";
    const GRID: &str = "\tgrid [ 1, 2, 3 ], block [ 4, 5, 6 ], cluster [ 0, 0, 0 ], sharedMemory (static 0, dynamic 0)";
    const DEVICE: &str = "\tdeviceId 0, contextId 1, streamId 7, graphId 0, graphNodeId 0, channelId 1, channelType COMPUTE";
    const API: &str = "RUNTIME [ 1, 2 ] duration 1, \"cudaLaunchKernel_v7000\", cbid 211, processId 9, threadId 8, correlationId 5";

    fn check_cases(cases: &[Case]) {
        for &(input, records, want) in cases {
            let (log, _) = parse_str(input);
            let got: Vec<(String, String)> = log
                .diagnostics
                .first
                .iter()
                .map(|d| (d.location.clone(), d.message.clone()))
                .collect();
            assert_eq!(log.records.len(), records, "records of {input:?}: {got:?}");
            assert_eq!(
                log.diagnostics.count,
                want.len() as u64,
                "diagnostics of {input:?}: {got:?}"
            );
            for ((loc, msg), &(line, frag)) in got.iter().zip(want) {
                assert_eq!(loc, &format!("t.log:{line}"), "{input:?}: {msg}");
                assert!(msg.contains(frag), "{input:?}: {msg:?} lacks {frag:?}");
            }
        }
    }

    #[test]
    fn truncated_lines_are_counted() {
        check_cases(&[
            (
                "RUNTIME [ 1, 2 ] duration 1, \"cudaFree_v3020\", cbid 22, proc",
                0,
                &[(1, "missing `correlationId`")],
            ),
            (
                "RUNTIME [ 1, 2 ] duration 1, \"cudaFr",
                0,
                &[(1, "unterminated quoted name")],
            ),
            ("RUNTIME [ 1, 2", 0, &[(1, "missing `]`")]),
            ("RUNTIME [ 1", 0, &[(1, "missing `]`")]),
            ("RUNTIME", 0, &[(1, "missing `[")]),
            (
                "OVERHEAD [ 1, 2 ] duration 1, THREAD, id 3, correlation id 4",
                0,
                &[(1, "missing overhead kind")],
            ),
            (
                "MEMCPY \"HtoD\" [ 1, 2 ] duration 1, correlationId 3\n\tdeviceId 0",
                0,
                &[(1, "missing `size`")],
            ),
        ]);
    }

    #[test]
    fn garbage_numbers_are_counted() {
        check_cases(&[
            (
                "RUNTIME [ 1x, 2 ] duration 1, \"f\", correlationId 3",
                0,
                &[(1, "bad start timestamp `1x`")],
            ),
            (
                "RUNTIME [ 1, -2 ] duration 1, \"f\", correlationId 3",
                0,
                &[(1, "bad end timestamp `-2`")],
            ),
            (
                "RUNTIME [ 1 ] duration 1, \"f\", correlationId 3",
                0,
                &[(1, "bad end timestamp ``")],
            ),
            (
                "RUNTIME [ 1, 2, 3 ] duration 1, \"f\", correlationId 3",
                0,
                &[(1, "more than two timestamps")],
            ),
            (
                "RUNTIME [ 1, 2 ] duration 1, \"f\", cbid zz, correlationId 3",
                0,
                &[(1, "bad `cbid` value `zz`")],
            ),
            (
                "RUNTIME [ 1, 2 ] duration 1, \"f\", correlationId 99999999999",
                0,
                &[(1, "bad `correlationId`")],
            ),
            (
                "RUNTIME [ 99999999999999999999, 2 ] \"f\", correlationId 1",
                0,
                &[(1, "bad start timestamp")],
            ),
            (
                concat_lines(&[KERNEL, "\tgrid [ 1, 2 ], block [ 1, 1, 1 ]", DEVICE]),
                1,
                &[(2, "bad `grid` value")],
            ),
            (
                concat_lines(&[KERNEL, GRID, "\tdeviceId x, contextId 1, streamId 7"]),
                1,
                &[(3, "bad `deviceId`")],
            ),
            (
                concat_lines(&[KERNEL, GRID, "\tdeviceId 0, streamId 7"]),
                1,
                &[(3, "missing `contextId`")],
            ),
        ]);
    }

    /// Leaks the joined lines: test inputs must be `'static` to sit in a [`Case`] table.
    fn concat_lines(lines: &[&str]) -> &'static str {
        Box::leak(lines.join("\n").into_boxed_str())
    }

    #[test]
    fn unknown_kinds_and_stray_lines_are_counted() {
        check_cases(&[
            // The unknown record's own continuation lines add nothing.
            (
                concat_lines(&["FOO [ 1, 2 ] duration 1", GRID, DEVICE, API]),
                1,
                &[(1, "unknown record kind `FOO`")],
            ),
            (
                concat_lines(&[API, DEVICE, "hello world"]),
                1,
                &[(2, "without a record")],
            ),
            // A record-shaped line of an unknown kind is a diagnostic, not tool output.
            (
                concat_lines(&[API, "NEW_KIND [ 1, 2 ] duration 1"]),
                1,
                &[(2, "unknown record kind `NEW_KIND`")],
            ),
            (
                concat_lines(&[DEVICE, API]),
                1,
                &[(1, "continuation line without a record")],
            ),
            (
                concat_lines(&[KERNEL, GRID, "\tbogus 1, 2", DEVICE]),
                1,
                &[(3, "unexpected continuation line")],
            ),
            (
                concat_lines(&[
                    "MEMSET [ 1, 2 ] duration 1, value 0, size 8, correlationId 3",
                    GRID,
                    DEVICE,
                ]),
                1,
                &[(2, "unexpected")],
            ),
            (
                "MEMCPY \"XtoY\" [ 1, 2 ] duration 1, size 8, correlationId 3\n\tdeviceId 0, contextId 1, streamId 2",
                1,
                &[(1, "unknown memcpy kind `XtoY`")],
            ),
            // Known kinds the printer writes and gpuperf skips, with odd continuation lines.
            (
                "JIT [ 1, 2 ] duration 1, deviceId 0\njitEntryType PTX, jitOperationType LOAD\n cacheSize 0, cachePath x",
                0,
                &[],
            ),
            ("  <unknown>\nNAME CONTEXT 1 DEVICE id 0, name ctx", 0, &[]),
            (
                concat_lines(&[KERNEL, GRID, DEVICE, "  <unknown>", API]),
                2,
                &[],
            ),
            ("\n\n   \n\t\n", 0, &[]),
        ]);
    }

    #[test]
    fn cut_off_records_are_kept_and_counted() {
        let cases: &[Case] = &[
            (concat_lines(&[API, KERNEL]), 2, &[(2, "no `grid`")]),
            (
                concat_lines(&[API, KERNEL, GRID]),
                2,
                &[(2, "no `deviceId`")],
            ),
            (
                concat_lines(&[API, KERNEL, "\tgrid [ 1, 2, 3 ], blo"]),
                2,
                &[(3, "missing `block`"), (2, "no `deviceId`")],
            ),
            (
                concat_lines(&[API, "CONCURRENT_KERNEL [ 10, 20 ] duration 10, \"_Z1k"]),
                1,
                &[(2, "unterminated")],
            ),
            (concat_lines(&[KERNEL, API]), 2, &[(1, "no `grid`")]),
            (
                concat_lines(&[
                    API,
                    "MEMSET [ 1, 2 ] duration 1, value 0, size 8, correlationId 3",
                ]),
                2,
                &[(2, "no `deviceId`")],
            ),
        ];
        check_cases(cases);
        let (log, _) = parse_str(concat_lines(&[API, KERNEL, GRID]));
        let Some(Record::Activity(a)) = log.records.get(1) else {
            panic!("{:?}", log.records)
        };
        assert_eq!((a.pid, a.device, a.context, a.stream), (9, 0, 0, 0));
        assert_eq!(
            a.kind,
            ActivityKind::Kernel {
                name: a_name(&log),
                grid: [1, 2, 3],
                block: [4, 5, 6]
            }
        );
    }

    fn a_name(log: &CuptiLog) -> crate::model::StringId {
        match log.records.get(1) {
            Some(Record::Activity(Activity {
                kind: ActivityKind::Kernel { name, .. },
                ..
            })) => *name,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn empty_and_binary_input() {
        let (log, _) = parse_str("");
        assert_eq!(log, CuptiLog::default());
        let (log, _) = parse_str("\n");
        assert_eq!(
            (log.lines, log.records.len(), log.diagnostics.count),
            (1, 0, 0)
        );

        let garbage: Vec<u8> = (0..=255u8).cycle().take(4096).collect();
        let mut strings = StringTable::new();
        let log = parse(&garbage, Path::new("g.bin"), &mut strings);
        assert_eq!(log.lines, 17, "16 newlines, no newline at the end");
        assert!(log.records.is_empty());
        assert!(log.diagnostics.count + log.other_lines >= 1);
        assert!(
            log.diagnostics
                .first
                .iter()
                .all(|d| d.location.starts_with("g.bin:"))
        );
        assert!(!looks_like_cupti_log(&garbage));
    }

    #[test]
    fn invalid_utf8_names_are_read_lossily() {
        let mut text =
            b"CONCURRENT_KERNEL [ 1, 2 ] duration 1, \"_Z1k\xff\xfe\", correlationId 5\r\n"
                .to_vec();
        text.extend_from_slice(GRID.as_bytes());
        text.extend_from_slice(b"\r\n");
        text.extend_from_slice(DEVICE.as_bytes());
        let mut strings = StringTable::new();
        let log = parse(&text, Path::new("u.log"), &mut strings);
        assert!(log.diagnostics.is_empty(), "{:?}", log.diagnostics);
        let Some(Record::Activity(Activity {
            kind: ActivityKind::Kernel { name, .. },
            stream: 7,
            ..
        })) = log.records.first()
        else {
            panic!("{:?}", log.records)
        };
        assert_eq!(strings.get(*name), "_Z1k\u{fffd}\u{fffd}");
    }

    #[test]
    fn pid_comes_from_first_api_record() {
        // No API record: pid 0.
        let (log, _) = parse_str(concat_lines(&[KERNEL, GRID, DEVICE]));
        assert!(matches!(
            log.records.as_slice(),
            [Record::Activity(Activity { pid: 0, .. })]
        ));
        // An API record without processId gets the first one seen, even a later one.
        let no_pid = "DRIVER [ 1, 2 ] duration 1, \"cuInit\", cbid 1, threadId 3, correlationId 1";
        let (log, _) = parse_str(concat_lines(&[KERNEL, GRID, DEVICE, no_pid, API]));
        assert!(log.diagnostics.is_empty(), "{:?}", log.diagnostics);
        let pids: Vec<u32> = log
            .records
            .iter()
            .map(|r| match r {
                Record::Api(a) => a.pid,
                Record::Activity(a) => a.pid,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(pids, [9, 9, 9]);
    }

    #[test]
    fn quoted_names_keep_commas_quotes_and_brackets() {
        let line = "CONCURRENT_KERNEL [ 1, 2 ] duration 1, \"void f<\"a\", [3], (4)>(int, char)\" , correlationId 5";
        let (log, strings) = parse_str(concat_lines(&[line, GRID, DEVICE]));
        assert!(log.diagnostics.is_empty(), "{:?}", log.diagnostics);
        let Some(Record::Activity(Activity {
            kind: ActivityKind::Kernel { name, .. },
            correlation_id: 5,
            ..
        })) = log.records.first()
        else {
            panic!("{:?}", log.records)
        };
        assert_eq!(strings.get(*name), "void f<\"a\", [3], (4)>(int, char)");
    }

    #[test]
    fn item_split_respects_depth() {
        let items =
            Items::parse(" grid [ 32, 32, 8 ], sharedMemory (static 0, dynamic 0), pc 0,, x");
        assert_eq!(
            items.pairs.as_slice(),
            [
                ("grid", "[ 32, 32, 8 ]"),
                ("sharedMemory", "(static 0, dynamic 0)"),
                ("pc", "0"),
                ("x", "")
            ]
        );
        assert_eq!(sync_type("STREAM_WAIT_EVENT"), 2);
        assert_eq!(sync_type("3"), 3);
        assert_eq!(sync_type("<unknown>"), 0);
        assert_eq!(parse_u32("-1"), Some(u32::MAX));
        assert_eq!(parse_u32("4294967296"), None);
        assert_eq!(clip(&"é".repeat(50)).chars().count(), 43);
    }

    /// The reference injection's own stdout lines, as its users' saved logs hold them.
    const TOOL_LINES: &[&str] = &[
        "Calling CUPTI API: cuptiSubscribe(&subscriberHandle, (CUpti_CallbackFunc)CallbackHandler, NULL)",
        "Enabling CUPTI_ACTIVITY_KIND_MEMCPY.",
        "Enabling CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL.",
        "Found 2 devices",
        "Device Name: NVIDIA H100 80GB HBM3",
    ];

    /// The reference log as two devices of one process saved it: device 1 repeats
    /// device 0's records with other correlation ids, and the tool's lines come
    /// before, between (also inside a kernel record) and after the records.
    fn two_device_log() -> (String, u64) {
        let text = String::from_utf8(read("reference-cupti-log.txt")).unwrap();
        let mut out = String::new();
        let mut tool_lines = 0u64;
        let mut tool = |out: &mut String, i: usize| {
            out.push_str(TOOL_LINES[i % TOOL_LINES.len()]);
            out.push('\n');
            tool_lines += 1;
        };
        for i in 0..TOOL_LINES.len() {
            tool(&mut out, i);
        }
        for device in 0..2u32 {
            let mut kernels = 0;
            for line in text.lines() {
                let mut line = line.to_owned();
                if device == 1 {
                    line = line.replace("deviceId 0,", "deviceId 1,");
                    if let Some(at) = line.find("correlationId ") {
                        let digits = &line[at + 14..];
                        let end = digits
                            .find(|c: char| !c.is_ascii_digit())
                            .unwrap_or(digits.len());
                        let corr: u32 = digits[..end].parse().unwrap();
                        line = format!(
                            "{}correlationId {}{}",
                            &line[..at],
                            corr + 1_000_000,
                            &digits[end..]
                        );
                    }
                }
                out.push_str(&line);
                out.push('\n');
                if line.starts_with("CONCURRENT_KERNEL ") {
                    kernels += 1;
                    // Another thread's output between a kernel's header and its lines.
                    if kernels % 500 == 0 {
                        tool(&mut out, kernels);
                    }
                }
            }
            tool(&mut out, 0);
        }
        tool(&mut out, 1);
        (out, tool_lines)
    }

    #[test]
    fn two_device_log_with_tool_lines_is_detected_by_its_records_and_lines_counted() {
        let (text, tool_lines) = two_device_log();
        assert!(text.starts_with("Calling CUPTI API: "));
        // The first line is not a record: detection looks for records.
        assert!(looks_like_cupti_log(&text.as_bytes()[..4096]));
        assert!(!looks_like_cupti_log(TOOL_LINES.join("\n").as_bytes()));

        let mut strings = StringTable::new();
        let log = parse(text.as_bytes(), Path::new("two.log"), &mut strings);
        assert!(log.diagnostics.is_empty(), "{:?}", log.diagnostics);
        assert_eq!(log.other_lines, tool_lines);

        let (one, _) = parse_str(&String::from_utf8(read("reference-cupti-log.txt")).unwrap());
        assert_eq!(log.records.len(), 2 * one.records.len());
        // Every kernel keeps its grid and device lines, on both devices.
        let mut per_device = [0u32; 2];
        for r in &log.records {
            if let Record::Activity(
                a @ Activity {
                    kind: ActivityKind::Kernel { grid, .. },
                    ..
                },
            ) = r
            {
                assert!(grid.iter().all(|&g| g > 0), "{a:?}");
                assert!((13..=15).contains(&a.stream), "{a:?}");
                per_device[a.device as usize] += 1;
            }
        }
        assert_eq!(per_device, [2115, 2115]);
    }

    fn never_panics(bytes: &[u8]) -> Result<(), TestCaseError> {
        let _ = looks_like_cupti_log(bytes);
        let mut strings = StringTable::new();
        let log = parse(bytes, Path::new("p.log"), &mut strings);
        prop_assert!(log.records.len() as u64 <= log.lines);
        prop_assert!(log.diagnostics.first.len() as u64 <= log.diagnostics.count);
        prop_assert!(log.diagnostics.count + log.skipped_kinds <= log.lines * 2);
        Ok(())
    }

    /// Pieces that make mutations reach the parser's edge cases.
    const TOKENS: &[&str] = &[
        "[",
        "]",
        "(",
        ")",
        "\"",
        ",",
        " ",
        "\t",
        "\n",
        "\r\n",
        "-1",
        "99999999999999999999",
        "correlationId ",
        "grid [ 1, 2, 3 ]",
        "deviceId 0",
        "RUNTIME ",
        "CONCURRENT_KERNEL ",
        "MEMORY2 ",
        "  ",
        "\u{fffd}",
        "\u{0}",
    ];

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
            never_panics(&bytes)?;
        }

        #[test]
        fn mutated_logs_never_panic(
            edits in proptest::collection::vec(
                (any::<proptest::sample::Index>(), 0u8..8, proptest::collection::vec(any::<u8>(), 0..8),
                 any::<proptest::sample::Index>()),
                0..12,
            )
        ) {
            let mut text = include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/cupti_log/small.log")).to_vec();
            crate::golden::apply_edits(&mut text, edits, TOKENS);
            never_panics(&text)?;
        }
    }
}
