//! CPU stacks that GPU traces carry: the injection library's in-process stacks,
//! turned into launch stacks the join uses exactly like a CPU trace's lines.
//!
//! ```text
//!  gputrace: MODULE, STACK, API (+stack id), GRAPH_NODE, KERNEL…
//!        │ collect()
//!        ▼
//!  native frames ──Symbolize (blazesym, by the caller)──▶ names
//!  Python frames (resolved in the process) ──▶ `module.function (file.py:line)`
//!        ▼
//!  CpuTrace: one launch per API call with a stack, keyed by (pid, correlation id)
//!            + graph node stacks (`…;cudaGraphLaunch;[graph node captured at];…`)
//! ```
//!
//! Native frames are stored as (module, ELF virtual address) with the module's
//! path and build id, so a process that has exited is symbolized like a live one.
//! The symbolizer is the caller's ([`Symbolize`]): gpuperf uses blazesym through
//! the profiler crate.
//!
//! # Stack text
//! Frames are joined root first with `;`, as in a CPU trace. Python frames read
//! `module.function (file.py:line)`; a frame in code without unwind info (JIT code)
//! is `[unknown]` and ends the stack. The leaf is the application's call into the
//! CUDA API, followed by the API function (`cudaLaunchKernel`), as in CPU traces;
//! when CUDA's runtime is linked into the executable, its frames above the API
//! function are dropped by name.
//!
//! # CUDA graphs
//! The kernels of a replayed graph share the `cudaGraphLaunch` call's correlation
//! id. When the trace says where each graph node was made, its GPU work is charged
//! to the launch stack, then a marker frame, then the stack that made the node:
//!
//! ```text
//! main;step;cudaGraphLaunch;[graph node captured at];_start;…;main;build;layer;cudaLaunchKernel;[GPU_Kernel]gemm
//! ```
//!
//! `[graph node captured at]` is followed by the stack of the launch that stream
//! capture turned into the node; `[graph node added at]` by the stack of the call
//! that added the node to a graph explicitly (`cudaGraphAddKernelNode`, …).

use std::collections::BTreeMap;
use std::fmt;
use std::num::NonZeroU32;
use std::path::Path;

use rustc_hash::{FxHashMap, FxHashSet};

use crate::error::Result;
use crate::join::backward::{self, AUTOGRAD_OFF_NOTE, BackwardStats};
use crate::model::{
    ApiCall, AutogradTag, Module, NvtxKind, ROOT_FRAMES, Record, Stack, StackEnd, StackFrame,
    StringId, StringTable, Symbolize, api_base_name, api_stem, is_copy_api, is_launch_api,
    is_memset_api,
};
use crate::read::cpu::{CpuFormat, CpuLaunch, CpuTrace, StackId};
use crate::read::input::GpuInputs;

/// The frame between a graph launch's stack and the stack that captured the node.
pub const GRAPH_CAPTURED: &str = "[graph node captured at]";
/// The frame between a graph launch's stack and the stack that added the node.
pub const GRAPH_ADDED: &str = "[graph node added at]";
/// What an NVTX range's frame starts with ([`nvtx_frame`]).
pub(crate) const NVTX_FRAME: &str = "[nvtx]";
/// A frame in code without unwind information.
pub(crate) const UNKNOWN_FRAME: &str = "[unknown]";
/// Whether a folded stack (root first) starts at a root frame, i.e. is complete.
/// A stack that stops earlier is truncated, whoever took it.
pub fn is_complete(folded: &str) -> bool {
    let root = folded.split(';').next().unwrap_or("");
    ROOT_FRAMES.contains(&root)
}

/// What the collected stacks hold.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StackStats {
    /// Distinct stacks.
    pub stacks: u64,
    /// API calls with a stack.
    pub launches: u64,
    /// API calls whose stack stops before a root frame, by why it stopped.
    pub truncated: BTreeMap<StackEnd, u64>,
    /// API calls whose Python frames were cut at the depth cap.
    pub python_truncated: u64,
    /// API calls naming a stack id no `STACK` record defined.
    pub missing: u64,
    /// Native frames without a symbol.
    pub unsymbolized_frames: u64,
    /// Graph nodes whose origin is known.
    pub graph_nodes: u64,
    /// Launches made by autograd's backward nodes, and how they were charged.
    pub backward: BackwardStats,
    /// API calls with a stack made inside NVTX push/pop ranges, which show as
    /// frames of their stacks (`NVTX_FRAME`).
    pub nvtx_launches: u64,
}

