//! Buffering: moving what the callbacks left in the thread shards and what
//! CUPTI hands over in its activity buffers into the sink, and the flushes
//! that do it.

use std::cell::Cell;
use std::ffi::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::time::Duration;

use gpuperf_merge::model::{
    Activity, ActivityKind, ApiCall, ApiDomain, Device, DropSource, Dropped, MemcpyKind, NvtxKind,
    NvtxRange, Overhead, PcSample, ProcessPcLaunches, Record, ThreadName, api_base_name,
};

use crate::buffers::{self, BUFFER_SIZE, Origin};
use crate::capture;
use crate::decode::{self, Decoded, Place};
use crate::guard::{Inside, NoCancel};
use crate::shard::{Item, RawApi};
use crate::stacks::Stacks;
use crate::sys;

use super::deferred::{self, Deferred, Waiting};
use super::sink::Sink;
use super::{
    CLOCK_SLACK_NS, DRIVER, FLUSH_FORCED, Flush, LAST_CONTEXT_WAIT, OVERHEAD3_VERSION, RUNTIME,
    STATE, STUCK_IN_CUPTI_NS, State, c_text, domain_index, lock,
};
use crate::clock::monotonic_ns;

thread_local! {
    /// Set on a thread while it makes a flush inside a callback: the buffers
    /// CUPTI hands back to it then wait for the flush thread.
    static IN_CALLBACK: Cell<bool> = const { Cell::new(false) };
    /// Set on a thread while its CUPTI call is marked in `in_cupti_since`.
    static MARKED: Cell<bool> = const { Cell::new(false) };
}

/// Marks the calling thread as flushing inside a callback while it lives.
struct InCallback;

impl InCallback {
    fn enter() -> Self {
        let _ = IN_CALLBACK.try_with(|c| c.set(true));
        Self
    }
}

impl Drop for InCallback {
    fn drop(&mut self) {
        let _ = IN_CALLBACK.try_with(|c| c.set(false));
    }
}

impl State {
    /// nvtx hook: writes the NVTX ranges that ended since the last flush
    /// (with `close_ns`, the ones still open too, ended then).
    pub(super) fn write_nvtx(&self, close_ns: Option<u64>) {
        let ranges = crate::nvtx::take_ended(close_ns);
        if ranges.is_empty() {
            return;
        }
        let mut sink = lock(&self.sink);
        if sink.closed {
            return;
        }
        for r in ranges {
            let name = sink.strings.intern(&r.name);
            let domain = r.domain.map(|d| sink.strings.intern(d));
            let rec = Record::Nvtx(NvtxRange {
                pid: self.pid,
                tid: r.tid,
                start_ns: r.start_ns,
                end_ns: r.end_ns,
                name,
                domain,
                kind: if r.start_end {
                    NvtxKind::StartEnd
                } else {
                    NvtxKind::PushPop
                },
                unclosed: r.unclosed,
            });
            sink.write(&rec);
        }
    }

    /// Moves every thread's pending API records and aliases into the sink.
    fn drain_shards(&self) {
        let mut api = Vec::new();
        let mut aliases = Vec::new();
        let mut names = Vec::new();
        // The shards of exited threads give their last items (their names
        // among them) here, and become spare.
        let dropped = self.shards.drain(|it| match *it {
            Item::Api(a) => api.push(a),
            Item::Alias(nested, outer) => aliases.push((nested, outer)),
            Item::Thread(tid, name) => names.push((tid, name)),
        });
        self.write_thread_names(&names);
        // stacks hook: modules, stacks and graph nodes before the API records
        // that name them. The API records were taken first: each one's stack
        // was published before its call returned, so it is written here.
        self.write_stacks(&mut lock(&self.sink), false);
        // autograd hook: the checks turned the reading off.
        if let Some(note) = self.autograd.as_ref().and_then(|a| a.take_off_note()) {
            self.log.line(&note);
            lock(&self.sink).note(note);
        }
        self.write_nvtx(None);
        if api.is_empty() && aliases.is_empty() && dropped == 0 {
            return;
        }
        let mut sink = lock(&self.sink);
        if sink.closed {
            // A flush that raced with the exit path: too late to write.
            let n = api.len() as u64 + dropped;
            self.stats.after_close.fetch_add(n, Relaxed);
            return;
        }
        for (nested, outer) in aliases {
            sink.add_alias(nested, outer);
        }
        let mut launches = 0;
        for a in &api {
            let rec = self.api_record(&mut sink, a);
            sink.write_api(&rec, a.stack);
            if a.autograd.kind != 0 {
                sink.write(&crate::autograd::record(
                    self.pid,
                    a.correlation_id,
                    a.autograd,
                ));
            }
            let domain = if a.driver { DRIVER } else { RUNTIME };
            // Copies and memsets too: a program whose later work is only
            // those must not hide that another client took over.
            launches += u64::from(self.class(domain, a.cbid).fires_marker());
        }
        self.stats.api.fetch_add(api.len() as u64, Relaxed);
        self.stats.launches.fetch_add(launches, Relaxed);
        if dropped > 0 {
            let pid = self.pid;
            sink.write(&Record::Dropped(Dropped {
                pid,
                source: DropSource::Writer,
                count: dropped,
            }));
        }
    }

