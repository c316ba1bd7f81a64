//! The timeline model that both timeline encoders write: the Chrome JSON
//! ([`crate::write::chrome`]) and Perfetto's protobuf
//! ([`crate::write::perfetto`]). Every decision is made here, once: processes
//! and their names, tracks and lanes, slice names and arguments, idle slices,
//! driver tracks, markers, flows, and the order of the events. The encoders only
//! encode.
//!
//! ```text
//! records ──▶ Builder (a Sink) ──finish──▶ Timeline ──▶ chrome / perfetto encoder
//! ```
//!
//! - NVTX push/pop ranges are slices on their thread's track, around the API
//!   calls made inside them; start/end ranges on a track of their process.
//! - CPU API calls are slices on their process's thread tracks; a launch's CPU
//!   stack is an argument of its API slice only (and of the markers of launches
//!   without GPU work). GPU work carries a `stack` argument only where it is
//!   charged to another stack than its call's (a replayed CUDA graph node, charged
//!   to the stack that made the node: [`Match::charge`]).
//! - GPU work is on a pseudo-process per (process, device) ([`gpu_pid`]), one
//!   track per stream, with a `stream N sync` track beside it: a sync spans the
//!   work it waits for. Those without a stream are on the `no stream` track.
//! - No two slices on one GPU stream's track overlap: work that overlaps work
//!   before it on its stream (programmatic dependent launch lets a kernel start
//!   before the previous one ends) goes to a lane of its own, a track named
//!   `stream N (overlap K)`. On every other track slices nest; one that
//!   overlaps a slice partially goes to a lane too.
//! - With [`Builder::with_idle_slices`], each stream's gaps are slices on its
//!   track, one per cause ([`crate::write::idle`]), and each device's gaps are
//!   on a track of their own.
//! - Each activity with a known API call gets a flow from the call's slice to
//!   its slice; a wait on a CUDA event gets one from the `cudaEventRecord` call;
//!   a DRM scheduler job gets one from its `submit job` (a slice of no duration
//!   on the submitting thread) to its queue slice.
//! - [`Timeline::steps`] is the order in which the events are written: by
//!   time, and on each track the ends of slices before the begins at the same
//!   instant, innermost first, so that a reader that closes the innermost open
//!   slice of a track at each end (Perfetto's trace processor) reads every
//!   slice's duration as it is.

use std::rc::Rc;

use rustc_hash::FxHashMap;

use crate::error::Result;
use crate::join::{ApiInfo, Context, Match, Sink, Summary};
use crate::model::UNKNOWN_DEVICE;
use crate::model::{
    Activity, ActivityKind, ApiCall, Clock, NvtxKind, NvtxRange, Origin, Record, StringId, SyncWait,
};
use crate::read::cpu::{CpuLaunch, StackId};
use crate::read::driver::DriverTrace;
use crate::write::demangle::Demangler;
use crate::write::driver::{self, Calls, DRIVER_PID, Lane};
use crate::write::idle::{DEVICE_IDLE, IdleFolder};

/// First pid of the pseudo-processes that hold GPU tracks.
pub const GPU_PID_BASE: u64 = 1 << 30;

/// The pid of the pseudo-process holding the tracks of `device` of `pid`.
pub fn gpu_pid(pid: u32, device: u32) -> u64 {
    GPU_PID_BASE + (u64::from(device.min(127)) << 22) + u64::from(pid & ((1 << 22) - 1))
}

/// The track of a process's NVTX start/end ranges.
pub(crate) const NVTX_START_END_TRACK: &str = "NVTX ranges (start/end)";

/// Set in the tid of a stream's synchronization track.
pub const SYNC_TID_BIT: u64 = 1 << 31;

/// Index of a track in [`Timeline::tracks`].
pub(crate) type TrackId = usize;
/// Index of an event in [`Timeline::events`].
pub(crate) type EventId = usize;

/// A process (or a pseudo-process: a GPU's, the driver's).
#[derive(Clone, Debug)]
pub(crate) struct Process {
    /// The pid the JSON writes and Perfetto's process descriptor holds.
    pub pid: u64,
    pub name: String,
    /// Position among processes.
    pub sort: u64,
    /// The recorders' notes ("simulated GPU: …").
    pub labels: Vec<String>,
}

/// A track: a thread, a stream, a lane of either, or a named track.
#[derive(Clone, Debug)]
pub(crate) struct Track {
    pub pid: u64,
    /// Unique in its process; fits in 32 bits.
    pub tid: u64,
    pub name: String,
    /// Position among its process's tracks, where it has one.
    pub rank: Option<i32>,
    /// A real thread of a CPU process (else a track the process holds).
    pub thread: bool,
    /// An async track (the driver's): known by its name, its overlapping
    /// slices on lanes of the same name, which readers stack as one track
    /// (the JSON writes its slices as async events named by the track).
    pub is_async: bool,
}

