//! Whether any code object was destroyed since a frame chain was read: a
//! count of destructions, kept by CPython's code watcher (3.12 on) or, in
//! 3.11, by a deallocator of gpuperf's on the code type.
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
//! The count is set up once, by the interpreter's main thread: the first
//! capture that asks ([`CodeWatch::schedule`], from a CUDA call of the
//! program's, never a signal handler) queues a pending call
//! (`Py_AddPendingCall`, which needs neither the GIL nor a thread state: a
//! launch from PyTorch runs with the GIL released), which the main thread
//! runs between two bytecodes, with the GIL, where the C API may be called.
//! - From 3.12 on it registers a code watcher (`PyCode_AddWatcher`): the
//!   interpreter's own mechanism, which calls it once per code object
//!   created or destroyed. Watchers are per interpreter: the count vouches
//!   only for threads of the main interpreter.
//! - 3.11 has no watcher. Every code object is destroyed by one function,
//!   the code type's `tp_dealloc` (code objects are not collected by the
//!   cycle collector, and the type cannot be subclassed). The pending call
//!   puts in that slot of `PyCode_Type` a function that counts, then calls
//!   the one it replaced: what each deallocation does is unchanged. The slot
//!   is written only where the type's layout is proven (its `tp_name` is
//!   "code") and its page writable, and never restored: the library that
//!   holds the function must stay loaded (the injection library is linked
//!   `-z nodelete`). Types are shared by all of a process's interpreters;
//!   the count is still taken for the main one's threads only, as with a
//!   watcher.
//!
//! An atomic increment per code object destroyed. Until the main thread runs
//! the call, before 3.11, in a free-threaded build, or where the interpreter
//! has no watcher left, the proof reads every code object as before.

use std::ffi::{CStr, c_int, c_void};
use std::sync::OnceLock;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicU8, AtomicU64, AtomicUsize};

/// Code objects destroyed since the count was set up (any event but a
/// creation counts, so that an event a later version adds is not missed).
static DESTROYED: AtomicU64 = AtomicU64::new(0);

/// `PyThreadState.interp`, after `prev` and `next`, from 3.11 to 3.13.
const TSTATE_INTERP: u64 = 16;

/// `PyTypeObject.tp_name` and `tp_dealloc`, after the 24 bytes of
/// `PyObject_VAR_HEAD` (a build with `Py_TRACE_REFS` has more, and is not
/// hooked: its `tp_name` is not found here).
const TP_NAME: u64 = 24;
const TP_DEALLOC: u64 = 48;

/// `PY_CODE_EVENT_CREATE`.
const CREATE: c_int = 0;

/// `PyCode_WatchCallback`: called with the GIL held; must not fail.
unsafe extern "C" fn on_code(event: c_int, _code: *mut c_void) -> c_int {
    if event != CREATE {
        DESTROYED.fetch_add(1, Release);
    }
    0
}

/// The code type's deallocator that [`counting_dealloc`] replaced (3.11).
static REPLACED: AtomicUsize = AtomicUsize::new(0);

/// The code type's deallocator in 3.11, once hooked: counts, then calls the
/// one it replaced, which destroys the object.
unsafe extern "C" fn counting_dealloc(code: *mut c_void) {
    DESTROYED.fetch_add(1, Release);
    let replaced = REPLACED.load(Acquire);
    // SAFETY: `replaced` is the slot's value before this function was stored
    // there (set first, never cleared): `destructor`, called as the
    // interpreter would have called it.
    unsafe { std::mem::transmute::<usize, Dealloc>(replaced)(code) }
}

type Obj = *mut c_void;
type Dealloc = unsafe extern "C" fn(Obj);
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

/// The count's state, [`UNTRIED`], [`SCHEDULED`], [`ON`] or [`OFF`]: one per
/// process, as the code type or watcher is.
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
    count: Count,
    this_tstate: ThisTstate,
    err_fetch: ErrFetch,
    err_restore: ErrRestore,
    err_clear: ErrClear,
}

/// How destructions are counted.
enum Count {
    /// `PyCode_AddWatcher` (3.12+).
    Watcher(AddWatcher),
    /// `PyCode_Type.tp_dealloc`'s address (3.11).
    Dealloc(u64),
}

