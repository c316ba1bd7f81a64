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
//! Each step has its file: `detect.rs`, `splice.rs` (with `reuse.rs`) and `code.rs` (resolve);
//! `memory.rs` holds what the reads below may trust and the probes, `watch.rs`
//! the count of destroyed code objects that lets a proof skip them (3.11+), and this
//! file the reader's state.
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
//! subinterpreter's) are not in it: the stack ends in [`StackEnd::PythonCut`](crate::StackEnd::PythonCut)
//! instead of counting as complete.
//!
//! **Reuse.** With a thread's [`crate::Trail`], the outer part of the chain is
//! taken from the thread's last read where every word that read took there is
//! read again, outermost first and proven live as above, and found unchanged
//! (`reuse.rs`); counted in [`crate::StatsSnapshot::python_reused`].
//!
//! **Code objects.** The first time a code object is seen, its qualified name, file
//! name, first line and line table are copied into a fixed arena (allocated at
//! set-up), so frames can be resolved later, off the hot path.

mod chunks;
mod code;
pub(crate) use memo::CodeMemo;
mod detect;
mod layout;
mod linetable;
mod memo;
mod memory;
mod reuse;
pub(crate) use reuse::{Chain, Codes, FrameTrail, Proof};
mod replay;
pub(crate) use replay::LastMerge;
mod splice;
mod v3_10;
mod v3_11;
mod v3_12;
mod v3_13;
mod watch;

use std::cell::UnsafeCell;
use std::ffi::c_void;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use layout::Layout;

use crate::frame::{ModuleId, Stats};

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
    /// 3.12+: counts code objects destroyed, so that a kept chain's proof
    /// need not read code objects again (`watch.rs`).
    watch: Option<watch::CodeWatch>,
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

impl Python {
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

    use std::mem::MaybeUninit;