/// An argument's value.
#[derive(Clone, Debug)]
pub(crate) enum Arg {
    Uint(u64),
    Str(Rc<str>),
    Dim([u32; 3]),
    /// Index in [`Timeline::stacks`].
    Stack(u32),
}

/// A slice (`dur_ns` set) or an instant marker.
#[derive(Clone, Debug)]
pub(crate) struct Event {
    pub track: TrackId,
    pub start_ns: u64,
    pub dur_ns: Option<u64>,
    pub cat: &'static str,
    pub name: Rc<str>,
    pub args: Vec<(&'static str, Arg)>,
}

impl Event {
    fn end_ns(&self) -> u64 {
        self.start_ns + self.dur_ns.unwrap_or(0)
    }
}

/// An arrow from the start of one slice to the start of another.
#[derive(Clone, Debug)]
pub(crate) struct Flow {
    /// Unique, from 1.
    pub id: u64,
    pub cat: &'static str,
    pub from: EventId,
    pub to: EventId,
}

/// One step of the written order.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    Begin(EventId),
    End(EventId),
    Instant(EventId),
}

/// The whole timeline, ready to encode.
#[derive(Debug)]
pub(crate) struct Timeline {
    pub processes: Vec<Process>,
    pub tracks: Vec<Track>,
    pub events: Vec<Event>,
    pub flows: Vec<Flow>,
    /// Flows by the event they start at and the one they end at.
    pub flows_out: FxHashMap<EventId, Vec<usize>>,
    pub flows_in: FxHashMap<EventId, Vec<usize>>,
    /// CPU stacks' texts.
    pub stacks: Vec<String>,
    pub steps: Vec<Step>,
    /// The earliest timestamp.
    pub base_ns: u64,
    pub clock: Clock,
    pub kernels: u64,
    pub kernels_matched: u64,
    pub notes: Vec<String>,
}

#[derive(Copy, Clone, PartialEq, Eq, Hash)]
enum TrackKey {
    Thread(u32, u32),
    Gpu(u64, u64),
    DeviceIdle(u64),
    /// An async track: its process and its index among them.
    Async(u64, usize),
    /// A process's NVTX start/end ranges.
    NvtxStartEnd(u32),
    Lane(TrackId, usize),
}

/// How slices may share a track.
#[derive(Copy, Clone, PartialEq, Eq)]
enum Packing {
    /// Slices nest; one that overlaps another partially needs a lane.
    Nest,
    /// No two slices overlap (a GPU stream runs one thing at a time).
    Apart,
}

/// Builds the [`Timeline`] as the join streams records; a [`Sink`] that the
/// timeline writers wrap.
pub(crate) struct Builder {
    processes: Vec<Process>,
    process_index: FxHashMap<u64, usize>,
    tracks: Vec<Track>,
    packing: Vec<Packing>,
    /// Tracks whose tid is given at the end, once every other tid is known.
    extra: Vec<TrackId>,
    track_index: FxHashMap<TrackKey, TrackId>,
    events: Vec<Event>,
    /// API slices by [`CallKey`], for the flows' starts.
    api_events: FxHashMap<CallKey, EventId>,
    /// (to, category, the call).
    pending_flows: Vec<(EventId, &'static str, CallKey)>,
    /// Flows between driver items: a job's submit to its queue slice.
    driver_flows: Vec<(EventId, EventId)>,
    exes: FxHashMap<u32, String>,
    /// Each process's rank and host, where it ran in a distributed job.
    origins: FxHashMap<u32, String>,
    devices: FxHashMap<(u32, u32), String>,
    gpus: Vec<(u32, u32)>,
    stacks: Vec<String>,
    stack_index: Vec<Option<u32>>,
    kernel_names: FxHashMap<StringId, Rc<str>>,
    names: FxHashMap<String, Rc<str>>,
    demangler: Demangler,
    first_ns: Option<u64>,
    idle: Option<Box<IdleFolder>>,
    driver: Option<Box<(DriverTrace, Calls)>>,
    /// Command names from the driver events, for processes and threads the
    /// GPU and CPU traces do not name.
    driver_comms: driver::Comms,
    done: Option<Timeline>,
}

impl Builder {
    pub fn new() -> Self {
        Self {
            processes: Vec::new(),
            process_index: FxHashMap::default(),
            tracks: Vec::new(),
            packing: Vec::new(),
            extra: Vec::new(),
            track_index: FxHashMap::default(),
            events: Vec::new(),
            api_events: FxHashMap::default(),
            pending_flows: Vec::new(),
            driver_flows: Vec::new(),
            exes: FxHashMap::default(),
            origins: FxHashMap::default(),
            devices: FxHashMap::default(),
            gpus: Vec::new(),
            stacks: Vec::new(),
            stack_index: Vec::new(),
            kernel_names: FxHashMap::default(),
            names: FxHashMap::default(),
            demangler: Demangler::default(),
            first_ns: None,
            idle: None,
            driver: None,
            driver_comms: driver::Comms::default(),
            done: None,
        }
    }

