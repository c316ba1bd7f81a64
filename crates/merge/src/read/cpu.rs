//! CPU-side traces: one line per launch with the CPU stack that made it.
//!
//! # Reference format (extended folded)
//!
//! ```text
//! <ts_ns> <comm> <pid> <tid> <cpu> frame;frame;…;leaf
//! 1761183645346161185 llm_app 2384094 2384094 3 _start;main;run_layer;cudaLaunchKernel
//! ```
//!
//! Frames are root first. The reference profiler fills `tid` with the pid and
//! `cpu` with a probe id; its timestamps may be off from the CUPTI clock.
//!
//! # gpuperf format
//!
//! The reference format plus the CUPTI correlation id of the launch, so that the
//! join with the GPU trace is exact. A header line marks the file:
//!
//! ```text
//! # gpuperf-cpu v1
//! # dropped 3
//! <ts_ns> <comm> <pid> <tid> <cpu> <correlation_id> frame;frame;…;leaf
//! 81234567890123 trainer 4242 4250 7 1234 _start;main;step;cudaLaunchKernel
//! ```
//!
//! - `ts_ns` is `CLOCK_MONOTONIC` (`bpf_ktime_get_ns()`), `tid` a Linux TID.
//! - `correlation_id` is CUPTI's id of the launch API call; 0 means unknown (then
//!   that line is paired by time, as reference lines are).
//! - `comm` is written with whitespace replaced by `_`; readers still accept a comm
//!   with spaces, as the numeric fields that follow it delimit it.
//! - Frames never contain `;` or a newline; the profiler replaces them.
//! - `# dropped N` counts launches lost before they reached the file (ring buffer
//!   full); several such lines add up. Other `#` lines are comments.
//! - The leaf frame is the launch API function (`cudaLaunchKernel`,
//!   `cuGraphLaunch`, …); a line with no frames is allowed (stack unavailable).
//! - A stack that stops before a root frame (`_start`, `clone`/`clone3`, a thread
//!   start) starts with the frame `[truncated]` ([`TRUNCATED_FRAME`]):
//!   `[truncated];main;step;cudaLaunchKernel`. Readers count such lines
//!   ([`CpuTrace::truncated`]); older readers see an ordinary frame, so files stay
//!   readable both ways. Files written before this marker existed have none, and
//!   their stacks count as complete.

use std::fs::File;
use std::io::{self, Read, Write};
use std::path::Path;

use rustc_hash::{FxHashMap, FxHashSet};

use crate::diag::Diagnostics;
use crate::error::{Error, Result};

/// First line of a gpuperf CPU trace.
pub const HEADER: &str = "# gpuperf-cpu v1";

/// Frame used for a launch whose stack could not be captured.
pub const NO_STACK_FRAME: &str = "[unknown stack]";

/// Root frame of a stack that stops before the thread's first frame.
pub const TRUNCATED_FRAME: &str = "[truncated]";

/// An interned CPU stack.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StackId(pub(crate) u32);

impl StackId {
    /// The id as an index into its [`Stacks`].
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// Interned stacks, kept as their folded text (`root;…;leaf`).
#[derive(Clone, Debug, Default)]
pub struct Stacks {
    map: FxHashMap<Box<[u8]>, StackId>,
    texts: Vec<Box<str>>,
}

impl Stacks {
    /// Interns a folded stack (raw bytes; invalid UTF-8 is replaced).
    pub fn intern(&mut self, folded: &[u8]) -> StackId {
        if let Some(&id) = self.map.get(folded) {
            return id;
        }
        let id = StackId(u32::try_from(self.texts.len()).expect("fewer than 2^32 stacks"));
        let text = if folded.is_empty() {
            NO_STACK_FRAME.into()
        } else {
            String::from_utf8_lossy(folded)
                .into_owned()
                .into_boxed_str()
        };
        self.texts.push(text);
        self.map.insert(folded.into(), id);
        id
    }

    /// The folded text of a stack, root first.
    pub fn text(&self, id: StackId) -> &str {
        &self.texts[id.index()]
    }

