//! gpuperf's own threads, born with every signal blocked.
//!
//! A process-directed signal (a timer's `SIGALRM`, `kill(pid, …)`) goes to any
//! thread that does not block it. Were one of ours chosen, the application's
//! handler would run on a thread it never made, while that thread may hold
//! the locks the handler's CUDA calls take. A thread that blocks signals as
//! its first step is too late: glibc's thread start restores the creator's
//! mask and lets a pending signal in before any of our code runs. So the
//! creator blocks them around the spawn, and the thread inherits that mask.
//! The same holds for the worker threads CUPTI starts while gpuperf sets it
//! up, so the whole set-up runs with signals blocked.

use std::{io, ptr, thread};

/// Runs `f` with every signal blocked on the calling thread, then puts the
/// thread's mask back (a signal that arrived meanwhile is delivered then).
/// Threads created inside `f`, ours or CUPTI's workers, inherit the full mask.
pub(crate) fn with_signals_blocked<T>(f: impl FnOnce() -> T) -> T {
    let mut all = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
    let mut old = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
    // SAFETY: sigfillset initializes `all`; pthread_sigmask changes only this
    // thread's mask and writes the previous one into `old`.
    let blocked = unsafe {
        libc::sigfillset(all.as_mut_ptr());
        libc::pthread_sigmask(libc::SIG_BLOCK, all.as_ptr(), old.as_mut_ptr()) == 0
    };
    let r = f();
    if blocked {
        // SAFETY: `old` was filled by the successful call above.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, old.as_ptr(), ptr::null_mut()) };
    }
    r
}

/// Spawns a named thread that starts with every signal blocked; the calling
/// thread's mask is back as it was when this returns.
pub(crate) fn spawn_blocked<F, T>(name: &str, f: F) -> io::Result<thread::JoinHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    with_signals_blocked(|| thread::Builder::new().name(name.into()).spawn(f))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The signals blocked on the calling thread.
    fn mask() -> libc::sigset_t {
        let mut m = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
        // SAFETY: a query only: no set is given, the current mask is written to `m`.
        unsafe {
            libc::sigemptyset(m.as_mut_ptr());
            libc::pthread_sigmask(libc::SIG_BLOCK, ptr::null(), m.as_mut_ptr());
            m.assume_init()
        }
    }

    fn is_member(set: &libc::sigset_t, sig: libc::c_int) -> bool {
        // SAFETY: `set` is an initialized set.
        unsafe { libc::sigismember(set, sig) == 1 }
    }

    #[test]
    fn the_thread_starts_with_every_signal_blocked_and_the_caller_keeps_its_mask() {
        let before = mask();
        let first = spawn_blocked("gpuperf-test", mask)
            .expect("spawn")
            .join()
            .expect("join");
        for sig in [
            libc::SIGALRM,
            libc::SIGINT,
            libc::SIGTERM,
            libc::SIGUSR1,
            libc::SIGCHLD,
        ] {
            assert!(
                is_member(&first, sig),
                "signal {sig} not blocked at the thread's start"
            );
        }
        let after = mask();
        for sig in 1..32 {
            assert_eq!(
                is_member(&before, sig),
                is_member(&after, sig),
                "signal {sig}"
            );
        }
    }
}
