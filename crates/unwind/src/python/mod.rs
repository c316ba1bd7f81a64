//! CPython frames of the calling thread, read without the GIL.
//!
//! ```text
//! detect()   dlsym: Py_GetVersion, PyGILState_GetThisThreadState, type objects,
//!            _PyEval_EvalFrameDefault (its range, to splice), 3.13: _PyRuntime
//!            → one version's Layout (v3_10 … v3_13; 3.13 from _Py_DebugOffsets)
//! splice()   thread state → frame chain → (code, instruction) per frame, grouped
//!            by eval-loop invocation → each group replaces one native
//!            _PyEval_EvalFrameDefault frame (as py-spy --native does)
//! resolve()  code table (copied at first sight) → `module.function (file:line)`
//! ```
//!
//! **The thread state.** `PyGILState_GetThisThreadState` reads the thread-specific
//! slot the interpreter sets for every thread it knows (`pthread_getspecific`): no
//! lock, and unlike the current-thread pointer (`_PyThreadState_GET`, the
//! `_Py_tss_tstate` TLS of 3.12+) it stays set while the thread has released the
//! GIL, as ctypes, PyTorch and Triton do around native calls. It is NULL on threads
//! the interpreter never saw, which then keep their native frames only.
//!
//! **Reads.** No page is trusted across captures: the interpreter (or a bug in
//! an extension) may unmap it in between. A capture reads memory directly only
//! where it can prove, in that capture, that the memory is live:
//!
//! - the thread's own stack, and its thread state;
//! - 3.11+: the live part of the thread's data-stack chunks (`datastack_chunk`,
//!   `datastack_top` and each older chunk's saved top), where the interpreter
//!   keeps the frames of running calls. A chunk is freed only by its own thread,
//!   which is inside this capture;
//! - a frame there only once it is proven to be one: starting at the chunk's
//!   first frame, each frame is exactly as long as its code object says (the
//!   interpreter pushes `co_framesize` words per call), so walking the chunk by
//!   those lengths must land on every frame the chain links to. A frame so
//!   reached is live, so is its code object (a frame holds a strong reference
//!   to it), and so are the name, file and line table the code object holds:
//!   all are read directly, with their types checked. The walk stops at the
//!   innermost frame the chain links to, so a frame still being pushed (a
//!   capture from a signal handler) is never read. Frames in chunks older than
//!   the 16 newest are probed.
//!
//! What this trusts is what the interpreter itself uses to pop frames (the
//! thread state, chunk headers, each live frame's code pointer); it never
//! trusts a frame's link to its caller. Everything else (3.10's heap frames,
//! a generator's frame, a link that leaves the data stack, and the code objects
//! of such frames) is read only in pages proven readable in the same capture,
//! by a probe that fails cleanly instead of faulting (`rt_sigprocmask` with an
//! invalid `how`, which reads 8 bytes and changes nothing; `process_vm_readv`
//! where that is refused), each page once, counted in
//! [`crate::StatsSnapshot::python_probes`]. On 3.11+ a stack of ordinary calls
//! needs no probe at all; a probe costs a system call (about 0.5 µs on a VM).
//!
//! **Bad stacks.** A chain that cannot be read (a link into unreadable memory, a
//! frame the data stack does not account for, an object of the wrong type)
//! costs that stack its Python frames, counted in
//! [`crate::StatsSnapshot::python_skipped`], with the reason in
//! [`Python::last_skip_reason`]. Python frames are turned off for the process
//! only when no capture can succeed: seccomp refuses both probes, or the first
//! 64 chains all fail (a layout this crate misreads).
//!
//! **Free-threaded builds.** 3.13t is recognized from `_Py_DebugOffsets`
//! (`free_threaded`, and `ob_type` at its 32-byte object header's offset 24).
//!
//! **Depth.** At most [`MAX_PYTHON_FRAMES`] Python frames per stack; deeper chains
//! are cut at the outer end and counted.
//!
//! **Subinterpreters.** Only the thread state the interpreter registered for
//! the thread is read. When a subinterpreter runs inside a call from another
//! interpreter, the other interpreter's frames (3.12+; before 3.12 the
//! subinterpreter's) are not in it: the stack ends in [`StackEnd::PythonCut`]
//! instead of counting as complete.
//!
//! **Code objects.** The first time a code object is seen, its qualified name, file
//! name, first line and line table are copied into a fixed arena (allocated at
//! set-up), so frames can be resolved later, off the hot path.

mod layout;
mod linetable;
mod v3_10;
mod v3_11;
mod v3_12;
mod v3_13;

use std::cell::UnsafeCell;
use std::ffi::{CStr, c_char, c_int, c_void};
use std::mem::MaybeUninit;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use layout::{FrameKind, FrameWords, Layout, LineTable};

use crate::frame::{Captured, CodeId, Frame, ModuleId, StackEnd, Stats};
use crate::module::ModuleInfo;
use crate::table::Table;

/// Python frames kept per stack; deeper chains are truncated (and counted).
pub const MAX_PYTHON_FRAMES: usize = 256;

/// Failed captures, with no chain ever read, after which Python frames are
/// turned off (the layout is probably misread).
const SKIPS_BEFORE_OFF: u64 = 64;

/// Code objects the table holds; later ones are shown as unresolved frames.
const CODE_SLOTS: usize = 16384;
/// Bytes for copied names and line tables.
const ARENA_BYTES: usize = 4 << 20;

/// Whether Python frames are read.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PythonStatus {
    /// The process runs no CPython (or Python frames were not asked for).
    NotPython,
    /// A CPython this crate cannot read (the version is given).
    Unsupported(String),
    /// Python frames are read (CPython 3.`minor`).
    Active {
        /// The minor version.
        minor: u8,
    },
    /// Turned off after an inconsistency; the reason says what was wrong.
    Disabled {
        /// The minor version.
        minor: u8,
        /// What failed.
        reason: &'static str,
    },
}

/// A resolved Python frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PythonFrame {
    /// `module.qualified_name`, the module being the file's stem.
    pub function: String,
    /// The code object's file name.
    pub file: String,
    /// The line, 0 if the instruction has none.
    pub line: u32,
}

impl std::fmt::Display for PythonFrame {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let file = self.file.rsplit('/').next().unwrap_or(&self.file);
        write!(f, "{} ({file}:{})", self.function, self.line)
    }
}

/// The Python frame reader of this process.
pub struct Python {
    layout: Layout,
    this_thread_state: unsafe extern "C" fn() -> *mut c_void,
    code_type: u64,
    unicode_type: u64,
    bytes_type: u64,
    eval_module: ModuleId,
    eval_range: Range<u64>,
    /// Bytes of a code object read before it is known to be one.
    code_span: u64,
    pid: libc::pid_t,
    disabled: AtomicU8,
    codes: Box<[CodeSlot]>,
    arena: Box<[UnsafeCell<u8>]>,
    arena_used: AtomicUsize,
    overflow: AtomicBool,
    /// A probe was refused (EPERM, ENOSYS): seccomp.
    refused: AtomicBool,
    /// Some chain was read: failures since are bad stacks, not a bad layout.
    read_one: AtomicBool,
    /// The reason of the last skipped stack (`reason::index`), 0 for none.
    last_skip: AtomicU8,
}

