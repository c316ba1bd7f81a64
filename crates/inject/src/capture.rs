//! Capture windows: record only part of a run, as Nsight Systems' `--delay`
//! and `--capture-range` do.
//!
//! ```text
//!  GPUPERF_CAPTURE_DELAY_MS ─▶ timer thread ─┐
//!  cudaProfilerStart/Stop, cuProfilerStart/Stop (API enter) ─┼─▶ OPEN ─▶ API enter gate
//!  NVTX range NAME pushed/started, popped/ended (`nvtx`) ─────┘      └─▶ correlation-id spans
//!                                                                        ─▶ GPU record filter
//! ```
//!
//! While the window is closed an API entry or exit costs a class look-up and
//! one relaxed load ([`skip_outside`]), before the recorder's re-entry guard:
//! no record, no stack, no marker; and CUPTI's activity kinds are off
//! (the `on_change` hook of [`configure`]), so it makes no GPU record either. Calls
//! entered while it is open get their correlation ids noted as a span
//! (lowest, highest); CUPTI's ids grow with every call in the process, so GPU
//! work is written when its id falls in a span, and counted as outside the
//! window otherwise. A call whose id was handed out before a window closed and
//! whose entry came after is left out with its work.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, OnceLock};

use crate::config::{Range, Window, secs};

/// Whether API calls are recorded now: the only check on the hot path.
static OPEN: AtomicBool = AtomicBool::new(true);
/// A window was asked for (not the whole run): GPU records are filtered.
static ACTIVE: AtomicBool = AtomicBool::new(false);
/// The delay has passed.
static DELAY_DONE: AtomicBool = AtomicBool::new(true);
/// The range is open (or there is none).
static RANGE_OPEN: AtomicBool = AtomicBool::new(true);
/// The open span of correlation ids: lowest and highest seen while open; 0
/// before the first call of the window.
static SPAN_LO: AtomicU32 = AtomicU32::new(0);
static SPAN_HI: AtomicU32 = AtomicU32::new(0);
/// GPU records left out because their call came outside the window.
static OUTSIDE: AtomicU64 = AtomicU64::new(0);
/// Calls that make GPU work (launches, copies, memsets) entered while the
/// window was closed: CUPTI makes no record of their work then, so
/// [`OUTSIDE`] alone would not show them.
static WORK_CALLS_OUTSIDE: AtomicU64 = AtomicU64::new(0);
static STATE: Mutex<Spans> = Mutex::new(Spans {
    closed: Vec::new(),
    opened_ns: Vec::new(),
    active: false,
    ranges_open: 0,
});

struct Spans {
    /// Closed windows' correlation-id spans.
    closed: Vec<(u32, u32)>,
    /// When each window opened and closed (CLOCK_MONOTONIC); the last one's
    /// end is 0 while it is open.
    opened_ns: Vec<(u64, u64)>,
    /// A window was configured (not the whole run).
    active: bool,
    /// NVTX ranges of the capture name now open, all threads.
    ranges_open: u32,
}

fn lock() -> std::sync::MutexGuard<'static, Spans> {
    STATE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Called after the window opened or closed, outside its lock: the recorder
/// turns CUPTI's activity kinds off and on. Handed in by `configure`, so this
/// module needs nothing of the recorder's.
static ON_CHANGE: OnceLock<fn()> = OnceLock::new();

fn changed() {
    if let Some(f) = ON_CHANGE.get() {
        f();
    }
}

