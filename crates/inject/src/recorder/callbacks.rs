//! The callbacks: CUPTI's API, resource and state callbacks on the
//! application's threads, and the per-thread state of the calls they have open.

use std::cell::RefCell;
use std::ffi::{c_char, c_void};
use std::mem::offset_of;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;

use crate::api::Class;
use crate::capture;
use crate::guard::{Inside, NoCancel};
use crate::shard::{Held, Item, RawApi, Shards, mock_alloc};
use crate::stacks;
use crate::sys::{CUpti_CallbackData, CUpti_StateNotification};

use super::{
    CONTEXT_CREATED, CONTEXT_DESTROY, DRIVER, ENTER, EXIT, FATAL_ERROR, Flush, MODULE_LOADED,
    RESOURCE, RUNTIME, STATE, STATE_DOMAIN, State, c_text, lock,
};
use crate::clock::{gettid, monotonic_ns};

struct Open {
    correlation_id: u32,
    start_ns: u64,
    cbid: u32,
    domain: u32,
    nested: bool,
    /// In-process stack id, 0 for none. (stacks hook)
    stack: u32,
    /// PyTorch autograd ids. (autograd hook)
    autograd: crate::autograd::Tag,
}

/// The calling thread's name, as `prctl(PR_GET_NAME)` gives it (NUL-padded;
/// all zero when it cannot be read). A system call: no allocation, no lock, no
/// cancellation point.
fn thread_name() -> [u8; 16] {
    let mut name = [0u8; 16];
    // SAFETY: PR_GET_NAME writes at most 16 bytes, NUL included, to the buffer.
    unsafe { libc::prctl(libc::PR_GET_NAME, name.as_mut_ptr()) };
    name
}

#[derive(Default)]
pub(super) struct Local {
    /// Claimed at the thread's first recorded call (see [`Local::has_shard`]).
    shard: Option<Held>,
    tid: u32,
    /// Calls entered and not yet exited; its capacity, reserved at the first
    /// callback, is never grown inside a callback.
    open: Vec<Open>,
    runtime_depth: u32,
}

impl Local {
    /// Whether the thread has its shard, claimed now at its first recorded
    /// call. Without one (memory short, no spare) the call is not recorded
    /// but counted in `refused`, and the next call tries again.
    #[inline]
    fn has_shard(&mut self, shards: &Shards, refused: &AtomicU64) -> bool {
        if self.shard.is_none() {
            self.shard = shards.claim(gettid());
            if self.shard.is_none() {
                refused.fetch_add(1, Relaxed);
                return false;
            }
        }
        true
    }

    /// Appends to the thread's shard, which every open recorded call has.
    #[inline]
    fn push(&self, item: Item) {
        if let Some(s) = &self.shard {
            s.push(item);
        }
    }
}

impl Drop for Local {
    /// At thread exit: the thread's name once more, as it may have renamed
    /// itself since its first recorded call. The shard is released after it
    /// (its field dropped after this), so the drain that makes it spare takes
    /// the name.
    fn drop(&mut self) {
        if self.tid != 0 {
            self.push(Item::Thread(self.tid, thread_name()));
        }
    }
}

/// Calls a thread may have open at once (CUDA calls nest one or two deep);
/// deeper ones are not recorded, and counted.
pub(super) const MAX_OPEN: usize = 32;

thread_local! {
    static LOCAL: RefCell<Local> = RefCell::new(Local::default());
}