// SAFETY: the arena's bytes are written once, by the thread that reserved them
// (fetch_add), before the slot that refers to them is published (Release); they are
// read only after an Acquire load of that slot's state.
unsafe impl Sync for Python {}

/// One cache line: a look-up reads the first 24 bytes (key, state and the
/// identity checks), which a 48-byte slot split over two lines one time in four.
#[derive(Default)]
#[repr(align(64))]
struct CodeSlot {
    /// Code object address (0 = empty).
    key: AtomicU64,
    /// 0 empty, 1 being written, 2 ready.
    state: AtomicU8,
    /// Identity checks: the first line and the line table's address.
    first_line: AtomicU32,
    line_table_ptr: AtomicU64,
    /// Arena ranges: qualname, file, line table (start << 32 | len).
    qualname: AtomicU64,
    file: AtomicU64,
    line_table: AtomicU64,
}

/// Reasons for turning Python frames off; static so that setting one never
/// allocates.
mod reason {
    pub const FRAME_UNREADABLE: &str = "a frame pointer points at unreadable memory";
    pub const CODE_UNREADABLE: &str = "a code object pointer points at unreadable memory";
    pub const CODE_TYPE: &str = "a frame's code object is not of type `code`";
    pub const STRING: &str = "a code object's name or file is not a `str`";
    pub const LINE_TABLE: &str = "a code object's line table is not `bytes`";
    pub const INSTRUCTION: &str = "a frame's instruction pointer is outside its code object";
    pub const CHAIN: &str = "the thread state's frame chain is unreadable";
    pub const REFUSED: &str = "the system calls that read memory without faulting \
        (rt_sigprocmask, process_vm_readv) are refused, e.g. by a seccomp filter";
    /// `why`'s index in [`ALL`], plus one.
    pub fn index(why: &str) -> u8 {
        ALL.iter().position(|r| *r == why).unwrap_or(0) as u8 + 1
    }
    pub const ALL: [&str; 8] = [
        FRAME_UNREADABLE,
        CODE_UNREADABLE,
        CODE_TYPE,
        STRING,
        LINE_TABLE,
        INSTRUCTION,
        CHAIN,
        REFUSED,
    ];
}

/// Memory known readable during one capture: the thread's stack, and the last
/// page spans found readable in this capture (the frames of a thread share a
/// few pages, and so do the code objects of a module), which spares most
/// probes. Nothing is remembered across captures: a page found readable once
/// may be unmapped before the next.
struct Known {
    stack: (u64, u64),
    /// `[start, end)` of page-aligned spans; empty when equal.
    recent: [(u64, u64); RECENT],
    next: usize,
    /// Pages probed together (the code objects of the chain), unordered.
    /// `pages[..npages]` are set; the rest is never read (zeroing it cost more
    /// than a whole walk).
    pages: [MaybeUninit<u64>; PAGES],
    npages: usize,
    /// System calls made to probe.
    probes: u64,
}

/// Data-stack chunks a capture reads without probes; frames in older chunks
/// are probed.
const MAX_CHUNKS: usize = 16;
/// Bytes of a chunk's header (`previous`, `size`, `top`) before its frames.
const CHUNK_DATA: u64 = 24;

/// The live parts `[lo, hi)` of the thread's data-stack chunks, current chunk
/// first, and per chunk the last frame proven live (`tile_to`).
struct Chunks {
    n: usize,
    lo: [u64; MAX_CHUNKS],
    hi: [u64; MAX_CHUNKS],
    cursor: [u64; MAX_CHUNKS],
}

impl Chunks {
    /// The chunk holding `[addr, addr+len)` in its live part.
    fn find(&self, addr: u64, len: u64) -> Option<usize> {
        let end = addr.checked_add(len)?;
        (0..self.n).find(|&k| self.lo[k] <= addr && end <= self.hi[k])
    }
}

/// Spans a capture remembers.
const RECENT: usize = 8;
/// Pages of code objects a capture probes in one system call.
const PAGES: usize = 2 * MAX_PYTHON_FRAMES;

impl Known {
    fn new(stack: (u64, u64)) -> Known {
        Known {
            stack,
            recent: [(0, 0); RECENT],
            next: 0,
            pages: [MaybeUninit::uninit(); PAGES],
            npages: 0,
            probes: 0,
        }
    }

    fn has_page(&self, page: u64) -> bool {
        self.pages[..self.npages].iter().any(|p| {
            // SAFETY: `pages[..npages]` were written by `probe_code_pages`.
            unsafe { p.assume_init() == page }
        })
    }

    #[inline(always)]
    fn covers(&self, addr: u64, end: u64) -> bool {
        (self.stack.0 <= addr && end <= self.stack.1)
            || self.recent.iter().any(|&(lo, hi)| lo <= addr && end <= hi)
            || (self.npages > 0
                && end > addr
                && (addr >> 12..=(end - 1) >> 12).all(|p| self.has_page(p)))
    }

    /// Pages `first..=last` are readable.
    fn remember(&mut self, first: u64, last: u64) {
        self.recent[self.next % RECENT] = (first << 12, (last + 1) << 12);
        self.next = self.next.wrapping_add(1);
    }
}

/// One Python frame as read.
#[derive(Clone, Copy, Default)]
struct Raw {
    code: u32,
    instruction: u32,
    /// This frame is the outermost of its eval-loop invocation.
    group_end: bool,
    /// The code object's address, until `code` is set from it.
    code_ptr: u64,
    /// The frame's address when it lies in the data stack, else 0.
    in_stack: u64,
    /// The data-stack chunk it lies in (when `in_stack` is set).
    chunk: u8,
}

unsafe extern "C" {
    fn dladdr1(
        addr: *const c_void,
        info: *mut libc::Dl_info,
        extra: *mut *mut c_void,
        flags: c_int,
    ) -> c_int;
}
const RTLD_DL_SYMENT: c_int = 1;

fn sym(name: &CStr) -> Option<u64> {
    // SAFETY: a NUL-terminated name; dlsym has no other precondition.
    let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
    (!p.is_null()).then_some(p as u64)
}

