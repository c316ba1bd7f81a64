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
//!
//! # Modules
//!
//! - `parse`: reading the lines of either format into a [`CpuTrace`].
//! - `writer`: writing the gpuperf format, the profiler's side ([`Writer`]).

mod parse;
#[cfg(test)]
mod tests;
mod writer;

use std::fs::File;
use std::io::Read;
use std::num::NonZeroU32;
use std::path::Path;

use rustc_hash::{FxHashMap, FxHashSet};

use crate::diag::Diagnostics;
use crate::error::{Error, Result};

pub use self::writer::{LaunchLine, Writer};

use self::parse::{Parser, for_each_line};

/// First line of a gpuperf CPU trace.
pub const HEADER: &str = "# gpuperf-cpu v1";

/// Frame used for a launch whose stack could not be captured.
pub(crate) const NO_STACK_FRAME: &str = "[unknown stack]";

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
#[non_exhaustive]
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
    /// CUPTI correlation id, when the file carries one.
    pub correlation_id: Option<NonZeroU32>,
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
    #[cfg(feature = "render")]
    pub(crate) fn map_stacks(&mut self, mut f: impl FnMut(&str) -> String) {
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
    #[cfg(feature = "render")]
    pub(crate) fn is_wait(&self, l: &CpuLaunch) -> bool {
        !self.waits.is_empty()
            && l.correlation_id
                .is_some_and(|c| self.waits.contains(&(l.pid, c.get())))
    }

    /// The entries that are launches: all but the synchronization calls.
    #[cfg(feature = "render")]
    pub(crate) fn launch_count(&self) -> u64 {
        if self.waits.is_empty() {
            return self.launches.len() as u64;
        }
        self.launches.iter().filter(|l| !self.is_wait(l)).count() as u64
    }

    /// The stack GPU work of graph node `node`, launched by `launch`, is charged
    /// to, when the node's origin is known.
    pub fn graph_stack(&self, launch: &CpuLaunch, node: Option<u64>) -> Option<StackId> {
        let node = node?;
        if self.graph_nodes.is_empty() {
            return None;
        }
        let n = self.graph_nodes.get(&(launch.pid, node))?;
        self.graph_stacks.get(&(launch.stack, *n)).copied()
    }

    /// An empty trace whose launches carry correlation ids: what GPU-side inputs
    /// that hold their own CPU stacks fill (see [`crate::join`]).
    #[cfg(feature = "render")]
    pub(crate) fn with_correlation_ids() -> Self {
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
    #[cfg(test)]
    pub(crate) fn has_correlation_ids(&self) -> bool {
        self.launches.iter().any(|l| l.correlation_id.is_some())
    }
}