    /// Also draws the streams' and devices' idle time.
    pub fn with_idle_slices(mut self) -> Self {
        self.idle = Some(Box::new(IdleFolder::new().with_slices()));
        self
    }

    /// Also draws a recording's GPU driver events ([`crate::write::driver`]).
    pub fn with_driver(mut self, trace: DriverTrace) -> Self {
        self.driver_comms = driver::Comms::of(&trace.events);
        self.driver = Some(Box::new((trace, Calls::default())));
        self
    }

    /// The finished timeline (after [`Sink::finish`]).
    pub fn take(&mut self) -> Option<Timeline> {
        self.done.take()
    }

    fn seen(&mut self, ns: u64) {
        self.first_ns = Some(self.first_ns.map_or(ns, |f| f.min(ns)));
    }

    fn name(&mut self, s: &str) -> Rc<str> {
        if let Some(n) = self.names.get(s) {
            return n.clone();
        }
        let n: Rc<str> = s.into();
        self.names.insert(s.to_owned(), n.clone());
        n
    }

    fn process(&mut self, pid: u64, sort: u64) -> usize {
        *self.process_index.entry(pid).or_insert_with(|| {
            self.processes.push(Process {
                pid,
                name: String::new(),
                sort,
                labels: Vec::new(),
            });
            self.processes.len() - 1
        })
    }

    fn track(&mut self, key: TrackKey, make: impl FnOnce() -> (Track, Packing)) -> TrackId {
        if let Some(&t) = self.track_index.get(&key) {
            return t;
        }
        let (t, p) = make();
        self.tracks.push(t);
        self.packing.push(p);
        let id = self.tracks.len() - 1;
        self.track_index.insert(key, id);
        id
    }

    fn thread(&mut self, ctx: &Context<'_>, pid: u32, tid: u32) -> TrackId {
        self.process(u64::from(pid), u64::from(pid));
        let comm = ctx
            .cpu
            .and_then(|c| c.comms.get(&(pid, tid)))
            .or_else(|| self.driver_comms.threads.get(&(pid, tid)));
        let name = comm.map_or_else(|| format!("thread {tid}"), |c| format!("{c} ({tid})"));
        self.track(TrackKey::Thread(pid, tid), || {
            let t = Track {
                pid: u64::from(pid),
                tid: u64::from(tid),
                name,
                rank: None,
                thread: true,
                is_async: false,
            };
            (t, Packing::Nest)
        })
    }

    fn gpu_track(&mut self, pid: u32, device: u32, stream: u32, sync: bool) -> TrackId {
        let gpid = gpu_pid(pid, device);
        if !self.process_index.contains_key(&gpid) {
            self.gpus.push((pid, device));
        }
        self.process(gpid, GPU_PID_BASE + u64::from(device));
        let (tid, name, rank, packing) = match (stream, sync) {
            (u32::MAX, _) => (
                u64::from(stream),
                "no stream".to_owned(),
                i32::MAX,
                Packing::Nest,
            ),
            (s, false) => (
                u64::from(s),
                format!("stream {s}"),
                stream_rank(s, 0),
                Packing::Apart,
            ),
            (s, true) => (
                SYNC_TID_BIT | u64::from(s),
                format!("stream {s} sync"),
                stream_rank(s, 255),
                Packing::Nest,
            ),
        };
        self.track(TrackKey::Gpu(gpid, tid), || {
            let t = Track {
                pid: gpid,
                tid,
                name,
                rank: Some(rank),
                thread: false,
                is_async: false,
            };
            (t, packing)
        })
    }

    /// The index of a stack's text, interned once.
    fn stack(&mut self, ctx: &Context<'_>, id: StackId) -> Option<u32> {
        let cpu = ctx.cpu?;
        let i = id.index();
        if self.stack_index.len() <= i {
            self.stack_index.resize(i + 1, None);
        }
        Some(*self.stack_index[i].get_or_insert_with(|| {
            self.stacks.push(cpu.stacks.text(id).to_owned());
            (self.stacks.len() - 1) as u32
        }))
    }

    fn push(&mut self, e: Event) -> EventId {
        self.seen(e.start_ns);
        self.events.push(e);
        self.events.len() - 1
    }

    fn api(&mut self, ctx: &Context<'_>, a: &ApiCall, m: &Match<'_>) {
        let track = self.thread(ctx, a.pid, a.tid);
        let mut args = vec![("correlation_id", Arg::Uint(u64::from(a.correlation_id)))];
        // The launch's own stack: GPU work refers to it through the flow.
        if let Some(s) = m.launch.and_then(|l| self.stack(ctx, l.stack)) {
            args.push(("stack", Arg::Stack(s)));
        }
        let name = self.name(ctx.strings.get(a.name));
        let id = self.push(Event {
            track,
            start_ns: a.start_ns,
            dur_ns: Some(a.end_ns.saturating_sub(a.start_ns)),
            cat: "cuda_api",
            name,
            args,
        });
        self.api_events
            .entry((a.pid, a.tid, a.start_ns, a.end_ns, a.name))
            .or_insert(id);
    }