impl Python {
    /// Finds the CPython in this process, if any. Allocates; not on the hot path.
    pub(crate) fn detect(modules: &[ModuleInfo]) -> Option<Python> {
        let get_version = sym(c"Py_GetVersion")?;
        // SAFETY: CPython's `const char *Py_GetVersion(void)`, which returns a
        // static string and needs no GIL.
        let version = unsafe {
            let f: unsafe extern "C" fn() -> *const c_char =
                std::mem::transmute(get_version as usize);
            CStr::from_ptr(f()).to_string_lossy().into_owned()
        };
        let minor: u8 = version
            .strip_prefix("3.")
            .and_then(|v| v.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|m| m.parse().ok())?;
        let layout = match minor {
            10 => v3_10::LAYOUT,
            11 => v3_11::LAYOUT,
            12 => v3_12::LAYOUT,
            13 => {
                let rt = sym(c"_PyRuntime")?;
                // SAFETY: `_PyRuntime` starts with `_Py_DebugOffsets` in 3.13; the
                // reads stay inside its 584 bytes.
                unsafe {
                    let cookie = std::slice::from_raw_parts(rt as *const u8, 8);
                    let version = (rt as *const u64).add(1).read();
                    v3_13::layout(cookie, version, |off| {
                        ((rt + off) as *const u64).read_unaligned()
                    })?
                }
            }
            _ => return None,
        };
        let tstate_fn = sym(c"PyGILState_GetThisThreadState")?;
        let eval = sym(c"_PyEval_EvalFrameDefault")?;
        let mut info: libc::Dl_info = unsafe_zeroed_dl_info();
        let mut esym: *mut c_void = std::ptr::null_mut();
        // SAFETY: valid out-parameters; RTLD_DL_SYMENT stores an `Elf64_Sym *`.
        let size = unsafe {
            if dladdr1(eval as *const c_void, &mut info, &mut esym, RTLD_DL_SYMENT) == 0
                || esym.is_null()
            {
                return None;
            }
            (*(esym as *const libc::Elf64_Sym)).st_size
        };
        let (index, m) = modules
            .iter()
            .enumerate()
            .find(|(_, m)| m.text.contains(&eval))?;
        let start = eval - m.bias;
        let types = [
            sym(c"PyCode_Type")?,
            sym(c"PyUnicode_Type")?,
            sym(c"PyBytes_Type")?,
        ];
        // SAFETY: CPython's `PyThreadState *PyGILState_GetThisThreadState(void)`.
        let this_thread_state = unsafe {
            std::mem::transmute::<usize, unsafe extern "C" fn() -> *mut c_void>(tstate_fn as usize)
        };
        Some(Python::with_layout(
            layout,
            this_thread_state,
            types,
            ModuleId(index as u32),
            start..start + size.max(1),
        ))
    }

    /// A reader of `layout`; `types`: the addresses of the `code`, `str` and
    /// `bytes` type objects.
    fn with_layout(
        layout: Layout,
        this_thread_state: unsafe extern "C" fn() -> *mut c_void,
        types: [u64; 3],
        eval_module: ModuleId,
        eval_range: Range<u64>,
    ) -> Python {
        Python {
            layout,
            this_thread_state,
            code_type: types[0],
            unicode_type: types[1],
            bytes_type: types[2],
            eval_module,
            code_span: layout
                .code_linetable
                .max(layout.code_firstlineno)
                .max(layout.code_qualname)
                .max(layout.code_filename)
                .max(layout.ob_type)
                + 8,
            eval_range,
            // SAFETY: getpid has no preconditions.
            pid: unsafe { libc::getpid() },
            disabled: AtomicU8::new(0),
            codes: (0..CODE_SLOTS).map(|_| CodeSlot::default()).collect(),
            arena: (0..ARENA_BYTES).map(|_| UnsafeCell::new(0)).collect(),
            arena_used: AtomicUsize::new(0),
            overflow: AtomicBool::new(false),
            refused: AtomicBool::new(false),
            read_one: AtomicBool::new(false),
            last_skip: AtomicU8::new(0),
        }
    }

    /// `true` for a free-threaded build (3.13t).
    pub fn free_threaded(&self) -> bool {
        self.layout.free_threaded
    }

    /// Whether Python frames are read, and why not.
    pub fn status(&self) -> PythonStatus {
        match self.disabled.load(Ordering::Relaxed) {
            0 => PythonStatus::Active {
                minor: self.layout.minor,
            },
            n => PythonStatus::Disabled {
                minor: self.layout.minor,
                reason: reason::ALL[usize::from(n - 1)],
            },
        }
    }

    fn disable(&self, why: &'static str) {
        let _ = self.disabled.compare_exchange(
            0,
            reason::index(why),
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
    }

    /// Counts a stack whose Python frames could not be read; it keeps its
    /// native frames. Python frames are turned off only when no capture can
    /// succeed: the probes are refused, or no chain was ever readable after
    /// [`SKIPS_BEFORE_OFF`] attempts (a layout this crate misreads).
    #[cold]
    #[inline(never)]
    fn skip(&self, stats: &Stats, why: &'static str) -> (usize, bool) {
        if self.refused.load(Ordering::Relaxed) {
            // Unreadable because no probe is allowed, not because of a bad
            // pointer: say so.
            self.disable(reason::REFUSED);
            return (0, false);
        }
        let n = stats.python_skipped.fetch_add(1, Ordering::Relaxed) + 1;
        self.last_skip.store(reason::index(why), Ordering::Relaxed);
        if n >= SKIPS_BEFORE_OFF && !self.read_one.load(Ordering::Relaxed) {
            self.disable(why);
        }
        (0, false)
    }

    /// Why the last stack counted in [`crate::StatsSnapshot::python_skipped`]
    /// lost its Python frames.
    pub fn last_skip_reason(&self) -> Option<&'static str> {
        match self.last_skip.load(Ordering::Relaxed) {
            0 => None,
            n => reason::ALL.get(usize::from(n - 1)).copied(),
        }
    }

    /// `true` if the code table or its arena filled up (later code objects are
    /// shown unresolved).
    pub fn code_table_full(&self) -> bool {
        self.overflow.load(Ordering::Relaxed)
    }

    /// Resolves a Python frame to `module.function`, file and line. Off the hot
    /// path (allocates the strings).
    pub fn resolve(&self, code: CodeId, instruction: u32) -> Option<PythonFrame> {
        let slot = self.codes.get(code.0 as usize)?;
        if slot.state.load(Ordering::Acquire) != 2 {
            return None;
        }
        let text = |r: &AtomicU64| {
            String::from_utf8_lossy(self.arena_slice(r.load(Ordering::Relaxed))).into_owned()
        };
        let qualname = text(&slot.qualname);
        let file = text(&slot.file);
        let table = self.arena_slice(slot.line_table.load(Ordering::Relaxed));
        let first = slot.first_line.load(Ordering::Relaxed) as i32;
        let line = match self.layout.line_table {
            LineTable::V310 => linetable::line_310(table, first, instruction.saturating_mul(2)),
            LineTable::Locations => linetable::line_locations(table, first, instruction),
        };
        let stem = file.rsplit('/').next().unwrap_or(&file);
        let module = stem.strip_suffix(".py").unwrap_or(stem);
        Some(PythonFrame {
            function: format!("{module}.{qualname}"),
            file,
            line: line.unwrap_or(0),
        })
    }

