//! CPU stacks taken in process, on the launching thread, inside the CUPTI API-enter
//! callback of every launch, copy and memset call (the calls that fire the
//! marker): no eBPF and no root needed.
//!
//! ```text
//!  API enter ─▶ capture (gpuperf-unwind: .eh_frame + CPython frames)
//!              ─▶ drop frames of this library, libcupti, libcuda, libcudart
//!              ─▶ hash ─▶ lock-free table (`seen`) ─hit─▶ stack id on the API record
//!                                                  └new─▶ frames into its arena,
//!                                                         next id, published
//!  flush ─▶ MODULE records (new modules), STACK records (new stacks, Python
//!           frames resolved to names and lines), GRAPH_NODE records, NOTEs
//! ```
//!
//! # Cost
//! A launch costs one capture (no allocation, no lock, on the unwinder's
//! scratch stack, or on the caller's where it has room for a capture taken
//! whole: see `gpuperf_unwind::LocalUnwinder::capture_then_reusing`).
//! A training step launches the same sequence of stacks step after step, each
//! rarely the one before: each thread expects one of the last two stacks
//! that followed its last eight (else the one that followed its last two)
//! when they came, and the unwinder keeps, under each stack id, the walk and
//! capture that made it (`gpuperf_unwind::Trail::keep_last`). The capture of
//! the stack expected reads every stack word that walk read, and the Python
//! frame chain's words, again; when all are the same it is that stack, known by its id without
//! walking, merging, hashing or comparing (the log counts these captures);
//! else it walks as follows, and its walk is kept under its id.
//! Each thread keeps its last native walk (`gpuperf_unwind::Trail`): where the
//! new walk reaches a frame in the same state as one of the last walk, and
//! every stack word the last walk read from there outward is unchanged (each
//! is read again; a stack scan across code without unwind info is made again
//! unless each word it read is the same, or another the scan treats alike),
//! the rest is taken from it; the log counts the captures that did. Then a hash
//! and a look-up in a lock-free table shared by all threads. A stack equal to
//! the thread's last one (a training loop launches from the same stack again
//! and again) is known by comparing it with that one, frame by frame, without
//! the hash or the table; or without comparing, when the unwinder proved it
//! unchanged since the thread's capture just before (`Captured::unchanged`:
//! every input of its Python merge compared, the native frames the walk took
//! from its trail at the same depth excepted) and no module was classified
//! since. A training step launches the same sequence of stacks step after
//! step: a stack is also known, by comparing, when it is the one that
//! followed the thread's last two stacks the last time they came (the table
//! keeps each stack's layout, the words its hash is taken over, for that).
//! The counters the log reports are kept per thread, with plain stores
//! (`tally`). A stack seen for
//! the first time is copied into that table's preallocated arena, still without
//! a lock or `malloc`; when the table is full the launch gets no stack id, and
//! is counted. After a `dlopen` (the loader's counters say so), the first
//! capture adds just the new modules (reading their headers in place; it
//! allocates), and the flush thread later folds them into a rebuilt table;
//! after a `dlclose` the first capture rebuilds the table itself (counted in
//! the log), since a library loaded later may lie where the unloaded one was:
//! a module is known by its address, path and build id, never by its address
//! alone. A thread's
//! first capture allocates its frame buffer. A stack taken in a signal handler
//! goes on through the signal frame into the interrupted code.
//!
//! # What a stack holds
//! Innermost first, the application's call into the CUDA API (frames of the
//! injection library, libcupti, libcuda and libcudart are left out), down to the
//! root. Python frames (CPython 3.10–3.13) replace the interpreter's eval-loop
//! frames. A stack stops early at code without unwind information (JIT code: an
//! unknown frame), at the depth cap (`gpuperf_unwind::MAX_FRAMES`, 256 frames),
//! or when a read fails; the `STACK` record says why, and gpuperf counts such
//! stacks as truncated.
//!
//! # CUDA graphs
//! Graph nodes get the stack of the call that made them (`graphs`).
//!
//! `GPUPERF_STACKS=0` turns all of this off.

use std::cell::RefCell;
use std::ffi::c_void;
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};

use gpuperf_merge::model::{Module, Note, Record, Stack, StackEnd as End, StackFrame, StringTable};
use gpuperf_merge::recording::env;
use gpuperf_unwind::python::PythonStatus;
use gpuperf_unwind::{Captured, Frame, LocalUnwinder, MAX_FRAMES, Options, StackEnd, Trail};
use xxhash_rust::xxh3::xxh3_128;

use crate::seen::{Miss, Seen};

mod graphs;
mod tally;

use graphs::NodeMap;
pub use graphs::{
    GRAPHNODE_CLONED, GRAPHNODE_CREATED, GRAPHNODE_DESTROY_STARTING, is_graph_copy_callback,
};
use tally::{Count, Held, Tallies};

/// Modules the hidden-module table can mark; later ones are never hidden.
const MODULE_SLOTS: usize = 8192;

/// Whether stacks are taken: `GPUPERF_STACKS` unset, `1` or `on`; `0` or `off`
/// turn them off. Anything else is reported and taken as on.
pub fn enabled(var: impl Fn(&str) -> Option<std::ffi::OsString>) -> (bool, Option<String>) {
    match var(env::STACKS) {
        None => (true, None),
        Some(v) if v.is_empty() => (true, None),
        Some(v) => match env::parse_flag(&v) {
            Some(on) => (on, None),
            None => (
                true,
                Some(format!(
                    "{}={}: expected 1 or 0; taking stacks",
                    env::STACKS,
                    v.to_string_lossy()
                )),
            ),
        },
    }
}

/// A recorded API call, by (domain, callback id).
type ApiId = (u32, u32);

/// A graph node waiting to be written: (node, stack, API).
pub type PendingNode = (u64, u32, Option<ApiId>);

/// What [`Stacks::take_records`] took: the records to write first, then the
/// graph nodes.
pub struct Taken {
    /// Modules, stacks, NOTEs.
    pub records: Vec<Record>,
    /// Graph nodes, for [`Stacks::node_record`].
    pub nodes: Vec<PendingNode>,
}

/// `cuptiGetGraphNodeId`.
type GetGraphNodeId = unsafe extern "C" fn(*mut c_void, *mut u64) -> u32;

/// The in-process stack recorder of one process.
pub struct Stacks {
    unwinder: LocalUnwinder,
    /// By module id: frames of CUDA's libraries and of this library.
    hidden: Box<[AtomicBool]>,
    /// Modules looked at for `hidden`.
    classified: Mutex<usize>,
    /// The same count, read without the lock: a thread's last stack is taken
    /// again by its capture number only while it is unchanged.
    classified_count: AtomicUsize,
    /// File names of modules to hide, besides the CUDA prefixes.
    hide_names: Vec<String>,
    own_text: usize,
    table: Mutex<Table>,
    /// Every distinct stack, added to without locks (callbacks).
    seen: Seen,
    /// Stacks with no id: the table was full, or another thread was adding
    /// the same stack for too long.
    table_full: AtomicU64,
    contended: AtomicU64,
    /// Graph nodes not remembered for clones: the map was full.
    nodes_not_kept: AtomicU64,
    /// Graph node records dropped: `MAX_PENDING_NODES` were waiting already.
    nodes_not_written: AtomicU64,
    /// Graph nodes not remembered, and node records not queued, for lack of
    /// memory (the map or the queue could not grow).
    nodes_no_memory: [AtomicU64; 2],
    /// Module tables rebuilt by a capture (modules were unloaded), not by the
    /// flush thread.
    app_rebuilds: AtomicU64,
    graph_node_id: Option<GetGraphNodeId>,
    /// Captures, and those skipped for lack of stack; of the kept captures
    /// (not those a refresh retried: the unwinder's own counters count those
    /// too): truncated, ending at code without unwind info, cut at the depth
    /// cap, missing an outer interpreter's Python frames, with Python frames
    /// and with them cut at the depth cap (the native stack may be complete),
    /// empty, the frames kept (after the hidden ones), and those that took
    /// native frames from the thread's last capture, with how many. Per
    /// thread, summed when read.
    tallies: Tallies,
    python_noted: AtomicBool,
}

#[derive(Default)]
struct Table {
    /// The last stack id written.
    written: u32,
    /// Graph nodes not yet written: (node, stack, API (domain, cbid)).
    pending_nodes: Vec<PendingNode>,
    /// Every graph node seen: node → (stack, API), for clones.
    nodes: NodeMap,
    written_modules: Vec<bool>,
}

/// Stack a thread's first capture needs on the caller's stack to build the
/// thread's state (with room for unoptimized builds).
const STATE_STACK_NEED: usize = 32 << 10;

/// Whether the calling thread runs on its alternate signal stack with less
/// than [`STATE_STACK_NEED`] of it left. Asked only when the thread's state is
/// to be built: one `sigaltstack` call.
fn short_altstack() -> bool {
    altstack_room().is_some_and(|room| room < STATE_STACK_NEED)
}

/// The bytes left below this point of the alternate signal stack, when the
/// thread runs on it (a signal handler's).
fn altstack_room() -> Option<usize> {
    let mut ss = std::mem::MaybeUninit::<libc::stack_t>::zeroed();
    // SAFETY: a null new stack only reads the current one into `ss`, a valid
    // out-pointer.
    if unsafe { libc::sigaltstack(std::ptr::null(), ss.as_mut_ptr()) } != 0 {
        return None;
    }
    // SAFETY: zeroed, then filled by the successful call.
    let ss = unsafe { ss.assume_init() };
    if ss.ss_flags & libc::SS_ONSTACK == 0 {
        return None;
    }
    // A local's address stands for the stack pointer; the stack grows down.
    let here = std::ptr::addr_of!(ss) as usize;
    Some(here.saturating_sub(ss.ss_sp as usize))
}

