//! GPU driver events from the kernel: the DRM scheduler's job lifecycle
//! (`gpu_scheduler` tracepoints), `dma_fence`, NVIDIA's driver entry points
//! (kprobes on `nvidia_open`, `nvidia_unlocked_ioctl`, `nvidia_mmap`,
//! `nvidia_isr`, `nvidia_isr_kthread_bh`), its Xid errors
//! (`nvidia:nvidia_dev_xid`) and the DRM core's vblanks and vblank events
//! (`drm:drm_vblank_event`, `drm_vblank_event_queued`,
//! `drm_vblank_event_delivered`).
//!
//! ```text
//! DriverOptions ──► trace() ── attach what the kernel has ──► DriverSink::event (each record)
//!                        │                                   DriverSink::tick  (each poll)
//!                        └─ absent sources: one line each in DriverSummary::absent
//! ```
//!
//! Filters run in BPF: by process (a pid set that can grow while tracing, see
//! [`PidFilter`]) and command name; the driver's interrupt and bottom half and
//! vblanks are kept whatever the filter, and a job's later events follow the
//! decision made when it was queued, in its submitter's name, as a vblank
//! event's delivery (in the vblank's interrupt) follows its DRM file's
//! queueing. `--sample N` keeps one in N matching events of each kind (a
//! sequence per kind: one shared by all aliased with the kinds' mix), whole
//! jobs (decided at the queueing), and every Xid; what is left out is counted.

use std::collections::HashSet;
use std::fs;
use std::mem::{MaybeUninit, offset_of};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{Link, MapCore, MapFlags, MapHandle, RingBufferBuilder};

use crate::driver_skel::{DriverSkel, DriverSkelBuilder, types};
use crate::error::{Error, Result, bpf};
/// The event types are the trace model's: what BPF records is what merge reads.
pub use gpuperf_merge::model::{DriverEvent, DriverKind};

/// The event kind of `enum driver_kind` in `driver.h`.
fn kind_from_raw(v: u32) -> Option<DriverKind> {
    Some(match v {
        1 => DriverKind::Open,
        2 => DriverKind::Ioctl,
        3 => DriverKind::Mmap,
        4 => DriverKind::Irq,
        5 => DriverKind::IrqBottomHalf,
        6 => DriverKind::Xid,
        7 => DriverKind::JobQueued,
        8 => DriverKind::JobRun,
        9 => DriverKind::JobDone,
        10 => DriverKind::JobWaitDep,
        11 => DriverKind::FenceInit,
        12 => DriverKind::FenceSignaled,
        13 => DriverKind::Vblank,
        14 => DriverKind::VblankQueued,
        15 => DriverKind::VblankDelivered,
        _ => return None,
    })
}

/// A group of events attached together: the unit of `--event` and of the
/// "not present" report.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Source {
    /// NVIDIA's `open`, `ioctl` and `mmap` entry points (kprobes).
    NvidiaCalls,
    /// NVIDIA's interrupt and its bottom half (kprobes).
    NvidiaIrq,
    /// `nvidia:nvidia_dev_xid`.
    NvidiaXid,
    /// The four `gpu_scheduler` tracepoints.
    DrmSched,
    /// `dma_fence` init and signal.
    DmaFence,
    /// The DRM core's vblanks and vblank events (`drm:drm_vblank_event*`).
    Vblank,
}

impl Source {
    /// Every source.
    pub const ALL: [Source; 6] = [
        Source::NvidiaCalls,
        Source::NvidiaIrq,
        Source::NvidiaXid,
        Source::DrmSched,
        Source::DmaFence,
        Source::Vblank,
    ];