    /// The leaf (innermost) frame of a stack.
    pub fn leaf(&self, id: StackId) -> &str {
        let t = self.text(id);
        t.rsplit(';').next().unwrap_or(t)
    }

    /// Number of distinct stacks.
    pub fn len(&self) -> usize {
        self.texts.len()
    }

    /// Whether no stack was interned.
    pub fn is_empty(&self) -> bool {
        self.texts.is_empty()
    }
}

/// Which CPU format a file was in.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum CpuFormat {
    /// The reference tooling's extended folded lines, without correlation ids.
    Reference,
    /// gpuperf's variant with correlation ids.
    Gpuperf,
}

/// One launch seen on the CPU side. 24 bytes, so 10 M launches fit in 240 MB.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct CpuLaunch {
    /// Probe time, ns.
    pub ts_ns: u64,
    /// Process id.
    pub pid: u32,
    /// Thread id as the file gives it.
    pub tid: u32,
    /// CUPTI correlation id, 0 when the file does not carry one.
    pub correlation_id: u32,
    /// The stack.
    pub stack: StackId,
}

/// A whole CPU trace.
#[derive(Clone, Debug)]
pub struct CpuTrace {
    /// Format of the file(s).
    pub format: CpuFormat,
    /// Launches in file order.
    pub launches: Vec<CpuLaunch>,
    /// Interned stacks.
    pub stacks: Stacks,
    /// Command name per (pid, tid), as first seen.
    pub comms: FxHashMap<(u32, u32), String>,
    /// Launches lost before they reached the file (`# dropped` lines).
    pub dropped: u64,
    /// Launches whose stack starts with [`TRUNCATED_FRAME`].
    pub truncated: u64,
    /// Data lines read, malformed ones included.
    pub lines: u64,
    /// Malformed lines.
    pub diagnostics: Diagnostics,
    /// CUDA graph nodes made by a known stack (in-process stacks only):
    /// (pid, graph node id) → that stack.
    pub graph_nodes: FxHashMap<(u32, u64), StackId>,
    /// (graph launch's stack, node's stack) → the stack a replayed node's GPU work
    /// is charged to: `…;cudaGraphLaunch;[graph node captured at];…`.
    pub graph_stacks: FxHashMap<(StackId, StackId), StackId>,
    /// (pid, correlation id) of launches known to have been captured into a
    /// graph (in-process stacks: the call made a captured graph node).
    pub captured: FxHashSet<(u32, u32)>,
    /// (pid, correlation id) of the entries that are synchronization calls, not
    /// launches (in-process stacks: the code that waited for the GPU). They
    /// charge waiting and idle time; they are neither launches nor unmatched.
    pub waits: FxHashSet<(u32, u32)>,
    /// The PyTorch profiler's steps (`ProfilerStep#N` ranges) the trace marks,
    /// in file order; empty when it marks none.
    pub steps: Vec<ProfilerStep>,
    /// Names of frames found in the Python interpreter's own module (the
    /// `python` executable or `libpython`), where the stacks were taken in
    /// process and their modules are known: what [`crate::view`] hides.
    pub interpreter_frames: FxHashSet<Box<str>>,
}

/// One `ProfilerStep#N` range of a PyTorch profiler trace: a training or
/// inference iteration as the program marked it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ProfilerStep {
    /// Process id.
    pub pid: u32,
    /// The step's number, `N`.
    pub number: u64,
    /// Start, ns (the clock of the trace's API calls).
    pub start_ns: u64,
    /// End, ns.
    pub end_ns: u64,
}

impl CpuTrace {
    pub(crate) fn new(format: CpuFormat) -> Self {
        Self {
            format,
            launches: Vec::new(),
            stacks: Stacks::default(),
            comms: FxHashMap::default(),
            dropped: 0,
            truncated: 0,
            lines: 0,
            diagnostics: Diagnostics::default(),
            graph_nodes: FxHashMap::default(),
            graph_stacks: FxHashMap::default(),
            captured: FxHashSet::default(),
            waits: FxHashSet::default(),
            steps: Vec::new(),
            interpreter_frames: FxHashSet::default(),
        }
    }