/// Per-thread scratch: the frame buffer, the stack being hashed, and the
/// thread's last stack with its id.
struct ThreadStacks {
    frames: Box<[Frame]>,
    scratch: Scratch,
    /// The thread's last native walk: the next capture takes the outer frames
    /// from it where they provably did not change.
    trail: Trail,
}

/// [`Scratch::next_slot`] and [`Scratch::long_slot`] now, and once `then`
/// (the stack expected first) came too.
#[derive(Clone, Copy)]
struct Slots {
    next: usize,
    long: usize,
    then: u32,
    next_then: usize,
    long_then: usize,
}

/// What `identify` keeps between the captures of one thread.
struct Scratch {
    /// The stack being identified, as [`encode`] lays it out.
    words: Box<Layout>,
    /// The last stack identified, laid out the same (`last[..last_len]`), and
    /// its id (0: none). A launch loop takes the same stack launch after
    /// launch; it is then known by comparing, without hashing it or reading
    /// the shared table. Identifying a stack swaps the two buffers.
    last: Box<Layout>,
    last_len: usize,
    last_id: u32,
    /// The capture number ([`Captured::serial`]) that `last` came from (0:
    /// unknown), and the modules classified then.
    last_serial: u64,
    last_classified: usize,
    /// Modules classified when what the thread's trail keeps was kept.
    kept_classified: usize,
    /// The last capture's frames of the hidden modules (innermost): noted
    /// with its walk when kept ([`gpuperf_unwind::Captured::note`]).
    hidden: u32,
    /// By the last two stacks' ids (hashed, [`Scratch::next_slot`]): the id
    /// of the stack that followed them when they last came (0: none). A
    /// training step launches the same sequence of stacks step after step,
    /// each rarely equal to the one before: the expected stack is checked by
    /// comparing its layout with the one stored in the shared table, without
    /// hashing it or looking it up, and the unwinder proves the walk kept for
    /// it unchanged instead of walking.
    next: Box<[u32]>,
    /// The same by the last [`LONG`] stacks' ids (hashed over `recent`,
    /// [`Scratch::long_slot`]), asked first: autograd's thread runs the
    /// backward pass's operators in an order where the last two often came
    /// before other stacks at other points of a step (83 % of its stacks
    /// were the one that followed the last two in a GPT-2 training step, 97 %
    /// the one that followed the last eight). The last two different ones,
    /// the latest first: a model's layers launch the same stacks, and the
    /// last eight of one layer's are followed by the next layer's first at
    /// every layer but the last: the latest alone would be wrong twice a step
    /// there. (Its slot was read for the capture just made, so updating it
    /// costs no cache miss; `next`'s is written without being read.)
    next_long: Box<[[u32; 2]]>,
    /// The last [`LONG`] ids, the newest (the last stack's, `last_id`) at
    /// `recent_at`: the keys of both `next` tables.
    recent: [u32; LONG],
    recent_at: usize,
    /// [`Scratch::expected_ids`].
    upcoming: [u32; 2],
    /// The table slots [`Scratch::prefetch_followed`] hashed, for
    /// [`Scratch::followed`] to use instead of hashing `recent` again.
    slots: Option<Slots>,
    /// The thread's own counters ([`tally`]); `None`: the shared ones.
    tally: Option<Held>,
}

impl Scratch {
    #[cfg(test)]
    fn new() -> Scratch {
        Scratch::try_new().expect("memory for a thread's scratch")
    }

    /// A thread's scratch, or `None` when memory is short (see
    /// [`Stacks::capture`]).
    fn try_new() -> Option<Scratch> {
        use gpuperf_unwind::fallible::slice;
        // Built on the heap: an array literal is built on the stack first in
        // unoptimized builds.
        let layout =
            || -> Option<Box<Layout>> { slice(LAYOUT_WORDS, 0).and_then(|s| s.try_into().ok()) };
        Some(Scratch {
            words: layout()?,
            last: layout()?,
            last_len: 0,
            last_id: 0,
            last_serial: 0,
            last_classified: 0,
            kept_classified: 0,
            hidden: 0,
            next: slice(NEXT_SLOTS, 0)?,
            next_long: slice(NEXT_SLOTS, [0; 2])?,
            recent: [0; LONG],
            recent_at: 0,
            upcoming: [0; 2],
            slots: None,
            tally: None,
        })
    }

    /// Where [`Scratch::next`] keeps the stack expected after the last two.
    #[inline(always)]
    fn next_slot(&self) -> usize {
        // The newest of `recent` is the last stack (`last_id`).
        let before_last = self.recent[(self.recent_at + LONG - 1) % LONG];
        let k = before_last.wrapping_mul(0x9e37_79b1) ^ self.recent[self.recent_at];
        (k.wrapping_mul(0x85eb_ca77) >> (32 - NEXT_BITS)) as usize
    }

    /// The ids of the stacks expected next, the likelier first (0: none;
    /// maybe the last again): the last two different ones that followed the
    /// last [`LONG`] when they came, else the one that followed the last two.
    /// Looked up when the last came ([`Scratch::followed`]): the look-up's
    /// cache miss then delays nothing, where at the next capture's start all
    /// its work waits for it.
    fn expected_ids(&self) -> [u32; 2] {
        self.upcoming
    }

    /// [`Scratch::expected_ids`], looked up.
    fn look_up_expected(&self) -> [u32; 2] {
        self.look_up_at(self.next_slot(), self.long_slot())
    }

    /// [`Scratch::look_up_expected`] with its slots hashed.
    #[inline(always)]
    fn look_up_at(&self, next: usize, long: usize) -> [u32; 2] {
        match self.next_long.get(long).copied() {
            Some(ids) if ids[0] != 0 => ids,
            _ => [self.next.get(next).copied().unwrap_or(0), 0],
        }
    }

    /// Where [`Scratch::next_long`] keeps the stack expected after the last
    /// [`LONG`].
    #[inline(always)]
    fn long_slot(&self) -> usize {
        self.long_slot_after(None)
    }

    /// [`Scratch::long_slot`] once `then` came too (the oldest dropped).
    #[inline(always)]
    fn long_slot_after(&self, then: Option<u32>) -> usize {
        let mut k: u32 = 0;
        let first = if then.is_some() { 2 } else { 1 };
        for i in first..=LONG {
            let id = self.recent[(self.recent_at + i) % LONG];
            k = (k ^ id).wrapping_mul(0x9e37_79b1);
        }
        if let Some(id) = then {
            k = (k ^ id).wrapping_mul(0x9e37_79b1);
        }
        (k.wrapping_mul(0x85eb_ca77) >> (32 - NEXT_BITS)) as usize
    }

    /// [`Scratch::next_slot`] once `then` came too.
    #[inline(always)]
    fn next_slot_after(&self, then: u32) -> usize {
        let k = self.recent[self.recent_at].wrapping_mul(0x9e37_79b1) ^ then;
        (k.wrapping_mul(0x85eb_ca77) >> (32 - NEXT_BITS)) as usize
    }

    /// Starts loading the lines of the tables that [`Scratch::followed`]
    /// will write and read once this capture is the stack expected (most
    /// are): out of cache after the program ran between two launches, they
    /// stalled it at the capture's end; loaded now, under the capture.
    /// The slots are kept for [`Scratch::followed`]: `recent` does not
    /// change in between.
    #[inline(always)]
    fn prefetch_followed(&mut self) {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        fn line<T>(table: &[T], slot: usize) -> *const i8 {
            table.as_ptr().wrapping_add(slot).cast()
        }
        let then = self.upcoming[0];
        let s = Slots {
            next: self.next_slot(),
            long: self.long_slot(),
            then,
            next_then: self.next_slot_after(then),
            long_then: self.long_slot_after(Some(then)),
        };
        self.slots = Some(s);
        let lines = [
            line(&self.next, s.next),
            line(&self.next_long, s.long),
            line(&self.next_long, s.long_then),
            line(&self.next, s.next_then),
        ];
        for p in lines {
            // SAFETY: a prefetch reads nothing and never faults; the
            // addresses lie in the tables anyway (slots are masked).
            unsafe { _mm_prefetch::<_MM_HINT_T0>(p) };
        }
    }

    /// The id of a stack expected next ([`Scratch::expected_ids`]), if
    /// `words[..len]` (laid out by [`encode`]) is that stack: its layout as
    /// `seen` stored it. Not the last stack, which [`Scratch::same_as_last`]
    /// compared.
    fn expected(&self, len: usize, seen: &Seen) -> Option<u32> {
        self.expected_ids()
            .into_iter()
            .find(|&id| id != 0 && id != self.last_id && seen.layout(id) == self.words.get(..len))
    }

