//! Writing a GPU trace: one whole record per call.

use std::collections::HashMap;
use std::io::{self, Write};

use crate::model::{
    Activity, ActivityKind, ApiCall, ApiDomain, AutogradTag, DropSource, Module, NvtxKind,
    NvtxRange, PcSample, Record, Stack, StackEnd, StackFrame, StringId, StringTable,
};

use super::{FORMAT_VERSION, HEADER_LEN, MAGIC, MAX_STACK_FRAMES, RECORD_HEADER_LEN, kind};

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

    /// Writes the file header with `flags` ([`FLAG_STACKS`](super::FLAG_STACKS)).
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
    /// (for a header with [`FLAG_CLOSES`](super::FLAG_CLOSES)).
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
                    .u32(p.ppid.unwrap_or(0))
                    .u64(p.start_ns)
                    .u64(p.start_realtime_ns.unwrap_or(0))
                    .u32(exe)
                    .u32(0);
            }
            Record::Origin(o) => {
                let o = &o.origin;
                let host = match &o.host {
                    Some(h) => self.intern(h)?,
                    None => u32::MAX,
                };
                let n = |v: Option<u32>| v.unwrap_or(u32::MAX);
                self.begin(kind::ORIGIN);
                self.u32(host)
                    .u32(n(o.rank))
                    .u32(n(o.local_rank))
                    .u32(n(o.world_size));
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
                    .u32(o.correlation_id.unwrap_or(0));
            }
            Record::Note(n) => {
                self.begin(kind::NOTE);
                let mut end = n.text.len().min(usize::from(u16::MAX));
                while !n.text.is_char_boundary(end) {
                    end -= 1;
                }
                self.buf.extend_from_slice(&n.text.as_bytes()[..end]);
            }
            Record::Module(m) => self.module(m)?,
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
                    AutogradTag::Backward { thread, seq } => (2, thread, seq.unwrap_or(u64::MAX)),
                };
                self.begin(kind::AUTOGRAD);
                self.u32(a.correlation_id).u8(k).u8(0).u16(0);
                self.u64(thread).u64(seq);
            }
            Record::Nvtx(r) => self.nvtx(r, strings)?,
            Record::PcSample(p) => self.pc_sample(p, strings)?,
            Record::PcLaunches(p) => {
                self.begin(kind::PC_LAUNCHES);
                self.u64(p.launches.sampled).u64(p.launches.unsampled);
            }
        }
        self.finish()
    }

    /// A loaded module's body: its path, load bias, text range and build id.
    fn module(&mut self, m: &Module) -> io::Result<()> {
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
        Ok(())
    }

    /// An NVTX range's body.
    fn nvtx(&mut self, r: &NvtxRange, strings: &StringTable) -> io::Result<()> {
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
        Ok(())
    }

    /// A PC sample's body.
    fn pc_sample(&mut self, p: &PcSample, strings: &StringTable) -> io::Result<()> {
        let function = self.intern_id(p.function, strings)?;
        let reason = self.intern_id(p.stall_reason, strings)?;
        let (file, line) = match p.source {
            Some((f, l)) => (self.intern_id(f, strings)?, l),
            None => (u32::MAX, 0),
        };
        self.begin(kind::PC_SAMPLE);
        self.u32(p.correlation_id.unwrap_or(0))
            .u32(p.context)
            .u32(function);
        self.u32(p.stall_reason_index)
            .u64(p.pc_offset)
            .u64(p.cubin_crc);
        self.u32(reason).u32(p.samples).u32(file).u32(line);
        Ok(())
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
                    self.u32(file).u32(line.unwrap_or(0));
                }
                StackFrame::Unknown { address } => {
                    self.u8(2).u8(0).u16(0).u32(0).u64(address);
                }
            }
        }
        Ok(())
    }

    fn activity(&mut self, a: &Activity, strings: &StringTable) -> io::Result<()> {
        // Unknown, and any ordinal too large, is 0xffff on disk.
        let dev = a
            .device
            .and_then(|d| u16::try_from(d).ok())
            .unwrap_or(u16::MAX);
        let stream = a.stream.unwrap_or(u32::MAX);
        match a.kind {
            ActivityKind::Kernel { name, grid, block } => {
                let name = self.intern_id(name, strings)?;
                self.begin(kind::KERNEL);
                self.u64(a.start_ns)
                    .u64(a.end_ns)
                    .u32(a.correlation_id)
                    .u32(name);
                self.u32(a.context)
                    .u32(stream)
                    .u32(a.graph_id.unwrap_or(0))
                    .u64(a.graph_node_id.unwrap_or(0));
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
                self.copy_prefix(kind::MEMCPY, a, bytes, stream);
                self.u16(dev).u8(k as u8).u8(0).u32(0);
                if let Some(p) = peer {
                    self.u32(p.src).u32(p.dst);
                }
            }
            ActivityKind::Memset { bytes, value } => {
                self.copy_prefix(kind::MEMSET, a, bytes, stream);
                self.u32(value).u16(dev).u16(0);
            }
            ActivityKind::Sync { sync_type, .. } => {
                self.begin(kind::SYNC);
                self.u64(a.start_ns)
                    .u64(a.end_ns)
                    .u32(a.correlation_id)
                    .u32(a.context)
                    .u32(stream);
                self.u8(sync_type).u8(0).u16(dev);
            }
        }
        Ok(())
    }

    /// The 48 bytes MEMCPY and MEMSET payloads share.
    fn copy_prefix(&mut self, kind: u8, a: &Activity, bytes: u64, stream: u32) {
        self.begin(kind);
        self.u64(a.start_ns)
            .u64(a.end_ns)
            .u64(bytes)
            .u64(a.graph_node_id.unwrap_or(0));
        self.u32(a.correlation_id)
            .u32(a.context)
            .u32(stream)
            .u32(a.graph_id.unwrap_or(0));
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

fn sat16(v: u32) -> u16 {
    u16::try_from(v).unwrap_or(u16::MAX)
}
