//! In-process unwinding: the calling thread's own stack, from the call site.
//!
//! ```text
//! LocalUnwinder::new()          dl_iterate_phdr → module registry + table (allocates)
//!        │
//! capture(skip, &mut frames)    registers here → loader counters → thread's stack
//!        │                      bounds → framehop walk over .eh_frame read in place
//!        │                      (with the thread's Trail: the outer frames that
//!        │                      provably did not change, from its last walk)
//!        │                      → Python frames spliced in (if any) → frames
//!        │                      (no allocation, no lock, no I/O once warm)
//!        ▼
//! refresh()                     after dlopen/dlclose (allocates; not on the hot path)
//! add_loaded()                  a capture after a dlopen (allocates fallibly: when
//!                               memory is short the new modules stay unknown)
//! ```

use std::cell::Cell;
use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use framehop::FrameAddress;

use crate::fallible;
use crate::frame::{Captured, Frame, ModuleId, SlotCounts, StackEnd, Stats, StatsSnapshot};
use crate::loader::Loader;
use crate::module::ModuleInfo;
use crate::python::{Python, PythonStatus};
use crate::rule::{UnwindCache, memo_key};
use crate::scan::after_call;
use crate::scratch::ScratchStack;
use crate::stack::StackTable;
use crate::table::{Entry, Table, Tables};
use crate::trail::{Start, Trail};
use crate::walk::{Regs, walk, walk_ids};

mod loaded;

use loaded::{build_added, build_snapshot, loader_counters};

/// Options of a [`LocalUnwinder`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Options {
    /// Unwind caches, each usable by one capturing thread at a time. A capture
    /// that finds all in use yields the CPU and tries again, for at most 10 ms,
    /// then returns [`StackEnd::Busy`] (both counted). Default: four per online
    /// CPU, at least 32.
    pub caches: usize,
    /// Read Python frames when the process runs CPython 3.10–3.13. Default is `true`.
    pub python: bool,
}

impl Default for Options {
    fn default() -> Self {
        // SAFETY: sysconf has no preconditions.
        let cpus = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1) as usize;
        Options {
            caches: (4 * cpus).max(32),
            python: true,
        }
    }
}

/// A capture is skipped ([`StackEnd::NoStackLeft`]) when the caller has less
/// stack than this left below its stack pointer. The capture itself runs on a
/// stack of its own, so this only keeps a thread at the edge of its stack from
/// being interrupted by more work.
pub const MIN_STACK_LEFT: u64 = 512;

/// A capture taken whole ([`Captured::whole`]), and the caller's `then` after
/// it, run on the caller's own stack where it has at least this much left
/// below its stack pointer (they use a few KiB): they are most captures in a
/// loop, and the switch to the scratch stack and the general steps cost them
/// lines of code the program evicts between two launches. Only on a stack
/// whose size is known: the main thread's, or a thread's whose mapping holds
/// its descriptor (glibc's and musl's, not one the program gave it). A
/// coroutine's stack may lie inside a larger mapping (the heap), where room
/// below the stack pointer is someone else's memory. Any other capture runs
/// on the scratch stack.
pub const WHOLE_ON_CALLER_STACK: u64 = 64 << 10;

/// Held by the tests that load or unload a library, and by those whose
/// captures must find the loader's counters as their unwinder read them: an
/// unload drops the walks a trail kept, and a stale table sends a capture
/// taken whole to the scratch stack.
#[cfg(test)]
pub(crate) static LOADER_TESTS: Mutex<()> = Mutex::new(());

/// How long a capture that finds every cache in use waits for one.
const CACHE_WAIT_NS: u64 = 10_000_000;

fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out-pointer; CLOCK_MONOTONIC exists (vDSO, no system call).
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64).wrapping_mul(1_000_000_000) + ts.tv_nsec as u64
}

/// Unwinds the calling thread's stack in process. Share it between threads
/// (`&self` everywhere); it is `Send + Sync`.
pub struct LocalUnwinder {
    current: AtomicPtr<Snapshot>,
    /// The grace period's parity: readers count themselves in their cache
    /// slot's `readers[epoch & 1]`.
    epoch: AtomicUsize,
    refresh_lock: Mutex<Registry>,
    stale: AtomicBool,
    caches: Box<[CacheSlot]>,
    stacks: StackTable,
    find_object: Option<FindObject>,
    /// Where `makecontext` coroutines return to: glibc's `__start_context`.
    start_context: u64,
    python: Option<Python>,
    stats: Stats,
    /// Tables not built for lack of memory (see [`LocalUnwinder::tables_refused`]).
    tables_refused: AtomicU64,
    /// How far the main thread's stack may grow (`RLIMIT_STACK` when the
    /// unwinder was made): its mapping ends only where its deepest frame so
    /// far reached.
    main_stack_limit: u64,
    /// How long a capture waits for a cache: [`CACHE_WAIT_NS`], longer in tests
    /// that must not depend on when the machine runs the releasing thread.
    cache_wait_ns: u64,
}

/// One unwind cache, on cache lines of its own: the atomics a capture updates
/// (`busy`, `readers`) are the slot's, so that threads capturing at once on
/// different slots never write to a shared cache line.
#[repr(align(64))]
struct CacheSlot {
    busy: AtomicBool,
    /// Captures on this slot reading a snapshot, by epoch parity (a two-phase
    /// grace period, so that a refresh frees the old snapshot only once no
    /// capture can use it). At most one capture holds a slot; a refresh sums
    /// nothing, it waits for every slot's count of the old parity to drain.
    readers: [AtomicUsize; 2],
    cache: std::cell::UnsafeCell<UnwindCache>,
    /// Where the capture runs; `None` if it could not be mapped.
    scratch: Option<ScratchStack>,
    /// What the captures on this slot counted.
    counts: SlotCounts,
}

// SAFETY: a slot's cache is only touched by the thread that set `busy`.
unsafe impl Sync for CacheSlot {}

struct Snapshot {
    head: Head,
    table: Arc<Table>,
    /// Modules loaded since `table` was built, added without rebuilding it
    /// ([`LocalUnwinder::add_loaded`]); folded in by the next `refresh`.
    extra: Option<Table>,
}

/// What every capture reads of a snapshot, on one cache line: a capture that
/// takes a kept walk reads nothing else of it (the tables' own lines are cold
/// between captures).
#[repr(C, align(64))]
struct Head {
    /// The loader's counters when it was built.
    adds: u64,
    subs: u64,
    /// Its tables' [`walk_ids`].
    ids: (u64, u64, u64),
}

impl Snapshot {
    fn new(table: Arc<Table>, extra: Option<Table>, (adds, subs): (u64, u64)) -> Snapshot {
        let ids = walk_ids(Tables {
            main: &table,
            extra: extra.as_ref(),
        });
        Snapshot {
            head: Head { adds, subs, ids },
            table,
            extra,
        }
    }

    fn tables(&self) -> Tables<'_> {
        Tables {
            main: &self.table,
            extra: self.extra.as_ref(),
        }
    }
}

#[derive(Default)]
struct Registry {
    modules: Vec<ModuleInfo>,
    /// The executable's path (`/proc/self/exe`), once read.
    exe: Option<PathBuf>,
    /// (bias, address of its program headers, path, build id) → id: a module
    /// reloaded elsewhere gets a new id, and so does a different file loaded
    /// where an unloaded one was (the loader reuses the address range).
    ids: HashMap<(u64, usize, PathBuf, Vec<u8>), ModuleId>,
}

/// glibc's `struct dl_find_object` (2.35+).
#[repr(C)]
struct DlFindObject {
    flags: u64,
    map_start: *mut c_void,
    map_end: *mut c_void,
    link_map: *mut c_void,
    eh_frame: *mut c_void,
    reserved: [u64; 7],
}

type FindObject = unsafe extern "C" fn(*mut c_void, *mut DlFindObject) -> c_int;

impl LocalUnwinder {
    /// Reads the loaded modules and prepares the caches. Allocates; call it once,
    /// outside any callback that may run inside the allocator.
    pub fn new(options: Options) -> LocalUnwinder {
        // SAFETY: dlsym with a NUL-terminated name; the symbol, when present, is
        // glibc's `_dl_find_object` with the declared signature.
        let find_object = unsafe {
            let p = libc::dlsym(libc::RTLD_DEFAULT, c"_dl_find_object".as_ptr());
            (!p.is_null()).then(|| std::mem::transmute::<*mut c_void, FindObject>(p))
        };
        let caches = (0..options.caches.max(1))
            .map(|_| CacheSlot {
                busy: AtomicBool::new(false),
                readers: [AtomicUsize::new(0), AtomicUsize::new(0)],
                cache: std::cell::UnsafeCell::new(UnwindCache::new()),
                scratch: ScratchStack::new(),
                counts: SlotCounts::default(),
            })
            .collect();
        let mut registry = Registry::default();
        let snapshot = build_snapshot(&mut registry).expect("memory for the module table");
        let python = if options.python {
            Python::detect(&registry.modules)
        } else {
            None
        };
        LocalUnwinder {
            current: AtomicPtr::new(Box::into_raw(Box::new(snapshot))),
            epoch: AtomicUsize::new(0),
            refresh_lock: Mutex::new(registry),
            stale: AtomicBool::new(false),
            caches,
            stacks: StackTable::new(),
            find_object,
            start_context: start_context_address(),
            python,
            stats: Stats::default(),
            tables_refused: AtomicU64::new(0),
            main_stack_limit: main_stack_limit(),
            cache_wait_ns: CACHE_WAIT_NS,
        }
    }

