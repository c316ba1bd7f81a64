//! Perfetto's own protobuf trace (`perfetto.protos.Trace`), for timelines too
//! large for the Chrome JSON: the same tracks, slices, flows, markers and names
//! as [`crate::write::chrome`], at a fraction of the bytes per launch.
//!
//! - Every event is a `TrackEvent` on one packet sequence. Event names,
//!   categories, argument names and CPU stacks are interned in that sequence's
//!   incremental state (`InternedData`), so each is written once and events
//!   refer to it by a small id.
//! - CPU processes and threads are process and thread tracks; GPU work is on a
//!   pseudo-process per (process, device), with pid
//!   [`GPU_PID_BASE`](crate::write::chrome::GPU_PID_BASE) `+ device × 2^22 + pid`
//!   as in the JSON, holding one named track per stream and a `stream N sync`
//!   track beside it. A recorder's note ("simulated GPU: …") is a process label.
//! - A slice is a `SLICE_BEGIN`/`SLICE_END` pair; instant markers are
//!   `INSTANT`s. Timestamps are the input's ns, unchanged.
//! - With [`Writer::with_idle_slices`], the streams' and devices' idle time is
//!   drawn as in the JSON: slices named by cause on each stream's track, with
//!   the blamed frame and API call as arguments, and a device track of its gaps.
//! - With [`Writer::with_driver`], a recording's GPU driver events on the
//!   same tracks as in the JSON ([`crate::write::driver`]).
//! - Flows use flow ids: an API call's slice starts the flow
//!   `pid << 32 | correlation id`, and each activity it caused (or that waits on
//!   the event it recorded) names that id, so the arrow runs from the call to
//!   the GPU work. Work of one call (a graph launch's kernels) is chained in
//!   time order, as Perfetto links the events that share a flow id.
//!
//! The messages are declared in [`proto`] with prost's derive, field for field
//! from Perfetto's published `perfetto_trace.proto`.

use std::io::Write;
use std::path::Path;

use prost::Message as _;
use rustc_hash::FxHashMap;

use crate::error::{Error, Result};
use crate::join::{ApiInfo, Context, Match, Sink, Summary};
use crate::model::{Activity, ActivityKind, Record, SyncWait, UNKNOWN_DEVICE};
use crate::read::cpu::{CpuLaunch, StackId};
use crate::read::driver::DriverTrace;
use crate::write::chrome::{DEVICE_IDLE_TID, SYNC_TID_BIT, gpu_pid, sync_name};
use crate::write::demangle::Demangler;
use crate::write::driver::{self, Call, Calls, DRIVER_PID, Lane};
use crate::write::idle::{DEVICE_IDLE, IdleFolder};

/// Whether `path` asks for a Perfetto protobuf trace: it ends in `.pftrace` or
/// `.perfetto-trace`.
pub fn wanted_for(path: &Path) -> bool {
    let name = path.to_string_lossy().to_ascii_lowercase();
    name.ends_with(".pftrace") || name.ends_with(".perfetto-trace")
}

