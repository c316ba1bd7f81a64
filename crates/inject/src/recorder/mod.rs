//! The recorder: CUPTI set-up, the callbacks, buffering and the trace file.
//!
//! One module for each: `setup` (finding CUPTI, `InitializeInjection`, the kinds
//! and callbacks enabled, the flush thread), `callbacks` (the API calls on the
//! application's threads), `buffering` (shards and CUPTI's activity buffers into
//! the trace, and flushes), `sink` (the trace file), and two for the edges of a
//! run: `other_clients` (another CUPTI client taking over) and `closing` (the
//! exit path). This module holds what they share: the [`State`] and its counters.
//!
//! Threads and locks. API callbacks run on the application's threads and touch
//! only that thread's [`Shard`], whose lock is uncontended except while the flush
//! thread swaps it out. Activity buffers arrive on CUPTI's thread or inside a flush;
//! both drain the shards first, then write under the [`Sink`] lock. Flushes are
//! serialized by `flush_lock`, because concurrent `cuptiActivityFlushAll` calls can
//! deadlock. Lock order: `flush_lock`, then the list of shards ([`Shards`]), then a
//! shard, then the sink; a shard lock is never held while taking another lock. A
//! thread's first recorded call takes the list's lock to claim its shard, and
//! allocates one (fallibly) outside it. The queue of buffers handed back inside
//! a flush in a callback ([`deferred`]) comes after `flush_lock`, before the
//! list of shards: it is held while the buffers waiting are decoded, in order.
//!
//! CUPTI has an internal lock of its own, held while its thread delivers buffers
//! and while it runs resource callbacks, and taken by `cuptiActivityFlushAll` and
//! `cuptiActivityGetNumDroppedRecords`. So no CUPTI function is called under the
//! sink or a shard lock, and a callback never waits for `flush_lock` held by a
//! flush inside CUPTI (it skips its flush; the last context's waits, bounded, for
//! one in gpuperf's own code). The exit path waits for a flush in progress,
//! but not for one stuck inside a CUPTI call ([`STUCK_IN_CUPTI_NS`]), and makes
//! its own CUPTI calls on a thread it waits for as long: once one is stuck, it
//! writes what gpuperf holds and calls CUPTI no more.

use std::ffi::{CStr, c_char};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::Duration;

mod buffering;
mod callbacks;
mod closing;
mod deferred;
mod other_clients;
mod setup;
mod sink;
mod tally;

pub use setup::initialize;

use callbacks::Local;
use sink::Sink;

use crate::api::Class;
use crate::buffers::Pool;
use crate::config::{Config, MarkerMode};
use crate::cupti::Cupti;
use crate::guard::lock;
use crate::log::Log;
use crate::shard::Shards;
use crate::stacks::Stacks;
use crate::sys::{
    CUpti_ApiCallbackSite, CUpti_CallbackDomain, CUpti_CallbackIdResource, CUpti_CallbackIdState,
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
const MODULE_LOADED: u32 = CUpti_CallbackIdResource::CUPTI_CBID_RESOURCE_MODULE_LOADED as u32;
/// `CUPTI_ACTIVITY_FLAG_FLUSH_FORCED`: also returns buffers holding records of
/// work still running, which are then delivered with `end = 0` and never again.
/// Used at exit, before the kinds are disabled, and when the last context is
/// destroyed.
const FLUSH_FORCED: u32 = 1;
/// How long the exit path waits for a CUPTI call, its own or a flush in
/// progress: a driver that stopped answering (a GPU fallen off the bus) keeps
/// it there for good, and the program's exit must not wait with it.
const STUCK_IN_CUPTI_NS: u64 = 10_000_000_000;
/// How long the last context's flush waits, inside its destruction's callback,
/// for another flush running gpuperf's own code (decoding, writing): it is the
/// last flush CUPTI can make, and skipping it leaves CUPTI's buffers of that
/// context to a flush without a context.
const LAST_CONTEXT_WAIT: Duration = Duration::from_millis(500);
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
    /// Of those, the last context's forced flush: another flush was inside
    /// CUPTI, or ran gpuperf's code past [`LAST_CONTEXT_WAIT`].
    skipped_last_context: AtomicU64,
    /// Records whose timestamps are not CLOCK_MONOTONIC, not written.
    foreign_clock: AtomicU64,
    /// API records written of calls that make GPU work (launches, copies,
    /// memsets): each has a GPU record while our kinds are enabled.
    launches: AtomicU64,
    /// Calls not recorded: more than `MAX_OPEN` open on one thread.
    too_deep: AtomicU64,
    /// Calls not recorded: their thread's list of open calls could not be
    /// allocated (memory short at its first calls).
    no_room: AtomicU64,
    /// Calls not recorded: their thread's shard could not be allocated
    /// (memory short at its first recorded calls, and no spare shard).
    no_shard: AtomicU64,
    /// Calls not recorded: their thread's state was destroyed, and its entry
    /// among such threads' (`State::stateless`) could not be allocated.
    no_stateless_room: AtomicU64,
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
    /// Of those, the calls made while `gpuperf_bench_stacks_off` was set.
    stacks_paused: AtomicU64,
    /// Buffers handed back inside a flush in a callback that waited for the
    /// flush thread to decode them.
    deferred: AtomicU64,
    /// Buffers handed back inside a flush in a callback and decoded there,
    /// allocating on the application's thread: the queue was full, their
    /// names did not fit, or the exit path ran.
    decoded_in_callback: AtomicU64,
    /// Flushes inside a callback that CUPTI refused, and the status of the
    /// last (its message is made at exit: not allocated in the callback).
    callback_flush_errors: AtomicU64,
    callback_flush_status: AtomicU32,
}