    fn arena_slice(&self, packed: u64) -> &[u8] {
        let (start, len) = ((packed >> 32) as usize, (packed & 0xffff_ffff) as usize);
        let Some(cells) = self.arena.get(start..start + len) else {
            return &[];
        };
        // SAFETY: published bytes are never written again (see `impl Sync`);
        // UnsafeCell<u8> has u8's layout.
        unsafe { std::slice::from_raw_parts(cells.as_ptr().cast::<u8>(), len) }
    }

    /// Reads the calling thread's Python frames and splices them into the native
    /// frames `out[..captured.len]`. `stack` is the thread's stack mapping.
    pub(crate) fn splice(
        &self,
        _table: &Table,
        stats: &Stats,
        stack: (u64, u64),
        out: &mut [Frame],
        captured: &mut Captured,
    ) {
        if self.disabled.load(Ordering::Relaxed) != 0 {
            return;
        }
        // SAFETY: the interpreter's lock-free accessor (see the module docs).
        let tstate = unsafe { (self.this_thread_state)() } as u64;
        if tstate == 0 {
            return;
        }
        // Uninitialized: zeroing these two buffers cost more than the walk itself.
        let mut raw = [const { MaybeUninit::<Raw>::uninit() }; MAX_PYTHON_FRAMES];
        let mut mem = Known::new(stack);
        let read = self.read_chain(tstate, &mut mem, &mut raw);
        if mem.probes > 0 {
            stats.python_probes.fetch_add(mem.probes, Ordering::Relaxed);
        }
        let (n, truncated) = match read {
            Ok(r) => {
                if !self.read_one.load(Ordering::Relaxed) {
                    self.read_one.store(true, Ordering::Relaxed);
                }
                r
            }
            Err(why) => self.skip(stats, why),
        };
        if n == 0 {
            return;
        }
        Stats::bump(&stats.python_stacks);
        // SAFETY: read_chain initialized `raw[..n]`; MaybeUninit<Raw> has Raw's layout.
        let raw: &[Raw] = unsafe { std::slice::from_raw_parts(raw.as_ptr().cast::<Raw>(), n) };
        // Merge: each native eval-loop frame becomes its group of Python frames.
        let mut native = [const { MaybeUninit::<Frame>::uninit() }; crate::MAX_FRAMES];
        let native_len = captured.len.min(native.len()).min(out.len());
        for (d, s) in native.iter_mut().zip(&out[..native_len]) {
            d.write(*s);
        }
        // SAFETY: `native[..native_len]` was written just above.
        let native: &[Frame] =
            unsafe { std::slice::from_raw_parts(native.as_ptr().cast::<Frame>(), native_len) };
        let mut w = 0;
        let mut p = 0;
        let mut full = false;
        let mut put = |f: Frame, w: &mut usize| -> bool {
            match out.get_mut(*w) {
                Some(s) => {
                    *s = f;
                    *w += 1;
                    true
                }
                None => false,
            }
        };
        let mut spliced = 0;
        let mut cut = false;
        'native: for f in native {
            let is_eval = matches!(*f, Frame::Native { module, .. } if module == self.eval_module)
                && f.lookup_offset()
                    .is_some_and(|o| self.eval_range.contains(&o));
            if is_eval && p >= raw.len() && !truncated {
                // An eval loop whose Python frames are not in this chain: the
                // thread runs a subinterpreter inside another interpreter's call.
                cut = true;
            }
            if is_eval && p < raw.len() {
                while p < raw.len() {
                    let r = raw[p];
                    p += 1;
                    let frame = Frame::Python {
                        code: CodeId(r.code),
                        instruction: r.instruction,
                    };
                    if !put(frame, &mut w) {
                        full = true;
                        break 'native;
                    }
                    spliced += 1;
                    if r.group_end {
                        break;
                    }
                }
                continue;
            }
            if !put(*f, &mut w) {
                full = true;
                break;
            }
        }
        if !full && p < raw.len() {
            // Python frames no native eval frame accounts for (a truncated native
            // stack, or an eval frame outside the symbol's range): keep them at
            // the outer end, counted.
            stats
                .python_unmatched
                .fetch_add((raw.len() - p) as u64, Ordering::Relaxed);
            for r in &raw[p..] {
                let frame = Frame::Python {
                    code: CodeId(r.code),
                    instruction: r.instruction,
                };
                if !put(frame, &mut w) {
                    full = true;
                    break;
                }
                spliced += 1;
            }
        }
        captured.len = w;
        captured.python_frames = spliced;
        captured.python_truncated = truncated || full;
        if captured.python_truncated {
            Stats::bump(&stats.python_truncated);
        }
        if full || truncated {
            captured.end = StackEnd::DepthLimit;
        } else if cut && captured.end == StackEnd::Root {
            captured.end = StackEnd::PythonCut;
        }
    }

    /// The live parts of the thread's data-stack chunks (3.11+), current chunk
    /// first; empty before 3.11.
    fn data_stack(&self, tstate: u64) -> Chunks {
        let mut c = Chunks {
            n: 0,
            lo: [0; MAX_CHUNKS],
            hi: [0; MAX_CHUNKS],
            cursor: [0; MAX_CHUNKS],
        };
        let Some(ds) = self.layout.datastack else {
            return c;
        };
        // The thread state and its chunks are the interpreter's own: a chunk is
        // freed only by its thread, when it returns from the chunk's first call,
        // which cannot happen while that thread is in this capture.
        let rd = |a: u64| -> u64 {
            // SAFETY: inside the live PyThreadState or one of its chunk headers.
            unsafe { (a as *const u64).read_unaligned() }
        };
        let mut chunk = rd(tstate + ds.chunk);
        let mut end = rd(tstate + ds.top);
        while c.n < MAX_CHUNKS && chunk != 0 && chunk.is_multiple_of(8) {
            let (previous, size) = (rd(chunk), rd(chunk + 8));
            // The thread's first chunk keeps its first word unused.
            let start = chunk + CHUNK_DATA + if previous == 0 { 8 } else { 0 };
            if end < start || end > chunk.saturating_add(size) || !end.is_multiple_of(8) {
                break;
            }
            (c.lo[c.n], c.hi[c.n], c.cursor[c.n]) = (start, end, start);
            c.n += 1;
            if previous == 0 || !previous.is_multiple_of(8) {
                break;
            }
            end = (previous + CHUNK_DATA).saturating_add(rd(previous + 16).saturating_mul(8));
            chunk = previous;
        }
        c
    }

    /// Proves that the frame at `target` in chunk `k` is a live frame: the
    /// chunk's frames, from its first, each as long as its code object says,
    /// must reach `target` exactly. Every frame passed over is live (the
    /// interpreter pushed it and has not popped it), so its code object is too
    /// (a frame holds a strong reference to it) and is read directly. Targets
    /// come outermost first, so each chunk is walked once.
    fn tile_to(&self, chunks: &mut Chunks, k: usize, target: u64) -> Result<(), &'static str> {
        let l = &self.layout;
        let Some(ds) = l.datastack else {
            return Err(reason::CHAIN);
        };
        let mut s = chunks.cursor[k];
        while s < target {
            if s + l.frame_size > chunks.hi[k] {
                return Err(reason::CHAIN);
            }
            // SAFETY: `s` starts a live frame inside the chunk (induction from
            // the chunk's first frame).
            let code = unsafe { ((s + l.frame_code) as *const u64).read_unaligned() };
            let words = self.frame_words(code, ds.frame_words)?;
            match words.checked_mul(8) {
                Some(b) if b >= l.frame_size => s += b,
                _ => return Err(reason::CHAIN),
            }
        }
        if s != target {
            return Err(reason::CHAIN);
        }
        chunks.cursor[k] = target;
        Ok(())
    }

    /// The data-stack words of a live frame whose code object is `code`.
    fn frame_words(&self, code: u64, fw: FrameWords) -> Result<u64, &'static str> {
        if code == 0 || !code.is_multiple_of(8) {
            return Err(reason::CODE_TYPE);
        }
        // SAFETY: the code object of a live frame is live (see `tile_to`).
        let rd32 = |o: u64| unsafe { ((code + o) as *const i32).read_unaligned() };
        // SAFETY: as above; the header comes first.
        let ty = unsafe { ((code + self.layout.ob_type) as *const u64).read_unaligned() };
        if ty != self.code_type {
            return Err(reason::CODE_TYPE);
        }
        let words = match fw {
            FrameWords::Field(o) => i64::from(rd32(o)),
            FrameWords::Sum {
                nlocalsplus,
                stacksize,
                specials,
            } => i64::from(rd32(nlocalsplus)) + i64::from(rd32(stacksize)) + specials as i64,
        };
        u64::try_from(words).map_err(|_| reason::CHAIN)
    }

    /// The frame chain, innermost first, into `raw`: (frames, truncated).
    ///
    /// Frames in the live part of the thread's data stack (3.11+) are read
    /// directly and proven live by `tile_to`, and so are their code objects;
    /// other frames (3.10's heap frames, generators' frames) and their code
    /// objects only after a probe in this capture.
    fn read_chain(
        &self,
        tstate: u64,
        mem: &mut Known,
        raw: &mut [MaybeUninit<Raw>],
    ) -> Result<(usize, bool), &'static str> {
        let l = &self.layout;
        // The thread state is the interpreter's own, live while the thread is.
        let rd = |a: u64| -> u64 {
            // SAFETY: inside the live PyThreadState / _PyCFrame of this thread,
            // or a frame checked readable by the caller of `rd`.
            unsafe { (a as *const u64).read_unaligned() }
        };
        let mut frame = rd(tstate + l.tstate_frame);
        if let Some(off) = l.cframe_current {
            if frame == 0 {
                return Ok((0, false));
            }
            if !self.readable(frame, off + 8, mem) {
                return Err(reason::CHAIN);
            }
            frame = rd(frame + off);
        }
        if frame == 0 {
            return Ok((0, false));
        }
        let mut chunks = self.data_stack(tstate);
        let mut n: usize = 0;
        let mut steps = 0;
        let mut truncated = false;
        // Consecutive frames mostly share a chunk: try the last one first.
        let mut last_chunk = 0;
        while frame != 0 {
            // Bounded: a cycle in a corrupted chain ends at the cap.
            steps += 1;
            if steps > 4 * raw.len() {
                truncated = true;
                break;
            }
            let chunk = if last_chunk < chunks.n
                && chunks.lo[last_chunk] <= frame
                && frame
                    .checked_add(l.frame_size)
                    .is_some_and(|end| end <= chunks.hi[last_chunk])
            {
                Some(last_chunk)
            } else {
                chunks.find(frame, l.frame_size)
            };
            if let Some(k) = chunk {
                last_chunk = k;
            }
            if !frame.is_multiple_of(8)
                || (chunk.is_none() && !self.readable(frame, l.frame_size, mem))
            {
                return Err(reason::FRAME_UNREADABLE);
            }
            let previous = rd(frame + l.frame_previous);
            let owner = l.frame_owner.map(|o| {
                // SAFETY: within the frame just checked.
                unsafe { *((frame + o) as *const u8) }
            });
            if let FrameKind::Interpreter {
                cstack_owner: Some(cs),
            } = l.frame_kind
                && owner == Some(cs)
            {
                // The shim frame of an eval-loop invocation: the frames before it
                // (inner) were that invocation's.
                if let Some(last) = n.checked_sub(1) {
                    // SAFETY: `raw[..n]` is initialized.
                    unsafe { raw[last].assume_init_mut().group_end = true };
                }
                frame = previous;
                continue;
            }
            if n == raw.len() {
                truncated = true;
                break;
            }
            let code = rd(frame + l.frame_code);
            let instruction = match l.frame_kind {
                FrameKind::Object => {
                    // SAFETY: within the frame just checked.
                    let lasti = unsafe { ((frame + l.frame_instr) as *const i32).read_unaligned() };
                    lasti.max(0) as u32
                }
                FrameKind::Interpreter { .. } => {
                    let ptr = rd(frame + l.frame_instr);
                    let base = code + l.code_adaptive.unwrap_or(0);
                    if ptr < base || ptr - base > (64 << 20) {
                        return Err(reason::INSTRUCTION);
                    }
                    ((ptr - base) / 2) as u32
                }
            };
            let is_entry = l.frame_is_entry.is_some_and(|o| {
                // SAFETY: within the frame just checked.
                unsafe { *((frame + o) as *const u8) != 0 }
            });
            raw[n].write(Raw {
                code: 0,
                instruction,
                group_end: l.frame_kind == FrameKind::Object || is_entry,
                code_ptr: code,
                in_stack: if chunk.is_some() { frame } else { 0 },
                chunk: chunk.unwrap_or(0) as u8,
            });
            n += 1;
            frame = previous;
        }
        // Outermost first: each chunk is tiled once, from its first frame.
        // SAFETY: `raw[..n]` is initialized; MaybeUninit<Raw> has Raw's layout.
        let read: &mut [Raw] =
            unsafe { std::slice::from_raw_parts_mut(raw.as_mut_ptr().cast::<Raw>(), n) };
        for r in read.iter().rev().filter(|r| r.in_stack != 0) {
            self.tile_to(&mut chunks, usize::from(r.chunk), r.in_stack)?;
        }
        let unproven = read.iter().filter(|r| r.in_stack == 0).map(|r| r.code_ptr);
        self.probe_code_pages(unproven, mem)?;
        for r in read.iter_mut() {
            r.code = self.code_id(r.code_ptr, mem, r.in_stack != 0)?;
        }
        Ok((n, truncated))
    }

    /// Probes the pages of the code objects `codes` not already known, and
    /// remembers them for this capture. An unreadable one is left for
    /// `code_id` to report.
    fn probe_code_pages(
        &self,
        codes: impl Iterator<Item = u64>,
        mem: &mut Known,
    ) -> Result<(), &'static str> {
        for code in codes {
            let Some(end) = code.checked_add(self.code_span) else {
                return Err(reason::CODE_UNREADABLE);
            };
            if mem.covers(code, end) {
                continue;
            }
            for p in code >> 12..=(end - 1) >> 12 {
                if mem.has_page(p) {
                    continue;
                }
                mem.probes += 1;
                if !self.page_readable(p) {
                    continue;
                }
                if mem.npages < PAGES {
                    mem.pages[mem.npages].write(p);
                    mem.npages += 1;
                }
            }
        }
        Ok(())
    }

    /// Whether page `page` can be read now, without faulting.
    ///
    /// `rt_sigprocmask` with an invalid `how` copies the 8-byte set from the
    /// address first (EFAULT if it cannot) and then refuses (EINVAL), changing
    /// nothing: a probe at the cost of a plain system call. `process_vm_readv`
    /// says the same at about ten times the cost (pinning the page), and is
    /// the fallback where a seccomp filter refuses the first.
    fn page_readable(&self, page: u64) -> bool {
        const HOW_INVALID: libc::c_long = -1;
        // SAFETY: the kernel only reads 8 bytes at the address (or fails with
        // EFAULT), and with an invalid `how` changes no signal mask.
        let r = unsafe {
            libc::syscall(
                libc::SYS_rt_sigprocmask,
                HOW_INVALID,
                page << 12,
                std::ptr::null_mut::<c_void>(),
                8usize,
            )
        };
        let errno = if r < 0 {
            std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
        } else {
            0
        };
        match errno {
            libc::EINVAL => true,
            libc::EFAULT => false,
            _ => {
                if self.vm_read(page << 12, &mut [0u8; 1]) {
                    return true;
                }
                let e = std::io::Error::last_os_error().raw_os_error();
                if matches!(e, Some(libc::EPERM | libc::ENOSYS | libc::EACCES)) {
                    self.refused.store(true, Ordering::Relaxed);
                }
                false
            }
        }
    }

    /// The code table index of a code object, copying it the first time.
    /// `live`: the code object of a frame proven live (`tile_to`), read without
    /// a probe, as are the name, file and line table it holds references to.
    fn code_id(&self, code: u64, mem: &mut Known, live: bool) -> Result<u32, &'static str> {
        let l = &self.layout;
        if !code.is_multiple_of(8) || !(live || self.readable(code, self.code_span, mem)) {
            return Err(reason::CODE_UNREADABLE);
        }
        // SAFETY: inside the code object, live or just checked readable.
        let rd = |a: u64| unsafe { (a as *const u64).read_unaligned() };
        if rd(code + l.ob_type) != self.code_type {
            return Err(reason::CODE_TYPE);
        }
        // SAFETY: as above.
        let first_line =
            unsafe { ((code + l.code_firstlineno) as *const i32).read_unaligned() } as u32;
        let table_ptr = rd(code + l.code_linetable);
        let start = ((code >> 4).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 40) as usize % CODE_SLOTS;
        for i in 0..32 {
            let idx = (start + i) % CODE_SLOTS;
            let slot = &self.codes[idx];
            let key = slot.key.load(Ordering::Acquire);
            if key == code {
                if slot.state.load(Ordering::Acquire) == 2
                    && slot.first_line.load(Ordering::Relaxed) == first_line
                    && slot.line_table_ptr.load(Ordering::Relaxed) == table_ptr
                {
                    return Ok(idx as u32);
                }
                // Being written by another thread, or a new code object at a
                // freed one's address: take another slot.
                continue;
            }
            if key == 0
                && slot
                    .key
                    .compare_exchange(0, code, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
            {
                slot.state.store(1, Ordering::Relaxed);
                let qualname = self.copy_str(rd(code + l.code_qualname), mem, live)?;
                let file = self.copy_str(rd(code + l.code_filename), mem, live)?;
                let table = self.copy_bytes(table_ptr, mem, live)?;
                slot.first_line.store(first_line, Ordering::Relaxed);
                slot.line_table_ptr.store(table_ptr, Ordering::Relaxed);
                slot.qualname.store(qualname, Ordering::Relaxed);
                slot.file.store(file, Ordering::Relaxed);
                slot.line_table.store(table, Ordering::Relaxed);
                slot.state.store(2, Ordering::Release);
                return Ok(idx as u32);
            }
        }
        self.overflow.store(true, Ordering::Relaxed);
        Ok(u32::MAX)
    }

    /// Copies a `str` object's text into the arena as UTF-8.
    fn copy_str(&self, obj: u64, mem: &mut Known, live: bool) -> Result<u64, &'static str> {
        let l = &self.layout;
        let mut head = [0u8; 128];
        let hlen = l.compact_size as usize;
        if !obj.is_multiple_of(8)
            || hlen > head.len()
            || !self.safe_read(obj, &mut head[..hlen], mem, live)
        {
            return Err(reason::STRING);
        }
        let field = |o: u64, n: usize| -> Option<u64> {
            let b = head.get(o as usize..(o as usize).checked_add(n)?)?;
            let mut v = [0u8; 8];
            v[..n].copy_from_slice(b);
            Some(u64::from_le_bytes(v))
        };
        let (Some(ty), Some(len), Some(state)) = (
            field(l.ob_type, 8),
            field(l.unicode_length, 8),
            field(l.unicode_state, 4),
        ) else {
            return Err(reason::STRING);
        };
        if ty != self.unicode_type {
            return Err(reason::STRING);
        }
        let len = len.min(1024) as usize;
        let (kind, compact, ascii) = ((state >> 2) & 7, (state >> 5) & 1, (state >> 6) & 1);
        if compact == 0 || !(1..=4).contains(&kind) || kind == 3 {
            return Err(reason::STRING);
        }
        let data = obj
            + if ascii == 1 {
                l.ascii_size
            } else {
                l.compact_size
            };
        let mut buf = [0u8; 4096];
        let raw = &mut buf[..len * kind as usize];
        if !self.safe_read(data, raw, mem, live) {
            return Err(reason::STRING);
        }
        let mut utf8 = [0u8; 4096];
        let mut w = 0;
        for c in raw.chunks_exact(kind as usize) {
            let cp = match kind {
                1 => u32::from(c[0]),
                2 => u32::from(u16::from_le_bytes([c[0], c[1]])),
                _ => u32::from_le_bytes([c[0], c[1], c[2], c[3]]),
            };
            let ch = char::from_u32(cp).unwrap_or('?');
            if w + ch.len_utf8() > utf8.len() {
                break;
            }
            w += ch.encode_utf8(&mut utf8[w..]).len();
        }
        Ok(self.arena_put(&utf8[..w]))
    }

    /// Copies a `bytes` object's contents into the arena.
    fn copy_bytes(&self, obj: u64, mem: &mut Known, live: bool) -> Result<u64, &'static str> {
        let l = &self.layout;
        let mut head = [0u8; 64];
        let n = l.bytes_data as usize;
        if !obj.is_multiple_of(8)
            || n > head.len()
            || !self.safe_read(obj, &mut head[..n], mem, live)
        {
            return Err(reason::LINE_TABLE);
        }
        let field = |o: u64| -> Option<u64> {
            Some(u64::from_le_bytes(
                head.get(o as usize..o as usize + 8)?.try_into().ok()?,
            ))
        };
        let (Some(ty), Some(len)) = (field(l.ob_type), field(l.bytes_size)) else {
            return Err(reason::LINE_TABLE);
        };
        if ty != self.bytes_type {
            return Err(reason::LINE_TABLE);
        }
        let len = len as usize;
        if len > 1 << 20 {
            return Err(reason::LINE_TABLE);
        }
        let Some(start) = self.arena_reserve(len) else {
            return Ok(0);
        };
        // SAFETY: the reserved range is ours alone until published.
        let dst = unsafe {
            std::slice::from_raw_parts_mut(self.arena[start..start + len].as_ptr() as *mut u8, len)
        };
        if !self.safe_read(obj + l.bytes_data, dst, mem, live) {
            return Err(reason::LINE_TABLE);
        }
        Ok((start as u64) << 32 | len as u64)
    }

    fn arena_reserve(&self, len: usize) -> Option<usize> {
        let start = self.arena_used.fetch_add(len, Ordering::Relaxed);
        if start + len > self.arena.len() {
            self.overflow.store(true, Ordering::Relaxed);
            return None;
        }
        Some(start)
    }

    fn arena_put(&self, bytes: &[u8]) -> u64 {
        let Some(start) = self.arena_reserve(bytes.len()) else {
            return 0;
        };
        for (cell, b) in self.arena[start..start + bytes.len()].iter().zip(bytes) {
            // SAFETY: the reserved range is ours alone until published.
            unsafe { *cell.get() = *b };
        }
        (start as u64) << 32 | bytes.len() as u64
    }

    /// May `[addr, addr+len)` be read directly? The thread's stack may; other
    /// memory once its pages were read successfully by `process_vm_readv` in
    /// this capture.
    #[inline(always)]
    fn readable(&self, addr: u64, len: u64, mem: &mut Known) -> bool {
        let Some(end) = addr.checked_add(len) else {
            return false;
        };
        mem.covers(addr, end) || self.readable_pages(addr, end, mem)
    }

    #[inline(never)]
    fn readable_pages(&self, addr: u64, end: u64, mem: &mut Known) -> bool {
        let (first, last) = (addr >> 12, (end - 1) >> 12);
        if !(first..=last).all(|p| {
            mem.probes += 1;
            self.page_readable(p)
        }) {
            return false;
        }
        mem.remember(first, last);
        true
    }

    /// Copies `dst.len()` bytes from `addr` if they are live (`live`: part of
    /// an object a live code object refers to) or found readable.
    fn safe_read(&self, addr: u64, dst: &mut [u8], mem: &mut Known, live: bool) -> bool {
        if dst.is_empty() {
            return true;
        }
        if live || self.readable(addr, dst.len() as u64, mem) {
            // SAFETY: live, or checked readable above.
            unsafe {
                std::ptr::copy_nonoverlapping(addr as *const u8, dst.as_mut_ptr(), dst.len())
            };
            return true;
        }
        false
    }

    fn vm_read(&self, addr: u64, dst: &mut [u8]) -> bool {
        let local = libc::iovec {
            iov_base: dst.as_mut_ptr().cast(),
            iov_len: dst.len(),
        };
        let remote = libc::iovec {
            iov_base: addr as *mut c_void,
            iov_len: dst.len(),
        };
        // SAFETY: reads this process's memory into `dst`; a bad address returns
        // EFAULT instead of faulting.
        let n = unsafe { libc::process_vm_readv(self.pid, &local, 1, &remote, 1, 0) };
        n == dst.len() as isize
    }
}

