//! The recorder: CUPTI set-up, the callbacks, buffering and the trace file.
//!
//! Threads and locks. API callbacks run on the application's threads and touch
//! only that thread's [`Shard`], whose lock is uncontended except while the flush
//! thread swaps it out. Activity buffers arrive on CUPTI's thread or inside a flush;
//! both drain the shards first, then write under the [`Sink`] lock. Flushes are
//! serialized by `flush_lock`, because concurrent `cuptiActivityFlushAll` calls can
//! deadlock. Lock order: `flush_lock`, then a shard, then the sink; a shard lock is
//! never held while taking another lock.
//!
//! CUPTI has an internal lock of its own, held while its thread delivers buffers
//! and while it runs resource callbacks, and taken by `cuptiActivityFlushAll` and
//! `cuptiActivityGetNumDroppedRecords`. So no CUPTI function is called under the
//! sink or a shard lock, and a callback never waits for `flush_lock` (it skips the
//! flush when another is running).

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{CStr, c_char, c_void};
use std::fs::File;
use std::io::{self, BufWriter, Read as _, Write as _};
use std::mem::offset_of;
use std::os::unix::net::UnixStream;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, TryLockError};
use std::time::{Duration, Instant};

use gpuperf_merge::gputrace::Writer;
use gpuperf_merge::model::{
    Activity, ActivityKind, ApiCall, ApiDomain, Device, DropSource, Dropped, MemcpyKind, Note,
    NvtxKind, NvtxRange, Overhead, Process, Record, SIMULATED_GPU_NOTE, StringId, StringTable,
    ThreadName, api_base_name,
};

use crate::api::{Class, classify};
use crate::buffers::{self, BUFFER_SIZE, Origin, Pool};
use crate::capture;
use crate::config::{Config, MarkerMode};
use crate::cupti::{Cupti, Subscriber};
use crate::decode::{self, Decoded, Place};
use crate::driver;
use crate::error::{Error, Result};
use crate::guard::{Inside, NoCancel};
use crate::hook;
use crate::locate;
use crate::log::Log;
use crate::shard::{Item, RawApi, Shard};
use crate::stacks::{self, Stacks};
use crate::sys::{
    self, CUpti_ActivityThreadIdType, CUpti_ApiCallbackSite, CUpti_CallbackData,
    CUpti_CallbackDomain, CUpti_CallbackIdResource, CUpti_CallbackIdState, CUpti_StateNotification,
};

const RUNTIME: u32 = CUpti_CallbackDomain::CUPTI_CB_DOMAIN_RUNTIME_API as u32;
const DRIVER: u32 = CUpti_CallbackDomain::CUPTI_CB_DOMAIN_DRIVER_API as u32;
const RESOURCE: u32 = CUpti_CallbackDomain::CUPTI_CB_DOMAIN_RESOURCE as u32;
const ENTER: u32 = CUpti_ApiCallbackSite::CUPTI_API_ENTER as u32;
const EXIT: u32 = CUpti_ApiCallbackSite::CUPTI_API_EXIT as u32;
const STATE_DOMAIN: u32 = CUpti_CallbackDomain::CUPTI_CB_DOMAIN_STATE as u32;
const FATAL_ERROR: u32 = CUpti_CallbackIdState::CUPTI_CBID_STATE_FATAL_ERROR as u32;
const CONTEXT_CREATED: u32 = CUpti_CallbackIdResource::CUPTI_CBID_RESOURCE_CONTEXT_CREATED as u32;
const CONTEXT_DESTROY: u32 =
    CUpti_CallbackIdResource::CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING as u32;
/// `CUPTI_ACTIVITY_FLAG_FLUSH_FORCED`: also returns buffers holding records of
/// work still running, which are then delivered with `end = 0` and never again.
/// Used at exit, before the kinds are disabled, and when the last context is
/// destroyed.
const FLUSH_FORCED: u32 = 1;
/// Callback ids are probed up to this bound, past any CUDA 13 id.
const MAX_CBID: u32 = 2048;
/// Aliases kept per generation; two generations are searched.
const ALIAS_GENERATION: usize = 1 << 20;
/// CUPTI's API version from which OVERHEAD records are `Overhead3`, with a
/// correlation id (v22, CUDA 12.4, by `cupti_version.h`).
const OVERHEAD3_VERSION: u32 = 22;
/// Launches after the last GPU record, at exit, that mean another CUPTI client
/// took the activity buffers or disabled the kinds. A few failed launches at the
/// end of a program must not look like that.
const MIN_SILENT_LAUNCHES: u64 = 8;
/// Slack around CLOCK_MONOTONIC when checking that a GPU timestamp is ours.
const CLOCK_SLACK_NS: u64 = 1_000_000_000;

static STATE: OnceLock<State> = OnceLock::new();

/// CLOCK_MONOTONIC in ns, the clock of `bpf_ktime_get_ns()`.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64).wrapping_mul(1_000_000_000) + ts.tv_nsec as u64
}

fn gettid() -> u32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() as u32 }
}

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
struct Local {
    shard: Option<Arc<Shard>>,
    tid: u32,
    /// Calls entered and not yet exited; its capacity, reserved at the first
    /// callback, is never grown inside a callback.
    open: Vec<Open>,
    runtime_depth: u32,
}

impl Drop for Local {
    /// At thread exit: the thread's name once more, as it may have renamed
    /// itself since its first recorded call.
    fn drop(&mut self) {
        if let Some(shard) = &self.shard
            && self.tid != 0
        {
            shard.push(Item::Thread(self.tid, thread_name()));
        }
    }
}

/// Calls a thread may have open at once (CUDA calls nest one or two deep);
/// deeper ones are not recorded, and counted.
const MAX_OPEN: usize = 32;

thread_local! {
    static LOCAL: RefCell<Local> = RefCell::new(Local::default());
}

