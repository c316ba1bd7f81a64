//! Whether any code object was destroyed since a frame chain was read: from
//! CPython 3.12 on, a code watcher (`PyCode_AddWatcher`) counts destructions.
//!
//! Proving a kept chain again reads, per frame, its code object's type, frame
//! size, first line and line table (see `reuse.rs`): most of the proof's time,
//! since the outer frames' code objects are out of cache by the next capture.
//! Those fields never change while the object lives; they are read again only
//! because another code object could have taken the address of one destroyed
//! meanwhile. While the count is the same as when the chain was read, every
//! code object the chain names is the one it was: the proof then compares each
//! frame's own words (code pointer, instruction, link, flags) and takes each
//! frame's size as read. The count is read before the chain, and a frame of
//! the calling thread (frozen while it is in the capture) keeps its code
//! object alive, so a destruction after that read cannot be one the proof
//! relies on.
//!
//! The watcher is registered once, by the interpreter's main thread: the
//! first capture that asks ([`CodeWatch::schedule`], from a CUDA call of the
//! program's, never a signal handler) queues a pending call
//! (`Py_AddPendingCall`, which needs neither the GIL nor a thread state: a
//! launch from PyTorch runs with the GIL released), which the main thread
//! runs between two bytecodes, with the GIL, where the C API may be called.
//! It is the interpreter's own mechanism: the program's code runs as before,
//! and each code object created or destroyed calls the watcher once (an
//! atomic increment). Watchers are per interpreter: the count vouches only
//! for threads of the main interpreter. Until the main thread runs the call,
//! before 3.12, in a free-threaded build, or where the interpreter has no
//! watcher left, the proof reads every code object as before.

use std::ffi::{CStr, c_int, c_void};
use std::sync::OnceLock;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicU8, AtomicU64};

/// Code objects destroyed since the watcher was registered (any event but a
/// creation counts, so that an event a later version adds is not missed).
static DESTROYED: AtomicU64 = AtomicU64::new(0);

/// `PyThreadState.interp`, after `prev` and `next`, in 3.12 and 3.13.
const TSTATE_INTERP: u64 = 16;

/// `PY_CODE_EVENT_CREATE`.
const CREATE: c_int = 0;

/// `PyCode_WatchCallback`: called with the GIL held; must not fail.
unsafe extern "C" fn on_code(event: c_int, _code: *mut c_void) -> c_int {
    if event != CREATE {
        DESTROYED.fetch_add(1, Release);
    }
    0
}

type Obj = *mut c_void;
type WatchFn = unsafe extern "C" fn(c_int, Obj) -> c_int;
type AddWatcher = unsafe extern "C" fn(WatchFn) -> c_int;
type ThisTstate = unsafe extern "C" fn() -> Obj;
type ErrFetch = unsafe extern "C" fn(*mut Obj, *mut Obj, *mut Obj);
type ErrRestore = unsafe extern "C" fn(Obj, Obj, Obj);
type ErrClear = unsafe extern "C" fn();
type PendingFn = unsafe extern "C" fn(Obj) -> c_int;
type AddPending = unsafe extern "C" fn(PendingFn, Obj) -> c_int;
type Initialized = unsafe extern "C" fn() -> c_int;

/// What registering takes from the interpreter: its functions, found once.
pub(super) struct CodeWatch {
    api: &'static Api,
}

/// The watcher's state, [`UNTRIED`], [`SCHEDULED`], [`ON`] or [`OFF`]: one per
/// process, as the watcher is.
static STATE: AtomicU8 = AtomicU8::new(UNTRIED);
/// The interpreter registered in, once [`ON`].
static INTERP: AtomicU64 = AtomicU64::new(0);

const UNTRIED: u8 = 0;
const SCHEDULED: u8 = 1;
const ON: u8 = 2;
const OFF: u8 = 3;

/// The interpreter's functions, found by [`CodeWatch::detect`]; the pending
/// call, which takes no argument, reads them here.
static API: OnceLock<Api> = OnceLock::new();

struct Api {
    add_pending: AddPending,
    /// `Py_IsInitialized`: the pending call needs the main interpreter.
    initialized: Initialized,
    add_watcher: AddWatcher,
    this_tstate: ThisTstate,
    err_fetch: ErrFetch,
    err_restore: ErrRestore,
    err_clear: ErrClear,
}

impl Api {
    /// `sym`: an exported symbol's address.
    fn find(sym: impl Fn(&CStr) -> Option<u64>) -> Option<Api> {
        let (pending, initialized, add, tstate, fetch, restore, clear) = (
            sym(c"Py_AddPendingCall")?,
            sym(c"Py_IsInitialized")?,
            sym(c"PyCode_AddWatcher")?,
            sym(c"PyGILState_GetThisThreadState")?,
            sym(c"PyErr_Fetch")?,
            sym(c"PyErr_Restore")?,
            sym(c"PyErr_Clear")?,
        );
        // SAFETY: CPython's declarations of these functions, 3.12 and 3.13.
        unsafe {
            Some(Api {
                add_pending: std::mem::transmute::<usize, AddPending>(pending as usize),
                initialized: std::mem::transmute::<usize, Initialized>(initialized as usize),
                add_watcher: std::mem::transmute::<usize, AddWatcher>(add as usize),
                this_tstate: std::mem::transmute::<usize, ThisTstate>(tstate as usize),
                err_fetch: std::mem::transmute::<usize, ErrFetch>(fetch as usize),
                err_restore: std::mem::transmute::<usize, ErrRestore>(restore as usize),
                err_clear: std::mem::transmute::<usize, ErrClear>(clear as usize),
            })
        }
    }
}

