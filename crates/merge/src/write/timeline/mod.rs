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

mod layout;
mod records;
mod tracks;

use std::rc::Rc;

use rustc_hash::FxHashMap;

use crate::model::{Clock, StringId};
use crate::read::driver::DriverTrace;
use crate::write::demangle::Demangler;
use crate::write::driver::{self, Calls};
use crate::write::idle::IdleFolder;

use records::CallKey;

/// First pid of the pseudo-processes that hold GPU tracks.
pub(crate) const GPU_PID_BASE: u64 = 1 << 30;

/// The pid of the pseudo-process holding the tracks of `device` of `pid`
/// (`None`: the device is unknown).
pub fn gpu_pid(pid: u32, device: Option<u32>) -> u64 {
    device_pid(pid, device.unwrap_or(u32::MAX))
}

/// [`gpu_pid`] of a track's device, `u32::MAX` when unknown (as the timeline
/// keys its GPU tracks).
pub(crate) fn device_pid(pid: u32, device: u32) -> u64 {
    GPU_PID_BASE + (u64::from(device.min(127)) << 22) + u64::from(pid & ((1 << 22) - 1))
}

/// The track of a process's NVTX start/end ranges.
pub(crate) const NVTX_START_END_TRACK: &str = "NVTX ranges (start/end)";

/// Set in the tid of a stream's synchronization track.
pub(crate) const SYNC_TID_BIT: u64 = 1 << 31;

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
    use super::tracks::stream_rank;

    #[test]
    fn sync_track_and_lanes_rank_right_after_their_stream() {
        assert_eq!(stream_rank(7, 1), stream_rank(7, 0) + 1);
        assert!(stream_rank(8, 0) > stream_rank(7, 255));
        assert!(stream_rank(u32::MAX, 255) < i32::MAX);
    }
}
