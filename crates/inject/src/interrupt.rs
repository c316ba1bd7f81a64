//! Ctrl-C and `kill`: the trace is closed before the program dies of the signal.
//!
//! A program with no handler for SIGINT or SIGTERM dies at once, without
//! `atexit`, so CUPTI's buffers (the GPU records of its last launches) are never
//! flushed. Under `gpuperf record` (`GPUPERF_FLUSH_ON_SIGNAL=1`) the library
//! installs a handler for each of the two signals, but only where the
//! disposition is still the default: a program that handles or ignores the
//! signal keeps its own behaviour, and one that installs a handler later simply
//! replaces this one, so it sees every signal exactly once.
//!
//! The handler only does what is async-signal-safe, and never waits: it notes
//! the signal, wakes the closing thread through a pipe and returns. It reads
//! no thread-local storage: this library's TLS is allocated by glibc, with
//! `malloc`, at a thread's first access, and a thread that never made a CUDA
//! call may take the signal inside `malloc`, where that would deadlock on the
//! allocator's lock. It finds the thread's state through a pthread key set at
//! the thread's first CUDA call instead (`pthread_getspecific` never
//! allocates). Waiting in the handler is out for the same reason: the
//! interrupted code may hold locks (the allocator's, CUDA's, CUPTI's) that
//! closing the trace needs. The closing thread (all signals blocked) closes
//! the trace as the exit path does, sets the disposition back to the default
//! and sends the signal again to the process: the program dies of the same
//! signal, with the same status, as it would have without gpuperf. Until then
//! (the close takes milliseconds) the program's threads run on, but none
//! starts a CUDA call: a thread that tries waits for the close and dies of the
//! signal there, as does one that calls `exit`. A thread that was sleeping
//! wakes early.
//!
//! A handler that lands inside a CUDA call notes that too, and the thread
//! waits (and the signal is raised again) when that call returns, at its API
//! exit callback, with the runtime's and CUPTI's locks released: outside the
//! handler. The closing thread waits for such calls to return, up to
//! [`CALLS_WAIT_MS`], so that the interrupted call is in the trace with its
//! GPU work. A call that never returns (a sync on a hung kernel) does not keep
//! the program alive: once the trace is closed, the closing thread raises the
//! signal itself.
//!
//! Why in the program and not in gpuperf: a Ctrl-C at the terminal reaches the
//! whole foreground process group at once, the program included (it must stay
//! there to keep reading the terminal), so gpuperf cannot act before the
//! program dies.
//!
//! A crash (SIGSEGV, SIGBUS, SIGFPE, SIGILL) or `abort` (SIGABRT: an assert, a
//! C++ `std::terminate`, PyTorch's exit race on Python 3.11) cannot be put off:
//! `abort` raises again with the default disposition when the handler
//! returns, and a fault happens again. The trace up to the crash is what a
//! user most wants, so where those dispositions are the default too, the
//! thread the signal hit wakes the closing thread and waits in the handler
//! for the close, at most [`WAIT_MS`] (`poll` is async-signal-safe); then the
//! signal takes its course on that thread, so a core dump shows the crashing
//! thread and its siginfo as without gpuperf: a fault the kernel raised
//! happens again, a signal that was sent is sent again. The wait risks what
//! the handler for SIGINT avoids, a close that needs a lock the crashed thread
//! holds, so it is bounded, and skipped where that is likely: inside a CUDA
//! call (CUPTI's and the driver's locks, and the library's own), and on the
//! thread closing the trace (the closing thread, or one in `exit`'s handler:
//! the close it would wait for is the one that crashed). Other threads that
//! start a CUDA call or call `exit` meanwhile wait for the crashing thread to
//! end the program. Should the close itself crash (an `abort` for a corrupt
//! heap leaves it that heap), the program dies of the signal that was ending
//! it, not of the close's.

use std::io;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, Ordering::Relaxed, Ordering::SeqCst};

use crate::clock::{gettid, monotonic_ns};

/// How long a thread whose CUDA call a signal landed in waits, at the call's
/// exit, for the trace to close before the signal takes its course anyway.
pub const WAIT_MS: i32 = 5000;

/// How long the closing thread waits for the calls a signal landed in to
/// return before it closes the trace without them.
pub const CALLS_WAIT_MS: u64 = 1000;