/// Counters reported at exit.
#[derive(Default)]
struct Stats {
    api: AtomicU64,
    activities: AtomicU64,
    nested: AtomicU64,
    aliased: AtomicU64,
    cupti_dropped: AtomicU64,
    unknown_kinds: AtomicU64,
    short_records: AtomicU64,
    buffers: AtomicU64,
    /// Records without a valid start and end, not written.
    incomplete: AtomicU64,
    /// Buffers whose walk ended on an error status.
    walk_errors: AtomicU64,
    /// Records in buffers that arrived after the final flush.
    late: AtomicU64,
    /// Flushes from CUPTI callbacks skipped because another was running.
    skipped_flushes: AtomicU64,
    /// Records whose timestamps are not CLOCK_MONOTONIC, not written.
    foreign_clock: AtomicU64,
    /// API records written of calls that make GPU work (launches, copies,
    /// memsets): each has a GPU record while our kinds are enabled.
    launches: AtomicU64,
    /// Calls not recorded: more than `MAX_OPEN` open on one thread.
    too_deep: AtomicU64,
    /// Recorded API calls made after the trace was closed (static destructors,
    /// atexit handlers registered before CUDA started, other threads while
    /// `exit` runs), counted from the shards they were left in.
    after_close: AtomicU64,
    /// API calls recorded without the thread's state, which was destroyed
    /// (atexit handlers after `exit` destroyed the main thread's, destructors
    /// of thread-specific data).
    stateless: AtomicU64,
    /// API calls whose callbacks arrived while the thread was inside gpuperf
    /// (a signal handler making CUDA calls): returned at once, not recorded.
    reentered: AtomicU64,
    /// `launches` when the last GPU record (or CUPTI drop count) arrived.
    launches_at_last_record: AtomicU64,
    /// Calls that take a stack and got none (the stacks module says why).
    stackless: AtomicU64,
}

/// Who asks for a flush, which decides its flag and whether it may wait.
#[derive(Copy, Clone, PartialEq, Eq)]
enum Flush {
    /// The flush thread: unforced.
    Periodic,
    /// `cudaDeviceReset` or context teardown, inside a CUPTI callback: unforced,
    /// and skipped when another flush is running.
    InCallback,
    /// The last live context is being destroyed, inside its callback: forced
    /// (no flush may follow without a context), skipped like `InCallback`.
    LastContext,
    /// The exit path: forced.
    Final,
}

struct Sink {
    writer: Option<Writer<BufWriter<File>>>,
    strings: StringTable,
    pid: u32,
    api_names: [Vec<Option<StringId>>; 2],
    context_device: HashMap<u32, u32>,
    aliases: [HashMap<u32, u32>; 2],
    /// The last name written for each thread.
    thread_names: HashMap<u32, [u8; 16]>,
    /// The last kernel name interned: runs of one kernel are the rule.
    last_kernel: Option<StringId>,
    write_errors: u64,
    first_error: Option<String>,
    /// The `CLOSED` record is written: only notes may follow.
    closed: bool,
    /// Records refused because they came after `CLOSED` (a flush that raced
    /// with the exit path).
    refused: u64,
}

impl Sink {
    /// Creates the trace at `path`, or at a free name beside it (see
    /// [`crate::config::create_new`]); returns it and where it is.
    fn create(path: &Path, flags: u32) -> Result<(Self, PathBuf)> {
        let (file, path) = crate::config::create_new(path).map_err(|source| Error::Output {
            path: path.to_owned(),
            source,
        })?;
        let path = path.as_path();
        let out = BufWriter::with_capacity(1 << 20, file);
        let writer = Writer::with_flags(out, flags).map_err(|source| Error::Output {
            path: path.to_owned(),
            source,
        })?;
        let sink = Self {
            writer: Some(writer),
            strings: StringTable::new(),
            pid: std::process::id(),
            api_names: [Vec::new(), Vec::new()],
            context_device: HashMap::new(),
            aliases: [HashMap::new(), HashMap::new()],
            thread_names: HashMap::new(),
            last_kernel: None,
            write_errors: 0,
            first_error: None,
            closed: false,
            refused: 0,
        };
        Ok((sink, path.to_owned()))
    }

    fn write(&mut self, rec: &Record) {
        if self.closed && !matches!(rec, Record::Note(_)) {
            self.refused += 1;
            return;
        }
        let Some(w) = self.writer.as_mut() else {
            self.write_errors += 1;
            return;
        };
        if let Err(e) = w.write(rec, &self.strings) {
            // A full disk loses the rest of the trace, never the app's own writes.
            self.write_errors += 1;
            self.first_error.get_or_insert_with(|| e.to_string());
            self.writer = None;
        }
    }

    /// Writes an API record with its in-process stack id. (stacks hook)
    fn write_api(&mut self, rec: &Record, stack: u32) {
        let (Record::Api(a), Some(w)) = (rec, self.writer.as_mut()) else {
            return self.write(rec);
        };
        if stack == 0 || self.closed {
            return self.write(rec);
        }
        if let Err(e) = w.write_api(a, Some(stack), &self.strings) {
            self.write_errors += 1;
            self.first_error.get_or_insert_with(|| e.to_string());
            self.writer = None;
        }
    }

    /// The id of a kernel name as CUPTI's record holds it, without copying it
    /// when it is the last one's (compared, not assumed: record storage is
    /// reused).
    ///
    /// # Safety
    /// `p` is null or a NUL-terminated string valid for the call.
    unsafe fn kernel_name(&mut self, p: *const c_char) -> StringId {
        if p.is_null() {
            return self.strings.intern("<unnamed kernel>");
        }
        // SAFETY: as this function's contract.
        let bytes = unsafe { CStr::from_ptr(p) }.to_bytes();
        if let Some(id) = self.last_kernel
            && self.strings.get(id).as_bytes() == bytes
        {
            return id;
        }
        let id = match std::str::from_utf8(bytes) {
            Ok(text) => self.strings.intern(text),
            Err(_) => self.strings.intern(&String::from_utf8_lossy(bytes)),
        };
        self.last_kernel = Some(id);
        id
    }

    fn flush(&mut self) {
        if let Some(w) = self.writer.as_mut()
            && let Err(e) = w.flush()
        {
            self.write_errors += 1;
            self.first_error.get_or_insert_with(|| e.to_string());
            self.writer = None;
        }
    }

    fn note(&mut self, text: String) {
        let pid = self.pid;
        self.write(&Record::Note(Note { pid, text }));
        self.flush();
    }

    fn add_alias(&mut self, nested: u32, outer: u32) {
        if self.aliases[0].len() >= ALIAS_GENERATION {
            self.aliases[1] = std::mem::take(&mut self.aliases[0]);
        }
        self.aliases[0].insert(nested, outer);
    }