    /// Stack `id` followed the last two: expected after them next time. Then
    /// the last becomes the one before; `id` becomes the last with
    /// [`Scratch::remember`], unless it is the last again.
    fn followed(&mut self, id: u32) {
        let hashed = self.slots.take();
        let (next, long) = match hashed {
            Some(s) => (s.next, s.long),
            None => (self.next_slot(), self.long_slot()),
        };
        if let Some(n) = self.next.get_mut(next) {
            *n = id;
        }
        // The latest first, and the one before it that differs.
        if let Some(n) = self.next_long.get_mut(long)
            && n[0] != id
        {
            *n = [id, n[0]];
        }
        self.recent_at = (self.recent_at + 1) % LONG;
        self.recent[self.recent_at] = id;
        self.upcoming = match hashed {
            Some(s) if s.then == id => self.look_up_at(s.next_then, s.long_then),
            _ => self.look_up_expected(),
        };
    }

    /// The id of the last stack, if the unwinder proved this capture's
    /// frames unchanged since the capture that stack came from, and no module
    /// was classified since (a module newly hidden changes the frames kept).
    fn proven_last(&self, c: &Captured, classified: usize) -> Option<u32> {
        (self.last_id != 0
            && c.unchanged
            && self.last_serial != 0
            && self.last_serial.checked_add(1) == Some(c.serial)
            && self.last_classified == classified)
            .then_some(self.last_id)
    }

    /// The id of the last stack, if `words[..len]` (laid out by [`encode`])
    /// is that stack: every field of every frame, the end and the Python cut
    /// compared at once.
    fn same_as_last(&self, len: usize) -> Option<u32> {
        (self.last_id != 0 && self.last_len == len && self.last.get(..len) == self.words.get(..len))
            .then_some(self.last_id)
    }

    /// Stack `id` was taken whole from what the unwinder kept for it: it
    /// follows the last two, and becomes the last, without its layout (none
    /// was made), so that no layout is compared with it.
    fn took(&mut self, id: u32, classified: usize) {
        self.followed(id);
        self.last_id = id;
        self.last_len = usize::MAX;
        self.last_serial = 0;
        self.last_classified = classified;
    }

    /// `words[..len]` becomes the last stack, with its id.
    fn remember(&mut self, len: usize, id: u32) {
        std::mem::swap(&mut self.words, &mut self.last);
        self.last_len = len;
        self.last_id = id;
    }
}

/// Two words that tell frames apart: the kind (bits 0-1 of the first) and
/// every field (the first below bit 35).
#[inline(always)]
fn frame_words(f: &Frame) -> [u64; 2] {
    match *f {
        Frame::Native {
            module,
            offset,
            return_address,
        } => [
            u64::from(module.0) << 2 | u64::from(return_address) << 34,
            offset,
        ],
        Frame::Python { code, instruction } => [u64::from(code.0) << 2 | 1, u64::from(instruction)],
        Frame::Unknown { address } => [2, address],
    }
}

/// The top two bits of a frame's first word in a [`Layout`]: how the frame is
/// laid out, and so how many words it takes.
const NATIVE_WORD: u64 = 0;
const PYTHON_WORD: u64 = 1 << 62;
const TWO_WORDS: u64 = 2 << 62;

/// A frame in one word, where its fields fit: a native frame with a module id
/// below 2^21 and an offset below 2^40 (an address in the file: 1 TiB), or a
/// Python frame with a code id below 2^30. The frames of real stacks fit;
/// [`frame_layout`] lays out any other in two words.
#[inline(always)]
fn one_word(f: &Frame) -> Option<u64> {
    match *f {
        Frame::Native {
            module,
            offset,
            return_address,
        } if (u64::from(module.0) >> 21 | offset >> 40) == 0 => {
            Some(NATIVE_WORD | u64::from(return_address) << 61 | u64::from(module.0) << 40 | offset)
        }
        Frame::Python { code, instruction } if code.0 >> 30 == 0 => {
            Some(PYTHON_WORD | u64::from(code.0) << 32 | u64::from(instruction))
        }
        _ => None,
    }
}

/// A frame laid out, and the words it takes (the second word is written in
/// any case, and overwritten by the next frame when unused): [`one_word`]
/// where the fields fit, else its [`frame_words`] marked [`TWO_WORDS`]. The
/// top two bits of the first word tell these apart, so a layout is read back
/// frame by frame without ambiguity: two stacks are laid out alike only when
/// they are the same stack.
#[inline(always)]
fn frame_layout(f: &Frame) -> ([u64; 2], usize) {
    match one_word(f) {
        Some(w) => ([w, 0], 1),
        None => {
            let [a, b] = frame_words(f);
            ([TWO_WORDS | a, b], 2)
        }
    }
}

/// [`Scratch::next`] holds `1 << NEXT_BITS` ids (16 KiB a thread; 32 KiB for
/// [`Scratch::next_long`]'s pairs): room for the contexts of a training
/// step's stacks (a few hundred), and for collisions.
const NEXT_BITS: u32 = 12;
const NEXT_SLOTS: usize = 1 << NEXT_BITS;
/// The stacks [`Scratch::next_long`] is keyed by.
const LONG: usize = 8;

/// Room for two words per frame, and one for the end.
const LAYOUT_WORDS: usize = 2 * MAX_FRAMES + 1;

/// A stack laid out by [`encode`].
type Layout = [u64; LAYOUT_WORDS];

thread_local! {
    static THREAD: RefCell<Option<ThreadStacks>> = const { RefCell::new(None) };
}

impl Stacks {
    /// Reads the module table and finds the CPython, if any. Allocates; call it
    /// once, at initialization. `cupti` is the loaded libcupti, whose frames are
    /// hidden like CUDA's.
    pub fn new(cupti: &Path) -> Stacks {
        let unwinder = LocalUnwinder::new(Options::default());
        let mut hide_names = Vec::new();
        if let Some(n) = cupti.file_name() {
            hide_names.push(n.to_string_lossy().into_owned());
        }
        // SAFETY: loading the libcupti that the recorder already loaded only
        // raises its reference count; the symbol, when present, has CUPTI's
        // `CUptiResult cuptiGetGraphNodeId(CUgraphNode, uint64_t *)` signature.
        let graph_node_id = unsafe {
            libloading::Library::new(cupti).ok().and_then(|lib| {
                let f = lib
                    .get::<GetGraphNodeId>(b"cuptiGetGraphNodeId\0")
                    .ok()
                    .map(|s| *s);
                // Never unloaded, like the recorder's handle.
                std::mem::forget(lib);
                f
            })
        };
        let s = Stacks {
            unwinder,
            hidden: (0..MODULE_SLOTS).map(|_| AtomicBool::new(false)).collect(),
            classified: Mutex::new(0),
            classified_count: AtomicUsize::new(0),
            hide_names,
            own_text: Stacks::new as *const () as usize,
            table: Mutex::new(Table::default()),
            seen: Seen::new(),
            table_full: AtomicU64::new(0),
            contended: AtomicU64::new(0),
            nodes_not_kept: AtomicU64::new(0),
            nodes_not_written: AtomicU64::new(0),
            nodes_no_memory: [AtomicU64::new(0), AtomicU64::new(0)],
            app_rebuilds: AtomicU64::new(0),
            graph_node_id,
            tallies: Tallies::new(),
            python_noted: AtomicBool::new(false),
        };
        s.classify();
        s
    }

    /// Marks the modules seen since the last call that are CUDA's or ours.
    /// Runs on the application's threads after a `dlopen`: where memory is
    /// short the new modules stay unclassified, and the next call tries again.
    fn classify(&self) {
        let mut done = self.classified.lock().unwrap_or_else(|e| e.into_inner());
        let Some(modules) = self.unwinder.try_modules_from(*done) else {
            return;
        };
        for (i, m) in modules.iter().enumerate().map(|(i, m)| (i + *done, m)) {
            // A `Cow`: allocates only for a name that is not UTF-8.
            let name = m
                .path
                .file_name()
                .map(|n| n.to_string_lossy())
                .unwrap_or_default();
            let cuda = ["libcuda.so", "libcudart.so", "libcupti.so", "libcupti"]
                .iter()
                .any(|p| name.starts_with(p));
            let own = m.text.contains(&(self.own_text as u64));
            if (cuda || own || self.hide_names.iter().any(|h| *h == name))
                && let Some(h) = self.hidden.get(i)
            {
                h.store(true, Relaxed);
            }
        }
        *done += modules.len();
        self.classified_count.store(*done, Relaxed);
    }

    fn is_hidden(&self, f: &Frame) -> bool {
        match *f {
            Frame::Native { module, .. } => self
                .hidden
                .get(module.0 as usize)
                .is_some_and(|h| h.load(Relaxed)),
            _ => false,
        }
    }

    /// Takes the calling thread's stack and returns its id. Called inside the
    /// API-enter callback.
    pub fn capture(&self) -> u32 {
        THREAD
            .try_with(|t| self.capture_on(&mut t.borrow_mut(), true))
            // The thread's state is destroyed (a call from a destructor at
            // thread exit, or from an atexit handler after `exit` began):
            // buffers for this capture only.
            .unwrap_or_else(|_| self.capture_on(&mut None, false))
    }

    /// [`Stacks::capture`] with the thread's state, built first if `None`
    /// (`live`: the thread's own, kept; else for this capture only).
    /// Building it takes more stack than a capture, which runs on the
    /// unwinder's own stack: on a small alternate signal stack it could
    /// overflow it. Such a capture is skipped, and counted as one; so is one
    /// whose state could not be allocated (tried again at the next capture).
    #[inline(never)]
    fn capture_on(&self, t: &mut Option<ThreadStacks>, live: bool) -> u32 {
        let why = match t {
            Some(t) => return self.capture_into(t),
            None if short_altstack() => Count::NoStack,
            None => match self.build_state(t, live) {
                Some(t) => return self.capture_into(t),
                None => Count::NoMemory,
            },
        };
        let n = self.tallies.counter(None);
        n.add(Count::Captures, 1);
        n.add(why, 1);
        0
    }