    /// Its name for `--event` (`nvidia`, `irq`, `xid`, `drm_sched`,
    /// `dma_fence`, `vblank`).
    pub fn name(self) -> &'static str {
        match self {
            Source::NvidiaCalls => "nvidia",
            Source::NvidiaIrq => "irq",
            Source::NvidiaXid => "xid",
            Source::DrmSched => "drm_sched",
            Source::DmaFence => "dma_fence",
            Source::Vblank => "vblank",
        }
    }

    /// The source named `name`, if any.
    pub fn from_name(name: &str) -> Option<Source> {
        Source::ALL.into_iter().find(|s| s.name() == name)
    }

    /// `/proc/kallsyms` names that must all be present.
    fn symbols(self) -> &'static [&'static str] {
        match self {
            Source::NvidiaCalls => &["nvidia_open", "nvidia_unlocked_ioctl", "nvidia_mmap"],
            Source::NvidiaIrq => &["nvidia_isr", "nvidia_isr_kthread_bh"],
            Source::NvidiaXid => &["__tracepoint_nvidia_dev_xid"],
            Source::DrmSched => &[
                "__tracepoint_drm_sched_job",
                "__tracepoint_drm_run_job",
                "__tracepoint_drm_sched_process_job",
                "__tracepoint_drm_sched_job_wait_dep",
            ],
            Source::DmaFence => &[
                "__tracepoint_dma_fence_init",
                "__tracepoint_dma_fence_signaled",
            ],
            Source::Vblank => &[
                "__tracepoint_drm_vblank_event",
                "__tracepoint_drm_vblank_event_queued",
                "__tracepoint_drm_vblank_event_delivered",
            ],
        }
    }

    fn is_nvidia(self) -> bool {
        matches!(
            self,
            Source::NvidiaCalls | Source::NvidiaIrq | Source::NvidiaXid
        )
    }

    fn uses_kprobes(self) -> bool {
        matches!(self, Source::NvidiaCalls | Source::NvidiaIrq)
    }

    /// What is missing for it, in words, when `kallsyms` lacks its symbols.
    fn missing(self) -> &'static str {
        match self {
            Source::NvidiaCalls | Source::NvidiaIrq | Source::NvidiaXid => {
                "no NVIDIA driver is loaded"
            }
            Source::DrmSched => "no DRM scheduler (gpu-sched) is loaded",
            Source::DmaFence => "the kernel has no dma_fence tracepoints",
            Source::Vblank => "no DRM driver (drm) is loaded",
        }
    }
}

/// Parses a record from the ring buffer; `None` when it is malformed.
pub fn parse_event(b: &[u8]) -> Option<DriverEvent> {
    type E = types::driver_event;
    if b.len() < size_of::<E>() {
        return None;
    }
    let u64_at = |o: usize| u64::from_ne_bytes(b[o..o + 8].try_into().expect("8 bytes"));
    let u32_at = |o: usize| u32::from_ne_bytes(b[o..o + 4].try_into().expect("4 bytes"));
    let str_at = |o: usize, n: usize| {
        let s = &b[o..o + n];
        let end = s.iter().position(|&c| c == 0).unwrap_or(n);
        String::from_utf8_lossy(&s[..end]).into_owned()
    };
    Some(DriverEvent {
        ts_ns: u64_at(offset_of!(E, ts_ns)),
        dur_ns: u64_at(offset_of!(E, dur_ns)),
        id: u64_at(offset_of!(E, id)),
        ret: u64_at(offset_of!(E, ret)) as i64,
        pid: u32_at(offset_of!(E, pid)),
        tid: u32_at(offset_of!(E, tid)),
        kind: kind_from_raw(u32_at(offset_of!(E, kind)))?,
        arg: u32_at(offset_of!(E, arg)),
        comm: str_at(offset_of!(E, comm), NAME_LEN),
        ring: str_at(offset_of!(E, ring), NAME_LEN),
        msg: str_at(offset_of!(E, msg), MSG_LEN),
    })
}

const NAME_LEN: usize = 16;
const MSG_LEN: usize = 64;

/// What to trace.
#[derive(Clone, Debug)]
pub struct DriverOptions {
    /// Only these processes (and the driver's interrupt and kernel threads);
    /// more can be added while tracing through [`PidFilter`], and their
    /// children join the set as they fork. Default: every
    /// process, unless `filter_pids` is set.
    pub pids: Vec<u32>,
    /// Filter by the pid set even when `pids` is empty (for a caller that
    /// adds the pids once they exist). Default is `false`.
    pub filter_pids: bool,
    /// Only threads with this command name (at most 15 bytes). Default: any.
    pub comm: Option<String>,
    /// Keep one in this many matching events (1: all). Default is 1.
    pub sample_every: u32,
    /// The sources to attach. Default: all.
    pub sources: Vec<Source>,
    /// Ring buffer poll period. Default is 100 ms.
    pub poll: Duration,
    /// Measure each program's run time (`BPF_ENABLE_STATS`). Default is `true`.
    pub measure_cost: bool,
}