    /// stacks hook: writes the modules, stacks and graph nodes made since the
    /// last call; `last` for the exit path's write just before `CLOSED` (see
    /// [`Stacks::take_records`]). Nothing once the trace is closed.
    pub(super) fn write_stacks(&self, sink: &mut Sink, last: bool) {
        let Some(st) = &self.stacks else { return };
        if sink.closed {
            return;
        }
        let names = |d: u32, c: u32| {
            self.names[domain_index(d)]
                .get(c as usize)
                .map(|n| api_base_name(n).to_owned())
        };
        let taken = st.take_records(self.pid, &mut sink.strings, last);
        for r in taken.records {
            if let Record::Note(n) = &r {
                self.log.line(&n.text);
            }
            sink.write(&r);
        }
        for n in taken.nodes {
            let r = Stacks::node_record(self.pid, n, &mut sink.strings, &names);
            sink.write(&r);
        }
    }

    /// Writes each thread's name when it is new or changed (a rename).
    fn write_thread_names(&self, names: &[(u32, [u8; 16])]) {
        if names.is_empty() {
            return;
        }
        let mut sink = lock(&self.sink);
        for &(tid, raw) in names {
            let len = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
            if len == 0 || sink.thread_names.get(&tid) == Some(&raw) {
                continue;
            }
            sink.thread_names.insert(tid, raw);
            let name = String::from_utf8_lossy(&raw[..len]).into_owned();
            let pid = self.pid;
            sink.write(&Record::Thread(ThreadName { pid, tid, name }));
        }
    }

    /// The names of the threads still running, read from `/proc` by the exit
    /// path: a thread may have renamed itself since its first recorded call.
    pub(super) fn refresh_thread_names(&self) {
        let mut names = Vec::new();
        for tid in self.shards.tids() {
            if let Ok(text) = std::fs::read(format!("/proc/self/task/{tid}/comm")) {
                let text = text.strip_suffix(b"\n").unwrap_or(&text);
                let mut raw = [0u8; 16];
                let n = text.len().min(15);
                raw[..n].copy_from_slice(&text[..n]);
                names.push((tid, raw));
            }
        }
        self.write_thread_names(&names);
    }

    fn api_record(&self, sink: &mut Sink, a: &RawApi) -> Record {
        let d = usize::from(a.driver);
        let i = a.cbid as usize;
        if sink.api_names[d].len() <= i {
            sink.api_names[d].resize(i + 1, None);
        }
        let name = match sink.api_names[d][i] {
            Some(id) => id,
            None => {
                let full = self.names[d].get(i).map_or("unknown", String::as_str);
                let id = sink.strings.intern(api_base_name(full));
                sink.api_names[d][i] = Some(id);
                id
            }
        };
        Record::Api(ApiCall {
            pid: self.pid,
            tid: a.tid,
            start_ns: a.start_ns,
            end_ns: a.end_ns,
            correlation_id: a.correlation_id,
            cbid: a.cbid,
            domain: if a.driver {
                ApiDomain::Driver
            } else {
                ApiDomain::Runtime
            },
            name,
        })
    }

    /// Decodes one completed buffer into the sink, after the buffers waiting
    /// (delivered before it).
    fn consume(&self, context: *mut c_void, stream: u32, buf: &mut [u8], valid: usize) {
        self.decode_waiting();
        self.drain_shards();
        self.decode_buffer(buf, valid, None);
        // Never under the sink lock: this call takes CUPTI's internal lock, which
        // CUPTI holds while its own thread delivers a buffer that waits for the
        // sink (the ABBA deadlock Kineto fixed in its PR #1347).
        // SAFETY: `context` is the one CUPTI passed with this buffer.
        let dropped = unsafe { self.cupti.dropped_records(context, stream) } as u64;
        self.note_dropped(dropped);
    }

