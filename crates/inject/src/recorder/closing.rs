//! The exit path: the final flush, the counters, the `CLOSED` record, and what
//! comes after it (calls at unload, a forked child, a signal).

use std::panic::catch_unwind;
use std::sync::atomic::Ordering::Relaxed;

use gpuperf_merge::gputrace::STACKLESS_NOTE;
use gpuperf_merge::model::{DropSource, Dropped, Record};

use crate::capture;
use crate::guard::Inside;
use crate::shard::Item;

use super::callbacks::MAX_OPEN;
use super::{LAST_CONTEXT_WAIT, MIN_SILENT_LAUNCHES, STATE, State, lock};
use crate::clock::monotonic_ns;

impl State {
    /// The exit path: no new records, one forced flush, counters, and no writes
    /// afterwards.
    fn finish(&self) {
        {
            let (m, cv) = &self.stop;
            *lock(m) = true;
            cv.notify_all();
        }
        // One close: a signal's during `exit` waits here for the other.
        let mut finished = lock(&self.finished);
        if std::mem::replace(&mut *finished, true) || self.disabled.load(Relaxed) {
            return;
        }
        self.refresh_thread_names();
        // Flushed first, then disabled (whether disabling a kind gives up the
        // records of work still running is undocumented): records of work
        // still running come back incomplete and are counted. Records made
        // between the two arrive late, if ever, and are counted then.
        self.closing.store(true, Relaxed);
        // nvtx hook: ranges still open end at the close, marked so.
        self.write_nvtx(Some(monotonic_ns()));
        if let Some(note) = crate::nvtx::problems() {
            self.log.line(&note);
            lock(&self.sink).note(note);
        }
        let abandoned = !self.flush_final();
        // Kinds are process-wide: once another client took CUPTI they are its
        // own, and disabling them would end its recording.
        let kinds: Vec<u32> = lock(&self.kinds).drain(..).collect();
        if !self.yielded.load(Relaxed) && !abandoned && !kinds.is_empty() {
            let disabled = self.bounded_in_cupti(|s| {
                let refused = kinds.into_iter().map(|k| s.cupti.activity_disable(k));
                refused
                    .filter_map(Result::err)
                    .map(|e| e.to_string())
                    .collect::<Vec<String>>()
            });
            let errors = disabled.unwrap_or_else(|| {
                vec![format!(
                    "the activity kinds were left enabled: CUPTI had been disabling them for \
                     over {} s (as in a driver that stopped answering)",
                    super::STUCK_IN_CUPTI_NS / 1_000_000_000
                )]
            });
            for e in errors {
                self.log.line(&e);
            }
        }
        if self.disabled.swap(true, Relaxed) {
            self.stacks_done.store(true, Relaxed);
            return;
        }
        let s = &self.stats;
        let walk_errors = s.walk_errors.load(Relaxed);
        let mut sink = lock(&self.sink);
        // The stack table's last write, after the last API records were
        // written (the last drain ran; a later one finds the trace closed,
        // which is set under this lock): calls that entered while the exit
        // path ran and were written have their stacks.
        self.write_stacks(&mut sink, true);
        self.stacks_done.store(true, Relaxed);
        // With our buffers and kinds in place, the forced flush returns a record
        // for every launch, complete or not. Launches without any mean another
        // client took the buffer callbacks or disabled the kinds.
        let (launches, seen) = (
            s.launches.load(Relaxed),
            s.launches_at_last_record.load(Relaxed),
        );
        if abandoned {
            let which = match seen {
                0 => format!("none of the {launches} launches, copies and memsets has one"),
                _ => format!(
                    "the last written came when {seen} of the {launches} launches, copies and \
                     memsets had been made"
                ),
            };
            let text = format!(
                "the exit path stopped waiting for CUPTI: a flush had been inside it for over {} \
                 s (as in a driver that stopped answering), so the GPU records CUPTI still held \
                 are missing; {which}",
                super::STUCK_IN_CUPTI_NS / 1_000_000_000
            );
            self.log.line(&text);
            sink.note(text);
        } else if self.yielded.load(Relaxed) {
            let after = launches.saturating_sub(self.launches_at_yield.load(Relaxed));
            if after > 0 {
                sink.note(format!(
                    "{after} launches, copies and memsets after that have no GPU record here: \
                     CUPTI gave their records to the other client"
                ));
            }
        } else if launches >= seen + MIN_SILENT_LAUNCHES {
            self.note_takeover(&mut sink);
        }
        let foreign = s.foreign_clock.load(Relaxed);
        if foreign > 0 {
            self.log.line(&format!(
                "{foreign} activity records not on CLOCK_MONOTONIC (another CUPTI client \
                 changed the clock); not written"
            ));
        }
        let lost = self.pool.lost.load(Relaxed);
        if lost > 0 {
            sink.note(format!(
                "{lost} activity buffers were lost for lack of memory; their records are missing"
            ));
        }
        if let Some(short) = self.stacks_short() {
            sink.note(short);
        }
        if let Some(over) = self.stacks.as_ref().and_then(|st| st.nodes_over_limits()) {
            self.log.line(&over);
            sink.note(over);
        }
        let (no_room, why) = self.no_room();
        if no_room > 0 {
            sink.note(format!(
                "{no_room} CUDA calls were not recorded for lack of memory ({why}): their GPU \
                 work has no CPU call or stack"
            ));
        }
        if walk_errors > 0 {
            let first = lock(&self.first_walk_error).clone().unwrap_or_default();
            sink.note(format!(
                "{walk_errors} activity buffers were cut short by CUPTI (first: {first}); \
                 the records after the error are lost"
            ));
        }
        if sink.write_errors > 0 {
            let pid = self.pid;
            let count = sink.write_errors;
            let msg = sink.first_error.clone().unwrap_or_default();
            // The file may be unwritable; the log still tells.
            sink.write(&Record::Dropped(Dropped {
                pid,
                source: DropSource::Writer,
                count,
            }));
            self.log.line(&format!(
                "{count} records not written to `{}`: {msg}",
                self.config.trace.display()
            ));
        }
        let skipped = s.skipped_last_context.load(Relaxed);
        if skipped > 0 {
            let text = format!(
                "the last context's forced flush, at its destruction, was skipped {skipped} \
                 times: another flush was inside CUPTI, or ran past {} ms; records of that \
                 context that CUPTI had not handed back came only from the flush at exit, \
                 made without a context, if at all",
                LAST_CONTEXT_WAIT.as_millis()
            );
            self.log.line(&text);
            sink.note(text);
        }
        let refused = s.callback_flush_errors.load(Relaxed);
        if refused > 0 {
            let status = s.callback_flush_status.load(Relaxed);
            let why = self
                .cupti
                .error("cuptiActivityFlushAll", status)
                .err()
                .map_or_else(|| format!("status {status}"), |e| e.to_string());
            let text = format!(
                "{refused} flushes inside CUDA callbacks (a context destroyed, a device reset) \
                 refused by CUPTI, the last: {why}; records of those contexts that CUPTI had \
                 not handed back may be missing"
            );
            self.log.line(&text);
            sink.note(text);
        }
        if sink.aliases_lost > 0 {
            let text = format!(
                "{} nested driver calls were not linked to their runtime call for lack of \
                 memory: their GPU work may be left without a CPU stack",
                sink.aliases_lost
            );
            self.log.line(&text);
            sink.note(text);
        }
        // The reason a launch has no stack is the recorder's to give: the
        // merge's summary points at this note.
        let stackless = s.stackless.load(Relaxed);
        if stackless > 0
            && let Some(st) = &self.stacks
        {
            let paused = match s.stacks_paused.load(Relaxed) {
                0 => String::new(),
                n => format!(
                    "{n} of them made while a benchmark had stacks off \
                     (gpuperf_bench_stacks_off); "
                ),
            };
            sink.note(format!(
                "{stackless} {STACKLESS_NOTE}; {paused}{}",
                st.summary()
            ));
        }
        if let Some(note) = capture::summary(&self.config.window, self.started_ns) {
            self.log.line(&note);
            sink.note(note);
        }
        // The recording is complete: a file without this was cut short.
        if let Some(w) = sink.writer.as_mut()
            && let Err(e) = w.write_closed(monotonic_ns())
        {
            sink.write_errors += 1;
            sink.first_error.get_or_insert_with(|| e.to_string());
        }
        sink.closed = true;
        sink.flush();
        self.log_summary(walk_errors, lost);
        self.closed.store(true, Relaxed);
    }