impl Default for DriverOptions {
    fn default() -> Self {
        Self {
            pids: Vec::new(),
            filter_pids: false,
            comm: None,
            sample_every: 1,
            sources: Source::ALL.to_vec(),
            poll: Duration::from_millis(100),
            measure_cost: true,
        }
    }
}

/// Counters kept in BPF (`enum driver_stat` in `driver.h`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DriverStats {
    /// Events sent to user space.
    pub kept: u64,
    /// Matching events left out by sampling.
    pub sampled_out: u64,
    /// Matching events lost to a full ring buffer.
    pub ring_buffer_drops: u64,
    /// Ioctl or job starts not remembered (map full): their end is not sent.
    pub map_full: u64,
}

/// The run time of one BPF program, from the kernel's BPF statistics.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProgramCost {
    /// The program (`nv_ioctl`, `sched_job`, …).
    pub program: String,
    /// Times it ran.
    pub runs: u64,
    /// Total nanoseconds in it.
    pub run_time_ns: u64,
}

/// What a trace attached, what it could not, and what it counted.
#[derive(Clone, Debug, Default)]
pub struct DriverSummary {
    /// Sources attached.
    pub attached: Vec<Source>,
    /// Sources not present, with a one-line reason each.
    pub absent: Vec<(Source, String)>,
    /// The BPF counters at the end.
    pub stats: DriverStats,
    /// Records that could not be parsed.
    pub malformed: u64,
    /// Per-program cost, when it was measured.
    pub costs: Vec<ProgramCost>,
}

/// Adds processes to a running trace's filter; cheap to clone and `Send`.
#[derive(Debug)]
pub struct PidFilter(MapHandle);

impl PidFilter {
    /// Adds `pid` (a process id) to the filter.
    pub fn add(&self, pid: u32) -> Result<()> {
        self.0
            .update(&pid.to_ne_bytes(), &[1], MapFlags::ANY)
            .map_err(bpf("adding a pid to the driver filter"))
    }
}

/// Receives a trace's events.
pub trait DriverSink {
    /// Called once the sources are attached, with the pid filter and the
    /// sources found absent.
    fn attached(&mut self, _pids: PidFilter, _absent: &[(Source, String)]) {}
    /// One event.
    fn event(&mut self, event: DriverEvent);
    /// After each poll of the ring buffer; returning `false` ends the trace.
    fn tick(&mut self, stats: &DriverStats) -> bool;
}

/// A symbol of every NVIDIA kernel driver: the driver is loaded when
/// `/proc/kallsyms` has it.
const NVIDIA_LOADED: &str = "nvidia_open";

/// Which sources the running kernel has, from the names in `kallsyms` (a
/// `/proc/kallsyms` text); the rest with the reason they are absent.
pub fn available(kallsyms: &str, wanted: &[Source]) -> (Vec<Source>, Vec<(Source, String)>) {
    let needed: HashSet<&str> = wanted
        .iter()
        .flat_map(|s| s.symbols().iter().copied())
        .chain(["register_kprobe", NVIDIA_LOADED])
        .collect();
    let mut found = HashSet::new();
    for line in kallsyms.lines() {
        if let Some(name) = line.split_whitespace().nth(2)
            && needed.contains(name)
        {
            found.insert(name.to_owned());
        }
    }
    let kprobes = found.contains("register_kprobe");
    let mut present = Vec::new();
    let mut absent = Vec::new();
    for &s in wanted {
        if let Some(missing) = s.symbols().iter().find(|n| !found.contains(**n)) {
            let why = if s.is_nvidia() && found.contains(NVIDIA_LOADED) {
                // A driver built without it (NVIDIA's xid tracepoint is optional).
                "the loaded NVIDIA driver lacks it"
            } else {
                s.missing()
            };
            absent.push((s, format!("{}: {why} (no {missing})", s.name())));
        } else if s.uses_kprobes() && !kprobes {
            absent.push((
                s,
                format!(
                    "{}: the kernel has no kprobes (CONFIG_KPROBES is off)",
                    s.name()
                ),
            ));
        } else {
            present.push(s);
        }
    }
    (present, absent)
}