/// The messages of Perfetto's `perfetto_trace.proto` that gpuperf writes (each
/// with the fields it uses; `oneof` members are plain optional fields, which is
/// the same on the wire).
pub mod proto {
    /// `perfetto.protos.Trace`: the file is this message.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Trace {
        /// The packets.
        #[prost(message, repeated, tag = "1")]
        pub packet: Vec<TracePacket>,
    }

    /// `TracePacket`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct TracePacket {
        /// Time in ns on the trace's clock.
        #[prost(uint64, optional, tag = "8")]
        pub timestamp: Option<u64>,
        /// A track event (`oneof data`).
        #[prost(message, optional, tag = "11")]
        pub track_event: Option<TrackEvent>,
        /// A track's description (`oneof data`).
        #[prost(message, optional, tag = "60")]
        pub track_descriptor: Option<TrackDescriptor>,
        /// The packet sequence: interned ids are scoped to it.
        #[prost(uint32, optional, tag = "10")]
        pub trusted_packet_sequence_id: Option<u32>,
        /// Interned entries first used by this packet.
        #[prost(message, optional, tag = "12")]
        pub interned_data: Option<InternedData>,
        /// [`SEQ_INCREMENTAL_STATE_CLEARED`], [`SEQ_NEEDS_INCREMENTAL_STATE`].
        #[prost(uint32, optional, tag = "13")]
        pub sequence_flags: Option<u32>,
    }

    /// `TracePacket.SequenceFlags.SEQ_INCREMENTAL_STATE_CLEARED`.
    pub const SEQ_INCREMENTAL_STATE_CLEARED: u32 = 1;
    /// `TracePacket.SequenceFlags.SEQ_NEEDS_INCREMENTAL_STATE`.
    pub const SEQ_NEEDS_INCREMENTAL_STATE: u32 = 2;

    /// `TrackEvent`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct TrackEvent {
        /// Interned categories.
        #[prost(uint64, repeated, packed = "false", tag = "3")]
        pub category_iids: Vec<u64>,
        /// Interned name (`oneof name_field`).
        #[prost(uint64, optional, tag = "10")]
        pub name_iid: Option<u64>,
        /// Plain name (`oneof name_field`).
        #[prost(string, optional, tag = "23")]
        pub name: Option<String>,
        /// `TrackEvent.Type`: [`TYPE_SLICE_BEGIN`], [`TYPE_SLICE_END`], [`TYPE_INSTANT`].
        #[prost(int32, optional, tag = "9")]
        pub r#type: Option<i32>,
        /// The track's uuid.
        #[prost(uint64, optional, tag = "11")]
        pub track_uuid: Option<u64>,
        /// Arguments.
        #[prost(message, repeated, tag = "4")]
        pub debug_annotations: Vec<DebugAnnotation>,
        /// Flows this event starts or continues.
        #[prost(fixed64, repeated, packed = "false", tag = "47")]
        pub flow_ids: Vec<u64>,
        /// Flows this event ends.
        #[prost(fixed64, repeated, packed = "false", tag = "48")]
        pub terminating_flow_ids: Vec<u64>,
    }

    /// `TrackEvent.Type.TYPE_SLICE_BEGIN`.
    pub const TYPE_SLICE_BEGIN: i32 = 1;
    /// `TrackEvent.Type.TYPE_SLICE_END`.
    pub const TYPE_SLICE_END: i32 = 2;
    /// `TrackEvent.Type.TYPE_INSTANT`.
    pub const TYPE_INSTANT: i32 = 3;

    /// `DebugAnnotation`: one argument.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct DebugAnnotation {
        /// Interned name (`oneof name_field`).
        #[prost(uint64, optional, tag = "1")]
        pub name_iid: Option<u64>,
        /// Plain name (`oneof name_field`).
        #[prost(string, optional, tag = "10")]
        pub name: Option<String>,
        /// `oneof value`.
        #[prost(uint64, optional, tag = "3")]
        pub uint_value: Option<u64>,
        /// `oneof value`.
        #[prost(int64, optional, tag = "4")]
        pub int_value: Option<i64>,
        /// `oneof value`.
        #[prost(string, optional, tag = "6")]
        pub string_value: Option<String>,
        /// `oneof value`: an interned string.
        #[prost(uint64, optional, tag = "17")]
        pub string_value_iid: Option<u64>,
        /// The elements of an array value.
        #[prost(message, repeated, tag = "12")]
        pub array_values: Vec<DebugAnnotation>,
    }

    /// `InternedData`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct InternedData {
        /// Categories.
        #[prost(message, repeated, tag = "1")]
        pub event_categories: Vec<NameEntry>,
        /// Event names.
        #[prost(message, repeated, tag = "2")]
        pub event_names: Vec<NameEntry>,
        /// Argument names.
        #[prost(message, repeated, tag = "3")]
        pub debug_annotation_names: Vec<NameEntry>,
        /// String argument values.
        #[prost(message, repeated, tag = "29")]
        pub debug_annotation_string_values: Vec<InternedString>,
    }

    /// `EventCategory`, `EventName` and `DebugAnnotationName`, which have the
    /// same fields.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct NameEntry {
        /// Interning id, from 1.
        #[prost(uint64, optional, tag = "1")]
        pub iid: Option<u64>,
        /// The name.
        #[prost(string, optional, tag = "2")]
        pub name: Option<String>,
    }

    /// `InternedString`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct InternedString {
        /// Interning id, from 1.
        #[prost(uint64, optional, tag = "1")]
        pub iid: Option<u64>,
        /// The string's bytes.
        #[prost(bytes = "vec", optional, tag = "2")]
        pub str: Option<Vec<u8>>,
    }

    /// `TrackDescriptor`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct TrackDescriptor {
        /// Unique id, referred to by events.
        #[prost(uint64, optional, tag = "1")]
        pub uuid: Option<u64>,
        /// The enclosing track.
        #[prost(uint64, optional, tag = "5")]
        pub parent_uuid: Option<u64>,
        /// Name of a track that is neither a process nor a thread.
        #[prost(string, optional, tag = "2")]
        pub name: Option<String>,
        /// Set on a process's track.
        #[prost(message, optional, tag = "3")]
        pub process: Option<ProcessDescriptor>,
        /// Set on a thread's track.
        #[prost(message, optional, tag = "4")]
        pub thread: Option<ThreadDescriptor>,
        /// `ChildTracksOrdering`: [`ORDER_EXPLICIT`] sorts children by rank.
        #[prost(int32, optional, tag = "11")]
        pub child_ordering: Option<i32>,
        /// Rank among siblings.
        #[prost(int32, optional, tag = "12")]
        pub sibling_order_rank: Option<i32>,
    }

    /// `TrackDescriptor.ChildTracksOrdering.EXPLICIT`.
    pub const ORDER_EXPLICIT: i32 = 3;

    /// `ProcessDescriptor`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ProcessDescriptor {
        /// Process id.
        #[prost(int32, optional, tag = "1")]
        pub pid: Option<i32>,
        /// Name.
        #[prost(string, optional, tag = "6")]
        pub process_name: Option<String>,
        /// Labels shown with the name.
        #[prost(string, repeated, tag = "8")]
        pub process_labels: Vec<String>,
    }

    /// `ThreadDescriptor`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ThreadDescriptor {
        /// Process id.
        #[prost(int32, optional, tag = "1")]
        pub pid: Option<i32>,
        /// Thread id.
        #[prost(int64, optional, tag = "2")]
        pub tid: Option<i64>,
        /// Name.
        #[prost(string, optional, tag = "5")]
        pub thread_name: Option<String>,
    }
}

