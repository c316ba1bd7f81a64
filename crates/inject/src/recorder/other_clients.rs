//! Another CUPTI client in the process (e.g. torch.profiler): its calls that
//! take CUPTI over are watched, and the trace says from when its GPU side stops.

use std::ffi::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::hook;
use crate::sys;

use super::sink::Sink;
use super::{STATE, State, lock};
use crate::clock::monotonic_ns;

impl State {
    /// Writes, once, that another CUPTI client took the process-wide activity
    /// state: from here on API calls have no GPU side.
    pub(super) fn note_takeover(&self, sink: &mut Sink) {
        if self.takeover_noted.swap(true, Relaxed) {
            return;
        }
        let n = self.stats.launches_at_last_record.load(Relaxed);
        let text = format!(
            "GPU activity stopped after {n} launches, copies and memsets: another CUPTI client \
             (e.g. torch.profiler) took over"
        );
        self.log.line(&text);
        sink.note(text);
    }

    /// Seconds from the process's start to now, for notes.
    fn run_seconds(&self) -> f64 {
        monotonic_ns().saturating_sub(self.started_ns) as f64 / 1e9
    }

    /// Another client is about to register its activity buffer callbacks
    /// (seen by `hook`): after that CUPTI gives it every buffer, ours with
    /// unflushed records included. Everything recorded so far is flushed to
    /// gpuperf first, and the trace says from when the GPU side stops.
    fn before_another_client_registers(&self) {
        if self.disabled.load(Relaxed) || !self.yield_buffers() {
            return;
        }
        let n = self.launches_at_yield.load(Relaxed);
        self.say(format!(
            "GPU activity recorded until {:.3} s into the run, after {n} launches, copies and \
             memsets: another CUPTI client (e.g. torch.profiler) registered its own activity \
             buffers, and CUPTI gives it every later record",
            self.run_seconds()
        ));
    }

    /// Hands CUPTI's buffers and kinds over to another client: what CUPTI
    /// holds of gpuperf's is flushed first (and, on later calls, the calls
    /// recorded since). Returns whether this was the first hand-over.
    fn yield_buffers(&self) -> bool {
        let first = !self.yielding.swap(true, Relaxed);
        self.flush_final();
        if first {
            let n = self.stats.launches.load(Relaxed);
            self.launches_at_yield.store(n, Relaxed);
        }
        self.yielded.store(true, Relaxed);
        self.takeover_noted.store(true, Relaxed);
        first
    }

    /// A NOTE in the trace, and the same line in the log.
    fn say(&self, text: String) {
        self.log.line(&text);
        lock(&self.sink).note(text);
    }

    /// Another client's `cuptiSubscribe` was refused because gpuperf holds the
    /// one subscription CUPTI allows: that client (torch.profiler's Kineto
    /// gives up its CUDA activities then) records no GPU work. Said once.
    fn another_client_refused(&self) {
        if self.refusal_noted.swap(true, Relaxed) {
            return;
        }
        self.say(format!(
            "another CUPTI client (e.g. torch.profiler) asked for CUPTI {:.3} s into the run and \
             was refused: CUPTI allows one subscriber and gpuperf holds it, so that client's own \
             trace has no CUDA activity (profile without `gpuperf record` for it)",
            self.run_seconds()
        ));
    }

    /// Another client is about to call `cuptiFinalize`, which ends every
    /// client's recording: what CUPTI holds of ours is flushed first, and the
    /// trace says from when API calls stop too.
    fn before_another_client_finalizes(&self) {
        if self.disabled.load(Relaxed) || self.finalized.swap(true, Relaxed) {
            return;
        }
        // Also writes the calls made since the buffers were yielded.
        self.yield_buffers();
        self.say(format!(
            "API calls and GPU activity recorded until {:.3} s into the run, after {} launches, \
             copies and memsets: another CUPTI client (e.g. torch.profiler) called \
             cuptiFinalize, which ends every client's recording",
            self.run_seconds(),
            self.stats.launches.load(Relaxed)
        ));
    }
}

/// `cuptiActivityRegisterCallbacks` as another client's code calls it (its
/// GOT slot points here; see `hook`).
unsafe extern "C" fn another_client_registers(
    requested: sys::BufferRequested,
    completed: sys::BufferCompleted,
) -> sys::Status {
    let Some(s) = STATE.get() else {
        return UNKNOWN;
    };
    // Never unwinds into the caller: a panic is logged by the hook and the
    // call still goes to CUPTI.
    let _ = catch_unwind(AssertUnwindSafe(|| s.before_another_client_registers()));
    s.cupti.register_buffers_for_another(requested, completed)
}

/// `cuptiSubscribe` as another client's code calls it; see above.
unsafe extern "C" fn another_client_subscribes(
    handle: *mut *mut c_void,
    callback: sys::ApiCallback,
    userdata: *mut c_void,
) -> sys::Status {
    let Some(s) = STATE.get() else {
        return UNKNOWN;
    };
    // SAFETY: the other client's arguments, passed on as it gave them.
    let status = unsafe { s.cupti.subscribe_for_another(handle, callback, userdata) };
    if status == sys::MULTIPLE_SUBSCRIBERS {
        let _ = catch_unwind(AssertUnwindSafe(|| s.another_client_refused()));
    }
    status
}

/// `cuptiFinalize` as another client's code calls it; see above.
unsafe extern "C" fn another_client_finalizes() -> sys::Status {
    let Some(s) = STATE.get() else {
        return UNKNOWN;
    };
    let _ = catch_unwind(AssertUnwindSafe(|| s.before_another_client_finalizes()));
    s.cupti.finalize_for_another()
}

/// `CUPTI_ERROR_UNKNOWN`, for a call that cannot reach CUPTI.
const UNKNOWN: sys::Status = 999;

/// Points other code's calls of the CUPTI functions through which another
/// client takes CUPTI at gpuperf's wrappers; again when libraries were loaded
/// since the last look.
pub(super) fn watch_other_clients(s: &State) {
    static LOADS: AtomicU64 = AtomicU64::new(u64::MAX);
    let loads = hook::loads();
    if LOADS.swap(loads, Relaxed) == loads || s.finalized.load(Relaxed) {
        return;
    }
    let [subscribe, register, finalize] = s.cupti.takeover_entry_points();
    let hooks = [
        hook::Hook {
            name: c"cuptiSubscribe",
            real: subscribe,
            wrapper: another_client_subscribes as *const () as usize,
        },
        hook::Hook {
            name: c"cuptiActivityRegisterCallbacks",
            real: register,
            wrapper: another_client_registers as *const () as usize,
        },
        hook::Hook {
            name: c"cuptiFinalize",
            real: finalize,
            wrapper: another_client_finalizes as *const () as usize,
        },
    ];
    let cupti_base = hook::base_of(register).unwrap_or(0);
    let own_base = hook::base_of(watch_other_clients as *const () as usize).unwrap_or(0);
    let soname = s
        .cupti
        .path()
        .file_name()
        .map_or(&[][..], |n| n.as_encoded_bytes());
    let found = hook::install(&hooks, cupti_base, own_base, soname);
    if found.slots > 0 || found.foreign > 0 {
        s.log.line(&format!(
            "watching {} call sites of cuptiSubscribe, cuptiActivityRegisterCallbacks and \
             cuptiFinalize in other code ({} bound to another libcupti, not watched)",
            found.slots, found.foreign
        ));
    }
}
