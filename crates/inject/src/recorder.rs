//! The recorder: CUPTI set-up, the callbacks, buffering and the trace file.
//!
//! Threads and locks. API callbacks run on the application's threads and touch
//! only that thread's [`Shard`], whose lock is uncontended except while the flush
//! thread swaps it out. Activity buffers arrive on CUPTI's thread or inside a flush;
//! both drain the shards first, then write under the [`Sink`] lock. Flushes are
//! serialized by `flush_lock`, because concurrent `cuptiActivityFlushAll` calls can
//! deadlock. Lock order: `flush_lock`, then a shard, then the sink; a shard lock is
//! never held while taking another lock.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{CStr, c_char, c_void};
use std::fs::File;
use std::io::{self, BufWriter, Read as _, Write as _};
use std::mem::offset_of;
use std::os::unix::net::UnixStream;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use gpuperf_merge::gputrace::Writer;
use gpuperf_merge::model::{
    Activity, ActivityKind, ApiCall, ApiDomain, Device, DropSource, Dropped, MemcpyKind, Note,
    Overhead, Process, Record, SIMULATED_GPU_NOTE, StringId, StringTable, api_base_name,
};

use crate::api::{Class, classify};
use crate::config::{Config, MarkerMode};
use crate::cupti::{Cupti, Subscriber};
use crate::decode::{self, Decoded, Place};
use crate::error::{Error, Result};
use crate::locate;
use crate::log::Log;
use crate::sys::{
    self, CUpti_ActivityThreadIdType, CUpti_ApiCallbackSite, CUpti_CallbackData,
    CUpti_CallbackDomain, CUpti_CallbackIdResource,
};

const RUNTIME: u32 = CUpti_CallbackDomain::CUPTI_CB_DOMAIN_RUNTIME_API as u32;
const DRIVER: u32 = CUpti_CallbackDomain::CUPTI_CB_DOMAIN_DRIVER_API as u32;
const RESOURCE: u32 = CUpti_CallbackDomain::CUPTI_CB_DOMAIN_RESOURCE as u32;
const ENTER: u32 = CUpti_ApiCallbackSite::CUPTI_API_ENTER as u32;
const CONTEXT_DESTROY: u32 =
    CUpti_CallbackIdResource::CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING as u32;
const FLUSH_FORCED: u32 = 1;
/// Callback ids are probed up to this bound, past any CUDA 13 id.
const MAX_CBID: u32 = 2048;
/// Size of each activity buffer handed to CUPTI.
const BUFFER_SIZE: usize = 2 << 20;
/// API records a thread may hold between flushes before new ones are dropped.
const SHARD_CAP: usize = 4 << 20;
/// Aliases kept per generation; two generations are searched.
const ALIAS_GENERATION: usize = 1 << 20;

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

/// One API call as the callback saw it; names are resolved when written.
#[derive(Copy, Clone)]
struct RawApi {
    start_ns: u64,
    end_ns: u64,
    correlation_id: u32,
    tid: u32,
    cbid: u32,
    driver: bool,
}

#[derive(Default)]
struct ShardData {
    api: Vec<RawApi>,
    /// (nested driver call's id, enclosing runtime call's id).
    aliases: Vec<(u32, u32)>,
    dropped: u64,
}

/// One thread's pending API records.
#[derive(Default)]
struct Shard(Mutex<ShardData>);

struct Open {
    correlation_id: u32,
    start_ns: u64,
    cbid: u32,
    domain: u32,
    nested: bool,
}

#[derive(Default)]
struct Local {
    shard: Option<Arc<Shard>>,
    tid: u32,
    open: Vec<Open>,
    runtime_depth: u32,
}

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
}

struct Sink {
    writer: Option<Writer<BufWriter<File>>>,
    strings: StringTable,
    pid: u32,
    api_names: [Vec<Option<StringId>>; 2],
    context_device: HashMap<u32, u32>,
    aliases: [HashMap<u32, u32>; 2],
    write_errors: u64,
    first_error: Option<String>,
}

impl Sink {
    fn create(path: &Path) -> Result<Self> {
        let file = File::create(path).map_err(|source| Error::Output {
            path: path.to_owned(),
            source,
        })?;
        let writer = Writer::new(BufWriter::with_capacity(1 << 20, file)).map_err(|source| {
            Error::Output {
                path: path.to_owned(),
                source,
            }
        })?;
        Ok(Self {
            writer: Some(writer),
            strings: StringTable::new(),
            pid: std::process::id(),
            api_names: [Vec::new(), Vec::new()],
            context_device: HashMap::new(),
            aliases: [HashMap::new(), HashMap::new()],
            write_errors: 0,
            first_error: None,
        })
    }