use proto::{DebugAnnotation, TrackDescriptor, TrackEvent};

/// The one packet sequence this writer uses.
const SEQUENCE: u32 = 1;

/// The flow an API call starts: unique per (pid, correlation id), never 0.
pub fn flow_id(pid: u32, correlation_id: u32) -> u64 {
    (u64::from(pid) << 32) | u64::from(correlation_id)
}

#[derive(Copy, Clone, PartialEq, Eq, Hash)]
enum TrackKey {
    Process(u64),
    Thread(u32, u32),
    Stream(u64, u64),
    Driver(u32),
    ProcessDriver(u32, u32),
}

/// Strings to small ids, each id written once in the sequence's interned data.
#[derive(Default)]
struct Interner(FxHashMap<String, u64>);

impl Interner {
    /// The id of `s`, and whether it is new.
    fn get(&mut self, s: &str) -> (u64, bool) {
        if let Some(&id) = self.0.get(s) {
            return (id, false);
        }
        let id = self.0.len() as u64 + 1;
        self.0.insert(s.to_owned(), id);
        (id, true)
    }
}

#[derive(Default, Clone)]
struct ProcessInfo {
    name: String,
    labels: Vec<String>,
}

/// Writes a Perfetto protobuf trace as the join streams records; a [`Sink`].
pub struct Writer<W: Write> {
    out: W,
    buf: Vec<u8>,
    tracks: FxHashMap<TrackKey, u64>,
    processes: FxHashMap<u64, ProcessInfo>,
    devices: FxHashMap<(u32, u32), String>,
    exes: FxHashMap<u32, String>,
    names: Interner,
    categories: Interner,
    arg_names: Interner,
    strings: Interner,
    /// Interned stack ids by [`StackId`]: a stack is interned once, however many
    /// launches share it.
    stack_iids: Vec<Option<u64>>,
    /// Interned entries new since the last packet: they go with the next one.
    new_interned: proto::InternedData,
    demangler: Demangler,
    idle: Option<Box<IdleFolder>>,
    driver: Option<Box<(DriverTrace, Calls)>>,
    written: u64,
}

impl<W: Write> Writer<W> {
    /// Starts the trace: the first packet clears the sequence's interned state.
    pub fn new(out: W) -> Result<Self> {
        let mut w = Self {
            out,
            buf: Vec::new(),
            tracks: FxHashMap::default(),
            processes: FxHashMap::default(),
            devices: FxHashMap::default(),
            exes: FxHashMap::default(),
            names: Interner::default(),
            categories: Interner::default(),
            arg_names: Interner::default(),
            strings: Interner::default(),
            stack_iids: Vec::new(),
            new_interned: proto::InternedData::default(),
            demangler: Demangler::default(),
            idle: None,
            driver: None,
            written: 0,
        };
        let first = proto::TracePacket {
            trusted_packet_sequence_id: Some(SEQUENCE),
            sequence_flags: Some(proto::SEQ_INCREMENTAL_STATE_CLEARED),
            ..Default::default()
        };
        w.packet(&first).map_err(write_error)?;
        Ok(w)
    }

    /// Also draws the streams' and devices' idle time (see the module docs).
    pub fn with_idle_slices(mut self) -> Self {
        self.idle = Some(Box::new(IdleFolder::new().with_slices()));
        self
    }

