//! The trace data model shared by every reader and writer.
//!
//! All timestamps are nanoseconds. Records read from gpuperf's own files are on
//! `CLOCK_MONOTONIC` (the clock of `bpf_ktime_get_ns()`); records read from the
//! reference tooling's CUPTI log are on `CLOCK_REALTIME` ([`Clock`]).

use std::fmt;

/// An interned string: a kernel name, an API name, a stack frame.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StringId(pub(crate) u32);

impl StringId {
    /// The id as an index into its [`StringTable`].
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// Interns strings so that records carry 4-byte ids instead of names.
#[derive(Debug, Default, Clone)]
pub struct StringTable {
    // Names come in by the million from big traces: a fast hash matters here.
    map: rustc_hash::FxHashMap<Box<str>, StringId>,
    strings: Vec<Box<str>>,
}

impl StringTable {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// The id of `s`, adding it on first sight.
    pub fn intern(&mut self, s: &str) -> StringId {
        if let Some(&id) = self.map.get(s) {
            return id;
        }
        let id = StringId(u32::try_from(self.strings.len()).expect("fewer than 2^32 strings"));
        self.strings.push(s.into());
        self.map.insert(s.into(), id);
        id
    }

    /// The id of `s` if it was interned.
    pub fn lookup(&self, s: &str) -> Option<StringId> {
        self.map.get(s).copied()
    }

    /// The string behind `id`.
    ///
    /// # Panics
    /// If `id` came from another table.
    pub fn get(&self, id: StringId) -> &str {
        &self.strings[id.index()]
    }

    /// Number of distinct strings.
    pub fn len(&self) -> usize {
        self.strings.len()
    }

    /// Whether the table holds no string.
    pub fn is_empty(&self) -> bool {
        self.strings.is_empty()
    }
}

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
    /// Parent process id, 0 when unknown.
    pub ppid: u32,
    /// Executable path.
    pub exe: String,
    /// When tracing started in the process, on the trace's clock.
    pub start_ns: u64,
    /// `CLOCK_REALTIME` at the same instant, 0 when unknown; lets viewers show wall time.
    pub start_realtime_ns: u64,
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

/// [`Activity::device`] when the device is not known.
pub const UNKNOWN_DEVICE: u32 = u32::MAX;

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
    /// CUDA device ordinal; [`UNKNOWN_DEVICE`] when the recorder could not tell
    /// (a synchronization in a context it never saw created).
    /// [`Activity::device_ordinal`] reads it as an `Option`.
    pub device: u32,
    /// CUDA context id.
    pub context: u32,
    /// CUDA stream id as the file holds it (`u32::MAX` when not on a stream);
    /// [`Activity::stream_id`] reads it as an `Option`.
    pub stream: u32,
    /// CUDA graph id as the file holds it, 0 when not from a graph;
    /// [`Activity::graph`] reads it as an `Option`.
    pub graph_id: u32,
    /// CUDA graph node id, 0 when not from a graph.
    pub graph_node_id: u64,
    /// What the record describes.
    pub kind: ActivityKind,
}

impl Activity {
    /// `end_ns - start_ns`, saturating at 0 for malformed records.
    pub fn duration_ns(&self) -> u64 {
        self.end_ns.saturating_sub(self.start_ns)
    }

    /// The CUDA device ordinal, `None` when the recorder could not tell
    /// ([`UNKNOWN_DEVICE`]).
    pub fn device_ordinal(&self) -> Option<u32> {
        (self.device != UNKNOWN_DEVICE).then_some(self.device)
    }

    /// The CUDA stream id, `None` when the work was not on a stream.
    pub fn stream_id(&self) -> Option<u32> {
        (self.stream != u32::MAX).then_some(self.stream)
    }

    /// The CUDA graph id and graph node id, `None` when the work did not come
    /// from a graph.
    pub fn graph(&self) -> Option<(u32, u64)> {
        (self.graph_id != 0).then_some((self.graph_id, self.graph_node_id))
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
    /// under lazy loading is its `LAZY_FUNCTION_LOADING`), 0 for none;
    /// [`Overhead::delayed_call`] reads it as an `Option`.
    pub correlation_id: u32,
    /// Start time.
    pub start_ns: u64,
    /// End time.
    pub end_ns: u64,
}

impl Overhead {
    /// The correlation id of the API call the overhead delayed, if any.
    pub fn delayed_call(&self) -> Option<u32> {
        (self.correlation_id != 0).then_some(self.correlation_id)
    }
}

/// How a [`Note`] starts when the trace was recorded on gpuperf's simulated CUDA
/// runtime (no GPU): outputs show such traces as "simulated GPU".
pub const SIMULATED_GPU_NOTE: &str = "simulated GPU";

/// What the simulated CUDA runtime puts in every device's name
/// (`sim/src/driver_sim.c`): a trace another tool recorded there, such as a
/// PyTorch profiler trace, is known as simulated by its devices.
pub const SIMULATED_DEVICE_MARK: &str = "(gpusim, not a real GPU)";

/// A message the recorder left in the trace, such as why it is empty.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Note {
    /// Process id.
    pub pid: u32,
    /// The message.
    pub text: String,
}

