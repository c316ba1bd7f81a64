//! Where CUDA graph nodes come from: the stack of the call that made them.
//!
//! CUPTI reports each graph node as it is made (`GRAPHNODE_CREATED`, on the
//! thread that makes it) and each copy made when a graph is instantiated
//! (`GRAPHNODE_CLONED`, and `GRAPHNODE_CREATED` too: a copy keeps its
//! original's origin whichever comes first). A node made inside a recorded launch (stream capture)
//! gets that launch's stack; one made by another call (`cudaGraphAddKernelNode`)
//! gets a stack taken there. A `GRAPH_NODE` record ties the node id that GPU
//! records carry to that stack.
//!
//! Copies take no stack. While a thread is inside an instantiate, clone,
//! exec-update or destroy call (runtime or driver), the node callbacks it
//! reports (`GRAPHNODE_CLONED`, `GRAPHNODE_DESTROY_STARTING`) are appended to
//! a per-thread buffer and applied under one lock when the call returns
//! (`GRAPHNODE_DESTROY_STARTING` removes the node from the map). Memory stays
//! flat: the node map holds at most 2^20 nodes, and node records waiting for
//! the flush wake the flush thread at 2^14, are written by the copying thread
//! at the end of its call past 2^17, and are dropped past 2^20; what is not
//! kept is counted in the log.
//!
//! The map, the queue and a thread's batch grow on the application's threads,
//! fallibly: where memory is short a node is not remembered (its copies have
//! no origin) or its record is not queued (it has no stack), one node at a
//! time, counted with the reason in the log and the trace's NOTE, and a batch
//! that cannot be allocated is not made (the events are applied at once).

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::c_void;
use std::mem::offset_of;
use std::sync::atomic::Ordering::Relaxed;

use cudarc::cupti::sys::{CUpti_GraphData, CUpti_ResourceData};
use gpuperf_merge::model::{GraphNode, Record, StringId, StringTable};

use super::{ApiId, PendingNode, Stacks, Table};
use crate::shard::mock_alloc;

/// `CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED`.
pub const GRAPHNODE_CREATED: u32 = 13;
/// `CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED`.
pub const GRAPHNODE_CLONED: u32 = 20;
/// `CUPTI_CBID_RESOURCE_GRAPHNODE_DESTROY_STARTING`.
pub const GRAPHNODE_DESTROY_STARTING: u32 = 14;
/// Graph nodes remembered for their clones; past it, new nodes are not (counted).
const MAX_NODES: usize = 1 << 20;
/// Graph nodes waiting for the flush thread: at this many it is woken, so that
/// a burst of instantiations does not pile up records between flushes.
const WAKE_NODES: usize = 1 << 14;
/// Graph nodes waiting when a graph call returns: at this many (the flush
/// thread falls behind) the calling thread writes them itself.
const BACKLOG_NODES: usize = 1 << 17;
/// Graph nodes waiting at most (one call copying a million nodes); past it a
/// node's record is dropped (counted).
const MAX_PENDING_NODES: usize = 1 << 20;

/// What the stacks went without on the application's threads for lack of
/// memory ([`Stacks::no_memory`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NoMemory {
    /// Tables of the modules loaded since the last one (a `dlopen`) not
    /// built: frames in those modules ended their stacks until a later
    /// capture built it.
    pub module_tables: u64,
    /// Graph nodes not remembered for their copies: the copies have no origin.
    pub nodes_not_kept: u64,
    /// Graph node records not queued: those nodes have no stack.
    pub nodes_not_written: u64,
}

/// Room for `n` more in `v`; `false` when memory is short.
fn room<T>(v: &mut Vec<T>, n: usize) -> bool {
    !mock_alloc::refuses() && v.try_reserve_exact(n).is_ok()
}

/// Whether a resource callback is one of the graph-node callbacks that copies
/// and teardowns make by the thousand (cloned, destroyed, and made inside an
/// instantiate, clone or exec-update call): none of them takes a stack.
pub fn is_graph_copy_callback(cbid: u32) -> bool {
    cbid == GRAPHNODE_CLONED
        || cbid == GRAPHNODE_DESTROY_STARTING
        || (cbid == GRAPHNODE_CREATED
            && GRAPH_THREAD
                .try_with(|g| g.borrow().copies > 0)
                .unwrap_or(false))
}

/// Hashes graph node ids (small integers CUPTI hands out in sequence) with one
/// multiplication, instead of SipHash: the node map is updated three times per
/// node an instantiation copies.
#[derive(Clone, Copy, Default)]
pub(super) struct NodeHash(u64);