impl State {
    fn on_api(&self, domain: u32, cbid: u32, data: *const c_void) {
        if domain == RESOURCE {
            // pcsampling hook: contexts and modules, before the flush below.
            if let Some(pc) = self.pc_live()
                && !data.is_null()
            {
                self.pc_resource(pc, cbid, data);
            }
            if cbid == CONTEXT_DESTROY {
                // The context still lives: the last one's destruction is the
                // last chance to flush everything (see `torn_down`).
                let before = self
                    .live_contexts
                    .fetch_update(Relaxed, Relaxed, |n| Some(n.saturating_sub(1)))
                    .unwrap_or(0);
                self.flush(if before == 1 {
                    Flush::LastContext
                } else {
                    Flush::InCallback
                });
            } else if cbid == CONTEXT_CREATED {
                self.live_contexts.fetch_add(1, Relaxed);
                self.torn_down.store(false, Relaxed);
            }
            if cbid == CONTEXT_CREATED && !data.is_null() {
                // SAFETY: for resource callbacks CUPTI passes a
                // `CUpti_ResourceData`, whose first field is the context.
                let context = unsafe { data.cast::<*mut c_void>().read_unaligned() };
                // SAFETY: the context is being created, so it is alive.
                if let Some((id, dev)) = unsafe { self.cupti.context_device(context) } {
                    // Synchronization records name only their context.
                    lock(&self.sink).context_device.insert(id, dev);
                }
            }
            // stacks hook: graph nodes made, cloned and destroyed.
            if let Some(st) = &self.stacks {
                // Only a node made outside a copy takes its origin from the
                // open call.
                let open = || {
                    LOCAL
                        .try_with(|l| {
                            l.borrow()
                                .open
                                .iter()
                                .rev()
                                .find(|o| !o.nested)
                                .map(|o| (o.stack, o.domain, o.cbid))
                        })
                        .ok()
                        .flatten()
                };
                // SAFETY: CUPTI passes a `CUpti_ResourceData` for this domain.
                let wake = unsafe { st.on_resource(cbid, data, &open) };
                if wake {
                    self.stop.1.notify_one();
                }
            }
            return;
        }
        if domain == STATE_DOMAIN {
            if cbid == FATAL_ERROR && !data.is_null() {
                self.on_fatal_error(data);
            }
            return;
        }
        if (domain != RUNTIME && domain != DRIVER) || data.is_null() {
            return;
        }
        let data = data.cast::<u8>();
        // SAFETY: for the runtime and driver domains CUPTI passes a valid
        // `CUpti_CallbackData`; the fields are read unaligned as plain integers.
        let (site, correlation_id) = unsafe {
            (
                data.add(offset_of!(CUpti_CallbackData, callbackSite))
                    .cast::<u32>()
                    .read_unaligned(),
                data.add(offset_of!(CUpti_CallbackData, correlationId))
                    .cast::<u32>()
                    .read_unaligned(),
            )
        };
        let class = self.class(domain, cbid);
        if site == ENTER && class == Class::Reset {
            self.flush(Flush::InCallback);
        }
        if matches!(class, Class::GraphCopy | Class::GraphTeardown) {
            if let Some(st) = &self.stacks {
                let wake = st.graph_call(class == Class::GraphCopy, site == ENTER);
                // The flush thread writes the nodes: writing allocates, which
                // this thread may not do infallibly. It is woken again while it
                // falls behind a burst of copies; past `MAX_PENDING_NODES`
                // waiting, nodes are dropped (counted).
                if wake || (site != ENTER && st.node_backlog()) {
                    self.stop.1.notify_one();
                }
            }
            return;
        }
        // capture hook: outside the window an entry returns here.
        if matches!(class, Class::ProfilerStart | Class::ProfilerStop) {
            if site == ENTER {
                capture::profiler_api(class == Class::ProfilerStart);
            }
            return;
        }
        if site == ENTER && !capture::recording() {
            return;
        }
        // pcsampling hook: a launch opens or closes a sampling window, and
        // its return collects the samples of the range that ended (a
        // serialized kernel's, or a window's).
        let pc_launch = match self.pc_live() {
            Some(pc) if class == Class::Launch => {
                // SAFETY: as above; `context` is a pointer-sized field.
                Some((pc, unsafe {
                    data.add(offset_of!(CUpti_CallbackData, context))
                        .cast::<*mut c_void>()
                        .read_unaligned()
                }))
            }
            _ => None,
        };
        let call = |l: &mut Local| {
            if site == ENTER {
                // Any per-thread number picks the thread's counters.
                self.tally.add(
                    std::ptr::from_ref(l) as usize >> 6,
                    usize::from(domain == DRIVER),
                    cbid,
                );
            }
            if let Some((pc, context)) = pc_launch
                && !(domain == DRIVER && l.runtime_depth > 0)
            {
                // SAFETY: the launching call's context, live during the call.
                unsafe {
                    if site == ENTER {
                        pc.launch(context);
                    } else {
                        pc.launch_exit(context);
                    }
                }
            }
            if site == ENTER {
                self.enter(l, domain, cbid, correlation_id, class);
            } else {
                self.exit(l, correlation_id);
            }
        };
        if LOCAL.try_with(|l| call(&mut l.borrow_mut())).is_err() {
            self.without_state(call, site == ENTER);
        }
    }

