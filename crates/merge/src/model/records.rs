//! The records of a GPU trace: processes, devices, API calls, GPU activities,
//! drops, overhead, graph nodes, threads, NVTX ranges, PC samples and the
//! launches they cover, and autograd ids.

use std::fmt;

use super::notes::{Note, PC_LAUNCHES_NOTE};
use super::stack::{CallStack, Module, Stack};
use super::strings::StringId;

/// Which clock a trace's timestamps are on.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Clock {
    /// `CLOCK_MONOTONIC`, as `bpf_ktime_get_ns()` reads it. gpuperf's own traces.
    #[default]
    Monotonic,
    /// `CLOCK_REALTIME` (epoch ns): CUPTI's default, used by the reference tooling.
    Realtime,
}

/// A traced process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Process {
    /// Process id.
    pub pid: u32,
    /// Parent process id, if known.
    pub ppid: Option<u32>,
    /// Executable path.
    pub exe: String,
    /// When tracing started in the process, on the trace's clock.
    pub start_ns: u64,
    /// `CLOCK_REALTIME` at the same instant, if known; lets viewers show wall time.
    pub start_realtime_ns: Option<u64>,
}

/// Where a process ran: its machine and its place in a distributed job, as the
/// launcher's environment (`RANK`, `SLURM_PROCID`, …) or the trace told it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Origin {
    /// Host name.
    pub host: Option<String>,
    /// Global rank.
    pub rank: Option<u32>,
    /// Rank among the job's processes on this host.
    pub local_rank: Option<u32>,
    /// Processes in the job.
    pub world_size: Option<u32>,
}

impl Origin {
    /// Whether nothing is known.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// A traced process's [`Origin`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessOrigin {
    /// Process id.
    pub pid: u32,
    /// Where it ran.
    pub origin: Origin,
}

/// A GPU seen by a traced process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Device {
    /// Process that saw the device.
    pub pid: u32,
    /// CUDA device ordinal.
    pub id: u32,
    /// Marketing name, e.g. `NVIDIA H100 80GB HBM3`.
    pub name: String,
    /// Compute capability, major and minor.
    pub compute_capability: (u16, u16),
}

/// The CUPTI callback domain of an API call.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ApiDomain {
    /// CUDA runtime API (`cuda*`).
    Runtime,
    /// CUDA driver API (`cu*`).
    Driver,
}

/// One CUDA API call on a CPU thread.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ApiCall {
    /// Process id.
    pub pid: u32,
    /// Linux TID (gpuperf traces) or whatever the recorder put there (reference traces).
    pub tid: u32,
    /// Entry time.
    pub start_ns: u64,
    /// Exit time.
    pub end_ns: u64,
    /// CUPTI correlation id, unique per process.
    pub correlation_id: u32,
    /// CUPTI callback id within [`ApiDomain`].
    pub cbid: u32,
    /// Runtime or driver API.
    pub domain: ApiDomain,
    /// Function name, without CUPTI's `_v7000`-style version suffix.
    pub name: StringId,
}

/// Direction of a memory copy, as CUPTI's `CUpti_ActivityMemcpyKind` numbers it.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
#[non_exhaustive]
pub enum MemcpyKind {
    /// Unknown direction.
    Unknown = 0,
    /// Host to device.
    HtoD = 1,
    /// Device to host.
    DtoH = 2,
    /// Host to array.
    HtoA = 3,
    /// Array to host.
    AtoH = 4,
    /// Array to array.
    AtoA = 5,
    /// Array to device.
    AtoD = 6,
    /// Device to array.
    DtoA = 7,
    /// Device to device.
    DtoD = 8,
    /// Host to host.
    HtoH = 9,
    /// Peer to peer.
    PtoP = 10,
}

impl MemcpyKind {
    const ALL: [MemcpyKind; 11] = [
        Self::Unknown,
        Self::HtoD,
        Self::DtoH,
        Self::HtoA,
        Self::AtoH,
        Self::AtoA,
        Self::AtoD,
        Self::DtoA,
        Self::DtoD,
        Self::HtoH,
        Self::PtoP,
    ];

    /// From CUPTI's numbering; unknown values map to [`MemcpyKind::Unknown`].
    pub fn from_u8(v: u8) -> Self {
        Self::ALL
            .get(usize::from(v))
            .copied()
            .unwrap_or(Self::Unknown)
    }

    /// From the reference log's spelling (`"HtoD"`).
    pub fn from_name(s: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|k| k.name() == s)
    }

    /// Short name, as CUPTI's sample printer spells it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Unknown => "Unknown",
            Self::HtoD => "HtoD",
            Self::DtoH => "DtoH",
            Self::HtoA => "HtoA",
            Self::AtoH => "AtoH",
            Self::AtoA => "AtoA",
            Self::AtoD => "AtoD",
            Self::DtoA => "DtoA",
            Self::DtoD => "DtoD",
            Self::HtoH => "HtoH",
            Self::PtoP => "PtoP",
        }
    }
}

