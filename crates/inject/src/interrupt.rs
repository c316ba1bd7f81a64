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
//! The handler only does what is async-signal-safe: it wakes the closing thread
//! through a pipe and waits for it, up to [`WAIT_MS`], with `poll`. That thread
//! (all signals blocked) closes the trace as the exit path does, sets the
//! disposition back to the default, and answers. The handler then raises the
//! signal again on its own thread, where it stays blocked until the handler
//! returns: the program dies of the same signal, with the same status, as it
//! would have without gpuperf. The thread that took the signal is held while
//! the trace is closed, so its last launch is in it; other threads run on, and
//! their calls after the close are not recorded.
//!
//! A thread inside a CUDA call may hold the runtime's or CUPTI's locks (an
//! activity buffer's, say) that closing the trace takes too: waiting there
//! would hold the close up for the whole [`WAIT_MS`] and lose the trace. So a
//! handler that lands inside a CUDA call only wakes the closing thread and
//! returns; the thread waits (and the signal is raised again) when that call
//! returns, at its API exit callback, with those locks released. The closing
//! thread waits for such calls to return, up to [`CALLS_WAIT_MS`], so that
//! the interrupted call is in the trace with its GPU work. A call that never
//! returns (a sync on a hung kernel) does not keep the program alive: once the
//! trace is closed, the closing thread raises the signal itself.
//!
//! Why in the program and not in gpuperf: a Ctrl-C at the terminal reaches the
//! whole foreground process group at once, the program included (it must stay
//! there to keep reading the terminal), so gpuperf cannot act before the
//! program dies.

use std::cell::Cell;
use std::io;
use std::ptr;
use std::sync::atomic::{AtomicI32, Ordering::SeqCst};

/// How long the signalled thread waits for the trace to close before the
/// signal takes its course anyway.
pub const WAIT_MS: i32 = 5000;

/// How long the closing thread waits for the calls a signal landed in to
/// return before it closes the trace without them.
pub const CALLS_WAIT_MS: u64 = 1000;

const SIGNALS: [libc::c_int; 2] = [libc::SIGINT, libc::SIGTERM];

/// Read end of the wake-up pipe (the closing thread reads it).
static WAKE_R: AtomicI32 = AtomicI32::new(-1);
/// Write end of the wake-up pipe (the handler writes the signal number).
static WAKE_W: AtomicI32 = AtomicI32::new(-1);
/// Read end of the done pipe (handlers poll it, never read it).
static DONE_R: AtomicI32 = AtomicI32::new(-1);
/// Write end of the done pipe.
static DONE_W: AtomicI32 = AtomicI32::new(-1);
/// The process the closing thread runs in: a forked child has none.
static PID: AtomicI32 = AtomicI32::new(0);
/// A signal whose handler returned at once (it landed inside a CUDA call):
/// the closing thread raises it once the trace is closed.
static DEFERRED: AtomicI32 = AtomicI32::new(0);
/// Threads with a signal pending in a CUDA call that has not returned yet.
static INTERRUPTED: AtomicI32 = AtomicI32::new(0);

thread_local! {
    // `const`, without destructors: read from a signal handler, where a lazily
    // initialized thread-local could allocate.
    /// CUDA calls this thread is inside: API entries seen, exits not yet.
    static IN_CALL: Cell<u32> = const { Cell::new(0) };
    /// A signal that landed inside this thread's CUDA call, taken at its exit.
    static PENDING: Cell<i32> = const { Cell::new(0) };
}

/// Notes that the calling thread entered a CUDA call (an API entry callback).
pub fn call_entered() {
    IN_CALL.with(|c| c.set(c.get().saturating_add(1)));
}

/// Notes that the calling thread left a CUDA call (an API exit callback, at its
/// very end). Leaving the outermost one with a signal pending waits for the
/// trace to close and raises that signal, as the handler would have.
pub fn call_exited() {
    let depth = IN_CALL.with(|c| {
        let d = c.get().saturating_sub(1);
        c.set(d);
        d
    });
    if depth == 0 {
        let sig = PENDING.with(|p| p.replace(0));
        if sig != 0 {
            // The call's API record is in its shard: the close may go on.
            INTERRUPTED.fetch_sub(1, SeqCst);
            wait_then_raise(sig);
        }
    }
}

/// Installs the handlers where the disposition is the default, and starts the
/// closing thread, which calls `close` once, on the first signal. Returns the
/// signals handled.
pub fn install(close: fn()) -> io::Result<Vec<libc::c_int>> {
    let (wake_r, wake_w) = pipe()?;
    let (done_r, done_w) = pipe()?;
    WAKE_R.store(wake_r, SeqCst);
    WAKE_W.store(wake_w, SeqCst);
    DONE_R.store(done_r, SeqCst);
    DONE_W.store(done_w, SeqCst);
    PID.store(std::process::id() as i32, SeqCst);
    crate::threads::spawn_blocked("gpuperf-signal", move || closing_thread(close))?;
    let mut installed = Vec::new();
    for sig in SIGNALS {
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
        new.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
        new.sa_flags = libc::SA_RESTART;
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

fn closing_thread(close: fn()) {
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
    let _ = std::panic::catch_unwind(close);
    for s in SIGNALS {
        // SAFETY: back to the default disposition; no memory is involved.
        unsafe { libc::signal(s, libc::SIG_DFL) };
    }
    // SAFETY: writes one byte from a live buffer.
    unsafe { libc::write(DONE_W.load(SeqCst), b"!".as_ptr().cast(), 1) };
    let deferred = DEFERRED.load(SeqCst);
    if deferred != 0 {
        // The thread it landed in may never leave its CUDA call; with the
        // default disposition back, the signal ends the program now.
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
    // A forked child, whose trace is its parent's, wakes nobody.
    if ours {
        // Inside a CUDA call, maybe holding locks the close needs: taken at
        // the call's exit (or by the closing thread), not here. Counted
        // before the closing thread is woken, which waits for such calls.
        let in_call = IN_CALL.with(Cell::get) > 0;
        if in_call {
            if PENDING.with(|p| p.replace(sig)) == 0 {
                INTERRUPTED.fetch_add(1, SeqCst);
            }
            DEFERRED.store(sig, SeqCst);
        }
        // SAFETY: write is async-signal-safe, on a descriptor that stays open
        // for the life of the process. A full pipe (a second signal) is fine:
        // the closing thread is already awake.
        unsafe { libc::write(WAKE_W.load(SeqCst), (&raw const byte).cast(), 1) };
        if in_call {
            // SAFETY: as above.
            unsafe { *libc::__errno_location() = errno };
            return;
        }
    }
    wait_then_raise_from(sig, ours);
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
}

/// Waits for the trace to close, at most [`WAIT_MS`], then gives the signal its
/// default course on this thread.
fn wait_then_raise(sig: libc::c_int) {
    wait_then_raise_from(sig, true);
}

fn wait_then_raise_from(sig: libc::c_int, wait: bool) {
    if wait {
        let mut p = libc::pollfd {
            fd: DONE_R.load(SeqCst),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: poll is async-signal-safe; `p` is a live pollfd.
        unsafe { libc::poll(&mut p, 1, WAIT_MS) };
    }
    // Whatever happened, the signal now takes its default course: raised on
    // this thread (in a handler, blocked there until the handler returns).
    // SAFETY: signal and raise are async-signal-safe.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        libc::raise(sig);
    }
}