    fn activity(&mut self, ctx: &Context<'_>, a: &Activity, m: &Match<'_>) {
        let is_sync = matches!(a.kind, ActivityKind::Sync { .. });
        let track = self.gpu_track(a.pid, a.device, a.stream, is_sync);
        let (cat, name) = match a.kind {
            ActivityKind::Kernel { name, .. } => {
                let n = match self.kernel_names.get(&name) {
                    Some(n) => n.clone(),
                    None => {
                        let n: Rc<str> = self.demangler.label(name, ctx.strings, ctx.view).into();
                        self.kernel_names.insert(name, n.clone());
                        n
                    }
                };
                ("kernel", n)
            }
            ActivityKind::Memcpy { kind, .. } => ("memcpy", self.name(&format!("Memcpy {kind}"))),
            ActivityKind::Memset { .. } => ("memset", self.name("Memset")),
            ActivityKind::Sync {
                sync_type,
                wait: Some(SyncWait {
                    stream: Some(s), ..
                }),
            } => (
                "sync",
                self.name(&format!("{} (stream {s})", sync_name(sync_type))),
            ),
            ActivityKind::Sync { sync_type, .. } => ("sync", self.name(sync_name(sync_type))),
        };
        let mut args = vec![
            ("correlation_id", Arg::Uint(u64::from(a.correlation_id))),
            ("device", Arg::Uint(u64::from(a.device))),
            ("context", Arg::Uint(u64::from(a.context))),
        ];
        match a.kind {
            ActivityKind::Kernel {
                grid, block, name, ..
            } => {
                args.push(("grid", Arg::Dim(grid)));
                args.push(("block", Arg::Dim(block)));
                // The slice shows the view's short name; the args keep the whole.
                let full = self.demangler.get(name, ctx.strings);
                if !ctx.view.is_complete() && *full != *self.kernel_names[&name] {
                    let full = full.to_owned();
                    args.push(("full_name", Arg::Str(self.name(&full))));
                }
            }
            ActivityKind::Memcpy {
                bytes,
                peer: Some(p),
                ..
            } => {
                args.push(("bytes", Arg::Uint(bytes)));
                args.push(("src_device", Arg::Uint(u64::from(p.src))));
                args.push(("dst_device", Arg::Uint(u64::from(p.dst))));
            }
            ActivityKind::Memcpy { bytes, .. } | ActivityKind::Memset { bytes, .. } => {
                args.push(("bytes", Arg::Uint(bytes)));
            }
            ActivityKind::Sync { sync_type, wait } => {
                args.push(("sync_type", Arg::Uint(u64::from(sync_type))));
                let w = wait.unwrap_or_default();
                for (key, v) in [
                    ("wait_on_stream", w.stream),
                    ("wait_on_event_id", w.event_id),
                    (
                        "wait_on_event_record_correlation_id",
                        w.record_correlation_id,
                    ),
                ] {
                    if let Some(v) = v {
                        args.push((key, Arg::Uint(u64::from(v))));
                    }
                }
            }
        }
        if let Some((graph, node)) = a.graph() {
            args.push(("graph_id", Arg::Uint(u64::from(graph))));
            args.push(("graph_node_id", Arg::Uint(node)));
        }
        // Written only where the work is charged to another stack than its
        // call's: the call's slice holds the call's stack.
        let charged = m.charge().stack;
        if charged != m.launch.map(|l| l.stack)
            && let Some(s) = charged.and_then(|s| self.stack(ctx, s))
        {
            args.push(("stack", Arg::Stack(s)));
        }
        let id = self.push(Event {
            track,
            start_ns: a.start_ns,
            dur_ns: Some(a.duration_ns()),
            cat,
            name,
            args,
        });
        if let Some(api) = m.api {
            self.pending_flows
                .push((id, "launch", call_key(a.pid, api)));
        }
        if let Some(record) = m.wait_record {
            self.pending_flows
                .push((id, "event_wait", call_key(a.pid, record)));
        }
    }