    /// Builds a thread's state into `slot`; `None` when memory is short. In
    /// a frame of its own: the state passes through its temporaries (1 KiB
    /// each in unoptimized builds), gone by the time the capture runs on a
    /// stack that may be 16 KiB. Built on the heap (`Box::new([…; N])`
    /// builds the array on the stack first in unoptimized builds) and
    /// fallibly: inside the application's CUDA call, where memory may be
    /// short. A live thread's state takes counters of its own; buffers for
    /// one capture count in the shared ones.
    #[inline(never)]
    fn build_state<'t>(
        &self,
        slot: &'t mut Option<ThreadStacks>,
        live: bool,
    ) -> Option<&'t mut ThreadStacks> {
        let frames = gpuperf_unwind::fallible::slice(MAX_FRAMES, Frame::default())?;
        let mut scratch = Scratch::try_new()?;
        let trail = Trail::try_new(MAX_FRAMES)?;
        scratch.tally = live.then(|| self.tallies.take()).flatten();
        Some(slot.insert(ThreadStacks {
            frames,
            scratch,
            trail,
        }))
    }

    /// Captures and identifies the stack; everything after reading the
    /// registers runs on the unwinder's scratch stack, but for a capture
    /// taken whole where the caller has room (`identify` is then short).
    #[inline(never)]
    fn capture_into(&self, t: &mut ThreadStacks) -> u32 {
        self.tallies
            .counter(t.scratch.tally.as_ref())
            .add(Count::Captures, 1);
        let ThreadStacks {
            frames,
            scratch,
            trail,
        } = t;
        // The stacks expected next: the unwinder proves the walk kept for
        // one of them (and the capture made of it) unchanged instead of
        // walking, or walks. A module newly hidden changes the id of the
        // same frames: what was kept under the old ids is dropped.
        let classified = self.classified_count.load(Relaxed);
        if scratch.kept_classified != classified {
            trail.forget_kept();
            scratch.kept_classified = classified;
        }
        trail.expect(scratch.expected_ids());
        scratch.prefetch_followed();
        // Once: CPython's main thread is asked to count destroyed code
        // objects (3.11+), which spares proofs of kept chains their code
        // objects. A CUDA call is the program's own code, where queuing that
        // request may take the interpreter's lock; a signal handler's (on
        // its alternate stack) is not.
        if let Some(py) = self.unwinder.python() {
            py.watch_codes(|| altstack_room().is_none());
        }
        let mut r = self
            .unwinder
            .capture_then_reusing(0, frames, trail, |f, c| self.identify(f, c, scratch, true));
        if r == Ok(None) {
            // The module table was refreshed for a library loaded since: the
            // first launch from it pays for that, later ones find it.
            r = self
                .unwinder
                .capture_then_reusing(0, frames, trail, |f, c| self.identify(f, c, scratch, false));
        }
        match r {
            Ok(id) => {
                let id = id.unwrap_or(0);
                if id != 0 && !trail.keep_last(id, scratch.hidden) && trail.kept_short_of_memory() {
                    // A walk (not one taken from the kept ones) is kept for
                    // when this stack is expected again, with its hidden
                    // frames; not where the thread's buffers for them could
                    // not be allocated.
                    self.tallies
                        .counter(scratch.tally.as_ref())
                        .add(Count::NotKeptNoMemory, 1);
                }
                id
            }
            Err(StackEnd::NoStackLeft) => {
                self.tallies
                    .counter(scratch.tally.as_ref())
                    .add(Count::NoStack, 1);
                0
            }
            Err(_) => 0,
        }
    }

    /// The id of a captured stack; `None` when the module table was stale and
    /// `may_refresh` let this refresh it (capture again).
    fn identify(
        &self,
        frames: &[Frame],
        c: Captured,
        scratch: &mut Scratch,
        may_refresh: bool,
    ) -> Option<u32> {
        // Stale: modules were loaded or unloaded since the table was read.
        // A frame in a new module ends the walk; but after an unload, a
        // library loaded where the unloaded one was (the loader reuses the
        // range) has frames the stale table places in the old one: so any
        // stale capture refreshes and walks again, and the new file gets a
        // module id of its own (modules are known by address, path and build
        // id). Once per `dlopen` or `dlclose`. Not for a capture taken whole:
        // its frames are those of a walk kept with modules still loaded (an
        // unload drops what was kept), and it may run on the caller's stack,
        // where reading files does not belong; the flush thread refreshes.
        if may_refresh && !c.whole && self.unwinder.needs_refresh() {
            scratch.last_serial = 0;
            // Only the modules loaded since are read (the whole table after
            // an unload); the flush thread folds them into the table later.
            let before = self.unwinder.stats().table_rebuilds;
            self.unwinder.add_loaded();
            if self.unwinder.stats().table_rebuilds != before {
                // Modules were unloaded too: the table was rebuilt here.
                self.app_rebuilds.fetch_add(1, Relaxed);
            }
            self.classify();
            return None;
        }
        let classified = self.classified_count.load(Relaxed);
        // A whole capture kept since the modules were last classified: its
        // hidden frames are the number noted with it, and its frames (left
        // where the unwinder keeps them, out of cache) are not read.
        let noted = c.whole && scratch.kept_classified == classified;
        let first = match noted {
            true => (c.note as usize).min(frames.len()),
            false => frames
                .iter()
                .position(|f| !self.is_hidden(f))
                .unwrap_or(frames.len()),
        };
        scratch.hidden = first as u32;
        let frames = &frames[first..];
        let n = self.tallies.counter(scratch.tally.as_ref());
        let unknown_end = c.ends_unknown && !frames.is_empty();
        n.add(Count::Truncated, u64::from(c.end.is_truncated()));
        n.add(Count::UnknownEnd, u64::from(unknown_end));
        n.add(Count::DepthCut, u64::from(c.end == StackEnd::DepthLimit));
        n.add(Count::PythonCut, u64::from(c.end == StackEnd::PythonCut));
        n.add(Count::PythonDepthCut, u64::from(c.python_truncated));
        n.add(Count::WithPython, u64::from(c.python_frames > 0));
        n.add(Count::Empty, u64::from(frames.is_empty()));
        n.add(Count::KeptFrames, frames.len() as u64);
        n.add(Count::Reused, u64::from(c.reused > 0));
        n.add(Count::ReusedFrames, u64::from(c.reused));
        n.add(Count::KeptWalk, u64::from(c.kept));
        n.add(Count::KeptWhole, u64::from(c.whole));
        if noted && c.tag != 0 {
            // The capture kept under an id expected, proven the same.
            let id = c.tag;
            scratch.took(id, classified);
            return Some(id);
        }
        // Known without hashing: proven unchanged by the unwinder, or laid out
        // the same as the last stack (`Err`: the layout's length, to hash).
        let known = match scratch.proven_last(&c, classified) {
            Some(id) => Ok(id),
            None => {
                let len = encode(frames, c.end, c.python_truncated, &mut scratch.words);
                scratch.same_as_last(len).ok_or(len)
            }
        };
        let len = match known {
            Ok(id) => {
                scratch.followed(id);
                scratch.last_serial = c.serial;
                scratch.last_classified = classified;
                return Some(id);
            }
            Err(len) => len,
        };
        // Whatever follows, `last` is no longer this capture's predecessor
        // unless remembered below.
        scratch.last_serial = 0;
        // A stack expected next, if this is it (its layout compared); else
        // hashed and looked up.
        let id = match scratch.expected(len, &self.seen) {
            Some(id) => id,
            None => {
                let words = &scratch.words[..len];
                match self
                    .seen
                    .id(layout_hash(words), frames, words, c.end, c.python_truncated)
                {
                    Ok(id) => id,
                    Err(Miss::Full) => {
                        self.table_full.fetch_add(1, Relaxed);
                        return Some(0);
                    }
                    Err(Miss::Contended) => {
                        self.contended.fetch_add(1, Relaxed);
                        return Some(0);
                    }
                }
            }
        };
        scratch.followed(id);
        scratch.remember(len, id);
        scratch.last_serial = c.serial;
        scratch.last_classified = classified;
        Some(id)
    }

    /// The records to write since the last call: modules, stacks, and a NOTE
    /// when Python frames were turned off; then the graph nodes, made into
    /// records one at a time by [`Stacks::node_record`] as they are written
    /// (a burst of instantiations leaves hundreds of thousands). Allocates;
    /// runs on the flush path. With `last` (the exit path's write, just before
    /// the trace is closed), stacks published after one still being copied are
    /// taken too: no later write would take them.
    pub fn take_records(&self, pid: u32, strings: &mut StringTable, last: bool) -> Taken {
        if (self.unwinder.needs_refresh() || self.unwinder.has_added_modules())
            && self.unwinder.refresh()
        {
            self.classify();
        }
        let (pending, nodes) = {
            let mut t = self.table.lock().unwrap_or_else(|e| e.into_inner());
            let mut pending = Vec::new();
            t.written = self.seen.published_from(t.written, last, |id, st| {
                pending.push((id, st.end, st.python_truncated, st.frames));
            });
            (pending, std::mem::take(&mut t.pending_nodes))
        };
        let mut out = Vec::new();
        if let Some(note) = self.python_note() {
            out.push(Record::Note(Note { pid, text: note }));
        }
        if pending.is_empty() && nodes.is_empty() {
            return Taken {
                records: out,
                nodes,
            };
        }
        // Modules first: a stack's frames name them.
        let mut used: Vec<u32> = pending
            .iter()
            .flat_map(|p| p.3.iter())
            .filter_map(|f| match *f {
                Frame::Native { module, .. } => Some(module.0),
                _ => None,
            })
            .collect();
        used.sort_unstable();
        used.dedup();
        let new: Vec<u32> = {
            let t = self.table.lock().unwrap_or_else(|e| e.into_inner());
            used.into_iter()
                .filter(|&m| !t.written_modules.get(m as usize).copied().unwrap_or(false))
                .collect()
        };
        if !new.is_empty() {
            let modules = self.unwinder.modules();
            let mut t = self.table.lock().unwrap_or_else(|e| e.into_inner());
            for m in new {
                let Some(info) = modules.get(m as usize) else {
                    continue;
                };
                if t.written_modules.len() <= m as usize {
                    t.written_modules.resize(m as usize + 1, false);
                }
                t.written_modules[m as usize] = true;
                out.push(Record::Module(Module {
                    pid,
                    id: m,
                    path: info.path.to_string_lossy().into_owned(),
                    build_id: info.build_id.clone(),
                    bias: info.bias,
                    text_start: info.text.start,
                    text_end: info.text.end,
                }));
            }
        }
        let python = self.unwinder.python();
        for (id, end, python_truncated, frames) in pending {
            let frames = frames
                .iter()
                .map(|f| match *f {
                    Frame::Native { module, offset, .. } => StackFrame::Native {
                        module: module.0,
                        offset: f.lookup_offset().unwrap_or(offset),
                    },
                    Frame::Python { code, instruction } => {
                        let r = python.and_then(|p| p.resolve(code, instruction));
                        let (function, file, line) = match r {
                            Some(r) => (r.function, r.file, r.line),
                            None => ("[unresolved Python frame]".to_owned(), String::new(), 0),
                        };
                        StackFrame::Python {
                            function: strings.intern(&function),
                            file: strings.intern(&file),
                            line: (line != 0).then_some(line),
                        }
                    }
                    Frame::Unknown { address } => StackFrame::Unknown { address },
                })
                .collect();
            out.push(Record::Stack(Stack {
                pid,
                id,
                end: end_of(end),
                python_truncated,
                frames,
            }));
        }
        Taken {
            records: out,
            nodes,
        }
    }

    /// A NOTE, once, when Python frames were turned off.
    fn python_note(&self) -> Option<String> {
        let text = match self.unwinder.python_status() {
            PythonStatus::Disabled { minor, reason } => format!(
                "Python frames turned off for this process (CPython 3.{minor}): {reason}; \
                 stacks keep their native frames"
            ),
            PythonStatus::Unsupported(v) => format!(
                "Python {v} is not supported (3.10 to 3.13 are); stacks have native frames only"
            ),
            _ => return None,
        };
        (!self.python_noted.swap(true, Relaxed)).then_some(text)
    }

    /// One line for the log at exit.
    pub fn summary(&self) -> String {
        let s = self.unwinder.stats();
        let distinct = self.seen.len();
        let n = |c: Count| self.tallies.get(c);
        format!(
            "stacks: {} taken ({} distinct), {} skipped for lack of stack, {} skipped for \
             lack of memory (the thread's capture state could not be allocated), {} without an \
             id (stack table full), {} without an id (contended), {} truncated \
             ({} at code without unwind info, {} at the depth cap, {} missing an outer \
             interpreter's Python frames, {} busy: every unwind cache in use; {} waited \
             for one), {} with no frame outside CUDA's libraries, {} with Python frames \
             ({} cut at the depth cap); Python: {:?}{}, \
             {} stacks without their Python frames (a chain that could not be read \
             safely{}), {} memory probes, {} reused their outer Python frames from an earlier capture; graph nodes held: {} ({} not kept: map full; \
             {} records dropped: too many waiting); module table: {} rebuilt ({} on an \
             application thread), {} times modules added beside it; {} stacks crossed \
             code without unwind info (by frame pointer or stack scan; {} past a stale \
             return address); {:.1} frames per \
             capture, {} reused part of the last capture (native frames proven unchanged; \
             {:.1} frames of each on average), {} took the whole native walk kept for the \
             stack expected next (proven unchanged, not walked), {} of them the whole \
             capture kept with it (its Python frames proven the same, not read; {} of \
             those on the calling thread's own stack, without the switch to the \
             unwinder's), {} walks not kept for lack of memory (walked again when next \
             expected)",
            n(Count::Captures),
            distinct,
            n(Count::NoStack),
            n(Count::NoMemory),
            self.table_full.load(Relaxed),
            self.contended.load(Relaxed),
            n(Count::Truncated),
            n(Count::UnknownEnd),
            n(Count::DepthCut),
            n(Count::PythonCut),
            s.busy,
            s.cache_waits,
            n(Count::Empty),
            n(Count::WithPython),
            n(Count::PythonDepthCut),
            self.unwinder.python_status(),
            match self.unwinder.python() {
                Some(p) if p.watching_codes() =>
                    " (destroyed code objects counted: kept chains proven without their code objects while none is destroyed)",
                _ => "",
            },
            s.python_skipped,
            self.unwinder
                .python()
                .and_then(|p| p.last_skip_reason())
                .map_or_else(String::new, |r| format!("; the last: {r}")),
            s.python_probes,
            s.python_reused,
            self.table.lock().map_or(0, |t| t.nodes.len()),
            self.nodes_not_kept.load(Relaxed),
            self.nodes_not_written.load(Relaxed),
            s.table_rebuilds,
            self.app_rebuilds.load(Relaxed),
            s.modules_added,
            s.recovered_stacks,
            s.stale_passed_stacks,
            {
                // Sums read one after the other, while threads may count.
                let kept = n(Count::Captures).saturating_sub(n(Count::NoStack));
                n(Count::KeptFrames) as f64 / kept.max(1) as f64
            },
            n(Count::Reused),
            n(Count::ReusedFrames) as f64 / n(Count::Reused).max(1) as f64,
            n(Count::KeptWalk),
            n(Count::KeptWhole),
            s.whole_on_caller_stack,
            n(Count::NotKeptNoMemory),
        )
    }
}

