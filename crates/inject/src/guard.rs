//! What every callback does first: keep thread cancellation out of the
//! library, and notice when it is re-entered.
//!
//! **Re-entry.** A signal that lands while a thread is inside gpuperf (a
//! callback, a flush) and whose handler makes a CUDA call re-enters the API
//! callback on the same thread, where the thread's own state is half-updated
//! and its locks may be held. [`Inside`] marks the thread; the API callback
//! returns at once when the mark is already set, and the call is counted as
//! not recorded. The mark is a `const` thread-local without destructor: reading
//! it never allocates once the thread's TLS block exists (glibc makes that
//! block at the first access, with `malloc`, for libraries loaded by `dlopen`).
//!
//! A callback runs on the application's thread, inside its CUDA call. If that
//! thread has a cancellation pending (deferred, the default), the first
//! cancellation point the library reaches (a read of `/proc`, a log write, a
//! trace flush) would start a forced unwind through the library's frames and
//! through CUPTI's callback dispatch, which glibc aborts ("exception not
//! rethrown"). glibc's own `/proc` readers and the sanitizer runtimes do the
//! same as this guard: cancellation is disabled around every part of a
//! callback that may reach a cancellation point (a stack capture, a flush, a
//! log write, any callback outside the runtime and driver API domains) and
//! restored after it, so a pending cancellation acts at the application's next
//! cancellation point, as it would without gpuperf. The rest of a launch's
//! callbacks (recording the call in the thread's shard) makes no system call
//! that is one, and skips the guard's two calls into libc.

use std::cell::Cell;
use std::ffi::c_int;

thread_local! {
    static INSIDE: Cell<bool> = const { Cell::new(false) };
}

/// The calling thread is inside gpuperf while this lives.
#[must_use]
pub struct Inside(bool);

impl Inside {
    /// Marks the thread; [`Inside::reentered`] says whether it already was.
    pub fn enter() -> Inside {
        Inside(INSIDE.with(|c| c.replace(true)))
    }

    /// The thread was inside gpuperf already: this is a re-entry.
    pub fn reentered(&self) -> bool {
        self.0
    }
}

impl Drop for Inside {
    fn drop(&mut self) {
        INSIDE.with(|c| c.set(self.0));
    }
}

unsafe extern "C" {
    fn pthread_setcancelstate(state: c_int, old: *mut c_int) -> c_int;
}

/// glibc's `PTHREAD_CANCEL_DISABLE`.
const PTHREAD_CANCEL_DISABLE: c_int = 1;

/// Cancellation disabled while it lives; the thread's previous state after.
#[must_use]
pub struct NoCancel(c_int);

impl NoCancel {
    /// Disables cancellation on the calling thread.
    pub fn new() -> NoCancel {
        let mut old = 0;
        // SAFETY: `old` is a valid out-pointer; no lock, no allocation.
        unsafe { pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &mut old) };
        NoCancel(old)
    }
}

impl Drop for NoCancel {
    fn drop(&mut self) {
        // Restoring never acts on a pending deferred cancellation; an
        // asynchronous one (`PTHREAD_CANCEL_ASYNCHRONOUS`, which no CUDA
        // program can use safely) would act here.
        let mut old = 0;
        // SAFETY: as in `new`.
        unsafe { pthread_setcancelstate(self.0, &mut old) };
    }
}

/// Locks `m`, poisoned or not: a panic caught at the FFI boundary must not
/// stop later callbacks and flushes from taking the lock.
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inside_marks_nest_and_unwind() {
        let outer = Inside::enter();
        assert!(!outer.reentered());
        {
            let inner = Inside::enter();
            assert!(inner.reentered());
        }
        assert!(Inside::enter().reentered());
        drop(outer);
        assert!(!Inside::enter().reentered());
    }

    #[test]
    fn cancellation_is_disabled_inside_and_restored_after() {
        let state = || {
            let mut old = 0;
            // SAFETY: valid out-pointer; the state is put back at once.
            unsafe {
                pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &mut old);
                pthread_setcancelstate(old, &mut 0);
            }
            old
        };
        let before = state();
        {
            let _g = NoCancel::new();
            assert_eq!(state(), PTHREAD_CANCEL_DISABLE);
        }
        assert_eq!(state(), before);
    }
}