    /// An NVTX range: push/pop ranges on their thread's track, around the
    /// calls made inside them (as Nsight Systems and Kineto show them);
    /// start/end ranges, which may cross threads and overlap, on a track of
    /// their process.
    fn nvtx(&mut self, ctx: &Context<'_>, r: &NvtxRange) {
        let track = match r.kind {
            NvtxKind::PushPop => self.thread(ctx, r.pid, r.tid),
            NvtxKind::StartEnd => {
                self.process(u64::from(r.pid), u64::from(r.pid));
                let t = self.track(TrackKey::NvtxStartEnd(r.pid), || {
                    let t = Track {
                        pid: u64::from(r.pid),
                        tid: 0,
                        name: NVTX_START_END_TRACK.to_owned(),
                        rank: None,
                        thread: false,
                        is_async: false,
                    };
                    (t, Packing::Nest)
                });
                if !self.extra.contains(&t) {
                    self.extra.push(t);
                }
                t
            }
        };
        let mut args = vec![("tid", Arg::Uint(u64::from(r.tid)))];
        if let Some(d) = r.domain {
            args.push(("domain", Arg::Str(self.name(ctx.strings.get(d)))));
        }
        if r.unclosed {
            args.push(("unclosed", Arg::Uint(1)));
        }
        let name = self.name(ctx.strings.get(r.name));
        self.push(Event {
            track,
            start_ns: r.start_ns,
            dur_ns: Some(r.end_ns.saturating_sub(r.start_ns)),
            cat: "nvtx",
            name,
            args,
        });
    }

    fn marker(&mut self, ctx: &Context<'_>, l: &CpuLaunch, name: &str) {
        let track = self.thread(ctx, l.pid, l.tid);
        let args = match self.stack(ctx, l.stack) {
            Some(s) => vec![("stack", Arg::Stack(s))],
            None => Vec::new(),
        };
        let name = self.name(name);
        self.push(Event {
            track,
            start_ns: ctx.launch_ts(l),
            dur_ns: None,
            cat: "launch",
            name,
            args,
        });
    }

    fn idle_slices(&mut self, ctx: &Context<'_>, idle: &IdleFolder) {
        for s in idle.slices() {
            let (pid, device, stream) = s.stream;
            let track = self.gpu_track(pid, device, stream, false);
            let leaf = IdleFolder::leaf(ctx, s.stack, s.api).unwrap_or("");
            let api = s.api.map_or("", |a| ctx.strings.get(a));
            let args = vec![
                ("blamed_frame", Arg::Str(self.name(leaf))),
                ("api", Arg::Str(self.name(api))),
            ];
            let name = self.name(s.cause.label());
            self.push(Event {
                track,
                start_ns: s.start_ns,
                dur_ns: Some(s.end_ns.saturating_sub(s.start_ns)),
                cat: "idle",
                name,
                args,
            });
        }
        for &((pid, device), start, end) in idle.device_gaps() {
            let gpid = gpu_pid(pid, device);
            self.gpu_track(pid, device, u32::MAX, false);
            let track = self.track(TrackKey::DeviceIdle(gpid), || {
                let t = Track {
                    pid: gpid,
                    tid: 0,
                    name: DEVICE_IDLE.to_owned(),
                    rank: Some(-1),
                    thread: false,
                    is_async: false,
                };
                (t, Packing::Nest)
            });
            if !self.extra.contains(&track) {
                self.extra.push(track);
            }
            let name = self.name(DEVICE_IDLE);
            self.push(Event {
                track,
                start_ns: start,
                dur_ns: Some(end.saturating_sub(start)),
                cat: "idle",
                name,
                args: Vec::new(),
            });
        }
    }

    fn driver_items(&mut self, ctx: &Context<'_>, trace: &DriverTrace, calls: &[driver::Call]) {
        // Async tracks by process and name, in the items' order (by lane).
        let mut named: FxHashMap<(u64, String), usize> = FxHashMap::default();
        // Each flow's two ends, by its key.
        let mut links: FxHashMap<u64, (Option<EventId>, Option<EventId>)> = FxHashMap::default();
        let mut link = |it: &driver::Item, id: EventId| match it.link {
            driver::Link::From(k) => links.entry(k).or_default().0 = Some(id),
            driver::Link::To(k) => links.entry(k).or_default().1 = Some(id),
            driver::Link::None => {}
        };
        for it in driver::timeline(trace, calls) {
            let (pid, name) = match &it.lane {
                Lane::Thread { pid, tid, .. } => {
                    let track = self.thread(ctx, *pid, *tid);
                    let id = self.driver_event(track, &it);
                    link(&it, id);
                    continue;
                }
                Lane::Driver { name, .. } => {
                    let p = self.process(DRIVER_PID, DRIVER_PID);
                    self.processes[p].name = driver::process_name(trace);
                    (DRIVER_PID, name)
                }
                Lane::Process { pid, name } => {
                    let pid = u64::from(*pid);
                    self.process(pid, pid);
                    (pid, name)
                }
            };
            let n = named.len();
            let i = *named.entry((pid, name.clone())).or_insert(n);
            let track = self.track(TrackKey::Async(pid, i), || {
                let t = Track {
                    pid,
                    tid: 0,
                    name: name.clone(),
                    rank: Some(i32::try_from(i).unwrap_or(i32::MAX)),
                    thread: false,
                    is_async: true,
                };
                (t, Packing::Nest)
            });
            if i == n {
                // Its tid, unused by the JSON's async events, is given last.
                self.extra.push(track);
            }
            let id = self.driver_event(track, &it);
            link(&it, id);
        }
        let mut flows: Vec<(EventId, EventId)> = links
            .into_values()
            .filter_map(|(from, to)| Some((from?, to?)))
            .collect();
        flows.sort_unstable();
        self.driver_flows = flows;
    }

