//! What a captured stack is made of.

use std::sync::atomic::{AtomicU64, Ordering};

/// The default depth cap: callers size their frame buffer with it.
pub const MAX_FRAMES: usize = 256;

/// Index of a module in the unwinder's module registry. Stable for the unwinder's
/// lifetime: a module keeps its id across refreshes, and an unloaded module's id is
/// never reused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ModuleId(pub u32);

/// Index of a Python code object in the process's code table
/// (see [`crate::python::Python::resolve`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CodeId(pub u32);

/// One frame of a captured stack, innermost first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Frame {
    /// Native code inside a known module.
    Native {
        /// The module.
        module: ModuleId,
        /// The address relative to the module's load bias, i.e. the ELF virtual
        /// address as written in the file (what `addr2line -e FILE` takes).
        offset: u64,
        /// `true` for a return address (the call is the instruction before it),
        /// `false` for the interrupted instruction of the innermost frame.
        return_address: bool,
    },
    /// A Python function, spliced in place of the interpreter's eval-loop frame.
    Python {
        /// The code object.
        code: CodeId,
        /// Index of the executing instruction, in 2-byte code units.
        instruction: u32,
    },
    /// Code without unwind information (JIT code, a module without `.eh_frame`, a
    /// module loaded after the last refresh). Always the last frame of its stack.
    Unknown {
        /// The absolute address.
        address: u64,
    },
}

impl Frame {
    /// The offset to symbolize: for a return address, one byte back, inside the
    /// call instruction, so that the caller's line is found, not the next one's.
    pub fn lookup_offset(&self) -> Option<u64> {
        match *self {
            Frame::Native {
                offset,
                return_address,
                ..
            } => Some(if return_address {
                offset.saturating_sub(1)
            } else {
                offset
            }),
            _ => None,
        }
    }
}

impl Default for Frame {
    fn default() -> Self {
        Frame::Unknown { address: 0 }
    }
}

/// Why a stack ended. Only [`StackEnd::Root`] is a complete stack.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StackEnd {
    /// The outermost frame's unwind info marks it as the root (glibc's `_start`,
    /// `clone` and `clone3` mark their return address undefined).
    #[default]
    Root,
    /// An address in no known module, or in a module's code without unwind
    /// info for it where neither a frame-pointer step nor a stack scan found
    /// its caller (see [`Captured::recovered`]); the stack ends with a
    /// [`Frame::Unknown`].
    NoUnwindInfo,
    /// An address in a module loaded after the module table was last refreshed;
    /// the stack ends with a [`Frame::Unknown`].
    ModuleNotInTable,
    /// A stack read fell outside the thread's stack (or the copied window).
    StackReadFailed,
    /// The unwind info could not be applied (bad CFI, a loop, a garbage address).
    UnwindFailed,
    /// The output buffer was full: the stack was deeper than the depth cap.
    DepthLimit,
    /// All unwind caches were in use by other threads; nothing was captured.
    Busy,
    /// The caller had less than [`crate::MIN_STACK_LEFT`] bytes of stack left;
    /// nothing was captured.
    NoStackLeft,
    /// The native stack is complete, but the Python frames of some outer
    /// interpreter loop are missing: the thread runs a subinterpreter (its
    /// frames are read) inside a call from another interpreter (whose frames
    /// are not); those loops keep their native frame.
    PythonCut,
}

impl StackEnd {
    /// `true` unless the stack reached a root frame.
    pub fn is_truncated(self) -> bool {
        self != StackEnd::Root
    }
}