impl std::hash::Hasher for NodeHash {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u64(&mut self, n: u64) {
        // Fibonacci hashing; hashbrown takes its top bits for the control byte.
        self.0 = (self.0 ^ n).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// A graph node callback kept for later: while a thread is inside an
/// instantiate, clone, exec-update or destroy call, the thousands of node
/// copies and teardowns it reports are applied in one go (one lock) when the
/// call returns, or every [`NODE_BATCH`] events. The call's result is not
/// usable before it returns, so nothing can need them sooner; node ids are
/// never reused, so a late teardown cannot remove a newer node.
#[derive(Clone, Copy)]
pub(super) enum NodeEvent {
    Cloned {
        node: u64,
        original: u64,
        /// Copied into an instantiated graph (`graphExec` set): a node no
        /// later copy is made from, so it is written but not remembered
        /// (CUPTI need not report its teardown).
        into_exec: bool,
    },
    Destroyed(u64),
}

/// Node events a thread batches at most before applying them.
const NODE_BATCH: usize = 1024;

/// A thread's graph calls, and its batched node events: one thread-local,
/// as each access costs a `__tls_get_addr` call in a library loaded by
/// `dlopen`.
pub(super) struct GraphThread {
    /// Instantiate, clone and exec-update calls running.
    copies: u32,
    /// Those and destroy calls running: node events are batched meanwhile.
    calls: u32,
    pub(super) events: Vec<NodeEvent>,
}

thread_local! {
    pub(super) static GRAPH_THREAD: RefCell<GraphThread> = const {
        RefCell::new(GraphThread { copies: 0, calls: 0, events: Vec::new() })
    };
}

pub(super) type NodeMap =
    HashMap<u64, (u32, Option<ApiId>), std::hash::BuildHasherDefault<NodeHash>>;

impl Stacks {
    /// A resource callback: graph nodes made, cloned and destroyed. `open` is
    /// called for the innermost recorded API call open on this thread: (its
    /// stack, domain, cbid). Returns whether the flush thread should be woken
    /// (graph node records are piling up).
    ///
    /// # Safety
    /// `data` must be the `CUpti_ResourceData` CUPTI passed with `cbid`.
    pub unsafe fn on_resource(
        &self,
        cbid: u32,
        data: *const c_void,
        open: &dyn Fn() -> Option<(u32, u32, u32)>,
    ) -> bool {
        let Some(node_id) = self.graph_node_id else {
            return false;
        };
        if !matches!(
            cbid,
            GRAPHNODE_CREATED | GRAPHNODE_CLONED | GRAPHNODE_DESTROY_STARTING
        ) || data.is_null()
        {
            return false;
        }
        if cbid == GRAPHNODE_CREATED
            && GRAPH_THREAD
                .try_with(|g| g.borrow().copies > 0)
                .unwrap_or(false)
        {
            // A copy made by instantiate, clone or exec-update: its
            // GRAPHNODE_CLONED gives it its original's origin; a stack taken
            // here would be discarded (and cost a capture per node).
            return false;
        }
        let data = data.cast::<u8>();
        // SAFETY: for graph callbacks CUPTI passes a `CUpti_ResourceData` whose
        // `resourceDescriptor` points at a `CUpti_GraphData`; fields are read
        // unaligned at the offsets of the CUDA 13 headers' layout (unchanged
        // since CUDA 11).
        let (node, original, exec) = unsafe {
            let desc = data
                .add(offset_of!(CUpti_ResourceData, resourceDescriptor))
                .cast::<*const u8>()
                .read_unaligned();
            if desc.is_null() {
                return false;
            }
            let at = |off: usize| desc.add(off).cast::<*mut c_void>().read_unaligned();
            (
                at(offset_of!(CUpti_GraphData, node)),
                at(offset_of!(CUpti_GraphData, originalNode)),
                at(offset_of!(CUpti_GraphData, graphExec)),
            )
        };
        let id_of = |n: *mut c_void| {
            let mut id = 0u64;
            // SAFETY: a node handle CUPTI gave us; `id` is a valid out-pointer.
            (!n.is_null() && unsafe { node_id(n, &mut id) } == 0).then_some(id)
        };
        let Some(node) = id_of(node) else {
            return false;
        };
        let event = match cbid {
            GRAPHNODE_CLONED => match id_of(original) {
                Some(orig) => NodeEvent::Cloned {
                    node,
                    original: orig,
                    into_exec: !exec.is_null(),
                },
                None => return false,
            },
            GRAPHNODE_DESTROY_STARTING => NodeEvent::Destroyed(node),
            _ => {
                // Events of this thread first, in order.
                let wake = self.apply_node_events();
                return self.node_created(node, open()) || wake;
            }
        };
        // One thread-local access: queued while the thread is inside a graph
        // call.
        let queued = GRAPH_THREAD.try_with(|g| {
            let mut g = g.borrow_mut();
            if g.calls == 0 {
                return None;
            }
            let e = &mut g.events;
            if e.capacity() == 0 && !room(e, NODE_BATCH) {
                // Memory is short: applied at once, as outside a call.
                return None;
            }
            // Within the batch's capacity: applied once it is full.
            e.push(event);
            Some(e.len() >= NODE_BATCH)
        });
        match queued {
            Ok(Some(false)) => return false,
            Ok(Some(true)) => return self.apply_node_events(),
            // Outside a graph call, or the thread is being torn down:
            // applied at once.
            Ok(None) | Err(_) => {}
        }
        let wake = self.apply_node_events();
        let mut t = self.table.lock().unwrap_or_else(|e| e.into_inner());
        self.apply(&mut t, event) || wake
    }