    /// Queues a buffer that CUPTI handed back on the application's thread,
    /// inside a flush made in a callback, for the flush thread to decode (see
    /// [`super::deferred`]); false when it must be decoded now: the exit path
    /// runs, the queue is full, or its names do not fit.
    ///
    /// # Safety
    /// `buf` is a buffer of `size` bytes from `buffer_requested` that CUPTI
    /// hands back now, with `context` and `stream`. Returns, for a buffer to
    /// decode now, the records CUPTI dropped when they were read already.
    unsafe fn defer(
        &self,
        context: *mut c_void,
        stream: u32,
        buf: *mut u8,
        size: usize,
        valid: usize,
    ) -> Result<(), Option<u64>> {
        if self.closing.load(Relaxed) {
            // The final flush may have emptied the queue already.
            return Err(None);
        }
        // Read now: the context may be gone when the buffer is decoded.
        // SAFETY: `context` is the one CUPTI passed with this buffer.
        let dropped = unsafe { self.cupti.dropped_records(context, stream) } as u64;
        let mut q = lock(&self.deferred);
        q.start_buffer();
        let kept =
            q.usable() && q.len() < deferred::SLOTS && {
                // SAFETY: as this function's contract.
                let slice = unsafe { std::slice::from_raw_parts_mut(buf, size) };
                self.cupti.records(slice, valid).all(|rec| match decode::decode(rec) {
                // SAFETY: the names point into CUPTI's memory, valid while the
                // buffer callback runs, which is now.
                Some(Decoded::Kernel { name, .. } | Decoded::Device { name, .. }) => unsafe {
                    q.keep_name(name)
                },
                _ => true,
            })
            };
        if kept
            && q.push(Waiting {
                buf,
                size,
                valid,
                dropped,
            })
        {
            self.stats.deferred.fetch_add(1, Relaxed);
            return Ok(());
        }
        Err(Some(dropped))
    }

    /// Decodes the buffers waiting (see [`State::defer`]), in the order they
    /// came, and lets them go.
    fn decode_waiting(&self) {
        let mut q = lock(&self.deferred);
        if q.len() == 0 {
            return;
        }
        // Their API records (and aliases) were made before they came.
        self.drain_shards();
        while let Some(w) = q.pop() {
            // SAFETY: a buffer queued by `defer`, now ours; CUPTI is done
            // with it.
            let slice = unsafe { std::slice::from_raw_parts_mut(w.buf, w.size) };
            self.decode_buffer(slice, w.valid, Some(&q));
            self.note_dropped(w.dropped);
            self.release(w.buf, w.size);
        }
        q.forget_names();
    }

    /// Gives a decoded buffer back to the pool.
    fn release(&self, buf: *mut u8, size: usize) {
        if size == BUFFER_SIZE {
            // SAFETY: a buffer of this size came from `buffer_requested`, and
            // CUPTI is done with it.
            unsafe { self.pool.release(buf) };
        }
    }

    /// Decodes the records of one buffer into the sink; `names`, for a buffer
    /// that waited, holds the copies of its names.
    fn decode_buffer(&self, buf: &mut [u8], valid: usize, names: Option<&Deferred>) {
        self.stats.buffers.fetch_add(1, Relaxed);
        let mut sink = lock(&self.sink);
        let (mut n, mut incomplete, mut foreign, mut timed) = (0u64, 0u64, 0u64, 0u64);
        // Our timestamp callback makes every GPU time CLOCK_MONOTONIC; a time
        // outside this window comes from a clock another CUPTI client registered.
        let ours = self.started_ns.saturating_sub(CLOCK_SLACK_NS)..=monotonic_ns() + CLOCK_SLACK_NS;
        let shift = self.clock_shift.load(Relaxed);
        let mut records = self.cupti.records(buf, valid);
        for rec in records.by_ref() {
            n += 1;
            let decoded = decode::decode(rec).map(|mut d| {
                if shift != 0 {
                    d.shift(shift);
                }
                if let Some(q) = names {
                    d = renamed(d, q);
                }
                d
            });
            match decoded {
                Some(d) if d.incomplete() => incomplete += 1,
                Some(d)
                    if d.span()
                        .is_some_and(|(s, e)| !ours.contains(&s) || !ours.contains(&e)) =>
                {
                    foreign += 1
                }
                Some(d) => {
                    timed += u64::from(d.span().is_some());
                    self.write_decoded(&mut sink, d)
                }
                None => {
                    self.stats.short_records.fetch_add(1, Relaxed);
                }
            }
        }
        if timed > 0 {
            let launches = self.stats.launches.load(Relaxed);
            self.stats.launches_at_last_record.store(launches, Relaxed);
        }
        if foreign > 0 {
            self.stats.foreign_clock.fetch_add(foreign, Relaxed);
            self.note_takeover(&mut sink);
        }
        if let Some(e) = records.error() {
            // The records after the one CUPTI could not walk past are lost.
            let k = self.stats.walk_errors.fetch_add(1, Relaxed);
            let msg = format!("{}: {} after {n} records", e.call, e.message);
            if k < 10 {
                self.log
                    .line(&format!("{msg}; the rest of that buffer is lost"));
            }
            lock(&self.first_walk_error).get_or_insert(msg);
        }
        self.stats.activities.fetch_add(n, Relaxed);
        if incomplete > 0 {
            self.stats.incomplete.fetch_add(incomplete, Relaxed);
            let pid = self.pid;
            sink.write(&Record::Dropped(Dropped {
                pid,
                source: DropSource::Incomplete,
                count: incomplete,
            }));
        }
    }