const SIGNALS: [libc::c_int; 2] = [libc::SIGINT, libc::SIGTERM];

/// Signals that end the program however it is put off: the thread they hit
/// waits in the handler for the close.
const FATAL: [libc::c_int; 5] = [
    libc::SIGABRT,
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGFPE,
    libc::SIGILL,
];

fn is_fatal(sig: libc::c_int) -> bool {
    FATAL.contains(&sig)
}

/// The closing thread's kernel id: a fatal signal there ends the program at
/// once (nothing else would close the trace).
static CLOSER: AtomicI32 = AtomicI32::new(0);
/// The kernel id of the thread closing the trace in `exit`'s handler, while
/// it does: as on the closing thread, a fatal signal there ends the program
/// at once (the close it would wait for is the one that crashed).
static EXITING: AtomicI32 = AtomicI32::new(0);

/// The kernel id of the thread making one of the close's CUPTI calls for it
/// (the recorder bounds those by running them apart), while it does: as on
/// the thread closing, a fatal signal there is the close's crash.
static HELPER: AtomicI32 = AtomicI32::new(0);

/// Read end of the wake-up pipe (the closing thread reads it).
static WAKE_R: AtomicI32 = AtomicI32::new(-1);
/// Write end of the wake-up pipe (the handler writes the signal number).
static WAKE_W: AtomicI32 = AtomicI32::new(-1);
/// Read end of the done pipe (waiting threads poll it, never read it).
static DONE_R: AtomicI32 = AtomicI32::new(-1);
/// Write end of the done pipe.
static DONE_W: AtomicI32 = AtomicI32::new(-1);
/// The process the closing thread runs in: a forked child has none.
static PID: AtomicI32 = AtomicI32::new(0);
/// The signal being handled: the closing thread raises it once the trace is
/// closed.
static DEFERRED: AtomicI32 = AtomicI32::new(0);
/// Threads with a signal pending in a CUDA call that has not returned yet.
static INTERRUPTED: AtomicI32 = AtomicI32::new(0);
/// The pthread key under which each thread that made a CUDA call keeps the
/// address of its [`Slot`], once [`KEY_SET`] is true.
static KEY: AtomicU32 = AtomicU32::new(0);
static KEY_SET: AtomicBool = AtomicBool::new(false);

/// A thread's signal state. It lives in the thread's TLS (`const`, without
/// destructor, so it stays valid until the thread is gone), and the handler
/// reaches it only through the pthread key, never through TLS.
struct Slot {
    /// CUDA calls this thread is inside: API entries seen, exits not yet.
    in_call: AtomicU32,
    /// A signal that landed inside this thread's CUDA call, taken at its exit.
    pending: AtomicI32,
}

thread_local! {
    static SLOT: Slot = const {
        Slot {
            in_call: AtomicU32::new(0),
            pending: AtomicI32::new(0),
        }
    };
}

/// Notes that the calling thread entered a CUDA call (an API entry callback).
/// A thread that starts a call while a signal is being handled waits for the
/// close and dies of the signal, as it would have at once without gpuperf.
pub fn call_entered() {
    SLOT.with(|s| {
        if s.in_call.load(Relaxed) == 0 {
            let sig = deferred();
            if sig != 0 {
                wait_then_raise(sig);
            }
        }
        if KEY_SET.load(SeqCst) {
            let key = KEY.load(SeqCst);
            // SAFETY: `key` was created by `install`; the value is the address
            // of this thread's slot, valid as long as the thread runs. Set
            // before the count is raised, so that a handler that sees the
            // count also finds the slot. (Set again after glibc cleared it at
            // thread exit, for calls made by later destructors.)
            unsafe {
                if libc::pthread_getspecific(key).is_null() {
                    libc::pthread_setspecific(key, ptr::from_ref(s).cast());
                }
            }
        }
        // Only this thread writes the count; its handler only reads it.
        s.in_call.store(s.in_call.load(Relaxed) + 1, Relaxed);
    });
}