/// Sets the window up before any callback is enabled: closed until the delay
/// passes and the range opens. `on_change` is called after each change.
pub fn configure(w: &Window, on_change: fn()) {
    let _ = ON_CHANGE.set(on_change);
    let mut s = lock();
    s.active = !w.whole_run();
    ACTIVE.store(s.active, Relaxed);
    DELAY_DONE.store(w.delay_ns == 0, Relaxed);
    // NVTX may have started before CUDA did (the first CUDA call made inside
    // a range): its ranges already count.
    let range_open = match w.range {
        Range::None => true,
        Range::ProfilerApi => false,
        Range::Nvtx(_) => s.ranges_open > 0,
    };
    RANGE_OPEN.store(range_open, Relaxed);
    if s.active {
        // Closed now unless both conditions hold; `update` opens it then.
        OPEN.store(false, Relaxed);
        s.opened_ns.clear();
        s.closed.clear();
        SPAN_LO.store(0, Relaxed);
        SPAN_HI.store(0, Relaxed);
        OUTSIDE.store(0, Relaxed);
        WORK_CALLS_OUTSIDE.store(0, Relaxed);
    }
    update(&mut s, crate::clock::monotonic_ns());
    drop(s);
    changed();
}

/// Whether API calls are recorded now.
#[inline]
pub fn recording() -> bool {
    OPEN.load(Relaxed)
}

thread_local! {
    /// Calls this thread has open in the recorder: an exit outside the window
    /// needs the recorder only when one is (a call entered inside it).
    static OPEN_HERE: Cell<u32> = const { Cell::new(0) };
}

/// The recorder opened a call on this thread (`true`) or closed one.
#[inline]
pub fn opened_here(open: bool) {
    let _ = OPEN_HERE.try_with(|c| {
        c.set(if open {
            c.get().saturating_add(1)
        } else {
            c.get().saturating_sub(1)
        })
    });
}

/// Whether an API callback outside the window can return before the
/// recorder: any entry, and an exit on a thread with no call open. An entry
/// of a call that makes GPU work (`work_call`) is counted as left out; the
/// caller counts each such call once (at the driver API, which the runtime's
/// calls reach too).
#[inline]
pub fn skip_outside(enter: bool, work_call: bool) -> bool {
    let skip = !recording() && (enter || OPEN_HERE.try_with(Cell::get).unwrap_or(1) == 0);
    if skip && enter && work_call {
        WORK_CALLS_OUTSIDE.fetch_add(1, Relaxed);
    }
    skip
}

/// Notes an API call entered while the window is open.
#[inline]
pub fn entered(correlation_id: u32) {
    if correlation_id == 0 {
        return;
    }
    // Read first: ids only grow on a thread, so the low end rarely moves, and
    // a read keeps the line shared between launching threads.
    let lo = SPAN_LO.load(Relaxed);
    if lo == 0 {
        let _ = SPAN_LO.compare_exchange(0, correlation_id, Relaxed, Relaxed);
    }
    if lo == 0 || correlation_id < lo {
        SPAN_LO.fetch_min(correlation_id, Relaxed);
    }
    if correlation_id > SPAN_HI.load(Relaxed) {
        SPAN_HI.fetch_max(correlation_id, Relaxed);
    }
}

/// The delay has passed.
pub fn delay_done() {
    DELAY_DONE.store(true, Relaxed);
    update(&mut lock(), crate::clock::monotonic_ns());
    changed();
}

/// `cudaProfilerStart` (`start`) or `cudaProfilerStop` was entered.
pub fn profiler_api(start: bool) {
    RANGE_OPEN.store(start, Relaxed);
    update(&mut lock(), crate::clock::monotonic_ns());
    changed();
}

/// An NVTX range of the capture name opened (`open`) or closed: the window
/// is open while any is.
pub fn nvtx_range(open: bool) {
    let mut s = lock();
    s.ranges_open = if open {
        s.ranges_open.saturating_add(1)
    } else {
        s.ranges_open.saturating_sub(1)
    };
    RANGE_OPEN.store(s.ranges_open > 0, Relaxed);
    update(&mut s, crate::clock::monotonic_ns());
    drop(s);
    changed();
}

/// Opens or closes the window after one of its conditions changed.
fn update(s: &mut Spans, now_ns: u64) {
    let open = DELAY_DONE.load(Relaxed) && RANGE_OPEN.load(Relaxed);
    if !s.active {
        OPEN.store(true, Relaxed);
        return;
    }
    if OPEN.swap(open, Relaxed) == open {
        return;
    }
    if open {
        s.opened_ns.push((now_ns, 0));
    } else {
        if let Some(last) = s.opened_ns.last_mut() {
            last.1 = now_ns;
        }
        let (lo, hi) = (SPAN_LO.swap(0, Relaxed), SPAN_HI.swap(0, Relaxed));
        if lo != 0 {
            s.closed.push((lo, hi));
        }
    }
}

