//! One sampled launch at a time in a context (kernel-serialized mode).
//!
//! CUPTI writes each serialized kernel's PC records into the one buffer given
//! at configuration when the kernel ends, replacing what it held, and gpuperf
//! reads them when the launch returns. Two threads whose sampled launches
//! overlap in one context would lose the first kernel's records if the second
//! kernel ended before the first launch's return read them. So a sampled
//! launch waits, at its entry, until the context's previous one has returned.
//! So does a launch past a sampling window, whose Stop ends the range and
//! would cut a sampled kernel still running.
//! CUPTI already runs these kernels one at a time, and each launch waits for
//! its kernel: the wait adds only the time between a kernel's end and its
//! launch's return.
//!
//! The wait is bounded ([`Gates::new`]'s `wait`): a launch that waits longer
//! (its kernel waits for work another thread has yet to launch, or a launch
//! never returned through gpuperf's callback) goes on, the gates are off for
//! the rest of the run, and the trace says so. A program never hangs on them.
//!
//! Contexts share a fixed set of gates by address: two contexts on one gate
//! only wait for each other, which is rare and costs no record.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::guard::{NoCancel, lock};

/// Gates shared by all contexts.
const GATES: usize = 16;
/// How often a waiting launch looks whether the gates were turned off.
const SLICE: Duration = Duration::from_millis(100);

thread_local! {
    /// The gate this thread's sampled launch holds, between its entry and its return.
    static HELD: Cell<Option<usize>> = const { Cell::new(None) };
}

/// One gate: whether a launch holds it, and its waiters' wake-up.
#[derive(Default)]
struct Gate {
    busy: Mutex<bool>,
    free: Condvar,
}

/// The gates, and what they did.
pub(super) struct Gates {
    gates: [Gate; GATES],
    wait: Duration,
    /// Off after a wait that timed out.
    off: AtomicBool,
    /// Launches that waited for another thread's.
    pub(super) waited: AtomicU64,
    /// Waits that timed out (at most a few: the first turns the gates off).
    pub(super) timeouts: AtomicU64,
}

impl Gates {
    /// Gates whose waits end after `wait`.
    pub(super) fn new(wait: Duration) -> Self {
        Self {
            gates: Default::default(),
            wait,
            off: AtomicBool::new(false),
            waited: AtomicU64::new(0),
            timeouts: AtomicU64::new(0),
        }
    }

    /// A sampled launch's entry in the context `ctx`: waits until the
    /// context's gate is free, then holds it until [`Gates::exit`].
    pub(super) fn enter(&self, ctx: usize) {
        if self.off.load(Relaxed) || HELD.try_with(Cell::get).ok().flatten().is_some() {
            return;
        }
        let i = index(ctx);
        let gate = &self.gates[i];
        let mut busy = lock(&gate.busy);
        if *busy {
            self.waited.fetch_add(1, Relaxed);
            // Condvar waits are futex calls, not cancellation points; the
            // guard keeps it so should that change.
            let _no_cancel = NoCancel::new();
            let deadline = Instant::now() + self.wait;
            while *busy {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    self.timeouts.fetch_add(1, Relaxed);
                    self.off.store(true, Relaxed);
                }
                if self.off.load(Relaxed) {
                    return;
                }
                busy = match gate.free.wait_timeout(busy, left.min(SLICE)) {
                    Ok((g, _)) => g,
                    Err(e) => e.into_inner().0,
                };
            }
        }
        if HELD.try_with(|h| h.set(Some(i))).is_ok() {
            *busy = true;
        }
    }

    /// The launch's return, once its records are read: frees its gate.
    pub(super) fn exit(&self) {
        let Some(i) = HELD.try_with(Cell::take).ok().flatten() else {
            return;
        };
        let gate = &self.gates[i];
        *lock(&gate.busy) = false;
        gate.free.notify_one();
    }

    /// Whether a wait timed out and the gates were turned off.
    pub(super) fn timed_out(&self) -> bool {
        self.timeouts.load(Relaxed) > 0
    }

    /// The wait's bound.
    pub(super) fn wait(&self) -> Duration {
        self.wait
    }
}

/// The gate of a context's address (a `CUcontext` is a heap pointer: its low
/// bits are alignment).
fn index(ctx: usize) -> usize {
    ((ctx as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 60) as usize % GATES
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn a_second_launch_waits_for_the_first_to_return() {
        let gates = Arc::new(Gates::new(Duration::from_secs(30)));
        let order = Arc::new(Mutex::new(Vec::new()));
        gates.enter(0x1000);
        let (g, o) = (Arc::clone(&gates), Arc::clone(&order));
        let second = std::thread::spawn(move || {
            g.enter(0x1000);
            lock(&o).push("second entered");
            g.exit();
        });
        // The second thread waits on the gate until the first returns.
        while gates.waited.load(Relaxed) == 0 {
            std::thread::yield_now();
        }
        lock(&order).push("first returned");
        gates.exit();
        second.join().unwrap();
        assert_eq!(*lock(&order), ["first returned", "second entered"]);
        assert!(!gates.timed_out());
    }

    #[test]
    fn a_wait_past_its_bound_goes_on_and_turns_the_gates_off() {
        let gates = Arc::new(Gates::new(Duration::from_millis(50)));
        gates.enter(0x1000);
        let g = Arc::clone(&gates);
        let passed = Arc::new(AtomicUsize::new(0));
        let p = Arc::clone(&passed);
        // The first launch never returns through the gate: the second goes on.
        std::thread::spawn(move || {
            g.enter(0x1000);
            p.fetch_add(1, Relaxed);
            g.exit();
        })
        .join()
        .unwrap();
        assert_eq!(passed.load(Relaxed), 1);
        assert!(gates.timed_out());
        // Off: later launches do not wait at all.
        let g = Arc::clone(&gates);
        std::thread::spawn(move || g.enter(0x1000)).join().unwrap();
        assert_eq!(gates.timeouts.load(Relaxed), 1);
        gates.exit();
    }

    #[test]
    fn a_thread_that_already_holds_a_gate_does_not_wait_on_it_again() {
        let gates = Gates::new(Duration::from_secs(30));
        gates.enter(0x1000);
        gates.enter(0x1000);
        assert_eq!(gates.waited.load(Relaxed), 0);
        gates.exit();
        gates.exit();
    }
}