    /// Counts and writes the records CUPTI dropped, as it said with a buffer.
    fn note_dropped(&self, dropped: u64) {
        if dropped > 0 {
            // Records CUPTI dropped explain launches without GPU records.
            let launches = self.stats.launches.load(Relaxed);
            self.stats.launches_at_last_record.store(launches, Relaxed);
            self.stats.cupti_dropped.fetch_add(dropped, Relaxed);
            let pid = self.pid;
            lock(&self.sink).write(&Record::Dropped(Dropped {
                pid,
                source: DropSource::CuptiActivity,
                count: dropped,
            }));
        }
    }

    fn write_decoded(&self, sink: &mut Sink, d: Decoded) {
        // capture hook: the work of calls outside the window is not written.
        if let Some(id) = d.correlation_id()
            && !capture::keeps(sink.resolve(id).unwrap_or(id))
        {
            return;
        }
        let pid = self.pid;
        let activity = |sink: &mut Sink, mut place: Place, kind: ActivityKind| {
            if let Some(outer) = sink.resolve(place.correlation_id) {
                self.stats.aliased.fetch_add(1, Relaxed);
                place.correlation_id = outer;
            }
            if place.device == u32::MAX
                && let Some(&dev) = sink.context_device.get(&place.context)
            {
                place.device = dev;
            }
            Record::Activity(Activity {
                pid,
                start_ns: place.start_ns,
                end_ns: place.end_ns,
                correlation_id: place.correlation_id,
                // CUPTI's all-ones device and stream, and 0 graph ids, mean none.
                device: (place.device != u32::MAX).then_some(place.device),
                context: place.context,
                stream: (place.stream != u32::MAX).then_some(place.stream),
                graph_id: (place.graph_id != 0).then_some(place.graph_id),
                graph_node_id: (place.graph_node_id != 0).then_some(place.graph_node_id),
                kind,
            })
        };
        let rec = match d {
            Decoded::Kernel {
                place,
                grid,
                block,
                name,
            } => {
                // SAFETY: the name points into CUPTI's record storage, valid while
                // the buffer callback runs, which is now.
                let name = unsafe { sink.kernel_name(name) };
                sink.context_device
                    .entry(place.context)
                    .or_insert(place.device);
                activity(sink, place, ActivityKind::Kernel { name, grid, block })
            }
            Decoded::Memcpy {
                place,
                copy_kind,
                bytes,
                peer,
            } => activity(
                sink,
                place,
                ActivityKind::Memcpy {
                    kind: MemcpyKind::from_u8(copy_kind),
                    bytes,
                    peer,
                },
            ),
            Decoded::Memset {
                place,
                value,
                bytes,
            } => activity(sink, place, ActivityKind::Memset { bytes, value }),
            Decoded::Sync { place, sync_type } => activity(
                sink,
                place,
                ActivityKind::Sync {
                    sync_type: u8::try_from(sync_type).unwrap_or(u8::MAX),
                    // CUPTI names the event by its handle, not by the stream or
                    // the call that recorded it.
                    wait: None,
                },
            ),
            Decoded::Overhead {
                kind,
                correlation_id,
                start_ns,
                end_ns,
            } => {
                let kind = sink.strings.intern(decode::overhead_name(kind));
                let correlation_id = if self.version >= OVERHEAD3_VERSION {
                    sink.resolve(correlation_id).unwrap_or(correlation_id)
                } else {
                    0
                };
                Record::Overhead(Overhead {
                    pid,
                    kind,
                    correlation_id: (correlation_id != 0).then_some(correlation_id),
                    start_ns,
                    end_ns,
                })
            }
            Decoded::Device { id, cc, name } => {
                // SAFETY: as for kernel names.
                let name = unsafe { c_text(name) }.unwrap_or_default();
                Record::Device(Device {
                    pid,
                    id,
                    name,
                    compute_capability: (
                        u16::try_from(cc.0).unwrap_or(u16::MAX),
                        u16::try_from(cc.1).unwrap_or(u16::MAX),
                    ),
                })
            }
            Decoded::Context { context, device } => {
                sink.context_device.insert(context, device);
                return;
            }
            Decoded::Other { .. } => {
                self.stats.unknown_kinds.fetch_add(1, Relaxed);
                return;
            }
        };
        sink.write(&rec);
    }