impl StackStats {
    /// API calls with a truncated stack.
    pub fn truncated_launches(&self) -> u64 {
        self.truncated.values().sum()
    }
}

impl fmt::Display for StackStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} API calls with in-process stacks ({} distinct), {} complete, {} truncated",
            self.launches,
            self.stacks,
            self.launches - self.truncated_launches(),
            self.truncated_launches()
        )?;
        if !self.truncated.is_empty() {
            let why: Vec<String> = self
                .truncated
                .iter()
                .map(|(e, n)| format!("{n} {}", e.describe()))
                .collect();
            write!(f, " ({})", why.join(", "))?;
        }
        if self.python_truncated > 0 {
            write!(
                f,
                "; {} with Python frames cut at the depth cap",
                self.python_truncated
            )?;
        }
        if self.missing > 0 {
            write!(f, "; {} naming a stack the trace lacks", self.missing)?;
        }
        if self.unsymbolized_frames > 0 {
            write!(f, "; {} frames without symbols", self.unsymbolized_frames)?;
        }
        if !self.backward.is_empty() {
            write!(f, "; {}", self.backward)?;
        }
        if self.nvtx_launches > 0 {
            write!(f, "; {} inside NVTX ranges", self.nvtx_launches)?;
        }
        Ok(())
    }
}

/// The launch stacks a set of GPU traces carries.
#[derive(Debug)]
pub struct LaunchStacks {
    /// One launch per API call with a stack, with correlation ids.
    pub trace: CpuTrace,
    /// Counts.
    pub stats: StackStats,
}

/// What one process's trace holds.
#[derive(Default)]
struct Proc {
    exe: String,
    modules: FxHashMap<u32, Module>,
    stacks: FxHashMap<u32, Stack>,
    /// node → (stack id, API name).
    nodes: FxHashMap<u64, (u32, Option<StringId>)>,
    /// correlation id → (launch index).
    by_corr: FxHashMap<u32, usize>,
    /// The last API call, which a following CALL_STACK belongs to.
    last_api: Option<ApiCall>,
    /// Thread names, the last one recorded for each thread.
    threads: FxHashMap<u32, String>,
    /// correlation id → autograd ids.
    autograd: FxHashMap<u32, AutogradTag>,
    /// The recorder turned its autograd reading off.
    autograd_off: bool,
    /// tid → NVTX push/pop ranges: (start, end, frame text).
    nvtx: FxHashMap<u32, Vec<(u64, u64, String)>>,
}

/// A launch before its text is known.
struct Pending {
    api: ApiCall,
    stack: u32,
}

/// Reads every in-process stack of `gpu` into a CPU trace; `None` when the traces
/// carry none. Native frames are named by `sym`.
pub fn collect(
    gpu: &GpuInputs,
    strings: &mut StringTable,
    sym: &mut dyn Symbolize,
) -> Result<Option<LaunchStacks>> {
    let Gathered {
        mut procs,
        pending,
        graph_work,
    } = gather(gpu, strings)?;
    if pending.is_empty() {
        return Ok(None);
    }
    let mut trace = CpuTrace::new(CpuFormat::Gpuperf);
    let mut stats = StackStats::default();
    let mut namer = Namer {
        sym,
        texts: FxHashMap::default(),
        frames: FxHashMap::default(),
        unsymbolized: 0,
        interpreter: FxHashSet::default(),
    };
    for (pid, p) in &procs {
        if p.stacks.is_empty() {
            continue;
        }
        stats.stacks += p.stacks.len() as u64;
        namer.name_frames(*pid, p);
        let comm = Path::new(&p.exe).file_name().map_or_else(
            || "process".to_owned(),
            |n| n.to_string_lossy().into_owned(),
        );
        trace.comms.insert((*pid, *pid), comm);
        // The main thread keeps the process's name: it also names the process.
        for (&tid, name) in p.threads.iter().filter(|(t, _)| **t != *pid) {
            trace.comms.insert((*pid, tid), name.clone());
        }
    }
    let mut launch_stack = add_launches(
        &mut trace, &mut stats, &mut namer, &procs, &pending, strings,
    );
    stats.nvtx_launches = add_nvtx_frames(
        &mut trace,
        &mut launch_stack,
        &mut namer,
        &mut procs,
        &pending,
        strings,
    );
    stats.backward = charge_backward(
        &mut trace,
        &mut launch_stack,
        &mut namer,
        &procs,
        &pending,
        strings,
    );
    add_graph_nodes(
        &mut trace,
        &mut stats,
        &mut namer,
        &procs,
        graph_work,
        &launch_stack,
        strings,
    );
    stats.unsymbolized_frames = namer.unsymbolized;
    trace.interpreter_frames = namer.interpreter;
    trace.lines = trace.launches.len() as u64;
    Ok(Some(LaunchStacks { trace, stats }))
}

