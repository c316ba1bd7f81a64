//! gpuperf's GPU trace file format: what `gpuperf-inject` writes inside the target.
//!
//! # Layout
//!
//! Little-endian throughout. A 16-byte file header, then records back to back:
//!
//! ```text
//! header : magic "GPUPERF\0" (8) | version u16 | header_len u16 (=16) | flags u32 (=0)
//! record : kind u8 | reserved u8 (=0) | len u16 | payload [len bytes]
//! ```
//!
//! The file is append-only: a writer only ever adds whole records at the end, so a
//! file cut off by a killed process is read up to its last complete record and the
//! cut is reported ([`ReadStats::truncated_at`]). Readers skip record kinds they do
//! not know (their length is in the header), so new kinds can be added without a
//! version bump; changing an existing payload bumps [`FORMAT_VERSION`]. Payloads may
//! grow at the end: readers ignore bytes past the fields they know.
//!
//! All names are interned: a `STRING` record defines a file-local id before any
//! record uses it. Every record after a `PROCESS` record belongs to that process
//! (one file per process). Timestamps are `CLOCK_MONOTONIC` nanoseconds, the clock
//! of `bpf_ktime_get_ns()`.
//!
//! | kind | name | payload (bytes) |
//! |---|---|---|
//! | 1 | `STRING` | id u32, UTF-8 text |
//! | 2 | `PROCESS` | pid u32, ppid u32, start_ns u64, start_realtime_ns u64, exe string u32, 0 u32 (32) |
//! | 3 | `DEVICE` | id u32, name string u32, cc major u16, cc minor u16 (12) |
//! | 4 | `API` | start u64, end u64, corr u32, tid u32, cbid u32, name string u32, domain u8 (0 runtime, 1 driver), 0 u8×3 (36), then optionally stack id u32 (40; 0 = none) |
//! | 5 | `KERNEL` | start u64, end u64, corr u32, name string u32, context u32, stream u32, graph id u32, graph node u64, grid x u32, grid y u16, grid z u16, block x/y/z u16×3, device u16 (60) |
//! | 6 | `MEMCPY` | start u64, end u64, bytes u64, graph node u64, corr u32, context u32, stream u32, graph id u32, device u16, copy kind u8, 0 u8×5 (56); a peer-to-peer copy adds src device u32, dst device u32 (64) |
//! | 7 | `MEMSET` | start u64, end u64, bytes u64, graph node u64, corr u32, context u32, stream u32, graph id u32, value u32, device u16, 0 u8×2 (56) |
//! | 8 | `SYNC` | start u64, end u64, corr u32, context u32, stream u32, sync type u8, 0 u8, device u16 (32) |
//! | 9 | `DROPPED` | count u64, source u8 (0 CUPTI, 1 writer, 2 ring buffer, 3 incomplete GPU record), 0 u8×7 (16) |
//! | 10 | `OVERHEAD` | start u64, end u64, kind string u32, corr u32 (24; 0 = none, and in files written before the field was) |
//! | 11 | `NOTE` | UTF-8 text: why the trace is empty or partial |
//! | 12 | `MODULE` | id u32, path string u32, bias u64, text start u64, text end u64, build id length u8, 0 u8×3, build id bytes (36 + length) |
//! | 13 | `STACK` | id u32 (from 1), end u8, flags u8 (bit 0: Python frames cut at the depth cap), frame count u16, frames (8 + 16 × count) |
//! | 14 | `GRAPH_NODE` | node id u64, stack id u32, API name string u32 (`u32::MAX`: none) (16) |
//! | 15 | `THREAD` | tid u32, name string u32 (8): the thread's name; a later record for the same thread supersedes it (a rename). Added without a version bump: older readers skip it |
//! | 17 | `AUTOGRAD` | corr u32, kind u8 (1 forward, 2 backward), 0 u8×3, thread u64, seq u64 (24): PyTorch autograd's ids for the API record with this correlation id, written after it; forward: RecordFunction thread id and `sequence_number::peek()`, backward: the evaluated node's thread id and sequence number. Added without a version bump: older readers skip it |
//! | 18 | `NVTX` | start u64, end u64, tid u32, name string u32, domain string u32 (`u32::MAX`: the default domain), kind u8 (1 push/pop, 2 start/end), flags u8 (bit 0: still open when the trace closed; `end` is the close), 0 u16 (32): an NVTX range, written when it ends (or at the close). Added without a version bump: older readers skip it |
//! | 16 | `CLOSED` | at u64 (8): the recording was closed by the process's exit flush, at this time; records after it are notes on what came later. Written when the header has [`FLAG_CLOSES`]; added without a version bump |
//!
//! A file whose header has [`FLAG_CLOSES`] and no `CLOSED` record was not closed:
//! the process ended without its exit flush (killed, or by `_exit`), and what it
//! did after its last periodic flush is missing ([`ReadStats::unclosed`]).
//!
//! Devices are u16; 0xffff means unknown. A kernel record is 64 bytes with its
//! header; an API record 40, or 44 with a stack id.
//!
//! # In-process stacks
//!
//! When the injection library takes CPU stacks itself, the header's flags have
//! bit 0 ([`FLAG_STACKS`]) set, and:
//!
//! - each distinct stack is written once as a `STACK` record, before the first API
//!   record that names it by its id; the `MODULE` records its native frames name
//!   come before it. Frames are innermost first, the first being the
//!   application's call into the CUDA API (frames of CUDA's libraries and of the
//!   injection library are left out), 16 bytes each:
//!
//!   | tag u8 | 0 u8×3 | a u32 | b u64 |
//!   |---|---|---|---|
//!   | 0 native | | module id | ELF virtual address to symbolize (inside the call instruction for return addresses) |
//!   | 1 Python | | function string (`module.qualname`) | file string (low 32 bits), line (high 32 bits) |
//!   | 2 unknown (no unwind info; the last frame) | | 0 | absolute address |
//!
//!   `end` says how the stack ended: 0 at a root frame (`_start`, `clone`,
//!   `clone3`: complete), 1 code without unwind info, 2 a module loaded after the
//!   module table was read, 3 a stack read out of bounds, 4 unusable unwind info,
//!   5 the depth cap, 6 the unwinder busy. Every value but 0 is a truncated stack.
//! - an `API` record carries the id of its call's stack; readers that know it
//!   deliver a [`Record::CallStack`] right after the [`Record::Api`].
//! - `GRAPH_NODE` ties a CUDA graph node id (as kernel and copy records carry it)
//!   to the stack that made the node, so that the kernels of a replayed graph can
//!   be charged to the `cudaGraphLaunch` stack and then to the capturing stack.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::path::Path;

use crate::diag::Diagnostics;
use crate::error::{Error, Result};
use crate::model::{
    Activity, ActivityKind, ApiCall, ApiDomain, Autograd, AutogradTag, CallStack, Device,
    DropSource, Dropped, GraphNode, MemcpyKind, Module, Note, NvtxKind, NvtxRange, Overhead,
    PeerDevices, Process, Record, Stack, StackEnd, StackFrame, StringId, StringTable, ThreadName,
    UNKNOWN_DEVICE,
};

/// The magic bytes a GPU trace starts with.
pub const MAGIC: [u8; 8] = *b"GPUPERF\0";
/// The format version this build writes and the newest it reads.
pub const FORMAT_VERSION: u16 = 1;
/// Header flag: the trace holds in-process stacks (`STACK` records).
pub const FLAG_STACKS: u32 = 1;
/// Header flag: the writer ends a complete recording with a `CLOSED` record, so
/// that a file without one is known to be cut short.
pub const FLAG_CLOSES: u32 = 2;
/// Frames one `STACK` record can hold.
pub const MAX_STACK_FRAMES: usize = (u16::MAX as usize - 8) / 16;
/// The length of the file header that [`header_flags`] decodes.
pub const HEADER_LEN: usize = 16;
const RECORD_HEADER_LEN: usize = 4;

mod kind {
    pub const STRING: u8 = 1;
    pub const PROCESS: u8 = 2;
    pub const DEVICE: u8 = 3;
    pub const API: u8 = 4;
    pub const KERNEL: u8 = 5;
    pub const MEMCPY: u8 = 6;
    pub const MEMSET: u8 = 7;
    pub const SYNC: u8 = 8;
    pub const DROPPED: u8 = 9;
    pub const OVERHEAD: u8 = 10;
    pub const NOTE: u8 = 11;
    pub const MODULE: u8 = 12;
    pub const STACK: u8 = 13;
    pub const GRAPH_NODE: u8 = 14;
    pub const THREAD: u8 = 15;
    pub const CLOSED: u8 = 16;
    pub const AUTOGRAD: u8 = 17;
    pub const NVTX: u8 = 18;
}

/// Whether `bytes` (the start of a file) look like a gpuperf GPU trace.
pub fn is_gpu_trace(bytes: &[u8]) -> bool {
    bytes.starts_with(&MAGIC)
}

/// The header flags ([`FLAG_STACKS`], [`FLAG_CLOSES`]) of a GPU trace that
/// starts with `bytes`; `None` when they are not a whole GPU trace header.
pub fn header_flags(bytes: &[u8]) -> Option<u32> {
    let h = bytes.get(..HEADER_LEN).filter(|h| is_gpu_trace(h))?;
    Some(u32::from_le_bytes([h[12], h[13], h[14], h[15]]))
}