    /// PC sampling's part of a resource callback: enable in a new context,
    /// keep a loaded module, read and disable in a context being destroyed.
    /// The PC sampler, unless the exit path gave up on CUPTI: the call it
    /// left inside holds the sampler's lock of contexts.
    fn pc_live(&self) -> Option<&crate::pcsampling::Sampler> {
        self.pc
            .as_ref()
            .filter(|_| !self.gave_up_on_cupti.load(Relaxed))
    }

    fn pc_resource(&self, pc: &crate::pcsampling::Sampler, cbid: u32, data: *const c_void) {
        // SAFETY: for resource callbacks CUPTI passes a `CUpti_ResourceData`:
        // the context, a handle union of one pointer, then the descriptor.
        let (context, descriptor) = unsafe {
            (
                data.cast::<*mut c_void>().read_unaligned(),
                data.cast::<*const c_void>().add(2).read_unaligned(),
            )
        };
        match cbid {
            CONTEXT_CREATED => {
                // SAFETY: the context is being created, so it is alive.
                let Some((id, _)) = (unsafe { self.cupti.context_device(context) }) else {
                    return;
                };
                let text = |st| self.cupti.status_text(st);
                // SAFETY: as above.
                unsafe { pc.context_created(context, id, &text) };
            }
            // SAFETY: the module callback's descriptor is a `CUpti_ModuleResourceData`;
            // its context is live during the callback.
            MODULE_LOADED if !descriptor.is_null() => unsafe {
                pc.module_loaded(context, descriptor.cast());
            },
            // SAFETY: the context lives until its destruction's callback returns.
            CONTEXT_DESTROY => unsafe { pc.context_destroyed(context) },
            _ => {}
        }
    }

    /// A call on a thread whose recorder state was destroyed: `exit` destroys
    /// the main thread's before the atexit handlers registered after CUDA
    /// started run, and a thread's before its thread-specific data's
    /// destructors run. Such calls are recorded through a state kept here,
    /// by thread id, while the thread has calls open; the shard it writes to
    /// is drained as the others are.
    fn without_state(&self, call: impl FnOnce(&mut Local), enter: bool) {
        let tid = gettid();
        let mut all = lock(&self.stateless);
        let Some(i) = stateless_entry(&mut all, tid, enter, &self.stats.no_stateless_room) else {
            if !enter {
                // The exit of a call not open here: nothing to close, and no
                // entry needed for that.
                call(&mut Local::default());
            }
            return;
        };
        call(&mut all[i].1);
        if enter {
            self.stats.stateless.fetch_add(1, Relaxed);
        }
        if all[i].1.open.is_empty() {
            // Its drop names the thread in its shard, as at a thread's exit.
            all.swap_remove(i);
        }
    }

    /// CUPTI reports an error it cannot recover from and stops itself.
    fn on_fatal_error(&self, data: *const c_void) {
        let data = data.cast::<u8>();
        // SAFETY: for CUPTI_CBID_STATE_FATAL_ERROR CUPTI passes a
        // `CUpti_StateData` whose `notification` member (at offset 0) holds the
        // status and a message that lives for the call.
        let (status, message) = unsafe {
            (
                data.add(offset_of!(CUpti_StateNotification, result))
                    .cast::<u32>()
                    .read_unaligned(),
                c_text(
                    data.add(offset_of!(CUpti_StateNotification, message))
                        .cast::<*const c_char>()
                        .read_unaligned(),
                ),
            )
        };
        let text = format!(
            "CUPTI stopped itself after a fatal error ({}): {}; GPU activity after it is missing",
            self.cupti.status_text(status),
            message.as_deref().unwrap_or("no message"),
        );
        self.log.line(&text);
        lock(&self.sink).note(text);
    }