/// Loads the driver programs, attaches the sources the kernel has, and feeds
/// `sink` until its `tick` returns `false`. Absent sources are reported in
/// the summary (and to [`DriverSink::attached`]), never as errors.
pub fn trace(options: &DriverOptions, sink: &mut impl DriverSink) -> Result<DriverSummary> {
    crate::preflight::check_privileges(
        &fs::read_to_string("/proc/self/status").unwrap_or_default(),
    )?;
    let kallsyms = fs::read_to_string("/proc/kallsyms")
        .map_err(|e| Error::Kernel(format!("reading /proc/kallsyms: {e}")))?;
    let (present, absent) = available(&kallsyms, &options.sources);

    let mut storage = MaybeUninit::uninit();
    let skel = load(&mut storage, options, &present)?;
    let pids = MapHandle::try_from(&skel.maps.pids).map_err(bpf("opening the pid map"))?;
    for &pid in &options.pids {
        PidFilter(MapHandle::try_from(&skel.maps.pids).map_err(bpf("opening the pid map"))?)
            .add(pid)?;
    }
    let stats_fd = if options.measure_cost {
        enable_stats()
    } else {
        None
    };
    let mut links = attach(&skel, &present)?;
    if options.filter_pids || !options.pids.is_empty() {
        // The pid set follows forks: a recording's target and its children.
        links.push(
            skel.progs
                .follow_fork
                .attach_raw_tracepoint("sched_process_fork")
                .map_err(bpf("attaching the fork follower"))?,
        );
    }

    let events = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
    let malformed = std::rc::Rc::new(std::cell::Cell::new(0u64));
    let mut builder = RingBufferBuilder::new();
    {
        let (events, malformed) = (events.clone(), malformed.clone());
        builder
            .add(&skel.maps.driver_events, move |data: &[u8]| {
                match parse_event(data) {
                    Some(e) => events.borrow_mut().push(e),
                    None => malformed.set(malformed.get() + 1),
                }
                0
            })
            .map_err(bpf("opening the driver ring buffer"))?;
    }
    let ring = builder
        .build()
        .map_err(bpf("opening the driver ring buffer"))?;
    sink.attached(PidFilter(pids), &absent);

    loop {
        match ring.poll(options.poll) {
            // A signal (Ctrl-C) woke the poll: the sink decides whether to stop.
            Err(e) if e.kind() == libbpf_rs::ErrorKind::Interrupted => {}
            r => r.map_err(bpf("polling the driver ring buffer"))?,
        }
        for e in events.borrow_mut().drain(..) {
            sink.event(e);
        }
        if !sink.tick(&read_stats(&skel)) {
            break;
        }
    }
    // What is already in the ring buffer belongs to the run.
    ring.consume()
        .map_err(bpf("draining the driver ring buffer"))?;
    for e in events.borrow_mut().drain(..) {
        sink.event(e);
    }
    let costs = if stats_fd.is_some() {
        costs(&skel, &present)
    } else {
        Vec::new()
    };
    drop(links);
    Ok(DriverSummary {
        attached: present,
        absent,
        stats: read_stats(&skel),
        malformed: malformed.get(),
        costs,
    })
}

/// A trace on its own thread, for a recording: started before the target,
/// told the target's pid once it exists, finished after it exits.
///
/// ```no_run
/// use gpuperf_profiler::driver::{DriverOptions, Recorder};
///
/// let rec = Recorder::start(DriverOptions { filter_pids: true, ..Default::default() })?;
/// for (_, why) in rec.absent() {
///     eprintln!("gpuperf: {why}");
/// }
/// let child = std::process::Command::new("./app").spawn().unwrap();
/// rec.add_pid(child.id())?;
/// // … wait for the target …
/// let (events, summary) = rec.finish()?;
/// # Ok::<(), gpuperf_profiler::Error>(())
/// ```
#[derive(Debug)]
pub struct Recorder {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    pids: PidFilter,
    absent: Vec<(Source, String)>,
    thread: std::thread::JoinHandle<Result<(Vec<DriverEvent>, DriverSummary)>>,
}