/// Notes that the calling thread left a CUDA call (an API exit callback, at its
/// very end). Leaving the outermost one with a signal pending waits for the
/// trace to close and raises that signal, as the handler would have.
pub fn call_exited() {
    let sig = SLOT.with(|s| {
        let d = s.in_call.load(Relaxed).saturating_sub(1);
        s.in_call.store(d, Relaxed);
        if d == 0 {
            s.pending.swap(0, Relaxed)
        } else {
            0
        }
    });
    if sig != 0 {
        // The call's API record is in its shard: the close may go on.
        INTERRUPTED.fetch_sub(1, SeqCst);
        wait_then_raise(sig);
    }
}

/// The signal's name, as the logs say it.
pub fn name(sig: libc::c_int) -> String {
    match sig {
        libc::SIGINT => "SIGINT".into(),
        libc::SIGTERM => "SIGTERM".into(),
        libc::SIGABRT => "SIGABRT".into(),
        libc::SIGSEGV => "SIGSEGV".into(),
        libc::SIGBUS => "SIGBUS".into(),
        libc::SIGFPE => "SIGFPE".into(),
        libc::SIGILL => "SIGILL".into(),
        _ => format!("signal {sig}"),
    }
}

/// Marks the calling thread as the one closing the trace in `exit`'s handler
/// (`false`: done).
pub fn closing_at_exit(closing: bool) {
    EXITING.store(if closing { gettid() as i32 } else { 0 }, SeqCst);
}

/// Marks the calling thread, one of gpuperf's, as making a call for the close
/// while this lives. A fault there reaches the handler, as on the closing
/// thread: the calling thread's signals are unblocked but SIGABRT's.
pub struct PartOfClose(i32);

impl PartOfClose {
    pub fn enter() -> Self {
        let tid = gettid() as i32;
        HELPER.store(tid, SeqCst);
        unblock(FATAL.into_iter().filter(|&s| s != libc::SIGABRT));
        Self(tid)
    }
}

impl Drop for PartOfClose {
    fn drop(&mut self) {
        // A later helper's mark stays.
        let _ = HELPER.compare_exchange(self.0, 0, SeqCst, SeqCst);
    }
}

/// The signal whose handler ran and that has not ended the program yet, or 0.
pub fn deferred() -> libc::c_int {
    match DEFERRED.load(Relaxed) {
        // SAFETY: getpid has no preconditions.
        sig if sig != 0 && PID.load(Relaxed) == unsafe { libc::getpid() } => sig,
        _ => 0,
    }
}

/// For the exit path when a signal is being handled: waits for the closing
/// thread to close the trace (at most [`WAIT_MS`]), then gives the signal its
/// default course, so that the program dies of it and not of `exit`.
pub fn die_of(sig: libc::c_int) {
    wait_then_raise(sig);
}

/// Installs the handlers where the disposition is the default, and starts the
/// closing thread, which calls `close` once, with the first signal. Returns
/// the signals handled.
pub fn install(close: fn(libc::c_int)) -> io::Result<Vec<libc::c_int>> {
    let (wake_r, wake_w) = pipe()?;
    let (done_r, done_w) = pipe()?;
    WAKE_R.store(wake_r, SeqCst);
    WAKE_W.store(wake_w, SeqCst);
    DONE_R.store(done_r, SeqCst);
    DONE_W.store(done_w, SeqCst);
    PID.store(std::process::id() as i32, SeqCst);
    let mut key: libc::pthread_key_t = 0;
    // SAFETY: `key` is a valid out-parameter; no destructor: the slots are
    // TLS, freed with their thread.
    if unsafe { libc::pthread_key_create(&mut key, None) } != 0 {
        return Err(io::Error::last_os_error());
    }
    KEY.store(key, SeqCst);
    KEY_SET.store(true, SeqCst);
    crate::threads::spawn_blocked("gpuperf-signal", move || closing_thread(close))?;
    let handlers = SIGNALS.map(|sig| {
        (
            sig,
            on_signal as extern "C" fn(libc::c_int) as usize,
            libc::SA_RESTART,
        )
    });
    let fatal = FATAL.map(|sig| {
        let handler: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) = on_fatal;
        // On the thread's alternate stack where it has one: a stack overflow.
        (sig, handler as usize, libc::SA_SIGINFO | libc::SA_ONSTACK)
    });
    let mut installed = Vec::new();
    for (sig, handler, flags) in handlers.into_iter().chain(fatal) {
        // SAFETY: a zeroed sigaction is a valid out-parameter.
        let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: reads the current disposition only.
        if unsafe { libc::sigaction(sig, ptr::null(), &mut old) } != 0
            || old.sa_sigaction != libc::SIG_DFL
        {
            continue;
        }
        // SAFETY: as above.
        let mut new: libc::sigaction = unsafe { std::mem::zeroed() };
        new.sa_sigaction = handler;
        new.sa_flags = flags;
        // SAFETY: `sa_mask` is a valid set to empty.
        unsafe { libc::sigemptyset(&mut new.sa_mask) };
        // SAFETY: installs a handler that makes only async-signal-safe calls.
        if unsafe { libc::sigaction(sig, &new, ptr::null_mut()) } == 0 {
            installed.push(sig);
        }
    }
    Ok(installed)
}

