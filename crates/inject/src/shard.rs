//! One thread's pending API records, filled by its callbacks without `malloc`.
//!
//! A callback may run in a signal handler that interrupted `malloc` (the
//! application's handler making a CUDA call): allocating there deadlocks on
//! the allocator's lock. So records go into chunks of [`CHUNK_BYTES`] mapped
//! with `mmap` (a system call, safe in a signal handler), linked in order. The
//! flush thread takes a shard's chunks, reads them and unmaps them, so a thread's
//! memory goes back down after a burst. A shard holding [`SHARD_CAP`] records,
//! or one that cannot map a chunk, drops new records and counts them.

use std::ptr;
use std::sync::Mutex;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicU32, AtomicUsize};

/// One API call as the callback saw it; names are resolved when written.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct RawApi {
    pub start_ns: u64,
    pub end_ns: u64,
    pub correlation_id: u32,
    pub tid: u32,
    pub cbid: u32,
    pub driver: bool,
    /// In-process stack id, 0 for none.
    pub stack: u32,
    /// PyTorch autograd ids (kind 0: none).
    pub autograd: crate::autograd::Tag,
}

/// What a callback leaves for the flush thread.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Item {
    /// A recorded call.
    Api(RawApi),
    /// (nested driver call's correlation id, enclosing runtime call's id).
    Alias(u32, u32),
    /// (thread id, its name as `PR_GET_NAME` gives it: NUL-padded).
    Thread(u32, [u8; 16]),
}

/// Bytes of one chunk, header included.
pub const CHUNK_BYTES: usize = 64 << 10;
/// Records a thread may hold between flushes before new ones are dropped.
pub const SHARD_CAP: usize = 4 << 20;

#[repr(C)]
struct Chunk {
    next: *mut Chunk,
    len: usize,
    items: [Item; CHUNK_ITEMS],
}

const CHUNK_ITEMS: usize = (CHUNK_BYTES - 16) / size_of::<Item>();

struct Chunks {
    first: *mut Chunk,
    last: *mut Chunk,
    held: usize,
    dropped: u64,
}

// SAFETY: the chunks are plain memory owned by the list, touched only under the
// shard's lock or after being taken out of it.
unsafe impl Send for Chunks {}

/// One thread's records. The lock is the thread's own, taken by its callbacks
/// and, between them, by the flush thread.
pub struct Shard {
    chunks: Mutex<Chunks>,
    /// Bytes of this shard's chunks still mapped: those in the list and those
    /// taken by a drain and not yet dropped.
    mapped: AtomicUsize,
    /// The owning thread's id, 0 until set.
    pub tid: AtomicU32,
}

impl Default for Shard {
    fn default() -> Self {
        Shard {
            chunks: Mutex::new(Chunks {
                first: ptr::null_mut(),
                last: ptr::null_mut(),
                held: 0,
                dropped: 0,
            }),
            mapped: AtomicUsize::new(0),
            tid: AtomicU32::new(0),
        }
    }
}

impl Shard {
    /// Appends an item; never allocates with `malloc`.
    pub fn push(&self, item: Item) {
        let mut c = self.chunks.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: `last` is null or a chunk of this list, under the lock.
        let full = c.last.is_null() || unsafe { (*c.last).len } == CHUNK_ITEMS;
        if full {
            if c.held >= SHARD_CAP {
                c.dropped += 1;
                return;
            }
            let Some(new) = map_chunk() else {
                c.dropped += 1;
                return;
            };
            self.mapped.fetch_add(CHUNK_BYTES, Relaxed);
            if c.last.is_null() {
                c.first = new;
            } else {
                // SAFETY: as above.
                unsafe { (*c.last).next = new };
            }
            c.last = new;
        }
        // SAFETY: `last` has room (checked or fresh), under the lock.
        unsafe {
            let last = &mut *c.last;
            last.items[last.len] = item;
            last.len += 1;
        }
        c.held += 1;
    }

    /// Takes every item and the count of dropped ones. The shard keeps no
    /// memory: the chunks are unmapped when the [`Taken`] is dropped.
    pub fn take(&self) -> (Taken<'_>, u64) {
        let mut c = self.chunks.lock().unwrap_or_else(|e| e.into_inner());
        let taken = Taken {
            first: c.first,
            mapped: &self.mapped,
        };
        let dropped = std::mem::take(&mut c.dropped);
        c.first = ptr::null_mut();
        c.last = ptr::null_mut();
        c.held = 0;
        (taken, dropped)
    }