/// What the trace thread sends once attached: the pid filter, the absent sources.
type Attached = (PidFilter, Vec<(Source, String)>);

/// Where a [`Recorder`]'s events go as they come.
pub type OnEvent = Box<dyn FnMut(DriverEvent) + Send>;

struct Collect {
    events: Vec<DriverEvent>,
    /// Set: each event goes there instead of into `events`.
    on_event: Option<OnEvent>,
    ready: Option<std::sync::mpsc::Sender<Attached>>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl DriverSink for Collect {
    fn attached(&mut self, pids: PidFilter, absent: &[(Source, String)]) {
        if let Some(tx) = self.ready.take() {
            let _ = tx.send((pids, absent.to_vec()));
        }
    }

    fn event(&mut self, event: DriverEvent) {
        match self.on_event.as_mut() {
            Some(f) => f(event),
            None => self.events.push(event),
        }
    }

    fn tick(&mut self, _stats: &DriverStats) -> bool {
        !self.stop.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl Recorder {
    /// Loads and attaches (see [`trace`]) and returns once attached.
    pub fn start(options: DriverOptions) -> Result<Self> {
        Self::start_inner(options, None)
    }

    /// As [`Recorder::start`], each event handed to `on_event` (on the trace
    /// thread) as it comes instead of kept: a long recording's events need
    /// not fit in memory. [`Recorder::finish`] then returns no events.
    pub fn start_streaming(options: DriverOptions, on_event: OnEvent) -> Result<Self> {
        Self::start_inner(options, Some(on_event))
    }

    fn start_inner(options: DriverOptions, on_event: Option<OnEvent>) -> Result<Self> {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("gpuperf-driver".into())
            .spawn({
                let stop = stop.clone();
                move || {
                    let mut sink = Collect {
                        events: Vec::new(),
                        on_event,
                        ready: Some(tx),
                        stop,
                    };
                    let summary = trace(&options, &mut sink)?;
                    Ok((sink.events, summary))
                }
            })
            .map_err(|e| Error::Kernel(format!("starting the driver trace thread: {e}")))?;
        match rx.recv() {
            Ok((pids, absent)) => Ok(Self {
                stop,
                pids,
                absent,
                thread,
            }),
            // The thread ended before attaching: its error says why.
            Err(_) => match thread.join() {
                Ok(Err(e)) => Err(e),
                _ => Err(Error::Kernel(
                    "the driver trace ended before attaching".into(),
                )),
            },
        }
    }

    /// The sources not present, one line each.
    pub fn absent(&self) -> &[(Source, String)] {
        &self.absent
    }

    /// Adds a process to the filter.
    pub fn add_pid(&self, pid: u32) -> Result<()> {
        self.pids.add(pid)
    }

    /// Stops the trace and returns every event with the summary.
    pub fn finish(self) -> Result<(Vec<DriverEvent>, DriverSummary)> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread
            .join()
            .unwrap_or_else(|_| Err(Error::Kernel("the driver trace thread panicked".into())))
    }
}

/// The cost of one kept record in BPF, measurable on any kernel that loads
/// BPF, with or without a GPU driver: runs the Xid program `runs` times
/// through `BPF_PROG_TEST_RUN` (filter, sampling, ring buffer reserve, fill,
/// submit, as every event pays) with the kernel's run-time statistics on,
/// draining the ring buffer as it goes. Returns that program's cost.
pub fn record_cost(runs: u32) -> Result<ProgramCost> {
    crate::preflight::check_privileges(
        &fs::read_to_string("/proc/self/status").unwrap_or_default(),
    )?;
    let mut storage = MaybeUninit::uninit();
    let skel = load(
        &mut storage,
        &DriverOptions::default(),
        &[Source::NvidiaXid],
    )?;
    let Some(_stats) = enable_stats() else {
        return Err(Error::Kernel("the kernel refused BPF_ENABLE_STATS".into()));
    };
    let mut builder = RingBufferBuilder::new();
    builder
        .add(&skel.maps.driver_events, |_: &[u8]| 0)
        .map_err(bpf("opening the driver ring buffer"))?;
    let ring = builder
        .build()
        .map_err(bpf("opening the driver ring buffer"))?;
    // raw_tp arguments: dev, error_code, msg (a null message is read as "").
    let mut args = [0u64, 79, 0];
    for i in 0..runs {
        // SAFETY: args is a plain array of three u64s, viewed as its bytes
        // for as long as the call borrows them.
        let ctx = unsafe {
            std::slice::from_raw_parts_mut(args.as_mut_ptr().cast::<u8>(), size_of_val(&args))
        };
        let input = libbpf_rs::ProgramInput {
            context_in: Some(ctx),
            ..Default::default()
        };
        skel.progs
            .nv_xid
            .test_run(input)
            .map_err(bpf("running the Xid program"))?;
        if i % 1024 == 1023 {
            ring.consume()
                .map_err(bpf("draining the driver ring buffer"))?;
        }
    }
    costs(&skel, &[Source::NvidiaXid])
        .into_iter()
        .next()
        .ok_or_else(|| Error::Kernel("no run-time statistics for the Xid program".into()))
}

fn load<'obj>(
    storage: &'obj mut MaybeUninit<libbpf_rs::OpenObject>,
    options: &DriverOptions,
    present: &[Source],
) -> Result<DriverSkel<'obj>> {
    let mut open = DriverSkelBuilder::default()
        .open(storage)
        .map_err(bpf("opening the driver BPF object"))?;
    if let Some(rodata) = open.maps.rodata_data.as_deref_mut() {
        rodata.filter_pids = options.filter_pids || !options.pids.is_empty();
        if let Some(comm) = &options.comm {
            rodata.filter_comm = true;
            for (dst, &src) in rodata
                .comm_filter
                .iter_mut()
                .zip(comm.as_bytes().iter().take(15))
            {
                *dst = src as _;
            }
        }
        rodata.sample_every = options.sample_every.max(1);
    }
    // A program whose target is absent is not loaded: its CO-RE relocations
    // against a missing module's types would fail the whole object.
    let on = |s: Source| present.contains(&s);
    let progs = &mut open.progs;
    progs.nv_open.set_autoload(on(Source::NvidiaCalls));
    progs.nv_mmap.set_autoload(on(Source::NvidiaCalls));
    progs.nv_ioctl.set_autoload(on(Source::NvidiaCalls));
    progs.nv_ioctl_ret.set_autoload(on(Source::NvidiaCalls));
    progs.nv_isr.set_autoload(on(Source::NvidiaIrq));
    progs.nv_isr_bh.set_autoload(on(Source::NvidiaIrq));
    progs.nv_xid.set_autoload(on(Source::NvidiaXid));
    progs.sched_job.set_autoload(on(Source::DrmSched));
    progs.run_job.set_autoload(on(Source::DrmSched));
    progs.job_wait_dep.set_autoload(on(Source::DrmSched));
    progs.process_job.set_autoload(on(Source::DrmSched));
    progs.fence_init.set_autoload(on(Source::DmaFence));
    progs.fence_signaled.set_autoload(on(Source::DmaFence));
    progs.vblank.set_autoload(on(Source::Vblank));
    progs.vblank_queued.set_autoload(on(Source::Vblank));
    progs.vblank_delivered.set_autoload(on(Source::Vblank));
    progs
        .follow_fork
        .set_autoload(options.filter_pids || !options.pids.is_empty());
    open.load().map_err(bpf("loading the driver BPF programs"))
}