    /// Flushes CUPTI's buffers and the thread shards to the file (the exit
    /// path's flush is [`Self::flush_final`]).
    pub(super) fn flush(&self, how: Flush) {
        if self.disabled.load(Relaxed) {
            return;
        }
        // Writes files: cancellation points, reached from callbacks too.
        let _no_cancel = NoCancel::new();
        let _g = match how {
            // A callback may run under CUPTI's internal lock, which a flush in
            // progress on another thread waits for inside cuptiActivityFlushAll:
            // waiting for that flush here would deadlock. It is skipped instead;
            // the flush in progress hands over what is complete.
            Flush::InCallback => {
                match self.poll_flush_lock(Duration::ZERO, Duration::ZERO, || true) {
                    Some(g) => g,
                    None => {
                        self.stats.skipped_flushes.fetch_add(1, Relaxed);
                        return;
                    }
                }
            }
            Flush::LastContext => match self.flush_lock_for_last_context() {
                Some(g) => g,
                None => {
                    self.stats.skipped_flushes.fetch_add(1, Relaxed);
                    self.stats.skipped_last_context.fetch_add(1, Relaxed);
                    return;
                }
            },
            Flush::Periodic | Flush::Woken => lock(&self.flush_lock),
        };
        let flag = match how {
            Flush::LastContext => FLUSH_FORCED,
            Flush::Periodic | Flush::InCallback | Flush::Woken => 0,
        };
        // Inside a callback on the application's thread, where nothing may be
        // allocated infallibly, the flush only makes CUPTI hand its buffers
        // back while the context lives; they wait for the flush thread. So
        // does the last context's, forced: the buffers are gpuperf's, and
        // their names are copied as they come back.
        let in_callback =
            matches!(how, Flush::InCallback | Flush::LastContext).then(InCallback::enter);
        if how == Flush::Woken || !self.cupti_holds_ours() {
            // No CUPTI call, or nothing of ours to flush.
        } else if in_callback.is_some() {
            // The error is kept, not made: its message would be allocated.
            match self.in_cupti(|| self.cupti.flush_all_status(flag)) {
                sys::SUCCESS if how == Flush::LastContext => self.torn_down.store(true, Relaxed),
                sys::SUCCESS => {}
                status => {
                    self.stats.callback_flush_errors.fetch_add(1, Relaxed);
                    self.stats.callback_flush_status.store(status, Relaxed);
                }
            }
        } else if let Err(e) = self.in_cupti(|| self.cupti.flush_all(flag)) {
            self.log.line(&e.to_string());
        }
        if in_callback.is_some() {
            self.stop.1.notify_one();
            return;
        }
        self.decode_waiting();
        if how != Flush::Woken {
            self.write_pc_samples(false);
        }
        self.drain_shards();
        if how == Flush::Periodic {
            // Once an interval: each thread's spare chunks follow its use.
            self.shards.trim();
        }
        lock(&self.sink).flush();
    }

    /// The exit path's flush, and the one before CUPTI's buffers go to
    /// another client: forced, with the last read of the PC samples.
    /// `false` where it gave up on CUPTI, a call (its own, or a flush in
    /// progress) having been inside for [`STUCK_IN_CUPTI_NS`]: what gpuperf
    /// holds is written, and no CUPTI call of ours follows.
    pub(super) fn flush_final(&self) -> bool {
        if self.disabled.load(Relaxed) {
            return true;
        }
        let _no_cancel = NoCancel::new();
        let Some(_g) = self.flush_lock_at_exit() else {
            return self.write_without_cupti();
        };
        if self.cupti_holds_ours() {
            match self.bounded_in_cupti(|s| s.cupti.flush_all(FLUSH_FORCED)) {
                Some(Ok(())) => {}
                Some(Err(e)) => self.log.line(&e.to_string()),
                None => return self.write_without_cupti(),
            }
        }
        self.decode_waiting();
        self.write_pc_samples(true);
        self.drain_shards();
        lock(&self.sink).flush();
        true
    }

