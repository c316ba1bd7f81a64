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
//!
//! A thread gets its shard from [`Shards`] at its first recorded call: a spare
//! one, or one allocated then, fallibly (`None` when memory is short: the
//! caller counts the call as not recorded, and the next call tries again). The
//! shards are linked through themselves, so keeping the list never allocates.
//! At its exit the thread releases its shard ([`Held`]'s drop); the next drain
//! takes its last items and makes it spare, for the next new thread: a program
//! that starts and ends threads all along reuses a few shards instead of
//! allocating one per thread. At most [`SPARE_SHARDS`] are kept spare.

use std::alloc::Layout;
use std::ptr::{self, NonNull};
use std::sync::Mutex;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicUsize};

use crate::guard::lock;

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
/// Shards of exited threads kept for new ones; the others are freed.
pub const SPARE_SHARDS: usize = 64;

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
    owner: Owner,
}

/// Who holds a shard; changed under its lock, so that a drain sees the
/// release together with the last items pushed before it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Owner {
    /// A thread, through its [`Held`]: it may push at any time.
    Thread,
    /// Its thread let go of it: it pushes no more, and what the shard holds
    /// is drained a last time.
    Released,
    /// Drained after its release: spare, for another thread.
    Spare,
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
    /// The owning thread's id, 0 until set and once spare.
    pub tid: AtomicU32,
    /// The next shard of the [`Shards`] list this one is in; changed only
    /// under that list's lock.
    link: AtomicPtr<Shard>,
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
                owner: Owner::Thread,
            }),
            mapped: AtomicUsize::new(0),
            tid: AtomicU32::new(0),
            link: AtomicPtr::new(ptr::null_mut()),
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

    /// Takes every item and the count of dropped ones, and whether these are
    /// the last items of a shard its thread released, which is spare from now
    /// on. When the [`Taken`] is dropped, its chunks become the shard's
    /// spares (up to [`SPARE_CAP`]; the others are unmapped).
    pub fn take(&self) -> (Taken<'_>, u64, bool) {
        let mut c = self.chunks.lock().unwrap_or_else(|e| e.into_inner());
        let taken = Taken {
            first: c.first,
            shard: self,
        };
        let dropped = std::mem::take(&mut c.dropped);
        c.first = ptr::null_mut();
        c.last = ptr::null_mut();
        c.held = 0;
        let last = c.owner == Owner::Released;
        if last {
            c.owner = Owner::Spare;
            self.tid.store(0, Relaxed);
        }
        (taken, dropped, last)
    }

    /// Its thread lets go of it: called after the thread's last push.
    fn release(&self) {
        self.chunks.lock().unwrap_or_else(|e| e.into_inner()).owner = Owner::Released;
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

/// Every thread's shard, for the drains, and the spare shards of threads that
/// exited, for new ones.
pub struct Shards {
    lists: Mutex<Lists>,
}

struct Lists {
    /// Shards held by threads, and released ones not yet drained a last
    /// time, linked by `link`.
    live: *mut Shard,
    /// Shards drained after their release, linked by `link`.
    spare: *mut Shard,
    spares: usize,
    /// Snapshots alive: no shard is freed while one is.
    readers: usize,
    counts: Counts,
}

// SAFETY: the lists' shards are allocated by `new_shard` and freed only under
// the lock, with no snapshot alive and no thread holding them; a `Shard` is
// `Sync`.
unsafe impl Send for Lists {}

/// What became of the shards made so far.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Shards allocated.
    pub made: u64,
    /// Shards handed to a new thread from the spares.
    pub reused: u64,
    /// Spare shards freed (beyond [`SPARE_SHARDS`]).
    pub freed: u64,
}

impl Shards {
    /// No shards yet.
    pub const fn new() -> Self {
        Shards {
            lists: Mutex::new(Lists {
                live: ptr::null_mut(),
                spare: ptr::null_mut(),
                spares: 0,
                readers: 0,
                counts: Counts {
                    made: 0,
                    reused: 0,
                    freed: 0,
                },
            }),
        }
    }

    /// A shard for thread `tid`: a spare one, or else one allocated now;
    /// `None` when the allocator refuses (memory is short). Called on the
    /// thread's first recorded call, inside the application's CUDA call: it
    /// never aborts the program, and allocates only without a spare.
    pub fn claim(&self, tid: u32) -> Option<Held> {
        let spare = {
            let mut l = lock(&self.lists);
            NonNull::new(l.spare).inspect(|s| {
                // SAFETY: a shard of the spare list: allocated, and held by
                // no thread, as it leaves the list here under its lock.
                let shard = unsafe { s.as_ref() };
                l.spare = shard.link.load(Relaxed);
                l.spares -= 1;
                l.counts.reused += 1;
                lock(&shard.chunks).owner = Owner::Thread;
            })
        };
        let s = match spare {
            Some(s) => s,
            None => new_shard()?,
        };
        // SAFETY: allocated above or taken off the spare list: only this
        // thread refers to it until it is linked below.
        let shard = unsafe { s.as_ref() };
        shard.tid.store(tid, Relaxed);
        let mut l = lock(&self.lists);
        shard.link.store(l.live, Relaxed);
        l.live = s.as_ptr();
        l.counts.made += u64::from(spare.is_none());
        Some(Held(s))
    }