/// Writes a GPU trace. Names are interned on first use; each call appends one
/// whole record, so a reader never sees half of one unless the process dies inside
/// a `write` of the underlying stream.
pub struct Writer<W: Write> {
    out: W,
    // Global StringId index -> file-local id + 1 (0 = not yet written).
    local: Vec<u32>,
    by_text: HashMap<String, u32>,
    next: u32,
    buf: Vec<u8>,
}

impl<W: Write> Writer<W> {
    /// Writes the file header.
    pub fn new(out: W) -> io::Result<Self> {
        Self::with_flags(out, 0)
    }

    /// Writes the file header with `flags` ([`FLAG_STACKS`]).
    pub fn with_flags(mut out: W, flags: u32) -> io::Result<Self> {
        let mut h = [0u8; HEADER_LEN];
        h[..8].copy_from_slice(&MAGIC);
        h[8..10].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        h[10..12].copy_from_slice(&(HEADER_LEN as u16).to_le_bytes());
        h[12..16].copy_from_slice(&flags.to_le_bytes());
        out.write_all(&h)?;
        Ok(Self {
            out,
            local: Vec::new(),
            by_text: HashMap::new(),
            next: 0,
            buf: Vec::with_capacity(128),
        })
    }

    /// Returns the file-local id of `text`, writing a `STRING` record on first use.
    pub fn intern(&mut self, text: &str) -> io::Result<u32> {
        if let Some(&id) = self.by_text.get(text) {
            return Ok(id);
        }
        let id = self.next;
        self.next += 1;
        // Names longer than a record can hold are cut at a char boundary.
        let mut end = text.len().min(usize::from(u16::MAX) - 4);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        self.begin(kind::STRING);
        self.buf.extend_from_slice(&id.to_le_bytes());
        self.buf.extend_from_slice(&text.as_bytes()[..end]);
        self.finish()?;
        self.by_text.insert(text.to_owned(), id);
        Ok(id)
    }

    fn intern_id(&mut self, id: StringId, strings: &StringTable) -> io::Result<u32> {
        let i = id.index();
        if let Some(&l) = self.local.get(i).filter(|&&l| l != 0) {
            return Ok(l - 1);
        }
        let l = self.intern(strings.get(id))?;
        if self.local.len() <= i {
            self.local.resize(i + 1, 0);
        }
        self.local[i] = l + 1;
        Ok(l)
    }

    /// Appends the `CLOSED` record: the recording is complete as of `at_ns`
    /// (for a header with [`FLAG_CLOSES`]).
    pub fn write_closed(&mut self, at_ns: u64) -> io::Result<()> {
        self.begin(kind::CLOSED);
        self.u64(at_ns);
        self.finish()
    }

    /// Appends an API record carrying the id of its call's stack, if any.
    pub fn write_api(
        &mut self,
        a: &ApiCall,
        stack: Option<u32>,
        strings: &StringTable,
    ) -> io::Result<()> {
        let name = self.intern_id(a.name, strings)?;
        self.begin(kind::API);
        let domain = match a.domain {
            ApiDomain::Runtime => 0,
            ApiDomain::Driver => 1,
        };
        self.u64(a.start_ns)
            .u64(a.end_ns)
            .u32(a.correlation_id)
            .u32(a.tid)
            .u32(a.cbid)
            .u32(name);
        self.u8(domain).u8(0).u16(0);
        if let Some(s) = stack {
            self.u32(s);
        }
        self.finish()
    }

    /// Appends one record. String ids are resolved through `strings`. Records with a
    /// pid other than the last `PROCESS` record's are written as belonging to it.
    ///
    /// A [`Record::CallStack`] is not a record of its own in the file: write it
    /// with its API call through [`Writer::write_api`]; here it is an
    /// `InvalidInput` error.
    pub fn write(&mut self, rec: &Record, strings: &StringTable) -> io::Result<()> {
        match rec {
            Record::Process(p) => {
                let exe = self.intern(&p.exe)?;
                self.begin(kind::PROCESS);
                self.u32(p.pid)
                    .u32(p.ppid)
                    .u64(p.start_ns)
                    .u64(p.start_realtime_ns)
                    .u32(exe)
                    .u32(0);
            }
            Record::Device(d) => {
                let name = self.intern(&d.name)?;
                self.begin(kind::DEVICE);
                self.u32(d.id)
                    .u32(name)
                    .u16(d.compute_capability.0)
                    .u16(d.compute_capability.1);
            }
            Record::Api(a) => return self.write_api(a, None, strings),
            Record::Activity(a) => self.activity(a, strings)?,
            Record::Dropped(d) => {
                self.begin(kind::DROPPED);
                let source = match d.source {
                    DropSource::CuptiActivity => 0,
                    DropSource::Writer => 1,
                    DropSource::RingBuffer => 2,
                    DropSource::Incomplete => 3,
                };
                self.u64(d.count).u8(source).u8(0).u16(0).u32(0);
            }
            Record::Overhead(o) => {
                let k = self.intern_id(o.kind, strings)?;
                self.begin(kind::OVERHEAD);
                self.u64(o.start_ns)
                    .u64(o.end_ns)
                    .u32(k)
                    .u32(o.correlation_id);
            }
            Record::Note(n) => {
                self.begin(kind::NOTE);
                let mut end = n.text.len().min(usize::from(u16::MAX));
                while !n.text.is_char_boundary(end) {
                    end -= 1;
                }
                self.buf.extend_from_slice(&n.text.as_bytes()[..end]);
            }
            Record::Module(m) => {
                let path = self.intern(&m.path)?;
                let id_len = m.build_id.len().min(usize::from(u8::MAX));
                self.begin(kind::MODULE);
                self.u32(m.id)
                    .u32(path)
                    .u64(m.bias)
                    .u64(m.text_start)
                    .u64(m.text_end);
                self.u8(id_len as u8).u8(0).u16(0);
                self.buf.extend_from_slice(&m.build_id[..id_len]);
            }
            Record::Stack(st) => self.stack(st, strings)?,
            Record::CallStack(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "a call's stack id is written with its API record (Writer::write_api)",
                ));
            }
            Record::GraphNode(g) => {
                let api = match g.api {
                    Some(a) => self.intern_id(a, strings)?,
                    None => u32::MAX,
                };
                self.begin(kind::GRAPH_NODE);
                self.u64(g.node_id).u32(g.stack).u32(api);
            }
            Record::Thread(t) => {
                let name = self.intern(&t.name)?;
                self.begin(kind::THREAD);
                self.u32(t.tid).u32(name);
            }
            Record::Autograd(a) => {
                let (k, thread, seq) = match a.tag {
                    AutogradTag::Forward { thread, next_seq } => (1, thread, next_seq),
                    AutogradTag::Backward { thread, seq } => (2, thread, seq),
                };
                self.begin(kind::AUTOGRAD);
                self.u32(a.correlation_id).u8(k).u8(0).u16(0);
                self.u64(thread).u64(seq);
            }
            Record::Nvtx(r) => {
                let name = self.intern_id(r.name, strings)?;
                let domain = match r.domain {
                    Some(d) => self.intern_id(d, strings)?,
                    None => u32::MAX,
                };
                let k = match r.kind {
                    NvtxKind::PushPop => 1,
                    NvtxKind::StartEnd => 2,
                };
                self.begin(kind::NVTX);
                self.u64(r.start_ns).u64(r.end_ns).u32(r.tid).u32(name);
                self.u32(domain).u8(k).u8(u8::from(r.unclosed)).u16(0);
            }
        }
        self.finish()
    }

    fn stack(&mut self, st: &Stack, strings: &StringTable) -> io::Result<()> {
        let n = st.frames.len().min(MAX_STACK_FRAMES);
        // Names first: a STRING record may not interrupt this one.
        let mut python = Vec::new();
        for f in &st.frames[..n] {
            if let StackFrame::Python { function, file, .. } = *f {
                python.push((
                    self.intern_id(function, strings)?,
                    self.intern_id(file, strings)?,
                ));
            }
        }
        let end = if n < st.frames.len() {
            StackEnd::DepthLimit
        } else {
            st.end
        };
        self.begin(kind::STACK);
        self.u32(st.id)
            .u8(end.code())
            .u8(u8::from(st.python_truncated))
            .u16(n as u16);
        let mut python = python.into_iter();
        for f in &st.frames[..n] {
            match *f {
                StackFrame::Native { module, offset } => {
                    self.u8(0).u8(0).u16(0).u32(module).u64(offset);
                }
                StackFrame::Python { line, .. } => {
                    let (function, file) = python.next().unwrap_or_default();
                    self.u8(1).u8(0).u16(0).u32(function);
                    self.u32(file).u32(line);
                }
                StackFrame::Unknown { address } => {
                    self.u8(2).u8(0).u16(0).u32(0).u64(address);
                }
            }
        }
        Ok(())
    }

    fn activity(&mut self, a: &Activity, strings: &StringTable) -> io::Result<()> {
        let dev = u16::try_from(a.device).unwrap_or(u16::MAX);
        match a.kind {
            ActivityKind::Kernel { name, grid, block } => {
                let name = self.intern_id(name, strings)?;
                self.begin(kind::KERNEL);
                self.u64(a.start_ns)
                    .u64(a.end_ns)
                    .u32(a.correlation_id)
                    .u32(name);
                self.u32(a.context)
                    .u32(a.stream)
                    .u32(a.graph_id)
                    .u64(a.graph_node_id);
                self.u32(grid[0]).u16(sat16(grid[1])).u16(sat16(grid[2]));
                self.u16(sat16(block[0]))
                    .u16(sat16(block[1]))
                    .u16(sat16(block[2]))
                    .u16(dev);
            }
            ActivityKind::Memcpy {
                kind: k,
                bytes,
                peer,
            } => {
                self.copy_prefix(kind::MEMCPY, a, bytes);
                self.u16(dev).u8(k as u8).u8(0).u32(0);
                if let Some(p) = peer {
                    self.u32(p.src).u32(p.dst);
                }
            }
            ActivityKind::Memset { bytes, value } => {
                self.copy_prefix(kind::MEMSET, a, bytes);
                self.u32(value).u16(dev).u16(0);
            }
            ActivityKind::Sync { sync_type, .. } => {
                self.begin(kind::SYNC);
                self.u64(a.start_ns)
                    .u64(a.end_ns)
                    .u32(a.correlation_id)
                    .u32(a.context)
                    .u32(a.stream);
                self.u8(sync_type).u8(0).u16(dev);
            }
        }
        Ok(())
    }

    /// The 48 bytes MEMCPY and MEMSET payloads share.
    fn copy_prefix(&mut self, kind: u8, a: &Activity, bytes: u64) {
        self.begin(kind);
        self.u64(a.start_ns)
            .u64(a.end_ns)
            .u64(bytes)
            .u64(a.graph_node_id);
        self.u32(a.correlation_id)
            .u32(a.context)
            .u32(a.stream)
            .u32(a.graph_id);
    }

    /// Flushes the underlying stream.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// Returns the underlying stream.
    pub fn into_inner(self) -> W {
        self.out
    }

    fn begin(&mut self, kind: u8) {
        self.buf.clear();
        self.buf.extend_from_slice(&[kind, 0, 0, 0]);
    }

    fn finish(&mut self) -> io::Result<()> {
        let len = u16::try_from(self.buf.len() - RECORD_HEADER_LEN).expect("record fits u16");
        self.buf[2..4].copy_from_slice(&len.to_le_bytes());
        self.out.write_all(&self.buf)
    }

    fn u8(&mut self, v: u8) -> &mut Self {
        self.buf.push(v);
        self
    }
    fn u16(&mut self, v: u16) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u32(&mut self, v: u32) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u64(&mut self, v: u64) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
}

