//! gpuperf's GPU trace file format: what `gpuperf-inject` writes inside the target.
//!
//! # Layout
//!
//! Little-endian throughout. A 16-byte file header, then records back to back:
//!
//! ```text
//! header : magic "GPUPERF\0" (8) | version u16 | header_len u16 (=16) | flags u32 (=0)
//! record : kind u8 | reserved u8 (=0) | len u16 | payload [len bytes]
//! ```
//!
//! The file is append-only: a writer only ever adds whole records at the end, so a
//! file cut off by a killed process is read up to its last complete record and the
//! cut is reported ([`ReadStats::truncated_at`]). Readers skip record kinds they do
//! not know (their length is in the header), so new kinds can be added without a
//! version bump; changing an existing payload bumps [`FORMAT_VERSION`]. Payloads may
//! grow at the end: readers ignore bytes past the fields they know.
//!
//! All names are interned: a `STRING` record defines a file-local id before any
//! record uses it. Every record after a `PROCESS` record belongs to that process
//! (one file per process). Timestamps are `CLOCK_MONOTONIC` nanoseconds, the clock
//! of `bpf_ktime_get_ns()`.
//!
//! | kind | name | payload (bytes) |
//! |---|---|---|
//! | 1 | `STRING` | id u32, UTF-8 text |
//! | 2 | `PROCESS` | pid u32, ppid u32 (0: unknown), start_ns u64, start_realtime_ns u64 (0: unknown), exe string u32, 0 u32 (32) |
//! | 3 | `DEVICE` | id u32, name string u32, cc major u16, cc minor u16 (12) |
//! | 4 | `API` | start u64, end u64, corr u32, tid u32, cbid u32, name string u32, domain u8 (0 runtime, 1 driver), 0 u8×3 (36), then optionally stack id u32 (40; 0 = none) |
//! | 5 | `KERNEL` | start u64, end u64, corr u32, name string u32, context u32, stream u32 (`u32::MAX`: not on a stream), graph id u32 (0: not from a graph), graph node u64 (0: none), grid x u32, grid y u16, grid z u16, block x/y/z u16×3, device u16 (60) |
//! | 6 | `MEMCPY` | start u64, end u64, bytes u64, graph node u64, corr u32, context u32, stream u32, graph id u32, device u16, copy kind u8, 0 u8×5 (56); a peer-to-peer copy adds src device u32, dst device u32 (64) |
//! | 7 | `MEMSET` | start u64, end u64, bytes u64, graph node u64, corr u32, context u32, stream u32, graph id u32, value u32, device u16, 0 u8×2 (56) |
//! | 8 | `SYNC` | start u64, end u64, corr u32, context u32, stream u32, sync type u8, 0 u8, device u16 (32) |
//! | 9 | `DROPPED` | count u64, source u8 (0 CUPTI, 1 writer, 2 ring buffer, 3 incomplete GPU record), 0 u8×7 (16) |
//! | 10 | `OVERHEAD` | start u64, end u64, kind string u32, corr u32 (24; 0 = none, and in files written before the field was) |
//! | 11 | `NOTE` | UTF-8 text: why the trace is empty or partial |
//! | 12 | `MODULE` | id u32, path string u32, bias u64, text start u64, text end u64, build id length u8, 0 u8×3, build id bytes (36 + length) |
//! | 13 | `STACK` | id u32 (from 1), end u8, flags u8 (bit 0: Python frames cut at the depth cap), frame count u16, frames (8 + 16 × count) |
//! | 14 | `GRAPH_NODE` | node id u64, stack id u32, API name string u32 (`u32::MAX`: none) (16) |
//! | 15 | `THREAD` | tid u32, name string u32 (8): the thread's name; a later record for the same thread supersedes it (a rename). Added without a version bump: older readers skip it |
//! | 17 | `AUTOGRAD` | corr u32, kind u8 (1 forward, 2 backward), 0 u8×3, thread u64, seq u64 (24): PyTorch autograd's ids for the API record with this correlation id, written after it; forward: RecordFunction thread id and `sequence_number::peek()`, backward: the evaluated node's thread id and sequence number (`u64::MAX` for a node without a forward op, such as `AccumulateGrad`). Added without a version bump: older readers skip it |
//! | 18 | `NVTX` | start u64, end u64, tid u32, name string u32, domain string u32 (`u32::MAX`: the default domain), kind u8 (1 push/pop, 2 start/end), flags u8 (bit 0: still open when the trace closed; `end` is the close), 0 u16 (32): an NVTX range, written when it ends (or at the close). Added without a version bump: older readers skip it |
//! | 19 | `ORIGIN` | host string u32, rank u32, local rank u32, world size u32 (16; `u32::MAX`: unknown): where the process ran, from its launcher's variables (`RANK`, `LOCAL_RANK`, `WORLD_SIZE` and the Slurm, Open MPI and PMI equivalents); follows the `PROCESS` record. Added without a version bump: older readers skip it |
//! | 20 | `PC_SAMPLE` | corr u32 (0: not one launch's), context u32, function string u32, stall reason index u32, pc offset u64, cubin crc u64, stall reason string u32, samples u32, file string u32 (`u32::MAX`: no line information), line u32 (48): GPU PC samples of one instruction and one stall reason (CUPTI PC sampling). Added without a version bump: older readers skip it |
//! | 21 | `PC_LAUNCHES` | sampled u64, unsampled u64 (16): the launches made while PC sampling was on in their context, and the others (outside a window, or in a context without sampling); written once, when the recording closes, if sampling was ever enabled. Added without a version bump: older readers skip it |
//! | 16 | `CLOSED` | at u64 (8): the recording was closed by the process's exit flush, at this time; records after it are notes on what came later. Written when the header has [`FLAG_CLOSES`]; added without a version bump |
//!
//! A file whose header has [`FLAG_CLOSES`] and no `CLOSED` record was not closed:
//! the process ended without its exit flush (killed, or by `_exit`), and what it
//! did after its last periodic flush is missing ([`ReadStats::unclosed`]).
//!
//! Devices are u16; 0xffff means unknown. Streams, graph ids and graph nodes of
//! `MEMCPY`, `MEMSET` and `SYNC` records say "none" as in `KERNEL` records;
//! readers turn these values into `None`. A kernel record is 64 bytes with its
//! header; an API record 40, or 44 with a stack id.
//!
//! # In-process stacks
//!
//! When the injection library takes CPU stacks itself, the header's flags have
//! bit 0 ([`FLAG_STACKS`]) set, and:
//!
//! - each distinct stack is written once as a `STACK` record, before the first API
//!   record that names it by its id; the `MODULE` records its native frames name
//!   come before it. Frames are innermost first, the first being the
//!   application's call into the CUDA API (frames of CUDA's libraries and of the
//!   injection library are left out), 16 bytes each:
//!
//!   | tag u8 | 0 u8×3 | a u32 | b u64 |
//!   |---|---|---|---|
//!   | 0 native | | module id | ELF virtual address to symbolize (inside the call instruction for return addresses) |
//!   | 1 Python | | function string (`module.qualname`) | file string (low 32 bits), line (high 32 bits; 0: unknown) |
//!   | 2 unknown (no unwind info; the last frame) | | 0 | absolute address |
//!
//!   `end` says how the stack ended: 0 at a root frame (`_start`, `clone`,
//!   `clone3`: complete), 1 code without unwind info, 2 a module loaded after the
//!   module table was read, 3 a stack read out of bounds, 4 unusable unwind info,
//!   5 the depth cap, 6 the unwinder busy. Every value but 0 is a truncated stack.
//! - an `API` record carries the id of its call's stack; readers that know it
//!   deliver a [`Record::CallStack`](crate::model::Record::CallStack) right after
//!   the [`Record::Api`](crate::model::Record::Api).
//! - `GRAPH_NODE` ties a CUDA graph node id (as kernel and copy records carry it)
//!   to the stack that made the node, so that the kernels of a replayed graph can
//!   be charged to the `cudaGraphLaunch` stack and then to the capturing stack.

