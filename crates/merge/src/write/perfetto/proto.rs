//! The messages of Perfetto's `perfetto_trace.proto` that gpuperf writes (each
//! with the fields it uses; `oneof` members are plain optional fields, which is
//! the same on the wire).

/// `perfetto.protos.Trace`: the file is this message.
// Only the tests decode a whole file; the writer writes it packet by packet.
#[cfg_attr(not(feature = "test-internals"), allow(dead_code))]
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