    /// Applies the calling thread's batched node events (see [`NodeEvent`]),
    /// under one lock; returns whether the flush thread should be woken.
    fn apply_node_events(&self) -> bool {
        GRAPH_THREAD
            .try_with(|g| {
                let e = &mut g.borrow_mut().events;
                if e.is_empty() {
                    return false;
                }
                let mut t = self.table.lock().unwrap_or_else(|e| e.into_inner());
                let mut wake = false;
                for ev in e.drain(..) {
                    wake |= self.apply(&mut t, ev);
                }
                wake
            })
            .unwrap_or(false)
    }

    /// A graph copy (instantiate, clone, exec-update: `copy`) or destroy call
    /// enters or exits on the calling thread; when the last exits, the node
    /// events it reported are applied. Returns whether the flush thread should
    /// be woken.
    pub fn graph_call(&self, copy: bool, enter: bool) -> bool {
        let last = GRAPH_THREAD
            .try_with(|g| {
                let mut g = g.borrow_mut();
                let step = |n: u32| if enter { n + 1 } else { n.saturating_sub(1) };
                if copy {
                    g.copies = step(g.copies);
                }
                g.calls = step(g.calls);
                g.calls == 0
            })
            .unwrap_or(false);
        last && !enter && self.apply_node_events()
    }

    /// What the module tables and the graph maps could not allocate on the
    /// application's threads.
    pub fn no_memory(&self) -> NoMemory {
        NoMemory {
            module_tables: self.unwinder.tables_refused(),
            nodes_not_kept: self.nodes_no_memory[0].load(Relaxed),
            nodes_not_written: self.nodes_no_memory[1].load(Relaxed),
        }
    }

    /// Graph nodes past gpuperf's limits, in a sentence (`None` for none):
    /// not remembered for their copies with a million held, and records
    /// dropped with a million waiting for the flush thread.
    pub fn nodes_over_limits(&self) -> Option<String> {
        let (kept, written) = (
            self.nodes_not_kept.load(Relaxed),
            self.nodes_not_written.load(Relaxed),
        );
        let kept_text = format!(
            "graph nodes not remembered, with {MAX_NODES} held: their copies have no stack"
        );
        let written_text = format!(
            "graph node records dropped, with {MAX_PENDING_NODES} waiting to be written: those \
             nodes have no stack"
        );
        crate::log::counted(
            "graph nodes past gpuperf's limits",
            "; ",
            &[(kept, &kept_text), (written, &written_text)],
        )
    }

    /// Whether graph node records have piled up (2^17 waiting for the flush).
    pub fn node_backlog(&self) -> bool {
        self.table
            .lock()
            .is_ok_and(|t| t.pending_nodes.len() >= BACKLOG_NODES)
    }

    fn apply(&self, t: &mut Table, event: NodeEvent) -> bool {
        match event {
            NodeEvent::Cloned {
                node,
                original,
                into_exec,
            } => self.node_cloned(t, node, original, !into_exec),
            NodeEvent::Destroyed(node) => {
                t.nodes.remove(&node);
                false
            }
        }
    }

    /// Graph node `node` was made, outside a graph copy: inside a recorded call
    /// (`open`: its stack, domain, cbid), it gets that call's stack; otherwise
    /// a stack taken here. Instantiation reports
    /// each copy it makes as made and as cloned, in an order CUPTI does not
    /// document: a node already known as a clone keeps its original's origin.
    pub(super) fn node_created(&self, node: u64, open: Option<(u32, u32, u32)>) -> bool {
        if self
            .table
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .nodes
            .contains_key(&node)
        {
            return false;
        }
        let (stack, api) = match open.filter(|o| o.0 != 0) {
            Some((stack, domain, cbid)) => (stack, Some((domain, cbid))),
            None => (self.capture(), None),
        };
        let mut t = self.table.lock().unwrap_or_else(|e| e.into_inner());
        self.remember_node(&mut t, node, (stack, api));
        self.pend_node(&mut t, (node, stack, api))
    }