    /// The exit path's last log lines: every counter, and the stacks' and
    /// autograd's summaries.
    fn log_summary(&self, walk_errors: u64, lost: u64) {
        let s = &self.stats;
        let (no_room, why) = self.no_room();
        let why = if no_room > 0 {
            format!(" ({why})")
        } else {
            String::new()
        };
        self.log.line(&format!(
            "done: {} API records, {} activity records in {} buffers, {} dropped by CUPTI, \
             {} nested driver calls ({} activities charged to the enclosing runtime call), \
             {} records of other kinds, {} too short, {} incomplete (not written), \
             {walk_errors} buffers cut short, {} flushes skipped in callbacks, \
             {} buffers from flushes in callbacks decoded by the flush thread ({} in the \
             callback: the queue full, or the exit path running), \
             {} buffers from the reserve, {lost} lost for lack of memory, \
             {} API calls not recorded because they re-entered gpuperf (a signal \
             handler's CUDA calls), {} calls not recorded (more than {MAX_OPEN} open on a thread), \
             {no_room} calls not recorded for lack of memory{why}, \
             {} calls recorded after their thread's state was destroyed (exit, thread-specific \
             data destructors)",
            s.api.load(Relaxed),
            s.activities.load(Relaxed),
            s.buffers.load(Relaxed),
            s.cupti_dropped.load(Relaxed),
            s.nested.load(Relaxed),
            s.aliased.load(Relaxed),
            s.unknown_kinds.load(Relaxed),
            s.short_records.load(Relaxed),
            s.incomplete.load(Relaxed),
            s.skipped_flushes.load(Relaxed),
            s.deferred.load(Relaxed),
            s.decoded_in_callback.load(Relaxed),
            self.pool.reserve_used.load(Relaxed),
            s.reentered.load(Relaxed),
            s.too_deep.load(Relaxed),
            s.stateless.load(Relaxed),
        ));
        let shards = self.shards.counts();
        self.log.line(&format!(
            "{} thread shards allocated, {} reused from threads that exited, {} freed",
            shards.made, shards.reused, shards.freed
        ));
        let name = |d: usize, cbid: u32| {
            self.names[d]
                .get(cbid as usize)
                .filter(|n| !n.is_empty())
                .cloned()
                .unwrap_or_else(|| format!("callback {cbid}"))
        };
        self.log.line(&self.tally.summary(8, &name));
        if let Some(st) = &self.stacks {
            self.log.line(&st.summary());
        }
        if let Some(short) = self.stacks_short() {
            self.log.line(&short);
        }
        if let Some(a) = &self.autograd {
            self.log.line(&a.summary());
        }
    }