/// The pending call that registers the watcher: run by the main thread, with
/// the GIL, between two bytecodes.
unsafe extern "C" fn register_now(_: *mut c_void) -> c_int {
    let Some(api) = API.get() else {
        STATE.store(OFF, Relaxed);
        return 0;
    };
    // SAFETY: this thread holds the GIL at a point where the C API may be
    // called; its thread state is live, and `interp` a field of it. An
    // exception set before is kept; one the registration raises (no watcher
    // left) is cleared: a pending call that fails would raise it in the
    // program.
    let (id, interp) = unsafe {
        let (mut t, mut v, mut tb) = (
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        );
        (api.err_fetch)(&mut t, &mut v, &mut tb);
        let id = (api.add_watcher)(on_code);
        if id < 0 {
            (api.err_clear)();
        }
        (api.err_restore)(t, v, tb);
        let tstate = (api.this_tstate)() as u64;
        let interp = if tstate == 0 {
            0
        } else {
            ((tstate + TSTATE_INTERP) as *const u64).read()
        };
        (id, interp)
    };
    if id < 0 || interp == 0 {
        STATE.store(OFF, Relaxed);
        return 0;
    }
    INTERP.store(interp, Relaxed);
    STATE.store(ON, Release);
    0
}

impl CodeWatch {
    /// The interpreter's pending-call entry, from 3.12 on (not
    /// free-threaded); `sym` gives an exported symbol's address.
    pub(super) fn detect(
        minor: u8,
        free_threaded: bool,
        sym: impl Fn(&CStr) -> Option<u64>,
    ) -> Option<CodeWatch> {
        if minor < 12 || free_threaded {
            return None;
        }
        // One CPython per process: a second detection finds the same.
        if API.get().is_none() {
            let _ = API.set(Api::find(sym)?);
        }
        Some(CodeWatch { api: API.get()? })
    }

    /// Asks the main thread to register the watcher, once, at its next
    /// bytecode boundary (`Py_AddPendingCall`, which needs neither the GIL
    /// nor a thread state), if `safe_point()` says the calling thread may
    /// take the lock that call takes (not in a signal handler), and the
    /// interpreter is initialized (a process may hold a CPython it never
    /// started, or one finalized). A full queue leaves it to a later call.
    pub(super) fn schedule(&self, safe_point: impl FnOnce() -> bool) {
        if STATE.load(Relaxed) != UNTRIED || !safe_point() {
            return;
        }
        // SAFETY: `Py_IsInitialized` reads a flag; it needs no GIL.
        if unsafe { (self.api.initialized)() } == 0 {
            return;
        }
        if STATE
            .compare_exchange(UNTRIED, SCHEDULED, Relaxed, Relaxed)
            .is_err()
        {
            return;
        }
        // SAFETY: a C function that takes no argument.
        if unsafe { (self.api.add_pending)(register_now, std::ptr::null_mut()) } != 0 {
            STATE.store(UNTRIED, Relaxed);
        }
    }

    /// Whether the watcher is registered.
    pub(super) fn on(&self) -> bool {
        STATE.load(Relaxed) == ON
    }

    /// The count of code objects destroyed, plus one, for a thread whose
    /// state is `tstate`: 0 (vouching for nothing) until the watcher is
    /// registered, or for a thread of another interpreter. Read before the
    /// chain it vouches for.
    #[inline]
    pub(super) fn generation(&self, tstate: u64) -> u64 {
        if STATE.load(Acquire) != ON {
            return 0;
        }
        // SAFETY: the thread's own live thread state.
        let interp = unsafe { ((tstate + TSTATE_INTERP) as *const u64).read() };
        if interp != INTERP.load(Relaxed) {
            return 0;
        }
        DESTROYED.load(Acquire).wrapping_add(1)
    }
}

impl super::Python {
    /// Has the interpreter's code watcher registered, once, so that proving
    /// a kept chain need not read its code objects again while none is
    /// destroyed (3.12+; nothing before): a pending call
    /// (`Py_AddPendingCall`), which the main thread runs between two
    /// bytecodes, with the GIL. `safe_point()`, asked only the first time,
    /// says whether the calling thread runs its own code (a CUDA call), not a
    /// signal handler: the call takes a lock.
    pub fn watch_codes(&self, safe_point: impl FnOnce() -> bool) {
        if let Some(w) = &self.watch {
            w.schedule(safe_point);
        }
    }

    /// Whether the code watcher is registered.
    pub fn watching_codes(&self) -> bool {
        self.watch.as_ref().is_some_and(CodeWatch::on)
    }

    /// The code watcher's generation for the calling thread, whose state is
    /// `tstate` (see [`CodeWatch::generation`]).
    #[inline]
    pub(super) fn code_generation(&self, tstate: u64) -> u64 {
        self.watch.as_ref().map_or(0, |w| w.generation(tstate))
    }
}