    /// Also draws a recording's GPU driver events, as the JSON does.
    pub fn with_driver(mut self, trace: DriverTrace) -> Self {
        self.driver = Some(Box::new((trace, Calls::default())));
        self
    }

    fn driver_track(
        &mut self,
        ctx: &Context<'_>,
        trace: &DriverTrace,
        lane: &Lane,
    ) -> std::io::Result<u64> {
        match lane {
            Lane::Thread { pid, tid, .. } => self.thread(ctx, *pid, *tid),
            Lane::Driver { order, name } => {
                let parent = self.process(DRIVER_PID, &driver::process_name(trace), None)?;
                self.sorted_track(TrackKey::Driver(*order), parent, name, *order)
            }
            Lane::Process { pid, order, name } => {
                let parent = self.cpu_process(*pid)?;
                self.sorted_track(TrackKey::ProcessDriver(*pid, *order), parent, name, *order)
            }
        }
    }

    /// A driver track under `parent`: described once, sorted by `order`.
    fn sorted_track(
        &mut self,
        key: TrackKey,
        parent: u64,
        name: &str,
        order: u32,
    ) -> std::io::Result<u64> {
        let (uuid, new) = self.track(key);
        if new {
            self.descriptor(TrackDescriptor {
                uuid: Some(uuid),
                parent_uuid: Some(parent),
                name: Some(name.to_owned()),
                sibling_order_rank: Some(order as i32),
                ..Default::default()
            })?;
        }
        Ok(uuid)
    }