fn unsafe_zeroed_dl_info() -> libc::Dl_info {
    libc::Dl_info {
        dli_fname: std::ptr::null(),
        dli_fbase: std::ptr::null_mut(),
        dli_sname: std::ptr::null(),
        dli_saddr: std::ptr::null_mut(),
    }
}

#[cfg(test)]
#[allow(non_snake_case)]
mod tests {
    //! A synthetic layout test: no free-threaded CPython exists on the machines
    //! this crate is tested on, so a 3.13t frame chain is built in memory with
    //! the layout of CPython 3.13's headers compiled with `Py_GIL_DISABLED`
    //! (`Include/object.h`: a 32-byte object header, `ob_type` at 24, so every
    //! object field 16 bytes later than in the default build), and read by the
    //! same walker as a real one.

    use super::*;

    /// `_Py_DebugOffsets` of a 3.13.0 free-threaded build, as u64 words from
    /// offset 0 (cookie, version, free_threaded, then the structs' offsets).
    fn debug_offsets_313t() -> Vec<u64> {
        let mut w = vec![0u64; 584 / 8];
        w[0] = u64::from_le_bytes(*v3_13::COOKIE);
        w[1] = 0x030d_00f0;
        let mut set = |off: usize, v: u64| w[off / 8] = v;
        set(16, 1); // free_threaded
        set(184, 72); // thread_state.current_frame
        set(208, 232); // thread_state.datastack_chunk
        set(224, 80); // interpreter_frame.size
        set(232, 8); // .previous
        set(240, 0); // .executable
        set(248, 56); // .instr_ptr
        set(256, 72); // .localsplus
        set(264, 70); // .owner
        set(272, 224); // code_object.size
        set(280, 128); // .filename
        set(288, 136); // .name
        set(296, 144); // .qualname
        set(304, 152); // .linetable
        set(312, 84); // .firstlineno
        set(344, 216); // .co_code_adaptive
        set(352, 32); // pyobject.size
        set(360, 24); // pyobject.ob_type
        set(520, 32); // bytes_object.ob_size
        set(528, 48); // bytes_object.ob_sval
        set(544, 48); // unicode_object.state
        set(552, 32); // unicode_object.length
        set(560, 56); // unicode_object.asciiobject_size
        w
    }