    /// Keeps a node's origin for its clones, within [`MAX_NODES`] and the
    /// memory the map can get.
    fn remember_node(&self, t: &mut Table, node: u64, origin: (u32, Option<ApiId>)) {
        if let Some(o) = t.nodes.get_mut(&node) {
            *o = origin;
        } else if t.nodes.len() >= MAX_NODES {
            self.nodes_not_kept.fetch_add(1, Relaxed);
        } else if mock_alloc::refuses() || t.nodes.try_reserve(1).is_err() {
            self.nodes_no_memory[0].fetch_add(1, Relaxed);
        } else {
            // Within the room reserved: no allocation.
            t.nodes.insert(node, origin);
        }
    }

    /// Queues a node's record, within [`MAX_PENDING_NODES`]; true when the
    /// queue has just reached [`WAKE_NODES`].
    fn pend_node(&self, t: &mut Table, rec: PendingNode) -> bool {
        if t.pending_nodes.len() >= MAX_PENDING_NODES {
            self.nodes_not_written.fetch_add(1, Relaxed);
            return false;
        }
        if mock_alloc::refuses() || t.pending_nodes.try_reserve(1).is_err() {
            self.nodes_no_memory[1].fetch_add(1, Relaxed);
            return false;
        }
        // Within the capacity: no allocation.
        t.pending_nodes.push(rec);
        t.pending_nodes.len() == WAKE_NODES
    }

    /// Graph node `node` was copied from `original` (graph instantiation or
    /// cloning): it has the original's origin, when that is known; it is
    /// remembered for copies of its own when `keep`.
    pub(super) fn node_cloned(&self, t: &mut Table, node: u64, original: u64, keep: bool) -> bool {
        match t.nodes.get(&original) {
            Some(&(stack, api)) => {
                if keep {
                    self.remember_node(t, node, (stack, api));
                }
                self.pend_node(t, (node, stack, api))
            }
            None => false,
        }
    }

    /// The `GRAPH_NODE` record of a node [`Stacks::take_records`] took;
    /// `api_name` names a recorded call by (domain, cbid).
    pub fn node_record(
        pid: u32,
        (node_id, stack, api): PendingNode,
        strings: &mut StringTable,
        api_name: &dyn Fn(u32, u32) -> Option<String>,
    ) -> Record {
        let api: Option<StringId> = api
            .and_then(|(d, c)| api_name(d, c))
            .map(|n| strings.intern(&n));
        Record::GraphNode(GraphNode {
            pid,
            node_id,
            stack,
            api,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    /// The mock allocator refuses the node map and the queue their first
    /// room: the node is counted twice (not remembered, not written), the
    /// program goes on, and the next node, with memory back, is kept.
    #[test]
    fn a_node_the_maps_cannot_grow_for_is_counted_and_the_next_is_kept() {
        let s = Stacks::new(Path::new("/nonexistent/libcupti.so.13"));
        let before = s.no_memory();
        mock_alloc::refuse(true);
        s.node_created(7, Some((5, 2, 211)));
        mock_alloc::refuse(false);
        let after = s.no_memory();
        assert_eq!(after.nodes_not_kept - before.nodes_not_kept, 1);
        assert_eq!(after.nodes_not_written - before.nodes_not_written, 1);
        s.node_created(8, Some((6, 2, 211)));
        let t = s.table.lock().unwrap();
        assert_eq!(t.nodes.get(&8), Some(&(6, Some((2, 211)))));
        assert!(!t.nodes.contains_key(&7));
        assert_eq!(t.pending_nodes, [(8, 6, Some((2, 211)))]);
    }

    /// With the map and the queue full, a new node is neither remembered nor
    /// queued, and both are said in the sentence the trace's note carries.
    #[test]
    fn nodes_past_the_limits_are_counted_and_said() {
        let s = Stacks::new(Path::new("/nonexistent/libcupti.so.13"));
        assert_eq!(s.nodes_over_limits(), None);
        {
            let mut t = s.table.lock().unwrap();
            t.nodes
                .extend((0..MAX_NODES as u64).map(|n| (n, (1, None))));
            t.pending_nodes
                .extend((0..MAX_PENDING_NODES as u64).map(|n| (n, 1, None)));
        }
        s.node_created(u64::MAX, Some((5, 2, 211)));
        s.node_created(u64::MAX - 1, Some((5, 2, 211)));
        let t = s.table.lock().unwrap();
        assert!(!t.nodes.contains_key(&u64::MAX));
        assert_eq!(t.pending_nodes.len(), MAX_PENDING_NODES);
        drop(t);
        assert_eq!(
            s.nodes_over_limits().as_deref(),
            Some(
                "graph nodes past gpuperf's limits: 2 graph nodes not remembered, with 1048576 \
                 held: their copies have no stack; 2 graph node records dropped, with 1048576 \
                 waiting to be written: those nodes have no stack"
            )
        );
    }
}