    fn enter(&self, l: &mut Local, domain: u32, cbid: u32, correlation_id: u32, class: Class) {
        capture::entered(correlation_id);
        let outer = l
            .open
            .iter()
            .rev()
            .find(|o| !o.nested)
            .map(|o| o.correlation_id);
        if class == Class::Scope {
            // A runtime call not recorded: only the driver calls inside it
            // need to know that they are nested.
            let opened = self.open_nested(l, correlation_id, cbid, domain);
            l.runtime_depth += u32::from(opened);
            return;
        }
        if domain == DRIVER && l.runtime_depth > 0 {
            // A driver call made by a runtime call we already record: its GPU work
            // is charged to the runtime call.
            self.stats.nested.fetch_add(1, Relaxed);
            if let Some(outer) = outer.filter(|&o| o != correlation_id) {
                // The outer call is open and recorded: the shard is there.
                l.push(Item::Alias(correlation_id, outer));
            }
            self.open_nested(l, correlation_id, cbid, domain);
            return;
        }
        // stacks hook: the calls that cause GPU work, and the waits for it, get
        // the caller's stack. Calls entered while the exit path runs take one
        // too: their API records are written until the last drain, and the
        // stack table is written after it. Once it is written for the last
        // time the call is only counted.
        let stack = match &self.stacks {
            Some(st) if class.takes_stack() && !self.stacks_done.load(Relaxed) => {
                let id = if crate::gpuperf_bench_stacks_off.load(Relaxed) {
                    self.stats.stacks_paused.fetch_add(1, Relaxed);
                    0
                } else {
                    // The first capture in a new module reads files.
                    let _no_cancel = NoCancel::new();
                    st.capture()
                };
                if id == 0 {
                    self.stats.stackless.fetch_add(1, Relaxed);
                }
                id
            }
            _ => 0,
        };
        // autograd hook: whether this launch is forward or backward work.
        let autograd = match &self.autograd {
            Some(a) if stack != 0 && class.fires_marker() => a.tag(),
            _ => Default::default(),
        };
        let opened = self.open(
            l,
            Open {
                correlation_id,
                start_ns: monotonic_ns(),
                cbid,
                domain,
                nested: false,
                stack,
                autograd,
            },
        );
        // Counted only when open, as the exit that undoes it finds it.
        l.runtime_depth += u32::from(opened && domain == RUNTIME);
        // Stack capture hook: an in-process unwinder is called here, for calls
        // where `class.fires_marker()`, on the launching thread before the call
        // does its work, with `correlation_id` as the key its stack is stored
        // under in the thread's shard. This runs inside CUPTI's API callback,
        // possibly under CUPTI's lock: it must not take the sink or flush lock,
        // call into CUPTI, or block.
        if class.fires_marker() && self.marker_on() {
            crate::gpuperf_launch_marker(
                u64::from(correlation_id),
                (u64::from(domain) << 32) | u64::from(cbid),
            );
        }
    }

    fn exit(&self, l: &mut Local, correlation_id: u32) {
        let Some(i) = l
            .open
            .iter()
            .rposition(|o| o.correlation_id == correlation_id)
        else {
            return;
        };
        let o = l.open.remove(i);
        capture::opened_here(false);
        if o.domain == RUNTIME {
            l.runtime_depth = l.runtime_depth.saturating_sub(1);
        }
        if o.nested {
            return;
        }
        let end_ns = monotonic_ns();
        if l.tid == 0 {
            // The thread's first recorded call: its name as it is now.
            l.tid = gettid();
            l.push(Item::Thread(l.tid, thread_name()));
        }
        let rec = RawApi {
            start_ns: o.start_ns,
            end_ns,
            correlation_id,
            tid: l.tid,
            cbid: o.cbid,
            driver: o.domain == DRIVER,
            stack: o.stack,
            autograd: o.autograd,
        };
        if self.closed.load(Relaxed) {
            // Nothing will drain it: counted now, holding no memory. (Calls
            // that came between the final flush and this are counted from
            // their shards at unload.)
            self.stats.after_close.fetch_add(1, Relaxed);
            return;
        }
        // The call was opened with the shard claimed (see `open`).
        l.push(Item::Api(rec));
    }