    unsafe extern "C" fn no_thread_state() -> *mut c_void {
        std::ptr::null_mut()
    }

    /// Memory for the synthetic interpreter: 8-byte words, addressed by byte.
    struct Heap(Vec<u64>);

    impl Heap {
        fn addr(&self, off: usize) -> u64 {
            self.0.as_ptr() as u64 + off as u64
        }
        fn put(&mut self, off: usize, v: u64) {
            self.0[off / 8] = v;
        }
        fn put_u32(&mut self, off: usize, v: u32) {
            let w = &mut self.0[off / 8];
            let shift = (off % 8) * 8;
            *w = (*w & !(0xffff_ffffu64 << shift)) | (u64::from(v) << shift);
        }
        fn put_bytes(&mut self, off: usize, b: &[u8]) {
            for (i, &c) in b.iter().enumerate() {
                let w = &mut self.0[(off + i) / 8];
                let shift = ((off + i) % 8) * 8;
                *w = (*w & !(0xffu64 << shift)) | (u64::from(c) << shift);
            }
        }
    }

    /// Builds: a thread state whose data stack holds `outer` then `inner`
    /// frames, each with its code object, names, file and line table.
    /// Returns (reader, heap, thread state address).
    /// `inner_link`: where the inner frame's link to its caller points, as a
    /// byte offset from the outer frame (0: the outer frame itself).
    fn synthetic_313t(ob_type_override: Option<u64>, inner_link: usize) -> (Python, Heap, u64) {
        let words = debug_offsets_313t();
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        let mut layout = v3_13::layout(&bytes[..8], words[1], |off| words[off as usize / 8])
            .expect("a 3.13 layout");
        assert!(layout.free_threaded);
        if let Some(o) = ob_type_override {
            layout.ob_type = o;
        }
        let mut h = Heap(vec![0u64; 4096]);
        let (code_ty, str_ty, bytes_ty) = (h.addr(0), h.addr(64), h.addr(128));
        // str objects: compact ASCII (state: kind 1 << 2, compact 1 << 5,
        // ascii 1 << 6), text after the 56-byte header.
        let string = |h: &mut Heap, off: usize, text: &str| {
            h.put(off + 24, str_ty);
            h.put(off + 32, text.len() as u64);
            h.put_u32(off + 48, (1 << 2) | (1 << 5) | (1 << 6));
            h.put_bytes(off + 56, text.as_bytes());
            h.addr(off)
        };
        let file = string(&mut h, 256, "/src/synthetic.py");
        let q_outer = string(&mut h, 384, "outer");
        let q_inner = string(&mut h, 512, "inner");
        // A location table: one code unit, "no column" entry, line + 2.
        h.put(640 + 24, bytes_ty);
        h.put(640 + 32, 2);
        h.put_bytes(640 + 48, &[0x80 | (13 << 3), 2 << 1]);
        let table = h.addr(640);
        let code = |h: &mut Heap, off: usize, qualname: u64, first: u32, framesize: u32| {
            h.put(off + 24, code_ty);
            h.put_u32(off + 84, first);
            h.put_u32(off + 92, framesize); // co_framesize, after co_nlocalsplus
            h.put(off + 128, file);
            h.put(off + 144, qualname);
            h.put(off + 152, table);
            h.addr(off)
        };
        let c_outer = code(&mut h, 1024, q_outer, 10, 12);
        let c_inner = code(&mut h, 1536, q_inner, 40, 11);
        // The thread's first chunk: header, one unused word, then the frames.
        let chunk = 8192;
        h.put(chunk, 0); // previous
        h.put(chunk + 8, 16384); // size
        let outer = chunk + 32;
        let inner = outer + 12 * 8;
        let link = h.addr(outer + inner_link);
        for (f, c, prev) in [(outer, c_outer, 0), (inner, c_inner, link)] {
            h.put(f, c); // f_executable
            h.put(f + 8, prev); // previous
            h.put(f + 56, c + 216); // instr_ptr: the first code unit
        }
        let ts = 24576;
        h.put(ts + 72, h.addr(inner)); // current_frame
        h.put(ts + 232, h.addr(chunk)); // datastack_chunk
        h.put(ts + 240, h.addr(inner + 11 * 8)); // datastack_top
        let py = Python::with_layout(
            layout,
            no_thread_state,
            [code_ty, str_ty, bytes_ty],
            ModuleId(0),
            0..1,
        );
        let ts = h.addr(ts);
        (py, h, ts)
    }