    /// Slices are written per track in time order, each ended before the next
    /// one that does not nest in it begins.
    fn driver_items(
        &mut self,
        ctx: &Context<'_>,
        trace: &DriverTrace,
        calls: &[Call],
    ) -> std::io::Result<()> {
        let items = driver::timeline(trace, calls);
        let mut open: Vec<(u64, u64)> = Vec::new();
        let mut lane: Option<&Lane> = None;
        for it in &items {
            let track = self.driver_track(ctx, trace, &it.lane)?;
            if lane != Some(&it.lane) {
                while let Some((t, at)) = open.pop() {
                    self.event(at, end(t))?;
                }
                lane = Some(&it.lane);
            }
            while let Some(&(t, at)) = open.last().filter(|(_, at)| *at <= it.start_ns) {
                open.pop();
                self.event(at, end(t))?;
            }
            let args = it.args.iter().map(|(k, v)| self.string_arg(k, v)).collect();
            let e = TrackEvent {
                category_iids: vec![self.category_iid("driver")],
                name_iid: Some(self.name_iid(&it.name)),
                r#type: Some(if it.dur_ns.is_some() {
                    proto::TYPE_SLICE_BEGIN
                } else {
                    proto::TYPE_INSTANT
                }),
                track_uuid: Some(track),
                debug_annotations: args,
                ..Default::default()
            };
            self.event(it.start_ns, e)?;
            if let Some(d) = it.dur_ns {
                open.push((track, it.start_ns + d));
            }
        }
        while let Some((t, at)) = open.pop() {
            self.event(at, end(t))?;
        }
        Ok(())
    }

    /// A string argument, its value interned (idle slices repeat few values).
    fn string_arg(&mut self, name: &str, v: &str) -> DebugAnnotation {
        let (iid, new) = self.strings.get(v);
        if new {
            self.new_interned
                .debug_annotation_string_values
                .push(proto::InternedString {
                    iid: Some(iid),
                    str: Some(v.as_bytes().to_vec()),
                });
        }
        DebugAnnotation {
            string_value_iid: Some(iid),
            ..self.arg(name)
        }
    }

    fn idle_slices(&mut self, ctx: &Context<'_>, idle: &IdleFolder) -> std::io::Result<()> {
        for s in idle.slices() {
            let (pid, device, stream) = s.stream;
            let track = self.stream_track(pid, device, stream, false)?;
            let leaf = IdleFolder::leaf(ctx, s.stack, s.api).unwrap_or("");
            let api = s.api.map_or("", |a| ctx.strings.get(a));
            let args = vec![
                self.string_arg("blamed_frame", leaf),
                self.string_arg("api", api),
            ];
            let begin = TrackEvent {
                category_iids: vec![self.category_iid("idle")],
                name_iid: Some(self.name_iid(s.cause.label())),
                r#type: Some(proto::TYPE_SLICE_BEGIN),
                track_uuid: Some(track),
                debug_annotations: args,
                ..Default::default()
            };
            self.event(s.start_ns, begin)?;
            self.event(s.end_ns, end(track))?;
        }
        for &((pid, device), start, stop) in idle.device_gaps() {
            let parent = self.gpu_process(pid, device)?;
            let gpid = gpu_pid(pid, device);
            let (track, new) = self.track(TrackKey::Stream(gpid, DEVICE_IDLE_TID));
            if new {
                self.descriptor(TrackDescriptor {
                    uuid: Some(track),
                    parent_uuid: Some(parent),
                    name: Some(DEVICE_IDLE.to_owned()),
                    sibling_order_rank: Some(-1),
                    ..Default::default()
                })?;
            }
            let begin = TrackEvent {
                category_iids: vec![self.category_iid("idle")],
                name_iid: Some(self.name_iid(DEVICE_IDLE)),
                r#type: Some(proto::TYPE_SLICE_BEGIN),
                track_uuid: Some(track),
                ..Default::default()
            };
            self.event(start, begin)?;
            self.event(stop, end(track))?;
        }
        Ok(())
    }

    /// Returns the underlying stream.
    pub fn into_inner(self) -> W {
        self.out
    }

    /// Bytes written so far.
    pub fn bytes_written(&self) -> u64 {
        self.written
    }

    /// Writes one packet as a `Trace.packet` field (tag 1, length-delimited).
    fn packet(&mut self, p: &proto::TracePacket) -> std::io::Result<()> {
        self.buf.clear();
        self.buf.push(0x0a);
        p.encode_length_delimited(&mut self.buf)
            .map_err(std::io::Error::other)?;
        self.written += self.buf.len() as u64;
        self.out.write_all(&self.buf)
    }

    fn descriptor(&mut self, d: TrackDescriptor) -> std::io::Result<()> {
        self.packet(&proto::TracePacket {
            track_descriptor: Some(d),
            trusted_packet_sequence_id: Some(SEQUENCE),
            ..Default::default()
        })
    }

    /// Writes an event with the interned entries it (or anything since the last
    /// event) introduced.
    fn event(&mut self, ts: u64, e: TrackEvent) -> std::io::Result<()> {
        let interned = std::mem::take(&mut self.new_interned);
        let empty = interned == proto::InternedData::default();
        self.packet(&proto::TracePacket {
            timestamp: Some(ts),
            track_event: Some(e),
            trusted_packet_sequence_id: Some(SEQUENCE),
            interned_data: (!empty).then_some(interned),
            sequence_flags: Some(proto::SEQ_NEEDS_INCREMENTAL_STATE),
            ..Default::default()
        })
    }

    fn name_iid(&mut self, name: &str) -> u64 {
        let (iid, new) = self.names.get(name);
        if new {
            self.new_interned.event_names.push(entry(iid, name));
        }
        iid
    }

    fn category_iid(&mut self, cat: &str) -> u64 {
        let (iid, new) = self.categories.get(cat);
        if new {
            self.new_interned.event_categories.push(entry(iid, cat));
        }
        iid
    }

    fn arg(&mut self, name: &str) -> DebugAnnotation {
        let (iid, new) = self.arg_names.get(name);
        if new {
            self.new_interned
                .debug_annotation_names
                .push(entry(iid, name));
        }
        DebugAnnotation {
            name_iid: Some(iid),
            ..Default::default()
        }
    }

    fn uint_arg(&mut self, name: &str, v: u64) -> DebugAnnotation {
        DebugAnnotation {
            uint_value: Some(v),
            ..self.arg(name)
        }
    }

    fn array_arg(&mut self, name: &str, v: [u32; 3]) -> DebugAnnotation {
        DebugAnnotation {
            array_values: v
                .iter()
                .map(|&x| DebugAnnotation {
                    int_value: Some(i64::from(x)),
                    ..Default::default()
                })
                .collect(),
            ..self.arg(name)
        }
    }

    /// The `stack` argument: the stack's text, interned once per stack.
    fn stack_arg(&mut self, ctx: &Context<'_>, id: StackId) -> Option<DebugAnnotation> {
        let cpu = ctx.cpu?;
        let i = id.index();
        if self.stack_iids.len() <= i {
            self.stack_iids.resize(i + 1, None);
        }
        let iid = match self.stack_iids[i] {
            Some(iid) => iid,
            None => {
                let text = cpu.stacks.text(id);
                let (iid, new) = self.strings.get(text);
                if new {
                    self.new_interned
                        .debug_annotation_string_values
                        .push(proto::InternedString {
                            iid: Some(iid),
                            str: Some(text.as_bytes().to_vec()),
                        });
                }
                self.stack_iids[i] = Some(iid);
                iid
            }
        };
        Some(DebugAnnotation {
            string_value_iid: Some(iid),
            ..self.arg("stack")
        })
    }

    /// The uuid of a track, and whether it is new.
    fn track(&mut self, key: TrackKey) -> (u64, bool) {
        let next = self.tracks.len() as u64 + 1;
        match self.tracks.entry(key) {
            std::collections::hash_map::Entry::Occupied(e) => (*e.get(), false),
            std::collections::hash_map::Entry::Vacant(e) => (*e.insert(next), true),
        }
    }

    /// A process's track; its descriptor is written again when the name or
    /// labels change (Perfetto keeps the last).
    fn process(&mut self, pid: u64, name: &str, label: Option<&str>) -> std::io::Result<u64> {
        let (uuid, new) = self.track(TrackKey::Process(pid));
        let info = self.processes.entry(pid).or_default();
        let mut changed = new || info.name != name;
        info.name = name.to_owned();
        if let Some(l) = label.filter(|l| !info.labels.iter().any(|x| x == l)) {
            info.labels.push(l.to_owned());
            changed = true;
        }
        if changed {
            let info = info.clone();
            self.descriptor(TrackDescriptor {
                uuid: Some(uuid),
                process: Some(proto::ProcessDescriptor {
                    pid: Some(pid as i32),
                    process_name: Some(info.name),
                    process_labels: info.labels,
                }),
                child_ordering: Some(proto::ORDER_EXPLICIT),
                ..Default::default()
            })?;
        }
        Ok(uuid)
    }

    fn cpu_process(&mut self, pid: u32) -> std::io::Result<u64> {
        let name = match self.exes.get(&pid) {
            Some(exe) => format!("{exe} (pid {pid})"),
            None => format!("pid {pid}"),
        };
        self.process(u64::from(pid), &name, None)
    }

    fn thread(&mut self, ctx: &Context<'_>, pid: u32, tid: u32) -> std::io::Result<u64> {
        self.cpu_process(pid)?;
        let (uuid, new) = self.track(TrackKey::Thread(pid, tid));
        if new {
            let comm = ctx.cpu.and_then(|c| c.comms.get(&(pid, tid)));
            let name = comm.map_or_else(|| format!("thread {tid}"), |c| format!("{c} ({tid})"));
            self.descriptor(TrackDescriptor {
                uuid: Some(uuid),
                thread: Some(proto::ThreadDescriptor {
                    pid: Some(pid as i32),
                    tid: Some(i64::from(tid)),
                    thread_name: Some(name),
                }),
                ..Default::default()
            })?;
        }
        Ok(uuid)
    }

    /// A (GPU, stream) track, or the stream's sync track, in the GPU's
    /// pseudo-process.
    /// The GPU pseudo-process of `device` of `pid`.
    fn gpu_process(&mut self, pid: u32, device: u32) -> std::io::Result<u64> {
        let pname = if device == UNKNOWN_DEVICE {
            format!("GPU ? (device unknown, pid {pid})")
        } else {
            let dev = self.devices.get(&(pid, device)).map_or("", String::as_str);
            format!("GPU {device} {dev} (pid {pid})").replace("  ", " ")
        };
        self.process(gpu_pid(pid, device), &pname, None)
    }

    fn stream(&mut self, a: &Activity) -> std::io::Result<u64> {
        let is_sync = matches!(a.kind, ActivityKind::Sync { .. });
        self.stream_track(a.pid, a.device, a.stream, is_sync)
    }

    fn stream_track(
        &mut self,
        pid: u32,
        device: u32,
        stream: u32,
        is_sync: bool,
    ) -> std::io::Result<u64> {
        let gpid = gpu_pid(pid, device);
        let parent = self.gpu_process(pid, device)?;
        let (key, name, rank) = match (stream, is_sync) {
            (u32::MAX, _) => (u64::from(stream), "no stream".to_owned(), i32::MAX),
            (s, false) => (u64::from(s), format!("stream {s}"), rank(s, 0)),
            (s, true) => (
                SYNC_TID_BIT | u64::from(s),
                format!("stream {s} sync"),
                rank(s, 1),
            ),
        };
        let (uuid, new) = self.track(TrackKey::Stream(gpid, key));
        if new {
            self.descriptor(TrackDescriptor {
                uuid: Some(uuid),
                parent_uuid: Some(parent),
                name: Some(name),
                sibling_order_rank: Some(rank),
                ..Default::default()
            })?;
        }
        Ok(uuid)
    }

    fn api(
        &mut self,
        ctx: &Context<'_>,
        a: &crate::model::ApiCall,
        m: &Match<'_>,
    ) -> std::io::Result<()> {
        let track = self.thread(ctx, a.pid, a.tid)?;
        let mut args = vec![self.uint_arg("correlation_id", u64::from(a.correlation_id))];
        args.extend(m.stack().and_then(|s| self.stack_arg(ctx, s)));
        let begin = TrackEvent {
            category_iids: vec![self.category_iid("cuda_api")],
            name_iid: Some(self.name_iid(ctx.strings.get(a.name))),
            r#type: Some(proto::TYPE_SLICE_BEGIN),
            track_uuid: Some(track),
            debug_annotations: args,
            // Started on every call with an id: whether GPU work follows is not
            // known yet, and a flow nothing continues draws nothing.
            flow_ids: (a.correlation_id != 0)
                .then(|| flow_id(a.pid, a.correlation_id))
                .into_iter()
                .collect(),
            ..Default::default()
        };
        self.event(a.start_ns, begin)?;
        self.event(a.end_ns.max(a.start_ns), end(track))
    }

    fn activity(&mut self, ctx: &Context<'_>, a: &Activity, m: &Match<'_>) -> std::io::Result<()> {
        let track = self.stream(a)?;
        let (cat, name) = match a.kind {
            ActivityKind::Kernel { name, .. } => {
                ("kernel", self.demangler.get(name, ctx.strings).to_owned())
            }
            ActivityKind::Memcpy { kind, .. } => ("memcpy", format!("Memcpy {kind}")),
            ActivityKind::Memset { .. } => ("memset", "Memset".to_owned()),
            ActivityKind::Sync {
                sync_type,
                wait: Some(SyncWait {
                    stream: Some(s), ..
                }),
            } => ("sync", format!("{} (stream {s})", sync_name(sync_type))),
            ActivityKind::Sync { sync_type, .. } => ("sync", sync_name(sync_type).to_owned()),
        };
        let mut args = vec![
            self.uint_arg("correlation_id", u64::from(a.correlation_id)),
            self.uint_arg("device", u64::from(a.device)),
            self.uint_arg("context", u64::from(a.context)),
        ];
        match a.kind {
            ActivityKind::Kernel { grid, block, .. } => {
                args.push(self.array_arg("grid", grid));
                args.push(self.array_arg("block", block));
            }
            ActivityKind::Memcpy {
                bytes,
                peer: Some(p),
                ..
            } => {
                args.push(self.uint_arg("bytes", bytes));
                args.push(self.uint_arg("src_device", u64::from(p.src)));
                args.push(self.uint_arg("dst_device", u64::from(p.dst)));
            }
            ActivityKind::Memcpy { bytes, .. } | ActivityKind::Memset { bytes, .. } => {
                args.push(self.uint_arg("bytes", bytes));
            }
            ActivityKind::Sync { sync_type, wait } => {
                args.push(self.uint_arg("sync_type", u64::from(sync_type)));
                let w = wait.unwrap_or_default();
                for (key, v) in [
                    ("wait_on_stream", w.stream.map(u64::from)),
                    ("wait_on_event_id", w.event_id.map(u64::from)),
                    (
                        "wait_on_event_record_correlation_id",
                        w.record_correlation_id.map(u64::from),
                    ),
                ] {
                    if let Some(v) = v {
                        args.push(self.uint_arg(key, v));
                    }
                }
            }
        }
        if a.graph_id != 0 {
            args.push(self.uint_arg("graph_id", u64::from(a.graph_id)));
            args.push(self.uint_arg("graph_node_id", a.graph_node_id));
        }
        args.extend(m.stack().and_then(|s| self.stack_arg(ctx, s)));
        let mut flows = Vec::new();
        if m.api.is_some() && a.correlation_id != 0 {
            flows.push(flow_id(a.pid, a.correlation_id));
        }
        if let (Some(_), ActivityKind::Sync { wait: Some(w), .. }) = (m.wait_record, a.kind) {
            flows.extend(
                w.record_correlation_id
                    .filter(|&c| c != 0)
                    .map(|c| flow_id(a.pid, c)),
            );
        }
        let begin = TrackEvent {
            category_iids: vec![self.category_iid(cat)],
            name_iid: Some(self.name_iid(&name)),
            r#type: Some(proto::TYPE_SLICE_BEGIN),
            track_uuid: Some(track),
            debug_annotations: args,
            flow_ids: flows,
            ..Default::default()
        };
        self.event(a.start_ns, begin)?;
        self.event(a.end_ns.max(a.start_ns), end(track))
    }

    fn marker(&mut self, ctx: &Context<'_>, l: &CpuLaunch, name: &str) -> std::io::Result<()> {
        let track = self.thread(ctx, l.pid, l.tid)?;
        let e = TrackEvent {
            category_iids: vec![self.category_iid("launch")],
            name_iid: Some(self.name_iid(name)),
            r#type: Some(proto::TYPE_INSTANT),
            track_uuid: Some(track),
            debug_annotations: self.stack_arg(ctx, l.stack).into_iter().collect(),
            ..Default::default()
        };
        self.event(ctx.launch_ts(l), e)
    }
}