/// `pid N: text`, as summaries and the Chrome trace's metadata show it.
impl fmt::Display for Note {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "pid {}: {}", self.pid, self.text)
    }
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
}

impl Record {
    /// The process the record belongs to.
    pub fn pid_mut(&mut self) -> &mut u32 {
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
        }
    }
}

/// A module (executable, shared library) as the injection library saw it loaded;
/// native frames of [`Stack`]s refer to it by [`Module::id`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Module {
    /// Process id.
    pub pid: u32,
    /// Id within the process's trace.
    pub id: u32,
    /// The file as the loader named it.
    pub path: String,
    /// GNU build id, empty when the module has none.
    pub build_id: Vec<u8>,
    /// Load bias: absolute address = ELF virtual address + bias.
    pub bias: u64,
    /// Absolute start of its executable segments.
    pub text_start: u64,
    /// Absolute end of its executable segments.
    pub text_end: u64,
}

/// Names native frames.
pub trait Symbolize {
    /// Names each of `offsets` (ELF virtual addresses in `module`'s file): the
    /// function, and the functions inlined at that address, innermost first. An
    /// empty list means unknown; the frame is then shown as `file+0xoffset`.
    fn symbolize(&mut self, module: &Module, offsets: &[u64]) -> Vec<Vec<String>>;
}

/// Frames a complete stack starts with: the process's entry point, the thread
/// starts (`clone`, `clone3`, glibc's `start_thread`) and where a `makecontext`
/// coroutine starts (glibc's `__start_context`).
pub const ROOT_FRAMES: [&str; 7] = [
    "_start",
    "clone",
    "clone3",
    "__clone",
    "__clone3",
    "start_thread",
    "__start_context",
];

/// Why a stack taken in process ended. Only [`StackEnd::Root`] is a complete stack.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum StackEnd {
    /// The outermost frame is a root (`_start`, `clone`, `clone3`).
    Root,
    /// Code without unwind information (JIT code); the stack ends in `[unknown]`.
    NoUnwindInfo,
    /// Code in a module loaded after the module table was built.
    ModuleNotInTable,
    /// A read fell outside the thread's stack.
    StackReadFailed,
    /// The unwind information could not be applied.
    UnwindFailed,
    /// Deeper than the depth cap.
    DepthLimit,
    /// The unwinder was busy on every cache; nothing was captured.
    Busy,
    /// The native stack is complete but an outer interpreter's Python frames
    /// are missing (a subinterpreter called from another interpreter).
    PythonCut,
    /// A reason this build does not know (its code).
    Other(u8),
}

impl StackEnd {
    const CODES: [StackEnd; 8] = [
        Self::Root,
        Self::NoUnwindInfo,
        Self::ModuleNotInTable,
        Self::StackReadFailed,
        Self::UnwindFailed,
        Self::DepthLimit,
        Self::Busy,
        Self::PythonCut,
    ];

    /// The code stored in the GPU trace.
    pub fn code(self) -> u8 {
        match self {
            Self::Other(c) => c,
            s => Self::CODES.iter().position(|&k| k == s).unwrap_or(0) as u8,
        }
    }

    /// From the code stored in the GPU trace.
    pub fn from_code(c: u8) -> Self {
        Self::CODES
            .get(usize::from(c))
            .copied()
            .unwrap_or(Self::Other(c))
    }

    /// `true` unless the stack reached a root frame.
    pub fn is_truncated(self) -> bool {
        self != Self::Root
    }

    /// Short description for summaries.
    pub fn describe(self) -> String {
        match self {
            Self::Root => "complete".into(),
            Self::NoUnwindInfo => "code without unwind info (JIT)".into(),
            Self::ModuleNotInTable => "module loaded after the module table was read".into(),
            Self::StackReadFailed => "stack read outside the thread's stack".into(),
            Self::UnwindFailed => "unwind info could not be applied".into(),
            Self::DepthLimit => "deeper than the depth cap".into(),
            Self::Busy => "unwinder busy".into(),
            Self::PythonCut => "an outer interpreter's Python frames missing".into(),
            Self::Other(c) => format!("reason {c}"),
        }
    }
}

