//! One thread's pending API records, filled by its callbacks without `malloc`.
//!
//! A callback may run in a signal handler that interrupted `malloc` (the
//! application's handler making a CUDA call): allocating there deadlocks on
//! the allocator's lock. So records go into chunks of [`CHUNK_BYTES`] mapped
//! with `mmap` (a system call, safe in a signal handler), linked in order. The
//! flush thread takes a shard's chunks and reads them, and the shard keeps them
//! as spares for its next records: a thread that launches steadily writes into
//! pages already resident instead of faulting in fresh ones for every chunk (a
//! page fault costs microseconds, inside the application's CUDA call). Its
//! memory still follows its use: each periodic flush ([`Shard::trim`]) unmaps
//! the spares beyond the chunks the thread started since the last one, so
//! after a burst one quieter interval gives them back, and an idle thread keeps
//! none. A shard holding [`SHARD_CAP`] records, or one that cannot map a chunk,
//! drops new records and counts them.

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
/// Spare chunks a shard keeps at most: 4 MiB, as much as one activity
/// buffer. A thread that launches 40,000 kernels a second (two items each)
/// fills 44 chunks between two flushes 500 ms apart; one that records more
/// maps the rest afresh.
pub const SPARE_CAP: usize = 64;

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
    /// Chunks kept from drains, linked by `next`, for the next records.
    spare: *mut Chunk,
    spares: usize,
    /// Chunks begun (mapped or spare) since the last [`Shard::trim`].
    started: usize,
}

// SAFETY: the chunks are plain memory owned by the list, touched only under the
// shard's lock or after being taken out of it.
unsafe impl Send for Chunks {}

impl Chunks {
    /// A spare chunk, emptied and off the spare list; `None` without one.
    fn pop_spare(&mut self) -> Option<*mut Chunk> {
        let c = self.spare;
        if c.is_null() {
            return None;
        }
        // SAFETY: a spare chunk of this list, mapped and owned by it.
        unsafe {
            self.spare = (*c).next;
            (*c).next = ptr::null_mut();
            (*c).len = 0;
        }
        self.spares -= 1;
        Some(c)
    }

    /// Makes `c` a spare.
    ///
    /// # Safety
    /// `c` is a mapped chunk of this shard that nothing else refers to.
    unsafe fn push_spare(&mut self, c: *mut Chunk) {
        // SAFETY: as this function's contract.
        unsafe { prepend(&mut self.spare, c) };
        self.spares += 1;
    }
}

/// Links `c` in front of the list at `head`.
///
/// # Safety
/// `c` is a mapped chunk that no list refers to.
unsafe fn prepend(head: &mut *mut Chunk, c: *mut Chunk) {
    // SAFETY: as this function's contract.
    unsafe { (*c).next = *head };
    *head = c;
}

/// One thread's records. The lock is the thread's own, taken by its callbacks
/// and, between them, by the flush thread.
pub struct Shard {
    chunks: Mutex<Chunks>,
    /// Bytes of this shard's chunks still mapped: those in the list, the
    /// spares, and those taken by a drain and not yet given back.
    mapped: AtomicUsize,
    /// The owning thread's id, 0 until set.
    pub tid: AtomicU32,
    /// Chunks mapped afresh (not reused).
    #[cfg(test)]
    maps: AtomicUsize,
}