/// What one pass over the GPU inputs finds for the stacks.
struct Gathered {
    procs: FxHashMap<u32, Proc>,
    /// Calls with a stack, in file order, with their process.
    pending: Vec<(u32, Pending)>,
    /// (pid, correlation id, node) of GPU work from graph nodes.
    graph_work: FxHashSet<(u32, u32, u64)>,
}

fn gather(gpu: &GpuInputs, strings: &mut StringTable) -> Result<Gathered> {
    let mut procs: FxHashMap<u32, Proc> = FxHashMap::default();
    let mut pending: Vec<(u32, Pending)> = Vec::new();
    // (pid, correlation id, node) of GPU work from graph nodes.
    let mut graph_work: FxHashSet<(u32, u32, u64)> = FxHashSet::default();
    gpu.visit(strings, &mut |rec, names| match rec {
        Record::Process(p) => procs.entry(p.pid).or_default().exe = p.exe.clone(),
        Record::Module(m) => {
            procs
                .entry(m.pid)
                .or_default()
                .modules
                .insert(m.id, m.clone());
        }
        Record::Stack(s) => {
            procs
                .entry(s.pid)
                .or_default()
                .stacks
                .insert(s.id, s.clone());
        }
        Record::GraphNode(g) => {
            procs
                .entry(g.pid)
                .or_default()
                .nodes
                .insert(g.node_id, (g.stack, g.api));
        }
        Record::Api(a) => procs.entry(a.pid).or_default().last_api = Some(*a),
        Record::Thread(t) => {
            procs
                .entry(t.pid)
                .or_default()
                .threads
                .insert(t.tid, t.name.clone());
        }
        Record::CallStack(c) => {
            let p = procs.entry(c.pid).or_default();
            if let Some(api) = p.last_api.filter(|a| a.correlation_id == c.correlation_id) {
                p.by_corr.insert(c.correlation_id, pending.len());
                pending.push((
                    c.pid,
                    Pending {
                        api,
                        stack: c.stack,
                    },
                ));
            }
        }
        Record::Autograd(a) => {
            procs
                .entry(a.pid)
                .or_default()
                .autograd
                .insert(a.correlation_id, a.tag);
        }
        Record::Nvtx(r) if r.kind == NvtxKind::PushPop => {
            let frame = nvtx_frame(names.get(r.name), r.domain.map(|d| names.get(d)));
            procs
                .entry(r.pid)
                .or_default()
                .nvtx
                .entry(r.tid)
                .or_default()
                .push((r.start_ns, r.end_ns, frame));
        }
        Record::Note(n) if n.text.starts_with(AUTOGRAD_OFF_NOTE) => {
            procs.entry(n.pid).or_default().autograd_off = true;
        }
        Record::Activity(a) => {
            if let Some(node) = a.graph_node_id {
                graph_work.insert((a.pid, a.correlation_id, node));
            }
        }
        _ => {}
    })?;
    Ok(Gathered {
        procs,
        pending,
        graph_work,
    })
}