    #[test]
    fn synthetic_layout_313t__frame_chain_read_with_the_free_threaded_header() {
        let (py, _heap, ts) = synthetic_313t(None, 0);
        let mut raw = [const { MaybeUninit::<Raw>::uninit() }; MAX_PYTHON_FRAMES];
        let mut mem = Known::new((0, 0));
        let (n, truncated) = py.read_chain(ts, &mut mem, &mut raw).expect("readable");
        assert_eq!((n, truncated), (2, false));
        // Everything was proven live through the data stack: no probe.
        assert_eq!(mem.probes, 0);
        let got: Vec<String> = raw[..n]
            .iter()
            .map(|r| {
                // SAFETY: read_chain initialized `raw[..n]`.
                let r = unsafe { r.assume_init() };
                py.resolve(CodeId(r.code), r.instruction)
                    .unwrap()
                    .to_string()
            })
            .collect();
        assert_eq!(
            got,
            [
                "synthetic.inner (synthetic.py:42)",
                "synthetic.outer (synthetic.py:12)"
            ]
        );
    }

    #[test]
    fn synthetic_layout_313t__read_with_the_default_header__rejected_not_misread() {
        // ob_type at 8 (the default build's header) finds no `code` type.
        let (py, _heap, ts) = synthetic_313t(Some(8), 0);
        let mut raw = [const { MaybeUninit::<Raw>::uninit() }; MAX_PYTHON_FRAMES];
        let r = py.read_chain(ts, &mut Known::new((0, 0)), &mut raw);
        assert_eq!(r.err(), Some(reason::CODE_TYPE));
    }

    #[test]
    fn synthetic_link_into_the_data_stack_but_not_to_a_frame__rejected_without_reading_it() {
        // The link lands 16 bytes into the outer frame: readable memory (the
        // live data stack), but what it would take for a code pointer is the
        // outer frame's `f_funcobj` slot, here 0. The tiling walk from the
        // chunk's first frame steps over it, so the chain is refused before
        // any code object is read through it.
        let (py, mut heap, ts) = synthetic_313t(None, 16);
        // A pointer that must never be dereferenced, where the bogus frame's
        // code pointer is read from.
        heap.put(8192 + 32 + 16, 0x10);
        // ... with an instruction pointer inside that "code object", so that
        // only the data stack's own layout can tell.
        heap.put(8192 + 32 + 16 + 56, 0x10 + 216);
        let mut raw = [const { MaybeUninit::<Raw>::uninit() }; MAX_PYTHON_FRAMES];
        let mut mem = Known::new((0, 0));
        let r = py.read_chain(ts, &mut mem, &mut raw);
        assert_eq!(r.err(), Some(reason::CHAIN));
        assert_eq!(mem.probes, 0);
    }
}