    /// Rebuilds the module table if modules were loaded or unloaded since it was
    /// built (glibc's `dlpi_adds`/`dlpi_subs` counters). Returns `true` if it did.
    /// Allocates and takes an internal lock that captures never take: call it where
    /// allocating is safe (after `dlopen`, from a background thread, or when
    /// [`LocalUnwinder::needs_refresh`] says so).
    ///
    /// It also folds in the modules [`LocalUnwinder::add_loaded`] added: call it
    /// from a background thread when [`LocalUnwinder::has_added_modules`].
    ///
    /// Where memory is short it changes nothing and returns `false` (counted
    /// in [`LocalUnwinder::tables_refused`]); a later call tries again.
    pub fn refresh(&self) -> bool {
        let mut registry = self.refresh_lock.lock().unwrap_or_else(|e| e.into_inner());
        let (adds, subs) = loader_counters();
        // SAFETY: the current snapshot is only freed in `install`, under this lock.
        let cur = unsafe { &*self.current.load(Ordering::Acquire) };
        if (adds, subs) == (cur.head.adds, cur.head.subs) && cur.extra.is_none() {
            self.stale.store(false, Ordering::Relaxed);
            return false;
        }
        let Some(new) = build_snapshot(&mut registry).and_then(fallible::boxed) else {
            return self.refused();
        };
        Stats::bump(&self.stats.table_rebuilds);
        self.install(new);
        true
    }

    /// Adds the modules loaded since the table was built (a `dlopen`) without
    /// rebuilding it: only the new modules' headers are read, the table and
    /// every unwind cache's rules stay. Meant for the capturing thread, which
    /// needs a new module's frames now; [`LocalUnwinder::refresh`] later folds
    /// them in. When modules were also unloaded it rebuilds the table, as
    /// `refresh` does. Takes the refresh lock, like `refresh`, and allocates,
    /// fallibly: where memory is short (the application's `malloc` refuses)
    /// it changes nothing, counts a refusal
    /// ([`LocalUnwinder::tables_refused`]) and leaves the table stale, so
    /// that the next capture tries again; the program is never aborted.
    /// Returns `true` if the table changed.
    pub fn add_loaded(&self) -> bool {
        let mut registry = self.refresh_lock.lock().unwrap_or_else(|e| e.into_inner());
        let (adds, subs) = loader_counters();
        // SAFETY: as in `refresh`.
        let cur = unsafe { &*self.current.load(Ordering::Acquire) };
        if (adds, subs) == (cur.head.adds, cur.head.subs) {
            self.stale.store(false, Ordering::Relaxed);
            return false;
        }
        // An unloaded module's range may be reused: only a rebuild is safe.
        let rebuild = subs != cur.head.subs;
        let new = match rebuild {
            true => build_snapshot(&mut registry),
            false => build_added(&mut registry, cur),
        };
        let Some(new) = new.and_then(fallible::boxed) else {
            return self.refused();
        };
        Stats::bump(match rebuild {
            true => &self.stats.table_rebuilds,
            false => &self.stats.modules_added,
        });
        self.install(new);
        true
    }

    /// A table not built for lack of memory: counted, and the table left
    /// stale for the next capture to try again. Returns `false` (no change).
    #[cold]
    fn refused(&self) -> bool {
        self.tables_refused.fetch_add(1, Ordering::Relaxed);
        self.stale.store(true, Ordering::Relaxed);
        false
    }

    /// Times [`LocalUnwinder::add_loaded`] or [`LocalUnwinder::refresh`] could
    /// not build a table for lack of memory: the modules loaded since stayed
    /// unknown (frames in them end a stack as [`StackEnd::ModuleNotInTable`])
    /// until a later call built it.
    pub fn tables_refused(&self) -> u64 {
        self.tables_refused.load(Ordering::Relaxed)
    }

    /// Whether [`LocalUnwinder::add_loaded`] added modules that the next
    /// [`LocalUnwinder::refresh`] would fold into the table.
    pub fn has_added_modules(&self) -> bool {
        let _registry = self.refresh_lock.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: as in `refresh`: snapshots are freed under this lock.
        unsafe { &*self.current.load(Ordering::Acquire) }
            .extra
            .is_some()
    }

    /// Publishes `new` and frees the snapshot it replaces once no capture can
    /// be reading it. Call with the refresh lock held.
    fn install(&self, new: Box<Snapshot>) {
        let new = Box::into_raw(new);
        let old = self.current.swap(new, Ordering::SeqCst);
        self.stale.store(false, Ordering::Relaxed);
        // Two flips of the epoch, each waiting for the readers of the parity it
        // left: every capture that could have loaded `old` has then finished.
        for _ in 0..2 {
            let e = self.epoch.fetch_add(1, Ordering::SeqCst);
            for slot in self.caches.iter() {
                while slot.readers[e & 1].load(Ordering::SeqCst) != 0 {
                    std::thread::yield_now();
                }
            }
        }
        // SAFETY: `old` came from Box::into_raw and no reader holds it any more.
        drop(unsafe { Box::from_raw(old) });
    }

    /// `true` when a capture found modules loaded or unloaded since the last
    /// refresh (frames in new modules end as [`StackEnd::ModuleNotInTable`]).
    pub fn needs_refresh(&self) -> bool {
        self.stale.load(Ordering::Relaxed)
    }

    /// Every module seen so far, indexed by [`ModuleId`] (unloaded ones stay).
    pub fn modules(&self) -> Vec<ModuleInfo> {
        self.modules_from(0)
    }

    /// The modules seen so far from id `first` on (those seen since a caller
    /// last looked, without copying the others).
    pub fn modules_from(&self, first: usize) -> Vec<ModuleInfo> {
        let registry = self.refresh_lock.lock().unwrap_or_else(|e| e.into_inner());
        registry.modules.get(first..).unwrap_or_default().to_vec()
    }

    /// [`LocalUnwinder::modules_from`], or `None` when memory is short: for
    /// the application's threads.
    pub fn try_modules_from(&self, first: usize) -> Option<Vec<ModuleInfo>> {
        let registry = self.refresh_lock.lock().unwrap_or_else(|e| e.into_inner());
        let from = registry.modules.get(first..).unwrap_or_default();
        let mut out = fallible::vec(from.len())?;
        for m in from {
            out.push(ModuleInfo {
                path: fallible::path(m.path.as_os_str())?,
                build_id: fallible::bytes(&m.build_id)?,
                bias: m.bias,
                text: m.text.clone(),
                has_unwind_info: m.has_unwind_info,
            });
        }
        Some(out)
    }

    /// The Python reader, if this process runs a supported CPython.
    pub fn python(&self) -> Option<&Python> {
        self.python.as_ref()
    }

    /// Why Python frames are off, if they are.
    pub fn python_status(&self) -> PythonStatus {
        match &self.python {
            Some(p) => p.status(),
            None => PythonStatus::NotPython,
        }
    }

    /// The counters.
    pub fn stats(&self) -> StatsSnapshot {
        let mut s = self.stats.snapshot();
        for slot in self.caches.iter() {
            slot.counts.add_to(&mut s);
        }
        s
    }

    /// Captures the calling thread's stack, innermost frame first, into `out`,
    /// skipping the first `skip` frames above the caller (0: `out[0]` is the
    /// caller of `capture`). Safe to call from any thread, from inside CUDA/CUPTI
    /// callbacks and while another thread holds the allocator's lock: it does not
    /// allocate, lock or (once the thread's stack bounds are known) make system
    /// calls, except the loader's own recursive lock inside `dl_iterate_phdr`,
    /// taken for the two counters. `out.len()` is the depth cap.
    #[inline(never)]
    pub fn capture(&self, skip: usize, out: &mut [Frame]) -> Captured {
        let regs = crate::current_regs!();
        // Frame 0 is `capture` itself.
        self.capture_from(regs, skip + 1, out)
    }

    /// Like [`LocalUnwinder::capture`], then `then(frames, captured)` (the
    /// frames written to `out`), both on the unwinder's scratch stack: work the
    /// caller does with the stack (hashing it, storing it) costs the calling
    /// thread no stack either. `Err` when `then` was not run: all caches were
    /// busy ([`StackEnd::Busy`]), the caller had no stack left
    /// ([`StackEnd::NoStackLeft`]), or it panicked ([`StackEnd::UnwindFailed`]).
    #[inline(never)]
    pub fn capture_then<R>(
        &self,
        skip: usize,
        out: &mut [Frame],
        then: impl FnOnce(&[Frame], Captured) -> R,
    ) -> Result<R, StackEnd> {
        let regs = crate::current_regs!();
        self.capture_from_then(regs, skip + 1, out, None, then)
    }

    /// Like [`LocalUnwinder::capture_then`], with the calling thread's
    /// [`Trail`]: the native walk stops where the rest of the stack is
    /// provably that of the thread's last capture with this trail, and takes
    /// it from there ([`Captured::reused`]). Pass each thread its own trail,
    /// sized like `out`. A capture taken whole from those the trail keeps
    /// ([`Trail::expect`], [`Captured::whole`]) is passed to `then` from
    /// there, not written to `out`: read the frames `then` is given. Such a
    /// capture, and `then` with it, run on the calling thread's own stack
    /// where it has [`WHOLE_ON_CALLER_STACK`] left: keep `then`'s stack small.
    #[inline(never)]
    pub fn capture_then_reusing<R>(
        &self,
        skip: usize,
        out: &mut [Frame],
        trail: &mut Trail,
        then: impl FnOnce(&[Frame], Captured) -> R,
    ) -> Result<R, StackEnd> {
        let regs = crate::current_regs!();
        let then = match self.whole_then(regs, (skip + 1, out.len()), trail, then) {
            Ok(r) => return r,
            Err(then) => then,
        };
        self.capture_from_then(regs, skip + 1, out, Some(trail), then)
    }

    /// Like [`LocalUnwinder::capture`], from registers taken by the caller (on this
    /// thread, in a frame that is still live).
    pub fn capture_from(&self, regs: Regs, skip: usize, out: &mut [Frame]) -> Captured {
        let mut captured = None;
        let r = self.capture_from_then(regs, skip, out, None, |_, c| captured = Some(c));
        match (r, captured) {
            (Ok(()), Some(c)) => c,
            (r, _) => Captured {
                end: r.err().unwrap_or(StackEnd::UnwindFailed),
                ..Captured::default()
            },
        }
    }