/// Whether GPU work with this correlation id is written: its call came
/// inside a window (or no window was asked for). Work with no call (id 0) is
/// written while the window is open.
pub fn keeps(correlation_id: u32) -> bool {
    if !ACTIVE.load(Relaxed) {
        return true;
    }
    let kept = if correlation_id == 0 {
        recording()
    } else {
        let (lo, hi) = (SPAN_LO.load(Relaxed), SPAN_HI.load(Relaxed));
        (lo != 0 && (lo..=hi).contains(&correlation_id))
            || lock()
                .closed
                .iter()
                .any(|&(l, h)| (l..=h).contains(&correlation_id))
    };
    if !kept {
        OUTSIDE.fetch_add(1, Relaxed);
    }
    kept
}

/// The note for the trace: what was recorded, and what was left out. `None`
/// when the whole run was recorded.
pub fn summary(w: &Window, started_ns: u64) -> Option<String> {
    let s = lock();
    if !s.active {
        return None;
    }
    let at = |ns: u64| secs(ns.saturating_sub(started_ns));
    let spans: Vec<String> = s
        .opened_ns
        .iter()
        .map(|&(a, b)| {
            if b == 0 {
                format!("{} to the end", at(a))
            } else {
                format!("{} to {}", at(a), at(b))
            }
        })
        .collect();
    let what = match spans.len() {
        0 => "no window opened: nothing was recorded".to_string(),
        n => format!(
            "{n} window{} recorded, in time after the process started: {}",
            if n == 1 { "" } else { "s" },
            spans.join(", ")
        ),
    };
    Some(format!(
        "capture window {}: {what}; left out: {} calls that make GPU work (launches, copies, \
         memsets) entered outside it, and {} GPU records of calls outside it",
        w.describe(),
        WORK_CALLS_OUTSIDE.load(Relaxed),
        OUTSIDE.load(Relaxed)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One test: the window is process-wide state.
    #[test]
    fn a_window_keeps_only_the_work_of_calls_inside_it() {
        let w = Window {
            delay_ns: 0,
            range: Range::ProfilerApi,
        };
        configure(&w, || {});
        assert!(!recording());
        // Closed: entries skip the recorder; the work calls among them count.
        assert!(skip_outside(true, true) && skip_outside(true, false));
        assert!(skip_outside(true, true));
        profiler_api(true);
        assert!(!skip_outside(true, true));
        assert!(recording());
        for id in [10, 12, 11] {
            entered(id);
        }
        profiler_api(false);
        assert!(!recording());
        assert!(keeps(10) && keeps(11) && keeps(12));
        assert!(!keeps(9) && !keeps(13) && !keeps(0));
        profiler_api(true);
        entered(20);
        assert!(keeps(20) && keeps(0) && !keeps(19));
        let note = summary(&w, 0).unwrap();
        assert!(note.contains("2 windows recorded"), "{note}");
        assert!(note.contains("between cudaProfilerStart"), "{note}");
        assert!(note.contains("4 GPU records"), "{note}");
        assert!(
            note.contains("left out: 2 calls that make GPU work"),
            "{note}"
        );
        // NVTX: open while any range of the name is.
        configure(
            &Window {
                delay_ns: 0,
                range: Range::Nvtx("step".into()),
            },
            || {},
        );
        assert!(!recording());
        nvtx_range(true);
        nvtx_range(true);
        nvtx_range(false);
        assert!(recording());
        nvtx_range(false);
        assert!(!recording());
        // The whole run: everything kept, no note.
        let all = Window {
            delay_ns: 0,
            range: Range::None,
        };
        configure(&all, || {});
        assert!(recording() && keeps(1) && summary(&all, 0).is_none());
    }
}