impl<W: Write> Sink for Writer<W> {
    fn record(&mut self, ctx: &Context<'_>, rec: &Record, m: &Match<'_>) -> Result<()> {
        if let Some(idle) = self.idle.as_mut() {
            idle.record(ctx, rec, m)?;
        }
        if let Some(d) = self.driver.as_mut() {
            d.1.take(ctx, rec, m);
        }
        let r = match rec {
            Record::Process(p) => {
                self.exes.insert(p.pid, p.exe.clone());
                self.cpu_process(p.pid).map(drop)
            }
            Record::Device(d) => {
                self.devices.insert((d.pid, d.id), d.name.clone());
                Ok(())
            }
            Record::Api(a) => self.api(ctx, a, m),
            Record::Activity(a) => self.activity(ctx, a, m),
            Record::Note(n) => self
                .cpu_process(n.pid)
                .and_then(|_| self.label(n.pid, &n.text))
                .map(drop),
            Record::Dropped(_)
            | Record::Overhead(_)
            | Record::Module(_)
            | Record::Stack(_)
            | Record::CallStack(_)
            | Record::GraphNode(_)
            | Record::Thread(_) => Ok(()),
        };
        r.map_err(write_error)
    }

    fn pending(
        &mut self,
        ctx: &Context<'_>,
        launch: &CpuLaunch,
        _api: Option<&ApiInfo>,
    ) -> Result<()> {
        self.marker(ctx, launch, crate::write::PENDING_MARKER)
            .map_err(write_error)
    }