#[cfg(test)]
mod pc_sample_tests;
mod reader;
#[cfg(test)]
mod tests;
mod writer;

pub use reader::{ReadStats, read};
pub use writer::Writer;

/// The magic bytes a GPU trace starts with.
pub(crate) const MAGIC: [u8; 8] = *b"GPUPERF\0";
/// The format version this build writes and the newest it reads.
pub const FORMAT_VERSION: u16 = 1;
/// Header flag: the trace holds in-process stacks (`STACK` records).
pub const FLAG_STACKS: u32 = 1;
/// Header flag: the writer ends a complete recording with a `CLOSED` record, so
/// that a file without one is known to be cut short.
pub const FLAG_CLOSES: u32 = 2;
/// What the recorder's `NOTE` on calls that take a stack and got none says
/// after their count ("12 calls that take a CPU stack have none; stacks: ..."):
/// the merge's summary looks for it to give unmatched kernels their reason.
pub const STACKLESS_NOTE: &str = "calls that take a CPU stack have none";
/// Frames one `STACK` record can hold.
pub(crate) const MAX_STACK_FRAMES: usize = (u16::MAX as usize - 8) / 16;
/// The length of the file header that [`header_flags`] decodes.
pub(crate) const HEADER_LEN: usize = 16;
const RECORD_HEADER_LEN: usize = 4;

mod kind {
    pub const STRING: u8 = 1;
    pub const PROCESS: u8 = 2;
    pub const DEVICE: u8 = 3;
    pub const API: u8 = 4;
    pub const KERNEL: u8 = 5;
    pub const MEMCPY: u8 = 6;
    pub const MEMSET: u8 = 7;
    pub const SYNC: u8 = 8;
    pub const DROPPED: u8 = 9;
    pub const OVERHEAD: u8 = 10;
    pub const NOTE: u8 = 11;
    pub const MODULE: u8 = 12;
    pub const STACK: u8 = 13;
    pub const GRAPH_NODE: u8 = 14;
    pub const THREAD: u8 = 15;
    pub const CLOSED: u8 = 16;
    pub const AUTOGRAD: u8 = 17;
    pub const NVTX: u8 = 18;
    pub const ORIGIN: u8 = 19;
    pub const PC_SAMPLE: u8 = 20;
    pub const PC_LAUNCHES: u8 = 21;
}

/// Whether `bytes` (the start of a file) look like a gpuperf GPU trace.
pub(crate) fn is_gpu_trace(bytes: &[u8]) -> bool {
    bytes.starts_with(&MAGIC)
}

/// The header flags ([`FLAG_STACKS`], [`FLAG_CLOSES`]) of a GPU trace that
/// starts with `bytes`; `None` when they are not a whole GPU trace header.
pub fn header_flags(bytes: &[u8]) -> Option<u32> {
    let h = bytes.get(..HEADER_LEN).filter(|h| is_gpu_trace(h))?;
    Some(u32::from_le_bytes([h[12], h[13], h[14], h[15]]))
}