impl fmt::Display for MemcpyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The two devices of a peer-to-peer copy.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct PeerDevices {
    /// Device ordinal copied from.
    pub src: u32,
    /// Device ordinal copied to.
    pub dst: u32,
}

/// What a GPU activity record describes.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ActivityKind {
    /// A kernel execution (CUPTI `CONCURRENT_KERNEL`).
    Kernel {
        /// Kernel name as CUPTI reports it (usually mangled).
        name: StringId,
        /// Grid dimensions.
        grid: [u32; 3],
        /// Block dimensions.
        block: [u32; 3],
    },
    /// A memory copy.
    Memcpy {
        /// Direction.
        kind: MemcpyKind,
        /// Bytes copied.
        bytes: u64,
        /// Both GPUs of a copy between two devices (`cudaMemcpyPeer`, CUPTI's
        /// `MEMCPY2` records); the activity's `device` is the one that ran it.
        peer: Option<PeerDevices>,
    },
    /// A memset.
    Memset {
        /// Bytes set.
        bytes: u64,
        /// Value written.
        value: u32,
    },
    /// A host synchronization (`cudaStreamSynchronize`, event waits, ...). This is
    /// time a CPU thread waited, so it is not charged as GPU time in folded output.
    Sync {
        /// CUPTI's `CUpti_ActivitySynchronizationType`.
        sync_type: u8,
        /// For an event sync or a stream's wait on an event, the event waited on,
        /// when the input says (Kineto does; CUPTI's own record names only the
        /// event's handle).
        wait: Option<SyncWait>,
    },
}

/// The CUDA event an event synchronization or a stream wait waited on, as far as
/// the input tells (each part is `None` when it does not).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct SyncWait {
    /// The stream the event was recorded on.
    pub stream: Option<u32>,
    /// The correlation id of the call that recorded the event (`cudaEventRecord`).
    pub record_correlation_id: Option<u32>,
    /// CUPTI's id of the event.
    pub event_id: Option<u32>,
}

/// One piece of GPU work (or a synchronization), with the correlation id of the
/// API call that caused it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Activity {
    /// Process id.
    pub pid: u32,
    /// GPU start time.
    pub start_ns: u64,
    /// GPU end time.
    pub end_ns: u64,
    /// Correlation id of the causing API call. A graph launch gives all its
    /// kernels one correlation id.
    pub correlation_id: u32,
    /// CUDA device ordinal; `None` when the recorder could not tell (a
    /// synchronization in a context it never saw created).
    pub device: Option<u32>,
    /// CUDA context id.
    pub context: u32,
    /// CUDA stream id; `None` when the work was not on a stream.
    pub stream: Option<u32>,
    /// CUDA graph id; `None` when the work did not come from a graph.
    pub graph_id: Option<u32>,
    /// CUDA graph node id; `None` when the work did not come from a graph node
    /// (some inputs name the node but not the graph).
    pub graph_node_id: Option<u64>,
    /// What the record describes.
    pub kind: ActivityKind,
}

impl Activity {
    /// `end_ns - start_ns`, saturating at 0 for malformed records.
    pub fn duration_ns(&self) -> u64 {
        self.end_ns.saturating_sub(self.start_ns)
    }

    /// The device, `u32::MAX` when unknown: the number the idle and timeline
    /// writers key, sort and number GPU tracks by.
    #[cfg(feature = "render")]
    pub(crate) fn device_key(&self) -> u32 {
        self.device.unwrap_or(u32::MAX)
    }

    /// The stream, `u32::MAX` when none, as [`Activity::device_key`].
    #[cfg(feature = "render")]
    pub(crate) fn stream_key(&self) -> u32 {
        self.stream.unwrap_or(u32::MAX)
    }

    /// The CUDA graph id and graph node id (0 when the input did not name the
    /// node), `None` when the work did not come from a graph.
    pub fn graph(&self) -> Option<(u32, u64)> {
        self.graph_id
            .map(|graph| (graph, self.graph_node_id.unwrap_or(0)))
    }
}

/// Where dropped records were dropped.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DropSource {
    /// CUPTI ran out of activity buffer space.
    CuptiActivity,
    /// The injection library could not write a record.
    Writer,
    /// The eBPF ring buffer was full.
    RingBuffer,
    /// CUPTI handed back a GPU record without a valid start and end (a kernel
    /// still running at the final forced flush), so it was not written.
    Incomplete,
}

impl DropSource {
    /// Short name used in summaries.
    pub fn name(self) -> &'static str {
        match self {
            Self::CuptiActivity => "CUPTI activity buffer",
            Self::Writer => "trace writer",
            Self::RingBuffer => "eBPF ring buffer",
            Self::Incomplete => "incomplete at the end of recording",
        }
    }
}