    fn write(&mut self, rec: &Record) {
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
    stats: Stats,
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
                self.flush(false);
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
            self.flush(false);
        }
        let _ = LOCAL.try_with(|l| {
            let mut l = l.borrow_mut();
            if site == ENTER {
                self.enter(&mut l, domain, cbid, correlation_id, class);
            } else {
                self.exit(&mut l, correlation_id);
            }
        });
    }

    fn enter(&self, l: &mut Local, domain: u32, cbid: u32, correlation_id: u32, class: Class) {
        let outer = l
            .open
            .iter()
            .rev()
            .find(|o| !o.nested)
            .map(|o| o.correlation_id);
        if domain == DRIVER && l.runtime_depth > 0 {
            // A driver call made by a runtime call we already record: its GPU work
            // is charged to the runtime call.
            self.stats.nested.fetch_add(1, Relaxed);
            if let Some(outer) = outer.filter(|&o| o != correlation_id) {
                let shard = self.shard(l);
                lock(&shard.0).aliases.push((correlation_id, outer));
            }
            l.open.push(Open {
                correlation_id,
                start_ns: 0,
                cbid,
                domain,
                nested: true,
            });
            return;
        }
        if domain == RUNTIME {
            l.runtime_depth += 1;
        }
        l.open.push(Open {
            correlation_id,
            start_ns: monotonic_ns(),
            cbid,
            domain,
            nested: false,
        });
        if class.fires_marker() && self.marker_on() {
            crate::gpuperf_launch_marker(
                u64::from(correlation_id),
                (u64::from(domain) << 32) | u64::from(cbid),
            );
        }
    }

    fn exit(&self, l: &mut Local, correlation_id: u32) {
        let end_ns = monotonic_ns();
        let Some(i) = l
            .open
            .iter()
            .rposition(|o| o.correlation_id == correlation_id)
        else {
            return;
        };
        let o = l.open.remove(i);
        if o.nested {
            return;
        }
        if o.domain == RUNTIME {
            l.runtime_depth = l.runtime_depth.saturating_sub(1);
        }
        if l.tid == 0 {
            l.tid = gettid();
        }
        let rec = RawApi {
            start_ns: o.start_ns,
            end_ns,
            correlation_id,
            tid: l.tid,
            cbid: o.cbid,
            driver: o.domain == DRIVER,
        };
        let shard = self.shard(l);
        let mut s = lock(&shard.0);
        if s.api.len() < SHARD_CAP {
            s.api.push(rec);
        } else {
            s.dropped += 1;
        }
    }

    fn shard(&self, l: &mut Local) -> Arc<Shard> {
        l.shard
            .get_or_insert_with(|| {
                let s = Arc::new(Shard::default());
                lock(&self.shards).push(s.clone());
                s
            })
            .clone()
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
        let mut dropped = 0;
        for s in &shards {
            let mut d = lock(&s.0);
            api.append(&mut d.api);
            aliases.append(&mut d.aliases);
            dropped += std::mem::take(&mut d.dropped);
        }
        if api.is_empty() && aliases.is_empty() && dropped == 0 {
            return;
        }
        let mut sink = lock(&self.sink);
        for (nested, outer) in aliases {
            sink.add_alias(nested, outer);
        }
        for a in &api {
            let rec = self.api_record(&mut sink, a);
            sink.write(&rec);
        }
        self.stats.api.fetch_add(api.len() as u64, Relaxed);
        if dropped > 0 {
            let pid = self.pid;
            sink.write(&Record::Dropped(Dropped {
                pid,
                source: DropSource::Writer,
                count: dropped,
            }));
        }
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
        let mut n = 0u64;
        for rec in self.cupti.records(buf, valid) {
            n += 1;
            match decode::decode(rec) {
                Some(d) => self.write_decoded(&mut sink, d),
                None => {
                    self.stats.short_records.fetch_add(1, Relaxed);
                }
            }
        }
        self.stats.activities.fetch_add(n, Relaxed);
        // SAFETY: `context` is the one CUPTI passed with this buffer.
        let dropped = unsafe { self.cupti.dropped_records(context, stream) } as u64;
        if dropped > 0 {
            self.stats.cupti_dropped.fetch_add(dropped, Relaxed);
            let pid = self.pid;
            sink.write(&Record::Dropped(Dropped {
                pid,
                source: DropSource::CuptiActivity,
                count: dropped,
            }));
        }
    }

    fn write_decoded(&self, sink: &mut Sink, d: Decoded) {
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
                let text = unsafe { c_text(name) };
                let name = sink
                    .strings
                    .intern(text.as_deref().unwrap_or("<unnamed kernel>"));
                sink.context_device
                    .entry(place.context)
                    .or_insert(place.device);
                activity(sink, place, ActivityKind::Kernel { name, grid, block })
            }
            Decoded::Memcpy {
                place,
                copy_kind,
                bytes,
            } => activity(
                sink,
                place,
                ActivityKind::Memcpy {
                    kind: MemcpyKind::from_u8(copy_kind),
                    bytes,
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
                },
            ),
            Decoded::Overhead {
                kind,
                start_ns,
                end_ns,
            } => {
                let kind = sink.strings.intern(decode::overhead_name(kind));
                Record::Overhead(Overhead {
                    pid,
                    kind,
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
    fn flush(&self, forced: bool) {
        if self.disabled.load(Relaxed) {
            return;
        }
        let _g = lock(&self.flush_lock);
        if let Err(e) = self.cupti.flush_all(if forced { FLUSH_FORCED } else { 0 }) {
            self.log.line(&e.to_string());
        }
        self.drain_shards();
        lock(&self.sink).flush();
    }

    /// The exit path: final flush, counters, and no writes afterwards.
    fn finish(&self) {
        {
            let (m, cv) = &self.stop;
            *lock(m) = true;
            cv.notify_all();
        }
        self.flush(true);
        if self.disabled.swap(true, Relaxed) {
            return;
        }
        let s = &self.stats;
        let mut sink = lock(&self.sink);
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
        sink.flush();
        self.log.line(&format!(
            "done: {} API records, {} activity records in {} buffers, {} dropped by CUPTI, \
             {} nested driver calls ({} activities charged to the enclosing runtime call), \
             {} records of other kinds, {} too short",
            s.api.load(Relaxed),
            s.activities.load(Relaxed),
            s.buffers.load(Relaxed),
            s.cupti_dropped.load(Relaxed),
            s.nested.load(Relaxed),
            s.aliased.load(Relaxed),
            s.unknown_kinds.load(Relaxed),
            s.short_records.load(Relaxed),
        ));
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

unsafe extern "C" fn api_callback(_: *mut c_void, domain: u32, cbid: u32, data: *const c_void) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        if let Some(s) = STATE.get()
            && !s.disabled.load(Relaxed)
        {
            s.on_api(domain, cbid, data);
        }
    }));
}