fn pipe() -> io::Result<(i32, i32)> {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((fds[0], fds[1]))
}

fn closing_thread(close: fn(libc::c_int)) {
    CLOSER.store(gettid() as i32, SeqCst);
    let mut sig = [0u8; 1];
    loop {
        // SAFETY: reads one byte into a live buffer.
        let n = unsafe { libc::read(WAKE_R.load(SeqCst), sig.as_mut_ptr().cast(), 1) };
        if n == 1 {
            break;
        }
        if n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
            continue;
        }
        return;
    }
    // The calls a signal landed in record their exit first.
    let deadline = std::time::Instant::now() + std::time::Duration::from_millis(CALLS_WAIT_MS);
    while INTERRUPTED.load(SeqCst) > 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let deferred = DEFERRED.load(SeqCst);
    // A fault in the close must reach `on_fatal`: the kernel kills a thread
    // that faults with the signal blocked at once, of that signal. Only now:
    // until a signal came, one sent to the process is for the other threads.
    unblock(FATAL.into_iter().filter(|&s| s != libc::SIGABRT));
    let _ = std::panic::catch_unwind(|| close(deferred));
    for s in SIGNALS.into_iter().chain(FATAL) {
        // SAFETY: back to the default disposition; no memory is involved.
        unsafe { libc::signal(s, libc::SIG_DFL) };
    }
    // SAFETY: writes one byte from a live buffer.
    unsafe { libc::write(DONE_W.load(SeqCst), b"!".as_ptr().cast(), 1) };
    // A fatal signal ends the program on the thread it hit, which waits for
    // the byte just written.
    let deferred = DEFERRED.load(SeqCst);
    if deferred != 0 && !is_fatal(deferred) {
        // With the default disposition back, the signal ends the program
        // now, wherever its threads are (one may never leave a CUDA call).
        // SAFETY: kill has no memory preconditions.
        unsafe { libc::kill(libc::getpid(), deferred) };
    }
}

extern "C" fn on_signal(sig: libc::c_int) {
    // SAFETY: `__errno_location` is the thread's errno, kept for the code the
    // signal interrupted.
    let errno = unsafe { *libc::__errno_location() };
    let byte = sig as u8;
    // SAFETY: getpid is async-signal-safe.
    let ours = unsafe { libc::getpid() } == PID.load(SeqCst);
    if !ours {
        // A forked child, whose trace is its parent's: the signal's default.
        // SAFETY: signal and raise are async-signal-safe.
        unsafe {
            libc::signal(sig, libc::SIG_DFL);
            libc::raise(sig);
        }
    } else {
        if let Some(slot) = in_call_slot() {
            // Inside a CUDA call, maybe holding locks the close needs: taken
            // at the call's exit. Counted before the closing thread is woken,
            // which waits for such calls.
            if slot.pending.swap(sig, Relaxed) == 0 {
                INTERRUPTED.fetch_add(1, SeqCst);
            }
        }
        DEFERRED.store(sig, SeqCst);
        // SAFETY: write is async-signal-safe, on a descriptor that stays open
        // for the life of the process. A full pipe (a second signal) is fine:
        // the closing thread is already awake.
        unsafe { libc::write(WAKE_W.load(SeqCst), (&raw const byte).cast(), 1) };
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
}

extern "C" fn on_fatal(sig: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // SAFETY: as in `on_signal`.
    let errno = unsafe { *libc::__errno_location() };
    // SAFETY: getpid is async-signal-safe.
    let ours = unsafe { libc::getpid() } == PID.load(SeqCst);
    let tid = gettid() as i32;
    let closer = [&CLOSER, &EXITING, &HELPER]
        .iter()
        .any(|t| t.load(SeqCst) == tid);
    if ours && in_call_slot().is_none() && !closer {
        DEFERRED.store(sig, SeqCst);
        let byte = sig as u8;
        // SAFETY: as in `on_signal`.
        unsafe { libc::write(WAKE_W.load(SeqCst), (&raw const byte).cast(), 1) };
        wait_done();
    }
    let deferred = DEFERRED.load(SeqCst);
    if ours && closer && deferred != 0 && deferred != sig {
        // The close crashed (a heap an `abort` found corrupt, a CUPTI that
        // faults): the program dies of the signal that was ending it, as
        // without gpuperf, with the trace unclosed.
        raise_now(deferred);
    }
    // SAFETY: `info` is the kernel's siginfo for this signal (SA_SIGINFO).
    let sent = unsafe { info.as_ref() }.is_none_or(|i| i.si_code <= 0);
    // SAFETY: signal and raise are async-signal-safe. The signal is blocked
    // until the handler returns: then the program dies of it, raised again
    // here if it was sent (`abort`, `kill`), or by the fault happening again.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        if sent {
            libc::raise(sig);
        }
        *libc::__errno_location() = errno;
    }
}