    /// Notes a call as open, without growing the list (which would allocate);
    /// false when the list is full.
    /// Opens a call that writes no API record of its own: its exit only
    /// closes it.
    fn open_nested(&self, l: &mut Local, correlation_id: u32, cbid: u32, domain: u32) -> bool {
        self.open(
            l,
            Open {
                correlation_id,
                start_ns: 0,
                cbid,
                domain,
                nested: true,
                stack: 0,
                autograd: Default::default(),
            },
        )
    }

    fn open(&self, l: &mut Local, o: Open) -> bool {
        // The thread's first recorded call: its one allocation of this list.
        // Inside the application's CUDA call, where memory may be short: a
        // refusal leaves the call unrecorded (counted), not the program
        // aborted, and the next call tries again.
        if l.open.capacity() == 0 && l.open.try_reserve_exact(MAX_OPEN).is_err() {
            self.stats.no_room.fetch_add(1, Relaxed);
            return false;
        }
        // A call that writes a record needs the thread's shard, claimed at
        // its first such call and refused (counted) as the list above.
        if !o.nested && !l.has_shard(&self.shards, &self.stats.no_shard) {
            return false;
        }
        if l.open.len() < l.open.capacity() {
            l.open.push(o);
            capture::opened_here(true);
            true
        } else {
            self.stats.too_deep.fetch_add(1, Relaxed);
            false
        }
    }
}

/// The index of thread `tid`'s entry in `all` (the threads whose state was
/// destroyed), made for a call's entry (`enter`) when there is none. `None`
/// for an exit without one, and for an entry when `all` cannot grow (memory
/// short: counted in `refused`).
fn stateless_entry(
    all: &mut Vec<(u32, Local)>,
    tid: u32,
    enter: bool,
    refused: &AtomicU64,
) -> Option<usize> {
    if let Some(i) = all.iter().position(|(t, _)| *t == tid) {
        return Some(i);
    }
    if !enter {
        return None;
    }
    if mock_alloc::refuses() || all.try_reserve(1).is_err() {
        refused.fetch_add(1, Relaxed);
        return None;
    }
    all.push((tid, Local::default()));
    Some(all.len() - 1)
}

pub(super) unsafe extern "C" fn api_callback(
    u: *mut c_void,
    domain: u32,
    cbid: u32,
    data: *const c_void,
) {
    // Which CUDA calls the thread is inside, for the SIGINT/SIGTERM handler: a
    // signal landing inside one is taken at its exit (see `interrupt`).
    // SAFETY: `data` as CUPTI passed it with `domain`.
    let site = unsafe { api_site(domain, data) };
    if site == Some(ENTER) {
        crate::interrupt::call_entered();
    }
    // SAFETY: the arguments as CUPTI passed them.
    unsafe { on_callback(u, domain, cbid, data) };
    if site == Some(EXIT) {
        crate::interrupt::call_exited();
    }
}

unsafe fn on_callback(_: *mut c_void, domain: u32, cbid: u32, data: *const c_void) {
    if domain == RESOURCE && stacks::is_graph_copy_callback(cbid) {
        // A graph node copied, or destroyed: thousands per instantiation. This
        // path reaches no cancellation point (no system call, no capture), so
        // it skips `NoCancel`'s two calls into libc.
        let inside = Inside::enter();
        if inside.reentered() {
            return;
        }
        let _ = catch_unwind(AssertUnwindSafe(|| {
            if let Some(s) = STATE.get()
                && !s.disabled.load(Relaxed)
            {
                s.on_api(domain, cbid, data);
            }
        }));
        return;
    }
    // capture hook: outside the window, calls that only record return here.
    if (domain == RUNTIME || domain == DRIVER)
        && !capture::recording()
        && let Some(s) = STATE.get()
        && let class = s.class(domain, cbid)
        && !matches!(
            class,
            Class::ProfilerStart
                | Class::ProfilerStop
                | Class::GraphCopy
                | Class::GraphTeardown
                | Class::Reset
        )
        && capture::skip_outside(
            // SAFETY: `data` as CUPTI passed it with `domain`.
            unsafe { api_enter(domain, data) },
            domain == DRIVER && class.fires_marker(),
        )
    {
        return;
    }
    // Entries and exits of runtime and driver calls reach a cancellation point
    // only in a stack capture (a new module's table is read from files), a
    // flush or a log write, which take their own guard: they skip
    // `NoCancel`'s two calls into libc, four per launch otherwise.
    let _no_cancel = (domain != RUNTIME && domain != DRIVER).then(NoCancel::new);
    let inside = Inside::enter();
    if inside.reentered() {
        if let Some(s) = STATE.get()
            // SAFETY: `data` as CUPTI passed it with `domain`.
            && unsafe { api_enter(domain, data) }
        {
            s.stats.reentered.fetch_add(1, Relaxed);
        }
        return;
    }
    let _ = catch_unwind(AssertUnwindSafe(|| {
        let Some(s) = STATE.get() else { return };
        // After the exit path's final flush (static destructors, atexit
        // handlers registered before CUDA started, other threads), calls go on
        // into their shards, never written: counted at unload.
        if !s.disabled.load(Relaxed) || s.closing.load(Relaxed) {
            s.on_api(domain, cbid, data);
        }
    }));
}