    fn capture_from_then<R>(
        &self,
        regs: Regs,
        skip: usize,
        out: &mut [Frame],
        trail: Option<&mut Trail>,
        then: impl FnOnce(&[Frame], Captured) -> R,
    ) -> Result<R, StackEnd> {
        let Some(slot) = self.acquire_cache() else {
            if let Some(t) = trail {
                // Not for the next capture: it may be another stack.
                t.kept.tried = None;
            }
            Stats::bump(&self.stats.captures);
            Stats::bump(&self.stats.busy);
            Stats::bump(&self.stats.truncated);
            return Err(StackEnd::Busy);
        };
        SlotCounts::bump(&slot.counts.captures);
        let run = || {
            let mut trail = trail;
            let captured = self.capture_in(slot, regs, skip, out, trail.as_deref_mut());
            // A capture taken whole is read where the trail keeps it: its
            // frames are not copied.
            let frames = match trail.as_deref() {
                Some(t) if captured.whole => t.kept.whole_frames().unwrap_or_default(),
                _ => &out[..captured.len],
            };
            self.count(captured);
            if captured.end == StackEnd::NoStackLeft {
                return Err(StackEnd::NoStackLeft);
            }
            Ok(then(frames, captured))
        };
        let r = match &slot.scratch {
            // SAFETY: the slot, and with it its stack, is this thread's until
            // `busy` is cleared below.
            Some(stack) => unsafe { stack.run(run) }.unwrap_or(Err(StackEnd::UnwindFailed)),
            None => run(),
        };
        slot.busy.store(false, Ordering::Release);
        r
    }

    /// The capture the trail expects, taken whole on the caller's stack
    /// ([`LocalUnwinder::whole_here`]), then `then` on it; `Err(then)` when
    /// it was not (what its proof found is left in the trail for
    /// `capture_in`). Not inlined, so that a capture on the scratch stack
    /// finds its caller's frames as small as before (they may be on an 8 KiB
    /// signal stack).
    #[inline(never)]
    fn whole_then<R, F: FnOnce(&[Frame], Captured) -> R>(
        &self,
        regs: Regs,
        (skip, cap): (usize, usize),
        t: &mut Trail,
        then: F,
    ) -> Result<Result<R, StackEnd>, F> {
        if t.kept.expect == [0; 2] {
            return Err(then);
        }
        // Not waiting for one: the general path waits, and counts it.
        let Some(slot) = self.try_acquire_cache() else {
            return Err(then);
        };
        // No unwinding panic leaves here: the caller may be a C callback.
        let r = catch_unwind(AssertUnwindSafe(|| {
            match self.whole_here(slot, regs, skip, cap, t) {
                Here::Whole(c) => {
                    SlotCounts::bump(&slot.counts.captures);
                    self.count(c);
                    let frames = t.kept.whole_frames().unwrap_or_default();
                    Ok(Ok(then(frames, c)))
                }
                Here::Tried(taken) => {
                    t.kept.tried = Some(taken);
                    Err(then)
                }
                Here::Elsewhere => Err(then),
            }
        }))
        .unwrap_or(Ok(Err(StackEnd::UnwindFailed)));
        slot.busy.store(false, Ordering::Release);
        r
    }

    /// The capture the trail expects, taken whole on the caller's stack:
    /// where it has `WHOLE_ON_CALLER_STACK` left, the module table is
    /// current, the kept walk is proven unchanged and so is the Python chain
    /// made with it. Updates the trail as `capture_in` does for a capture
    /// taken whole; else [`Here::Tried`] with what the kept walks' proof
    /// found, for `capture_in` to go on from.
    #[inline(always)]
    fn whole_here(
        &self,
        slot: &CacheSlot,
        regs: Regs,
        skip: usize,
        cap: usize,
        t: &mut Trail,
    ) -> Here {
        let Some((lo, hi)) = self.stack_of(regs.sp) else {
            return Here::Elsewhere;
        };
        let room = (crate::stack::holds_thread(lo, hi)
            && regs.sp.saturating_sub(lo) >= WHOLE_ON_CALLER_STACK)
            || (crate::stack::grows_down(hi)
                && (hi - regs.sp).saturating_add(WHOLE_ON_CALLER_STACK) <= self.main_stack_limit);
        if !room || self.needs_refresh() {
            return Here::Elsewhere;
        }
        let reading = self.enter(slot);
        let snap = reading.snap;
        if loader_counters() != (snap.head.adds, snap.head.subs) {
            // Stale: `capture_in` counts it.
            return Here::Elsewhere;
        }
        let stack = (lo.max(regs.sp.saturating_sub(128)), hi);
        let bounds = Cell::new(stack);
        let loader = self.loader(&bounds, false);
        let taken = self.take_expected(t, snap, &loader, regs, skip);
        let serial = t.serial + 1;
        match taken.and_then(|_| self.take_whole(t, stack, cap, serial)) {
            Some(c) => {
                t.serial = serial;
                self.took_whole(slot, t, c);
                SlotCounts::bump(&slot.counts.whole_on_caller_stack);
                Here::Whole(c)
            }
            None => Here::Tried(taken),
        }
    }

    fn count(&self, captured: Captured) {
        let end = captured.end;
        if end == StackEnd::NoStackLeft {
            Stats::bump(&self.stats.no_stack_left);
            return;
        }
        if end.is_truncated() {
            Stats::bump(&self.stats.truncated);
        }
        if end == StackEnd::DepthLimit {
            Stats::bump(&self.stats.depth_limit);
        }
        if captured.recovered > 0 {
            Stats::bump(&self.stats.recovered_stacks);
        }
        if captured.ends_unknown {
            Stats::bump(&self.stats.unknown_frames);
        }
    }

    /// The calling thread's stack mapping holding `sp`, counted when it was
    /// read from the maps.
    #[inline(always)]
    fn stack_of(&self, sp: u64) -> Option<(u64, u64)> {
        let (bounds, scanned) = self.stacks.bounds(sp);
        if scanned {
            Stats::bump(&self.stats.stack_scans);
        }
        bounds
    }

    /// Counts the slot's capture as a reader of the current snapshot, which
    /// it returns, until the guard is dropped.
    #[inline(always)]
    fn enter<'a>(&'a self, slot: &'a CacheSlot) -> Reading<'a> {
        let parity = self.epoch.load(Ordering::SeqCst) & 1;
        slot.readers[parity].fetch_add(1, Ordering::SeqCst);
        // SAFETY: registered as a reader before loading; refresh frees a
        // snapshot only after the readers of both parities drained.
        let snap = unsafe { &*self.current.load(Ordering::SeqCst) };
        Reading { slot, parity, snap }
    }

    #[inline(always)]
    fn loader<'a>(&'a self, bounds: &'a Cell<(u64, u64)>, suspect: bool) -> LocalLoader<'a> {
        LocalLoader {
            start_context: self.start_context,
            find_object: self.find_object,
            suspect,
            stacks: &self.stacks,
            bounds,
        }
    }

    /// The walk the trail expects, proven unchanged from `regs`: its crossings
    /// of code without unwind info ([`Kept::take`]). The expectation is used
    /// up either way.
    #[inline(always)]
    fn take_expected(
        &self,
        t: &mut Trail,
        snap: &Snapshot,
        loader: &LocalLoader<'_>,
        regs: Regs,
        skip: usize,
    ) -> Option<u32> {
        let tables = snap.tables();
        let start = Start {
            key: memo_key(FrameAddress::from_instruction_pointer(regs.ip)),
            sp: regs.sp,
            bp: regs.bp,
            skip,
        };
        let mut after = |ra| after_call(tables, loader, ra).is_some();
        let r = t.kept.take(
            snap.head.ids,
            start,
            loader.bounds.get(),
            &mut stack_reader(loader.bounds),
            &mut after,
        );
        t.kept.expect = [0; 2];
        r
    }

    /// The trail after a capture taken whole (`c`).
    #[inline(always)]
    fn took_whole(&self, slot: &CacheSlot, t: &mut Trail, c: Captured) {
        t.kept.taken = true;
        // The trail keeps the last walk, which was not this capture's.
        t.merged.native_same_from = None;
        t.chain_read = self.python.as_ref().map(|_| false);
        t.last = c;
        if c.python_frames > 0 {
            SlotCounts::bump(&slot.counts.python_stacks);
            SlotCounts::bump(&slot.counts.python_reused);
        }
    }