/// A count of records lost before they reached the trace file.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Dropped {
    /// Process id.
    pub pid: u32,
    /// Where they were lost.
    pub source: DropSource,
    /// How many.
    pub count: u64,
}

/// Time CUPTI itself spent (buffer allocation, instrumentation).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Overhead {
    /// Process id.
    pub pid: u32,
    /// What kind of overhead, e.g. `CUPTI_INSTRUMENTATION`.
    pub kind: StringId,
    /// The API call it delayed (CUPTI 12.4 on: a kernel's slow first launch
    /// under lazy loading is its `LAZY_FUNCTION_LOADING`), if any.
    pub correlation_id: Option<u32>,
    /// Start time.
    pub start_ns: u64,
    /// End time.
    pub end_ns: u64,
}

/// One record of a GPU trace, as every GPU-side reader yields it.
///
/// The trace format promises new record kinds (a reader skips a kind it does not
/// know), so matches outside this crate need a wildcard arm.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Record {
    /// Process description; later records of the same file belong to it.
    Process(Process),
    /// Where the process ran (host, rank, world size); follows its
    /// [`Record::Process`].
    Origin(ProcessOrigin),
    /// A device.
    Device(Device),
    /// A CUDA API call.
    Api(ApiCall),
    /// GPU work.
    Activity(Activity),
    /// Lost records.
    Dropped(Dropped),
    /// CUPTI overhead.
    Overhead(Overhead),
    /// A recorder message.
    Note(Note),
    /// A module that in-process stacks refer to.
    Module(Module),
    /// A distinct CPU stack taken in process.
    Stack(Stack),
    /// The CPU stack of an API call: read from the API record's stack id, and
    /// delivered right after that call's [`Record::Api`].
    CallStack(CallStack),
    /// Where a CUDA graph node was made (captured or added).
    GraphNode(GraphNode),
    /// A thread's name as the process set it.
    Thread(ThreadName),
    /// Where a launch stands in PyTorch's autograd: forward or backward.
    Autograd(Autograd),
    /// An NVTX range the program opened and closed.
    Nvtx(NvtxRange),
    /// GPU PC samples of one instruction and one stall reason (CUPTI PC sampling).
    PcSample(PcSample),
    /// How many launches PC sampling's windows covered, as the recorder
    /// counted them when it closed.
    PcLaunches(ProcessPcLaunches),
}

impl Record {
    /// The process the record belongs to.
    #[cfg(feature = "render")]
    pub(crate) fn pid_mut(&mut self) -> &mut u32 {
        match self {
            Record::Process(r) => &mut r.pid,
            Record::Origin(r) => &mut r.pid,
            Record::Device(r) => &mut r.pid,
            Record::Api(r) => &mut r.pid,
            Record::Activity(r) => &mut r.pid,
            Record::Dropped(r) => &mut r.pid,
            Record::Overhead(r) => &mut r.pid,
            Record::Note(r) => &mut r.pid,
            Record::Module(r) => &mut r.pid,
            Record::Stack(r) => &mut r.pid,
            Record::CallStack(r) => &mut r.pid,
            Record::GraphNode(r) => &mut r.pid,
            Record::Thread(r) => &mut r.pid,
            Record::Autograd(r) => &mut r.pid,
            Record::Nvtx(r) => &mut r.pid,
            Record::PcSample(r) => &mut r.pid,
            Record::PcLaunches(r) => &mut r.pid,
        }
    }
}

/// Where a CUDA graph node was made: the stack of the API call that captured it
/// during stream capture (`api` names that call), or of the call that added it to
/// a graph (`api` is `None`). Nodes of instantiated graphs carry the stack of the
/// node they were cloned from.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct GraphNode {
    /// Process id.
    pub pid: u32,
    /// CUPTI's graph node id, as in GPU activity records.
    pub node_id: u64,
    /// [`Stack::id`].
    pub stack: u32,
    /// The recorded API call that made the node, if any.
    pub api: Option<StringId>,
}

/// A thread's name (`pthread_setname_np`, `prctl(PR_SET_NAME)`: at most 15
/// bytes). A later record for the same thread supersedes an earlier one: the
/// thread renamed itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThreadName {
    /// Process id.
    pub pid: u32,
    /// Linux thread id.
    pub tid: u32,
    /// The name.
    pub name: String,
}

