//! Reading a CPU trace's lines, in the reference or the gpuperf format.

use std::io::{self, Read};
use std::num::NonZeroU32;
use std::path::Path;

use super::{CpuFormat, CpuLaunch, CpuTrace, TRUNCATED_FRAME};

pub(super) struct Parser<'a> {
    pub(super) path: &'a Path,
    pub(super) trace: CpuTrace,
    pub(super) seen_data: bool,
}

impl Parser<'_> {
    /// Parses one line; returns false only when the first data line is invalid.
    pub(super) fn line(&mut self, line_no: u64, line: &[u8]) -> bool {
        if line.is_empty() || line.iter().all(u8::is_ascii_whitespace) {
            return true;
        }
        if line[0] == b'#' {
            if let Some(rest) = line.strip_prefix(b"# dropped ") {
                match parse_u64(rest.split(|&b| b == b' ').next().unwrap_or_default()) {
                    Some(n) => self.trace.dropped = self.trace.dropped.saturating_add(n),
                    None => self.bad(line_no, "`# dropped` without a count"),
                }
            }
            return true;
        }
        self.trace.lines += 1;
        let numeric = match self.trace.format {
            CpuFormat::Reference => 3,
            CpuFormat::Gpuperf => 4,
        };
        match split_line(line, numeric) {
            Some(f) => {
                self.seen_data = true;
                let corr = if numeric == 4 { f.nums[3] } else { 0 };
                let (Ok(pid), Ok(tid), Ok(corr)) = (
                    u32::try_from(f.nums[0]),
                    u32::try_from(f.nums[1]),
                    u32::try_from(corr),
                ) else {
                    self.bad(line_no, "pid, tid or correlation id out of range");
                    return true;
                };
                let stack = self.trace.stacks.intern(f.frames);
                if is_truncated(f.frames) {
                    self.trace.truncated += 1;
                }
                self.trace.launches.push(CpuLaunch {
                    ts_ns: f.ts,
                    pid,
                    tid,
                    correlation_id: NonZeroU32::new(corr),
                    stack,
                });
                self.trace
                    .comms
                    .entry((pid, tid))
                    .or_insert_with(|| String::from_utf8_lossy(f.comm).into_owned());
                true
            }
            None if !self.seen_data => false,
            None => {
                let msg = match self.trace.format {
                    CpuFormat::Reference => "expected `ts_ns comm pid tid cpu frames`",
                    CpuFormat::Gpuperf => "expected `ts_ns comm pid tid cpu correlation_id frames`",
                };
                self.bad(line_no, msg);
                true
            }
        }
    }

    fn bad(&mut self, line_no: u64, msg: &'static str) {
        let path = self.path;
        self.trace.diagnostics.push(
            || format!("{}:{line_no}", path.display()),
            || msg.to_owned(),
        );
    }
}

struct Fields<'l> {
    ts: u64,
    comm: &'l [u8],
    // pid, tid, cpu[, correlation id]
    nums: [u64; 4],
    frames: &'l [u8],
}

/// Splits `ts comm n1 … nK frames`, where comm may contain spaces: it ends before
/// the first run of K numeric fields. Only the leading tokens are scanned, so the
/// cost does not grow with the stack's length.
fn split_line(line: &[u8], k: usize) -> Option<Fields<'_>> {
    const MAX_TOKENS: usize = 24;
    let sp = memchr::memchr(b' ', line)?;
    let ts = parse_u64(&line[..sp])?;
    let rest = &line[sp + 1..];
    // starts[t] = offset of token t in `rest`; found on demand.
    let mut starts = [0usize; MAX_TOKENS + 1];
    let mut found = 1;
    let mut token_start = |t: usize, starts: &mut [usize; MAX_TOKENS + 1]| -> Option<usize> {
        while found <= t {
            let prev = starts[found - 1];
            let next = prev + memchr::memchr(b' ', &rest[prev..])? + 1;
            starts[found] = next;
            found += 1;
        }
        Some(starts[t])
    };
    // comm = tokens[..c]; numbers = tokens[c..c+k]; frames = the rest.
    for c in 1..MAX_TOKENS - k {
        let mut nums = [0u64; 4];
        let mut ok = true;
        for (j, num) in nums.iter_mut().enumerate().take(k) {
            let s = token_start(c + j, &mut starts)?;
            let e = match token_start(c + j + 1, &mut starts) {
                Some(e) => e - 1,
                None => rest.len(),
            };
            match parse_u64(&rest[s..e]) {
                Some(v) => *num = v,
                None => {
                    ok = false;
                    break;
                }
            }
        }
        if ok {
            let comm = &rest[..starts[c] - 1];
            let frames = token_start(c + k, &mut starts).map_or(&[][..], |f| &rest[f..]);
            return Some(Fields {
                ts,
                comm,
                nums,
                frames,
            });
        }
    }
    None
}

/// Whether folded frames (root first) start with [`TRUNCATED_FRAME`].
fn is_truncated(frames: &[u8]) -> bool {
    frames
        .strip_prefix(TRUNCATED_FRAME.as_bytes())
        .is_some_and(|rest| rest.is_empty() || rest[0] == b';')
}

pub(super) fn parse_u64(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 20 {
        return None;
    }
    let mut v: u64 = 0;
    for &b in s {
        let d = b.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(u64::from(d))?;
    }
    Some(v)
}

/// Calls `f(line_no, line)` for every line (without `\n`) until it returns false.
pub(super) fn for_each_line<R: Read>(
    mut input: R,
    mut f: impl FnMut(u64, &[u8]) -> bool,
) -> io::Result<()> {
    let mut buf = vec![0u8; 1 << 20];
    let mut filled = 0;
    let mut line_no = 0u64;
    loop {
        let n = loop {
            match input.read(&mut buf[filled..]) {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        };
        let eof = n == 0;
        filled += n;
        let mut start = 0;
        while let Some(i) = memchr::memchr(b'\n', &buf[start..filled]) {
            line_no += 1;
            if !f(line_no, &buf[start..start + i]) {
                return Ok(());
            }
            start += i + 1;
        }
        if eof {
            if start < filled {
                line_no += 1;
                f(line_no, &buf[start..filled]);
            }
            return Ok(());
        }
        buf.copy_within(start..filled, 0);
        filled -= start;
        if filled == buf.len() {
            // A line longer than the buffer: grow it.
            buf.resize(buf.len() * 2, 0);
        }
    }
}