    /// Whether CUPTI's buffers hold records of ours for a flush to return.
    fn cupti_holds_ours(&self) -> bool {
        // Torn down: nothing is left in CUPTI, and no context to flush with.
        // Yielded: what CUPTI holds is another client's; flushing would hand
        // it its buffers early, and after its cuptiFinalize restart CUPTI.
        !self.torn_down.load(Relaxed) && !self.yielded.load(Relaxed)
    }

    /// The exit path's flush without CUPTI, which is stuck: writes what
    /// gpuperf holds. Returns `false`, for [`Self::flush_final`].
    fn write_without_cupti(&self) -> bool {
        self.decode_waiting();
        self.drain_shards();
        lock(&self.sink).flush();
        false
    }

    /// Runs `f`, a flush's CUPTI call, marked as inside CUPTI for the exit
    /// path's wait ([`Self::flush_lock_at_exit`]). Allocates nothing: it
    /// runs inside callbacks too.
    fn in_cupti<R>(&self, f: impl FnOnce() -> R) -> R {
        /// Clears the mark, also when `f` panics.
        struct Out<'a>(&'a AtomicU64);
        impl Drop for Out<'_> {
            fn drop(&mut self) {
                self.0.store(0, Relaxed);
                let _ = MARKED.try_with(|m| m.set(false));
            }
        }
        self.in_cupti_since.store(monotonic_ns().max(1), Relaxed);
        let _ = MARKED.try_with(|m| m.set(true));
        let _out = Out(&self.in_cupti_since);
        f()
    }

    /// Pauses the mark of [`Self::in_cupti`] while the calling thread, inside
    /// the CUPTI call it marked, runs gpuperf's own code (a buffer handed back
    /// inside a flush, decoded and written): that time is not CUPTI's, and a
    /// long decode must not look like a driver that stopped answering. The
    /// mark starts afresh when the callback returns to CUPTI.
    fn ours_inside_cupti(&self) -> impl Drop + '_ {
        /// Marks CUPTI's time again when dropped, where the mark was paused.
        struct Ours<'a>(Option<&'a AtomicU64>);
        impl Drop for Ours<'_> {
            fn drop(&mut self) {
                if let Some(since) = self.0 {
                    since.store(monotonic_ns().max(1), Relaxed);
                }
            }
        }
        let marked = MARKED.try_with(Cell::get) == Ok(true);
        if marked {
            self.in_cupti_since.store(0, Relaxed);
        }
        Ours(marked.then_some(&self.in_cupti_since))
    }

    /// Whether a call marked by [`Self::in_cupti`] has been inside CUPTI for
    /// [`STUCK_IN_CUPTI_NS`].
    fn stuck_in_cupti(&self) -> bool {
        let since = self.in_cupti_since.load(Relaxed);
        since != 0 && monotonic_ns().saturating_sub(since) >= STUCK_IN_CUPTI_NS
    }

    /// Runs `f`, a CUPTI call of the exit path, on a thread of its own, and
    /// waits for it until it has been inside CUPTI for [`STUCK_IN_CUPTI_NS`]:
    /// `None` then (and at once after an earlier call was given up), with
    /// that thread left inside, and no CUPTI call of ours may follow. A
    /// driver that stopped answering keeps a call there for good, and the
    /// program's exit (or the signal ending it) must not wait with it. Where
    /// no thread can be started, `f` runs here, unbounded.
    pub(super) fn bounded_in_cupti<R: Send + 'static>(
        &self,
        f: impl FnOnce(&State) -> R + Send + 'static,
    ) -> Option<R> {
        if self.gave_up_on_cupti.load(Relaxed) {
            return None;
        }
        // The thread may outlive this call: it is given the process's state,
        // which this is.
        let Some(s) = STATE.get().filter(|s| ptr::eq(*s, self)) else {
            return Some(self.in_cupti(|| f(self)));
        };
        let job = Arc::new(Mutex::new(Some(f)));
        let theirs = Arc::clone(&job);
        let (tx, rx) = mpsc::sync_channel(1);
        let spawned = crate::threads::spawn_blocked("gpuperf-close", move || {
            let _inside = Inside::enter();
            // A fault in CUPTI here is the close's, as on the thread closing.
            let _part = crate::interrupt::PartOfClose::enter();
            if let Some(f) = lock(&theirs).take() {
                let _ = tx.send(catch_unwind(AssertUnwindSafe(|| s.in_cupti(|| f(s)))));
            }
        });
        if spawned.is_err() {
            let f = lock(&job).take()?;
            return Some(self.in_cupti(|| f(self)));
        }
        loop {
            match rx.recv_timeout(Duration::from_millis(10)) {
                Ok(Ok(r)) => return Some(r),
                // As it would have here.
                Ok(Err(panic)) => std::panic::resume_unwind(panic),
                Err(RecvTimeoutError::Disconnected) => return None,
                Err(RecvTimeoutError::Timeout) if self.stuck_in_cupti() => {
                    self.gave_up_on_cupti.store(true, Relaxed);
                    return None;
                }
                Err(RecvTimeoutError::Timeout) => {}
            }
        }
    }

    /// The flush lock, polled: taken as soon as it is free, or `None` once
    /// `give_up` says so (asked after each try, so `|| true` is one try).
    /// Pauses double from `pause` up to `max_pause`.
    fn poll_flush_lock(
        &self,
        mut pause: Duration,
        max_pause: Duration,
        mut give_up: impl FnMut() -> bool,
    ) -> Option<MutexGuard<'_, ()>> {
        loop {
            match self.flush_lock.try_lock() {
                Ok(g) => return Some(g),
                Err(TryLockError::Poisoned(e)) => return Some(e.into_inner()),
                Err(TryLockError::WouldBlock) => {}
            }
            if give_up() {
                return None;
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(max_pause);
        }
    }

    /// The flush lock for the exit path's flush: waits for a flush in
    /// progress, but not for one that has been inside one CUPTI call for
    /// [`STUCK_IN_CUPTI_NS`] (`None`, and no CUPTI call of ours may follow).
    /// A flush in gpuperf's own code is waited for to its end.
    fn flush_lock_at_exit(&self) -> Option<MutexGuard<'_, ()>> {
        let g = self.poll_flush_lock(Duration::from_micros(50), Duration::from_millis(10), || {
            self.stuck_in_cupti()
        });
        if g.is_none() {
            self.gave_up_on_cupti.store(true, Relaxed);
        }
        g
    }

    /// The flush lock for the last context's flush, in its destruction's
    /// callback: waits for a flush in progress while it runs gpuperf's own
    /// code (the flush thread decoding the buffers that an earlier flush in a
    /// callback handed back, as a device reset's does just before), for at
    /// most [`LAST_CONTEXT_WAIT`]. `None` once that flush is inside CUPTI,
    /// which may be waiting for the lock this callback runs under.
    fn flush_lock_for_last_context(&self) -> Option<MutexGuard<'_, ()>> {
        let start = monotonic_ns();
        self.poll_flush_lock(Duration::from_micros(20), Duration::from_millis(1), || {
            let waited = Duration::from_nanos(monotonic_ns().saturating_sub(start));
            self.in_cupti_since.load(Relaxed) != 0 || waited >= LAST_CONTEXT_WAIT
        })
    }

    /// pcsampling hook: reads the PC samples CUPTI holds (with `last`,
    /// disabling sampling) and writes them, and the sampler's notes.
    fn write_pc_samples(&self, last: bool) {
        let Some(pc) = &self.pc else {
            return;
        };
        let samples = if !last {
            self.in_cupti(|| pc.take(false))
        } else if let Some(samples) =
            self.bounded_in_cupti(|s| s.pc.as_ref().map(|pc| pc.take(true)).unwrap_or_default())
        {
            samples
        } else {
            let text = format!(
                "the PC samples CUPTI still held are missing: it had been reading them for over \
                 {} s (as in a driver that stopped answering); those read before are kept",
                STUCK_IN_CUPTI_NS / 1_000_000_000
            );
            self.log.line(&text);
            lock(&self.sink).note(text);
            pc.take_read()
        };
        let notes = pc.take_notes(last);
        if last && let Some(line) = pc.reads_line() {
            self.log.line(&line);
        }
        let launches = if last { pc.launches() } else { None };
        let mut sink = lock(&self.sink);
        for n in notes {
            self.log.line(&n);
            sink.note(n);
        }
        if let Some(launches) = launches {
            sink.write(&Record::PcLaunches(ProcessPcLaunches {
                pid: self.pid,
                launches,
            }));
        }
        for s in samples {
            let function = sink.strings.intern(&s.function);
            let stall_reason = sink.strings.intern(&s.reason);
            let source = s.source.map(|(f, l)| (sink.strings.intern(&f), l));
            let correlation_id = sink.resolve(s.correlation_id).unwrap_or(s.correlation_id);
            let rec = Record::PcSample(PcSample {
                pid: self.pid,
                // 0: continuous mode's samples, not one launch's.
                correlation_id: (correlation_id != 0).then_some(correlation_id),
                context: s.context,
                function,
                pc_offset: s.pc_offset,
                cubin_crc: s.cubin_crc,
                stall_reason_index: s.reason_index,
                stall_reason,
                samples: s.samples,
                source,
            });
            sink.write(&rec);
        }
    }
}