    /// Takes every shard's items and calls `f` on each, in order within a
    /// shard; returns how many items the shards dropped. A shard whose
    /// thread released it is spare once its last items are taken.
    pub fn drain(&self, mut f: impl FnMut(&Item)) -> u64 {
        let snap = self.snapshot(false);
        let mut dropped = 0;
        let mut spare = Vec::new();
        for &s in &snap.list {
            // SAFETY: a snapshot's shard stays allocated while it lives.
            let (taken, d, last) = unsafe { s.as_ref() }.take();
            dropped += d;
            taken.for_each(&mut f);
            drop(taken);
            if last {
                spare.push(s.as_ptr());
            }
        }
        if !spare.is_empty() {
            self.make_spare(spare);
        }
        dropped
    }

    /// Unmaps each shard's spare chunks beyond its use since the last trim
    /// ([`Shard::trim`]), the spare shards' too: called once per periodic
    /// flush.
    pub fn trim(&self) {
        let snap = self.snapshot(true);
        for s in &snap.list {
            // SAFETY: a snapshot's shard stays allocated while it lives.
            unsafe { s.as_ref() }.trim();
        }
    }

    /// The ids of the threads holding a shard, or that released one not yet
    /// drained.
    pub fn tids(&self) -> Vec<u32> {
        let snap = self.snapshot(false);
        snap.list
            .iter()
            // SAFETY: a snapshot's shard stays allocated while it lives.
            .map(|s| unsafe { s.as_ref() }.tid.load(Relaxed))
            .filter(|&t| t != 0)
            .collect()
    }

    /// What became of the shards made so far.
    pub fn counts(&self) -> Counts {
        lock(&self.lists).counts
    }

    /// The live shards (and with `spares_too` the spare ones), which stay
    /// allocated while the snapshot lives.
    fn snapshot(&self, spares_too: bool) -> Snapshot<'_> {
        let mut l = lock(&self.lists);
        l.readers += 1;
        let mut list = Vec::new();
        let heads = [l.live, if spares_too { l.spare } else { ptr::null_mut() }];
        for mut s in heads {
            while let Some(shard) = NonNull::new(s) {
                list.push(shard);
                // SAFETY: a listed shard, read under the lists' lock.
                s = unsafe { shard.as_ref() }.link.load(Relaxed);
            }
        }
        Snapshot { shards: self, list }
    }

    /// Moves `spare`, shards whose last items a drain took, from the live
    /// list to the spare one.
    fn make_spare(&self, mut spare: Vec<*mut Shard>) {
        spare.sort_unstable();
        let mut l = lock(&self.lists);
        let (mut prev, mut s) = (ptr::null_mut::<Shard>(), l.live);
        while let Some(shard) = NonNull::new(s) {
            // SAFETY: listed shards, relinked under the lists' lock.
            unsafe {
                let next = shard.as_ref().link.load(Relaxed);
                if spare.binary_search(&s).is_ok() {
                    if prev.is_null() {
                        l.live = next;
                    } else {
                        (*prev).link.store(next, Relaxed);
                    }
                    shard.as_ref().link.store(l.spare, Relaxed);
                    l.spare = s;
                    l.spares += 1;
                } else {
                    prev = s;
                }
                s = next;
            }
        }
    }
}

impl Default for Shards {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for Shards {
    /// Frees the shards no thread holds; a held one is left allocated, for
    /// its thread's pushes and release.
    fn drop(&mut self) {
        let l = self.lists.get_mut().unwrap_or_else(|e| e.into_inner());
        for mut s in [l.live, l.spare] {
            while let Some(shard) = NonNull::new(s) {
                // SAFETY: a listed shard; no snapshot is alive (they borrow
                // `self`), and one no thread holds is referred to by nothing.
                unsafe {
                    s = shard.as_ref().link.load(Relaxed);
                    if lock(&shard.as_ref().chunks).owner != Owner::Thread {
                        free_shard(shard);
                    }
                }
            }
        }
    }
}

/// The shards of the lists at one moment; none is freed while this lives.
struct Snapshot<'a> {
    shards: &'a Shards,
    list: Vec<NonNull<Shard>>,
}