/// One CPU launch per call with a stack; returns each launch's stack id.
fn add_launches(
    trace: &mut CpuTrace,
    stats: &mut StackStats,
    namer: &mut Namer<'_>,
    procs: &FxHashMap<u32, Proc>,
    pending: &[(u32, Pending)],
    strings: &StringTable,
) -> Vec<StackId> {
    let mut launch_stack: Vec<StackId> = Vec::with_capacity(pending.len());
    // (pid, stack, API) of the calls that made a captured graph node.
    let capturing: FxHashSet<(u32, u32, StringId)> = procs
        .iter()
        .flat_map(|(&pid, p)| {
            p.nodes
                .values()
                .filter_map(move |&(stack, api)| Some((pid, stack, api?)))
        })
        .collect();
    for (pid, l) in pending {
        let p = &procs[pid];
        if capturing.contains(&(*pid, l.stack, l.api.name)) {
            trace.captured.insert((*pid, l.api.correlation_id));
        }
        stats.launches += 1;
        let api = strings.get(l.api.name);
        if !(is_launch_api(api) || is_copy_api(api) || is_memset_api(api)) {
            // A synchronization call: its stack charges the wait, not a launch.
            trace.waits.insert((*pid, l.api.correlation_id));
        }
        let (text, end, py_cut) = match p.stacks.get(&l.stack) {
            // The leaf is the API function, as in CPU traces.
            Some(s) => (
                with_api(&namer.text(*pid, s, Some(api), strings), api),
                s.end,
                s.python_truncated,
            ),
            None => {
                stats.missing += 1;
                (String::new(), StackEnd::Other(u8::MAX), false)
            }
        };
        if end.is_truncated() {
            *stats.truncated.entry(end).or_default() += 1;
        }
        stats.python_truncated += u64::from(py_cut);
        let stack = trace.stacks.intern(text.as_bytes());
        launch_stack.push(stack);
        trace.launches.push(CpuLaunch {
            ts_ns: l.api.start_ns,
            pid: *pid,
            tid: l.api.tid,
            correlation_id: NonZeroU32::new(l.api.correlation_id),
            stack,
        });
    }

    launch_stack
}

/// A frame for an NVTX range: `[nvtx] NAME`, or `[nvtx DOMAIN] NAME` outside
/// the default domain. A `;` in a name would split the frame: it reads `,`.
pub(crate) fn nvtx_frame(name: &str, domain: Option<&str>) -> String {
    let clean = |s: &str| s.replace(';', ",").replace(['\n', '\r'], " ");
    match domain {
        Some(d) => format!("[nvtx {}] {}", clean(d), clean(name)),
        None => format!("{NVTX_FRAME} {}", clean(name)),
    }
}