/// Who asks for a flush, which decides its flag and whether it may wait (the
/// exit path's is `State::flush_final`).
#[derive(Copy, Clone, PartialEq, Eq)]
enum Flush {
    /// The flush thread, once a period: unforced.
    Periodic,
    /// The flush thread, woken by a callback within a period: it decodes the
    /// buffers a flush in a callback handed back and writes what the threads
    /// hold (graph nodes), with no CUPTI call, so that the callback's context
    /// destruction that may follow finds no flush of ours inside CUPTI.
    Woken,
    /// `cudaDeviceReset` or context teardown, inside a CUPTI callback: unforced,
    /// and skipped when another flush is running. It only has CUPTI hand its
    /// buffers back, which wait for the flush thread (nothing allocated).
    InCallback,
    /// The last live context is being destroyed, inside its callback: forced
    /// (no flush may follow without a context), and it waits a while for a
    /// flush in progress in gpuperf's own code; otherwise as `InCallback`.
    LastContext,
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
    shards: Shards,
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
    /// Set when the exit path starts its final flush: calls from then on go
    /// on being recorded (even once `disabled` is set); those the last drain
    /// takes are written, later ones are kept in their shards only to be
    /// counted (see `report_after_close`).
    closing: AtomicBool,
    /// Set when the stack table was written for the last time (or the exit
    /// path ended without writing): stacks taken from then on could never be
    /// written, so none are taken. Until then, a call entered while the exit
    /// path runs takes its stack, as its API record may still be written.
    stacks_done: AtomicBool,
    /// CLOCK_MONOTONIC when a flush entered CUPTI (its flush, or reading PC
    /// samples); 0 while none is inside. The exit path
    /// waits for a flush in progress only until that call is
    /// [`STUCK_IN_CUPTI_NS`] old.
    in_cupti_since: AtomicU64,
    /// The exit path gave up on a CUPTI call stuck inside for
    /// [`STUCK_IN_CUPTI_NS`]: no CUPTI call of ours follows, as CUPTI's lock
    /// may be held for good.
    gave_up_on_cupti: AtomicBool,
    /// Whether the exit path ran (or runs): a second one, a signal's close
    /// during `exit`, waits for it and does nothing.
    finished: Mutex<bool>,
    /// The recorder state of threads whose own was destroyed (calls from
    /// destructors at exit), by thread id, while they have calls open. Grown
    /// only fallibly: it grows inside the application's calls.
    stateless: Mutex<Vec<(u32, Local)>>,
    /// The activity kinds enabled, to disable at exit. Its lock also orders
    /// the capture window's turning them off and on ([`setup::window_changed`]).
    kinds: Mutex<Vec<u32>>,
    /// Whether `kinds` are on in CUPTI now (written under `kinds`' lock):
    /// off while a capture window is closed.
    kinds_on: AtomicBool,
    first_walk_error: Mutex<Option<String>>,
    /// The reserve for when buffers cannot be allocated.
    pool: Pool,
    /// Buffers handed back inside a flush in a callback, waiting for the
    /// flush thread.
    deferred: Mutex<deferred::Deferred>,
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
    /// Callbacks entered, by call.
    tally: tally::Tally,
    /// In-process stacks, unless `GPUPERF_STACKS=0`. (stacks hook)
    stacks: Option<Stacks>,
    /// PyTorch autograd ids of launches, with stacks, unless
    /// `GPUPERF_AUTOGRAD=0`. (autograd hook)
    autograd: Option<crate::autograd::Autograd>,
    /// GPU PC sampling, with `GPUPERF_PC_SAMPLING`. (pcsampling hook)
    pc: Option<crate::pcsampling::Sampler>,
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