impl Default for Shard {
    fn default() -> Self {
        Shard {
            chunks: Mutex::new(Chunks {
                first: ptr::null_mut(),
                last: ptr::null_mut(),
                held: 0,
                dropped: 0,
                spare: ptr::null_mut(),
                spares: 0,
                started: 0,
            }),
            mapped: AtomicUsize::new(0),
            tid: AtomicU32::new(0),
            #[cfg(test)]
            maps: AtomicUsize::new(0),
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
            let new = match c.pop_spare() {
                Some(new) => new,
                None => {
                    let Some(new) = map_chunk() else {
                        c.dropped += 1;
                        return;
                    };
                    self.mapped.fetch_add(CHUNK_BYTES, Relaxed);
                    #[cfg(test)]
                    self.maps.fetch_add(1, Relaxed);
                    new
                }
            };
            c.started += 1;
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

    /// Takes every item and the count of dropped ones. When the [`Taken`]
    /// is dropped, its chunks become the shard's spares (up to
    /// [`SPARE_CAP`]; the others are unmapped).
    pub fn take(&self) -> (Taken<'_>, u64) {
        let mut c = self.chunks.lock().unwrap_or_else(|e| e.into_inner());
        let taken = Taken {
            first: c.first,
            shard: self,
        };
        let dropped = std::mem::take(&mut c.dropped);
        c.first = ptr::null_mut();
        c.last = ptr::null_mut();
        c.held = 0;
        (taken, dropped)
    }

    /// Unmaps the spares beyond the chunks begun since the last trim: called
    /// once per periodic flush, so that the spares follow the thread's use
    /// over the last interval (none for a thread that recorded nothing).
    /// Drains in between (several per flush) leave the spares alone.
    pub fn trim(&self) {
        let mut unmap = ptr::null_mut();
        {
            let mut c = self.chunks.lock().unwrap_or_else(|e| e.into_inner());
            let keep = std::mem::take(&mut c.started).min(SPARE_CAP);
            while c.spares > keep
                && let Some(chunk) = c.pop_spare()
            {
                // SAFETY: a chunk just taken off the spare list.
                unsafe { prepend(&mut unmap, chunk) };
            }
        }
        // Outside the lock: the thread's next record need not wait for it.
        unmap_list(unmap, &self.mapped);
    }

    /// Bytes of this shard's chunks still mapped (see [`Shard::take`]).
    #[cfg(test)]
    fn mapped_bytes(&self) -> usize {
        self.mapped.load(Relaxed)
    }
}

impl Drop for Shard {
    fn drop(&mut self) {
        let c = self.chunks.get_mut().unwrap_or_else(|e| e.into_inner());
        let (first, spare) = (c.first, c.spare);
        (c.first, c.last, c.spare, c.spares) =
            (ptr::null_mut(), ptr::null_mut(), ptr::null_mut(), 0);
        unmap_list(first, &self.mapped);
        unmap_list(spare, &self.mapped);
    }
}

/// Unmaps a list of chunks linked by `next`, counting them off `mapped`.
fn unmap_list(mut c: *mut Chunk, mapped: &AtomicUsize) {
    while !c.is_null() {
        // SAFETY: a chunk mapped by `map_chunk`, owned by the caller's list
        // and referred to by nothing else; read before it is unmapped.
        let next = unsafe { (*c).next };
        // SAFETY: as above.
        if unsafe { libc::munmap(c.cast(), CHUNK_BYTES) } == 0 {
            mapped.fetch_sub(CHUNK_BYTES, Relaxed);
        }
        c = next;
    }
}

/// Items taken from a shard, in order; their chunks go back to it (as
/// spares) or are unmapped when dropped.
pub struct Taken<'s> {
    first: *mut Chunk,
    shard: &'s Shard,
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
        let mut unmap = ptr::null_mut();
        {
            let mut s = self.shard.chunks.lock().unwrap_or_else(|e| e.into_inner());
            let mut c = std::mem::replace(&mut self.first, ptr::null_mut());
            while !c.is_null() {
                // SAFETY: a chunk of the taken list, owned here; relinked
                // onto the spare list or onto the list to unmap.
                unsafe {
                    let next = (*c).next;
                    if s.spares < SPARE_CAP {
                        s.push_spare(c);
                    } else {
                        prepend(&mut unmap, c);
                    }
                    c = next;
                }
            }
        }
        unmap_list(unmap, &self.shard.mapped);
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

    /// The old per-thread `Vec`s kept their peak capacity after each drain
    /// (about 0.9 MB per thread after a burst, up to 160 MB): the spares a
    /// shard keeps follow the chunks it began in the last interval, and an
    /// idle interval leaves none.
    #[test]
    fn after_a_burst_the_shard_keeps_only_what_its_last_interval_used() {
        let s = Shard::default();
        assert_eq!(s.mapped_bytes(), 0);
        let fill = |chunks: usize| {
            let n = (CHUNK_ITEMS * chunks).saturating_sub(CHUNK_ITEMS - 1);
            for i in 0..n {
                s.push(api(i as u32));
            }
            n
        };
        for (round, chunks) in [14, 5, 1, 0].into_iter().enumerate() {
            // An interval with a burst of 14 chunks.
            fill(14);
            drop(s.take());
            s.trim();
            assert_eq!(s.mapped_bytes(), 14 * CHUNK_BYTES, "round {round}");
            // Then a quieter one.
            let n = fill(chunks);
            let (taken, dropped) = s.take();
            assert_eq!(dropped, 0);
            let mut k = 0;
            taken.for_each(|_| k += 1);
            assert_eq!(k, n, "round {round}");
            drop(taken);
            // Drains between two flushes give nothing back.
            drop(s.take());
            assert_eq!(s.mapped_bytes(), 14 * CHUNK_BYTES, "round {round}");
            s.trim();
            assert_eq!(
                s.mapped_bytes(),
                chunks * CHUNK_BYTES,
                "round {round}: the shard kept more than its last interval used"
            );
        }
        assert_eq!(s.mapped_bytes(), 0, "an idle interval left memory mapped");
    }

    /// A thread that records steadily writes into the chunks of its last
    /// interval: no chunk mapped afresh (a page fault per page in the
    /// application's CUDA call), and no item of the drain before read again.
    #[test]
    fn steady_records_reuse_the_chunks_of_the_last_drain() {
        let s = Shard::default();
        let n = CHUNK_ITEMS * 5;
        for round in 0..4u32 {
            for i in 0..n {
                s.push(api(round * 1_000_000 + i as u32));
            }
            assert_eq!(
                s.maps.load(Relaxed),
                5,
                "round {round}: chunks mapped afresh instead of reused"
            );
            let (taken, _) = s.take();
            let mut ids = Vec::new();
            taken.for_each(|it| {
                if let Item::Api(a) = it {
                    ids.push(a.correlation_id);
                }
            });
            let want: Vec<u32> = (0..n as u32).map(|i| round * 1_000_000 + i).collect();
            assert_eq!(ids, want, "round {round}");
            drop(taken);
            // As a periodic flush does: a second drain finds nothing (the
            // first ran for a completed activity buffer), then the trim.
            drop(s.take());
            s.trim();
        }
        // A shorter interval: only its own items, though the chunk it reuses
        // held a full one's.
        s.push(api(7));
        let (taken, _) = s.take();
        let mut k = Vec::new();
        taken.for_each(|it| k.push(*it));
        assert_eq!(k, vec![api(7)]);
    }
}