    fn captured(
        &mut self,
        ctx: &Context<'_>,
        launch: &CpuLaunch,
        _api: Option<&ApiInfo>,
    ) -> Result<()> {
        self.marker(ctx, launch, crate::write::CAPTURED_MARKER)
            .map_err(write_error)
    }

    fn finish(&mut self, ctx: &Context<'_>, summary: &Summary) -> Result<()> {
        if let Some(mut idle) = self.idle.take() {
            idle.finish(ctx, summary)?;
            self.idle_slices(ctx, &idle).map_err(write_error)?;
        }
        if let Some(d) = self.driver.take() {
            let (trace, calls) = *d;
            self.driver_items(ctx, &trace, &calls.into_calls())
                .map_err(write_error)?;
        }
        self.out.flush().map_err(write_error)
    }
}

impl<W: Write> Writer<W> {
    /// A recorder's note ("simulated GPU: …") labels its process.
    fn label(&mut self, pid: u32, text: &str) -> std::io::Result<u64> {
        let name = self
            .processes
            .get(&u64::from(pid))
            .map(|p| p.name.clone())
            .unwrap_or_default();
        self.process(u64::from(pid), &name, Some(text))
    }
}

fn entry(iid: u64, name: &str) -> proto::NameEntry {
    proto::NameEntry {
        iid: Some(iid),
        name: Some(name.to_owned()),
    }
}