/// The on-disk device: 0xffff means unknown, and so does any ordinal too large.
fn device(d: u16) -> u32 {
    if d == u16::MAX {
        UNKNOWN_DEVICE
    } else {
        u32::from(d)
    }
}

fn sat16(v: u32) -> u16 {
    u16::try_from(v).unwrap_or(u16::MAX)
}

/// What a read saw besides the records.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReadStats {
    /// Records read (an API record with a stack id is delivered as a
    /// [`Record::Api`] and a [`Record::CallStack`], and counted once).
    pub records: u64,
    /// Bytes read.
    pub bytes: u64,
    /// Byte offset of an incomplete last record, when the file was cut off.
    pub truncated_at: Option<u64>,
    /// Records of kinds this build does not know, skipped.
    pub unknown_kinds: u64,
    /// The header's flags ([`FLAG_STACKS`], [`FLAG_CLOSES`]).
    pub flags: u32,
    /// When the recording was closed (`CLOSED`), if it was.
    pub closed_at: Option<u64>,
    /// Malformed records, with the first few places.
    pub diagnostics: Diagnostics,
}

impl ReadStats {
    /// A recording that says it is closed when complete ([`FLAG_CLOSES`]) and
    /// was not: its process ended without the exit flush.
    pub fn unclosed(&self) -> bool {
        self.flags & FLAG_CLOSES != 0 && self.closed_at.is_none()
    }
}

/// Reads a GPU trace from `input`, calling `visit` for every record (with the
/// table its names are interned in). `path` only
/// names the file in errors and diagnostics. Names are interned into `strings`.
///
/// Fails only when the file is not a GPU trace, has a newer version, or cannot be
/// read; a malformed or cut-off record is counted in the returned stats.
pub fn read<R: Read>(
    mut input: R,
    path: &Path,
    strings: &mut StringTable,
    visit: &mut dyn FnMut(&Record, &StringTable),
) -> Result<ReadStats> {
    let io_err = |source| Error::Io {
        action: "read",
        path: path.to_owned(),
        source,
    };
    let mut header = [0u8; HEADER_LEN];
    let got = read_full(&mut input, &mut header).map_err(io_err)?;
    if got < MAGIC.len() || !is_gpu_trace(&header) {
        return Err(Error::NotATrace {
            path: path.to_owned(),
            expected: "gpuperf GPU trace",
            found: crate::error::describe_start(&header[..got]),
        });
    }
    let mut stats = ReadStats::default();
    if got < HEADER_LEN {
        stats.truncated_at = Some(0);
        return Ok(stats);
    }
    let version = u16::from_le_bytes([header[8], header[9]]);
    if version > FORMAT_VERSION || version == 0 {
        return Err(Error::UnsupportedVersion {
            path: path.to_owned(),
            version,
            supported: FORMAT_VERSION,
        });
    }
    stats.flags = header_flags(&header).unwrap_or_default();
    // A header shorter than the fixed part is malformed; the fixed part is always there.
    let header_len = usize::from(u16::from_le_bytes([header[10], header[11]])).max(HEADER_LEN);
    let mut skip = vec![0u8; header_len.saturating_sub(HEADER_LEN)];
    if read_full(&mut input, &mut skip).map_err(io_err)? < skip.len() {
        stats.truncated_at = Some(HEADER_LEN as u64);
        return Ok(stats);
    }

    let mut decoder = Decoder {
        path,
        strings,
        local: Vec::new(),
        pid: 0,
        stats,
    };
    let mut buf = vec![0u8; 1 << 20];
    let mut filled = 0usize;
    let mut start = 0usize;
    let mut offset = header_len as u64; // file offset of buf[start]
    let mut eof = false;
    loop {
        // Decode every whole record in buf[start..filled].
        while filled - start >= RECORD_HEADER_LEN {
            let h = &buf[start..start + RECORD_HEADER_LEN];
            let len = usize::from(u16::from_le_bytes([h[2], h[3]]));
            let total = RECORD_HEADER_LEN + len;
            if filled - start < total {
                break;
            }
            let kind = h[0];
            decoder.record(
                kind,
                &buf[start + RECORD_HEADER_LEN..start + total],
                offset,
                visit,
            );
            start += total;
            offset += total as u64;
        }
        if eof {
            break;
        }
        buf.copy_within(start..filled, 0);
        filled -= start;
        start = 0;
        let n = read_full(&mut input, &mut buf[filled..]).map_err(io_err)?;
        eof = filled + n < buf.len();
        filled += n;
    }
    let mut stats = decoder.stats;
    if start < filled {
        stats.truncated_at = Some(offset);
    }
    stats.bytes = offset + (filled - start) as u64;
    Ok(stats)
}

fn read_full<R: Read>(r: &mut R, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

struct Decoder<'a> {
    path: &'a Path,
    strings: &'a mut StringTable,
    // File-local string id -> global id.
    local: Vec<Option<StringId>>,
    pid: u32,
    stats: ReadStats,
}

/// Little-endian field reader over one payload; reading past the end yields `None`.
struct Fields<'p> {
    p: &'p [u8],
    at: usize,
}

impl Fields<'_> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let v = self.p.get(self.at..self.at + N)?.try_into().ok()?;
        self.at += N;
        Some(v)
    }
    fn u8(&mut self) -> Option<u8> {
        self.take::<1>().map(|b| b[0])
    }
    fn u16(&mut self) -> Option<u16> {
        self.take().map(u16::from_le_bytes)
    }
    fn u32(&mut self) -> Option<u32> {
        self.take().map(u32::from_le_bytes)
    }
    fn u64(&mut self) -> Option<u64> {
        self.take().map(u64::from_le_bytes)
    }
}