    fn resolve(&self, correlation_id: u32) -> Option<u32> {
        self.aliases
            .iter()
            .find_map(|m| m.get(&correlation_id).copied())
    }
}

struct State {
    cupti: Cupti,
    /// CLOCK_MONOTONIC minus CUPTI's clock, added to every GPU time when CUPTI
    /// refused our timestamp callback and kept its default clock; else 0.
    clock_shift: std::sync::atomic::AtomicI64,
    /// `cuptiGetVersion`.
    version: u32,
    config: Config,
    log: Log,
    pid: u32,
    classes: [Vec<Class>; 2],
    names: [Vec<String>; 2],
    sink: Mutex<Sink>,
    shards: Mutex<Vec<Arc<Shard>>>,
    flush_lock: Mutex<()>,
    stop: (Mutex<bool>, Condvar),
    disabled: AtomicBool,
    /// Contexts created and not yet being destroyed.
    live_contexts: AtomicU32,
    /// Every context is gone and CUPTI's buffers were force-flushed while the
    /// last one lived: no flush is made until a context is created again. A
    /// CUDA runtime may destroy its contexts at exit before our handler runs,
    /// and CUPTI tools have hung flushing with no context left.
    torn_down: AtomicBool,
    /// Set once the exit path has written its last record.
    closed: AtomicBool,
    /// Set when the exit path starts its final flush: calls from then on are
    /// kept in their shards only to be counted (see `report_after_close`).
    closing: AtomicBool,
    /// Whether the exit path ran (or runs): a second one, a signal's close
    /// during `exit`, waits for it and does nothing.
    finished: Mutex<bool>,
    /// The recorder state of threads whose own was destroyed (calls from
    /// destructors at exit), by thread id, while they have calls open.
    stateless: Mutex<Vec<(u32, Local)>>,
    /// The activity kinds enabled, to disable at exit. Its lock also orders
    /// the capture window's turning them off and on ([`window_changed`]).
    kinds: Mutex<Vec<u32>>,
    /// Whether `kinds` are on in CUPTI now (written under `kinds`' lock):
    /// off while a capture window is closed.
    kinds_on: AtomicBool,
    first_walk_error: Mutex<Option<String>>,
    /// The reserve for when buffers cannot be allocated.
    pool: Pool,
    /// CLOCK_MONOTONIC at start; no GPU record is older.
    started_ns: u64,
    /// Whether the NOTE about another CUPTI client is written.
    takeover_noted: AtomicBool,
    /// Another client is registering its buffer callbacks (`hook`); set once.
    yielding: AtomicBool,
    /// CUPTI's buffers and kinds are another client's: gpuperf no longer
    /// flushes or disables them.
    yielded: AtomicBool,
    /// Launches, copies and memsets made when the buffers were yielded.
    launches_at_yield: AtomicU64,
    /// Another client's `cuptiSubscribe` was refused, and the trace says so.
    refusal_noted: AtomicBool,
    /// Another client called `cuptiFinalize`: no CUPTI call of ours may follow
    /// (it would start CUPTI afresh under that client).
    finalized: AtomicBool,
    stats: Stats,
    /// In-process stacks, unless `GPUPERF_STACKS=0`. (stacks hook)
    stacks: Option<Stacks>,
    /// PyTorch autograd ids of launches, with stacks, unless
    /// `GPUPERF_AUTOGRAD=0`. (autograd hook)
    autograd: Option<crate::autograd::Autograd>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic caught at the FFI boundary must not stop later flushes.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn domain_index(domain: u32) -> usize {
    usize::from(domain == DRIVER)
}

impl State {
    fn class(&self, domain: u32, cbid: u32) -> Class {
        self.classes[domain_index(domain)]
            .get(cbid as usize)
            .copied()
            .unwrap_or(Class::Ignored)
    }

    fn marker_on(&self) -> bool {
        match self.config.marker {
            MarkerMode::Always => true,
            MarkerMode::Off => false,
            MarkerMode::Auto => crate::gpuperf_marker_semaphore.0.load(Relaxed) > 0,
        }
    }

