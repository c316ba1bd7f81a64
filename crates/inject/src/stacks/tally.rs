//! The capture counters that the log's stack summary reports, kept per thread.
//!
//! A capture bumps several counters. Shared atomics would cost a locked add
//! each (a full barrier), and move their cache line between the threads that
//! launch (a training step's forward and backward launch from two). Instead
//! each thread counts in a block of its own cache lines, by plain loads and
//! stores (it is the block's only writer), and a reader sums the blocks.
//! A block is given back when its thread ends and goes on counting for the
//! next thread that takes it: the sums never lose a count. A thread that finds
//! every block taken, or whose state is gone (a capture from a destructor at
//! thread exit), counts in a shared block with locked adds.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};

/// Blocks for threads; the threads alive past these count in the shared one.
const THREAD_BLOCKS: usize = 256;

/// What captures count.
#[derive(Clone, Copy, Debug)]
pub(super) enum Count {
    Captures,
    /// Skipped: the thread had almost no stack left.
    NoStack,
    /// Skipped: the thread's capture state could not be allocated.
    NoMemory,
    Truncated,
    /// Ending at code without unwind info.
    UnknownEnd,
    DepthCut,
    /// Ending in `PythonCut`: an outer interpreter's Python frames missing.
    PythonCut,
    /// Python frames cut at the depth cap.
    PythonDepthCut,
    WithPython,
    /// No frame outside the hidden modules.
    Empty,
    KeptFrames,
    /// Captures that took native frames from their thread's last capture.
    Reused,
    /// The native frames they took.
    ReusedFrames,
    /// Captures whose native frames were the walk kept for the stack
    /// expected next, proven unchanged: nothing walked.
    KeptWalk,
    /// Of those, captures that were the whole capture kept with the walk:
    /// the Python frames proven the same, nothing read or merged.
    KeptWhole,
    /// Walks not kept: the thread's buffers for them could not be allocated.
    NotKeptNoMemory,
}

const COUNTS: usize = Count::NotKeptNoMemory as usize + 1;

/// One thread's counters (or the shared ones), on cache lines of their own:
/// 128 bytes, as the adjacent-line prefetcher pairs lines.
#[repr(align(128))]
#[derive(Default)]
struct Block {
    /// Taken by a thread, whose [`Held`] gives it back.
    held: AtomicBool,
    n: [AtomicU64; COUNTS],
}

/// Every block, the shared one first.
pub(super) struct Tallies(Arc<[Block]>);

/// A thread's own block, given back when dropped (its thread ended).
pub(super) struct Held {
    blocks: Arc<[Block]>,
    index: usize,
}

impl Drop for Held {
    fn drop(&mut self) {
        // Release: the next thread to take the block (Acquire) goes on from
        // this one's last counts.
        self.blocks[self.index].held.store(false, Release);
    }
}

/// Where one capture counts.
pub(super) struct Counter<'a> {
    block: &'a Block,
    /// The calling thread's own block: it is the only writer.
    own: bool,
}

impl Counter<'_> {
    /// Adds `n` to `c`.
    #[inline(always)]
    pub(super) fn add(&self, c: Count, n: u64) {
        let a = &self.block.n[c as usize];
        if self.own {
            // The block's only writer: no read-modify-write needed; readers
            // see either value.
            a.store(a.load(Relaxed).wrapping_add(n), Relaxed);
        } else if n != 0 {
            a.fetch_add(n, Relaxed);
        }
    }
}

impl Tallies {
    /// Allocates: call at start.
    pub(super) fn new() -> Tallies {
        Tallies((0..=THREAD_BLOCKS).map(|_| Block::default()).collect())
    }

    /// A block of the calling thread's own while the result lives; `None`
    /// when every one is taken. No allocation, no lock.
    pub(super) fn take(&self) -> Option<Held> {
        let index = (1..self.0.len()).find(|&i| {
            let h = &self.0[i].held;
            !h.load(Relaxed) && h.compare_exchange(false, true, Acquire, Relaxed).is_ok()
        })?;
        Some(Held {
            blocks: Arc::clone(&self.0),
            index,
        })
    }

    /// Where a thread that holds `held` counts: that block, if it is one of
    /// these (not another recorder's: tests make several), else the shared
    /// one.
    #[inline(always)]
    pub(super) fn counter(&self, held: Option<&Held>) -> Counter<'_> {
        match held {
            Some(h) if Arc::ptr_eq(&h.blocks, &self.0) => Counter {
                block: &self.0[h.index],
                own: true,
            },
            _ => Counter {
                block: &self.0[0],
                own: false,
            },
        }
    }

    /// `c` over every thread so far.
    pub(super) fn get(&self, c: Count) -> u64 {
        self.0
            .iter()
            .map(|b| b.n[c as usize].load(Relaxed))
            .fold(0, u64::wrapping_add)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_survive_their_threads_and_the_shared_block_takes_the_rest() {
        let t = Tallies::new();
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    let held = t.take().expect("a free block");
                    for _ in 0..1000 {
                        t.counter(Some(&held)).add(Count::Captures, 1);
                        t.counter(Some(&held)).add(Count::KeptFrames, 53);
                    }
                });
            }
        });
        assert_eq!(t.get(Count::Captures), 8000);
        assert_eq!(t.get(Count::KeptFrames), 8 * 53_000);
        // Every block was given back; taking them all leaves the shared one.
        let all: Vec<Held> = std::iter::from_fn(|| t.take()).collect();
        assert_eq!(all.len(), THREAD_BLOCKS);
        t.counter(None).add(Count::Captures, 1);
        t.counter(all.first()).add(Count::Captures, 1);
        // Another recorder's block counts in this one's shared block.
        let other = Tallies::new();
        let theirs = other.take();
        t.counter(theirs.as_ref()).add(Count::Captures, 1);
        assert_eq!(t.get(Count::Captures), 8003);
        assert_eq!(other.get(Count::Captures), 0);
        assert_eq!(t.0[0].n[Count::Captures as usize].load(Relaxed), 2);
    }
}