    /// Rewrites every stack's text with `f`, stacks that become equal merging
    /// into one; launches, graph nodes and graph stacks follow.
    pub fn map_stacks(&mut self, mut f: impl FnMut(&str) -> String) {
        let old = std::mem::take(&mut self.stacks);
        let ids: Vec<StackId> = (0..old.len())
            .map(|i| {
                let text = f(old.text(StackId(i as u32)));
                self.stacks.intern(text.as_bytes())
            })
            .collect();
        for l in &mut self.launches {
            l.stack = ids[l.stack.index()];
        }
        for v in self.graph_nodes.values_mut() {
            *v = ids[v.index()];
        }
        self.graph_stacks = std::mem::take(&mut self.graph_stacks)
            .into_iter()
            .map(|((l, n), v)| ((ids[l.index()], ids[n.index()]), ids[v.index()]))
            .collect();
    }

    /// Whether `l` is a synchronization call's stack rather than a launch's.
    pub fn is_wait(&self, l: &CpuLaunch) -> bool {
        !self.waits.is_empty() && self.waits.contains(&(l.pid, l.correlation_id))
    }

    /// The entries that are launches: all but the synchronization calls.
    pub fn launch_count(&self) -> u64 {
        if self.waits.is_empty() {
            return self.launches.len() as u64;
        }
        self.launches.iter().filter(|l| !self.is_wait(l)).count() as u64
    }

    /// The stack GPU work of graph node `node`, launched by `launch`, is charged
    /// to, when the node's origin is known.
    pub fn graph_stack(&self, launch: &CpuLaunch, node: u64) -> Option<StackId> {
        if node == 0 || self.graph_nodes.is_empty() {
            return None;
        }
        let n = self.graph_nodes.get(&(launch.pid, node))?;
        self.graph_stacks.get(&(launch.stack, *n)).copied()
    }

    /// An empty trace whose launches carry correlation ids: what GPU-side inputs
    /// that hold their own CPU stacks fill (see [`crate::join`]).
    pub fn with_correlation_ids() -> Self {
        Self::new(CpuFormat::Gpuperf)
    }

    /// Appends `other`'s launches, their stacks and command names, and the
    /// stacks of its CUDA graph nodes.
    pub fn append(&mut self, other: &CpuTrace) {
        let mut ids: Vec<Option<StackId>> = vec![None; other.stacks.len()];
        let mut map = |stacks: &mut Stacks, id: StackId| {
            *ids[id.index()].get_or_insert_with(|| stacks.intern(other.stacks.text(id).as_bytes()))
        };
        for l in &other.launches {
            let stack = map(&mut self.stacks, l.stack);
            self.launches.push(CpuLaunch { stack, ..*l });
        }
        for (&k, &v) in &other.graph_nodes {
            let v = map(&mut self.stacks, v);
            self.graph_nodes.insert(k, v);
        }
        for (&(l, n), &v) in &other.graph_stacks {
            let k = (map(&mut self.stacks, l), map(&mut self.stacks, n));
            let v = map(&mut self.stacks, v);
            self.graph_stacks.insert(k, v);
        }
        for (k, v) in &other.comms {
            self.comms.entry(*k).or_insert_with(|| v.clone());
        }
        self.captured.extend(&other.captured);
        self.waits.extend(&other.waits);
        self.steps.extend_from_slice(&other.steps);
        self.interpreter_frames
            .extend(other.interpreter_frames.iter().cloned());
        self.dropped = self.dropped.saturating_add(other.dropped);
        self.truncated = self.truncated.saturating_add(other.truncated);
        self.lines += other.lines;
        self.diagnostics.extend(other.diagnostics.clone());
    }

    /// Reads a CPU trace file in either format.
    pub fn open(path: &Path) -> Result<Self> {
        let file = File::open(path).map_err(Error::io("open", path))?;
        Self::read(file, path)
    }