impl Drop for Snapshot<'_> {
    /// The last reader frees the spare shards beyond [`SPARE_SHARDS`].
    fn drop(&mut self) {
        let mut free = ptr::null_mut::<Shard>();
        {
            let mut l = lock(&self.shards.lists);
            l.readers -= 1;
            while l.readers == 0
                && l.spares > SPARE_SHARDS
                && let Some(shard) = NonNull::new(l.spare)
            {
                // SAFETY: a spare shard, unlinked under the lists' lock onto
                // a list of this function's own.
                l.spare = unsafe { shard.as_ref() }.link.load(Relaxed);
                // SAFETY: as above.
                unsafe { shard.as_ref() }.link.store(free, Relaxed);
                free = shard.as_ptr();
                l.spares -= 1;
                l.counts.freed += 1;
            }
        }
        while let Some(shard) = NonNull::new(free) {
            // SAFETY: unlinked above: nothing else refers to it, and no
            // snapshot was alive, so none can hold it.
            unsafe {
                free = shard.as_ref().link.load(Relaxed);
                free_shard(shard);
            }
        }
    }
}

/// A thread's hold on its shard: its records go in through it, and dropping
/// it releases the shard (the thread pushes no more).
pub struct Held(NonNull<Shard>);

// SAFETY: a `Shard` is `Sync`, and a held shard stays allocated (see
// `Shards`): the hold may move to another thread, as a `Box` could.
unsafe impl Send for Held {}

impl Held {
    /// Appends an item to the shard; never allocates with `malloc`.
    #[inline]
    pub fn push(&self, item: Item) {
        self.shard().push(item);
    }

    fn shard(&self) -> &Shard {
        // SAFETY: a held shard is freed by nothing (see `Shards`).
        unsafe { self.0.as_ref() }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.shard().release();
    }
}

/// A new shard from the allocator; `None` when it refuses.
fn new_shard() -> Option<NonNull<Shard>> {
    if mock_alloc::refuses() {
        return None;
    }
    // SAFETY: `Shard` is not zero-sized.
    let p = NonNull::new(unsafe { std::alloc::alloc(Layout::new::<Shard>()) }.cast::<Shard>())?;
    // SAFETY: fresh memory of `Shard`'s layout.
    unsafe { p.as_ptr().write(Shard::default()) };
    Some(p)
}

/// Drops and frees a shard of `new_shard`'s.
///
/// # Safety
/// Nothing refers to `s` any more.
unsafe fn free_shard(s: NonNull<Shard>) {
    // SAFETY: as this function's contract; allocated by `new_shard` with
    // this layout.
    unsafe {
        ptr::drop_in_place(s.as_ptr());
        std::alloc::dealloc(s.as_ptr().cast(), Layout::new::<Shard>());
    }
}

/// A mock of the allocator for the unit tests: while a thread sets it, the
/// recorder's fallible allocations on that thread are refused, as when memory
/// is short. Outside the tests it never refuses, and costs nothing.
pub(crate) mod mock_alloc {
    #[cfg(test)]
    thread_local! {
        static REFUSE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }

    /// Refuses (or grants again) this thread's fallible allocations.
    #[cfg(test)]
    pub fn refuse(on: bool) {
        REFUSE.set(on);
    }

    /// Whether this thread's fallible allocations are refused now.
    #[cfg(test)]
    pub fn refuses() -> bool {
        REFUSE.get()
    }