fn end_of(e: StackEnd) -> End {
    match e {
        StackEnd::Root => End::Root,
        StackEnd::NoUnwindInfo => End::NoUnwindInfo,
        StackEnd::ModuleNotInTable => End::ModuleNotInTable,
        StackEnd::StackReadFailed => End::StackReadFailed,
        StackEnd::UnwindFailed => End::UnwindFailed,
        StackEnd::DepthLimit => End::DepthLimit,
        StackEnd::Busy => End::Busy,
        StackEnd::PythonCut => End::PythonCut,
        _ => End::Other(u8::MAX),
    }
}

/// A stack's identity, laid out in `buf` (one fixed buffer per thread, so
/// that identifying never allocates): [`frame_layout`] of each frame, one word
/// each in real stacks, then one word for its end and Python cut; returns the
/// words written. It is what [`Scratch::same_as_last`] compares, and its
/// XXH3-128 ([`layout_hash`]) is the stack's id in the shared table.
fn encode(frames: &[Frame], end: StackEnd, python_truncated: bool, buf: &mut Layout) -> usize {
    let frames = &frames[..frames.len().min(MAX_FRAMES)];
    // A word a frame while the frames fit in one (real stacks: all of them),
    // word `i` for frame `i`: no bounds to check.
    let mut len = 0;
    for (f, w) in frames.iter().zip(buf.iter_mut()) {
        let Some(word) = one_word(f) else { break };
        *w = word;
        len += 1;
    }
    for f in &frames[len..] {
        let (words, n) = frame_layout(f);
        // At most 2 words per frame before this one: in bounds.
        buf[len..len + 2].copy_from_slice(&words);
        len += n;
    }
    buf[len] = u64::from(end_of(end).code()) << 1 | u64::from(python_truncated);
    len + 1
}

/// The XXH3-128 of a layout's words (in memory order).
fn layout_hash(words: &[u64]) -> u128 {
    // SAFETY: the bytes of initialized `u64`s, which have no padding, read
    // while `words` is borrowed; `u8` needs no alignment.
    let bytes =
        unsafe { std::slice::from_raw_parts(words.as_ptr().cast::<u8>(), size_of_val(words)) };
    xxh3_128(bytes)
}

#[cfg(test)]
mod tests {
    use gpuperf_unwind::ModuleId;

    use super::graphs::{GRAPH_THREAD, NodeEvent};
    use super::*;

    /// Held by a test that loads or unloads a library, and by one whose
    /// captures must see the same modules throughout: the loader's counters
    /// are the process's, so a library unloaded by another test has the next
    /// capture rebuild its module table and walk afresh.
    pub(super) static SAME_MODULES: Mutex<()> = Mutex::new(());

    fn n(module: u32, offset: u64) -> Frame {
        Frame::Native {
            module: ModuleId(module),
            offset,
            return_address: true,
        }
    }

    /// A stack's id hash, as `identify` computes it.
    fn hash(frames: &[Frame], end: StackEnd, python_truncated: bool, buf: &mut Layout) -> u128 {
        let len = encode(frames, end, python_truncated, buf);
        layout_hash(&buf[..len])
    }