    /// Bytes of this shard's chunks still mapped (see [`Shard::take`]).
    #[cfg(test)]
    fn mapped_bytes(&self) -> usize {
        self.mapped.load(Relaxed)
    }
}

impl Drop for Shard {
    fn drop(&mut self) {
        drop(self.take());
    }
}

/// Items taken from a shard, in order; unmapped when dropped.
pub struct Taken<'s> {
    first: *mut Chunk,
    /// The shard's count of mapped bytes.
    mapped: &'s AtomicUsize,
}

impl Taken<'_> {
    /// Calls `f` on each item in order.
    pub fn for_each(&self, mut f: impl FnMut(&Item)) {
        let mut c = self.first;
        while !c.is_null() {
            // SAFETY: a chunk of this list, which only `self` owns now.
            let chunk = unsafe { &*c };
            chunk.items[..chunk.len].iter().for_each(&mut f);
            c = chunk.next;
        }
    }
}

impl Drop for Taken<'_> {
    fn drop(&mut self) {
        let mut c = self.first;
        while !c.is_null() {
            // SAFETY: a chunk of this list, mapped by `map_chunk`; read before
            // it is unmapped.
            let next = unsafe { (*c).next };
            // SAFETY: as above; nothing refers to it any more.
            if unsafe { libc::munmap(c.cast(), CHUNK_BYTES) } == 0 {
                self.mapped.fetch_sub(CHUNK_BYTES, Relaxed);
            }
            c = next;
        }
    }
}

fn map_chunk() -> Option<*mut Chunk> {
    // SAFETY: a fresh anonymous mapping; `mmap` is a system call, safe in a
    // signal handler, and zeroed memory is a valid empty chunk.
    let p = unsafe {
        libc::mmap(
            ptr::null_mut(),
            CHUNK_BYTES,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    (p != libc::MAP_FAILED).then_some(p.cast())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(correlation_id: u32) -> Item {
        Item::Api(RawApi {
            start_ns: 1,
            end_ns: 2,
            correlation_id,
            tid: 3,
            cbid: 211,
            driver: false,
            stack: 0,
            autograd: Default::default(),
        })
    }

    #[test]
    fn items_come_back_in_order_across_chunks_and_the_shard_empties() {
        let s = Shard::default();
        let n = CHUNK_ITEMS as u32 * 2 + 5;
        for i in 0..n {
            s.push(api(i));
            if i % 1000 == 0 {
                s.push(Item::Alias(i, i + 1));
            }
        }
        let (taken, dropped) = s.take();
        assert_eq!(dropped, 0);
        let mut got = Vec::new();
        taken.for_each(|it| got.push(*it));
        let apis: Vec<u32> = got
            .iter()
            .filter_map(|it| match it {
                Item::Api(a) => Some(a.correlation_id),
                Item::Alias(..) | Item::Thread(..) => None,
            })
            .collect();
        assert_eq!(apis, (0..n).collect::<Vec<_>>());
        assert_eq!(got[1], Item::Alias(0, 1));
        let (again, _) = s.take();
        let mut k = 0;
        again.for_each(|_| k += 1);
        assert_eq!(k, 0);
    }

    /// Issue 22, item 13: the old per-thread `Vec`s kept their peak capacity
    /// after each drain (about 0.9 MB per thread after a burst, up to 160 MB).
    #[test]
    fn bursts_drained_every_chunk_unmapped_and_the_shard_holds_no_memory() {
        let s = Shard::default();
        assert_eq!(s.mapped_bytes(), 0);
        // A burst of about 0.9 MB of records, then smaller ones: none keeps
        // the memory of the one before.
        for (round, chunks) in [14, 5, 1].into_iter().enumerate() {
            let n = CHUNK_ITEMS * (chunks - 1) + 1;
            for i in 0..n {
                s.push(api(i as u32));
            }
            assert_eq!(s.mapped_bytes(), chunks * CHUNK_BYTES, "round {round}");
            let (taken, dropped) = s.take();
            assert_eq!(dropped, 0);
            // Still mapped while the drain reads it.
            assert_eq!(s.mapped_bytes(), chunks * CHUNK_BYTES, "round {round}");
            let mut k = 0;
            taken.for_each(|_| k += 1);
            assert_eq!(k, n, "round {round}");
            drop(taken);
            assert_eq!(
                s.mapped_bytes(),
                0,
                "round {round}: the shard kept memory after its drain"
            );
        }
    }
}