    fn on_api(&self, domain: u32, cbid: u32, data: *const c_void) {
        if domain == RESOURCE {
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
                if site != ENTER && st.node_backlog() {
                    // The flush thread is falling behind a burst of copies:
                    // this thread writes them (skipped if a flush runs).
                    self.flush(Flush::InCallback);
                } else if wake {
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
        let call = |l: &mut Local| {
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

    /// A call on a thread whose recorder state was destroyed: `exit` destroys
    /// the main thread's before the atexit handlers registered after CUDA
    /// started run, and a thread's before its thread-specific data's
    /// destructors run. Such calls are recorded through a state kept here,
    /// by thread id, while the thread has calls open; the shard it writes to
    /// is drained as the others are.
    fn without_state(&self, call: impl FnOnce(&mut Local), enter: bool) {
        let tid = gettid();
        let mut all = lock(&self.stateless);
        let i = match all.iter().position(|(t, _)| *t == tid) {
            Some(i) => i,
            None => {
                all.push((tid, Local::default()));
                all.len() - 1
            }
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
                self.shard(l).push(Item::Alias(correlation_id, outer));
            }
            self.open_nested(l, correlation_id, cbid, domain);
            return;
        }
        // stacks hook: the calls that cause GPU work, and the waits for it, get
        // the caller's stack.
        let stack = match &self.stacks {
            // After the final flush the call is only counted.
            Some(st) if class.takes_stack() && !self.closing.load(Relaxed) => {
                // The first capture in a new module reads files.
                let _no_cancel = NoCancel::new();
                let id = st.capture();
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
            let item = Item::Thread(l.tid, thread_name());
            self.shard(l).push(item);
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
        self.shard(l).push(Item::Api(rec));
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
        if l.open.capacity() == 0 {
            // The thread's first recorded call: its one allocation of this list.
            l.open.reserve_exact(MAX_OPEN);
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

    fn shard<'l>(&self, l: &'l mut Local) -> &'l Shard {
        l.shard.get_or_insert_with(|| {
            let s = Arc::new(Shard::default());
            s.tid.store(gettid(), Relaxed);
            lock(&self.shards).push(s.clone());
            s
        })
    }

    /// nvtx hook: writes the NVTX ranges that ended since the last flush
    /// (with `close_ns`, the ones still open too, ended then).
    fn write_nvtx(&self, close_ns: Option<u64>) {
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
        let shards: Vec<Arc<Shard>> = {
            let mut all = lock(&self.shards);
            // A shard only this list holds belongs to a thread that has exited.
            let live = all.clone();
            all.retain(|s| Arc::strong_count(s) > 2);
            live
        };
        let mut api = Vec::new();
        let mut aliases = Vec::new();
        let mut names = Vec::new();
        let mut dropped = 0;
        for s in &shards {
            let (taken, d) = s.take();
            dropped += d;
            taken.for_each(|it| match *it {
                Item::Api(a) => api.push(a),
                Item::Alias(nested, outer) => aliases.push((nested, outer)),
                Item::Thread(tid, name) => names.push((tid, name)),
            });
        }
        self.write_thread_names(&names);
        // stacks hook: modules, stacks and graph nodes before the API records
        // that name them.
        if let Some(st) = &self.stacks {
            let mut sink = lock(&self.sink);
            let names = |d: u32, c: u32| {
                self.names[domain_index(d)]
                    .get(c as usize)
                    .map(|n| api_base_name(n).to_owned())
            };
            let taken = st.take_records(self.pid, &mut sink.strings);
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
    fn refresh_thread_names(&self) {
        let shards: Vec<Arc<Shard>> = lock(&self.shards).clone();
        let mut names = Vec::new();
        for s in &shards {
            let tid = s.tid.load(Relaxed);
            if tid == 0 {
                continue;
            }
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

    /// Decodes one completed buffer into the sink.
    fn consume(&self, context: *mut c_void, stream: u32, buf: &mut [u8], valid: usize) {
        self.drain_shards();
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
        drop(sink);
        // Never under the sink lock: this call takes CUPTI's internal lock, which
        // CUPTI holds while its own thread delivers a buffer that waits for the
        // sink (the ABBA deadlock Kineto fixed in its PR #1347).
        // SAFETY: `context` is the one CUPTI passed with this buffer.
        let dropped = unsafe { self.cupti.dropped_records(context, stream) } as u64;
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

    /// Writes, once, that another CUPTI client took the process-wide activity
    /// state: from here on API calls have no GPU side.
    fn note_takeover(&self, sink: &mut Sink) {
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
        self.flush(Flush::Final);
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
                device: place.device,
                context: place.context,
                stream: place.stream,
                graph_id: place.graph_id,
                graph_node_id: place.graph_node_id,
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
                    correlation_id,
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

    /// Flushes CUPTI's buffers and the thread shards to the file.
    fn flush(&self, how: Flush) {
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
            Flush::InCallback | Flush::LastContext => match self.flush_lock.try_lock() {
                Ok(g) => g,
                Err(TryLockError::Poisoned(e)) => e.into_inner(),
                Err(TryLockError::WouldBlock) => {
                    self.stats.skipped_flushes.fetch_add(1, Relaxed);
                    return;
                }
            },
            Flush::Periodic | Flush::Final => lock(&self.flush_lock),
        };
        let forced = matches!(how, Flush::Final | Flush::LastContext);
        if self.torn_down.load(Relaxed) {
            // Nothing is left in CUPTI, and no context to flush with.
        } else if self.yielded.load(Relaxed) {
            // What CUPTI holds is another client's: flushing would hand it
            // its buffers early, and after its cuptiFinalize restart CUPTI.
        } else if let Err(e) = self.cupti.flush_all(if forced { FLUSH_FORCED } else { 0 }) {
            self.log.line(&e.to_string());
        } else if how == Flush::LastContext {
            self.torn_down.store(true, Relaxed);
        }
        self.drain_shards();
        lock(&self.sink).flush();
    }

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
        self.flush(Flush::Final);
        // Kinds are process-wide: once another client took CUPTI they are its
        // own, and disabling them would end its recording.
        let kinds: Vec<u32> = lock(&self.kinds).drain(..).collect();
        if !self.yielded.load(Relaxed) {
            for kind in kinds {
                if let Err(e) = self.cupti.activity_disable(kind) {
                    self.log.line(&e.to_string());
                }
            }
        }
        if self.disabled.swap(true, Relaxed) {
            return;
        }
        let s = &self.stats;
        let walk_errors = s.walk_errors.load(Relaxed);
        let mut sink = lock(&self.sink);
        // With our buffers and kinds in place, the forced flush returns a record
        // for every launch, complete or not. Launches without any mean another
        // client took the buffer callbacks or disabled the kinds.
        let (launches, seen) = (
            s.launches.load(Relaxed),
            s.launches_at_last_record.load(Relaxed),
        );
        if self.yielded.load(Relaxed) {
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
        // The reason a launch has no stack is the recorder's to give: the
        // merge's summary points at this note.
        let stackless = s.stackless.load(Relaxed);
        if stackless > 0
            && let Some(st) = &self.stacks
        {
            sink.note(format!(
                "{stackless} calls that take a CPU stack have none; {}",
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
        self.log.line(&format!(
            "done: {} API records, {} activity records in {} buffers, {} dropped by CUPTI, \
             {} nested driver calls ({} activities charged to the enclosing runtime call), \
             {} records of other kinds, {} too short, {} incomplete (not written), \
             {walk_errors} buffers cut short, {} flushes skipped in callbacks, \
             {} buffers from the reserve, {lost} lost for lack of memory, \
             {} API calls not recorded because they re-entered gpuperf (a signal \
             handler's CUDA calls), {} calls not recorded (more than {MAX_OPEN} open on a thread), \
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
            self.pool.reserve_used.load(Relaxed),
            s.reentered.load(Relaxed),
            s.too_deep.load(Relaxed),
            s.stateless.load(Relaxed),
        ));
        if let Some(st) = &self.stacks {
            self.log.line(&st.summary());
        }
        if let Some(a) = &self.autograd {
            self.log.line(&a.summary());
        }
        self.closed.store(true, Relaxed);
    }
}

impl State {
    /// Looks for libtorch until it is found (autograd hook); on the flush
    /// thread, so that its symbol table is never read on a launch.
    fn discover_autograd(&self) {
        let Some(a) = &self.autograd else { return };
        for (line, off) in a.discover() {
            self.log.line(&line);
            if off {
                lock(&self.sink).note(line);
            }
        }
    }

    /// Writes, to the log and as a NOTE, how many API calls came after the
    /// trace was closed.
    fn report_after_close(&self) {
        if std::process::id() != self.pid || !self.closed.load(Relaxed) {
            return;
        }
        // The calls made after the final flush are in their threads' shards.
        let shards: Vec<Arc<Shard>> = lock(&self.shards).clone();
        let mut left = 0;
        for s in &shards {
            let (taken, dropped) = s.take();
            left += dropped;
            taken.for_each(|it| left += u64::from(matches!(it, Item::Api(_))));
        }
        let n = self.stats.after_close.swap(0, Relaxed) + left;
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

/// Copies a C string out of CUPTI's memory.
///
/// # Safety
/// `p` must be null or point to a NUL-terminated string that stays valid for the call.
unsafe fn c_text(p: *const c_char) -> Option<String> {
    if p.is_null() {
        return None;
    }
    // SAFETY: guaranteed by the caller.
    Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

unsafe extern "C" fn api_callback(u: *mut c_void, domain: u32, cbid: u32, data: *const c_void) {
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
        && !matches!(
            s.class(domain, cbid),
            Class::ProfilerStart
                | Class::ProfilerStop
                | Class::GraphCopy
                | Class::GraphTeardown
                | Class::Reset
        )
        // SAFETY: `data` as CUPTI passed it with `domain`.
        && capture::skip_outside(unsafe { api_enter(domain, data) })
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

unsafe extern "C" fn buffer_requested(buf: *mut *mut u8, size: *mut usize, max: *mut usize) {
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

unsafe extern "C" fn buffer_completed(
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
        let origin = s.pool.origin(buf);
        // SAFETY: CUPTI returns a buffer from `buffer_requested`, `size` bytes long.
        let slice = unsafe { std::slice::from_raw_parts_mut(buf, size) };
        if origin == Origin::Discard {
            // Shared by requests made while memory was short: never read.
        } else if !s.disabled.load(Relaxed) {
            s.consume(context, stream, slice, valid);
        } else if s.closed.load(Relaxed) && std::process::id() == s.pid {
            // After the final flush: nothing may be written any more, but the
            // loss is still counted.
            let n = s.cupti.records(slice, valid).count() as u64;
            s.stats.late.fetch_add(n, Relaxed);
            s.log.line(&format!(
                "{n} activity records arrived after the trace was closed; not written"
            ));
        }
        if size == BUFFER_SIZE {
            // SAFETY: a buffer of this size came from `buffer_requested`, and
            // CUPTI is done with it.
            unsafe { s.pool.release(buf) };
        }
    }));
}

unsafe extern "C" fn timestamp() -> u64 {
    monotonic_ns()
}

extern "C" fn at_exit() {
    let _inside = Inside::enter();
    let _ = catch_unwind(|| {
        if let Some(s) = STATE.get() {
            s.finish();
        }
    });
    // A SIGINT or SIGTERM is being handled: the program dies of it, not of
    // `exit`, once the trace is closed, as it would have without gpuperf.
    let sig = crate::interrupt::deferred();
    if sig != 0 {
        crate::interrupt::die_of(sig);
    }
}

/// The exit path, run by the closing thread when SIGINT or SIGTERM is about to
/// end the program (see [`crate::interrupt`]).
fn close_on_signal() {
    let _inside = Inside::enter();
    if let Some(s) = STATE.get()
        && std::process::id() == s.pid
    {
        s.log
            .line("closing the trace: a signal is ending the program");
        s.finish();
    }
}

extern "C" fn in_forked_child() {
    // The child shares the parent's file and CUPTI state; it writes nothing.
    if let Some(s) = STATE.get() {
        s.disabled.store(true, Relaxed);
    }
}

fn process_record(pid: u32) -> Record {
    let exe = std::fs::read_link("/proc/self/exe")
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let realtime = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    Record::Process(Process {
        pid,
        ppid: std::os::unix::process::parent_id(),
        exe,
        start_ns: monotonic_ns(),
        start_realtime_ns: realtime,
    })
}

/// Tries the candidates in turn until one suits the driver and accepts the
/// subscription; logs every candidate rejected and why.
fn open_cupti(config: &Config, log: &Log) -> Result<(Cupti, u32, Subscriber)> {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    let var = |k: &str| {
        if k == "GPUPERF_CUPTI_PATH" {
            config.cupti.clone().map(PathBuf::into_os_string)
        } else {
            std::env::var_os(k)
        }
    };
    let driver = match driver::version() {
        Ok(v) => {
            log.line(&format!("driver: {}", locate::driver_name(v)));
            Some(v)
        }
        Err(why) => {
            log.line(&format!("driver version unknown: {why}"));
            None
        }
    };
    let inputs = locate::Inputs {
        var: &var,
        maps: &maps,
        self_dir: locate::dir_of_mapping(&maps, open_cupti as *const () as usize),
        system_roots: locate::system_roots(),
        driver,
    };
    let plan = locate::plan(&inputs);
    for (path, why) in &plan.rejected {
        log.line(&format!("`{}` rejected: {why}", path.display()));
    }
    // Libraries that exist but were rejected, for the final message.
    let mut failed: Vec<(PathBuf, Error)> = Vec::new();
    for path in plan.candidates {
        let explicit = config.cupti.as_deref() == Some(path.as_path());
        let e = match try_cupti(&path, driver) {
            Ok(opened) => return Ok(opened),
            Err(e) => e,
        };
        log.line(&format!("`{}` rejected: {e}", path.display()));
        // The user's explicit choice failing is the error to report.
        if explicit || !worth_the_next(&e) {
            return Err(e);
        }
        // A bare soname the loader cannot find is the common case, not news.
        if path.is_absolute() || !matches!(e, Error::CuptiLoad { .. }) {
            failed.push((path, e));
        }
    }
    match failed.len() {
        0 => Err(Error::CuptiNotFound {
            searched: locate::describe(&inputs),
        }),
        1 => Err(failed.pop().expect("one").1),
        _ => Err(Error::NoUsableCupti {
            tried: failed
                .iter()
                .map(|(p, e)| format!("`{}`: {e}", p.display()))
                .collect(),
        }),
    }
}

/// Loads one libcupti, checks it against this build and the driver, subscribes.
fn try_cupti(path: &Path, driver: Option<u32>) -> Result<(Cupti, u32, Subscriber)> {
    let c = Cupti::load(path)?;
    let version = c.version()?;
    if !supported(version) {
        return Err(Error::UnsupportedVersion {
            path: path.to_owned(),
            version,
        });
    }
    if let Some(reason) = locate::cupti_major(version).and_then(|m| locate::too_new(m, driver)) {
        return Err(Error::CuptiLoad {
            path: path.to_owned(),
            reason,
        });
    }
    let sub = c.subscribe(api_callback).map_err(|e| {
        if e.status == sys::MULTIPLE_SUBSCRIBERS {
            Error::CuptiBusy
        } else {
            Error::Cupti(e)
        }
    })?;
    Ok((c, version, sub))
}

/// Whether another libcupti may do better: after any refusal of its own (an
/// unexpected `cuptiSubscribe` code included; another release may support
/// this device), but not when CUPTI is held by another tool: a second CUPTI in
/// the process would fight it.
fn worth_the_next(e: &Error) -> bool {
    matches!(
        e,
        Error::CuptiLoad { .. } | Error::UnsupportedVersion { .. } | Error::Cupti(_)
    )
}

fn supported(version: u32) -> bool {
    (19..=99).contains(&version) || (130_000..140_000).contains(&version)
}

/// Everything `InitializeInjection` does. Returns whether recording started; when
/// it did not, the trace says why.
pub fn initialize() -> bool {
    // A second call (the driver's and a tool's, or two injections of this
    // library) must not create the trace and log again, which would truncate
    // the ones being written. NVIDIA's injection sample guards the same way.
    static CALLED: AtomicBool = AtomicBool::new(false);
    if CALLED.swap(true, Relaxed) {
        if let Some(s) = STATE.get() {
            s.log
                .line("InitializeInjection called again; already initialized");
            return !s.disabled.load(Relaxed);
        }
        return false;
    }
    // This library carries its own copy of std, so this hook sees only its own
    // panics: they go to the log, never to the application's stderr.
    std::panic::set_hook(Box::new(|info| {
        if let Some(s) = STATE.get() {
            s.log.line(&format!("internal error: {info}"));
        }
    }));
    let pid = std::process::id();
    let mut config = Config::from_env(|k| std::env::var_os(k), pid);
    let (want_stacks, stacks_warning) = stacks::enabled(|k| std::env::var_os(k));
    let (want_autograd, autograd_warning) =
        crate::autograd::from_env(std::env::var_os(crate::autograd::VAR));
    let flags = gpuperf_merge::gputrace::FLAG_CLOSES
        | if want_stacks {
            gpuperf_merge::gputrace::FLAG_STACKS
        } else {
            0
        };
    // The trace first: its name decides the default log's.
    let created = Sink::create(&config.trace, flags);
    if let Ok((_, actual)) = &created {
        config.trace_created_as(actual.clone());
    }
    let log = Log::open(&config.log, pid);
    for w in config
        .warnings
        .iter()
        .chain(&stacks_warning)
        .chain(&autograd_warning)
    {
        log.line(w);
    }
    let mut sink = match created {
        Ok((s, _)) => s,
        Err(e) => {
            log.line(&format!("not recording: {e}"));
            return false;
        }
    };
    let process = process_record(pid);
    let started_ns = match &process {
        Record::Process(p) => p.start_ns,
        _ => monotonic_ns(),
    };
    sink.write(&process);
    sink.flush();
    let (cupti, version, sub) = match open_cupti(&config, &log) {
        Ok(c) => c,
        Err(e) => {
            log.line(&format!("not recording: {e}"));
            sink.note(format!("not recorded: {e}"));
            return false;
        }
    };
    log.line(&format!(
        "CUPTI API version {version} from `{}`",
        cupti.path().display()
    ));
    if cupti.simulated() {
        // Every trace made on the simulation says so, in the trace itself.
        sink.note(format!(
            "{SIMULATED_GPU_NOTE}: `{}` is gpuperf's simulated CUPTI; no GPU ran this \
             work, and its times come from the simulation's cost model",
            cupti.path().display()
        ));
    }
    let mut classes = [Vec::new(), Vec::new()];
    let mut names = [Vec::new(), Vec::new()];
    for (d, domain) in [RUNTIME, DRIVER].into_iter().enumerate() {
        for cbid in 0..MAX_CBID {
            let name = cupti.callback_name(domain, cbid).unwrap_or_default();
            let class = classify(&name);
            classes[d].push(class);
            // Names are only looked up for the calls that get API records.
            names[d].push(if class.recorded() {
                name
            } else {
                String::new()
            });
        }
    }
    let stacks = want_stacks.then(|| Stacks::new(cupti.path()));
    // Backward launches are charged through their stacks: none, no tags.
    let autograd = want_autograd
        .filter(|_| stacks.is_some())
        .map(crate::autograd::Autograd::new);
    let state = State {
        stacks,
        autograd,
        clock_shift: std::sync::atomic::AtomicI64::new(0),
        cupti,
        version,
        log,
        pid,
        classes,
        names,
        sink: Mutex::new(sink),
        shards: Mutex::new(Vec::new()),
        flush_lock: Mutex::new(()),
        stop: (Mutex::new(false), Condvar::new()),
        disabled: AtomicBool::new(false),
        live_contexts: AtomicU32::new(0),
        torn_down: AtomicBool::new(false),
        closed: AtomicBool::new(false),
        closing: AtomicBool::new(false),
        finished: Mutex::new(false),
        stateless: Mutex::new(Vec::new()),
        kinds: Mutex::new(Vec::new()),
        first_walk_error: Mutex::new(None),
        pool: Pool::new(buffers::alloc_buffer),
        started_ns,
        takeover_noted: AtomicBool::new(false),
        yielding: AtomicBool::new(false),
        yielded: AtomicBool::new(false),
        launches_at_yield: AtomicU64::new(0),
        finalized: AtomicBool::new(false),
        refusal_noted: AtomicBool::new(false),
        kinds_on: AtomicBool::new(false),
        stats: Stats::default(),
        config,
    };
    if STATE.set(state).is_err() {
        return true;
    }
    let s = STATE.get().expect("just set");
    s.pool.refill(buffers::alloc_buffer);
    // autograd hook: forward launches from the first on (no symbol table
    // read here; the flush thread reads it).
    if let Some((line, off)) = s.autograd.as_ref().and_then(|a| a.discover_exports()) {
        s.log.line(&line);
        if off {
            lock(&s.sink).note(line);
        }
    }
    match enable(s, sub).inspect_err(|_| undo(s, sub)) {
        Ok(n) => {
            watch_other_clients(s);
            s.log.line(&format!(
                "recording to `{}`: {n} API callbacks enabled",
                s.config.trace.display()
            ));
            if let Some(sock) = &s.config.sync {
                wait_for_profiler(sock, &s.log);
            }
            true
        }
        Err(e) => {
            s.disabled.store(true, Relaxed);
            s.log.line(&format!("not recording: {e}"));
            lock(&s.sink).note(format!("not recorded: {e}"));
            false
        }
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
fn watch_other_clients(s: &State) {
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

/// Waits until the CPU profiler behind `sock` has attached its entry probes to
/// this process's CUDA libraries, which are loaded by now: `cuInit` runs us.
/// The profiler learns our pid from the socket's peer credentials. If it does
/// not answer in time, the launches go on and take their stacks at the marker.
fn wait_for_profiler(sock: &Path, log: &Log) {
    let started = Instant::now();
    let r = (|| -> io::Result<()> {
        let mut s = UnixStream::connect(sock)?;
        s.set_read_timeout(Some(Duration::from_secs(10)))?;
        s.set_write_timeout(Some(Duration::from_secs(10)))?;
        s.write_all(b"?")?;
        let mut ack = [0u8; 1];
        s.read_exact(&mut ack)
    })();
    match r {
        Ok(()) => log.line(&format!(
            "CPU profiler ready after {:.1} ms",
            started.elapsed().as_secs_f64() * 1e3
        )),
        Err(e) => log.line(&format!(
            "CPU profiler at `{}` did not answer ({e}); going on",
            sock.display()
        )),
    }
}

/// capture hook: CUPTI makes activity records only while the capture window
/// is open, so that a launch outside it costs CUPTI no record and gpuperf no
/// decoding. Called after the window opened or closed, outside the window's
/// lock (CUPTI may hand buffers over inside these calls, and the buffer
/// handler reads the window). The kinds' lock orders concurrent changes: each
/// call makes CUPTI agree with the window as it is when the call holds the
/// lock, so the last change wins.
///
/// CUPTI decides whether to make a record when the activity is issued (the
/// launch, the copy's call): work issued inside a window and still running
/// when it closes keeps its record. Records already in CUPTI's buffers stay
/// there for the next flush; disabling a kind does not discard them.
pub(crate) fn window_changed() {
    let Some(s) = STATE.get() else { return };
    let kinds = lock(&s.kinds);
    let open = capture::recording();
    // Once the exit path took the kinds (drained), or another client owns
    // them, they are left alone.
    if s.kinds_on.load(Relaxed) == open
        || kinds.is_empty()
        || s.yielded.load(Relaxed)
        || s.finalized.load(Relaxed)
        || s.closing.load(Relaxed)
    {
        return;
    }
    for &kind in kinds.iter() {
        let r = if open {
            s.cupti.activity_enable(kind)
        } else {
            s.cupti.activity_disable(kind)
        };
        if let Err(e) = r {
            s.log.line(&format!("capture window: {e}"));
        }
    }
    s.kinds_on.store(open, Relaxed);
}

/// Disables the kinds [`enable`] turned on and drops the subscription (with it
/// every callback). The buffer and clock callbacks stay registered: CUPTI has
/// no call to remove them, and with no kind enabled they are never called.
fn undo(s: &State, sub: Subscriber) {
    for kind in lock(&s.kinds).drain(..) {
        if let Err(e) = s.cupti.activity_disable(kind) {
            s.log.line(&e.to_string());
        }
    }
    if let Err(e) = s.cupti.unsubscribe(sub) {
        s.log.line(&e.to_string());
    }
}

/// CUPTI's clock and CLOCK_MONOTONIC at one instant: CUPTI's reading between
/// two of ours, the midpoint of the closest of a few tries.
fn clock_pair(c: &Cupti) -> Result<(u64, u64), crate::CuptiError> {
    let mut best: Option<(u64, u64, u64)> = None;
    for _ in 0..5 {
        let a = monotonic_ns();
        let t = c.timestamp()?;
        let b = monotonic_ns();
        if best.is_none_or(|(w, _, _)| b - a < w) {
            best = Some((b - a, t, a + (b - a) / 2));
        }
    }
    let (_, t, m) = best.expect("five tries");
    Ok((t, m))
}

/// Everything after `cuptiSubscribe`; returns the number of API callbacks
/// enabled. On failure the caller runs [`undo`], so that the application does not
/// carry CUPTI's overhead and another tool can subscribe.
fn enable(s: &'static State, sub: Subscriber) -> Result<usize> {
    let c = &s.cupti;
    // The clock must be in place before any activity is enabled. Refused, CUPTI
    // keeps its default clock: one pair of readings converts its records.
    if let Err(e) = c.register_timestamp(timestamp) {
        let (cupti_ns, mono_ns) = clock_pair(c).map_err(|_| e.clone())?;
        s.clock_shift
            .store(mono_ns as i64 - cupti_ns as i64, Relaxed);
        s.log.line(&format!(
            "{e}; GPU times converted from CUPTI's own clock: {cupti_ns} ns there is \
             {mono_ns} ns CLOCK_MONOTONIC"
        ));
    }
    c.set_thread_id_type(CUpti_ActivityThreadIdType::CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM as u32)?;
    c.register_buffers(buffer_requested, buffer_completed)?;
    for (kind, name) in decode::ENABLED_KINDS {
        match c.activity_enable(kind as u32) {
            Ok(()) => lock(&s.kinds).push(kind as u32),
            Err(e) if name == "CONCURRENT_KERNEL" => return Err(e.into()),
            Err(e) => s.log.line(&format!("{name} records unavailable: {e}")),
        }
    }
    s.kinds_on.store(true, Relaxed);
    // Turns the kinds off again when the window starts closed.
    capture::configure(&s.config.window);
    let profiler_api = s.config.window.range == capture::Range::ProfilerApi;
    let mut enabled = 0;
    for (d, domain) in [RUNTIME, DRIVER].into_iter().enumerate() {
        for (cbid, class) in s.classes[d].iter().enumerate() {
            let window = matches!(class, Class::ProfilerStart | Class::ProfilerStop);
            if class.recorded() || *class == Class::Scope || (window && profiler_api) {
                c.enable_callback(sub, domain, cbid as u32)?;
                enabled += 1;
            }
        }
    }
    c.enable_callback(sub, RESOURCE, CONTEXT_DESTROY)?;
    if let Err(e) = c.enable_callback(sub, STATE_DOMAIN, FATAL_ERROR) {
        s.log
            .line(&format!("CUPTI's fatal errors will not be noted: {e}"));
    }
    if let Err(e) = c.enable_callback(sub, RESOURCE, CONTEXT_CREATED) {
        s.log
            .line(&format!("devices of synchronizations may be unknown: {e}"));
    }
    // stacks hook: where graph nodes come from, and when they go.
    if s.stacks.is_some() {
        for cbid in [
            stacks::GRAPHNODE_CREATED,
            stacks::GRAPHNODE_CLONED,
            stacks::GRAPHNODE_DESTROY_STARTING,
        ] {
            if let Err(e) = c.enable_callback(sub, RESOURCE, cbid) {
                s.log.line(&format!("graph node origins unavailable: {e}"));
            }
        }
        // Only to know when a thread is copying a graph (its copies take no
        // stack) or tearing one down (node updates are applied together at
        // the call's end); failing that, copies take one each.
        for (d, domain) in [RUNTIME, DRIVER].into_iter().enumerate() {
            for (cbid, class) in s.classes[d].iter().enumerate() {
                if matches!(class, Class::GraphCopy | Class::GraphTeardown)
                    && let Err(e) = c.enable_callback(sub, domain, cbid as u32)
                {
                    s.log.line(&format!(
                        "graph copies will take stacks, or node teardowns be applied one by one: {e}"
                    ));
                }
            }
        }
    }
    if let Err(e) = c.flush_period(s.config.flush_ms) {
        s.log
            .line(&format!("periodic CUPTI flush unavailable: {e}"));
    }
    // SAFETY: both handlers are `extern "C"` functions of this library, which the
    // driver never unloads once initialization succeeded.
    unsafe {
        libc::atexit(at_exit);
        libc::pthread_atfork(None, None, Some(in_forked_child));
    }
    if s.config.flush_on_signal {
        match crate::interrupt::install(close_on_signal) {
            Ok(sigs) if !sigs.is_empty() => s.log.line(&format!(
                "the trace is closed before signals {sigs:?} end the program"
            )),
            Ok(_) => s
                .log
                .line("SIGINT and SIGTERM are handled by the program: no flush on them"),
            Err(e) => s.log.line(&format!("no flush on SIGINT/SIGTERM: {e}")),
        }
    }
    if s.config.window.delay_ns > 0 {
        let at = s.started_ns.saturating_add(s.config.window.delay_ns);
        let timer = crate::threads::spawn_blocked("gpuperf-delay", move || {
            let now = monotonic_ns();
            if at > now {
                std::thread::sleep(Duration::from_nanos(at - now));
            }
            capture::delay_done();
        });
        if let Err(e) = timer {
            // Recording the whole run beats recording nothing.
            s.log
                .line(&format!("no delay timer ({e}): recording from now"));
            capture::delay_done();
        }
    }
    let period = Duration::from_millis(u64::from(s.config.flush_ms));
    // Signals blocked from birth: a handler of the application's that makes
    // CUDA calls must not run here, where the flush holds the sink and
    // stack-table locks its callbacks would take.
    let spawned = crate::threads::spawn_blocked("gpuperf-flush", move || {
        // Inside gpuperf for good: a CUDA call that the program's allocator
        // makes when this thread allocates (holding the sink or shard-list
        // lock) returns at once, counted, instead of taking them again.
        let _inside = Inside::enter();
        s.discover_autograd();
        let (m, cv) = &s.stop;
        let mut stopped = lock(m);
        while !*stopped {
            stopped = cv
                .wait_timeout(stopped, period)
                .map_or_else(|e| e.into_inner().0, |r| r.0);
            if *stopped {
                break;
            }
            drop(stopped);
            // Unforced: it returns every buffer whose records are complete,
            // full or not, and leaves kernels still running for later.
            s.flush(Flush::Periodic);
            s.pool.refill(buffers::alloc_buffer);
            // Libraries loaded since may call CUPTI too.
            watch_other_clients(s);
            s.discover_autograd();
            stopped = lock(m);
        }
    });
    if let Err(e) = spawned {
        // CUPTI's own periodic flush and the exit flush still run.
        s.log.line(&format!("no flush thread: {e}"));
    }
    Ok(enabled)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_names_are_compared_not_taken_from_the_pointer() {
        let dir = std::env::temp_dir().join(format!("gpuperf-sink-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (mut sink, _) = Sink::create(&dir.join("t.gputrace"), 0).unwrap();
        fn name(sink: &mut Sink, p: *const u8) -> StringId {
            // SAFETY: every caller passes null or a NUL-terminated buffer it owns.
            unsafe { sink.kernel_name(p.cast()) }
        }
        // One buffer, as CUPTI's record storage reused for another name.
        let mut storage = *b"_Z5firstv\0";
        let first = name(&mut sink, storage.as_ptr());
        assert_eq!(name(&mut sink, storage.as_ptr()), first);
        storage[..9].copy_from_slice(b"_Z5otherv");
        let other = name(&mut sink, storage.as_ptr());
        assert_ne!(other, first);
        assert_eq!(sink.strings.get(other), "_Z5otherv");
        // Another pointer with an earlier name's text.
        assert_eq!(name(&mut sink, c"_Z5firstv".as_ptr().cast()), first);
        assert_eq!(sink.strings.get(first), "_Z5firstv");
        let lossy = name(&mut sink, [0x66u8, 0xff, 0].as_ptr());
        assert_eq!(sink.strings.get(lossy), "f\u{fffd}");
        let unnamed = name(&mut sink, ptr::null());
        assert_eq!(sink.strings.get(unnamed), "<unnamed kernel>");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
