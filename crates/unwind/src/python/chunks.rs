//! What a read of the frame chain works with: the live parts of the thread's
//! data-stack chunks ([`Chunks`]) and each frame as read ([`Raw`]).

/// Data-stack chunks a capture reads without probes; frames in older chunks
/// are probed.
pub(super) const MAX_CHUNKS: usize = 16;
/// Bytes of a chunk's header (`previous`, `size`, `top`) before its frames.
pub(super) const CHUNK_DATA: u64 = 24;

/// The live parts `[lo, hi)` of the thread's data-stack chunks, current chunk
/// first, and per chunk the last frame proven live (`tile_to`).
pub(super) struct Chunks {
    pub(super) n: usize,
    pub(super) lo: [u64; MAX_CHUNKS],
    pub(super) hi: [u64; MAX_CHUNKS],
    pub(super) cursor: [u64; MAX_CHUNKS],
}

impl Chunks {
    /// The chunk holding `[addr, addr+len)` in its live part.
    pub(super) fn find(&self, addr: u64, len: u64) -> Option<usize> {
        let end = addr.checked_add(len)?;
        (0..self.n).find(|&k| self.lo[k] <= addr && end <= self.hi[k])
    }
}

/// One Python frame as read.
#[derive(Clone, Copy, Default)]
pub(super) struct Raw {
    pub(super) code: u32,
    pub(super) instruction: u32,
    /// This frame is the outermost of its eval-loop invocation.
    pub(super) group_end: bool,
    /// The code object's address, until `code` is set from it.
    pub(super) code_ptr: u64,
    /// The frame's address when it lies in the data stack, else 0.
    pub(super) in_stack: u64,
    /// The data-stack chunk it lies in (when `in_stack` is set).
    pub(super) chunk: u8,
}
