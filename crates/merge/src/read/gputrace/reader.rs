//! Reading a GPU trace: records decoded one by one, malformed ones counted.

use std::io::{self, Read};
use std::path::Path;

use crate::diag::Diagnostics;
use crate::error::{Error, Result};
use crate::model::{
    Activity, ActivityKind, ApiCall, ApiDomain, Autograd, AutogradTag, CallStack, Device,
    DropSource, Dropped, GraphNode, MemcpyKind, Module, Note, NvtxKind, NvtxRange, Origin,
    Overhead, PcLaunches, PcSample, PeerDevices, Process, ProcessOrigin, ProcessPcLaunches, Record,
    Stack, StackEnd, StackFrame, StringId, StringTable, ThreadName,
};

use super::{
    FLAG_CLOSES, FORMAT_VERSION, HEADER_LEN, MAGIC, MAX_STACK_FRAMES, RECORD_HEADER_LEN,
    header_flags, is_gpu_trace, kind,
};

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
    /// The header's flags ([`FLAG_STACKS`](super::FLAG_STACKS), [`FLAG_CLOSES`]).
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
            kind::ORIGIN => self.origin(&mut f, offset),
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
            kind::PC_SAMPLE => self.pc_sample(&mut f, offset),
            kind::PC_LAUNCHES => self.pc_launches(&mut f),
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
            stream: stream_of(stream),
            graph_id: unless_zero(graph),
            graph_node_id: unless_zero(node),
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
            stream: stream_of(stream),
            graph_id: unless_zero(graph),
            graph_node_id: unless_zero(node),
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
            stream: stream_of(stream),
            graph_id: None,
            graph_node_id: None,
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
        let correlation_id = f.u32().and_then(unless_zero);
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
            2 => AutogradTag::Backward {
                thread,
                seq: (seq != u64::MAX).then_some(seq),
            },
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

    fn pc_sample(&mut self, f: &mut Fields<'_>, offset: u64) -> Option<Record> {
        let (correlation_id, context, function, stall_reason_index) =
            (f.u32()?, f.u32()?, f.u32()?, f.u32()?);
        let (pc_offset, cubin_crc) = (f.u64()?, f.u64()?);
        let (reason, samples, file, line) = (f.u32()?, f.u32()?, f.u32()?, f.u32()?);
        let function = self.string(function, offset);
        let stall_reason = self.string(reason, offset);
        let source = (file != u32::MAX).then(|| (self.string(file, offset), line));
        Some(Record::PcSample(PcSample {
            pid: self.pid,
            correlation_id: unless_zero(correlation_id),
            context,
            function,
            pc_offset,
            cubin_crc,
            stall_reason_index,
            stall_reason,
            samples,
            source,
        }))
    }

    fn pc_launches(&mut self, f: &mut Fields<'_>) -> Option<Record> {
        let (sampled, unsampled) = (f.u64()?, f.u64()?);
        Some(Record::PcLaunches(ProcessPcLaunches {
            pid: self.pid,
            launches: PcLaunches { sampled, unsampled },
        }))
    }

    fn process(&mut self, f: &mut Fields<'_>, offset: u64) -> Option<Record> {
        let (pid, ppid, start_ns, start_realtime_ns, exe) =
            (f.u32()?, f.u32()?, f.u64()?, f.u64()?, f.u32()?);
        self.pid = pid;
        let exe = self.string(exe, offset);
        Some(Record::Process(Process {
            pid,
            ppid: unless_zero(ppid),
            exe: self.strings.get(exe).to_owned(),
            start_ns,
            start_realtime_ns: unless_zero(start_realtime_ns),
        }))
    }

    fn origin(&mut self, f: &mut Fields<'_>, offset: u64) -> Option<Record> {
        let (host, rank, local_rank, world_size) = (f.u32()?, f.u32()?, f.u32()?, f.u32()?);
        let host = (host != u32::MAX).then(|| {
            let id = self.string(host, offset);
            self.strings.get(id).to_owned()
        });
        let known = |v: u32| (v != u32::MAX).then_some(v);
        Some(Record::Origin(ProcessOrigin {
            pid: self.pid,
            origin: Origin {
                host,
                rank: known(rank),
                local_rank: known(local_rank),
                world_size: known(world_size),
            },
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
                    line: unless_zero((b >> 32) as u32),
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
            stream: stream_of(stream),
            graph_id: unless_zero(graph_id),
            graph_node_id: unless_zero(graph_node_id),
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

/// The on-disk device: 0xffff means unknown.
fn device(d: u16) -> Option<u32> {
    (d != u16::MAX).then_some(u32::from(d))
}

/// The on-disk stream: `u32::MAX` means not on a stream.
fn stream_of(s: u32) -> Option<u32> {
    (s != u32::MAX).then_some(s)
}

/// An on-disk id or time where 0 means none or unknown.
fn unless_zero<T: Default + PartialEq>(v: T) -> Option<T> {
    (v != T::default()).then_some(v)
}