/// One frame of a [`Stack`].
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StackFrame {
    /// Native code: a module and the ELF virtual address to symbolize (for a
    /// return address, already moved back into the call instruction).
    Native {
        /// [`Module::id`].
        module: u32,
        /// ELF virtual address in the module's file.
        offset: u64,
    },
    /// A Python function, resolved in the process.
    Python {
        /// `module.qualified_name`.
        function: StringId,
        /// The source file.
        file: StringId,
        /// The line, 0 when unknown.
        line: u32,
    },
    /// Code in no known module (JIT code): always the last frame.
    Unknown {
        /// Absolute address.
        address: u64,
    },
}

/// A distinct CPU stack taken in process by the injection library, innermost
/// frame first. The application's call into the CUDA API is the first frame;
/// frames of CUDA's own libraries and of the injection library are left out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stack {
    /// Process id.
    pub pid: u32,
    /// Id within the process's trace, from 1.
    pub id: u32,
    /// How the stack ended.
    pub end: StackEnd,
    /// The Python frame chain was deeper than the depth cap.
    pub python_truncated: bool,
    /// The frames, innermost first.
    pub frames: Vec<StackFrame>,
}

/// The in-process CPU stack of one API call.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct CallStack {
    /// Process id.
    pub pid: u32,
    /// The API call's correlation id.
    pub correlation_id: u32,
    /// [`Stack::id`].
    pub stack: u32,
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
    /// mode; 0 when the samples cannot be charged to one launch (continuous mode).
    pub correlation_id: u32,
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

/// The start of the NOTE the injection library writes when PC sampling ran in
/// kernel-serialized mode: sampled kernels ran one at a time, so kernel times
/// and overlaps in the trace are those of a serialized run.
pub const PC_SERIALIZED_NOTE: &str = "kernels serialized for PC sampling";

/// The start of the NOTE the injection library writes when PC sampling ran in
/// continuous mode: samples name no launch.
pub const PC_CONTINUOUS_NOTE: &str = "PC sampling in continuous mode";

/// The start of the NOTE that counts the launches PC sampling covered.
pub const PC_LAUNCHES_NOTE: &str = "PC sampling windows:";

/// Launches inside and outside PC sampling's windows, as the injection library
/// counted them; its NOTE ([`PC_LAUNCHES_NOTE`]) is [`PcLaunches::note`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PcLaunches {
    /// Launches made while sampling was on in their context.
    pub sampled: u64,
    /// The others: outside a window, or in a context without sampling.
    pub unsampled: u64,
}

impl PcLaunches {
    /// The note's text; `window` says which launches were asked for.
    pub fn note(&self, window: &str) -> String {
        format!(
            "{PC_LAUNCHES_NOTE} {} of {} launches sampled (window {window}); the {} others \
             have no PC samples, and no count is scaled up for them",
            self.sampled,
            self.sampled + self.unsampled,
            self.unsampled
        )
    }

    /// Reads a note [`PcLaunches::note`] wrote.
    pub fn parse(text: &str) -> Option<Self> {
        let rest = text.strip_prefix(PC_LAUNCHES_NOTE)?.trim_start();
        let (sampled, rest) = rest.split_once(" of ")?;
        let (total, _) = rest.split_once(' ')?;
        let (sampled, total): (u64, u64) = (sampled.parse().ok()?, total.parse().ok()?);
        Some(Self {
            sampled,
            unsampled: total.checked_sub(sampled)?,
        })
    }
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

/// The start of the NOTE the injection library writes when it turned its
/// autograd reading off: the merge then links no backward launch of that
/// process.
pub const AUTOGRAD_OFF_NOTE: &str = "autograd ids not recorded";

/// The frame between a forward op's stack and the backward work it caused
/// (`join::backward`; the PyTorch profiler reader makes the same shape).
pub const BACKWARD_FRAME: &str = "[backward]";

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
    /// id and sequence number (`u64::MAX` for nodes without a forward op, such
    /// as `AccumulateGrad`).
    Backward {
        /// The node's `thread_id()`.
        thread: u64,
        /// The node's `sequence_nr()`.
        seq: u64,
    },
}