    /// The frames and end word a layout holds, read back as the top bits of
    /// each frame's first word say.
    fn decode(words: &[u64]) -> (Vec<Frame>, u64) {
        let mut frames = Vec::new();
        let mut i = 0;
        while i + 1 < words.len() {
            let w = words[i];
            let f = match w & 3 << 62 {
                NATIVE_WORD => Frame::Native {
                    module: ModuleId((w >> 40 & 0x1f_ffff) as u32),
                    offset: w & 0xff_ffff_ffff,
                    return_address: w >> 61 & 1 == 1,
                },
                PYTHON_WORD => Frame::Python {
                    code: gpuperf_unwind::CodeId((w >> 32 & 0x3fff_ffff) as u32),
                    instruction: w as u32,
                },
                TWO_WORDS => {
                    i += 1;
                    let b = words[i];
                    let fields = (w >> 2 & 0xffff_ffff) as u32;
                    match w & 3 {
                        0 => Frame::Native {
                            module: ModuleId(fields),
                            offset: b,
                            return_address: w >> 34 & 1 == 1,
                        },
                        1 => Frame::Python {
                            code: gpuperf_unwind::CodeId(fields),
                            instruction: b as u32,
                        },
                        _ => Frame::Unknown { address: b },
                    }
                }
                _ => panic!("no frame starts with {w:#x}"),
            };
            frames.push(f);
            i += 1;
        }
        assert_eq!(i + 1, words.len(), "the end word last");
        (frames, words[i])
    }

    #[test]
    fn a_layout_reads_back_as_its_stack_at_every_field_bound() {
        let native = |module: u32, offset: u64, return_address: bool| Frame::Native {
            module: ModuleId(module),
            offset,
            return_address,
        };
        let python = |code: u32, instruction: u32| Frame::Python {
            code: gpuperf_unwind::CodeId(code),
            instruction,
        };
        let frames = [
            native(0, 0, false),
            native((1 << 21) - 1, (1 << 40) - 1, true),
            native(1 << 21, 0x10, true),
            native(1, 1 << 40, false),
            native(u32::MAX, u64::MAX, true),
            python(0, 0),
            python((1 << 30) - 1, u32::MAX),
            python(1 << 30, 7),
            python(u32::MAX, u32::MAX),
            Frame::Unknown { address: 0 },
            Frame::Unknown { address: u64::MAX },
        ];
        let buf = &mut [0; LAYOUT_WORDS];
        for end in [StackEnd::Root, StackEnd::DepthLimit] {
            for cut in [false, true] {
                let len = encode(&frames, end, cut, buf);
                let (back, end_word) = decode(&buf[..len]);
                assert_eq!(back, frames);
                assert_eq!(
                    end_word,
                    u64::from(end_of(end).code()) << 1 | u64::from(cut)
                );
            }
        }
        // Real stacks take a word a frame.
        assert_eq!(encode(&frames[..2], StackEnd::Root, false, buf), 3);
        assert_eq!(encode(&frames[5..7], StackEnd::Root, false, buf), 3);
        // A full stack fits, every frame in two words.
        let deep = [Frame::Unknown { address: 1 }; MAX_FRAMES];
        let len = encode(&deep, StackEnd::DepthLimit, false, buf);
        assert_eq!(len, LAYOUT_WORDS);
        assert_eq!(decode(&buf[..len]).0, deep);
    }

    /// Whether `frames` is the scratch's last stack, as `identify` asks.
    fn known(
        s: &mut Scratch,
        frames: &[Frame],
        end: StackEnd,
        python_truncated: bool,
    ) -> Option<u32> {
        let len = encode(frames, end, python_truncated, &mut s.words);
        s.same_as_last(len)
    }

    #[test]
    fn hashes_differ_by_frame_order_end_and_length() {
        let a = [n(1, 0x10), n(2, 0x20)];
        let b = [n(2, 0x20), n(1, 0x10)];
        let buf = &mut [0; LAYOUT_WORDS];
        let h = hash(&a, StackEnd::Root, false, buf);
        assert_eq!(h, hash(&a, StackEnd::Root, false, buf));
        assert_ne!(h, hash(&b, StackEnd::Root, false, buf));
        assert_ne!(h, hash(&a, StackEnd::DepthLimit, false, buf));
        assert_ne!(h, hash(&a, StackEnd::Root, true, buf));
        assert_ne!(h, hash(&a[..1], StackEnd::Root, false, buf));
        // Nor does a frame's own address like a return address.
        let own = [Frame::Native {
            module: ModuleId(1),
            offset: 0x10,
            return_address: false,
        }];
        assert_ne!(
            hash(&a[..1], StackEnd::Root, false, buf),
            hash(&own, StackEnd::Root, false, buf)
        );
        // A Python frame never hashes like a native one with the same numbers.
        let p = [Frame::Python {
            code: gpuperf_unwind::CodeId(1),
            instruction: 0x10,
        }];
        assert_ne!(
            hash(&[n(1, 0x10)], StackEnd::Root, false, buf),
            hash(&p, StackEnd::Root, false, buf)
        );
    }

    #[test]
    fn the_last_stack_is_known_again_only_with_every_field_of_every_frame() {
        let mut scratch = Scratch::new();
        let a = [n(1, 0x10), n(2, 0x20), n(3, 0x30)];
        let len = encode(&a, StackEnd::Root, false, &mut scratch.words);
        scratch.remember(len, 7);
        assert_eq!(known(&mut scratch, &a, StackEnd::Root, false), Some(7));
        let python = Frame::Python {
            code: gpuperf_unwind::CodeId(2),
            instruction: 0x20,
        };
        let not_return = Frame::Native {
            module: ModuleId(2),
            offset: 0x20,
            return_address: false,
        };
        let others = [
            python,
            not_return,
            Frame::Unknown { address: 0x20 },
            n(2, 0x21),
            n(0x4_0002, 0x20),
        ];
        for f in others {
            let mut b = a;
            b[1] = f;
            assert_eq!(
                known(&mut scratch, &b, StackEnd::Root, false),
                None,
                "{f:?}"
            );
        }
        assert_eq!(known(&mut scratch, &a[..2], StackEnd::Root, false), None);
        assert_eq!(known(&mut scratch, &a, StackEnd::DepthLimit, false), None);
        assert_eq!(known(&mut scratch, &a, StackEnd::Root, true), None);
        assert_eq!(known(&mut scratch, &a, StackEnd::Root, false), Some(7));
    }

    /// A capture of `frames` that ended at the root, with no Python frames.
    fn captured(frames: &[Frame], serial: u64, unchanged: bool) -> Captured {
        Captured {
            len: frames.len(),
            end: StackEnd::Root,
            python_frames: 0,
            python_truncated: false,
            recovered: 0,
            reused: 0,
            serial,
            unchanged,
            kept: false,
            whole: false,
            ends_unknown: matches!(frames.last(), Some(Frame::Unknown { .. })),
            note: 0,
            tag: 0,
        }
    }

    #[test]
    fn a_repeated_stack_keeps_its_id_and_any_change_gets_its_own() {
        let s = Stacks::new(Path::new("/nonexistent/libcupti.so.13"));
        let mut scratch = Scratch::new();
        // Modules past the hidden-module table: never hidden.
        let a = [n(9000, 0x10), n(9001, 0x20), n(9002, 0x30)];
        let mut inner = a;
        inner[0] = n(9000, 0x14);
        let mut outer = a;
        outer[2] = n(9002, 0x34);
        let mut id = |frames: &[Frame], end: StackEnd, python_truncated: bool| {
            let c = Captured {
                end,
                python_truncated,
                ..captured(frames, 0, false)
            };
            s.identify(frames, c, &mut scratch, false).unwrap()
        };
        let first = id(&a, StackEnd::Root, false);
        assert_eq!(id(&a, StackEnd::Root, false), first);
        // Each differs from the last stack in one thing only: the innermost or
        // outermost frame, the length, how it ended, the Python cut.
        let others = [
            id(&inner, StackEnd::Root, false),
            id(&a, StackEnd::Root, false),
            id(&outer, StackEnd::Root, false),
            id(&a[..2], StackEnd::Root, false),
            id(&a, StackEnd::Root, false),
            id(&a, StackEnd::DepthLimit, false),
            id(&a, StackEnd::Root, true),
            id(&a, StackEnd::Root, false),
        ];
        assert_eq!(others[1], first);
        assert_eq!(others[4], first);
        assert_eq!(others[7], first);
        let distinct: std::collections::BTreeSet<u32> = others.iter().copied().collect();
        assert_eq!(distinct.len(), 6, "{others:?}");
        assert!(others.iter().all(|&i| i != 0), "{others:?}");
        // The stacks were each stored once, with the frames they were given.
        let mut stored = Vec::new();
        s.seen
            .published_after(0, |id, st| stored.push((id, st.frames.to_vec(), st.end)));
        assert_eq!(stored.len(), 6);
        assert!(stored.contains(&(others[2], outer.to_vec(), StackEnd::Root)));
    }