    fn driver_event(&mut self, track: TrackId, it: &driver::Item) -> EventId {
        let args = it
            .args
            .iter()
            .map(|(k, v)| (*k, Arg::Str(self.name(v))))
            .collect();
        let name = self.name(&it.name);
        self.push(Event {
            track,
            start_ns: it.start_ns,
            dur_ns: it.dur_ns,
            cat: "driver",
            name,
            args,
        })
    }

    /// Names every process, once all records are in.
    fn name_processes(&mut self, ctx: &Context<'_>) {
        for p in &mut self.processes {
            if p.pid < GPU_PID_BASE && p.pid != DRIVER_PID {
                let pid = p.pid as u32;
                p.name = cpu_process_name(
                    ctx,
                    &self.exes,
                    &self.driver_comms,
                    pid,
                    self.origins.get(&pid),
                );
            }
        }
        for &(pid, device) in &self.gpus {
            let name = if device == UNKNOWN_DEVICE {
                format!("GPU ? (device unknown, pid {pid})")
            } else {
                let dev = self.devices.get(&(pid, device)).map_or("", String::as_str);
                let place = match self.origins.get(&pid) {
                    Some(o) => format!("pid {pid}, {o}"),
                    None => format!("pid {pid}"),
                };
                format!("GPU {device} {dev} ({place})").replace("  ", " ")
            };
            let i = self.process_index[&gpu_pid(pid, device)];
            self.processes[i].name = name;
        }
    }

    /// Moves each slice that cannot share its track with the slices before it
    /// to a lane of its own; returns each track's events in begin order.
    fn lanes(&mut self) -> Vec<Vec<EventId>> {
        let mut by_track: Vec<Vec<EventId>> = vec![Vec::new(); self.tracks.len()];
        for (i, e) in self.events.iter().enumerate() {
            by_track[e.track].push(i);
        }
        let mut out: Vec<Vec<EventId>> = Vec::new();
        for (track, mut ids) in by_track.into_iter().enumerate() {
            let packing = self.packing[track];
            let ev = &self.events;
            // Begin order: by start; of slices that start together the longer
            // first where they nest, the shorter first where they must not overlap.
            ids.sort_by_key(|&i| {
                let e = &ev[i];
                let end = e.end_ns();
                let tie = match packing {
                    Packing::Nest => u64::MAX - end,
                    Packing::Apart => end,
                };
                (e.start_ns, tie, i)
            });
            // Per lane: the ends of its open slices, innermost last.
            let mut open: Vec<Vec<u64>> = vec![Vec::new()];
            let mut placed: Vec<Vec<EventId>> = vec![Vec::new()];
            for i in ids {
                let (start, end, instant) = {
                    let e = &self.events[i];
                    (e.start_ns, e.end_ns(), e.dur_ns.is_none())
                };
                let mut lane = 0;
                if !instant {
                    loop {
                        if lane == open.len() {
                            open.push(Vec::new());
                            placed.push(Vec::new());
                        }
                        let stack = &mut open[lane];
                        while stack.last().is_some_and(|&e| e <= start) {
                            stack.pop();
                        }
                        let fits = match (stack.last(), packing) {
                            (None, _) => true,
                            (Some(&outer), Packing::Nest) => outer >= end,
                            (Some(_), Packing::Apart) => false,
                        };
                        if fits {
                            stack.push(end);
                            break;
                        }
                        lane += 1;
                    }
                }
                placed[lane].push(i);
            }
            for (lane, ids) in placed.into_iter().enumerate() {
                let t = if lane == 0 {
                    track
                } else {
                    let base = self.tracks[track].clone();
                    let p = self.packing[track];
                    let t = self.track(TrackKey::Lane(track, lane), || {
                        // An async track's lanes keep its name: readers
                        // stack them as one track.
                        let (name, rank) = if base.is_async {
                            (base.name.clone(), base.rank)
                        } else {
                            (
                                format!("{} (overlap {lane})", base.name),
                                base.rank.map(|r| r.saturating_add(lane.min(254) as i32)),
                            )
                        };
                        let t = Track {
                            pid: base.pid,
                            tid: 0,
                            name,
                            rank,
                            thread: false,
                            is_async: base.is_async,
                        };
                        (t, p)
                    });
                    self.extra.push(t);
                    for &i in &ids {
                        self.events[i].track = t;
                    }
                    t
                };
                if out.len() <= t {
                    out.resize(t + 1, Vec::new());
                }
                out[t] = ids;
            }
        }
        out.resize(self.tracks.len(), Vec::new());
        out
    }