unsafe extern "C" fn buffer_requested(buf: *mut *mut u8, size: *mut usize, max: *mut usize) {
    let layout = std::alloc::Layout::from_size_align(BUFFER_SIZE, 8).expect("constant layout");
    // SAFETY: the layout has a non-zero size.
    let p = unsafe { std::alloc::alloc(layout) };
    // SAFETY: CUPTI passes valid out-pointers. A null buffer makes CUPTI drop
    // records, which it then counts.
    unsafe {
        *buf = p;
        *size = if p.is_null() { 0 } else { BUFFER_SIZE };
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
    let _ = catch_unwind(AssertUnwindSafe(|| {
        if let Some(s) = STATE.get()
            && !s.disabled.load(Relaxed)
        {
            // SAFETY: CUPTI returns a buffer from `buffer_requested`, `size` bytes long.
            let slice = unsafe { std::slice::from_raw_parts_mut(buf, size) };
            s.consume(context, stream, slice, valid);
        }
    }));
    if size == BUFFER_SIZE {
        let layout = std::alloc::Layout::from_size_align(BUFFER_SIZE, 8).expect("constant layout");
        // SAFETY: allocated in `buffer_requested` with this layout.
        unsafe { std::alloc::dealloc(buf, layout) };
    }
}

unsafe extern "C" fn timestamp() -> u64 {
    monotonic_ns()
}

extern "C" fn at_exit() {
    let _ = catch_unwind(|| {
        if let Some(s) = STATE.get() {
            s.finish();
        }
    });
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

/// Loads the first candidate that is a usable libcupti.
fn load_cupti(config: &Config, log: &Log) -> Result<Cupti> {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    let var = |k: &str| {
        if k == "GPUPERF_CUPTI_PATH" {
            config.cupti.clone().map(PathBuf::into_os_string)
        } else {
            std::env::var_os(k)
        }
    };
    let inputs = locate::Inputs {
        var: &var,
        maps: &maps,
        self_dir: locate::dir_of_mapping(&maps, load_cupti as *const () as usize),
        system_roots: locate::system_roots(),
    };
    for path in locate::candidates(&inputs) {
        let explicit = config.cupti.as_deref() == Some(path.as_path());
        match Cupti::load(&path) {
            Ok(c) => return Ok(c),
            // The user's explicit choice failing is the error to report.
            Err(e) if explicit => return Err(e),
            // Bare sonames the loader cannot find are the common case, not news.
            Err(e) if path.is_absolute() => log.line(&format!("skipped: {e}")),
            Err(_) => {}
        }
    }
    Err(Error::CuptiNotFound {
        searched: locate::describe(&inputs),
    })
}

fn supported(version: u32) -> bool {
    (19..=99).contains(&version) || (130_000..140_000).contains(&version)
}

/// Everything `InitializeInjection` does. Returns whether recording started; when
/// it did not, the trace says why.
pub fn initialize() -> bool {
    // This library carries its own copy of std, so this hook sees only its own
    // panics: they go to the log, never to the application's stderr.
    std::panic::set_hook(Box::new(|info| {
        if let Some(s) = STATE.get() {
            s.log.line(&format!("internal error: {info}"));
        }
    }));
    let pid = std::process::id();
    let config = Config::from_env(|k| std::env::var_os(k), pid);
    let log = Log::open(&config.log, pid);
    for w in &config.warnings {
        log.line(w);
    }
    let mut sink = match Sink::create(&config.trace) {
        Ok(s) => s,
        Err(e) => {
            log.line(&format!("not recording: {e}"));
            return false;
        }
    };
    sink.write(&process_record(pid));
    sink.flush();
    let cupti = match load_cupti(&config, &log).and_then(|c| {
        let v = c.version()?;
        if supported(v) {
            Ok((c, v))
        } else {
            Err(Error::UnsupportedVersion {
                path: c.path().to_owned(),
                version: v,
            })
        }
    }) {
        Ok(c) => c,
        Err(e) => {
            log.line(&format!("not recording: {e}"));
            sink.note(format!("not recorded: {e}"));
            return false;
        }
    };
    let (cupti, version) = cupti;
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
    let state = State {
        cupti,
        log,
        pid,
        classes,
        names,
        sink: Mutex::new(sink),
        shards: Mutex::new(Vec::new()),
        flush_lock: Mutex::new(()),
        stop: (Mutex::new(false), Condvar::new()),
        disabled: AtomicBool::new(false),
        stats: Stats::default(),
        config,
    };
    if STATE.set(state).is_err() {
        return true;
    }
    let s = STATE.get().expect("just set");
    match start(s) {
        Ok(n) => {
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

/// Subscribes and enables; returns the number of API callbacks enabled.
fn start(s: &'static State) -> Result<usize> {
    let c = &s.cupti;
    let sub: Subscriber = c.subscribe(api_callback).map_err(|e| {
        if e.status == sys::MULTIPLE_SUBSCRIBERS {
            Error::CuptiBusy
        } else {
            Error::Cupti(e)
        }
    })?;
    // The clock must be in place before any activity is enabled.
    c.register_timestamp(timestamp)?;
    c.set_thread_id_type(CUpti_ActivityThreadIdType::CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM as u32)?;
    c.register_buffers(buffer_requested, buffer_completed)?;
    for (kind, name) in decode::ENABLED_KINDS {
        if let Err(e) = c.activity_enable(kind as u32) {
            if name == "CONCURRENT_KERNEL" {
                return Err(e.into());
            }
            s.log.line(&format!("{name} records unavailable: {e}"));
        }
    }
    let mut enabled = 0;
    for (d, domain) in [RUNTIME, DRIVER].into_iter().enumerate() {
        for (cbid, class) in s.classes[d].iter().enumerate() {
            if class.recorded() {
                c.enable_callback(sub, domain, cbid as u32)?;
                enabled += 1;
            }
        }
    }
    c.enable_callback(sub, RESOURCE, CONTEXT_DESTROY)?;
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
    let period = Duration::from_millis(u64::from(s.config.flush_ms));
    let spawned = std::thread::Builder::new()
        .name("gpuperf-flush".into())
        .spawn(move || {
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
                // Not forced: a forced flush hands back records of work still in
                // flight with their end time 0, and CUPTI never delivers them
                // again. An unforced flush returns every buffer whose records
                // are all complete, full or not (cuptiActivityFlushAll's docs).
                s.flush(false);
                stopped = lock(m);
            }
        });
    if let Err(e) = spawned {
        // CUPTI's own periodic flush and the exit flush still run.
        s.log.line(&format!("no flush thread: {e}"));
    }
    Ok(enabled)
}