/// An NVTX range (`nvtxRangePush`/`nvtxRangePop`, `nvtxRangeStart`/
/// `nvtxRangeEnd`, and their domain forms), as the injection library saw it
/// through NVTX's injection hook.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NvtxRange {
    /// Process id.
    pub pid: u32,
    /// The thread that pushed (or started) it.
    pub tid: u32,
    /// When it was pushed or started (the trace's clock).
    pub start_ns: u64,
    /// When it was popped or ended; for a range still open when the trace
    /// closed, the close.
    pub end_ns: u64,
    /// Its message.
    pub name: StringId,
    /// Its NVTX domain; `None` for the default one.
    pub domain: Option<StringId>,
    /// Push/pop: nested on its thread; start/end: may cross threads and overlap.
    pub kind: NvtxKind,
    /// Still open when the trace closed.
    pub unclosed: bool,
}

/// GPU PC samples (CUPTI's PC Sampling API): how often warps were found at
/// one SASS instruction with one stall reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PcSample {
    /// Process id.
    pub pid: u32,
    /// The launch's correlation id (the kernel record's), in kernel-serialized
    /// mode; `None` when the samples cannot be charged to one launch
    /// (continuous mode).
    pub correlation_id: Option<u32>,
    /// The CUPTI context id the kernel ran in.
    pub context: u32,
    /// The kernel function, as CUPTI names it (mangled).
    pub function: StringId,
    /// The instruction's offset in the function.
    pub pc_offset: u64,
    /// CUPTI's CRC of the module (cubin) holding the function.
    pub cubin_crc: u64,
    /// The stall reason's index in CUPTI's table for the device.
    pub stall_reason_index: u32,
    /// The stall reason's name (`smsp__pcsamp_warps_issue_stalled_*`).
    pub stall_reason: StringId,
    /// Samples of this instruction with this stall reason.
    pub samples: u32,
    /// The CUDA source file and line, when the module has line information.
    pub source: Option<(StringId, u32)>,
}

/// The base reason of a not-issued stall reason (`long_scoreboard` of
/// `long_scoreboard_not_issued`, with or without CUPTI's prefix), or `None`
/// for a reason of its own.
///
/// CUPTI lists, for most reasons, `smsp__pcsamp_warps_issue_stalled_<reason>`
/// and `…_<reason>_not_issued`. The second is a subset of the first: those of
/// the reason's samples taken on cycles where the warp scheduler issued no
/// instruction (Nsight Compute's "Warp Stall Sampling (Not-issued Samples)"
/// beside "(All Samples)"). Adding it to the totals counts such samples twice.
pub fn not_issued_base(reason: &str) -> Option<&str> {
    reason.strip_suffix("_not_issued")
}

/// Launches inside and outside PC sampling's windows, as the injection library
/// counted them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PcLaunches {
    /// Launches made while sampling was on in their context.
    pub sampled: u64,
    /// The others: outside a window, or in a context without sampling.
    pub unsampled: u64,
}

impl PcLaunches {
    /// The human-readable note on the counts (shown with the trace's other
    /// notes); `window` says which launches were asked for. The merge reads
    /// the counts from the `PC_LAUNCHES` record, never from this text.
    pub fn note(&self, window: &str) -> String {
        format!(
            "{PC_LAUNCHES_NOTE} {} of {} launches sampled (window {window}); the {} others \
             have no PC samples, and no count is scaled up for them",
            self.sampled,
            self.sampled + self.unsampled,
            self.unsampled
        )
    }
}

/// A traced process's [`PcLaunches`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcessPcLaunches {
    /// Process id.
    pub pid: u32,
    /// The counts.
    pub launches: PcLaunches,
}

/// How an NVTX range was opened.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NvtxKind {
    /// `nvtxRangePush*` and `nvtxRangePop`: per thread, strictly nested.
    PushPop,
    /// `nvtxRangeStart*` and `nvtxRangeEnd`: known by id, may overlap.
    StartEnd,
}

/// Where an API call stands in PyTorch's autograd, as the injection library
/// read it from libtorch on the calling thread (see `join::backward`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Autograd {
    /// Process id.
    pub pid: u32,
    /// The API call's correlation id.
    pub correlation_id: u32,
    /// Forward or backward, with the ids that link the two.
    pub tag: AutogradTag,
}

/// The autograd ids of one call. A backward node `(thread, seq)` was made by the
/// forward op whose calls read `Forward { thread, next_seq: seq + 1 }`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AutogradTag {
    /// A call made outside any backward node, on a thread that made autograd
    /// nodes: RecordFunction's thread id and the thread's next sequence number
    /// (`at::sequence_number::peek()`).
    Forward {
        /// `at::RecordFunction::currentThreadId()`.
        thread: u64,
        /// `at::sequence_number::peek()`.
        next_seq: u64,
    },
    /// A call made while autograd evaluates a node: the node's forward thread
    /// id and sequence number.
    Backward {
        /// The node's `thread_id()`.
        thread: u64,
        /// The node's `sequence_nr()`; `None` for nodes without a forward op,
        /// such as `AccumulateGrad`.
        seq: Option<u64>,
    },
}