    use super::chunks::Raw;
    use super::memory::Known;
    use super::*;
    use crate::frame::CodeId;

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
        /// A str object at `off` (the str type is at 64): compact ASCII
        /// (state: kind 1 << 2, compact 1 << 5, ascii 1 << 6), text after
        /// the 56-byte header. Returns its address.
        fn put_str(&mut self, off: usize, text: &str) -> u64 {
            self.put(off + 24, self.addr(64));
            self.put(off + 32, text.len() as u64);
            self.put_u32(off + 48, (1 << 2) | (1 << 5) | (1 << 6));
            self.put_bytes(off + 56, text.as_bytes());
            self.addr(off)
        }
        /// A 3.13 code object at `off` (the code type is at 0) named
        /// `qualname`, in `file`, with line table `table`. Returns its address.
        fn put_code(
            &mut self,
            off: usize,
            (qualname, file, table): (u64, u64, u64),
            first: u32,
            framesize: u32,
        ) -> u64 {
            self.put(off + 24, self.addr(0));
            self.put_u32(off + 84, first);
            self.put_u32(off + 92, framesize); // co_framesize, after co_nlocalsplus
            self.put(off + 128, file);
            self.put(off + 144, qualname);
            self.put(off + 152, table);
            self.addr(off)
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
        let bytes_ty = h.addr(128);
        let file = h.put_str(256, "/src/synthetic.py");
        let q_outer = h.put_str(384, "outer");
        let q_inner = h.put_str(512, "inner");
        // A location table: "no column" entries of one code unit each, line
        // + 2, then + 3.
        h.put(640 + 24, bytes_ty);
        h.put(640 + 32, 4);
        h.put_bytes(
            640 + 48,
            &[0x80 | (13 << 3), 2 << 1, 0x80 | (13 << 3), 3 << 1],
        );
        let table = h.addr(640);
        let c_outer = h.put_code(1024, (q_outer, file, table), 10, 12);
        let c_inner = h.put_code(1536, (q_inner, file, table), 40, 11);
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
            [h.addr(0), h.addr(64), bytes_ty],
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
        let (n, truncated) = py
            .read_chain(ts, &mut mem, &mut raw, None)
            .expect("readable");
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

    /// The chain read with a thread's code memo, resolved innermost first.
    fn read_with_memo(py: &Python, ts: u64, memo: &mut CodeMemo) -> Vec<String> {
        let mut raw = [const { MaybeUninit::<Raw>::uninit() }; MAX_PYTHON_FRAMES];
        let mut mem = Known::with_codes((0, 0), Some(memo));
        let (n, _) = py
            .read_chain(ts, &mut mem, &mut raw, None)
            .expect("readable");
        raw[..n]
            .iter()
            .map(|r| {
                // SAFETY: read_chain initialized `raw[..n]`.
                let r = unsafe { r.assume_init() };
                py.resolve(CodeId(r.code), r.instruction)
                    .unwrap()
                    .to_string()
            })
            .collect()
    }

    #[test]
    fn synthetic_313t__a_new_code_object_where_a_freed_one_was__gets_its_own_id_from_the_thread_memo()
     {
        let (py, mut heap, ts) = synthetic_313t(None, 0);
        let mut memo = CodeMemo::new();
        let before = [
            "synthetic.inner (synthetic.py:42)",
            "synthetic.outer (synthetic.py:12)",
        ];
        assert_eq!(read_with_memo(&py, ts, &mut memo), before);
        assert_eq!(read_with_memo(&py, ts, &mut memo), before);
        // The inner function's code object freed and another one made at its
        // address (a function made by `exec` again, say): another name and
        // first line, the same address.
        let other = heap.put_str(800, "other");
        heap.put(1536 + 144, other);
        heap.put_u32(1536 + 84, 60);
        assert_eq!(
            read_with_memo(&py, ts, &mut memo),
            [
                "synthetic.other (synthetic.py:62)",
                "synthetic.outer (synthetic.py:12)"
            ]
        );
    }

    /// The chain read with a thread's code memo and frame trail, resolved
    /// innermost first, and the frames taken from the trail.
    fn read_with_trail(
        py: &Python,
        ts: u64,
        memo: &mut CodeMemo,
        trail: &mut FrameTrail,
    ) -> (Vec<String>, u32) {
        let mut raw = [const { MaybeUninit::<Raw>::uninit() }; MAX_PYTHON_FRAMES];
        let mut mem = Known::with_codes((0, 0), Some(memo));
        let (n, _) = py
            .read_chain(ts, &mut mem, &mut raw, Some(&mut *trail))
            .expect("readable");
        let names = raw[..n]
            .iter()
            .map(|r| {
                // SAFETY: read_chain initialized `raw[..n]`.
                let r = unsafe { r.assume_init() };
                py.resolve(CodeId(r.code), r.instruction)
                    .unwrap()
                    .to_string()
            })
            .collect();
        (names, trail.reused)
    }

    /// Reads the synthetic chain twice with a trail (the second read takes
    /// both frames from the first), changes it with `change`, and returns
    /// the third read and the frames it reused.
    fn trail_after(change: impl FnOnce(&mut Heap)) -> (Vec<String>, u32) {
        let (py, mut heap, ts) = synthetic_313t(None, 0);
        let (mut memo, mut trail) = (CodeMemo::new(), FrameTrail::new());
        let before = [
            "synthetic.inner (synthetic.py:42)",
            "synthetic.outer (synthetic.py:12)",
        ];
        assert_eq!(
            read_with_trail(&py, ts, &mut memo, &mut trail),
            (before.map(String::from).to_vec(), 0)
        );
        assert_eq!(
            read_with_trail(&py, ts, &mut memo, &mut trail),
            (before.map(String::from).to_vec(), 2)
        );
        change(&mut heap);
        read_with_trail(&py, ts, &mut memo, &mut trail)
    }

    #[test]
    fn synthetic_313t_trail__the_outer_frame_at_another_instruction__gets_its_new_line() {
        // The outer function called the inner one again from its next line:
        // the same frames at the same addresses, one instruction word changed.
        let (names, reused) = trail_after(|h| {
            let code = h.addr(1024);
            h.put(8192 + 32 + 56, code + 216 + 2);
        });
        assert_eq!(
            names,
            [
                "synthetic.inner (synthetic.py:42)",
                "synthetic.outer (synthetic.py:15)"
            ]
        );
        assert_eq!(reused, 0);
    }

    #[test]
    fn synthetic_313t_trail__another_function_in_the_outer_frame_slot__gets_its_frame() {
        // The outer function returned and another one, of the same frame
        // size, first line and line table, was called into its slot (and
        // called the inner one again): only the frame's code object and
        // instruction pointer tell.
        let (names, reused) = trail_after(|h| {
            let another = h.put_str(2304, "another");
            let (file, table) = (h.0[(1024 + 128) / 8], h.0[(1024 + 152) / 8]);
            let code = h.put_code(2560, (another, file, table), 10, 12);
            h.put(8192 + 32, code);
            h.put(8192 + 32 + 56, code + 216);
        });
        assert_eq!(
            names,
            [
                "synthetic.inner (synthetic.py:42)",
                "synthetic.another (synthetic.py:12)"
            ]
        );
        assert_eq!(reused, 0);
    }

    #[test]
    fn synthetic_313t_trail__a_new_code_object_where_the_outer_one_was__gets_its_name() {
        // The outer frame's code object freed and another made at its address,
        // its frame again in the same slot at the same instruction.
        let (names, reused) = trail_after(|h| {
            let other = h.put_str(2304, "other");
            h.put(1024 + 144, other);
            h.put_u32(1024 + 84, 60);
        });
        assert_eq!(
            names,
            [
                "synthetic.inner (synthetic.py:42)",
                "synthetic.other (synthetic.py:62)"
            ]
        );
        assert_eq!(reused, 0);
    }

    #[test]
    fn synthetic_313t_trail__the_inner_frame_changed__outer_frame_reused() {
        // Only the innermost frame moved on: it is read again, the outer one
        // proven and taken from the trail.
        let (names, reused) = trail_after(|h| {
            let code = h.addr(1536);
            h.put(8192 + 32 + 96 + 56, code + 216 + 2);
        });
        assert_eq!(
            names,
            [
                "synthetic.inner (synthetic.py:45)",
                "synthetic.outer (synthetic.py:12)"
            ]
        );
        assert_eq!(reused, 1);
    }

    #[test]
    fn synthetic_layout_313t__read_with_the_default_header__rejected_not_misread() {
        // ob_type at 8 (the default build's header) finds no `code` type.
        let (py, _heap, ts) = synthetic_313t(Some(8), 0);
        let mut raw = [const { MaybeUninit::<Raw>::uninit() }; MAX_PYTHON_FRAMES];
        let r = py.read_chain(ts, &mut Known::new((0, 0)), &mut raw, None);
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
        let r = py.read_chain(ts, &mut mem, &mut raw, None);
        assert_eq!(r.err(), Some(reason::CHAIN));
        assert_eq!(mem.probes, 0);
    }
}
