//! More threads capturing at once than the in-process unwinder has caches.

use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::{Barrier, Condvar, Mutex};

use gpuperf_unwind::{Captured, Frame, LocalUnwinder, MAX_FRAMES, Options, StackEnd};

/// A capture's outcome: what `capture_then` gave its closure, or why it did
/// not run it.
type Outcome = Result<Captured, StackEnd>;

fn capture(u: &LocalUnwinder, inside: impl FnOnce()) -> Outcome {
    let mut frames = vec![Frame::default(); MAX_FRAMES];
    u.capture_then(0, &mut frames, |_, c| {
        inside();
        c
    })
}

/// Issue 22, item 8: with more threads capturing at once than unwind caches
/// (32 then, whatever the machine), the rest got no stack at all, at once.
/// Now the caches are sized to the machine, and a capture that finds them all
/// in use waits for one (for a bounded time, then ends `Busy`, counted).
///
/// Every cache is held by a capture blocked inside it (in `capture_then`'s
/// closure) while 8 more threads capture; the holders let go only once each
/// of the 8 has counted its wait. So all were capturing at the same moment,
/// whatever the machine's load.
#[test]
fn more_threads_capturing_at_once_than_caches__each_waits_and_gets_its_stack_or_a_counted_busy() {
    let mut options = Options::default();
    options.python = false;
    let caches = options.caches;
    // SAFETY: sysconf has no preconditions.
    let cpus = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1) as usize;
    assert!(
        caches >= 32 && caches >= cpus,
        "{caches} caches, {cpus} CPUs"
    );
    let late = 8;
    let u = LocalUnwinder::new(options);
    let holding = AtomicUsize::new(0);
    let release = (Mutex::new(false), Condvar::new());
    let hold = || {
        holding.fetch_add(1, SeqCst);
        let (m, cv) = &release;
        let mut go = m.lock().unwrap();
        while !*go {
            go = cv.wait(go).unwrap();
        }
    };
    let start = Barrier::new(late);
    let (held, waited) = std::thread::scope(|s| {
        let holders: Vec<_> = (0..caches).map(|_| s.spawn(|| capture(&u, hold))).collect();
        while holding.load(SeqCst) < caches && !holders.iter().any(|t| t.is_finished()) {
            std::thread::yield_now();
        }
        let all_held = holding.load(SeqCst) == caches;
        let waiting: Vec<_> = (0..late)
            .map(|_| {
                s.spawn(|| {
                    start.wait();
                    capture(&u, || {})
                })
            })
            .collect();
        // The old code never waited: its captures ended at once, `Busy`.
        while u.stats().cache_waits < late as u64 && !waiting.iter().all(|t| t.is_finished()) {
            std::thread::yield_now();
        }
        let waits_while_held = u.stats().cache_waits;
        *release.0.lock().unwrap() = true;
        release.1.notify_all();
        let join = |v: Vec<std::thread::ScopedJoinHandle<'_, Outcome>>| -> Vec<Outcome> {
            v.into_iter().map(|t| t.join().unwrap()).collect()
        };
        let held = join(holders);
        let waited = join(waiting);
        assert!(
            all_held,
            "the {caches} holders did not all get a cache: {held:?}"
        );
        assert_eq!(
            waits_while_held, late as u64,
            "captures finding every cache in use did not wait for one: {waited:?}"
        );
        (held, waited)
    });
    let complete = |o: &Outcome| matches!(o, Ok(c) if c.end == StackEnd::Root && c.len >= 2);
    assert!(held.iter().all(complete), "{held:?}");
    // Each waiting capture got a cache when the holders let go, or, if the
    // machine did not run them within the wait's bound, ended `Busy`, counted.
    let busy = waited.iter().filter(|o| **o == Err(StackEnd::Busy)).count();
    assert!(
        waited
            .iter()
            .all(|o| complete(o) || *o == Err(StackEnd::Busy)),
        "{waited:?}"
    );
    let st = u.stats();
    assert_eq!(st.captures, (caches + late) as u64, "{st:?}");
    assert_eq!(st.busy, busy as u64, "{st:?}");
    assert_eq!(st.cache_waits, late as u64, "{st:?}");
    if busy > 0 {
        eprintln!("{busy} of {late} waiting captures gave up (the machine is loaded)");
    }
}