    /// Never, outside the tests.
    #[cfg(not(test))]
    #[inline(always)]
    pub const fn refuses() -> bool {
        false
    }
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
        let (taken, dropped, _) = s.take();
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
        let (again, _, _) = s.take();
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
            let (taken, dropped, _) = s.take();
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
            let (taken, _, _) = s.take();
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
        let (taken, _, _) = s.take();
        let mut k = Vec::new();
        taken.for_each(|it| k.push(*it));
        assert_eq!(k, vec![api(7)]);
    }

    /// How many `Api` items, and which `Thread` names, a drain gave.
    fn drained(shards: &Shards) -> (usize, Vec<u32>, u64) {
        let (mut apis, mut names) = (0, Vec::new());
        let dropped = shards.drain(|it| match it {
            Item::Api(_) => apis += 1,
            Item::Thread(tid, _) => names.push(*tid),
            Item::Alias(..) => {}
        });
        (apis, names, dropped)
    }

    /// A released shard is drained a last time (the item pushed just before
    /// its release among them), then reused by the next claim instead of a
    /// new one; a shard still held is not.
    #[test]
    fn a_released_shard_is_drained_then_reused() {
        let shards = Shards::new();
        let a = shards.claim(1).unwrap();
        let b = shards.claim(2).unwrap();
        a.push(api(1));
        a.push(Item::Thread(1, [0; 16]));
        drop(a);
        b.push(api(2));
        assert_eq!(shards.tids().len(), 2);
        assert_eq!(drained(&shards), (2, vec![1], 0));
        // Thread 1's shard is spare: its id is gone, and it goes to thread 3.
        assert_eq!(shards.tids(), vec![2]);
        let c = shards.claim(3).unwrap();
        let counts = shards.counts();
        assert_eq!((counts.made, counts.reused, counts.freed), (2, 1, 0));
        c.push(api(3));
        b.push(api(4));
        assert_eq!(drained(&shards), (2, vec![], 0));
        let mut tids = shards.tids();
        tids.sort_unstable();
        assert_eq!(tids, vec![2, 3]);
    }

    /// The allocator's refusal (mocked) is a `None`, not an abort; the next
    /// claim, with memory back, gets a shard. A spare one is claimed even
    /// while the allocator refuses.
    #[test]
    fn a_claim_the_allocator_refuses_is_none_and_a_spare_needs_no_allocation() {
        let shards = Shards::new();
        mock_alloc::refuse(true);
        assert!(shards.claim(1).is_none());
        assert_eq!(shards.counts(), Counts::default());
        mock_alloc::refuse(false);
        let s = shards.claim(1).unwrap();
        drop(s);
        drained(&shards);
        mock_alloc::refuse(true);
        let again = shards.claim(2);
        mock_alloc::refuse(false);
        assert!(again.is_some());
        assert_eq!(shards.counts().reused, 1);
    }

    /// More threads at once than [`SPARE_SHARDS`]: once they exit, the
    /// spares beyond it are freed (their chunks unmapped with them).
    #[test]
    fn spare_shards_beyond_the_bound_are_freed() {
        let shards = Shards::new();
        let n = SPARE_SHARDS + 36;
        let held: Vec<Held> = (0..n as u32)
            .map(|t| shards.claim(t + 1).unwrap())
            .collect();
        for h in &held {
            h.push(api(7));
        }
        drop(held);
        assert_eq!(drained(&shards).0, n);
        let counts = shards.counts();
        assert_eq!((counts.made, counts.freed), (n as u64, 36));
        // The spares kept serve the next threads without allocating.
        let again: Vec<Held> = (0..SPARE_SHARDS as u32)
            .map(|t| shards.claim(t + 1).unwrap())
            .collect();
        assert_eq!(shards.counts().made, n as u64);
        drop(again);
    }

    /// Threads push, release and are replaced while two drains run at once
    /// (CUPTI's buffer thread and the flush thread): every item is taken
    /// once, each released shard is made spare once (so the claims never
    /// share one), and the shards are freed only with no drain running. Each
    /// thread's last item, pushed just before its release, is taken.
    #[test]
    fn drains_racing_with_exiting_threads_lose_nothing() {
        let shards = Shards::new();
        let stop = std::sync::atomic::AtomicBool::new(false);
        let per_thread = 300;
        let taken = std::thread::scope(|scope| {
            let drainers: Vec<_> = (0..2)
                .map(|_| {
                    scope.spawn(|| {
                        let mut got = (0, Vec::new(), 0);
                        while !stop.load(Relaxed) {
                            let (a, n, d) = drained(&shards);
                            got.0 += a;
                            got.1.extend(n);
                            got.2 += d;
                            shards.trim();
                        }
                        got
                    })
                })
                .collect();
            let workers: Vec<_> = (0..8u32)
                .map(|w| {
                    let shards = &shards;
                    scope.spawn(move || {
                        for round in 0..25u32 {
                            let tid = w * 1000 + round + 1;
                            let h = shards.claim(tid).unwrap();
                            for i in 0..per_thread {
                                h.push(api(i));
                            }
                            h.push(Item::Thread(tid, [0; 16]));
                        }
                    })
                })
                .collect();
            workers.into_iter().for_each(|w| w.join().unwrap());
            stop.store(true, Relaxed);
            let mut all = drained(&shards);
            for d in drainers {
                let (a, n, dr) = d.join().unwrap();
                all.0 += a;
                all.1.extend(n);
                all.2 += dr;
            }
            all
        });
        let (apis, mut names, dropped) = taken;
        assert_eq!(dropped, 0);
        assert_eq!(apis, 8 * 25 * per_thread as usize);
        names.sort_unstable();
        let want: Vec<u32> = (0..8u32)
            .flat_map(|w| (0..25u32).map(move |r| w * 1000 + r + 1))
            .collect();
        assert_eq!(names, want);
        // Every thread exited and was drained: what stays allocated is the
        // spares kept.
        let c = shards.counts();
        assert!(c.made - c.freed <= SPARE_SHARDS as u64, "{c:?}");
    }
}