/// A record of a buffer that waited, its name read from the copy made when it
/// arrived (CUPTI's may be gone).
fn renamed(d: Decoded, q: &Deferred) -> Decoded {
    match d {
        Decoded::Kernel {
            place,
            grid,
            block,
            name,
        } => Decoded::Kernel {
            place,
            grid,
            block,
            name: q.name(name),
        },
        Decoded::Device { id, cc, name } => Decoded::Device {
            id,
            cc,
            name: q.name(name),
        },
        d => d,
    }
}

pub(super) unsafe extern "C" fn buffer_requested(
    buf: *mut *mut u8,
    size: *mut usize,
    max: *mut usize,
) {
    let _no_cancel = NoCancel::new();
    let _inside = Inside::enter();
    let (p, n) = catch_unwind(|| match STATE.get() {
        Some(s) => s.pool.request(buffers::alloc_buffer),
        None => (buffers::alloc_buffer(), BUFFER_SIZE),
    })
    .unwrap_or((ptr::null_mut(), 0));
    // SAFETY: CUPTI passes valid out-pointers.
    unsafe {
        *buf = p;
        *size = if p.is_null() { 0 } else { n };
        *max = 0;
    }
}

pub(super) unsafe extern "C" fn buffer_completed(
    context: *mut c_void,
    stream: u32,
    buf: *mut u8,
    size: usize,
    valid: usize,
) {
    if buf.is_null() {
        return;
    }
    let _no_cancel = NoCancel::new();
    let _inside = Inside::enter();
    let _ = catch_unwind(AssertUnwindSafe(|| {
        let Some(s) = STATE.get() else { return };
        let _ours = s.ours_inside_cupti();
        let origin = s.pool.origin(buf);
        if origin == Origin::Discard {
            // Shared by requests made while memory was short: never read.
        } else if !s.disabled.load(Relaxed) && IN_CALLBACK.try_with(Cell::get) == Ok(true) {
            // SAFETY: CUPTI returns a buffer from `buffer_requested`, `size`
            // bytes long, with its context and stream.
            match unsafe { s.defer(context, stream, buf, size, valid) } {
                // The flush thread decodes it and gives it back.
                Ok(()) => return,
                Err(dropped) => {
                    // As before the queue: decoded here, counted.
                    s.stats.decoded_in_callback.fetch_add(1, Relaxed);
                    // SAFETY: as above.
                    let slice = unsafe { std::slice::from_raw_parts_mut(buf, size) };
                    match dropped {
                        Some(n) => {
                            s.decode_waiting();
                            s.drain_shards();
                            s.decode_buffer(slice, valid, None);
                            s.note_dropped(n);
                        }
                        None => s.consume(context, stream, slice, valid),
                    }
                }
            }
        } else if !s.disabled.load(Relaxed) {
            // SAFETY: CUPTI returns a buffer from `buffer_requested`, `size` bytes long.
            let slice = unsafe { std::slice::from_raw_parts_mut(buf, size) };
            s.consume(context, stream, slice, valid);
        } else if s.closed.load(Relaxed) && std::process::id() == s.pid {
            // After the final flush: nothing may be written any more, but the
            // loss is still counted.
            // SAFETY: CUPTI returns a buffer from `buffer_requested`, `size` bytes long.
            let slice = unsafe { std::slice::from_raw_parts_mut(buf, size) };
            let n = s.cupti.records(slice, valid).count() as u64;
            s.stats.late.fetch_add(n, Relaxed);
            s.log.line(&format!(
                "{n} activity records arrived after the trace was closed; not written"
            ));
        }
        s.release(buf, size);
    }));
}