    /// Gives the tracks made at the end (device idle, lanes) small tids, above
    /// every stream and thread of their process.
    fn extra_tids(&mut self) {
        let mut next: FxHashMap<u64, u64> = FxHashMap::default();
        let mut used: rustc_hash::FxHashSet<(u64, u64)> = Default::default();
        for (i, t) in self.tracks.iter().enumerate() {
            if self.extra.contains(&i) {
                continue;
            }
            used.insert((t.pid, t.tid));
            if t.tid < SYNC_TID_BIT {
                let n = next.entry(t.pid).or_insert(1);
                *n = (*n).max(t.tid + 1);
            }
        }
        for &i in &self.extra {
            let pid = self.tracks[i].pid;
            let n = next.entry(pid).or_insert(1);
            while used.contains(&(pid, *n)) {
                *n += 1;
            }
            self.tracks[i].tid = *n;
            used.insert((pid, *n));
        }
    }

    /// The written order: each track's slices begin in order and end innermost
    /// first, ends before begins at one instant; the tracks merged by time, CPU
    /// tracks first at one instant (a flow's start before its end).
    fn steps(&self, per_track: &[Vec<EventId>]) -> Vec<Step> {
        let mut all: Vec<(u64, bool, TrackId, usize, Step)> =
            Vec::with_capacity(self.events.len() * 2);
        for (track, ids) in per_track.iter().enumerate() {
            let gpu = !self.tracks[track].thread;
            let mut seq = 0usize;
            let mut put = |ts: u64, s: Step, all: &mut Vec<_>| {
                all.push((ts, gpu, track, seq, s));
                seq += 1;
            };
            let mut open: Vec<EventId> = Vec::new();
            for &i in ids {
                let e = &self.events[i];
                while let Some(&o) = open
                    .last()
                    .filter(|&&o| self.events[o].end_ns() <= e.start_ns)
                {
                    open.pop();
                    put(self.events[o].end_ns(), Step::End(o), &mut all);
                }
                match e.dur_ns {
                    Some(_) => {
                        put(e.start_ns, Step::Begin(i), &mut all);
                        open.push(i);
                    }
                    None => put(e.start_ns, Step::Instant(i), &mut all),
                }
            }
            while let Some(o) = open.pop() {
                put(self.events[o].end_ns(), Step::End(o), &mut all);
            }
        }
        all.sort_unstable_by_key(|s| (s.0, s.1, s.2, s.3));
        all.into_iter().map(|s| s.4).collect()
    }

    fn build(&mut self, ctx: &Context<'_>, summary: &Summary) -> Timeline {
        self.name_processes(ctx);
        let per_track = self.lanes();
        self.extra_tids();
        let steps = self.steps(&per_track);
        let mut flows = Vec::new();
        let mut flows_out: FxHashMap<EventId, Vec<usize>> = FxHashMap::default();
        let mut flows_in: FxHashMap<EventId, Vec<usize>> = FxHashMap::default();
        for &(to, cat, key) in &self.pending_flows {
            let Some(&from) = self.api_events.get(&key) else {
                continue;
            };
            flows_out.entry(from).or_default().push(flows.len());
            flows_in.entry(to).or_default().push(flows.len());
            flows.push(Flow {
                id: flows.len() as u64 + 1,
                cat,
                from,
                to,
            });
        }
        for &(from, to) in &self.driver_flows {
            flows_out.entry(from).or_default().push(flows.len());
            flows_in.entry(to).or_default().push(flows.len());
            flows.push(Flow {
                id: flows.len() as u64 + 1,
                cat: "submit",
                from,
                to,
            });
        }
        Timeline {
            processes: std::mem::take(&mut self.processes),
            tracks: std::mem::take(&mut self.tracks),
            events: std::mem::take(&mut self.events),
            flows,
            flows_out,
            flows_in,
            stacks: std::mem::take(&mut self.stacks),
            steps,
            base_ns: self.first_ns.unwrap_or(0),
            clock: ctx.clock,
            kernels: summary.kernels,
            kernels_matched: summary.kernels_matched,
            notes: summary.notes.iter().map(ToString::to_string).collect(),
        }
    }
}

/// A process's place in a distributed job, for its name: `rank 3 of 8 on n1`;
/// none for a process outside one: alone in its job, or rank 0 of a job of
/// unknown size (PyTorch's profiler writes a `distributedInfo` for any process
/// that set up torch.distributed).
fn origin_text(o: &Origin) -> Option<String> {
    let distributed = match o.world_size {
        Some(w) => w > 1,
        None => o.rank.is_some_and(|r| r > 0),
    };
    if !distributed {
        return None;
    }
    let rank = match (o.rank, o.world_size) {
        (Some(r), Some(w)) => format!("rank {r} of {w}"),
        (Some(r), None) => format!("rank {r}"),
        _ => return None,
    };
    Some(match &o.host {
        Some(h) => format!("{rank} on {h}"),
        None => rank,
    })
}

impl Sink for Builder {
    fn record(&mut self, ctx: &Context<'_>, rec: &Record, m: &Match<'_>) -> Result<()> {
        if let Some(idle) = self.idle.as_mut() {
            idle.record(ctx, rec, m)?;
        }
        if let Some(d) = self.driver.as_mut() {
            d.1.take(ctx, rec, m);
        }
        match rec {
            Record::Process(p) => {
                self.exes.insert(p.pid, p.exe.clone());
                self.seen(p.start_ns);
                self.process(u64::from(p.pid), u64::from(p.pid));
            }
            Record::Device(d) => {
                self.devices.insert((d.pid, d.id), d.name.clone());
            }
            Record::Api(a) => self.api(ctx, a, m),
            Record::Activity(a) => self.activity(ctx, a, m),
            Record::Note(n) => {
                let p = self.process(u64::from(n.pid), u64::from(n.pid));
                if !self.processes[p].labels.contains(&n.text) {
                    self.processes[p].labels.push(n.text.clone());
                }
            }
            Record::Nvtx(r) => self.nvtx(ctx, r),
            Record::Origin(o) => {
                if let Some(t) = origin_text(&o.origin) {
                    self.origins.insert(o.pid, t);
                }
            }
            Record::Dropped(_)
            | Record::Overhead(_)
            | Record::Module(_)
            | Record::Stack(_)
            | Record::CallStack(_)
            | Record::GraphNode(_)
            | Record::Thread(_)
            | Record::Autograd(_)
            | Record::PcSample(_) => {}
        }
        Ok(())
    }