    /// Reads a CPU trace from `input`; `path` names it in errors and diagnostics.
    ///
    /// Fails when the input cannot be read, or when its first data line is in
    /// neither format (the file is not a CPU trace). Later malformed lines are
    /// counted in [`CpuTrace::diagnostics`].
    pub fn read<R: Read>(input: R, path: &Path) -> Result<Self> {
        let mut parser: Option<Parser<'_>> = None;
        let mut first_line = true;
        let mut not_a_trace = None;
        for_each_line(input, |line_no, line| {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if first_line {
                first_line = false;
                let format = if line == HEADER.as_bytes() {
                    CpuFormat::Gpuperf
                } else {
                    CpuFormat::Reference
                };
                parser = Some(Parser {
                    path,
                    trace: CpuTrace::new(format),
                    seen_data: false,
                });
                if format == CpuFormat::Gpuperf {
                    return true;
                }
            }
            let p = parser.as_mut().expect("set on the first line");
            if !p.line(line_no, line) {
                not_a_trace = Some(crate::error::describe_start(&line[..line.len().min(40)]));
                return false;
            }
            true
        })
        .map_err(Error::io("read", path))?;
        if let Some(found) = not_a_trace {
            return Err(Error::NotATrace {
                path: path.to_owned(),
                expected: "CPU stack trace",
                found,
            });
        }
        Ok(parser.map_or_else(|| CpuTrace::new(CpuFormat::Reference), |p| p.trace))
    }

    /// Whether any launch carries a correlation id.
    pub fn has_correlation_ids(&self) -> bool {
        self.launches.iter().any(|l| l.correlation_id != 0)
    }
}

struct Parser<'a> {
    path: &'a Path,
    trace: CpuTrace,
    seen_data: bool,
}