    /// What the stacks went without for lack of memory on the application's
    /// threads, in a sentence (`None` for nothing).
    fn stacks_short(&self) -> Option<String> {
        let n = self.stacks.as_ref()?.no_memory();
        let parts = [
            (
                n.module_tables,
                "tables of modules loaded since the last (a dlopen) not built: their \
                 frames ended stacks until a later capture built one",
            ),
            (
                n.nodes_not_kept,
                "graph nodes not remembered: their copies have no stack",
            ),
            (
                n.nodes_not_written,
                "graph node records not kept: those nodes have no stack",
            ),
        ];
        crate::log::counted("stacks short of memory", "; ", &parts)
    }

    /// The calls not recorded for lack of memory, and what could not be
    /// allocated for them (empty for none).
    fn no_room(&self) -> (u64, String) {
        let s = &self.stats;
        let parts = [
            (s.no_room.load(Relaxed), "their thread's list of open calls"),
            (s.no_shard.load(Relaxed), "their thread's shard of records"),
            (
                s.no_stateless_room.load(Relaxed),
                "an entry for their thread, whose state was destroyed",
            ),
        ];
        let why: Vec<String> = parts
            .iter()
            .filter(|(n, _)| *n > 0)
            .map(|(n, what)| format!("{n}: {what} could not be allocated"))
            .collect();
        (parts.iter().map(|(n, _)| n).sum(), why.join("; "))
    }

    /// Writes, to the log and as a NOTE, how many API calls came after the
    /// trace was closed.
    fn report_after_close(&self) {
        if std::process::id() != self.pid || !self.closed.load(Relaxed) {
            return;
        }
        // The calls made after the final flush are in their threads' shards.
        let mut calls = 0;
        let dropped = self
            .shards
            .drain(|it| calls += u64::from(matches!(it, Item::Api(_))));
        let n = self.stats.after_close.swap(0, Relaxed) + calls + dropped;
        let refused = std::mem::take(&mut lock(&self.sink).refused);
        if refused > 0 {
            self.log.line(&format!(
                "{refused} records came after the trace was closed (a flush racing with the \
                 exit path); not written"
            ));
        }
        if n == 0 {
            return;
        }
        let text = format!(
            "{n} API calls came after the trace was closed (static destructors, atexit \
             handlers registered before CUDA started, or other threads while the program \
             exits); not recorded"
        );
        self.log.line(&text);
        lock(&self.sink).note(text);
    }
}

/// Runs when the library is unloaded, or at exit after every atexit handler
/// and static destructor of the program: reports the API calls that came after
/// the trace was closed. It calls no CUPTI function (libcupti may be gone).
extern "C" fn at_unload() {
    let _inside = Inside::enter();
    let _ = catch_unwind(|| {
        if let Some(s) = STATE.get() {
            s.report_after_close();
        }
    });
}

#[used]
#[unsafe(link_section = ".fini_array")]
static AT_UNLOAD: extern "C" fn() = at_unload;

pub(super) extern "C" fn at_exit() {
    let _inside = Inside::enter();
    crate::interrupt::closing_at_exit(true);
    let _ = catch_unwind(|| {
        if let Some(s) = STATE.get() {
            s.finish();
        }
    });
    crate::interrupt::closing_at_exit(false);
    // A signal is being handled: the program dies of it, not of `exit`, once
    // the trace is closed, as it would have without gpuperf.
    let sig = crate::interrupt::deferred();
    if sig != 0 {
        crate::interrupt::die_of(sig);
    }
}

/// The exit path, run by the closing thread when a signal is about to end the
/// program (see [`crate::interrupt`]).
pub(super) fn close_on_signal(sig: libc::c_int) {
    let _inside = Inside::enter();
    if let Some(s) = STATE.get()
        && std::process::id() == s.pid
    {
        s.log.line(&format!(
            "closing the trace: {} is ending the program",
            crate::interrupt::name(sig)
        ));
        s.finish();
    }
}

pub(super) extern "C" fn in_forked_child() {
    // The child shares the parent's file and CUPTI state; it writes nothing.
    if let Some(s) = STATE.get() {
        s.disabled.store(true, Relaxed);
    }
}
