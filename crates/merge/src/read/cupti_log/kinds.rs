//! Which record kinds the CUPTI sample printer writes, and how each is read.

use crate::model::ApiDomain;

/// How a header line is read.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    Api(ApiDomain),
    Kernel,
    Memcpy,
    Memset,
    Sync,
    Overhead,
    /// Known but unused; the strings are prefixes of unindented lines that the
    /// printer writes as part of such a record.
    Skipped(&'static [&'static str]),
}

/// Prefix of the line the reference injection prints after a kernel or copy that a
/// graph node created.
pub(super) const GRAPH_NODE_LINE: &str = "Graph node was created using API ";

/// The other kinds `GetActivityKindString` names, all unused by gpuperf.
pub(super) const SKIPPED: &[&str] = &[
    "MEMORY",
    "DEVICE",
    "CONTEXT",
    "NAME",
    "MARKER",
    "MARKER_DATA",
    "SOURCE_LOCATOR",
    "GLOBAL_ACCESS",
    "BRANCH",
    "CDP_KERNEL",
    "PREEMPTION",
    "ENVIRONMENT",
    "INSTRUCTION_EXECUTION",
    "UNIFIED_MEMORY_COUNTER",
    "FUNCTION",
    "MODULE",
    "DEVICE_ATTRIBUTE",
    "SHARED_ACCESS",
    "PC_SAMPLING",
    "PC_SAMPLING_RECORD_INFO",
    "INSTRUCTION_CORRELATION",
    "OPENACC_DATA",
    "OPENACC_LAUNCH",
    "OPENACC_OTHER",
    "CUDA_EVENT",
    "STREAM",
    "EXTERNAL_CORRELATION",
    "NVLINK",
    "PCIE",
    "OPENMP",
    "INTERNAL_LAUNCH_API",
    "MEMORY_POOL",
    "GRAPH_TRACE",
];

pub(super) fn kind_of(word: &str) -> Option<Kind> {
    Some(match word {
        "RUNTIME" => Kind::Api(ApiDomain::Runtime),
        "DRIVER" => Kind::Api(ApiDomain::Driver),
        "CONCURRENT_KERNEL" | "KERNEL" => Kind::Kernel,
        "MEMCPY" | "MEMCPY2" => Kind::Memcpy,
        "MEMSET" => Kind::Memset,
        "SYNCHRONIZATION" => Kind::Sync,
        "OVERHEAD" => Kind::Overhead,
        // MEMORY2 with a local or imported pool appends a line starting with ", ".
        "MEMORY2" => Kind::Skipped(&[","]),
        "JIT" => Kind::Skipped(&["jitEntryType "]),
        "MEM_DECOMPRESS" => Kind::Skipped(&["channelId "]),
        _ if SKIPPED.contains(&word) => Kind::Skipped(&[]),
        _ => return None,
    })
}

/// CUPTI's `CUpti_ActivitySynchronizationType` from the printer's name or number.
pub(super) fn sync_type(s: &str) -> u8 {
    match s {
        "EVENT_SYNCHRONIZE" => 1,
        "STREAM_WAIT_EVENT" => 2,
        "STREAM_SYNCHRONIZE" => 3,
        "CONTEXT_SYNCHRONIZE" => 4,
        _ => s.parse().unwrap_or(0),
    }
}