impl Parser<'_> {
    /// Parses one line; returns false only when the first data line is invalid.
    fn line(&mut self, line_no: u64, line: &[u8]) -> bool {
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
                    correlation_id: corr,
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

fn parse_u64(s: &[u8]) -> Option<u64> {
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
fn for_each_line<R: Read>(mut input: R, mut f: impl FnMut(u64, &[u8]) -> bool) -> io::Result<()> {
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

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn read(text: &str) -> Result<CpuTrace> {
        CpuTrace::read(text.as_bytes(), Path::new("cpu.txt"))
    }

    #[test]
    fn reference_lines_parse() {
        let t = read("100 app 7 7 3 _start;main;cudaLaunchKernel\n200 my app 7 7 3 main;foo(int, char);cudaLaunchKernel\r\n").unwrap();
        assert_eq!(t.format, CpuFormat::Reference);
        assert_eq!(t.launches.len(), 2);
        assert_eq!(
            t.launches[1],
            CpuLaunch {
                ts_ns: 200,
                pid: 7,
                tid: 7,
                correlation_id: 0,
                stack: StackId(1)
            }
        );
        assert_eq!(
            t.stacks.text(StackId(1)),
            "main;foo(int, char);cudaLaunchKernel"
        );
        assert_eq!(t.stacks.leaf(StackId(1)), "cudaLaunchKernel");
        assert_eq!(t.comms[&(7, 7)], "app");
        assert!(t.diagnostics.is_empty());
    }

    #[test]
    fn gpuperf_lines_carry_correlation_ids_and_drops() {
        let t = read("# gpuperf-cpu v1\n# dropped 2\n100 app 7 8 1 42 main;cudaLaunchKernel\n# dropped 3\n101 app 7 8 1 43\n")
            .unwrap();
        assert_eq!(t.format, CpuFormat::Gpuperf);
        assert_eq!(t.dropped, 5);
        assert_eq!(t.launches[0].correlation_id, 42);
        assert_eq!(t.stacks.text(t.launches[1].stack), NO_STACK_FRAME);
        assert!(t.has_correlation_ids());
    }

    #[test]
    fn truncated_stacks_are_counted_by_their_root_frame() {
        let t = read("# gpuperf-cpu v1\n1 app 7 8 1 0 [truncated];main;cudaLaunchKernel\n2 app 7 8 1 0 _start;main;cudaLaunchKernel\n3 app 7 8 1 0 [truncated]x;cudaLaunchKernel\n4 app 7 8 1 0 [truncated]\n")
            .unwrap();
        assert_eq!(t.launches.len(), 4);
        assert_eq!(t.truncated, 2);
        assert_eq!(
            t.stacks.text(t.launches[0].stack),
            "[truncated];main;cudaLaunchKernel"
        );
        let mut both = t.clone();
        both.append(&t);
        assert_eq!(both.truncated, 4);
        // Reference lines carry no marker: nothing is counted.
        let r = read("100 app 7 7 3 main;cudaLaunchKernel\n").unwrap();
        assert_eq!(r.truncated, 0);
    }

    #[test]
    fn malformed_lines_are_counted_with_their_line() {
        let t = read("100 app 7 7 3 main\nbogus\n\n300 app x 7 3 main\n400 app 7 7 3 main;x\n5000000000 a 99999999999 1 1 f\n").unwrap();
        assert_eq!(t.launches.len(), 2);
        assert_eq!(t.diagnostics.count, 3);
        let places: Vec<_> = t
            .diagnostics
            .first
            .iter()
            .map(|d| d.location.as_str())
            .collect();
        assert_eq!(places, ["cpu.txt:2", "cpu.txt:4", "cpu.txt:6"]);
    }

    #[test]
    fn a_file_that_is_not_a_cpu_trace_is_one_error() {
        let err = read("GPUPERF\0\x01\0\x10\0").unwrap_err();
        assert!(
            err.to_string()
                .starts_with("`cpu.txt` is not a CPU stack trace"),
            "{err}"
        );
        let empty = read("").unwrap();
        assert!(empty.launches.is_empty());
    }

    #[test]
    fn writer_output_reads_back() {
        let mut w = Writer::new(Vec::new()).unwrap();
        let l = LaunchLine {
            ts_ns: 5,
            comm: "my app",
            pid: 1,
            tid: 2,
            cpu: 3,
            correlation_id: 4,
        };
        w.launch(&l, ["main", "a;b", "cudaLaunchKernel"]).unwrap();
        w.dropped(7).unwrap();
        let bytes = w.into_inner();
        assert_eq!(
            String::from_utf8_lossy(&bytes),
            "# gpuperf-cpu v1\n5 my_app 1 2 3 4 main;a:b;cudaLaunchKernel\n# dropped 7\n"
        );
        let t = CpuTrace::read(&bytes[..], Path::new("x")).unwrap();
        assert_eq!(t.launches[0].correlation_id, 4);
        assert_eq!(t.dropped, 7);
        assert_eq!(t.comms[&(1, 2)], "my_app");
    }

    #[test]
    fn long_lines_and_buffer_boundaries() {
        let frame = "f".repeat(3 << 20);
        let text = format!("1 a 1 1 1 {frame}\n2 a 1 1 1 g\n");
        let t = read(&text).unwrap();
        assert_eq!(t.launches.len(), 2);
        assert_eq!(t.stacks.text(t.launches[0].stack).len(), 3 << 20);
    }

    #[test]
    fn dropped_counts_past_u64_max_saturate() {
        let t = read("# gpuperf-cpu v1\n# dropped 18446744073709551615\n# dropped 1\n").unwrap();
        assert_eq!(t.dropped, u64::MAX);
    }

    const REFERENCE: &[u8] = include_bytes!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/cpu/reference.txt"
    ));
    const GPUPERF: &[u8] = include_bytes!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/cpu/gpuperf.txt"
    ));

    /// Pieces that make mutations and generated lines reach the parser's edge cases.
    const TOKENS: &[&str] = &[
        " ",
        "  ",
        ";",
        ";;",
        "\n",
        "\r\n",
        "\r",
        "\t",
        "#",
        "# dropped",
        "# dropped ",
        "# dropped x\n",
        "\n# dropped 18446744073709551615\n",
        HEADER,
        "0",
        "7",
        "4294967295",
        "4294967296",
        "18446744073709551615",
        "18446744073709551616",
        "99999999999999999999",
        "000000000000000000001",
        "-1",
        "app",
        "my app",
        "cudaLaunchKernel",
        "main;f(int, char)",
        "\u{fffd}",
        "\u{0}",
        "\u{ff}",
    ];

    /// The lines `for_each_line` hands out: split on `\n`, a last unterminated one
    /// included, `\r` not yet stripped.
    fn split_lines(bytes: &[u8]) -> Vec<&[u8]> {
        let mut lines: Vec<&[u8]> = bytes.split(|&b| b == b'\n').collect();
        if bytes.is_empty() || bytes.ends_with(b"\n") {
            lines.pop();
        }
        lines
    }

    /// What the line structure alone says the reader must report.
    #[derive(Debug, Default)]
    struct Expect {
        /// Non-blank lines that do not start with `#`.
        data: u64,
        /// Non-blank lines.
        nonblank: u64,
        /// Sum of valid `# dropped N` counts, saturating.
        dropped: Option<u64>,
        /// `# dropped` lines whose count does not parse.
        bad_dropped: u64,
        header: bool,
    }

    fn expect(bytes: &[u8]) -> Expect {
        let mut e = Expect {
            dropped: Some(0),
            ..Expect::default()
        };
        for (i, line) in split_lines(bytes).into_iter().enumerate() {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if i == 0 && line == HEADER.as_bytes() {
                e.header = true;
                continue;
            }
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            e.nonblank += 1;
            if line[0] != b'#' {
                e.data += 1;
            } else if let Some(rest) = line.strip_prefix(b"# dropped ") {
                let count = rest.split(|&b| b == b' ').next().unwrap_or_default();
                match parse_u64(count) {
                    Some(n) => e.dropped = e.dropped.map(|d| d.saturating_add(n)),
                    None => e.bad_dropped += 1,
                }
            }
        }
        e
    }

    /// Hands out at most `step` bytes per call, with an `Interrupted` error between
    /// reads, so that lines straddle reads.
    struct Trickle<'a> {
        data: &'a [u8],
        step: usize,
        interrupt: bool,
    }

    impl Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.interrupt = !self.interrupt;
            if self.interrupt {
                return Err(io::ErrorKind::Interrupted.into());
            }
            let n = self.step.min(buf.len()).min(self.data.len());
            buf[..n].copy_from_slice(&self.data[..n]);
            self.data = &self.data[n..];
            Ok(n)
        }
    }

    fn same(a: &CpuTrace, b: &CpuTrace) -> bool {
        let texts = |t: &CpuTrace| -> Vec<String> {
            (0..t.stacks.len())
                .map(|i| t.stacks.text(StackId(i as u32)).to_owned())
                .collect()
        };
        a.format == b.format
            && a.launches == b.launches
            && texts(a) == texts(b)
            && a.comms == b.comms
            && a.dropped == b.dropped
            && a.lines == b.lines
            && a.diagnostics == b.diagnostics
    }

    fn check_read(bytes: &[u8], step: usize) -> Result<(), TestCaseError> {
        let e = expect(bytes);
        let path = Path::new("f.txt");
        let got = CpuTrace::read(bytes, path);
        let trickled = CpuTrace::read(
            Trickle {
                data: bytes,
                step,
                interrupt: false,
            },
            path,
        );
        let t = match (got, trickled) {
            (Ok(t), Ok(u)) => {
                prop_assert!(same(&t, &u), "read in pieces of {} differs", step);
                t
            }
            (Err(err), Err(err2)) => {
                prop_assert!(
                    matches!(&err, Error::NotATrace { path: p, .. } if p == path),
                    "{:?}",
                    err
                );
                let msg = err.to_string();
                prop_assert_eq!(&msg, &err2.to_string());
                prop_assert!(!msg.contains('\n'), "multi-line error: {}", msg);
                prop_assert!(e.data >= 1, "error without a data line: {}", msg);
                return Ok(());
            }
            (a, b) => {
                return Err(TestCaseError::fail(format!(
                    "whole read {:?}, read in pieces of {step} {:?}",
                    a.map(|t| t.launches.len()),
                    b.map(|t| t.launches.len())
                )));
            }
        };
        let n_launches = t.launches.len() as u64;
        prop_assert_eq!(
            t.format,
            if e.header {
                CpuFormat::Gpuperf
            } else {
                CpuFormat::Reference
            }
        );
        prop_assert_eq!(t.lines, e.data);
        prop_assert!(n_launches + t.diagnostics.count <= e.nonblank);
        // Each data line is a launch or a diagnostic, and so is each `# dropped` line
        // that is not a count.
        prop_assert_eq!(n_launches + t.diagnostics.count, t.lines + e.bad_dropped);
        prop_assert_eq!(Some(t.dropped), e.dropped);
        for l in &t.launches {
            prop_assert!(l.stack.index() < t.stacks.len());
            prop_assert!(!t.stacks.text(l.stack).is_empty());
            let _ = t.stacks.leaf(l.stack);
            prop_assert!(t.comms.contains_key(&(l.pid, l.tid)));
            if t.format == CpuFormat::Reference {
                prop_assert_eq!(l.correlation_id, 0);
            }
        }
        let d = &t.diagnostics;
        prop_assert_eq!(d.first.len() as u64, d.count.min(crate::diag::KEPT as u64));
        let total_lines = split_lines(bytes).len() as u64;
        let mut prev = 0;
        for x in &d.first {
            let n: u64 = x
                .location
                .strip_prefix("f.txt:")
                .and_then(|n| n.parse().ok())
                .ok_or_else(|| TestCaseError::fail(format!("bad location {x}")))?;
            prop_assert!(prev < n && n <= total_lines, "{} after line {}", x, prev);
            prev = n;
        }
        Ok(())
    }

    use crate::golden::{Edit, apply_edits as apply_token_edits};

    fn apply_edits(text: &mut Vec<u8>, edits: Vec<Edit>) {
        apply_token_edits(text, edits, TOKENS);
    }

    fn edits() -> impl Strategy<Value = Vec<Edit>> {
        prop::collection::vec(
            (
                any::<prop::sample::Index>(),
                0u8..8,
                prop::collection::vec(any::<u8>(), 0..8),
                any::<prop::sample::Index>(),
            ),
            0..12,
        )
    }

    /// A line of tokens: numbers, names, spaces and separators in any order.
    fn token_line() -> impl Strategy<Value = Vec<u8>> {
        prop::collection::vec(
            prop_oneof![
                4 => prop::sample::select(TOKENS).prop_map(|t| t.as_bytes().to_vec()),
                2 => any::<u64>().prop_map(|n| n.to_string().into_bytes()),
                1 => "[a-z;:() ]{1,6}".prop_map(String::into_bytes),
            ],
            0..12,
        )
        .prop_map(|parts| parts.join(&b' '))
    }

    proptest! {
        #[test]
        fn fuzz_read_arbitrary_bytes(
            header in any::<bool>(),
            bytes in prop::collection::vec(any::<u8>(), 0..2048),
            step in 1usize..8,
        ) {
            let mut text = if header { format!("{HEADER}\n").into_bytes() } else { Vec::new() };
            text.extend_from_slice(&bytes);
            check_read(&text, step)?;
        }

        #[test]
        fn fuzz_read_token_lines(
            header in any::<bool>(),
            lines in prop::collection::vec(token_line(), 0..16),
            step in 1usize..64,
        ) {
            let mut text = if header { format!("{HEADER}\n").into_bytes() } else { Vec::new() };
            text.extend_from_slice(&lines.join(&b'\n'));
            check_read(&text, step)?;
        }

        #[test]
        fn fuzz_read_mutated_files(
            gpuperf in any::<bool>(),
            edits in edits(),
            step in 1usize..64,
        ) {
            let mut text = if gpuperf { GPUPERF } else { REFERENCE }.to_vec();
            apply_edits(&mut text, edits);
            check_read(&text, step)?;
        }
    }
}
