//! CPU stacks: the Python functions and operators that enclose each API call,
//! chained into launch stacks, and backward ops charged to their forward op's
//! stack.

use std::num::NonZeroU32;

use rustc_hash::{FxHashMap, FxHashSet};

use crate::model::{BACKWARD_FRAME, StringId, StringTable};
use crate::read::cpu::{CpuLaunch, CpuTrace, ProfilerStep, StackId};

use super::event::{frame_text, parse_int, parse_u32};
use super::{Builder, NO_PARENT, NONE, Owners, Slice, Span, What};

impl Builder<'_> {
    /// A Python function or an operator: a CPU span that launch stacks are built
    /// from.
    pub(super) fn span_event(&mut self, x: &Slice<'_, '_>, what: What) {
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

    /// The CPU stack of every launch call and of every call that caused GPU work.
    /// With [`Options::link_backward`], a call under a backward op linked to its
    /// forward op gets the forward op's stack, then `[backward]`, then its own.
    pub(super) fn build_stacks(&mut self, owners: &Owners) -> (CpuTrace, BackwardCounts) {
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
        let backward = self.frames.intern(BACKWARD_FRAME).0;
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
                correlation_id: NonZeroU32::new(call.correlation_id),
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
pub(super) struct BackwardCounts {
    /// Charged to their forward op's stack.
    pub(super) linked: u64,
    /// Left on the backward thread's stack: no forward op was found.
    pub(super) unlinked: u64,
}

/// Links each backward op (a span) to the forward op that made it, or to
/// `None` when the trace names none: by `fwdbwd` flows where the trace has
/// them, otherwise by sequence number.
pub(super) fn backward_links(
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
pub(super) fn sweep(
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
pub(super) struct Paths {
    python_index: FxHashMap<u64, u32>,
    call_stack_frames: Vec<Option<Vec<u32>>>,
    chain: Vec<u32>,
    frames: Vec<(u64, u64, bool, u32)>,
    emitted_python: Vec<u32>,
    /// The last frames built, outermost first.
    path: Vec<u32>,
}

impl Paths {
    pub(super) fn new(spans: &[Span], call_stacks: usize) -> Self {
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
    pub(super) fn build(
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
pub(super) fn frame_path(
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
pub(super) fn python_chain(
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

/// Interns frame paths: one node per (parent node, frame), so a stack costs one
/// hash look-up per frame and no string until it is first rendered.
#[derive(Default)]
pub(super) struct Trie {
    children: FxHashMap<(u32, u32), u32>,
    nodes: Vec<(u32, u32)>,
    stacks: Vec<Option<StackId>>,
}

impl Trie {
    /// The node of `path` below `node` (`NONE`: the root).
    pub(super) fn node(&mut self, mut node: u32, path: &[u32]) -> u32 {
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
    pub(super) fn path(&self, mut node: u32) -> Vec<u32> {
        let mut path = Vec::new();
        while node != NONE {
            let (parent, f) = self.nodes[node as usize];
            path.push(f);
            node = parent;
        }
        path.reverse();
        path
    }

    pub(super) fn stack(&mut self, node: u32, frames: &StringTable, out: &mut CpuTrace) -> StackId {
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