/// Ends the program of `sig` on this thread, whose mask may block it (the
/// closing thread's does). Async-signal-safe.
fn raise_now(sig: libc::c_int) {
    // SAFETY: signal and raise are async-signal-safe. Unblocked with the
    // default disposition, a signal raised on the calling thread is
    // delivered before `raise` returns.
    unsafe { libc::signal(sig, libc::SIG_DFL) };
    unblock([sig].into_iter());
    // SAFETY: as above.
    unsafe { libc::raise(sig) };
}

/// Unblocks `sigs` on the calling thread. Async-signal-safe.
fn unblock(sigs: impl Iterator<Item = libc::c_int>) {
    // SAFETY: a zeroed sigset_t is a valid set to empty; sigemptyset,
    // sigaddset and pthread_sigmask are async-signal-safe and touch only
    // `set` and the thread's mask.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for sig in sigs {
            libc::sigaddset(&mut set, sig);
        }
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, ptr::null_mut());
    }
}

/// The calling thread's slot, when the thread is inside a CUDA call, through
/// the pthread key (no TLS access). Async-signal-safe.
fn in_call_slot() -> Option<&'static Slot> {
    // SAFETY: pthread_getspecific reads the thread's key table without
    // allocating or locking; the value is null or this thread's slot, which
    // lives as long as the thread (the caller does not outlive it).
    let slot = unsafe { libc::pthread_getspecific(KEY.load(SeqCst)) }.cast::<Slot>();
    // SAFETY: as above.
    unsafe { slot.as_ref() }.filter(|s| s.in_call.load(Relaxed) > 0)
}

/// Waits until the closing thread has closed the trace, at most [`WAIT_MS`].
/// Async-signal-safe.
fn wait_done() {
    let mut p = libc::pollfd {
        fd: DONE_R.load(SeqCst),
        events: libc::POLLIN,
        revents: 0,
    };
    let deadline = monotonic_ns() + WAIT_MS as u64 * 1_000_000;
    loop {
        let left_ms = deadline.saturating_sub(monotonic_ns()) / 1_000_000;
        // SAFETY: `p` is a live pollfd.
        let n = unsafe { libc::poll(&mut p, 1, left_ms as i32) };
        // A second signal (`gpuperf` passes a Ctrl-C on to the program that
        // the terminal already sent it) interrupts the wait, not the close.
        if n >= 0 || left_ms == 0 || io::Error::last_os_error().kind() != io::ErrorKind::Interrupted
        {
            break;
        }
    }
}

/// Waits for the trace to close, at most [`WAIT_MS`], then gives the signal
/// its default course on this thread. Never called in a signal handler. A
/// fatal signal ends the program on the thread it hit once the trace is
/// closed: this thread gives it that time before raising it itself.
fn wait_then_raise(sig: libc::c_int) {
    wait_done();
    if is_fatal(sig) {
        std::thread::sleep(std::time::Duration::from_millis(WAIT_MS as u64));
    }
    // SAFETY: signal and raise have no memory preconditions.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        libc::raise(sig);
    }
}