    #[test]
    fn the_stack_that_followed_the_last_two_is_expected_and_taken_only_when_equal() {
        let s = Stacks::new(Path::new("/nonexistent/libcupti.so.13"));
        let mut scratch = Scratch::new();
        let a = [n(9000, 0x10), n(9001, 0x20)];
        let b = [n(9000, 0x14), n(9001, 0x20)];
        let c = [n(9000, 0x18), n(9001, 0x20)];
        let mut c_other = c;
        c_other[1] = n(9001, 0x24);
        let id = |frames: &[Frame], scratch: &mut Scratch| {
            s.identify(frames, captured(frames, 0, false), scratch, false)
                .unwrap()
        };
        let first: Vec<u32> = [&a, &b, &c].map(|f| id(f, &mut scratch)).to_vec();
        assert_eq!(first, [1, 2, 3]);
        assert_eq!([id(&a, &mut scratch), id(&b, &mut scratch)], [1, 2]);
        // After a, b: c is expected, and known by its layout alone.
        let expect = |frames: &[Frame], scratch: &mut Scratch| {
            let len = encode(frames, StackEnd::Root, false, &mut scratch.words);
            scratch.expected(len, &s.seen)
        };
        assert_eq!(expect(&c, &mut scratch), Some(3));
        // Any other stack is not, down to the outermost frame, the end and
        // the Python cut.
        assert_eq!(expect(&c_other, &mut scratch), None);
        let len = encode(&c, StackEnd::DepthLimit, false, &mut scratch.words);
        assert_eq!(scratch.expected(len, &s.seen), None);
        let len = encode(&c, StackEnd::Root, true, &mut scratch.words);
        assert_eq!(scratch.expected(len, &s.seen), None);
        assert_eq!(id(&c_other, &mut scratch), 4);
        // Now c_other follows a, b (the last eight never came before: the
        // last two tell); c is still c.
        assert_eq!([id(&a, &mut scratch), id(&b, &mut scratch)], [1, 2]);
        assert_eq!(scratch.expected_ids(), [4, 0]);
        assert_eq!(expect(&c, &mut scratch), None);
        assert_eq!(expect(&c_other, &mut scratch), Some(4));
        assert_eq!(id(&c, &mut scratch), 3);
        // The same stack again is the last one, not an expected one.
        assert_eq!([id(&c, &mut scratch), id(&c, &mut scratch)], [3, 3]);
        assert_eq!(s.seen.len(), 4);
    }

    #[test]
    fn a_stack_proven_unchanged_takes_the_last_id_only_from_the_capture_just_before() {
        let s = Stacks::new(Path::new("/nonexistent/libcupti.so.13"));
        let mut scratch = Scratch::new();
        // Module 5 may be hidden later; the others lie past the table.
        let a = [n(5, 0x10), n(9001, 0x20), n(9002, 0x30)];
        let b = [n(9003, 0x40), n(9001, 0x20), n(9002, 0x30)];
        let mut id = |frames: &[Frame], serial: u64, unchanged: bool| {
            let c = captured(frames, serial, unchanged);
            s.identify(frames, c, &mut scratch, false).unwrap()
        };
        let ia = id(&a, 1, false);
        let ib = id(&b, 2, false);
        assert_ne!(ia, ib);
        // Proven unchanged since capture 2: its id, without comparing.
        assert_eq!(id(&b, 3, true), ib);
        // Capture 4 never reached `identify` (a retried capture): capture 5
        // is unchanged since 4, not since the stack identified last.
        assert_eq!(id(&a, 5, true), ia);
        // Without a capture number (no trail) nothing is taken unproven.
        assert_eq!(id(&b, 0, true), ib);
        assert_eq!(id(&a, 0, true), ia);
        // A module classified since (newly hidden) changes the frames kept.
        assert_eq!(id(&a, 6, false), ia);
        s.hidden[5].store(true, Relaxed);
        s.classified_count.fetch_add(1, Relaxed);
        let kept = id(&a, 7, true);
        assert_ne!(kept, ia);
        let mut stored = Vec::new();
        s.seen
            .published_after(0, |id, st| stored.push((id, st.frames.to_vec())));
        assert!(stored.contains(&(kept, a[1..].to_vec())), "{stored:?}");
    }

    #[test]
    fn the_stack_expected_next_is_the_one_that_followed_the_last_eight() {
        // A period of six where the pair (1, 2) is followed by 3 at one point
        // and by 4 at another: the last two cannot tell which comes.
        let period = [1, 2, 3, 1, 2, 4];
        let ids: Vec<u32> = period.iter().copied().cycle().take(6 * 5).collect();
        let mut scratch = Scratch::new();
        for (i, &id) in ids.iter().enumerate() {
            // Once a context of eight has come before (a period and two).
            if i >= 6 + LONG {
                assert_eq!(scratch.expected_ids()[0], id, "at {i}");
            }
            scratch.followed(id);
            scratch.last_id = id;
        }
    }

    /// The slots prefetched at a capture's start, for the stack expected,
    /// are the ones `followed` then writes and reads.
    #[test]
    fn the_slots_looked_up_after_a_stack_are_known_before_it() {
        let mut scratch = Scratch::new();
        for (i, id) in [7, 9, 7, 11, 7, 9, 13, 7, 9, 7, 11, 7, 9, 13, 5, 3]
            .into_iter()
            .enumerate()
        {
            let (long_after, next_after) = (
                scratch.long_slot_after(Some(id)),
                scratch.next_slot_after(id),
            );
            scratch.followed(id);
            assert_eq!(scratch.long_slot(), long_after, "at {i}");
            assert_eq!(scratch.next_slot(), next_after, "at {i}");
        }
    }

    /// `followed` after `prefetch_followed` uses the slots hashed there:
    /// the tables and expectations are those of hashing again, whether the
    /// stack that came is the one expected or not.
    #[test]
    fn following_with_the_slots_prefetched_matches_hashing_again() {
        let mut hashed = Scratch::new();
        let mut kept = Scratch::new();
        let ids = [1, 2, 3, 1, 2, 4].iter().copied().cycle().take(60);
        // Every seventh stack is one never seen: not the one expected.
        for (i, id) in ids.enumerate() {
            let id = if i % 7 == 6 { 100 + i as u32 } else { id };
            kept.prefetch_followed();
            assert!(kept.slots.is_some());
            kept.followed(id);
            hashed.followed(id);
            assert!(kept.slots.is_none(), "at {i}: the slots are used once");
            assert_eq!(kept.expected_ids(), hashed.expected_ids(), "at {i}");
            assert_eq!(kept.next, hashed.next, "at {i}");
            assert_eq!(kept.next_long, hashed.next_long, "at {i}");
        }
    }

    #[test]
    fn where_the_last_eight_repeat_layer_after_layer_both_stacks_that_followed_are_expected() {
        // Three layers of the same four stacks, then another: the last eight
        // of the last layer are those of the one before, which the next
        // layer's first followed.
        let step = [1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4, 5];
        let ids: Vec<u32> = step.iter().copied().cycle().take(step.len() * 6).collect();
        let mut scratch = Scratch::new();
        let mut first_wrong = 0;
        for (i, &id) in ids.iter().enumerate() {
            // From the second step on.
            if i >= step.len() + LONG {
                let expected = scratch.expected_ids();
                assert!(expected.contains(&id), "at {i}: {expected:?}");
                first_wrong += usize::from(expected[0] != id);
            }
            scratch.followed(id);
            scratch.last_id = id;
        }
        // Twice a step the latest alone was wrong: at the third layer's
        // first stack and at 5, after the same eight.
        assert!(first_wrong >= 4, "{first_wrong}");
    }

    #[test]
    fn a_whole_kept_capture_takes_the_expected_id_only_with_the_modules_classified_then() {
        let s = Stacks::new(Path::new("/nonexistent/libcupti.so.13"));
        let mut scratch = Scratch::new();
        let a = [n(5, 0x10), n(9001, 0x20), n(9002, 0x30)];
        let b = [n(9003, 0x40), n(9001, 0x20), n(9002, 0x30)];
        let plain = |frames: &[Frame]| captured(frames, 0, false);
        let ia = s.identify(&a, plain(&a), &mut scratch, false).unwrap();
        let ib = s.identify(&b, plain(&b), &mut scratch, false).unwrap();
        // The unwinder took the whole capture kept under an id expected:
        // that id, whatever frames it passes.
        let whole = Captured {
            whole: true,
            kept: true,
            tag: ia,
            ..plain(&b)
        };
        scratch.kept_classified = s.classified_count.load(Relaxed);
        assert_eq!(s.identify(&b, whole, &mut scratch, false), Some(ia));
        // A module classified since: the frames are identified again.
        s.hidden[5].store(true, Relaxed);
        s.classified_count.fetch_add(1, Relaxed);
        assert_eq!(s.identify(&b, whole, &mut scratch, false), Some(ib));
    }

    #[test]
    fn a_whole_kept_capture_counts_as_its_walk_did_from_its_note_alone() {
        let s = Stacks::new(Path::new("/nonexistent/libcupti.so.13"));
        let mut scratch = Scratch::new();
        s.hidden[5].store(true, Relaxed);
        s.classified_count.fetch_add(1, Relaxed);
        scratch.kept_classified = s.classified_count.load(Relaxed);
        // Two hidden frames, then the application's, ending at code without
        // unwind info.
        let a = [
            n(5, 0x10),
            n(5, 0x14),
            n(9001, 0x20),
            Frame::Unknown { address: 0x30 },
        ];
        let counts = |s: &Stacks| {
            [
                Count::KeptFrames,
                Count::UnknownEnd,
                Count::Empty,
                Count::KeptWhole,
            ]
            .map(|c| s.tallies.get(c))
        };
        let walked = s.identify(&a, captured(&a, 0, false), &mut scratch, false);
        assert_eq!(scratch.hidden, 2, "the note kept with the walk");
        let once = counts(&s);
        assert_eq!(once, [2, 1, 0, 0]);
        // Taken whole: what the unwinder passes is not read (here, frames
        // that would all be hidden); the note says how many were.
        let whole = Captured {
            whole: true,
            kept: true,
            note: scratch.hidden,
            tag: walked.unwrap(),
            ..captured(&a, 0, false)
        };
        let unread = [n(5, 0x10); 4];
        assert_eq!(s.identify(&unread, whole, &mut scratch, false), walked);
        let twice = counts(&s);
        assert_eq!(twice, [4, 2, 0, 1], "counted as the walk was");
        // A module classified since: the frames are read again.
        s.classified_count.fetch_add(1, Relaxed);
        s.identify(&unread, whole, &mut scratch, false);
        assert_eq!(counts(&s), [4, 2, 1, 2]);
    }