/// The result of one capture: `frames[..len]` of the caller's buffer are filled.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Captured {
    /// Number of frames written.
    pub len: usize,
    /// How the native stack ended.
    pub end: StackEnd,
    /// Python frames spliced in (0 when the thread has no Python state).
    pub python_frames: usize,
    /// `true` when the Python frame chain was deeper than the depth cap.
    pub python_truncated: bool,
    /// Frames found past code without unwind info: a frame in a module's code
    /// that no `.eh_frame` entry covers is kept, and its caller is found by a
    /// frame-pointer step or a bounded stack scan (a heuristic, where the
    /// tables give certainty), after which the tables take over again. Every
    /// frame outward of the first such frame depends on it. 0 when every frame
    /// came from unwind tables.
    pub recovered: u32,
    /// Native frames taken from the thread's last capture instead of being
    /// unwound again, because every stack word they depend on was found
    /// unchanged ([`crate::Trail`]). 0 without a trail.
    pub reused: u32,
    /// This capture's number among those made with its [`crate::Trail`]
    /// (from 1); 0 without a trail.
    pub serial: u64,
    /// `true` when the frames, `end` and `python_truncated` are, proven by
    /// comparing every input of the Python merge, those of the capture
    /// numbered `serial - 1` on the same trail (see `python::replay`).
    pub unchanged: bool,
    /// `true` when the native frames are those of the walk kept under a
    /// tag the capture expected ([`crate::Trail::expect`]), every word that
    /// walk read proven unchanged: nothing was walked.
    pub kept: bool,
    /// With `kept`: that tag; else 0.
    pub tag: u32,
    /// `true` when, besides, the whole capture (its frames, end and Python
    /// frames) is the one made of that walk when it was kept: the thread's
    /// Python frame chain was proven the same, and nothing was merged.
    pub whole: bool,
    /// `true` when the last frame is a [`Frame::Unknown`]. Known without
    /// reading the frames, which a whole capture leaves where its trail keeps
    /// them.
    pub ends_unknown: bool,
    /// With `whole`: the word the caller kept with that capture
    /// ([`crate::Trail::keep_last`]), facts it derived from the frames and
    /// need not derive again; else 0.
    pub note: u32,
}

/// Counters kept by an unwinder, read with [`Stats::snapshot`].
#[derive(Debug, Default)]
pub(crate) struct Stats {
    pub captures: AtomicU64,
    pub truncated: AtomicU64,
    pub unknown_frames: AtomicU64,
    pub depth_limit: AtomicU64,
    pub busy: AtomicU64,
    pub stack_scans: AtomicU64,
    pub python_stacks: AtomicU64,
    pub python_truncated: AtomicU64,
    pub python_unmatched: AtomicU64,
    pub stale_table: AtomicU64,
    pub no_stack_left: AtomicU64,
    pub cache_waits: AtomicU64,
    pub python_skipped: AtomicU64,
    pub python_probes: AtomicU64,
    pub python_reused: AtomicU64,
    pub table_rebuilds: AtomicU64,
    pub modules_added: AtomicU64,
    pub recovered_stacks: AtomicU64,
    pub stale_passed_stacks: AtomicU64,
}