impl Count {
    fn find(minor: u8, sym: &impl Fn(&CStr) -> Option<u64>) -> Option<Count> {
        if minor >= 12 {
            let add = sym(c"PyCode_AddWatcher")?;
            // SAFETY: CPython's declaration of `PyCode_AddWatcher`.
            return Some(Count::Watcher(unsafe {
                std::mem::transmute::<usize, AddWatcher>(add as usize)
            }));
        }
        let ty = sym(c"PyCode_Type")?;
        // SAFETY: `PyCode_Type` is a static object of the interpreter's, in
        // its loaded image; its third word (`tp_name` where the layout is the
        // one expected) is read, and followed only to the interpreter's own
        // name string, compared byte by byte up to its end.
        let named_code = unsafe {
            let name = ((ty + TP_NAME) as *const *const std::ffi::c_char).read();
            !name.is_null() && CStr::from_ptr(name) == c"code"
        };
        named_code.then_some(Count::Dealloc(ty + TP_DEALLOC))
    }
}

impl Api {
    /// `sym`: an exported symbol's address.
    fn find(minor: u8, sym: impl Fn(&CStr) -> Option<u64>) -> Option<Api> {
        let count = Count::find(minor, &sym)?;
        let (pending, initialized, tstate, fetch, restore, clear) = (
            sym(c"Py_AddPendingCall")?,
            sym(c"Py_IsInitialized")?,
            sym(c"PyGILState_GetThisThreadState")?,
            sym(c"PyErr_Fetch")?,
            sym(c"PyErr_Restore")?,
            sym(c"PyErr_Clear")?,
        );
        // SAFETY: CPython's declarations of these functions, 3.11 to 3.13.
        unsafe {
            Some(Api {
                add_pending: std::mem::transmute::<usize, AddPending>(pending as usize),
                initialized: std::mem::transmute::<usize, Initialized>(initialized as usize),
                count,
                this_tstate: std::mem::transmute::<usize, ThisTstate>(tstate as usize),
                err_fetch: std::mem::transmute::<usize, ErrFetch>(fetch as usize),
                err_restore: std::mem::transmute::<usize, ErrRestore>(restore as usize),
                err_clear: std::mem::transmute::<usize, ErrClear>(clear as usize),
            })
        }
    }
}

/// The pending call that sets the count up: run by the main thread, with
/// the GIL, between two bytecodes.
unsafe extern "C" fn register_now(_: *mut c_void) -> c_int {
    let Some(api) = API.get() else {
        STATE.store(OFF, Relaxed);
        return 0;
    };
    let counting = match api.count {
        // SAFETY: this thread holds the GIL at a point where the C API may
        // be called. An exception set before is kept; one the registration
        // raises (no watcher left) is cleared: a pending call that fails
        // would raise it in the program.
        Count::Watcher(add_watcher) => unsafe {
            let (mut t, mut v, mut tb) = (
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            );
            (api.err_fetch)(&mut t, &mut v, &mut tb);
            let id = add_watcher(on_code);
            if id < 0 {
                (api.err_clear)();
            }
            (api.err_restore)(t, v, tb);
            id >= 0
        },
        Count::Dealloc(slot) => hook_dealloc(slot),
    };
    // SAFETY: this thread's state is live, and `interp` a field of it.
    let interp = unsafe {
        let tstate = (api.this_tstate)() as u64;
        if tstate == 0 {
            0
        } else {
            ((tstate + TSTATE_INTERP) as *const u64).read()
        }
    };
    if !counting || interp == 0 {
        STATE.store(OFF, Relaxed);
        return 0;
    }
    INTERP.store(interp, Relaxed);
    STATE.store(ON, Release);
    0
}

/// Puts [`counting_dealloc`] in the code type's `tp_dealloc` at `slot`
/// (3.11), once per copy of this library; false where the slot's page is not
/// writable.
fn hook_dealloc(slot: u64) -> bool {
    if !writable(slot) {
        return false;
    }
    // SAFETY: `slot` is `PyCode_Type.tp_dealloc` (the type's layout proven at
    // detection), pointer-aligned in a static object, in a page just found
    // writable. Stored atomically: a thread destroying a code object (one
    // holding the GIL, or one of another interpreter) calls the old function
    // or the new one, and the new one calls the old.
    let cell = unsafe { AtomicUsize::from_ptr(slot as *mut usize) };
    let ours = counting_dealloc as Dealloc as usize;
    let old = cell.load(Acquire);
    if old == 0 || old == ours {
        return old == ours;
    }
    REPLACED.store(old, Release);
    cell.store(ours, Release);
    true
}