    fn pending(
        &mut self,
        ctx: &Context<'_>,
        launch: &CpuLaunch,
        _api: Option<&ApiInfo>,
    ) -> Result<()> {
        self.marker(ctx, launch, crate::write::PENDING_MARKER);
        Ok(())
    }

    fn captured(
        &mut self,
        ctx: &Context<'_>,
        launch: &CpuLaunch,
        _api: Option<&ApiInfo>,
    ) -> Result<()> {
        self.marker(ctx, launch, crate::write::CAPTURED_MARKER);
        Ok(())
    }

    fn finish(&mut self, ctx: &Context<'_>, summary: &Summary) -> Result<()> {
        if let Some(mut idle) = self.idle.take() {
            idle.finish(ctx, summary)?;
            self.idle_slices(ctx, &idle);
        }
        if let Some(d) = self.driver.take() {
            let (trace, calls) = *d;
            self.driver_items(ctx, &trace, &calls.into_calls());
        }
        self.done = Some(self.build(ctx, summary));
        Ok(())
    }
}

/// An API call as both its record and the work's match know it: (pid, tid,
/// start, end, name). Calls of one thread can share a start.
type CallKey = (u32, u32, u64, u64, StringId);

fn call_key(pid: u32, api: &ApiInfo) -> CallKey {
    (pid, api.tid, api.start_ns, api.end_ns, api.name)
}

/// A CPU process's name: its executable, else its main thread's command name
/// (from the CPU trace, else from the driver events), with its pid (and its
/// rank); or its pid alone.
fn cpu_process_name(
    ctx: &Context<'_>,
    exes: &FxHashMap<u32, String>,
    driver_comms: &driver::Comms,
    pid: u32,
    origin: Option<&String>,
) -> String {
    let exe = exes.get(&pid).map(|e| e.trim()).filter(|e| !e.is_empty());
    let comm = || {
        ctx.cpu
            .and_then(|c| c.comms.get(&(pid, pid)))
            .or_else(|| driver_comms.processes.get(&pid))
            .map(|c| c.trim())
            .filter(|c| !c.is_empty())
    };
    let place = match origin {
        Some(o) => format!("pid {pid}, {o}"),
        None => format!("pid {pid}"),
    };
    match exe.or_else(comm) {
        Some(name) => format!("{name} ({place})"),
        None => place,
    }
}

/// A stream's rank among its GPU's tracks: its lanes and its sync track right
/// after it.
fn stream_rank(stream: u32, sub: i32) -> i32 {
    (stream.min((1 << 22) - 1) as i32) * 256 + sub
}

/// A synchronization's slice name, by CUPTI's `CUpti_ActivitySynchronizationType`.
pub(crate) fn sync_name(sync_type: u8) -> &'static str {
    match sync_type {
        1 => "Event Synchronize",
        2 => "Stream Wait Event",
        3 => "Stream Synchronize",
        4 => "Context Synchronize",
        _ => "Synchronize",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sync_track_and_lanes_rank_right_after_their_stream() {
        assert_eq!(stream_rank(7, 1), stream_rank(7, 0) + 1);
        assert!(stream_rank(8, 0) > stream_rank(7, 255));
        assert!(stream_rank(u32::MAX, 255) < i32::MAX);
    }
}