fn attach(skel: &DriverSkel<'_>, present: &[Source]) -> Result<Vec<Link>> {
    let p = &skel.progs;
    let mut links = Vec::new();
    for &s in present {
        let what = format!("attaching the {} programs", s.name());
        match s {
            Source::NvidiaCalls => {
                links.push(p.nv_open.attach_kprobe(false, "nvidia_open"));
                links.push(p.nv_mmap.attach_kprobe(false, "nvidia_mmap"));
                links.push(p.nv_ioctl.attach_kprobe(false, "nvidia_unlocked_ioctl"));
                links.push(p.nv_ioctl_ret.attach_kprobe(true, "nvidia_unlocked_ioctl"));
            }
            Source::NvidiaIrq => {
                links.push(p.nv_isr.attach_kprobe(false, "nvidia_isr"));
                links.push(p.nv_isr_bh.attach_kprobe(false, "nvidia_isr_kthread_bh"));
            }
            Source::NvidiaXid => links.push(p.nv_xid.attach_raw_tracepoint("nvidia_dev_xid")),
            Source::DrmSched => {
                links.push(p.sched_job.attach_raw_tracepoint("drm_sched_job"));
                links.push(p.run_job.attach_raw_tracepoint("drm_run_job"));
                links.push(
                    p.job_wait_dep
                        .attach_raw_tracepoint("drm_sched_job_wait_dep"),
                );
                links.push(p.process_job.attach_raw_tracepoint("drm_sched_process_job"));
            }
            Source::DmaFence => {
                links.push(p.fence_init.attach_raw_tracepoint("dma_fence_init"));
                links.push(p.fence_signaled.attach_raw_tracepoint("dma_fence_signaled"));
            }
            Source::Vblank => {
                links.push(p.vblank.attach_raw_tracepoint("drm_vblank_event"));
                links.push(
                    p.vblank_queued
                        .attach_raw_tracepoint("drm_vblank_event_queued"),
                );
                links.push(
                    p.vblank_delivered
                        .attach_raw_tracepoint("drm_vblank_event_delivered"),
                );
            }
        }
        if let Some(Err(e)) = links.iter().find(|l| l.is_err()) {
            return Err(Error::Kernel(format!("{what}: {e}")));
        }
    }
    Ok(links.into_iter().flatten().collect())
}