    /// The capture proper, on the slot's scratch stack (or the caller's).
    /// Where [`LocalUnwinder::whole_here`] tried the walk expected first
    /// (the capture was not taken whole), it goes on from what that found
    /// (`Kept::tried`). A walk and the Python splice run in
    /// [`LocalUnwinder::capture_walked`].
    fn capture_in(
        &self,
        slot: &CacheSlot,
        regs: Regs,
        skip: usize,
        out: &mut [Frame],
        mut trail: Option<&mut Trail>,
    ) -> Captured {
        // Taken first: it is this capture's only.
        let tried = trail.as_deref_mut().and_then(|t| t.kept.tried.take());
        let mut captured = Captured {
            end: StackEnd::NoStackLeft,
            ..Captured::default()
        };
        if let Some(t) = trail.as_deref_mut() {
            t.serial += 1;
            captured.serial = t.serial;
        }
        let bounds = self.stack_of(regs.sp);
        let (lo, hi) = bounds.unwrap_or((regs.sp, regs.sp));
        if bounds.is_some()
            && regs.sp.saturating_sub(lo) < MIN_STACK_LEFT
            && !crate::stack::grows_down(hi)
        {
            // The caller has almost no stack left (a signal handler deep in
            // a small alternate stack): leave it alone, counted. Not the main
            // thread's stack, whose mapping ends just below its deepest frame
            // so far and grows on.
            return captured;
        }
        let reading = self.enter(slot);
        let snap = reading.snap;
        let (adds, subs) = loader_counters();
        if (adds, subs) != (snap.head.adds, snap.head.subs) {
            self.stale.store(true, Ordering::Relaxed);
            Stats::bump(&self.stats.stale_table);
        }
        let stack = (lo.max(regs.sp.saturating_sub(128)), hi);
        let bounds = Cell::new(stack);
        let loader = self.loader(&bounds, subs != snap.head.subs);
        if loader.suspect
            && let Some(t) = trail.as_deref_mut()
        {
            // Modules were unloaded: whether a module is still loaded is
            // checked frame by frame, which a trail would skip.
            t.clear();
            trail = None;
        }
        // The walk the caller expects, proven unchanged: its frames, unwalked.
        let taken = match (trail.as_deref_mut(), tried) {
            (Some(_), Some(taken)) => taken,
            (Some(t), None) if t.kept.expect != [0; 2] => {
                let taken = self.take_expected(t, snap, &loader, regs, skip);
                let whole = taken.and_then(|_| self.take_whole(t, stack, out.len(), t.serial));
                if let Some(c) = whole {
                    self.took_whole(slot, t, c);
                    return c;
                }
                taken
            }
            _ => None,
        };
        let walking = Walking {
            slot,
            snap,
            loader: &loader,
            regs,
            skip,
        };
        self.capture_walked(walking, taken, out, trail, &mut captured);
        drop(reading);
        captured
    }

    /// The whole capture kept with the walk the trail's last `take` took, if
    /// the thread's Python frame chain is proven the same (`stack`: the
    /// thread's stack mapping) and its frames fit in `cap`; its frames are
    /// left where `t` keeps them (`Kept::whole_frames`).
    #[inline(always)]
    fn take_whole(
        &self,
        t: &Trail,
        stack: (u64, u64),
        cap: usize,
        serial: u64,
    ) -> Option<Captured> {
        let w = t.kept.whole_taken()?;
        let proven = match (&self.python, w.chain) {
            (None, None) => true,
            (Some(py), Some(links)) => py.chain_is(stack, links, w.codes_at),
            _ => false,
        };
        let fits = w.frames.is_some_and(|f| f.len() <= cap);
        if !(proven && fits) {
            return None;
        }
        Some(Captured {
            serial,
            whole: true,
            ..from_kept(t, w.captured)
        })
    }

    /// A capture not taken whole: the native frames of the walk `taken`
    /// proved unchanged (with its crossings), else walked; then the Python
    /// frames spliced in. Writes `out` and `captured`.
    #[inline(never)]
    fn capture_walked(
        &self,
        w: Walking<'_>,
        taken: Option<u32>,
        out: &mut [Frame],
        mut trail: Option<&mut Trail>,
        captured: &mut Captured,
    ) {
        let Walking {
            slot,
            snap,
            loader,
            regs,
            skip,
        } = w;
        let (lo, hi) = loader.bounds.get();
        let took = match (taken, trail.as_deref_mut()) {
            (Some(recovered), Some(t)) => take_kept(t, recovered, out, captured),
            _ => false,
        };
        if !took {
            // SAFETY: `slot.busy` is ours (acquire_cache), so is the cache.
            let cache = unsafe { &mut *slot.cache.get() };
            let (len, end) = walk(
                snap.tables(),
                regs,
                cache,
                &mut stack_reader(loader.bounds),
                loader,
                skip,
                out,
                trail.as_deref_mut(),
            );
            captured.len = len;
            captured.end = end;
            captured.recovered = cache.recovered;
            captured.reused = cache.reused;
            if cache.stale_passed > 0 {
                Stats::bump(&self.stats.stale_passed_stacks);
            }
        }
        if let Some(t) = trail.as_deref_mut() {
            t.kept.taken = captured.kept;
            if captured.kept {
                // The trail keeps the last walk, which was not this capture's.
                t.merged.native_same_from = None;
            } else {
                // Frames from `j` on are those of the capture just before, when
                // that capture's walk is the one the trail kept.
                let follows = t.walked != 0 && t.walked.checked_add(1) == Some(t.serial);
                t.merged.native_same_from = t.aligned.filter(|_| follows);
                t.walked = t.serial;
                t.from_first = t.head_plain && t.head_len == skip;
            }
        }
        let chain_read = self.python.as_ref().map(|py| {
            let codes = trail
                .as_deref_mut()
                .map(|t| (&mut t.codes, &mut t.python, &mut *t.merged));
            py.splice(&snap.table, &self.stats, (lo, hi), out, captured, codes)
        });
        captured.ends_unknown = matches!(
            out.get(..captured.len).and_then(<[Frame]>::last),
            Some(Frame::Unknown { .. })
        );
        captured.note = 0;
        if let Some(t) = trail {
            t.chain_read = chain_read;
            t.last = *captured;
        }
    }

    /// A free cache slot, now: `None` when every one is in use.
    #[inline(always)]
    fn try_acquire_cache(&self) -> Option<&CacheSlot> {
        // SAFETY: pthread_self has no preconditions.
        let me = unsafe { libc::pthread_self() } as usize;
        let n = self.caches.len();
        let start = (me >> 12) % n;
        (0..n).map(|i| &self.caches[(start + i) % n]).find(|s| {
            s.busy
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        })
    }

    fn acquire_cache(&self) -> Option<&CacheSlot> {
        let take = || self.try_acquire_cache();
        if let Some(s) = take() {
            return Some(s);
        }
        // Every cache is held by a capturing thread, most likely one preempted
        // mid-capture (more threads than CPUs): give it the CPU, first by
        // yielding, then by sleeping, for at most CACHE_WAIT_NS.
        Stats::bump(&self.stats.cache_waits);
        let started = monotonic_ns();
        for round in 0.. {
            if round < 64 {
                // SAFETY: sched_yield has no preconditions (a plain system call).
                unsafe { libc::sched_yield() };
            } else {
                let ts = libc::timespec {
                    tv_sec: 0,
                    tv_nsec: 100_000,
                };
                // SAFETY: a raw nanosleep (libc's is a cancellation point);
                // `ts` is valid, no remainder is asked for.
                unsafe {
                    libc::syscall(
                        libc::SYS_nanosleep,
                        &ts,
                        std::ptr::null_mut::<libc::timespec>(),
                    )
                };
            }
            if let Some(s) = take() {
                return Some(s);
            }
            if monotonic_ns().saturating_sub(started) > self.cache_wait_ns {
                break;
            }
        }
        None
    }
}

impl Drop for LocalUnwinder {
    fn drop(&mut self) {
        // SAFETY: `&mut self`: no capture runs; the pointer came from Box::into_raw.
        drop(unsafe { Box::from_raw(self.current.load(Ordering::Acquire)) });
    }
}

/// A capture counted as a reader of `snap` (see [`LocalUnwinder::enter`]):
/// counted out when dropped, also by a panic's unwinding, for a refresh waits
/// until every reader is.
struct Reading<'a> {
    slot: &'a CacheSlot,
    parity: usize,
    snap: &'a Snapshot,
}

impl Drop for Reading<'_> {
    fn drop(&mut self) {
        self.slot.readers[self.parity].fetch_sub(1, Ordering::SeqCst);
    }
}

/// Where [`LocalUnwinder::whole_here`] left a capture.
enum Here {
    /// Taken whole, on the caller's stack.
    Whole(Captured),
    /// Not whole: what the proof of the walk expected found (its crossings,
    /// or `None`: changed).
    Tried(Option<u32>),
    /// Not tried there: the general path does all.
    Elsewhere,
}

/// What a capture not taken whole walks with ([`LocalUnwinder::capture_walked`]).
struct Walking<'a> {
    slot: &'a CacheSlot,
    snap: &'a Snapshot,
    loader: &'a LocalLoader<'a>,
    regs: Regs,
    skip: usize,
}

/// Reads a word of the stack, inside `bounds` (which the walk moves to the
/// interrupted code's stack at a signal frame).
#[inline(always)]
fn stack_reader(bounds: &Cell<(u64, u64)>) -> impl FnMut(u64) -> Result<u64, ()> + '_ {
    move |addr: u64| {
        let (lo, hi) = bounds.get();
        if addr >= lo && addr.checked_add(8).is_some_and(|end| end <= hi) {
            // SAFETY: inside this thread's own stack mapping (or, past a
            // signal frame, the interrupted code's), which stays mapped
            // while the thread runs.
            Ok(unsafe { (addr as *const u64).read_unaligned() })
        } else {
            Err(())
        }
    }
}

/// Takes the native frames of the walk `t` just proved unchanged (with its
/// `recovered` crossings), written to `out`; `false` when they do not fit.
fn take_kept(t: &Trail, recovered: u32, out: &mut [Frame], captured: &mut Captured) -> bool {
    let native = t.kept.taken().unwrap_or_default();
    let Some(dst) = out.get_mut(..native.len()) else {
        return false;
    };
    dst.copy_from_slice(native);
    *captured = Captured {
        len: native.len(),
        end: StackEnd::Root,
        recovered,
        ..from_kept(t, *captured)
    };
    true
}

/// `c` as a capture that took the walk `t` kept under the tag expected: its
/// native frames all reused, proven unchanged.
#[inline(always)]
fn from_kept(t: &Trail, c: Captured) -> Captured {
    Captured {
        reused: t.kept.taken().unwrap_or_default().len() as u32,
        kept: true,
        tag: t.kept.taken_tag().unwrap_or(0),
        unchanged: false,
        ..c
    }
}

struct LocalLoader<'a> {
    start_context: u64,
    find_object: Option<FindObject>,
    /// Modules were unloaded since the table was built.
    suspect: bool,
    /// The thread's stacks, and the range reads are allowed in (the walk moves
    /// to the interrupted code's stack at a signal frame).
    stacks: &'a StackTable,
    bounds: &'a Cell<(u64, u64)>,
}