/// Strips CUPTI's version suffix: `cudaLaunchKernel_v7000` → `cudaLaunchKernel`.
pub fn api_base_name(name: &str) -> &str {
    match name.rfind("_v") {
        Some(i)
            if i > 0 && name[i + 2..].bytes().all(|b| b.is_ascii_digit()) && name.len() > i + 2 =>
        {
            &name[..i]
        }
        _ => name,
    }
}

/// The function an API name stands for, without CUPTI's version suffix, the
/// per-thread-stream `_ptsz` variant mark, or the leading underscores of CUDA 13's
/// `<<<>>>` stubs: `__cudaLaunchKernel_ptsz_v13000` → `cudaLaunchKernel`.
pub fn api_stem(name: &str) -> &str {
    let name = api_base_name(name);
    let name = name.strip_suffix("_ptsz").unwrap_or(name);
    name.trim_start_matches('_')
}

/// Whether an API name is a kernel or graph launch, the calls the CPU profiler probes.
/// Host-function launches start no GPU work and are not.
pub fn is_launch_api(name: &str) -> bool {
    let name = api_stem(name);
    if name.contains("HostFunc") {
        return false;
    }
    name.starts_with("cudaLaunch")
        || name.starts_with("cuLaunch")
        || matches!(name, "cudaGraphLaunch" | "cuGraphLaunch")
}

/// Whether an API name is a memory copy (`cudaMemcpy*`, `cuMemcpy*`).
pub fn is_copy_api(name: &str) -> bool {
    let name = api_stem(name);
    name.starts_with("cudaMemcpy") || name.starts_with("cuMemcpy")
}

/// Whether an API name is a memset (`cudaMemset*`, `cuMemset*`).
pub fn is_memset_api(name: &str) -> bool {
    let name = api_stem(name);
    name.starts_with("cudaMemset") || name.starts_with("cuMemset")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_names_lose_version_suffix_only() {
        assert_eq!(api_base_name("cudaLaunchKernel_v7000"), "cudaLaunchKernel");
        assert_eq!(api_base_name("cuMemcpyHtoD_v2"), "cuMemcpyHtoD");
        assert_eq!(api_base_name("cuLaunchKernel"), "cuLaunchKernel");
        assert_eq!(api_base_name("foo_var"), "foo_var");
        assert_eq!(api_base_name("_v12"), "_v12");
        assert_eq!(api_base_name("x_v"), "x_v");
    }

    #[test]
    fn launch_apis_are_recognised() {
        for n in [
            "cudaLaunchKernel_v7000",
            "cudaLaunchKernelExC_v11060",
            "cudaLaunchCooperativeKernel_v9000",
            "cuLaunchKernel",
            "cuLaunchKernelEx",
            "cudaGraphLaunch_v10000",
            "cudaLaunchKernel_ptsz_v7000",
            "__cudaLaunchKernel_v13000",
            "__cudaLaunchKernel_ptsz_v13000",
            "cudaLaunchKernel_ptsz_v7000",
        ] {
            assert!(is_launch_api(n), "{n}");
        }
        for n in [
            "cudaMemcpy_v3020",
            "cuMemAlloc_v2",
            "cudaGraphInstantiate",
            "cudaLaunchHostFunc_v10000",
            "cuLaunchHostFunc",
        ] {
            assert!(!is_launch_api(n), "{n}");
        }
    }

    #[test]
    fn memcpy_kind_round_trips() {
        for v in 0..=10u8 {
            let k = MemcpyKind::from_u8(v);
            assert_eq!(k as u8, v);
            assert_eq!(MemcpyKind::from_name(k.name()), Some(k));
        }
        assert_eq!(MemcpyKind::from_u8(99), MemcpyKind::Unknown);
    }

    #[test]
    fn strings_intern_once() {
        let mut t = StringTable::new();
        let a = t.intern("a");
        assert_eq!(t.intern("b").index(), 1);
        assert_eq!(t.intern("a"), a);
        assert_eq!(t.get(a), "a");
        assert_eq!(t.len(), 2);
    }
}