fn end(track: u64) -> TrackEvent {
    TrackEvent {
        r#type: Some(proto::TYPE_SLICE_END),
        track_uuid: Some(track),
        ..Default::default()
    }
}

/// A stream's rank among its GPU's tracks: its sync track right after it.
fn rank(stream: u32, sync: i32) -> i32 {
    (stream.min(1 << 29) as i32) * 2 + sync
}

fn write_error(source: std::io::Error) -> Error {
    Error::Write {
        what: "Perfetto trace",
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_that_ask_for_protobuf() {
        for p in ["t.pftrace", "a/b.PFTRACE", "t.perfetto-trace"] {
            assert!(wanted_for(Path::new(p)), "{p}");
        }
        for p in ["t.json", "pftrace", "t.pftrace.json", "t.perfetto"] {
            assert!(!wanted_for(Path::new(p)), "{p}");
        }
    }

    #[test]
    fn flow_ids_differ_by_process_and_call() {
        assert_ne!(flow_id(1, 2), flow_id(2, 1));
        assert_ne!(flow_id(0, 1), 0);
        assert_eq!(flow_id(u32::MAX, u32::MAX), u64::MAX);
    }

    #[test]
    fn sync_track_ranks_right_after_its_stream() {
        assert_eq!(rank(7, 1), rank(7, 0) + 1);
        assert!(rank(8, 0) > rank(7, 1));
        assert!(rank(u32::MAX, 1) < i32::MAX);
    }
}