/// Whether the page at `addr` is mapped writable (`/proc/self/maps`).
fn writable(addr: u64) -> bool {
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return false;
    };
    maps.lines().any(|l| {
        let mut f = l.split_ascii_whitespace();
        let (Some(range), Some(perms)) = (f.next(), f.next()) else {
            return false;
        };
        let Some((lo, hi)) = range.split_once('-') else {
            return false;
        };
        let (Ok(lo), Ok(hi)) = (u64::from_str_radix(lo, 16), u64::from_str_radix(hi, 16)) else {
            return false;
        };
        lo <= addr && addr + 8 <= hi && perms.as_bytes().get(1) == Some(&b'w')
    })
}

impl CodeWatch {
    /// The interpreter's pending-call entry and how it counts, from 3.11
    /// on (not free-threaded); `sym` gives an exported symbol's address.
    pub(super) fn detect(
        minor: u8,
        free_threaded: bool,
        sym: impl Fn(&CStr) -> Option<u64>,
    ) -> Option<CodeWatch> {
        if minor < 11 || free_threaded {
            return None;
        }
        // One CPython per process: a second detection finds the same.
        if API.get().is_none() {
            let _ = API.set(Api::find(minor, sym)?);
        }
        Some(CodeWatch { api: API.get()? })
    }

    /// Asks the main thread to set the count up, once, at its next
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

    /// Whether destructions are counted.
    pub(super) fn on(&self) -> bool {
        STATE.load(Relaxed) == ON
    }

    /// The count of code objects destroyed, plus one, for a thread whose
    /// state is `tstate`: 0 (vouching for nothing) until the count is set
    /// up, or for a thread of another interpreter. Read before the
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
    /// Has the interpreter count destroyed code objects, once, so that
    /// proving a kept chain need not read its code objects again while none
    /// is destroyed (3.11+; nothing before: see the module docs): a pending call
    /// (`Py_AddPendingCall`), which the main thread runs between two
    /// bytecodes, with the GIL. `safe_point()`, asked only the first time,
    /// says whether the calling thread runs its own code (a CUDA call), not a
    /// signal handler: the call takes a lock.
    pub fn watch_codes(&self, safe_point: impl FnOnce() -> bool) {
        if let Some(w) = &self.watch {
            w.schedule(safe_point);
        }
    }

    /// Whether destroyed code objects are counted.
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

#[cfg(test)]
mod tests {
    use super::*;

    static DATA: AtomicU64 = AtomicU64::new(1);
    static TEXT: &str = "read-only";

    #[test]
    fn only_a_writable_page_is_found_writable() {
        assert!(writable(DATA.as_ptr() as u64));
        assert!(!writable(TEXT.as_ptr() as u64));
        assert!(!writable(writable as fn(u64) -> bool as usize as u64));
        assert!(!writable(0));
    }

    #[test]
    fn the_hooked_slot_counts_then_calls_what_it_replaced() {
        static FREED: AtomicUsize = AtomicUsize::new(0);
        unsafe extern "C" fn original(obj: Obj) {
            FREED.store(obj as usize, Relaxed);
        }
        // A stand-in for the type's slot, in writable memory.
        static SLOT: AtomicUsize = AtomicUsize::new(0);
        SLOT.store(original as Dealloc as usize, Relaxed);
        let before = DESTROYED.load(Relaxed);
        assert!(hook_dealloc(SLOT.as_ptr() as u64));
        assert_eq!(SLOT.load(Relaxed), counting_dealloc as Dealloc as usize);
        // Hooked twice (another detection): left as is, not chained to itself.
        assert!(hook_dealloc(SLOT.as_ptr() as u64));
        assert_eq!(REPLACED.load(Relaxed), original as Dealloc as usize);
        let f = SLOT.load(Relaxed);
        // SAFETY: the slot holds `counting_dealloc`, which takes any pointer
        // and hands it to `original`, which only stores it.
        unsafe { std::mem::transmute::<usize, Dealloc>(f)(0x1234 as Obj) };
        assert_eq!(FREED.load(Relaxed), 0x1234);
        assert_eq!(DESTROYED.load(Relaxed), before + 1);
    }
}