/// What a GPU driver event records (`gpuperf record --driver`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum DriverKind {
    /// NVIDIA's `open` entry point.
    Open,
    /// NVIDIA's `ioctl` entry point, entry to return.
    Ioctl,
    /// NVIDIA's `mmap` entry point.
    Mmap,
    /// NVIDIA's interrupt handler.
    Irq,
    /// NVIDIA's interrupt bottom half, on its kernel thread.
    IrqBottomHalf,
    /// An Xid error (`nvidia:nvidia_dev_xid`).
    Xid,
    /// A job queued on a DRM scheduler ring.
    JobQueued,
    /// A job handed to the hardware.
    JobRun,
    /// A job finished by the hardware.
    JobDone,
    /// A job waiting on a dependency.
    JobWaitDep,
    /// A `dma_fence` made.
    FenceInit,
    /// A `dma_fence` signalled.
    FenceSignaled,
    /// A vertical blank of a display CRTC (`drm:drm_vblank_event`), in an
    /// interrupt or timer.
    Vblank,
    /// A process asked for an event at a vblank (`drm:drm_vblank_event_queued`).
    VblankQueued,
    /// A vblank event sent to the process that asked for it
    /// (`drm:drm_vblank_event_delivered`).
    VblankDelivered,
}

impl DriverKind {
    /// Every kind.
    pub const ALL: [DriverKind; 15] = [
        Self::Open,
        Self::Ioctl,
        Self::Mmap,
        Self::Irq,
        Self::IrqBottomHalf,
        Self::Xid,
        Self::JobQueued,
        Self::JobRun,
        Self::JobDone,
        Self::JobWaitDep,
        Self::FenceInit,
        Self::FenceSignaled,
        Self::Vblank,
        Self::VblankQueued,
        Self::VblankDelivered,
    ];

    /// Its name in the driver event file (as `gpuperf monitor --event` spells events).
    pub fn name(self) -> &'static str {
        match self {
            Self::Open => "open",
            Self::Ioctl => "ioctl",
            Self::Mmap => "mmap",
            Self::Irq => "irq",
            Self::IrqBottomHalf => "irq_bh",
            Self::Xid => "xid",
            Self::JobQueued => "job_queue",
            Self::JobRun => "job_run",
            Self::JobDone => "job_done",
            Self::JobWaitDep => "job_wait_dep",
            Self::FenceInit => "fence_init",
            Self::FenceSignaled => "fence_signaled",
            Self::Vblank => "vblank",
            Self::VblankQueued => "vblank_queued",
            Self::VblankDelivered => "vblank_delivered",
        }
    }

    /// Its name in words, plural, as summaries count it (`jobs queued`).
    pub fn label(self) -> &'static str {
        match self {
            Self::Open => "opens",
            Self::Ioctl => "ioctls",
            Self::Mmap => "mmaps",
            Self::Irq => "interrupts",
            Self::IrqBottomHalf => "interrupt bottom halves",
            Self::Xid => "Xid errors",
            Self::JobQueued => "jobs queued",
            Self::JobRun => "jobs run",
            Self::JobDone => "jobs done",
            Self::JobWaitDep => "dependency waits",
            Self::FenceInit => "fences made",
            Self::FenceSignaled => "fences signalled",
            Self::Vblank => "vblanks",
            Self::VblankQueued => "vblank events queued",
            Self::VblankDelivered => "vblank events delivered",
        }
    }

    /// The kind named `name`.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == name)
    }
}

/// One GPU driver event, on `CLOCK_MONOTONIC` like gpuperf's GPU traces.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DriverEvent {
    /// When (an ioctl's entry).
    pub ts_ns: u64,
    /// An ioctl's duration; otherwise 0.
    pub dur_ns: u64,
    /// A job's id, its finished fence's `context << 32 | seqno` (the same
    /// on all its events; older recordings hold a kernel address), a
    /// fence's, a vblank event's DRM file (the same on an event's queueing
    /// and delivery); otherwise 0.
    pub id: u64,
    /// An ioctl's return value; a vblank's own timestamp (`CLOCK_MONOTONIC`,
    /// as the DRM core computed it); a job queued or run: the hardware's jobs
    /// in flight (`hw_job_count`); an Xid or a fence signal: 1 when made in
    /// interrupt context (its task is then merely the one interrupted).
    pub ret: i64,
    /// The process (a job's submitter for all its events).
    pub pid: u32,
    /// The thread.
    pub tid: u32,
    /// What happened.
    pub kind: DriverKind,
    /// An ioctl's command, an Xid's number, a vblank's sequence number (for
    /// a queued event the one asked for); a job queued or run: its entity's
    /// queued jobs (`job_count`); otherwise 0.
    pub arg: u32,
    /// The thread's command name (a kernel thread's for interrupts).
    pub comm: String,
    /// A job's ring, an Xid's device, a vblank's CRTC (`crtc N`: an index on
    /// its device, which the tracepoints do not name).
    pub ring: String,
    /// An Xid's message; `high_prec` for a vblank whose timestamp is.
    pub msg: String,
}