fn read_stats(skel: &DriverSkel<'_>) -> DriverStats {
    let sum = |i: u32| -> u64 {
        match skel
            .maps
            .driver_stats
            .lookup_percpu(&i.to_ne_bytes(), MapFlags::ANY)
        {
            Ok(Some(per_cpu)) => per_cpu
                .iter()
                .filter_map(|v| v.get(..8).and_then(|b| b.try_into().ok()))
                .map(u64::from_ne_bytes)
                .sum(),
            _ => 0,
        }
    };
    DriverStats {
        kept: sum(0),
        sampled_out: sum(1),
        ring_buffer_drops: sum(2),
        map_full: sum(3),
    }
}

/// Turns on the kernel's BPF run-time statistics while the returned fd is
/// open; `None` when the kernel refuses.
fn enable_stats() -> Option<OwnedFd> {
    // SAFETY: bpf_enable_stats takes a plain enum value and returns a new fd
    // or a negative error; the fd is owned by nobody else.
    let fd = unsafe {
        libbpf_rs::libbpf_sys::bpf_enable_stats(libbpf_rs::libbpf_sys::BPF_STATS_RUN_TIME)
    };
    // SAFETY: fd is a freshly created descriptor that we alone own.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) })
}

fn costs(skel: &DriverSkel<'_>, present: &[Source]) -> Vec<ProgramCost> {
    let p = &skel.progs;
    // Only loaded programs have a descriptor.
    let mut progs = Vec::new();
    for &s in present {
        match s {
            Source::NvidiaCalls => progs.extend([
                ("nv_open", p.nv_open.as_fd()),
                ("nv_mmap", p.nv_mmap.as_fd()),
                ("nv_ioctl", p.nv_ioctl.as_fd()),
                ("nv_ioctl_ret", p.nv_ioctl_ret.as_fd()),
            ]),
            Source::NvidiaIrq => progs.extend([
                ("nv_isr", p.nv_isr.as_fd()),
                ("nv_isr_bh", p.nv_isr_bh.as_fd()),
            ]),
            Source::NvidiaXid => progs.push(("nv_xid", p.nv_xid.as_fd())),
            Source::DrmSched => progs.extend([
                ("sched_job", p.sched_job.as_fd()),
                ("run_job", p.run_job.as_fd()),
                ("job_wait_dep", p.job_wait_dep.as_fd()),
                ("process_job", p.process_job.as_fd()),
            ]),
            Source::DmaFence => progs.extend([
                ("fence_init", p.fence_init.as_fd()),
                ("fence_signaled", p.fence_signaled.as_fd()),
            ]),
            Source::Vblank => progs.extend([
                ("vblank", p.vblank.as_fd()),
                ("vblank_queued", p.vblank_queued.as_fd()),
                ("vblank_delivered", p.vblank_delivered.as_fd()),
            ]),
        }
    }
    let mut out = Vec::new();
    for (name, fd) in progs {
        let mut info = libbpf_rs::libbpf_sys::bpf_prog_info::default();
        let mut len = size_of_val(&info) as u32;
        // SAFETY: info is a zeroed bpf_prog_info of len bytes that the call
        // fills; fd is a loaded program's descriptor.
        let rc = unsafe {
            libbpf_rs::libbpf_sys::bpf_prog_get_info_by_fd(fd.as_raw_fd(), &mut info, &mut len)
        };
        if rc == 0 {
            out.push(ProgramCost {
                program: name.to_owned(),
                runs: info.run_cnt,
                run_time_ns: info.run_time_ns,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const KALLSYMS: &str = "\
ffffffff81000000 T register_kprobe
ffffffffc0001000 T nvidia_open\t[nvidia_sim]
ffffffffc0001100 T nvidia_unlocked_ioctl\t[nvidia_sim]
ffffffffc0001200 T nvidia_mmap\t[nvidia_sim]
ffffffffc0002000 D __tracepoint_dma_fence_init
ffffffffc0002010 D __tracepoint_dma_fence_signaled
";

    #[test]
    fn available_sources_need_every_symbol_and_kprobes() {
        let (present, absent) = available(KALLSYMS, &Source::ALL);
        assert_eq!(present, [Source::NvidiaCalls, Source::DmaFence]);
        let reasons: Vec<&str> = absent.iter().map(|(_, r)| r.as_str()).collect();
        assert_eq!(
            reasons,
            [
                "irq: the loaded NVIDIA driver lacks it (no nvidia_isr)",
                "xid: the loaded NVIDIA driver lacks it (no __tracepoint_nvidia_dev_xid)",
                "drm_sched: no DRM scheduler (gpu-sched) is loaded (no __tracepoint_drm_sched_job)",
                "vblank: no DRM driver (drm) is loaded (no __tracepoint_drm_vblank_event)",
            ]
        );
        // Without the driver, each NVIDIA source says that no driver is loaded.
        let no_nvidia: String = KALLSYMS
            .lines()
            .filter(|l| !l.contains("nvidia"))
            .collect::<Vec<_>>()
            .join("\n");
        let (_, absent) = available(&no_nvidia, &[Source::NvidiaXid]);
        assert_eq!(
            absent[0].1,
            "xid: no NVIDIA driver is loaded (no __tracepoint_nvidia_dev_xid)"
        );
        let no_kprobes = KALLSYMS.replace("register_kprobe", "other");
        let (present, absent) = available(&no_kprobes, &[Source::NvidiaCalls]);
        assert!(present.is_empty());
        assert_eq!(
            absent[0].1,
            "nvidia: the kernel has no kprobes (CONFIG_KPROBES is off)"
        );
    }

    #[test]
    fn each_kind_of_driver_h_is_one_model_kind() {
        let kinds: HashSet<DriverKind> = (1..=15).filter_map(kind_from_raw).collect();
        assert_eq!(kinds.len(), DriverKind::ALL.len());
        assert_eq!(kind_from_raw(16), None);
        assert_eq!(kind_from_raw(13), Some(DriverKind::Vblank));
    }

    #[test]
    fn a_short_record_is_malformed() {
        assert_eq!(parse_event(&[0; 8]), None);
        let mut b = vec![0u8; size_of::<types::driver_event>()];
        assert_eq!(parse_event(&b), None, "kind 0 is no event");
        let kind = offset_of!(types::driver_event, kind);
        b[kind..kind + 4].copy_from_slice(&2u32.to_ne_bytes());
        let comm = offset_of!(types::driver_event, comm);
        b[comm..comm + 3].copy_from_slice(b"app");
        let e = parse_event(&b).unwrap();
        assert_eq!((e.kind, e.comm.as_str()), (DriverKind::Ioctl, "app"));
    }
}