/// `mov $15, %rax; syscall` (`rt_sigreturn`): the x86-64 signal return
/// trampoline of glibc (`__restore_rt`) and musl, which the kernel makes a
/// handler return to.
const SIGRETURN: [u8; 9] = [0x48, 0xc7, 0xc0, 0x0f, 0x00, 0x00, 0x00, 0x0f, 0x05];

impl LocalLoader<'_> {
    fn find(&self, address: u64) -> Option<DlFindObject> {
        let f = self.find_object?;
        let mut r = DlFindObject {
            flags: 0,
            map_start: std::ptr::null_mut(),
            map_end: std::ptr::null_mut(),
            link_map: std::ptr::null_mut(),
            eh_frame: std::ptr::null_mut(),
            reserved: [0; 7],
        };
        // SAFETY: glibc's lock-free, async-signal-safe lookup; `r` is a valid out
        // parameter of the declared layout.
        (unsafe { f(address as *mut c_void, &mut r) } == 0).then_some(r)
    }
}

impl Loader for LocalLoader<'_> {
    fn stable(&self) -> bool {
        // No module was unloaded since the table was built: every module in
        // it is loaded, with the code it had.
        !self.suspect
    }

    fn is_signal_return(&self, entry: &Entry, return_address: u64) -> bool {
        if !entry.text_readable
            || return_address
                .checked_add(SIGRETURN.len() as u64)
                .is_none_or(|end| end > entry.avma.end)
        {
            return false;
        }
        // One load and compare per frame, the ninth byte only on a match.
        let head = u64::from_le_bytes([
            SIGRETURN[0],
            SIGRETURN[1],
            SIGRETURN[2],
            SIGRETURN[3],
            SIGRETURN[4],
            SIGRETURN[5],
            SIGRETURN[6],
            SIGRETURN[7],
        ]);
        let at = return_address as *const u8;
        // SAFETY: inside the executable, readable segments of a module the
        // walk just checked is still loaded (the nine bytes end inside them).
        unsafe { at.cast::<u64>().read_unaligned() == head && *at.add(8) == SIGRETURN[8] }
    }

    fn call_before(&self, entry: &Entry, return_address: u64) -> bool {
        if !entry.text_readable || !entry.avma.contains(&return_address.wrapping_sub(1)) {
            return false;
        }
        let from = return_address.saturating_sub(8).max(entry.avma.start);
        let mut code = [0u8; 8];
        let n = (return_address - from) as usize;
        // SAFETY: `from..return_address` lies inside the executable, readable
        // segments of a module that the walk checked is still loaded.
        unsafe { std::ptr::copy_nonoverlapping(from as *const u8, code.as_mut_ptr(), n) };
        crate::scan::ends_with_call(&code[..n])
    }

    fn call_target(&self, entry: &Entry, return_address: u64) -> Option<u64> {
        let [op, d @ ..] = read_code::<5>(entry, return_address.checked_sub(5)?)?;
        (op == 0xe8).then(|| return_address.wrapping_add_signed(i64::from(i32::from_le_bytes(d))))
    }

    fn starts_with_jump(&self, entry: &Entry, address: u64) -> bool {
        read_code::<7>(entry, address).is_some_and(|code| crate::scan::starts_with_jump(&code))
    }

    fn enter_stack(&self, sp: u64) {
        // The interrupted code's stack: the thread's own, or a coroutine's,
        // which stays mapped while its handler runs.
        if let (Some((lo, hi)), _) = self.stacks.bounds(sp) {
            self.bounds.set((lo.max(sp.saturating_sub(128)), hi));
        } else {
            self.bounds.set((sp, sp));
        }
    }

    fn loaded_elsewhere(&self, address: u64) -> bool {
        self.find(address).is_some()
    }

    fn still_loaded(&self, entry: &Entry, address: u64) -> bool {
        if !self.suspect {
            return true;
        }
        self.find(address)
            .is_some_and(|r| r.eh_frame as u64 == entry.eh_frame_hdr_avma)
    }

    fn is_root_return(&self, return_address: u64) -> bool {
        self.start_context != 0 && return_address == self.start_context
    }
}

/// The `N` bytes of code at `at`, where they lie inside `entry`'s executable,
/// readable range (a module the walk checked is still loaded).
fn read_code<const N: usize>(entry: &Entry, at: u64) -> Option<[u8; N]> {
    let end = at.checked_add(N as u64)?;
    if !entry.text_readable || at < entry.avma.start || end > entry.avma.end {
        return None;
    }
    // SAFETY: `at..end` lies inside the executable, readable segments of a
    // module that is still loaded (checked by the caller).
    Some(unsafe { (at as *const [u8; N]).read_unaligned() })
}

/// `RLIMIT_STACK`'s soft limit (`u64::MAX` when unlimited), 8 MiB when it
/// cannot be read.
fn main_stack_limit() -> u64 {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: a valid out-pointer.
    if unsafe { libc::getrlimit(libc::RLIMIT_STACK, &mut r) } != 0 {
        return 8 << 20;
    }
    match r.rlim_cur {
        libc::RLIM_INFINITY => u64::MAX,
        n => n,
    }
}

extern "C" fn never_run() {}

/// glibc's `__start_context` (a local symbol): x86-64 `makecontext` stores its
/// address as the return address at the top of the new context's stack, which
/// a context made here, and never run, shows. 0 if it cannot be read.
fn start_context_address() -> u64 {
    let mut stack = vec![0u64; 1024];
    // SAFETY: a zeroed ucontext_t is a valid buffer for getcontext to fill.
    let mut uc: libc::ucontext_t = unsafe { std::mem::zeroed() };
    // SAFETY: `uc` is a valid, writable context.
    if unsafe { libc::getcontext(&mut uc) } != 0 {
        return 0;
    }
    uc.uc_stack.ss_sp = stack.as_mut_ptr().cast();
    uc.uc_stack.ss_size = stack.len() * 8;
    uc.uc_link = std::ptr::null_mut();
    // SAFETY: the context's stack is `stack`, alive for this function; the
    // context is never switched to, makecontext only writes to that stack.
    unsafe { libc::makecontext(&mut uc, never_run, 0) };
    let sp = uc.uc_mcontext.gregs[libc::REG_RSP as usize] as u64;
    let range = stack.as_ptr() as u64..stack.as_ptr() as u64 + stack.len() as u64 * 8;
    if !range.contains(&sp) || !sp.is_multiple_of(8) {
        return 0;
    }
    // SAFETY: inside `stack`, checked above, and 8-aligned.
    unsafe { *(sp as *const u64) }
}

/// The registers at the point where this macro expands: rip, rsp, rbp read in one
/// asm block so that they agree with the unwind info at that instruction.
#[macro_export]
macro_rules! current_regs {
    () => {{
        let (ip, sp, bp): (u64, u64, u64);
        // SAFETY: reads three registers; touches no memory.
        unsafe {
            ::core::arch::asm!(
                "lea {ip}, [rip]",
                "mov {sp}, rsp",
                "mov {bp}, rbp",
                ip = out(reg) ip,
                sp = out(reg) sp,
                bp = out(reg) bp,
                options(nomem, nostack, preserves_flags)
            );
        }
        $crate::Regs { ip, sp, bp }
    }};
}

#[cfg(test)]
#[allow(non_snake_case)]
mod tests {
    use std::ffi::c_void;
    use std::ops::Range;

    use super::*;
    use crate::frame::{Frame, MAX_FRAMES};

    // A frame shaped like libffi's `ffi_call_unix64`: the CFA is rbp + 32, not the
    // plain frame-pointer rbp + 16, which framehop cannot cache.
    core::arch::global_asm!(
        ".text",
        ".globl gpuperf_test_bp_offset_frame",
        ".type gpuperf_test_bp_offset_frame, @function",
        "gpuperf_test_bp_offset_frame:",
        ".cfi_startproc",
        "push %rbp",
        ".cfi_def_cfa_offset 16",
        ".cfi_offset %rbp, -16",
        "sub $16, %rsp",
        "mov %rsp, %rbp",
        ".cfi_def_cfa %rbp, 32",
        "mov %rdi, %rax",
        "mov %rsi, %rdi",
        "call *%rax",
        "mov %rbp, %rsp",
        "add $16, %rsp",
        ".cfi_def_cfa %rsp, 16",
        "pop %rbp",
        ".cfi_def_cfa_offset 8",
        "ret",
        ".cfi_endproc",
        ".globl gpuperf_test_bp_offset_frame_end",
        "gpuperf_test_bp_offset_frame_end:",
        ".size gpuperf_test_bp_offset_frame, . - gpuperf_test_bp_offset_frame",
        options(att_syntax)
    );

    unsafe extern "C" {
        fn gpuperf_test_bp_offset_frame(f: extern "C" fn(*mut c_void), arg: *mut c_void);
        fn gpuperf_test_bp_offset_frame_end();
    }

