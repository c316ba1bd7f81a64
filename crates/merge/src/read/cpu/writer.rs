//! Writing the gpuperf CPU format: the profiler's side.

use std::io::{self, Write};

use super::HEADER;

/// The fields of one launch line before its frames.
#[derive(Copy, Clone, Debug)]
pub struct LaunchLine<'a> {
    /// Probe time, `CLOCK_MONOTONIC` ns.
    pub ts_ns: u64,
    /// Command name.
    pub comm: &'a str,
    /// Process id.
    pub pid: u32,
    /// Linux TID.
    pub tid: u32,
    /// CPU the probe fired on.
    pub cpu: u32,
    /// CUPTI correlation id, 0 when unknown.
    pub correlation_id: u32,
}

/// Writes gpuperf-format CPU lines; the profiler's side of the format.
pub struct Writer<W: Write> {
    out: W,
    line: Vec<u8>,
}

impl<W: Write> Writer<W> {
    /// Writes the header line.
    pub fn new(mut out: W) -> io::Result<Self> {
        out.write_all(HEADER.as_bytes())?;
        out.write_all(b"\n")?;
        Ok(Self {
            out,
            line: Vec::with_capacity(256),
        })
    }

    /// Writes one launch. `frames` are root first; `;`, newlines and (in `comm`)
    /// whitespace are replaced so the line stays parseable.
    pub fn launch<'f>(
        &mut self,
        l: &LaunchLine<'_>,
        frames: impl IntoIterator<Item = &'f str>,
    ) -> io::Result<()> {
        let LaunchLine {
            ts_ns,
            comm,
            pid,
            tid,
            cpu,
            correlation_id,
        } = *l;
        self.line.clear();
        write!(self.line, "{ts_ns} ")?;
        let comm = if comm.is_empty() { "?" } else { comm };
        self.line.extend(
            comm.bytes()
                .map(|b| if b.is_ascii_whitespace() { b'_' } else { b }),
        );
        write!(self.line, " {pid} {tid} {cpu} {correlation_id} ")?;
        for (i, frame) in frames.into_iter().enumerate() {
            if i > 0 {
                self.line.push(b';');
            }
            self.line.extend(frame.bytes().map(|b| match b {
                b';' => b':',
                b'\n' | b'\r' => b' ',
                b => b,
            }));
        }
        self.line.push(b'\n');
        self.out.write_all(&self.line)
    }

    /// Records `count` launches lost before they could be written.
    pub fn dropped(&mut self, count: u64) -> io::Result<()> {
        writeln!(self.out, "# dropped {count}")
    }

    /// Flushes the underlying stream.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// Returns the underlying stream.
    pub fn into_inner(self) -> W {
        self.out
    }
}