/// Whether a callback is the entry of a runtime or driver API call.
///
/// # Safety
/// `data` must be what CUPTI passed with `domain`.
unsafe fn api_enter(domain: u32, data: *const c_void) -> bool {
    // SAFETY: as this function's contract.
    (unsafe { api_site(domain, data) }) == Some(ENTER)
}

/// The site (entry or exit) of a runtime or driver API callback; `None` for
/// other domains.
///
/// # Safety
/// `data` must be what CUPTI passed with `domain`.
unsafe fn api_site(domain: u32, data: *const c_void) -> Option<u32> {
    if !(domain == RUNTIME || domain == DRIVER) || data.is_null() {
        return None;
    }
    // SAFETY: for these domains CUPTI passes a `CUpti_CallbackData`; its site
    // is read as a plain integer.
    Some(unsafe {
        data.cast::<u8>()
            .add(offset_of!(CUpti_CallbackData, callbackSite))
            .cast::<u32>()
            .read_unaligned()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(tid: u32, correlation_id: u32) -> Item {
        Item::Api(RawApi {
            start_ns: 1,
            end_ns: 2,
            correlation_id,
            tid,
            cbid: 211,
            driver: false,
            stack: 0,
            autograd: Default::default(),
        })
    }

    /// The API records (by thread) and thread names (id, name) a drain gave.
    fn drained(shards: &Shards) -> (Vec<u32>, Vec<(u32, String)>) {
        let (mut apis, mut names) = (Vec::new(), Vec::new());
        let dropped = shards.drain(|it| match *it {
            Item::Api(a) => apis.push(a.tid),
            Item::Thread(tid, raw) => {
                let len = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
                names.push((tid, String::from_utf8_lossy(&raw[..len]).into_owned()));
            }
            Item::Alias(..) => {}
        });
        assert_eq!(dropped, 0);
        (apis, names)
    }

    /// What `exit` writes for a thread's recorded call: its name first.
    fn record(l: &mut Local, correlation_id: u32) {
        if l.tid == 0 {
            l.tid = gettid();
            l.push(Item::Thread(l.tid, thread_name()));
        }
        l.push(api(l.tid, correlation_id));
    }

    /// A thread's first recorded call while the allocator (mocked) refuses
    /// its shard: the call is not recorded, counted, and nothing aborts; the
    /// next call, with memory back, records, and the thread's name with it.
    #[test]
    fn a_call_whose_shard_the_allocator_refuses_is_counted_and_the_next_records() {
        let shards = Shards::new();
        let refused = AtomicU64::new(0);
        let mut l = Local::default();
        mock_alloc::refuse(true);
        assert!(!l.has_shard(&shards, &refused));
        assert!(!l.has_shard(&shards, &refused));
        mock_alloc::refuse(false);
        assert_eq!(refused.load(Relaxed), 2);
        assert!(l.shard.is_none());
        assert!(l.has_shard(&shards, &refused));
        record(&mut l, 1);
        assert!(l.has_shard(&shards, &refused));
        record(&mut l, 2);
        let tid = l.tid;
        drop(l);
        let (apis, names) = drained(&shards);
        assert_eq!(apis, vec![tid, tid]);
        assert_eq!(names.len(), 2, "the first call's name and the exit's");
        assert_eq!(refused.load(Relaxed), 2);
        assert_eq!(shards.counts().made, 1);
    }

    /// A call on a thread whose state was destroyed, while the allocator
    /// (mocked) refuses the entry it needs: no entry, the call counted; an
    /// exit without an entry needs none, and is not counted.
    #[test]
    fn a_stateless_call_whose_entry_cannot_be_allocated_is_counted() {
        let refused = AtomicU64::new(0);
        let mut all = Vec::new();
        mock_alloc::refuse(true);
        assert_eq!(stateless_entry(&mut all, 7, true, &refused), None);
        assert_eq!(stateless_entry(&mut all, 7, false, &refused), None);
        mock_alloc::refuse(false);
        assert_eq!(refused.load(Relaxed), 1);
        assert!(all.is_empty());
        assert_eq!(stateless_entry(&mut all, 7, true, &refused), Some(0));
        assert_eq!(stateless_entry(&mut all, 8, true, &refused), Some(1));
        assert_eq!(stateless_entry(&mut all, 7, false, &refused), Some(0));
        assert_eq!(refused.load(Relaxed), 1);
    }

    /// A program that starts and ends threads all along: 200 threads, 20 at
    /// a time in 10 rounds with a flush (drain and trim) between them, each
    /// making 50 recorded calls and renaming itself before it exits. The
    /// shards of one round's threads serve the next round's: 20 are
    /// allocated, not 200. Every call is drained, and every thread's name,
    /// the one it had at exit among them.
    #[test]
    fn two_hundred_short_lived_threads_reuse_their_shards_and_lose_no_record() {
        const ROUNDS: u32 = 10;
        const THREADS: u32 = 20;
        const CALLS: u32 = 50;
        let shards = Shards::new();
        let refused = AtomicU64::new(0);
        let mut calls: std::collections::HashMap<u32, u32> = Default::default();
        let mut names: std::collections::HashMap<u32, Vec<String>> = Default::default();
        let mut tids = Vec::new();
        for round in 0..ROUNDS {
            std::thread::scope(|scope| {
                let threads: Vec<_> = (0..THREADS)
                    .map(|i| {
                        let (shards, refused) = (&shards, &refused);
                        std::thread::Builder::new()
                            .name(format!("churn-{round}-{i}"))
                            .spawn_scoped(scope, move || {
                                let mut l = Local::default();
                                for c in 0..CALLS {
                                    assert!(l.has_shard(shards, refused));
                                    record(&mut l, c);
                                }
                                let renamed = format!("exit-{round}-{i}\0");
                                // SAFETY: a NUL-terminated name.
                                unsafe { libc::prctl(libc::PR_SET_NAME, renamed.as_ptr()) };
                                let tid = l.tid;
                                drop(l);
                                tid
                            })
                            .unwrap()
                    })
                    .collect();
                tids.extend(threads.into_iter().map(|t| t.join().unwrap()));
            });
            // The flush between rounds.
            let (apis, got) = drained(&shards);
            shards.trim();
            for tid in apis {
                *calls.entry(tid).or_default() += 1;
            }
            for (tid, name) in got {
                names.entry(tid).or_default().push(name);
            }
        }
        assert_eq!(refused.load(Relaxed), 0);
        assert_eq!(tids.len(), (ROUNDS * THREADS) as usize);
        for (k, tid) in tids.iter().enumerate() {
            let (round, i) = (k as u32 / THREADS, k as u32 % THREADS);
            assert_eq!(calls.get(tid), Some(&CALLS), "thread {tid}");
            assert_eq!(
                names.get(tid),
                Some(&vec![
                    format!("churn-{round}-{i}"),
                    format!("exit-{round}-{i}")
                ]),
                "thread {tid}"
            );
        }
        let counts = shards.counts();
        assert_eq!(counts.made, u64::from(THREADS), "{counts:?}");
        assert_eq!(
            counts.reused,
            u64::from((ROUNDS - 1) * THREADS),
            "{counts:?}"
        );
    }
}
