//! CUPTI set-up: finding and loading libcupti, `InitializeInjection`'s work,
//! the kinds and callbacks enabled, and the flush thread.

use std::io::{self, Read as _, Write as _};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use gpuperf_merge::model::{Process, ProcessOrigin, Record, SIMULATED_GPU_NOTE};
use gpuperf_merge::recording;

use crate::api::{Class, classify};
use crate::buffers::{self, Pool};
use crate::capture;
use crate::config::Config;
use crate::cupti::{Cupti, Subscriber};
use crate::decode;
use crate::driver;
use crate::error::{Error, Result};
use crate::guard::Inside;
use crate::locate;
use crate::log::Log;
use crate::shard::Shards;
use crate::stacks::{self, Stacks};
use crate::sys::{self, CUpti_ActivityThreadIdType};

use super::buffering::{buffer_completed, buffer_requested};
use super::callbacks::api_callback;
use super::closing::{at_exit, close_on_signal, in_forked_child};
use super::other_clients::watch_other_clients;
use super::sink::Sink;
use super::{
    CONTEXT_CREATED, CONTEXT_DESTROY, DRIVER, FATAL_ERROR, Flush, MAX_CBID, MODULE_LOADED,
    RESOURCE, RUNTIME, STATE, STATE_DOMAIN, State, Stats, lock,
};
use crate::clock::monotonic_ns;

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
}

unsafe extern "C" fn timestamp() -> u64 {
    monotonic_ns()
}