impl Decoder<'_> {
    fn record(
        &mut self,
        kind: u8,
        payload: &[u8],
        offset: u64,
        visit: &mut dyn FnMut(&Record, &StringTable),
    ) {
        let mut f = Fields { p: payload, at: 0 };
        let rec = match kind {
            kind::STRING => return self.string_def(&mut f, payload, offset),
            kind::CLOSED => {
                match f.u64() {
                    // Not a record of the model: counted in no total.
                    Some(at) => self.stats.closed_at = Some(at),
                    None => self.bad(offset, "record shorter than its kind requires"),
                }
                return;
            }
            kind::PROCESS => self.process(&mut f, offset),
            kind::DEVICE => self.device(&mut f, offset),
            kind::API => self.api(&mut f, payload, offset, visit),
            kind::KERNEL => self.kernel(&mut f, offset),
            kind::MEMCPY => self.memcpy(&mut f),
            kind::MEMSET => self.memset(&mut f),
            kind::SYNC => self.sync(&mut f),
            kind::DROPPED => self.dropped(&mut f),
            kind::OVERHEAD => self.overhead(&mut f, offset),
            kind::NOTE => Some(Record::Note(Note {
                pid: self.pid,
                text: String::from_utf8_lossy(payload).into_owned(),
            })),
            kind::MODULE => self.module(&mut f, payload, offset),
            kind::STACK => self.stack(&mut f, offset),
            kind::GRAPH_NODE => self.graph_node(&mut f, offset),
            kind::THREAD => self.thread(&mut f, offset),
            kind::NVTX => match self.nvtx(&mut f, offset) {
                Some(Ok(r)) => Some(r),
                // A kind of range this build does not know: skipped.
                Some(Err(())) => {
                    self.stats.unknown_kinds += 1;
                    return;
                }
                None => None,
            },
            kind::AUTOGRAD => match self.autograd(&mut f) {
                Some(Ok(r)) => Some(r),
                // A kind this build does not know: skipped like an unknown record.
                Some(Err(())) => {
                    self.stats.unknown_kinds += 1;
                    return;
                }
                None => None,
            },
            _ => {
                self.stats.unknown_kinds += 1;
                return;
            }
        };
        match rec {
            Some(r) => {
                self.stats.records += 1;
                visit(&r, self.strings);
            }
            None => self.bad(offset, "record shorter than its kind requires"),
        }
    }

    /// A STRING record: maps the file's string id to the global table.
    fn string_def(&mut self, f: &mut Fields<'_>, payload: &[u8], offset: u64) {
        let Some(id) = f.u32() else {
            return self.bad(offset, "short STRING record");
        };
        let text = String::from_utf8_lossy(&payload[4..]);
        let gid = self.strings.intern(&text);
        let i = id as usize;
        // Writers number strings 0, 1, 2, …; a far-off id would make the
        // table grow without bound.
        if i > self.local.len() + 4096 {
            return self.bad(offset, "STRING id out of range");
        }
        if self.local.len() <= i {
            self.local.resize(i + 1, None);
        }
        self.local[i] = Some(gid);
    }

    fn device(&mut self, f: &mut Fields<'_>, offset: u64) -> Option<Record> {
        let (id, name, cc) = (f.u32()?, f.u32()?, (f.u16()?, f.u16()?));
        let name = self.string(name, offset);
        Some(Record::Device(Device {
            pid: self.pid,
            id,
            name: self.strings.get(name).to_owned(),
            compute_capability: cc,
        }))
    }

    /// An API call; one that carries a stack id is delivered to `visit` here and
    /// followed by the [`CallStack`] record returned.
    fn api(
        &mut self,
        f: &mut Fields<'_>,
        payload: &[u8],
        offset: u64,
        visit: &mut dyn FnMut(&Record, &StringTable),
    ) -> Option<Record> {
        let (start_ns, end_ns, correlation_id, tid, cbid, name) =
            (f.u64()?, f.u64()?, f.u32()?, f.u32()?, f.u32()?, f.u32()?);
        let domain = if f.u8()? == 1 {
            ApiDomain::Driver
        } else {
            ApiDomain::Runtime
        };
        let name = self.string(name, offset);
        let api = Record::Api(ApiCall {
            pid: self.pid,
            tid,
            start_ns,
            end_ns,
            correlation_id,
            cbid,
            domain,
            name,
        });
        // The stack id grew the payload: bytes 36..40 (after 3 zero bytes).
        let stack = payload
            .get(36..40)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .filter(|&s| s != 0);
        let Some(stack) = stack else {
            return Some(api);
        };
        visit(&api, self.strings);
        Some(Record::CallStack(CallStack {
            pid: self.pid,
            correlation_id,
            stack,
        }))
    }

    fn memcpy(&mut self, f: &mut Fields<'_>) -> Option<Record> {
        let (start, end, bytes, node) = (f.u64()?, f.u64()?, f.u64()?, f.u64()?);
        let (corr, ctx, stream, graph) = (f.u32()?, f.u32()?, f.u32()?, f.u32()?);
        let (dev, k) = (f.u16()?, f.u8()?);
        let _ = (f.u8()?, f.u32()?);
        // Older writers end here; readers ignore what newer ones append.
        let peer = f
            .u32()
            .zip(f.u32())
            .map(|(src, dst)| PeerDevices { src, dst });
        Some(Record::Activity(Activity {
            pid: self.pid,
            start_ns: start,
            end_ns: end,
            correlation_id: corr,
            device: device(dev),
            context: ctx,
            stream,
            graph_id: graph,
            graph_node_id: node,
            kind: ActivityKind::Memcpy {
                kind: MemcpyKind::from_u8(k),
                bytes,
                peer,
            },
        }))
    }

    fn memset(&mut self, f: &mut Fields<'_>) -> Option<Record> {
        let (start, end, bytes, node) = (f.u64()?, f.u64()?, f.u64()?, f.u64()?);
        let (corr, ctx, stream, graph, value) = (f.u32()?, f.u32()?, f.u32()?, f.u32()?, f.u32()?);
        let dev = f.u16()?;
        Some(Record::Activity(Activity {
            pid: self.pid,
            start_ns: start,
            end_ns: end,
            correlation_id: corr,
            device: device(dev),
            context: ctx,
            stream,
            graph_id: graph,
            graph_node_id: node,
            kind: ActivityKind::Memset { bytes, value },
        }))
    }

    fn sync(&mut self, f: &mut Fields<'_>) -> Option<Record> {
        let (start, end, corr, ctx, stream) = (f.u64()?, f.u64()?, f.u32()?, f.u32()?, f.u32()?);
        let sync_type = f.u8()?;
        let _ = f.u8()?;
        let dev = f.u16()?;
        Some(Record::Activity(Activity {
            pid: self.pid,
            start_ns: start,
            end_ns: end,
            correlation_id: corr,
            device: device(dev),
            context: ctx,
            stream,
            graph_id: 0,
            graph_node_id: 0,
            kind: ActivityKind::Sync {
                sync_type,
                wait: None,
            },
        }))
    }

    fn dropped(&mut self, f: &mut Fields<'_>) -> Option<Record> {
        let count = f.u64()?;
        let source = match f.u8()? {
            0 => DropSource::CuptiActivity,
            1 => DropSource::Writer,
            3 => DropSource::Incomplete,
            _ => DropSource::RingBuffer,
        };
        Some(Record::Dropped(Dropped {
            pid: self.pid,
            source,
            count,
        }))
    }

    fn overhead(&mut self, f: &mut Fields<'_>, offset: u64) -> Option<Record> {
        let (start_ns, end_ns, k) = (f.u64()?, f.u64()?, f.u32()?);
        let correlation_id = f.u32().unwrap_or(0);
        let kind = self.string(k, offset);
        Some(Record::Overhead(Overhead {
            pid: self.pid,
            kind,
            correlation_id,
            start_ns,
            end_ns,
        }))
    }

    fn module(&mut self, f: &mut Fields<'_>, payload: &[u8], offset: u64) -> Option<Record> {
        let (id, path, bias, text_start, text_end) =
            (f.u32()?, f.u32()?, f.u64()?, f.u64()?, f.u64()?);
        let len = usize::from(f.u8()?);
        let build_id = payload.get(36..36 + len)?.to_vec();
        let path = self.string(path, offset);
        Some(Record::Module(Module {
            pid: self.pid,
            id,
            path: self.strings.get(path).to_owned(),
            build_id,
            bias,
            text_start,
            text_end,
        }))
    }

    fn graph_node(&mut self, f: &mut Fields<'_>, offset: u64) -> Option<Record> {
        let (node_id, stack, api) = (f.u64()?, f.u32()?, f.u32()?);
        let api = (api != u32::MAX).then(|| self.string(api, offset));
        Some(Record::GraphNode(GraphNode {
            pid: self.pid,
            node_id,
            stack,
            api,
        }))
    }

    fn thread(&mut self, f: &mut Fields<'_>, offset: u64) -> Option<Record> {
        let (tid, name) = (f.u32()?, f.u32()?);
        let name = self.string(name, offset);
        Some(Record::Thread(ThreadName {
            pid: self.pid,
            tid,
            name: self.strings.get(name).to_owned(),
        }))
    }

    /// `None` when short; `Some(Err(()))` for an autograd kind this build
    /// does not know.
    fn autograd(&mut self, f: &mut Fields<'_>) -> Option<Result<Record, ()>> {
        let (correlation_id, k, _, _) = (f.u32()?, f.u8()?, f.u8()?, f.u16()?);
        let (thread, seq) = (f.u64()?, f.u64()?);
        let tag = match k {
            1 => AutogradTag::Forward {
                thread,
                next_seq: seq,
            },
            2 => AutogradTag::Backward { thread, seq },
            _ => return Some(Err(())),
        };
        Some(Ok(Record::Autograd(Autograd {
            pid: self.pid,
            correlation_id,
            tag,
        })))
    }

    /// `None` when short; `Some(Err(()))` for a range kind this build does
    /// not know.
    fn nvtx(&mut self, f: &mut Fields<'_>, offset: u64) -> Option<Result<Record, ()>> {
        let (start_ns, end_ns, tid, name, domain) =
            (f.u64()?, f.u64()?, f.u32()?, f.u32()?, f.u32()?);
        let (k, flags) = (f.u8()?, f.u8()?);
        let kind = match k {
            1 => NvtxKind::PushPop,
            2 => NvtxKind::StartEnd,
            _ => return Some(Err(())),
        };
        let name = self.string(name, offset);
        let domain = (domain != u32::MAX).then(|| self.string(domain, offset));
        Some(Ok(Record::Nvtx(NvtxRange {
            pid: self.pid,
            tid,
            start_ns,
            end_ns,
            name,
            domain,
            kind,
            unclosed: flags & 1 != 0,
        })))
    }

    fn process(&mut self, f: &mut Fields<'_>, offset: u64) -> Option<Record> {
        let (pid, ppid, start_ns, start_realtime_ns, exe) =
            (f.u32()?, f.u32()?, f.u64()?, f.u64()?, f.u32()?);
        self.pid = pid;
        let exe = self.string(exe, offset);
        Some(Record::Process(Process {
            pid,
            ppid,
            exe: self.strings.get(exe).to_owned(),
            start_ns,
            start_realtime_ns,
        }))
    }

    fn stack(&mut self, f: &mut Fields<'_>, offset: u64) -> Option<Record> {
        let (id, end, flags, n) = (f.u32()?, f.u8()?, f.u8()?, f.u16()?);
        let mut frames = Vec::with_capacity(usize::from(n).min(MAX_STACK_FRAMES));
        for _ in 0..n {
            let (tag, _, _, a, b) = (f.u8()?, f.u8()?, f.u16()?, f.u32()?, f.u64()?);
            frames.push(match tag {
                0 => StackFrame::Native {
                    module: a,
                    offset: b,
                },
                1 => StackFrame::Python {
                    function: self.string(a, offset),
                    file: self.string(b as u32, offset),
                    line: (b >> 32) as u32,
                },
                _ => StackFrame::Unknown { address: b },
            });
        }
        Some(Record::Stack(Stack {
            pid: self.pid,
            id,
            end: StackEnd::from_code(end),
            python_truncated: flags & 1 != 0,
            frames,
        }))
    }

    fn kernel(&mut self, f: &mut Fields<'_>, offset: u64) -> Option<Record> {
        let (start_ns, end_ns, corr, name) = (f.u64()?, f.u64()?, f.u32()?, f.u32()?);
        let (context, stream, graph_id, graph_node_id) = (f.u32()?, f.u32()?, f.u32()?, f.u64()?);
        let grid = [f.u32()?, u32::from(f.u16()?), u32::from(f.u16()?)];
        let block = [
            u32::from(f.u16()?),
            u32::from(f.u16()?),
            u32::from(f.u16()?),
        ];
        let device = device(f.u16()?);
        let name = self.string(name, offset);
        Some(Record::Activity(Activity {
            pid: self.pid,
            start_ns,
            end_ns,
            correlation_id: corr,
            device,
            context,
            stream,
            graph_id,
            graph_node_id,
            kind: ActivityKind::Kernel { name, grid, block },
        }))
    }

    fn string(&mut self, local: u32, offset: u64) -> StringId {
        if let Some(Some(id)) = self.local.get(local as usize) {
            return *id;
        }
        self.bad(
            offset,
            "record names a string id that no STRING record defined",
        );
        self.strings.intern(&format!("[unknown string {local}]"))
    }

    fn bad(&mut self, offset: u64, msg: &'static str) {
        let path = self.path;
        self.stats
            .diagnostics
            .push(|| format!("{}@{offset}", path.display()), || msg.to_owned());
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    pub(crate) fn sample(strings: &mut StringTable) -> Vec<Record> {
        let k = strings.intern("_Z6matmulPfS_S_i");
        let api = strings.intern("cudaLaunchKernel");
        let ovh = strings.intern("CUPTI_INSTRUMENTATION");
        vec![
            Record::Process(Process {
                pid: 42,
                ppid: 1,
                exe: "/bin/app".into(),
                start_ns: 10,
                start_realtime_ns: 20,
            }),
            Record::Device(Device {
                pid: 42,
                id: 0,
                name: "NVIDIA H100".into(),
                compute_capability: (9, 0),
            }),
            Record::Api(ApiCall {
                pid: 42,
                tid: 43,
                start_ns: 100,
                end_ns: 150,
                correlation_id: 7,
                cbid: 211,
                domain: ApiDomain::Runtime,
                name: api,
            }),
            Record::Activity(Activity {
                pid: 42,
                start_ns: 200,
                end_ns: 1200,
                correlation_id: 7,
                device: 0,
                context: 1,
                stream: 13,
                graph_id: 3,
                graph_node_id: 1 << 40,
                kind: ActivityKind::Kernel {
                    name: k,
                    grid: [1 << 20, 2, 3],
                    block: [256, 1, 1],
                },
            }),
            Record::Activity(Activity {
                pid: 42,
                start_ns: 300,
                end_ns: 400,
                correlation_id: 8,
                device: 1,
                context: 1,
                stream: 7,
                graph_id: 0,
                graph_node_id: 0,
                kind: ActivityKind::Memcpy {
                    kind: MemcpyKind::DtoH,
                    bytes: 4096,
                    peer: None,
                },
            }),
            Record::Activity(Activity {
                pid: 42,
                start_ns: 410,
                end_ns: 480,
                correlation_id: 11,
                device: 1,
                context: 1,
                stream: 7,
                graph_id: 0,
                graph_node_id: 0,
                kind: ActivityKind::Memcpy {
                    kind: MemcpyKind::PtoP,
                    bytes: 8192,
                    peer: Some(PeerDevices { src: 1, dst: 3 }),
                },
            }),
            Record::Activity(Activity {
                pid: 42,
                start_ns: 500,
                end_ns: 600,
                correlation_id: 9,
                device: 0,
                context: 1,
                stream: 7,
                graph_id: 0,
                graph_node_id: 0,
                kind: ActivityKind::Memset {
                    bytes: 64,
                    value: 0xff,
                },
            }),
            Record::Activity(Activity {
                pid: 42,
                start_ns: 700,
                end_ns: 900,
                correlation_id: 10,
                device: 0,
                context: 1,
                stream: 7,
                graph_id: 0,
                graph_node_id: 0,
                kind: ActivityKind::Sync {
                    sync_type: 3,
                    wait: None,
                },
            }),
            // cuCtxSynchronize in a context the recorder never saw: no stream,
            // no device.
            Record::Activity(Activity {
                pid: 42,
                start_ns: 910,
                end_ns: 990,
                correlation_id: 12,
                device: UNKNOWN_DEVICE,
                context: 9,
                stream: u32::MAX,
                graph_id: 0,
                graph_node_id: 0,
                kind: ActivityKind::Sync {
                    sync_type: 4,
                    wait: None,
                },
            }),
            Record::Dropped(Dropped {
                pid: 42,
                source: DropSource::CuptiActivity,
                count: 5,
            }),
            Record::Dropped(Dropped {
                pid: 42,
                source: DropSource::Incomplete,
                count: 2,
            }),
            Record::Overhead(Overhead {
                pid: 42,
                kind: ovh,
                correlation_id: 77,
                start_ns: 1,
                end_ns: 2,
            }),
            Record::Note(Note {
                pid: 42,
                text: "cuptiSubscribe failed".into(),
            }),
        ]
    }

    fn encode(recs: &[Record], strings: &StringTable) -> Vec<u8> {
        let mut w = Writer::new(Vec::new()).unwrap();
        for r in recs {
            w.write(r, strings).unwrap();
        }
        w.into_inner()
    }

    fn decode(bytes: &[u8]) -> (Vec<Record>, StringTable, ReadStats) {
        let mut strings = StringTable::new();
        let mut out = Vec::new();
        let stats = read(bytes, Path::new("t.gpt"), &mut strings, &mut |r, _| {
            out.push(r.clone())
        })
        .unwrap();
        (out, strings, stats)
    }

    #[test]
    fn a_recording_that_closes_is_unclosed_until_its_closed_record() {
        let strings = StringTable::new();
        let note = Record::Note(Note {
            pid: 7,
            text: "after".into(),
        });
        // Old writers set no FLAG_CLOSES: never reported as unclosed.
        let old = Writer::new(Vec::new()).unwrap().into_inner();
        assert!(!decode(&old).2.unclosed());
        // Killed before the exit flush.
        let mut w = Writer::with_flags(Vec::new(), FLAG_CLOSES | FLAG_STACKS).unwrap();
        w.write(&note, &strings).unwrap();
        let cut = w.into_inner();
        let (recs, _, stats) = decode(&cut);
        assert_eq!((recs.len(), stats.closed_at), (1, None));
        assert!(stats.unclosed());
        // Closed, then a note on what came after: closed, and nothing lost.
        let mut w = Writer::with_flags(Vec::new(), FLAG_CLOSES).unwrap();
        w.write_closed(1234).unwrap();
        w.write(&note, &strings).unwrap();
        let (recs, _, stats) = decode(&w.into_inner());
        assert_eq!(recs.len(), 1, "{recs:?}");
        assert_eq!(stats.closed_at, Some(1234));
        assert_eq!(stats.records, 1);
        assert!(!stats.unclosed());
        // A CLOSED record too short for its time is malformed, not a close.
        let mut bad = Writer::with_flags(Vec::new(), FLAG_CLOSES)
            .unwrap()
            .into_inner();
        bad.extend_from_slice(&[kind::CLOSED, 0, 4, 0, 1, 2, 3, 4]);
        let (_, _, stats) = decode(&bad);
        assert!(stats.unclosed());
        assert_eq!(stats.diagnostics.count, 1, "{:?}", stats.diagnostics);
    }

    fn names(recs: &[Record], strings: &StringTable) -> Vec<String> {
        recs.iter()
            .map(|r| match r {
                Record::Api(a) => strings.get(a.name).to_owned(),
                Record::Activity(Activity {
                    kind: ActivityKind::Kernel { name, .. },
                    ..
                }) => strings.get(*name).to_owned(),
                Record::Overhead(o) => strings.get(o.kind).to_owned(),
                _ => String::new(),
            })
            .collect()
    }

    #[test]
    fn round_trip_keeps_every_field() {
        let mut strings = StringTable::new();
        let recs = sample(&mut strings);
        let bytes = encode(&recs, &strings);
        let (back, bstrings, stats) = decode(&bytes);
        assert!(stats.diagnostics.is_empty(), "{:?}", stats.diagnostics);
        assert_eq!(stats.truncated_at, None);
        assert_eq!(stats.records, recs.len() as u64);
        assert_eq!(names(&back, &bstrings), names(&recs, &strings));
        // Ids differ between tables; compare with names blanked.
        let blank = |rs: &[Record]| -> Vec<Record> {
            rs.iter()
                .cloned()
                .map(|mut r| {
                    match &mut r {
                        Record::Api(a) => a.name = StringId(0),
                        Record::Activity(Activity {
                            kind: ActivityKind::Kernel { name, .. },
                            ..
                        }) => *name = StringId(0),
                        Record::Overhead(o) => o.kind = StringId(0),
                        _ => {}
                    }
                    r
                })
                .collect()
        };
        assert_eq!(blank(&back), blank(&recs));
    }

    #[test]
    fn kernel_record_is_at_most_64_bytes() {
        let mut strings = StringTable::new();
        let recs = sample(&mut strings);
        let mut w = Writer::new(Vec::new()).unwrap();
        w.write(&recs[3], &strings).unwrap();
        let before = w.into_inner().len();
        let mut w = Writer::new(Vec::new()).unwrap();
        w.intern("_Z6matmulPfS_S_i").unwrap();
        let with_name = w.into_inner().len();
        assert_eq!(before - with_name, 64);
    }

    #[test]
    fn cut_file_reads_up_to_last_whole_record() {
        let mut strings = StringTable::new();
        let recs = sample(&mut strings);
        let bytes = encode(&recs, &strings);
        let (all, _, _) = decode(&bytes);
        let mut boundaries = vec![HEADER_LEN];
        while let Some(&b) = boundaries.last().filter(|&&b| b < bytes.len()) {
            boundaries.push(
                b + RECORD_HEADER_LEN
                    + usize::from(u16::from_le_bytes([bytes[b + 2], bytes[b + 3]])),
            );
        }
        for cut in HEADER_LEN..=bytes.len() {
            let (part, _, stats) = decode(&bytes[..cut]);
            assert!(part.len() <= all.len());
            assert_eq!(&all[..part.len()], &part[..], "cut at {cut}");
            // A cut on a record boundary looks like a complete, shorter file.
            let at_boundary = boundaries.contains(&cut);
            assert_eq!(stats.truncated_at.is_none(), at_boundary, "cut at {cut}");
            if let Some(at) = stats.truncated_at {
                assert_eq!(
                    at as usize,
                    *boundaries.iter().rev().find(|&&b| b < cut).unwrap()
                );
            }
        }
        assert_eq!(decode(&bytes).0.len(), all.len());
    }

    #[test]
    fn not_a_trace_is_one_clear_error() {
        let mut strings = StringTable::new();
        let err = read(
            &b"RUNTIME [ 1, 2 ]"[..],
            Path::new("x.txt"),
            &mut strings,
            &mut |_, _| {},
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "`x.txt` is not a gpuperf GPU trace (it starts with \"RUNTIME [ 1, 2 ]\")"
        );
        let mut newer = encode(&[], &strings);
        newer[8] = 9;
        let err = read(&newer[..], Path::new("n.gpt"), &mut strings, &mut |_, _| {}).unwrap_err();
        assert!(err.to_string().contains("version 9"), "{err}");
    }

    #[test]
    fn far_string_ids_are_rejected_not_allocated() {
        let strings = StringTable::new();
        let mut bytes = encode(&[], &strings);
        for k in 1..=8u32 {
            bytes.extend_from_slice(&[kind::STRING, 0, 4, 0]);
            bytes.extend_from_slice(&(k << 24).to_le_bytes());
        }
        let mut strings = StringTable::new();
        let mut decoder_local = 0;
        let stats = read(&bytes[..], Path::new("s.gpt"), &mut strings, &mut |_, _| {
            decoder_local += 1
        })
        .unwrap();
        assert_eq!(stats.diagnostics.count, 8);
        assert_eq!(stats.diagnostics.first[0].message, "STRING id out of range");
    }

    #[test]
    fn unknown_kinds_are_skipped_and_short_records_counted() {
        let mut strings = StringTable::new();
        let mut bytes = encode(&sample(&mut strings)[..1], &strings);
        bytes.extend_from_slice(&[200, 0, 3, 0, 1, 2, 3]); // unknown kind, 3 bytes
        bytes.extend_from_slice(&[kind::KERNEL, 0, 2, 0, 1, 2]); // kernel too short
        let (recs, _, stats) = decode(&bytes);
        assert_eq!(recs.len(), 1);
        assert_eq!(stats.unknown_kinds, 1);
        assert_eq!(stats.diagnostics.count, 1);
        assert!(stats.diagnostics.first[0].location.starts_with("t.gpt@"));
    }

    /// Reads `bytes` and checks what holds for any input; returns the stats, or
    /// `None` when the read failed (as it may only for a bad header).
    fn check_read(bytes: &[u8]) -> Result<Option<ReadStats>, TestCaseError> {
        let len = bytes.len() as u64;
        let mut strings = StringTable::new();
        let mut delivered = 0u64;
        let mut call_stacks = 0u64;
        let mut bad_name = None;
        let r = read(
            bytes,
            Path::new("t.gpt"),
            &mut strings,
            &mut |rec, strings| {
                delivered += 1;
                call_stacks += u64::from(matches!(rec, Record::CallStack(_)));
                let name = match rec {
                    Record::Api(a) => Some(a.name),
                    Record::Activity(Activity {
                        kind: ActivityKind::Kernel { name, .. },
                        ..
                    }) => Some(*name),
                    Record::Overhead(o) => Some(o.kind),
                    _ => None,
                };
                if let Some(id) = name.filter(|id| id.index() >= strings.len()) {
                    bad_name = Some(id);
                }
            },
        );
        prop_assert_eq!(bad_name, None, "a record names a string outside the table");
        let stats = match r {
            Ok(stats) => stats,
            Err(err) => {
                let msg = err.to_string();
                prop_assert!(!msg.contains('\n'), "multi-line error: {}", msg);
                match err {
                    Error::NotATrace { .. } => prop_assert!(!is_gpu_trace(bytes)),
                    Error::UnsupportedVersion { version, .. } => {
                        prop_assert!(version == 0 || version > FORMAT_VERSION);
                        prop_assert_eq!(version, u16::from_le_bytes([bytes[8], bytes[9]]));
                    }
                    other => prop_assert!(false, "unexpected error {:?}", other),
                }
                prop_assert_eq!(delivered, 0);
                return Ok(None);
            }
        };
        prop_assert!(is_gpu_trace(bytes));
        prop_assert_eq!(stats.records, delivered - call_stacks);
        // Every record, known or not, takes at least its 4-byte header.
        prop_assert!(stats.records + stats.unknown_kinds <= len / 4);
        if let Some(at) = stats.truncated_at {
            prop_assert!(at <= len, "truncated at {} of {}", at, len);
        }
        let d = &stats.diagnostics;
        prop_assert_eq!(d.first.len() as u64, d.count.min(crate::diag::KEPT as u64));
        for x in &d.first {
            let at: u64 = x
                .location
                .strip_prefix("t.gpt@")
                .and_then(|n| n.parse().ok())
                .ok_or_else(|| TestCaseError::fail(format!("bad location {x}")))?;
            prop_assert!(at < len, "{} past the end ({})", x, len);
        }
        Ok(Some(stats))
    }

    fn header_len_field(bytes: &[u8]) -> Option<usize> {
        bytes
            .get(10..12)
            .map(|b| usize::from(u16::from_le_bytes([b[0], b[1]])))
    }

    /// `stats.bytes` is the input's length once the header is complete.
    fn check_bytes(bytes: &[u8], stats: &ReadStats) -> Result<(), TestCaseError> {
        let complete_header =
            bytes.len() >= HEADER_LEN && header_len_field(bytes).is_some_and(|h| h <= bytes.len());
        if complete_header {
            prop_assert_eq!(stats.bytes, bytes.len() as u64);
        }
        Ok(())
    }

    fn encoded_sample() -> Vec<u8> {
        let mut strings = StringTable::new();
        let recs = sample(&mut strings);
        encode(&recs, &strings)
    }

    /// One framed record: kind, and a payload whose length is often the one the
    /// kind needs, give or take a few bytes.
    fn framed_record() -> impl Strategy<Value = Vec<u8>> {
        (0u8..17, any::<bool>(), -4i32..4, 0usize..80, any::<u32>()).prop_flat_map(
            |(kind, exact, delta, any_len, small_id)| {
                let want: i32 = match kind {
                    kind::STRING => 12,
                    kind::PROCESS => 32,
                    kind::DEVICE => 12,
                    kind::API => 36,
                    kind::KERNEL => 60,
                    kind::MEMCPY | kind::MEMSET => 56,
                    kind::SYNC | kind::OVERHEAD => 32,
                    kind::DROPPED => 16,
                    kind::MODULE => 56,
                    kind::STACK => 8 + 16 * (small_id % 4) as i32,
                    kind::GRAPH_NODE => 16,
                    _ => 8,
                };
                let n = if exact {
                    usize::try_from((want + delta).max(0)).unwrap_or(0)
                } else {
                    any_len
                };
                prop::collection::vec(any::<u8>(), n).prop_map(move |mut payload| {
                    // Small string ids in definitions and uses, so that names
                    // often resolve.
                    let id_at = match kind {
                        kind::STRING => Some(0),
                        kind::PROCESS => Some(24),
                        kind::DEVICE => Some(4),
                        kind::API => Some(28),
                        kind::KERNEL => Some(20),
                        kind::OVERHEAD => Some(16),
                        kind::MODULE => Some(4),
                        kind::GRAPH_NODE => Some(12),
                        kind::THREAD => Some(4),
                        _ => None,
                    };
                    if let Some(at) = id_at.filter(|&at| exact && payload.len() >= at + 4) {
                        payload[at..at + 4].copy_from_slice(&(small_id % 8).to_le_bytes());
                    }
                    let mut r = vec![kind, 0];
                    r.extend_from_slice(&(payload.len() as u16).to_le_bytes());
                    r.extend_from_slice(&payload);
                    r
                })
            },
        )
    }

    /// Where, which operation, and its bytes.
    type Edit = (prop::sample::Index, u8, Vec<u8>);

    fn apply_edits(bytes: &mut Vec<u8>, edits: Vec<Edit>) {
        for (at, op, data) in edits {
            let i = at.index(bytes.len() + 1);
            match op {
                0 => drop(bytes.splice(i..i, data)),
                1 => drop(bytes.drain(i..(i + data.len() + 1).min(bytes.len()))),
                2 => bytes.truncate(i),
                3 => {
                    if let Some(b) = bytes.get_mut(i) {
                        *b ^= 1 << (data.first().copied().unwrap_or(0) % 8);
                    }
                }
                _ => {
                    for (j, d) in data.into_iter().enumerate() {
                        if let Some(b) = bytes.get_mut(i + j) {
                            *b = d;
                        }
                    }
                }
            }
        }
    }

    /// Builds a trace of big unknown-kind records and small notes whose total
    /// crosses the reader's 1 MiB buffer; returns it with each record's offset.
    fn large_trace(sizes: &[u16]) -> (Vec<u8>, Vec<usize>) {
        let mut bytes = encode(&[], &StringTable::new());
        let mut starts = Vec::with_capacity(sizes.len());
        for (i, &n) in sizes.iter().enumerate() {
            starts.push(bytes.len());
            let kind = if i % 3 == 0 { kind::NOTE } else { 200 };
            bytes.extend_from_slice(&[kind, 0]);
            bytes.extend_from_slice(&n.to_le_bytes());
            bytes.resize(bytes.len() + usize::from(n), b'n');
        }
        (bytes, starts)
    }

    #[test]
    fn header_len_below_16_keeps_offsets_exact() {
        let mut bytes = encode(&[], &StringTable::new());
        bytes[10] = 0; // header_len 0
        bytes.extend_from_slice(&[kind::KERNEL, 0, 2, 0, 1, 2]); // short: diagnostic at 16
        bytes.extend_from_slice(&[kind::NOTE, 0, 9, 0]); // cut: truncated at 22
        let (_, _, stats) = decode(&bytes);
        assert_eq!(stats.diagnostics.first[0].location, "t.gpt@16");
        assert_eq!(stats.truncated_at, Some(22));
        assert_eq!(stats.bytes, bytes.len() as u64);
    }

    /// Modules, stacks of every frame kind, API calls with and without a stack,
    /// and a graph node.
    pub(crate) fn stack_sample(strings: &mut StringTable) -> (Vec<Record>, Vec<(ApiCall, u32)>) {
        let api = strings.intern("cudaLaunchKernel");
        let f = strings.intern("train.step");
        let file = strings.intern("/srv/train.py");
        let module = Record::Module(Module {
            pid: 42,
            id: 0,
            path: "/opt/app/bin/app".into(),
            build_id: vec![0xde, 0xad, 0xbe, 0xef],
            bias: 0x5555_0000_0000,
            text_start: 0x5555_0000_1000,
            text_end: 0x5555_0000_9000,
        });
        let stack = Record::Stack(Stack {
            pid: 42,
            id: 1,
            end: StackEnd::Root,
            python_truncated: false,
            frames: vec![
                StackFrame::Native {
                    module: 0,
                    offset: 0x1234,
                },
                StackFrame::Python {
                    function: f,
                    file,
                    line: 17,
                },
                StackFrame::Native {
                    module: 0,
                    offset: 0x1000,
                },
            ],
        });
        let jit = Record::Stack(Stack {
            pid: 42,
            id: 2,
            end: StackEnd::NoUnwindInfo,
            python_truncated: true,
            frames: vec![StackFrame::Unknown {
                address: 0x7f00_dead_beef,
            }],
        });
        let call = |corr, tid| ApiCall {
            pid: 42,
            tid,
            start_ns: 100 * u64::from(corr),
            end_ns: 100 * u64::from(corr) + 50,
            correlation_id: corr,
            cbid: 211,
            domain: ApiDomain::Runtime,
            name: api,
        };
        let node = Record::GraphNode(GraphNode {
            pid: 42,
            node_id: 1 << 40,
            stack: 2,
            api: Some(api),
        });
        let added = Record::GraphNode(GraphNode {
            pid: 42,
            node_id: 7,
            stack: 1,
            api: None,
        });
        (
            vec![
                Record::Process(Process {
                    pid: 42,
                    ppid: 1,
                    exe: "/opt/app/bin/app".into(),
                    start_ns: 1,
                    start_realtime_ns: 2,
                }),
                module,
                stack,
                jit,
                node,
                added,
            ],
            vec![(call(7, 43), 1), (call(8, 44), 2), (call(9, 43), 0)],
        )
    }

    #[test]
    fn thread_names_round_trip_and_a_rename_follows() {
        let strings = StringTable::new();
        let proc_rec = Record::Process(Process {
            pid: 42,
            ppid: 1,
            exe: "/opt/app".into(),
            start_ns: 1,
            start_realtime_ns: 2,
        });
        let name = |tid, n: &str| {
            Record::Thread(ThreadName {
                pid: 42,
                tid,
                name: n.into(),
            })
        };
        let recs = [
            proc_rec,
            name(43, "loader"),
            name(44, "worker-1"),
            // A rename: the later record supersedes the first.
            name(43, "loader-2"),
        ];
        let (back, _, stats) = decode(&encode(&recs, &strings));
        assert!(stats.diagnostics.is_empty(), "{:?}", stats.diagnostics);
        assert_eq!(stats.unknown_kinds, 0);
        assert_eq!(back, recs);
    }

    #[test]
    fn autograd_tags_round_trip_and_an_unknown_kind_is_skipped() {
        let strings = StringTable::new();
        let tag = |correlation_id, tag| {
            Record::Autograd(Autograd {
                pid: 42,
                correlation_id,
                tag,
            })
        };
        let recs = [
            Record::Process(Process {
                pid: 42,
                ppid: 1,
                exe: "/opt/app".into(),
                start_ns: 1,
                start_realtime_ns: 2,
            }),
            tag(
                7,
                AutogradTag::Forward {
                    thread: 1,
                    next_seq: 12,
                },
            ),
            tag(
                9,
                AutogradTag::Backward {
                    thread: 1,
                    seq: u64::MAX,
                },
            ),
        ];
        let mut bytes = encode(&recs, &strings);
        let (back, _, stats) = decode(&bytes);
        assert!(stats.diagnostics.is_empty(), "{:?}", stats.diagnostics);
        assert_eq!(back, recs);
        // A third kind of tag, from a newer writer: skipped, not misread.
        let at = bytes.len() - 24 + 4;
        bytes[at] = 3;
        let (back, _, stats) = decode(&bytes);
        assert_eq!(back, recs[..2]);
        assert_eq!(stats.unknown_kinds, 1);
    }

    #[test]
    fn nvtx_ranges_round_trip() {
        let mut strings = StringTable::new();
        let range = |name, domain, kind, unclosed| {
            Record::Nvtx(NvtxRange {
                pid: 42,
                tid: 43,
                start_ns: 100,
                end_ns: 250,
                name,
                domain,
                kind,
                unclosed,
            })
        };
        let (step, fwd, dom) = (
            strings.intern("step"),
            strings.intern("forward"),
            strings.intern("mylib"),
        );
        let recs = [
            Record::Process(Process {
                pid: 42,
                ppid: 1,
                exe: "/opt/app".into(),
                start_ns: 1,
                start_realtime_ns: 2,
            }),
            range(step, None, NvtxKind::PushPop, false),
            range(fwd, Some(dom), NvtxKind::StartEnd, true),
        ];
        let (back, bstrings, stats) = decode(&encode(&recs, &strings));
        assert!(stats.diagnostics.is_empty(), "{:?}", stats.diagnostics);
        let Record::Nvtx(r) = &back[2] else {
            panic!("{back:?}")
        };
        assert_eq!(bstrings.get(r.name), "forward");
        assert_eq!(r.domain.map(|d| bstrings.get(d)), Some("mylib"));
        assert_eq!((r.kind, r.unclosed, r.tid), (NvtxKind::StartEnd, true, 43));
        let Record::Nvtx(r) = &back[1] else {
            panic!("{back:?}")
        };
        assert_eq!((bstrings.get(r.name), r.domain), ("step", None));
        assert_eq!((r.start_ns, r.end_ns), (100, 250));
    }

    #[test]
    fn stacks_and_api_stack_ids_round_trip() {
        let mut strings = StringTable::new();
        let (recs, calls) = stack_sample(&mut strings);
        let mut w = Writer::with_flags(Vec::new(), FLAG_STACKS).unwrap();
        for r in &recs {
            w.write(r, &strings).unwrap();
        }
        for (a, s) in &calls {
            w.write_api(a, (*s != 0).then_some(*s), &strings).unwrap();
        }
        let bytes = w.into_inner();
        let (back, bstrings, stats) = decode(&bytes);
        assert!(stats.diagnostics.is_empty(), "{:?}", stats.diagnostics);
        assert_eq!(stats.flags, FLAG_STACKS);
        assert_eq!(header_flags(&bytes), Some(FLAG_STACKS));
        assert_eq!(header_flags(&bytes[..HEADER_LEN - 1]), None);
        assert_eq!(header_flags(b"GPUPERX\0\x01\0\x10\0\x01\0\0\0"), None);
        assert_eq!(back.len(), recs.len() + 5, "{back:?}");
        // Stacks, with names resolved through the reader's table.
        let Record::Stack(st) = &back[2] else {
            panic!("{:?}", back[2])
        };
        assert_eq!(st.id, 1);
        assert_eq!(st.end, StackEnd::Root);
        assert_eq!(
            st.frames[0],
            StackFrame::Native {
                module: 0,
                offset: 0x1234
            }
        );
        let StackFrame::Python {
            function,
            file,
            line,
        } = st.frames[1]
        else {
            panic!("{:?}", st.frames[1])
        };
        assert_eq!(
            (bstrings.get(function), bstrings.get(file), line),
            ("train.step", "/srv/train.py", 17)
        );
        assert_eq!(back[1], recs[1]);
        assert_eq!(back[3], recs[3]);
        let Record::GraphNode(g) = back[4] else {
            panic!("{:?}", back[4])
        };
        assert_eq!((g.node_id, g.stack), (1 << 40, 2));
        assert_eq!(g.api.map(|a| bstrings.get(a)), Some("cudaLaunchKernel"));
        assert_eq!(back[5], recs[5]);
        // Each API call, followed by its stack when it has one.
        let tail: Vec<String> = back[6..]
            .iter()
            .map(|r| match r {
                Record::Api(a) => format!("api {}", a.correlation_id),
                Record::CallStack(c) => format!("stack {} {}", c.correlation_id, c.stack),
                other => format!("{other:?}"),
            })
            .collect();
        assert_eq!(tail, ["api 7", "stack 7 1", "api 8", "stack 8 2", "api 9"]);
        // Two API records carried a stack id: delivered as two records each.
        assert_eq!(stats.records, back.len() as u64 - 2);
    }

    #[test]
    fn api_record_with_a_stack_id_is_four_bytes_longer_and_old_fields_unchanged() {
        let mut strings = StringTable::new();
        let (_, calls) = stack_sample(&mut strings);
        let one = |stack| {
            let mut w = Writer::new(Vec::new()).unwrap();
            w.intern("cudaLaunchKernel").unwrap();
            let before = w.into_inner().len();
            let mut w = Writer::new(Vec::new()).unwrap();
            w.write_api(&calls[0].0, stack, &strings).unwrap();
            w.into_inner().split_off(before)
        };
        let (plain, with) = (one(None), one(Some(5)));
        assert_eq!((plain.len(), with.len()), (40, 44));
        // The first 36 payload bytes are what older readers read.
        assert_eq!(plain[4..40], with[4..40]);
        assert_eq!(with[40..], 5u32.to_le_bytes());
        assert_eq!(u16::from_le_bytes([with[2], with[3]]), 40);
    }

    #[test]
    fn a_call_stack_cannot_be_written_on_its_own() {
        let mut w = Writer::new(Vec::new()).unwrap();
        let err = w
            .write(
                &Record::CallStack(CallStack {
                    pid: 1,
                    correlation_id: 2,
                    stack: 3,
                }),
                &StringTable::new(),
            )
            .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
    }

    #[test]
    fn cut_stack_records_are_reported_not_misread() {
        let mut strings = StringTable::new();
        let (recs, _) = stack_sample(&mut strings);
        let bytes = encode(&recs, &strings);
        let (all, _, _) = decode(&bytes);
        for cut in HEADER_LEN..bytes.len() {
            let (part, _, stats) = decode(&bytes[..cut]);
            assert_eq!(&all[..part.len()], &part[..], "cut at {cut}");
            assert!(stats.diagnostics.is_empty(), "cut at {cut}");
        }
        // A stack whose frame count claims more frames than its payload holds.
        let mut short = encode(&[], &strings);
        short.extend_from_slice(&[kind::STACK, 0, 8, 0, 1, 0, 0, 0, 0, 0, 3, 0]);
        let (recs, _, stats) = decode(&short);
        assert!(recs.is_empty());
        assert_eq!(stats.diagnostics.count, 1);
    }

    proptest! {
        #[test]
        fn fuzz_read_arbitrary_bytes(
            after_header in any::<bool>(),
            bytes in prop::collection::vec(any::<u8>(), 0..4096),
        ) {
            let mut input = if after_header { encode(&[], &StringTable::new()) } else { Vec::new() };
            input.extend_from_slice(&bytes);
            if let Some(stats) = check_read(&input)? {
                check_bytes(&input, &stats)?;
            }
        }

        #[test]
        fn fuzz_read_framed_records(
            records in prop::collection::vec(framed_record(), 0..24),
            cut in any::<prop::sample::Index>(),
            cut_it in any::<bool>(),
        ) {
            let mut input = encode(&[], &StringTable::new());
            let whole = records.len() as u64;
            input.extend(records.into_iter().flatten());
            if cut_it {
                let at = cut.index(input.len() + 1).max(HEADER_LEN);
                input.truncate(at);
            }
            let stats = check_read(&input)?.expect("valid header");
            check_bytes(&input, &stats)?;
            if !cut_it {
                prop_assert_eq!(stats.truncated_at, None);
            }
            prop_assert!(stats.records + stats.unknown_kinds <= whole);
        }

        #[test]
        fn fuzz_read_mutated_trace(
            edits in prop::collection::vec(
                (any::<prop::sample::Index>(), 0u8..5, prop::collection::vec(any::<u8>(), 0..8)),
                1..8,
            ),
        ) {
            let mut input = encoded_sample();
            apply_edits(&mut input, edits);
            if let Some(stats) = check_read(&input)? {
                check_bytes(&input, &stats)?;
            }
        }

        #[test]
        fn fuzz_read_truncated_trace(cut in any::<prop::sample::Index>(), flip in any::<prop::sample::Index>()) {
            let full = encoded_sample();
            let (all, _, _) = decode(&full);
            let mut input = full[..cut.index(full.len() + 1)].to_vec();
            if input.len() > HEADER_LEN {
                // One flipped payload or length byte as well, past the header.
                let i = HEADER_LEN + flip.index(input.len() - HEADER_LEN);
                input[i] ^= 0x40;
            }
            match check_read(&input)? {
                None => prop_assert!(input.len() < MAGIC.len()),
                Some(stats) => {
                    check_bytes(&input, &stats)?;
                    prop_assert!(stats.records <= all.len() as u64);
                }
            }
        }

        #[test]
        fn fuzz_read_large_traces_across_the_buffer(
            sizes in prop::collection::vec(any::<u16>(), 24..64),
            cut in any::<prop::sample::Index>(),
        ) {
            let (full, starts) = large_trace(&sizes);
            let at = HEADER_LEN + cut.index(full.len() - HEADER_LEN + 1);
            let input = &full[..at];
            let stats = check_read(input)?.expect("valid header");
            check_bytes(input, &stats)?;
            // Records wholly inside the cut are delivered or skipped; the first one
            // it splits is where the file is reported cut.
            let whole = starts
                .iter()
                .zip(&sizes)
                .filter(|&(&s, &n)| s + RECORD_HEADER_LEN + usize::from(n) <= at)
                .count() as u64;
            prop_assert_eq!(stats.records + stats.unknown_kinds, whole);
            let split = starts
                .iter()
                .zip(&sizes)
                .find(|&(&s, &n)| s < at && s + RECORD_HEADER_LEN + usize::from(n) > at)
                .map(|(&s, _)| s as u64);
            prop_assert_eq!(stats.truncated_at, split);
            prop_assert!(stats.diagnostics.is_empty());
        }
    }
}