    #[test]
    fn the_variable_turns_stacks_off_and_bad_values_are_reported() {
        let v = |s: &'static str| move |_: &str| Some(std::ffi::OsString::from(s));
        assert_eq!(enabled(|_| None), (true, None));
        assert_eq!(enabled(v("0")), (false, None));
        assert_eq!(enabled(v("off")), (false, None));
        assert_eq!(enabled(v("1")), (true, None));
        let (on, warn) = enabled(v("maybe"));
        assert!(on && warn.unwrap().contains("GPUPERF_STACKS=maybe"));
    }

    /// The GRAPH_NODE records `take_records` writes: (node, stack, API name).
    fn graph_nodes(s: &Stacks) -> Vec<(u64, u32, Option<String>)> {
        let mut strings = StringTable::new();
        let recs = all_records(s, &mut strings, &|d, c| Some(format!("api {d}/{c}")));
        recs.iter()
            .filter_map(|r| match r {
                Record::GraphNode(g) => {
                    Some((g.node_id, g.stack, g.api.map(|a| strings.get(a).to_owned())))
                }
                _ => None,
            })
            .collect()
    }

    /// Every record `take_records` gives, graph nodes last, as written.
    fn all_records(
        s: &Stacks,
        strings: &mut StringTable,
        api_name: &dyn Fn(u32, u32) -> Option<String>,
    ) -> Vec<Record> {
        let Taken { mut records, nodes } = s.take_records(7, strings, false);
        for n in nodes {
            records.push(Stacks::node_record(7, n, strings, api_name));
        }
        records
    }

    fn cloned(s: &Stacks, node: u64, original: u64) {
        let mut t = s.table.lock().unwrap();
        s.node_cloned(&mut t, node, original, true);
    }

    fn held(s: &Stacks) -> usize {
        s.table.lock().unwrap().nodes.len()
    }

    /// Inside a graph call, node copies and teardowns wait on the thread and
    /// are applied in order when the last graph call returns.
    #[test]
    fn node_events_inside_graph_calls_are_applied_in_order_at_the_end() {
        let s = Stacks::new(Path::new("/nonexistent/libcupti.so.13"));
        s.node_created(1, Some((5, 2, 211)));
        let event = |e: NodeEvent| {
            GRAPH_THREAD.with(|g| g.borrow_mut().events.push(e));
        };
        s.graph_call(true, true);
        // A nested call (exec-update inside a destroy, say) ends first.
        s.graph_call(false, true);
        event(NodeEvent::Cloned {
            node: 2,
            original: 1,
            into_exec: false,
        });
        s.graph_call(false, false);
        event(NodeEvent::Cloned {
            node: 3,
            original: 2,
            into_exec: false,
        });
        // A copy into an instantiated graph is written, not remembered.
        event(NodeEvent::Cloned {
            node: 4,
            original: 1,
            into_exec: true,
        });
        event(NodeEvent::Destroyed(2));
        assert_eq!(held(&s), 1, "applied before the outer call returned");
        assert!(!s.graph_call(true, false));
        assert_eq!(held(&s), 2);
        let recs = graph_nodes(&s);
        let stack = |n: u64| recs.iter().find(|r| r.0 == n).map(|r| r.1);
        assert_eq!(
            (stack(2), stack(3), stack(4)),
            (Some(5), Some(5), Some(5)),
            "{recs:?}"
        );
        GRAPH_THREAD.with(|g| assert!(g.borrow().events.is_empty()));
    }

    #[test]
    fn a_graph_node_clone_keeps_its_originals_stack_whichever_callback_comes_first() {
        let s = Stacks::new(Path::new("/nonexistent/libcupti.so.13"));
        let api = Some("api 2/211".to_owned());
        // Captured inside a recorded launch whose stack is 5.
        s.node_created(101, Some((5, 2, 211)));
        // Instantiation: made then cloned, and cloned then made.
        s.node_created(201, None);
        cloned(&s, 201, 101);
        cloned(&s, 301, 101);
        s.node_created(301, None);
        // A clone of a node whose origin is unknown stays unknown.
        cloned(&s, 401, 999);
        let recs = graph_nodes(&s);
        // The last record of a node is the one readers keep.
        let last = |n: u64| recs.iter().rev().find(|r| r.0 == n).cloned();
        assert_eq!(last(101), Some((101, 5, api.clone())));
        assert_eq!(last(201), Some((201, 5, api.clone())));
        assert_eq!(last(301), Some((301, 5, api)));
        assert_eq!(last(401), None);
        assert_eq!(recs.iter().filter(|r| r.0 == 301).count(), 1, "{recs:?}");
    }

    #[test]
    fn own_frames_are_hidden_and_the_rest_written_once_with_its_modules() {
        let _same = SAME_MODULES.lock().unwrap_or_else(|e| e.into_inner());
        let s = Stacks::new(Path::new("/nonexistent/libcupti.so.13"));
        // This test binary is this crate's code (and std's), so every frame of it
        // is the library's own and hidden; what remains is libc's thread start,
        // the same for both call sites.
        let ids: Vec<u32> = (0..3).map(|_| s.capture()).collect();
        assert_eq!(ids, [1, 1, 1]);
        let mut strings = StringTable::new();
        let recs = all_records(&s, &mut strings, &|_, _| None);
        let modules: Vec<&Module> = recs
            .iter()
            .filter_map(|r| match r {
                Record::Module(m) => Some(m),
                _ => None,
            })
            .collect();
        let stacks: Vec<&Stack> = recs
            .iter()
            .filter_map(|r| match r {
                Record::Stack(st) => Some(st),
                _ => None,
            })
            .collect();
        assert_eq!(stacks.len(), 1, "{recs:?}");
        assert_eq!(stacks[0].end, End::Root);
        assert!(!stacks[0].frames.is_empty());
        for f in &stacks[0].frames {
            let StackFrame::Native { module, .. } = f else {
                panic!("{f:?}")
            };
            let m = modules.iter().find(|m| m.id == *module).expect("written");
            assert!(m.path.contains("libc.so"), "{}", m.path);
        }
        // Written once.
        assert!(all_records(&s, &mut strings, &|_, _| None).is_empty());
        assert!(s.summary().starts_with("stacks: 3 taken (1 distinct)"));
        // The second and third took the native frames from the thread's last.
        assert!(
            s.summary()
                .contains(", 2 reused part of the last capture (native frames proven unchanged; "),
            "{}",
            s.summary()
        );
    }
}

#[cfg(test)]
#[allow(non_snake_case)]
mod refresh_tests {
    use std::sync::OnceLock;
    use std::sync::atomic::AtomicU32;

    use gpuperf_test_support::cc::Gcc;
    use gpuperf_test_support::scratch::fresh_dir;

    use super::*;

    static STACKS: OnceLock<Stacks> = OnceLock::new();
    static ID: AtomicU32 = AtomicU32::new(0);

    extern "C" fn take() {
        ID.store(STACKS.get().unwrap().capture(), Relaxed);
    }

    #[test]
    fn a_capture_from_a_library_loaded_later__refreshed_retried_and_counted_once() {
        let dir = fresh_dir("inject-refresh-count");
        std::fs::write(
            dir.join("later.c"),
            "void later_call(void (*f)(void)) { f(); __asm__ volatile(\"\"); }\n",
        )
        .unwrap();
        let lib = Gcc::new(dir.join("liblater.so"))
            .args(["-O1", "-shared", "-fPIC"])
            .arg(dir.join("later.c"))
            .build();
        let _same = tests::SAME_MODULES
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let s = STACKS.get_or_init(|| Stacks::new(Path::new("/nonexistent/libcupti.so.13")));
        // Loaded after the module table was read: the first attempt ends at an
        // unknown frame in it, the table is refreshed, the second is complete.
        // SAFETY: a library of ours without constructors.
        let l = unsafe { libloading::Library::new(&lib).unwrap() };
        // SAFETY: the symbol has this signature.
        let call: libloading::Symbol<extern "C" fn(extern "C" fn())> =
            unsafe { l.get(b"later_call\0").unwrap() };
        call(take);
        assert_ne!(ID.load(Relaxed), 0);
        let summary = s.summary();
        assert!(
            summary.starts_with(
                "stacks: 1 taken (1 distinct), 0 skipped for lack of stack, 0 skipped for \
                 lack of memory (the thread's capture state could not be allocated), 0 \
                 without an id (stack table full), 0 without an id (contended), 0 truncated (0 at code \
                 without unwind info, 0 at the depth cap,"
            ),
            "{summary}"
        );
        // The unwinder itself saw both attempts.
        assert_eq!(s.unwinder.stats().captures, 2, "{summary}");
    }
}