/// Each launch made inside NVTX push/pop ranges on its thread gets the
/// ranges as frames, outermost first, just below its innermost Python frame,
/// or, without Python frames, just above the API frame:
///
/// ```text
/// …;train.py:step (train.py:12);[nvtx] forward;[nvtx] aten::linear;…native…;cudaLaunchKernel
/// _start;…;main;step;[nvtx] steps;cudaLaunchKernel
/// ```
///
/// A range is opened by the code that the innermost Python frame runs
/// (`with torch.cuda.nvtx.range(…)`, or the op dispatch `emit_nvtx` wraps),
/// and it encloses everything called from there: the frames below it are
/// the range's callees, as Nsight Systems draws an NVTX row above the CUDA
/// API calls made inside it, and as Kineto nests a `user_annotation` above
/// the ops it encloses. The Python line stays the root of the range, so
/// one line's work is not split by the ranges it opened. A native program's
/// stack does not say which frame pushed the range, so the range goes where
/// it is known to hold: around the call.
///
/// A launch is inside a range when its API call started between the push and
/// the pop on the same thread (one clock, one thread: no pairing needed).
/// Returns the launches that got frames.
fn add_nvtx_frames(
    trace: &mut CpuTrace,
    launch_stack: &mut [StackId],
    namer: &mut Namer<'_>,
    procs: &mut FxHashMap<u32, Proc>,
    pending: &[(u32, Pending)],
    strings: &StringTable,
) -> u64 {
    let mut by_thread: FxHashMap<(u32, u32), Vec<usize>> = FxHashMap::default();
    for (i, (pid, l)) in pending.iter().enumerate() {
        if procs[pid].nvtx.contains_key(&l.api.tid) {
            by_thread.entry((*pid, l.api.tid)).or_default().push(i);
        }
    }
    let mut threads: Vec<((u32, u32), Vec<usize>)> = by_thread.into_iter().collect();
    threads.sort_unstable_by_key(|(k, _)| *k);
    let mut inside = 0;
    for ((pid, tid), mut launches) in threads {
        let Some(mut ranges) = procs.get_mut(&pid).and_then(|p| p.nvtx.remove(&tid)) else {
            continue;
        };
        // Outer before inner: by start, the longer first.
        ranges.sort_unstable_by_key(|r| (r.0, std::cmp::Reverse(r.1)));
        launches.sort_unstable_by_key(|&i| (pending[i].1.api.start_ns, i));
        let mut open: Vec<usize> = Vec::new();
        let mut next = 0;
        for i in launches {
            let t = pending[i].1.api.start_ns;
            while let Some(r) = ranges.get(next).filter(|r| r.0 <= t) {
                while open.last().is_some_and(|&o| ranges[o].1 < r.0) {
                    open.pop();
                }
                open.push(next);
                next += 1;
            }
            while open.last().is_some_and(|&o| ranges[o].1 < t) {
                open.pop();
            }
            let frames: Vec<&str> = open
                .iter()
                .filter(|&&o| ranges[o].1 >= t)
                .map(|&o| ranges[o].2.as_str())
                .collect();
            if frames.is_empty() {
                continue;
            }
            let own = trace.stacks.text(launch_stack[i]).to_owned();
            let python = procs[&pid]
                .stacks
                .get(&pending[i].1.stack)
                .filter(|s| {
                    s.frames
                        .iter()
                        .any(|f| matches!(f, StackFrame::Python { .. }))
                })
                .map(|s| namer.python_prefix(pid, s, strings));
            let text = with_nvtx(&own, python.as_deref(), &frames.join(";"));
            let id = trace.stacks.intern(text.as_bytes());
            launch_stack[i] = id;
            trace.launches[i].stack = id;
            inside += 1;
        }
    }
    inside
}

/// `own` with `frames` after its Python prefix `python` when it starts with
/// it, else before its leaf (the API frame).
fn with_nvtx(own: &str, python: Option<&str>, frames: &str) -> String {
    if let Some(p) = python.filter(|p| !p.is_empty())
        && let Some(rest) = own.strip_prefix(p).and_then(|r| r.strip_prefix(';'))
    {
        return format!("{p};{frames};{rest}");
    }
    match own.rsplit_once(';') {
        Some((head, leaf)) => format!("{head};{frames};{leaf}"),
        None if own.is_empty() => frames.to_owned(),
        None => format!("{frames};{own}"),
    }
}

/// Backward launches under the forward launch that made their node
/// ([`backward`]): its stack to its innermost Python frame, `[backward]`, then
/// their own.
fn charge_backward(
    trace: &mut CpuTrace,
    launch_stack: &mut [StackId],
    namer: &mut Namer<'_>,
    procs: &FxHashMap<u32, Proc>,
    pending: &[(u32, Pending)],
    strings: &StringTable,
) -> BackwardStats {
    let launches: Vec<backward::Launch> = pending
        .iter()
        .map(|(pid, l)| backward::Launch {
            pid: *pid,
            start_ns: l.api.start_ns,
            tag: procs[pid].autograd.get(&l.api.correlation_id).copied(),
        })
        .collect();
    let off: FxHashSet<u32> = procs
        .iter()
        .filter(|(_, p)| p.autograd_off)
        .map(|(&pid, _)| pid)
        .collect();
    let (links, stats) = backward::link(&launches, &off);
    for (b, f) in links {
        let Ok(f) = f else { continue };
        let (pid, fwd) = (pending[f].0, &pending[f].1);
        let Some(s) = procs[&pid].stacks.get(&fwd.stack) else {
            continue;
        };
        let forward = namer.python_prefix(pid, s, strings);
        let own = trace.stacks.text(launch_stack[b]).to_owned();
        let id = trace
            .stacks
            .intern(backward::under_forward(&forward, &own).as_bytes());
        launch_stack[b] = id;
        trace.launches[b].stack = id;
    }
    stats
}