    struct Probe<'a> {
        u: &'a LocalUnwinder,
        frames: [Frame; MAX_FRAMES],
        captured: Option<Captured>,
    }

    extern "C" fn take(arg: *mut c_void) {
        // SAFETY: `arg` is the `Probe` the test passed, alive for the call.
        let p = unsafe { &mut *arg.cast::<Probe>() };
        p.captured = Some(p.u.capture(0, &mut p.frames));
    }

    // Frames whose layout the trail tests control: `mid(f, arg)` calls
    // `f(arg)`; `a` and `b` (distinct functions of the same shape) call `mid`;
    // `sites(f, arg, which)` calls `a` from one of two call sites. Each keeps
    // the stack 16-byte aligned, so that a call through `a` and one through
    // `b` (or through either site) puts every inner frame at the same address.
    core::arch::global_asm!(
        ".text",
        ".globl gpuperf_test_trail_mid",
        ".type gpuperf_test_trail_mid, @function",
        "gpuperf_test_trail_mid:",
        ".cfi_startproc",
        "sub $8, %rsp",
        ".cfi_def_cfa_offset 16",
        "mov %rdi, %rax",
        "mov %rsi, %rdi",
        "call *%rax",
        "add $8, %rsp",
        ".cfi_def_cfa_offset 8",
        "ret",
        ".cfi_endproc",
        ".size gpuperf_test_trail_mid, . - gpuperf_test_trail_mid",
        ".globl gpuperf_test_trail_a",
        ".type gpuperf_test_trail_a, @function",
        "gpuperf_test_trail_a:",
        ".cfi_startproc",
        "sub $8, %rsp",
        ".cfi_def_cfa_offset 16",
        "call gpuperf_test_trail_mid",
        "add $8, %rsp",
        ".cfi_def_cfa_offset 8",
        "ret",
        ".cfi_endproc",
        ".globl gpuperf_test_trail_a_end",
        "gpuperf_test_trail_a_end:",
        ".size gpuperf_test_trail_a, . - gpuperf_test_trail_a",
        ".globl gpuperf_test_trail_b",
        ".type gpuperf_test_trail_b, @function",
        "gpuperf_test_trail_b:",
        ".cfi_startproc",
        "sub $8, %rsp",
        ".cfi_def_cfa_offset 16",
        "call gpuperf_test_trail_mid",
        "add $8, %rsp",
        ".cfi_def_cfa_offset 8",
        "ret",
        ".cfi_endproc",
        ".globl gpuperf_test_trail_b_end",
        "gpuperf_test_trail_b_end:",
        ".size gpuperf_test_trail_b, . - gpuperf_test_trail_b",
        ".globl gpuperf_test_trail_sites",
        ".type gpuperf_test_trail_sites, @function",
        "gpuperf_test_trail_sites:",
        ".cfi_startproc",
        "sub $8, %rsp",
        ".cfi_def_cfa_offset 16",
        "test %rdx, %rdx",
        "jnz 1f",
        "call gpuperf_test_trail_a",
        "jmp 2f",
        "1:",
        "call gpuperf_test_trail_a",
        "2:",
        "add $8, %rsp",
        ".cfi_def_cfa_offset 8",
        "ret",
        ".cfi_endproc",
        ".size gpuperf_test_trail_sites, . - gpuperf_test_trail_sites",
        options(att_syntax)
    );

    type Callback = extern "C" fn(*mut c_void);

    unsafe extern "C" {
        fn gpuperf_test_trail_a(f: Callback, arg: *mut c_void);
        fn gpuperf_test_trail_a_end();
        fn gpuperf_test_trail_b(f: Callback, arg: *mut c_void);
        fn gpuperf_test_trail_b_end();
        fn gpuperf_test_trail_sites(f: Callback, arg: *mut c_void, which: u64);
    }

    /// An unwinder that reads no Python frames.
    fn native_only() -> LocalUnwinder {
        LocalUnwinder::new(Options {
            python: false,
            ..Options::default()
        })
    }

    /// The code of `gpuperf_test_trail_a` and of `gpuperf_test_trail_b`.
    fn a_and_b() -> (Range<u64>, Range<u64>) {
        (
            range(gpuperf_test_trail_a, gpuperf_test_trail_a_end),
            range(gpuperf_test_trail_b, gpuperf_test_trail_b_end),
        )
    }

    /// A capture with the thread's trail, from inside the test's frames.
    struct TrailProbe<'a> {
        u: &'a LocalUnwinder,
        trail: Trail,
        frames: Vec<Frame>,
        captured: Option<Captured>,
        reusing: bool,
    }

    impl<'a> TrailProbe<'a> {
        /// A probe that reuses the trail, nothing taken yet.
        fn new(u: &'a LocalUnwinder) -> Self {
            TrailProbe {
                u,
                trail: Trail::new(MAX_FRAMES),
                frames: Vec::new(),
                captured: None,
                reusing: true,
            }
        }
    }

    /// Takes the capture, with the trail when `p.reusing`, else plain (what
    /// the trail must agree with): one function, so that both have the same
    /// frames outward of this one.
    extern "C" fn take_reusing(arg: *mut c_void) {
        // SAFETY: `arg` is the `TrailProbe` the test passed, alive for the call.
        let p = unsafe { &mut *arg.cast::<TrailProbe>() };
        let mut frames = [Frame::default(); MAX_FRAMES];
        let c = if p.reusing {
            let r =
                p.u.capture_then_reusing(0, &mut frames, &mut p.trail, |f, c| (f.to_vec(), c));
            r.expect("captured")
        } else {
            let c = p.u.capture(0, &mut frames);
            (frames[..c.len].to_vec(), c)
        };
        let (f, c) = c;
        p.frames = f;
        p.captured = Some(c);
    }

    /// Calls `f` with each of `items` from one call site. An optimized build
    /// unrolls a loop over a literal array, which gives each call its own
    /// return address; the tests that compare captures of one stack (a trail,
    /// a kept walk) need the same one.
    #[inline(never)]
    fn from_one_site<T: Copy>(items: &[T], mut f: impl FnMut(T)) {
        for &item in std::hint::black_box(items) {
            f(item);
        }
    }

    /// Absolute addresses of the native frames (their lookup addresses).
    fn addresses(u: &LocalUnwinder, frames: &[Frame]) -> Vec<u64> {
        let modules = u.modules();
        frames
            .iter()
            .filter_map(|f| match *f {
                Frame::Native { module, .. } => {
                    Some(f.lookup_offset()? + modules[module.0 as usize].bias)
                }
                _ => None,
            })
            .collect()
    }

    fn range(
        start: unsafe extern "C" fn(Callback, *mut c_void),
        end: unsafe extern "C" fn(),
    ) -> Range<u64> {
        start as usize as u64..end as usize as u64
    }

    /// Runs `call` (which calls its callback from the test's frames) with a
    /// capture that reuses the trail, then with a plain one; both from the
    /// same call site, so that the two agree frame for frame unless the
    /// trail is wrongly reused.
    fn both(p: &mut TrailProbe, call: &dyn Fn(Callback, *mut c_void)) -> (Vec<Frame>, Captured) {
        let mut plain = Vec::new();
        from_one_site(&[false, true], |reusing| {
            p.reusing = reusing;
            call(take_reusing, (&raw mut *p).cast());
            if !reusing {
                plain = std::mem::take(&mut p.frames);
            }
        });
        let c = p.captured.expect("captured");
        assert_eq!(c.end, StackEnd::Root, "{c:?}");
        // Frame 0 is the callback's call into the unwinder, which differs.
        assert_eq!(
            p.frames[1..],
            plain[1..],
            "the trail's capture and a fresh walk differ"
        );
        (p.frames.clone(), c)
    }

    #[test]
    fn trail__another_function_called_into_the_same_slot_deep_in_the_stack__gets_its_frames() {
        let _loader = LOADER_TESTS.lock().unwrap_or_else(|e| e.into_inner());
        let u = native_only();
        let mut p = TrailProbe::new(&u);
        let (a, b) = a_and_b();
        // One call site for both: `a` and `b` lie at the same stack address,
        // and so do `mid` and the callback; only the return address in
        // `mid`'s frame tells them apart.
        let mut seen = Vec::new();
        from_one_site(&[0, 0, 1, 1, 0], |which| {
            let (frames, c) = both(&mut p, &through(which));
            let at = addresses(&u, &frames);
            let (in_a, in_b) = (
                at.iter().any(|x| a.contains(x)),
                at.iter().any(|x| b.contains(x)),
            );
            assert_eq!(
                (in_a, in_b),
                (which == 0, which == 1),
                "call {}: {at:x?}",
                seen.len()
            );
            seen.push(c.reused);
        });
        // After the first capture, each reused the frames outward of the
        // test's call, at least.
        assert!(seen[1..].iter().all(|&r| r > 2), "{seen:?}");
    }

    #[test]
    fn trail__the_same_function_from_another_call_site__gets_that_call_site() {
        let _loader = LOADER_TESTS.lock().unwrap_or_else(|e| e.into_inner());
        let u = LocalUnwinder::new(Options {
            python: false,
            ..Options::default()
        });
        let mut p = TrailProbe::new(&u);
        let sites: unsafe extern "C" fn(Callback, *mut c_void, u64) = gpuperf_test_trail_sites;
        let mut offsets = Vec::new();
        let mut reused = Vec::new();
        from_one_site(&[0, 0, 1, 1, 0], |which| {
            let (frames, c) = both(&mut p, &|f, arg| {
                // SAFETY: the assembly above calls `a(f, arg)` and returns.
                unsafe { sites(f, arg, std::hint::black_box(which)) }
            });
            // The frame in `sites`: the call site `a` returns to.
            let s = sites as usize as u64;
            let site = addresses(&u, &frames)
                .into_iter()
                .find(|x| (s..s + 32).contains(x))
                .expect("a frame in `sites`");
            offsets.push(site - s);
            reused.push(c.reused);
        });
        assert_eq!(offsets[0], offsets[1]);
        assert_eq!(offsets[2], offsets[3]);
        assert_eq!(offsets[4], offsets[0]);
        assert_ne!(offsets[0], offsets[2], "{offsets:?}");
        assert!(reused[1..].iter().all(|&r| r > 2), "{reused:?}");
    }

    /// Captures through `a` or `b` (which lie at the same stack address, as
    /// do the frames inward of them) from one call site.
    fn through(which: u64) -> impl Fn(Callback, *mut c_void) {
        move |f: Callback, arg: *mut c_void| {
            let g: unsafe extern "C" fn(Callback, *mut c_void) = if std::hint::black_box(which) == 0
            {
                gpuperf_test_trail_a
            } else {
                gpuperf_test_trail_b
            };
            // SAFETY: the assembly above calls `f(arg)` and returns.
            unsafe { g(f, arg) }
        }
    }

    #[test]
    fn kept_walk__taken_for_the_stack_it_was_walked_in_and_no_other() {
        let _loader = LOADER_TESTS.lock().unwrap_or_else(|e| e.into_inner());
        let u = native_only();
        let wholes = kept_walks(&u);
        // The test's thread has room: each was taken on its own stack.
        assert!(wholes > 0);
        assert_eq!(u.stats().whole_on_caller_stack, wholes);
    }

    #[test]
    fn kept_walk__on_a_thread_short_of_stack__taken_on_the_scratch_stack_alike() {
        let _loader = LOADER_TESTS.lock().unwrap_or_else(|e| e.into_inner());
        let u = native_only();
        // Less room than a capture taken whole asks of its caller's stack.
        let size = WHOLE_ON_CALLER_STACK as usize - 4096;
        let wholes = std::thread::scope(|s| {
            std::thread::Builder::new()
                .stack_size(size)
                .spawn_scoped(s, || kept_walks(&u))
                .expect("a thread")
                .join()
                .expect("no panic")
        });
        assert!(wholes > 0);
        assert_eq!(u.stats().whole_on_caller_stack, 0);
    }

    /// Runs `entry` as a `makecontext` coroutine on `stack`, back here through
    /// `back` when it returns.
    ///
    /// # Safety
    /// `stack` is used by nothing else while the coroutine runs, and `back`
    /// by no other test running at once.
    unsafe fn run_coroutine(stack: &mut [u8], entry: extern "C" fn(), back: *mut libc::ucontext_t) {
        // SAFETY: a zeroed context is a valid buffer; `stack` and `back` as
        // this function's contract; the coroutine returns through uc_link.
        unsafe {
            let mut co: libc::ucontext_t = std::mem::zeroed();
            assert_eq!(libc::getcontext(&mut co), 0);
            co.uc_stack.ss_sp = stack.as_mut_ptr().cast();
            co.uc_stack.ss_size = stack.len();
            co.uc_link = back;
            libc::makecontext(&mut co, entry, 0);
            assert_eq!(libc::swapcontext(back, &co), 0);
        }
    }

    static HEAP_CO_UNWINDER: AtomicUsize = AtomicUsize::new(0);
    static HEAP_CO_WHOLES: AtomicU64 = AtomicU64::new(0);
    static mut HEAP_CO_RETURN: std::mem::MaybeUninit<libc::ucontext_t> =
        std::mem::MaybeUninit::zeroed();

    extern "C" fn kept_walks_in_coroutine() {
        // SAFETY: the test keeps the unwinder alive while the coroutine runs.
        let u = unsafe { &*(HEAP_CO_UNWINDER.load(Ordering::SeqCst) as *const LocalUnwinder) };
        HEAP_CO_WHOLES.store(kept_walks(u), Ordering::SeqCst);
    }

    /// A coroutine's stack inside a larger mapping, as one allocated on the
    /// heap is: the mapping has room below the stack pointer, but it is not
    /// the coroutine's. Captures taken whole there run on the scratch stack.
    #[test]
    fn kept_walk__on_a_coroutine_stack_inside_a_larger_mapping__taken_on_the_scratch_stack() {
        let _loader = LOADER_TESTS.lock().unwrap_or_else(|e| e.into_inner());
        let u = native_only();
        let (len, stack) = (4usize << 20, 512usize << 10);
        // SAFETY: a fresh private anonymous mapping, unmapped below.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(map, libc::MAP_FAILED);
        HEAP_CO_UNWINDER.store(&raw const u as usize, Ordering::SeqCst);
        // SAFETY: the top of the mapping, ours and otherwise unused, outlives
        // the coroutine; HEAP_CO_RETURN is this test's alone.
        unsafe {
            let top = std::slice::from_raw_parts_mut(map.cast::<u8>().add(len - stack), stack);
            run_coroutine(
                top,
                kept_walks_in_coroutine,
                (&raw mut HEAP_CO_RETURN).cast(),
            );
            libc::munmap(map, len);
        }
        assert!(HEAP_CO_WHOLES.load(Ordering::SeqCst) > 0);
        assert_eq!(u.stats().whole_on_caller_stack, 0);
    }

    /// What [`take_painted`] measures: a capture with the trail expecting
    /// `expect`, kept under 1, and the bytes of stack it used below the
    /// caller's stack pointer.
    struct Painted<'a> {
        u: &'a LocalUnwinder,
        trail: Trail,
        out: Vec<Frame>,
        expect: [u32; 2],
        captured: Option<Captured>,
        /// `Err` of the capture.
        end: Option<StackEnd>,
        panic_in_then: bool,
        kept: bool,
        used: u64,
    }

    /// Bytes below the stack pointer that [`take_painted`] paints: more than
    /// a capture may use there.
    const PAINTED: u64 = WHOLE_ON_CALLER_STACK;
    const PAINT: u64 = 0x5a5a_5a5a_a5a5_a5a5;

    /// Paints the stack below its stack pointer, captures (`Painted`), and
    /// finds the deepest word the capture wrote there. Small and without
    /// locals of its own on the stack, so that nothing of its frame lies in
    /// what it paints.
    extern "C" fn take_painted(arg: *mut c_void) {
        // SAFETY: `arg` is the `Painted` the test passed, alive for the call.
        let p = unsafe { &mut *arg.cast::<Painted>() };
        let sp = crate::current_regs!().sp;
        // Past the red zone, where this function's calls write anyway.
        let words = (sp - PAINTED..sp - 128).step_by(8);
        for a in words.clone() {
            // SAFETY: the test thread's own stack below its stack pointer:
            // mapped (PAINTED is far less than the thread's stack) and no
            // live frame's.
            unsafe { (a as *mut u64).write_volatile(PAINT) };
        }
        p.trail.expect(p.expect);
        let panics = p.panic_in_then;
        let r =
            p.u.capture_then_reusing(0, &mut p.out, &mut p.trail, |_, c| {
                assert!(!panics, "a panic in `then`");
                c
            });
        p.end = r.err();
        p.captured = r.ok();
        // SAFETY: as above.
        let deepest = words
            .clone()
            .find(|&a| unsafe { (a as *const u64).read_volatile() } != PAINT);
        p.used = deepest.map_or(0, |a| sp - a);
        p.kept = p.trail.keep_last(1, 0);
    }

    fn painted(u: &LocalUnwinder) -> Painted<'_> {
        Painted {
            u,
            trail: Trail::new(MAX_FRAMES),
            out: vec![Frame::default(); MAX_FRAMES],
            expect: [0; 2],
            captured: None,
            end: None,
            panic_in_then: false,
            kept: false,
            used: 0,
        }
    }

    #[test]
    fn whole_on_the_callers_stack__a_panic_in_then_is_caught_and_the_slot_freed() {
        let _loader = LOADER_TESTS.lock().unwrap_or_else(|e| e.into_inner());
        let u = native_only();
        let mut p = painted(&u);
        let runs = [([0, 0], false), ([1, 0], true), ([1, 0], false)];
        from_one_site(&runs, |(expect, panics)| {
            (p.expect, p.panic_in_then) = (expect, panics);
            // SAFETY: the assembly above calls `take_painted(&mut p)` and
            // returns.
            unsafe { gpuperf_test_trail_a(take_painted, (&raw mut p).cast()) };
            match panics {
                true => assert_eq!(p.end, Some(StackEnd::UnwindFailed)),
                false => assert!(p.captured.is_some(), "{:?}", p.end),
            }
        });
        // Taken whole after the panic too: the slot and the snapshot were let go.
        assert!(p.captured.is_some_and(|c| c.whole));
        assert_eq!(u.stats().whole_on_caller_stack, 2);
        for s in u.caches.iter() {
            assert!(!s.busy.load(Ordering::SeqCst));
            assert_eq!(
                s.readers.each_ref().map(|r| r.load(Ordering::SeqCst)),
                [0, 0]
            );
        }
    }

    #[test]
    fn whole_on_the_callers_stack__uses_a_quarter_of_what_it_asks_at_most() {
        let _loader = LOADER_TESTS.lock().unwrap_or_else(|e| e.into_inner());
        let u = native_only();
        let mut p = painted(&u);
        let mut used = Vec::new();
        // One call site for the three: the same stack.
        from_one_site(&[[0, 0], [1, 0], [1, 0]], |expect| {
            p.expect = expect;
            // SAFETY: the assembly above calls `take_painted(&mut p)` and
            // returns.
            unsafe { gpuperf_test_trail_a(take_painted, (&raw mut p).cast()) };
            let c = p.captured.expect("captured");
            assert_eq!(c.whole, expect != [0; 2], "expecting {expect:?}");
            // The walk is kept; a capture taken from it is not kept again.
            assert_eq!(p.kept, expect == [0; 2], "expecting {expect:?}");
            used.push(p.used);
        });
        assert_eq!(u.stats().whole_on_caller_stack, 2);
        // The first ran on the scratch stack; the two taken whole on this
        // one, as `then` would (here it only returns the capture).
        eprintln!("bytes of the caller's stack used: {used:?}");
        assert!(used[0] > 0 && used[1] > 0, "{used:?}");
        assert!(used[1] <= WHOLE_ON_CALLER_STACK / 4, "{used:?}");
        assert_eq!(used[1], used[2]);
    }

    /// Captures through `a` and `b` expecting kept walks, each checked
    /// against a fresh walk: how many were taken whole.
    fn kept_walks(u: &LocalUnwinder) -> u64 {
        let mut wholes = 0;
        let mut p = TrailProbe::new(u);
        let (a, b) = a_and_b();
        // Through `a` or `b`, expecting the walks kept under two tags (the
        // first first), keeping this capture's under a tag, and the tag of
        // the kept walk taken (0: none): one call site for all. The walks
        // through `a` and `b` differ in one return address deep in the stack.
        let captures = [
            (0, [0, 0], 1, 0),
            (1, [0, 0], 2, 0),
            (0, [1, 0], 0, 1),
            (1, [1, 0], 0, 0),
            (1, [2, 0], 0, 2),
            (0, [2, 0], 0, 0),
            (0, [1, 0], 0, 1),
            (1, [1, 2], 0, 2),
            (0, [2, 1], 0, 1),
            (0, [3, 2], 0, 0),
        ];
        from_one_site(&captures, |(which, expect, keep, taken)| {
            p.trail.expect(expect);
            // `both` compares the frames with a fresh walk's.
            let (frames, c) = both(&mut p, &through(which));
            assert_eq!(
                (c.kept, c.tag),
                (taken != 0, taken),
                "through {which}, expecting {expect:?}"
            );
            // A whole capture gives back the note kept with it.
            let note = if c.whole { 100 + taken } else { 0 };
            wholes += u64::from(c.whole);
            assert_eq!(c.note, note, "through {which}, expecting {expect:?}");
            if keep != 0 {
                assert!(p.trail.keep_last(keep, 100 + keep), "through {which}: kept");
            }
            let at = addresses(u, &frames);
            assert_eq!(
                (
                    at.iter().any(|x| a.contains(x)),
                    at.iter().any(|x| b.contains(x))
                ),
                (which == 0, which == 1),
                "through {which}, expecting {expect:?}: {at:x?}"
            );
            if taken != 0 {
                assert_eq!(c.reused as usize, c.len);
                assert!(!p.trail.keep_last(9, 0), "a taken walk is not kept again");
            }
        });
        wholes
    }

    #[test]
    fn captures_on_two_slots__update_no_shared_cache_line() {
        let u = LocalUnwinder::new(Options {
            caches: 2,
            ..Options::default()
        });
        let line = |p: *const AtomicUsize| p as usize / 64;
        let (a, b) = (&u.caches[0], &u.caches[1]);
        // What a capture writes: its slot's busy flag, reader counts and
        // counters.
        let written = |s: &CacheSlot| {
            let c = &s.counts;
            [
                line((&raw const s.busy).cast()),
                line(&raw const s.readers[0]),
                line(&raw const s.readers[1]),
                line((&raw const c.captures).cast()),
                line((&raw const c.python_stacks).cast()),
                line((&raw const c.python_reused).cast()),
                line((&raw const c.whole_on_caller_stack).cast()),
            ]
        };
        for x in written(a) {
            assert!(!written(b).contains(&x));
            assert_ne!(x, line((&raw const u.epoch).cast()));
        }
        // The grace period still holds with the counts spread over the slots:
        // a refresh after a capture on either slot frees the old table.
        let mut frames = [Frame::default(); MAX_FRAMES];
        assert!(u.capture(0, &mut frames).len > 0);
        for s in u.caches.iter() {
            assert_eq!(s.readers[0].load(Ordering::SeqCst), 0);
            assert_eq!(s.readers[1].load(Ordering::SeqCst), 0);
        }
        // The counts spread over the slots add up: one more capture on each.
        for (held, free) in [(a, b), (b, a)] {
            held.busy.store(true, Ordering::SeqCst);
            let before = free.counts.captures.load(Ordering::SeqCst);
            assert!(u.capture(0, &mut frames).len > 0);
            assert_eq!(free.counts.captures.load(Ordering::SeqCst), before + 1);
            held.busy.store(false, Ordering::SeqCst);
        }
        assert_eq!(u.stats().captures, 3);
    }

    static UNWINDER: AtomicUsize = AtomicUsize::new(0);
    static RESULT: Mutex<Option<Captured>> = Mutex::new(None);
    static mut MAIN_CTX: std::mem::MaybeUninit<libc::ucontext_t> = std::mem::MaybeUninit::zeroed();

    extern "C" fn in_coroutine() {
        // SAFETY: the test keeps the unwinder alive while the coroutine runs.
        let u = unsafe { &*(UNWINDER.load(Ordering::SeqCst) as *const LocalUnwinder) };
        let mut frames = [Frame::default(); MAX_FRAMES];
        let c = u.capture(0, &mut frames);
        *RESULT.lock().unwrap() = Some(c);
    }

    #[test]
    fn makecontext_coroutine__its_stack_ends_at_start_context_as_a_root() {
        let u = LocalUnwinder::new(Options::default());
        assert_ne!(u.start_context, 0);
        UNWINDER.store(&raw const u as usize, Ordering::SeqCst);
        let mut stack = vec![0u8; 256 << 10];
        // SAFETY: the stack outlives the coroutine; MAIN_CTX is this test's
        // alone.
        unsafe { run_coroutine(&mut stack, in_coroutine, (&raw mut MAIN_CTX).cast()) };
        let c = RESULT.lock().unwrap().take().unwrap();
        assert_eq!(c.end, StackEnd::Root, "{c:?}");
        assert!(c.len >= 2, "{c:?}");
    }

    /// An unwinder of one cache, whose captures wait `wait_ns` for it, and
    /// no Python frames.
    fn one_cache(wait_ns: u64) -> LocalUnwinder {
        let mut u = LocalUnwinder::new(Options {
            caches: 1,
            python: false,
        });
        u.cache_wait_ns = wait_ns;
        u
    }

    #[test]
    fn every_cache_in_use__a_capture_waits_for_one_and_counts_it() {
        // The release below comes whenever the machine runs this thread again:
        // on a loaded machine that can be later than the 10 ms a capture waits.
        let u = one_cache(120_000_000_000);
        // Another capture holds the only cache, and gives it back a little later.
        let held = u.acquire_cache().expect("a free cache");
        let c = std::thread::scope(|s| {
            let t = s.spawn(|| {
                let mut frames = [Frame::default(); MAX_FRAMES];
                u.capture(0, &mut frames)
            });
            // Released once the other capture is waiting (it counts the wait
            // before it starts), however late the machine runs that thread.
            while u.stats().cache_waits == 0 && !t.is_finished() {
                std::thread::yield_now();
            }
            held.busy.store(false, Ordering::Release);
            t.join().unwrap()
        });
        assert_ne!(c.end, StackEnd::Busy, "{c:?}");
        let st = u.stats();
        assert_eq!((st.busy, st.cache_waits), (0, 1), "{st:?}");
    }

    #[test]
    fn every_cache_in_use_throughout__a_capture_expecting_a_kept_one_waits_once() {
        let u = one_cache(1_000_000);
        let _held = u.acquire_cache().expect("a free cache");
        let mut frames = [Frame::default(); MAX_FRAMES];
        let mut trail = Trail::new(MAX_FRAMES);
        trail.expect([1, 0]);
        let r = u.capture_then_reusing(0, &mut frames, &mut trail, |_, c| c);
        assert_eq!(r, Err(StackEnd::Busy));
        // The attempt on the caller's stack does not wait: the general path
        // waits, once, and gives up.
        let st = u.stats();
        assert_eq!((st.busy, st.cache_waits), (1, 1), "{st:?}");
    }

    #[test]
    fn frame_with_cfa_at_rbp_plus_32__unwound_by_its_own_rule_to_the_root() {
        let u = LocalUnwinder::new(Options {
            python: false,
            ..Options::default()
        });
        let mut p = Probe {
            u: &u,
            frames: [Frame::default(); MAX_FRAMES],
            captured: None,
        };
        // SAFETY: the assembly above calls `take(&mut p)` and returns.
        unsafe { gpuperf_test_bp_offset_frame(take, (&raw mut p).cast()) };
        let c = p.captured.expect("the callback ran");
        let odd: unsafe extern "C" fn(extern "C" fn(*mut c_void), *mut c_void) =
            gpuperf_test_bp_offset_frame;
        let end: unsafe extern "C" fn() = gpuperf_test_bp_offset_frame_end;
        let range = odd as usize as u64..end as usize as u64;
        let modules = u.modules();
        let at = p.frames[..c.len].iter().position(|f| match *f {
            Frame::Native { module, .. } => f
                .lookup_offset()
                .is_some_and(|o| range.contains(&(o + modules[module.0 as usize].bias))),
            _ => false,
        });
        let at = at.unwrap_or_else(|| panic!("no frame in the odd function: {c:?}"));
        // Past it: this test, the test harness, the thread start.
        assert!(c.len > at + 3, "stack ends after the odd frame: {c:?}");
        assert_eq!(c.end, StackEnd::Root, "{c:?}");
        // And the walk's own rule, not framehop's uncached path, did it.
        let Frame::Native { module, .. } = p.frames[at] else {
            unreachable!()
        };
        // SAFETY: no refresh runs in this test, so the snapshot stays alive.
        let snap = unsafe { &*u.current.load(Ordering::SeqCst) };
        assert!(snap.extra.is_none());
        let lookup = p.frames[at].lookup_offset().unwrap() + modules[module.0 as usize].bias;
        let entry = snap
            .table
            .find(lookup)
            .expect("the test binary is in the table");
        let cfi = entry.cfi.as_ref().expect("with .eh_frame");
        let mut cache = UnwindCache::new();
        assert_eq!(
            crate::rule::rule_of(&mut cache, cfi, lookup - entry.bias),
            "Cfa { from_bp: true, cfa: 32, bp: -16 }"
        );
        let take: extern "C" fn(*mut c_void) = take;
        // At a function's first instruction: CFA = rsp + 8.
        let plain = take as usize as u64;
        let entry = snap
            .table
            .find(plain)
            .expect("the test binary is in the table");
        let cfi = entry.cfi.as_ref().expect("with .eh_frame");
        assert_eq!(
            crate::rule::rule_of(&mut cache, cfi, plain - entry.bias),
            "Cfa { from_bp: false, cfa: 8, bp: 0 }"
        );
    }
}