fn process_record(pid: u32) -> Record {
    let exe = std::fs::read_link("/proc/self/exe")
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let realtime = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .ok()
        .map(|d| d.as_nanos() as u64);
    Record::Process(Process {
        pid,
        ppid: Some(std::os::unix::process::parent_id()).filter(|&p| p != 0),
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
    let (want_pc, mut pc_warning) =
        crate::pcsampling::from_env(std::env::var_os(crate::pcsampling::VAR).as_deref());
    let mut pc_warnings: Vec<String> = pc_warning.take().into_iter().collect();
    let want_pc = want_pc.map(|s| {
        let (s, w) = s.with_env(
            std::env::var_os(crate::pcsampling::MODE_VAR).as_deref(),
            std::env::var_os(crate::pcsampling::WINDOW_VAR).as_deref(),
            std::env::var_os(crate::pcsampling::BUDGET_VAR).as_deref(),
        );
        pc_warnings.extend(w);
        s
    });
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
        .chain(&pc_warnings)
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
    sink.write(&Record::Origin(ProcessOrigin {
        pid,
        origin: recording::origin_from_env(&|v| std::env::var_os(v)),
    }));
    sink.flush();
    let (cupti, version, sub) = match open_cupti(&config, &log) {
        Ok(c) => c,
        Err(e) => {
            log.line(&format!("not recording: {e}"));
            sink.note(format!("not recorded: {e}"));
            return false;
        }
    };
    announce_cupti(&cupti, version, &log, &mut sink);
    let (classes, names) = callback_tables(&cupti);
    let stacks = want_stacks.then(|| Stacks::new(cupti.path()));
    // Backward launches are charged through their stacks: none, no tags.
    let autograd = want_autograd
        .filter(|_| stacks.is_some())
        .map(crate::autograd::Autograd::new);
    let pc = want_pc.and_then(|settings| {
        match crate::pcsampling::Sampler::new(cupti.path(), settings, version) {
            Ok(s) => Some(s),
            Err(e) => {
                log.line(&format!("PC sampling unavailable: {e}"));
                sink.note(format!("PC sampling unavailable: {e}"));
                None
            }
        }
    });
    let state = State {
        stacks,
        autograd,
        pc,
        clock_shift: std::sync::atomic::AtomicI64::new(0),
        cupti,
        version,
        log,
        pid,
        classes,
        names,
        sink: Mutex::new(sink),
        shards: Shards::new(),
        flush_lock: Mutex::new(()),
        stop: (Mutex::new(false), Condvar::new()),
        disabled: AtomicBool::new(false),
        live_contexts: AtomicU32::new(0),
        torn_down: AtomicBool::new(false),
        closed: AtomicBool::new(false),
        closing: AtomicBool::new(false),
        stacks_done: AtomicBool::new(false),
        in_cupti_since: AtomicU64::new(0),
        gave_up_on_cupti: AtomicBool::new(false),
        finished: Mutex::new(false),
        stateless: Mutex::new(Vec::new()),
        kinds: Mutex::new(Vec::new()),
        first_walk_error: Mutex::new(None),
        pool: Pool::new(buffers::alloc_buffer),
        deferred: Mutex::new(super::deferred::Deferred::new()),
        started_ns,
        takeover_noted: AtomicBool::new(false),
        yielding: AtomicBool::new(false),
        yielded: AtomicBool::new(false),
        launches_at_yield: AtomicU64::new(0),
        finalized: AtomicBool::new(false),
        refusal_noted: AtomicBool::new(false),
        kinds_on: AtomicBool::new(false),
        stats: Stats::default(),
        tally: super::tally::Tally::new(),
        config,
    };
    if STATE.set(state).is_err() {
        return true;
    }
    start(STATE.get().expect("just set"), sub)
}

/// Says in the log which libcupti recording uses, and in the trace too when it
/// is the simulation's.
fn announce_cupti(cupti: &Cupti, version: u32, log: &Log, sink: &mut Sink) {
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
}

/// The class and the name of every
/// runtime and driver callback id, by domain.
fn callback_tables(cupti: &Cupti) -> ([Vec<Class>; 2], [Vec<String>; 2]) {
    let mut classes = [Vec::new(), Vec::new()];
    let mut names = [Vec::new(), Vec::new()];
    for (d, domain) in [RUNTIME, DRIVER].into_iter().enumerate() {
        for cbid in 0..MAX_CBID {
            let name = cupti.callback_name(domain, cbid).unwrap_or_default();
            let class = classify(&name);
            classes[d].push(class);
            names[d].push(name);
        }
    }
    (classes, names)
}

/// What `initialize` does once the state is set: turns recording on (see
/// [`enable`]), or says in the log and the trace why not.
fn start(s: &'static State, sub: Subscriber) -> bool {
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
    capture::configure(&s.config.window, window_changed);
    let enabled = enable_callbacks(s, sub)?;
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
            Ok(sigs) if !sigs.is_empty() => {
                let names: Vec<String> = sigs.into_iter().map(crate::interrupt::name).collect();
                s.log.line(&format!(
                    "the trace is closed before {} end the program",
                    names.join(", ")
                ));
            }
            Ok(_) => s
                .log
                .line("the program handles every signal the trace is closed on: no flush on them"),
            Err(e) => s.log.line(&format!("no flush on signals: {e}")),
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
    spawn_flush_thread(s);
    Ok(enabled)
}

/// Enables the runtime and driver callbacks of the calls recorded (and of the
/// profiler API when it is the window), and the resource and state callbacks;
/// returns the number of API callbacks enabled.
fn enable_callbacks(s: &State, sub: Subscriber) -> Result<usize> {
    let c = &s.cupti;
    let profiler_api = s.config.window.range == crate::config::Range::ProfilerApi;
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
    // pcsampling hook: the modules' cubins, for source lines.
    if s.pc.is_some()
        && let Err(e) = c.enable_callback(sub, RESOURCE, MODULE_LOADED)
    {
        s.log
            .line(&format!("PC samples will have no source lines: {e}"));
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
    Ok(enabled)
}

/// The flush thread: every `flush_ms` it flushes, refills the buffer reserve
/// and looks again for other CUPTI clients and for libtorch.
fn spawn_flush_thread(s: &'static State) {
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
        let mut last = Instant::now();
        while !*stopped {
            stopped = cv
                .wait_timeout(stopped, period.saturating_sub(last.elapsed()))
                .map_or_else(|e| e.into_inner().0, |r| r.0);
            if *stopped {
                break;
            }
            drop(stopped);
            // Woken by a callback before the period is out: what it left to
            // decode and write only (however often woken, the period's flush
            // still comes).
            if last.elapsed() < period {
                s.flush(Flush::Woken);
                s.pool.refill(buffers::alloc_buffer);
                stopped = lock(m);
                continue;
            }
            last = Instant::now();
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
}