/// A copy of an unwinder's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StatsSnapshot {
    /// Stacks captured.
    pub captures: u64,
    /// Stacks that did not end at a root frame (every [`StackEnd`] but `Root`).
    pub truncated: u64,
    /// Stacks ending in a [`Frame::Unknown`] (code without unwind info).
    pub unknown_frames: u64,
    /// Stacks cut at the depth cap.
    pub depth_limit: u64,
    /// Captures dropped because every unwind cache was in use.
    pub busy: u64,
    /// Times a thread's stack bounds had to be looked up in `/proc/self/maps`.
    pub stack_scans: u64,
    /// Stacks with Python frames.
    pub python_stacks: u64,
    /// Python frame chains cut at the depth cap.
    pub python_truncated: u64,
    /// Python frames that matched no interpreter frame of the native stack (they
    /// are appended at the outer end).
    pub python_unmatched: u64,
    /// Captures that found the module table older than the process's loaded
    /// modules (call `refresh`).
    pub stale_table: u64,
    /// Captures skipped because the caller had almost no stack left.
    pub no_stack_left: u64,
    /// Captures that found every unwind cache in use and had to wait.
    pub cache_waits: u64,
    /// Python frame chains that could not be read (a link into unreadable
    /// memory, an object of the wrong type): that stack keeps its native frames
    /// only (see [`crate::python::Python::last_skip_reason`]).
    pub python_skipped: u64,
    /// System calls made to check memory before reading it (the Python frames
    /// and code objects that the capture could not prove live otherwise).
    pub python_probes: u64,
    /// Stacks whose outer Python frames were taken from an earlier capture
    /// of the thread, proven unchanged: the last one (a [`crate::Trail`]'s
    /// Python part), or, with all of them, the one kept under the tag
    /// expected ([`Captured::whole`]).
    pub python_reused: u64,
    /// Module tables rebuilt whole (`refresh`, or `add_loaded` after an unload).
    pub table_rebuilds: u64,
    /// Times `add_loaded` added new modules beside the table, reading only
    /// theirs.
    pub modules_added: u64,
    /// Stacks that crossed code without unwind info by a frame-pointer step
    /// or a stack scan ([`Captured::recovered`]).
    pub recovered_stacks: u64,
    /// Of those walked, stacks whose scan passed over a stale return address
    /// (one whose call went directly into another module's code, left by an
    /// earlier call) for the caller.
    pub stale_passed_stacks: u64,
    /// Captures taken whole ([`Captured::whole`]) on the calling thread's own
    /// stack, where it had [`crate::WHOLE_ON_CALLER_STACK`] left: the others
    /// ran on the unwinder's scratch stack.
    pub whole_on_caller_stack: u64,
}

impl Stats {
    pub(crate) fn snapshot(&self) -> StatsSnapshot {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        StatsSnapshot {
            captures: l(&self.captures),
            truncated: l(&self.truncated),
            unknown_frames: l(&self.unknown_frames),
            depth_limit: l(&self.depth_limit),
            busy: l(&self.busy),
            stack_scans: l(&self.stack_scans),
            python_stacks: l(&self.python_stacks),
            python_truncated: l(&self.python_truncated),
            python_unmatched: l(&self.python_unmatched),
            stale_table: l(&self.stale_table),
            no_stack_left: l(&self.no_stack_left),
            cache_waits: l(&self.cache_waits),
            python_skipped: l(&self.python_skipped),
            python_probes: l(&self.python_probes),
            python_reused: l(&self.python_reused),
            table_rebuilds: l(&self.table_rebuilds),
            modules_added: l(&self.modules_added),
            recovered_stacks: l(&self.recovered_stacks),
            stale_passed_stacks: l(&self.stale_passed_stacks),
            whole_on_caller_stack: 0,
        }
    }

    pub(crate) fn bump(a: &AtomicU64) {
        a.fetch_add(1, Ordering::Relaxed);
    }
}

/// The counters every capture bumps, kept by each unwind cache slot: only
/// the thread holding the slot writes them, by a plain load and store, where
/// [`Stats`]' locked adds would each be a full barrier on a cache line every
/// capturing thread shares. [`Stats::snapshot`]'s caller adds them in.
#[derive(Debug, Default)]
pub(crate) struct SlotCounts {
    pub captures: AtomicU64,
    pub python_stacks: AtomicU64,
    pub python_reused: AtomicU64,
    pub whole_on_caller_stack: AtomicU64,
}

impl SlotCounts {
    /// Bumps `a`, one of the counts of a slot the caller holds.
    pub(crate) fn bump(a: &AtomicU64) {
        a.store(a.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    }

    /// Adds these counts to `s`.
    pub(crate) fn add_to(&self, s: &mut StatsSnapshot) {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        s.captures += l(&self.captures);
        s.python_stacks += l(&self.python_stacks);
        s.python_reused += l(&self.python_reused);
        s.whole_on_caller_stack += l(&self.whole_on_caller_stack);
    }
}