/// Graph nodes: each (launch stack, node stack) pair once.
fn add_graph_nodes(
    trace: &mut CpuTrace,
    stats: &mut StackStats,
    namer: &mut Namer<'_>,
    procs: &FxHashMap<u32, Proc>,
    graph_work: FxHashSet<(u32, u32, u64)>,
    launch_stack: &[StackId],
    strings: &StringTable,
) {
    let mut work: Vec<(u32, u32, u64)> = graph_work.into_iter().collect();
    work.sort_unstable();
    for (pid, corr, node) in work {
        let Some(p) = procs.get(&pid) else { continue };
        let (Some(&li), Some(&(node_stack, node_api))) = (p.by_corr.get(&corr), p.nodes.get(&node))
        else {
            continue;
        };
        let Some(s) = p.stacks.get(&node_stack) else {
            continue;
        };
        let node_api = node_api.map(|a| strings.get(a));
        let mut node_text = namer.text(pid, s, node_api, strings);
        if let Some(api) = node_api {
            node_text = with_api(&node_text, api);
        }
        let node_id = trace.stacks.intern(node_text.as_bytes());
        if trace.graph_nodes.insert((pid, node), node_id).is_none() {
            stats.graph_nodes += 1;
        }
        let launch = launch_stack[li];
        if trace.graph_stacks.contains_key(&(launch, node_id)) {
            continue;
        }
        let mut text = trace.stacks.text(launch).to_owned();
        text.push(';');
        text.push_str(if node_api.is_some() {
            GRAPH_CAPTURED
        } else {
            GRAPH_ADDED
        });
        text.push(';');
        text.push_str(&node_text);
        let composed = trace.stacks.intern(text.as_bytes());
        trace.graph_stacks.insert((launch, node_id), composed);
    }
}

/// `stack` with the API frame as its leaf (added unless already there).
fn with_api(stack: &str, api: &str) -> String {
    let leaf = stack.rsplit(';').next().unwrap_or(stack);
    if leaf == api {
        stack.to_owned()
    } else if stack == crate::read::cpu::NO_STACK_FRAME || stack.is_empty() {
        api.to_owned()
    } else {
        format!("{stack};{api}")
    }
}

/// The key under which [`Namer`] keeps a stack's Python prefix: no API name
/// looks like it.
const BACKWARD_KEY: &str = "[python prefix]";

struct Namer<'s> {
    sym: &'s mut dyn Symbolize,
    /// (pid, stack id, API name) → text.
    texts: FxHashMap<(u32, u32, Option<String>), String>,
    /// (pid, module, offset) → names, innermost first.
    frames: FxHashMap<(u32, u32, u64), Vec<String>>,
    unsymbolized: u64,
    /// Names of frames in the interpreter's own module ([`crate::view`]).
    interpreter: FxHashSet<Box<str>>,
}

impl Namer<'_> {
    /// Symbolizes every native frame of a process, one batch per module.
    fn name_frames(&mut self, pid: u32, p: &Proc) {
        let mut by_module: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
        for s in p.stacks.values() {
            for f in &s.frames {
                if let StackFrame::Native { module, offset } = *f {
                    by_module.entry(module).or_default().push(offset);
                }
            }
        }
        for (module, mut offsets) in by_module {
            offsets.sort_unstable();
            offsets.dedup();
            let names = match p.modules.get(&module) {
                Some(m) => self.sym.symbolize(m, &offsets),
                None => Vec::new(),
            };
            let file = p.modules.get(&module).map_or_else(
                || format!("[module {module}]"),
                |m| {
                    Path::new(&m.path)
                        .file_name()
                        .map_or_else(|| m.path.clone(), |n| n.to_string_lossy().into_owned())
                },
            );
            let interpreter = p
                .modules
                .get(&module)
                .is_some_and(|m| crate::view::is_interpreter_module(&m.path));
            for (i, off) in offsets.into_iter().enumerate() {
                let mut n = names.get(i).cloned().unwrap_or_default();
                if n.is_empty() {
                    self.unsymbolized += 1;
                    n.push(format!("{file}+{off:#x}"));
                }
                if interpreter {
                    self.interpreter
                        .extend(n.iter().map(|x| x.replace(';', ":").into_boxed_str()));
                }
                self.frames.insert((pid, module, off), n);
            }
        }
    }

    /// The folded text of a stack from its root to its innermost Python
    /// frame; the whole stack when it has none.
    fn python_prefix(&mut self, pid: u32, s: &Stack, strings: &StringTable) -> String {
        let key = (pid, s.id, Some(BACKWARD_KEY.to_owned()));
        if let Some(t) = self.texts.get(&key) {
            return t.clone();
        }
        let innermost = s
            .frames
            .iter()
            .position(|f| matches!(f, StackFrame::Python { .. }))
            .unwrap_or(0);
        let text = self.folded(pid, &s.frames[innermost..], None, strings);
        self.texts.insert(key, text.clone());
        text
    }

    /// The folded text (root first) of a stack, ending at the API frame `api`
    /// when the stack holds it.
    fn text(&mut self, pid: u32, s: &Stack, api: Option<&str>, strings: &StringTable) -> String {
        let key = (pid, s.id, api.map(str::to_owned));
        if let Some(t) = self.texts.get(&key) {
            return t.clone();
        }
        let text = self.folded(pid, &s.frames, api, strings);
        self.texts.insert(key, text.clone());
        text
    }

    /// `frames` (innermost first) as folded text, root first.
    fn folded(
        &mut self,
        pid: u32,
        frames: &[StackFrame],
        api: Option<&str>,
        strings: &StringTable,
    ) -> String {
        // Leaf first.
        let mut names: Vec<String> = Vec::with_capacity(frames.len());
        for f in frames {
            match *f {
                StackFrame::Native { module, offset } => {
                    if let Some(n) = self.frames.get(&(pid, module, offset)) {
                        names.extend(n.iter().cloned());
                    }
                }
                StackFrame::Python {
                    function,
                    file,
                    line,
                } => {
                    let file = strings.get(file);
                    let base = file.rsplit('/').next().unwrap_or(file);
                    // An unknown line reads 0, as it always has in the outputs.
                    let line = line.unwrap_or(0);
                    names.push(format!("{} ({base}:{line})", strings.get(function)));
                }
                StackFrame::Unknown { .. } => names.push(UNKNOWN_FRAME.to_owned()),
            }
        }
        // A runtime linked into the executable: drop its frames above the API
        // function, so that the API function is the leaf.
        if let Some(api) = api {
            let (base, stem) = (api_base_name(api), api_stem(api));
            if let Some(i) = names.iter().position(|n| n == base || n == stem) {
                names.drain(..i);
            }
        }
        let mut text = String::new();
        for (i, n) in names.iter().rev().enumerate() {
            if i > 0 {
                text.push(';');
            }
            text.extend(n.chars().map(|c| match c {
                ';' => ':',
                '\n' | '\r' => ' ',
                c => c,
            }));
        }
        text
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_makecontext_coroutine_stack_from_start_context_is_complete() {
        assert!(super::is_complete(
            "__start_context;worker;cudaLaunchKernel"
        ));
        assert!(!super::is_complete("worker;cudaLaunchKernel"));
    }

    #[test]
    fn nvtx_frames_go_below_the_python_prefix_else_above_the_api_frame() {
        use super::{nvtx_frame, with_nvtx};
        let frames = [nvtx_frame("step", None), nvtx_frame("a;b", Some("lib"))].join(";");
        assert_eq!(frames, "[nvtx] step;[nvtx lib] a,b");
        let py = "_start;main;m.train (t.py:3)";
        assert_eq!(
            with_nvtx(&format!("{py};at::mm;cudaLaunchKernel"), Some(py), &frames),
            format!("{py};[nvtx] step;[nvtx lib] a,b;at::mm;cudaLaunchKernel")
        );
        // A stack that does not start with the prefix: at the leaf end.
        assert_eq!(
            with_nvtx("_start;main;launch;cudaLaunchKernel", Some(py), "[nvtx] x"),
            "_start;main;launch;[nvtx] x;cudaLaunchKernel"
        );
        assert_eq!(
            with_nvtx("cudaLaunchKernel", None, "[nvtx] x"),
            "[nvtx] x;cudaLaunchKernel"
        );
    }
}
