//! The activity buffers handed to CUPTI.
//!
//! A buffer callback must never answer with a null buffer: before API 27 that
//! can crash CUPTI (Kineto commit baea3804). When memory runs out, a buffer from
//! a small reserve allocated at start goes instead, and comes back to the reserve
//! once decoded. When the reserve is in use too, a shared discard buffer goes:
//! what CUPTI writes there is never read, and the buffer is counted as lost.
//!
//! CUPTI may ask for a buffer on the application's thread, inside a CUDA call
//! made by a signal handler that interrupted `malloc`, where allocating would
//! deadlock. So a few buffers are allocated ahead, off the application's
//! threads (at start and by the flush thread), and requests take those first.
//!
//! A buffer CUPTI is done with goes back to an empty slot of those, once
//! decoded, rather than to the allocator: its pages are resident, where a
//! fresh buffer's are faulted in one by one as CUPTI writes records into it,
//! on the application's thread inside its launches (1,024 faults of a few
//! microseconds each per buffer). The slots bound what is kept so.

use std::alloc::Layout;
use std::ptr;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicPtr, AtomicU64};

/// Size of each activity buffer: 4 MiB, within the 1-10 MB CUPTI advises, and
/// Kineto's size. Smaller buffers mean more requests, and CUDA 13 keeps a buffer
/// per launching thread, requested on that thread inside a launch. The cost is
/// memory: each thread that launches holds up to one buffer in CUPTI, so a
/// process with 64 launching threads may hold 256 MiB of buffers (resident as
/// CUPTI writes them), and the buffers allocated ahead and in reserve take 24
/// MiB of address space, of which the 16 MiB ahead stay resident once used
/// (a buffer given back waits in a slot). A periodic (unforced) flush only
/// returns buffers whose records are all complete, so one long kernel holds
/// back every record that shares its buffer, up to about 19 000 kernel
/// records (216 bytes each in CUDA 13), until it ends; a forced flush at exit
/// still returns them.
pub const BUFFER_SIZE: usize = 4 << 20;
/// Buffers kept for when allocation fails.
const RESERVE: usize = 2;
/// Buffers allocated ahead of requests.
const READY: usize = 4;

fn layout() -> Layout {
    Layout::from_size_align(BUFFER_SIZE, 8).expect("constant layout")
}

/// Allocates one buffer; null when memory is short.
pub fn alloc_buffer() -> *mut u8 {
    // SAFETY: the layout has a non-zero size.
    unsafe { std::alloc::alloc(layout()) }
}

/// Where a buffer CUPTI hands back came from.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// Allocated for this request; freed after decoding.
    Heap,
    /// From the reserve; returned to it after decoding.
    Reserve(usize),
    /// The shared discard buffer: its contents are not read.
    Discard,
}

/// The reserve and the discard buffer, allocated once and never freed.
pub struct Pool {
    /// Allocated ahead (heap buffers, freed like any other); null when taken.
    ready: [AtomicPtr<u8>; READY],
    owned: [*mut u8; RESERVE],
    free: [AtomicPtr<u8>; RESERVE],
    discard: *mut u8,
    /// Requests answered from the reserve.
    pub reserve_used: AtomicU64,
    /// Buffers handed back in the discard buffer, whose records are lost.
    pub lost: AtomicU64,
}

// SAFETY: the raw pointers are addresses of buffers this pool owns for the life
// of the process; they are only compared and handed out, never dereferenced
// here, and handing out is arbitrated by the atomics.
unsafe impl Sync for Pool {}
// SAFETY: as above.
unsafe impl Send for Pool {}

impl Pool {
    /// Allocates the reserve and the discard buffer with `alloc`. A failed
    /// allocation leaves that slot empty.
    pub fn new(alloc: impl Fn() -> *mut u8) -> Self {
        let owned: [*mut u8; RESERVE] = std::array::from_fn(|_| alloc());
        Self {
            ready: std::array::from_fn(|_| AtomicPtr::new(ptr::null_mut())),
            owned,
            free: owned.map(AtomicPtr::new),
            discard: alloc(),
            reserve_used: AtomicU64::new(0),
            lost: AtomicU64::new(0),
        }
    }

    /// A buffer for CUPTI and its size: a fresh one from `alloc`, else one from
    /// the reserve, else the discard buffer. Null only if even the pool could not
    /// be allocated at start.
    pub fn request(&self, alloc: impl FnOnce() -> *mut u8) -> (*mut u8, usize) {
        for slot in &self.ready {
            let r = slot.swap(ptr::null_mut(), Acquire);
            if !r.is_null() {
                return (r, BUFFER_SIZE);
            }
        }
        let p = alloc();
        if !p.is_null() {
            return (p, BUFFER_SIZE);
        }
        for slot in &self.free {
            let r = slot.swap(ptr::null_mut(), Relaxed);
            if !r.is_null() {
                self.reserve_used.fetch_add(1, Relaxed);
                return (r, BUFFER_SIZE);
            }
        }
        (
            self.discard,
            if self.discard.is_null() {
                0
            } else {
                BUFFER_SIZE
            },
        )
    }

    /// Allocates buffers ahead with `alloc` until every ready slot is full or
    /// an allocation fails. Call it off the application's threads.
    pub fn refill(&self, alloc: impl Fn() -> *mut u8) {
        for slot in &self.ready {
            if !slot.load(Relaxed).is_null() {
                continue;
            }
            let p = alloc();
            if p.is_null() {
                return;
            }
            if slot
                .compare_exchange(ptr::null_mut(), p, Relaxed, Relaxed)
                .is_err()
            {
                // SAFETY: just allocated by `alloc`, as `release` expects.
                unsafe { self.release(p) };
            }
        }
    }

    /// Where `p` came from.
    pub fn origin(&self, p: *mut u8) -> Origin {
        if let Some(i) = self.owned.iter().position(|&o| o == p && !o.is_null()) {
            Origin::Reserve(i)
        } else if p == self.discard {
            Origin::Discard
        } else {
            Origin::Heap
        }
    }

    /// Takes back a buffer CUPTI is done with, once its records are decoded:
    /// into an empty slot of those allocated ahead (handed out first, being
    /// resident), else freed.
    ///
    /// # Safety
    /// `p` must come from [`Pool::request`] on this pool, with `alloc_buffer` as
    /// the allocator, and not be used afterwards.
    pub unsafe fn release(&self, p: *mut u8) {
        match self.origin(p) {
            Origin::Heap => {
                let kept = self.ready.iter().any(|slot| {
                    // Release: the decoding's reads of it come before the
                    // writes of whoever takes it next.
                    slot.compare_exchange(ptr::null_mut(), p, Release, Relaxed)
                        .is_ok()
                });
                if !kept {
                    // SAFETY: allocated by `alloc_buffer` with this layout;
                    // the caller gives it up.
                    unsafe { std::alloc::dealloc(p, layout()) }
                }
            }
            Origin::Reserve(i) => self.free[i].store(p, Relaxed),
            Origin::Discard => {
                self.lost.fetch_add(1, Relaxed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_allocation_gets_a_reserve_buffer_never_null() {
        let pool = Pool::new(alloc_buffer);
        let mut handed = Vec::new();
        for _ in 0..RESERVE {
            let (p, size) = pool.request(ptr::null_mut);
            assert!(!p.is_null());
            assert_eq!(size, BUFFER_SIZE);
            assert!(matches!(pool.origin(p), Origin::Reserve(_)));
            handed.push(p);
        }
        assert_eq!(pool.reserve_used.load(Relaxed), RESERVE as u64);
        // The reserve is in use: the discard buffer goes, and is counted lost.
        let (d, size) = pool.request(ptr::null_mut);
        assert!(!d.is_null());
        assert_eq!((pool.origin(d), size), (Origin::Discard, BUFFER_SIZE));
        // SAFETY: each pointer came from `request` and is not used again.
        unsafe { pool.release(d) };
        assert_eq!(pool.lost.load(Relaxed), 1);
        // A reserve buffer given back is handed out again.
        // SAFETY: as above.
        unsafe { pool.release(handed.pop().unwrap()) };
        let (p, _) = pool.request(ptr::null_mut);
        assert!(matches!(pool.origin(p), Origin::Reserve(_)));
    }

    #[test]
    fn a_buffer_given_back_is_handed_out_again_and_the_reserve_untouched() {
        let pool = Pool::new(alloc_buffer);
        let (p, size) = pool.request(alloc_buffer);
        assert_eq!((pool.origin(p), size), (Origin::Heap, BUFFER_SIZE));
        // SAFETY: from `request` with `alloc_buffer`; not used again.
        unsafe { pool.release(p) };
        // Its pages are resident: the next request gets it, not a fresh one.
        let (q, _) = pool.request(|| panic!("allocated instead of reusing"));
        assert_eq!(q, p);
        assert_eq!(
            (pool.reserve_used.load(Relaxed), pool.lost.load(Relaxed)),
            (0, 0)
        );
        // SAFETY: as above.
        unsafe { pool.release(q) };
    }

    #[test]
    fn buffers_given_back_beyond_the_slots_are_freed() {
        let pool = Pool::new(alloc_buffer);
        pool.refill(alloc_buffer);
        let extra: Vec<_> = (0..READY + 3)
            .map(|_| pool.request(alloc_buffer).0)
            .collect();
        for &p in &extra {
            // SAFETY: from `request` with `alloc_buffer`; not used again.
            unsafe { pool.release(p) };
        }
        // The slots hold READY of them; the others were freed, not kept.
        let held = pool
            .ready
            .iter()
            .filter(|s| !s.load(Relaxed).is_null())
            .count();
        assert_eq!(held, READY);
        let again: Vec<_> = (0..READY).map(|_| pool.request(ptr::null_mut).0).collect();
        assert!(again.iter().all(|p| extra.contains(p)));
        for p in again {
            // SAFETY: as above.
            unsafe { pool.release(p) };
        }
    }

    #[test]
    fn requests_take_buffers_allocated_ahead_first() {
        let pool = Pool::new(alloc_buffer);
        pool.refill(alloc_buffer);
        let taken: Vec<_> = (0..READY).map(|_| pool.request(ptr::null_mut)).collect();
        for (p, size) in &taken {
            assert_eq!((pool.origin(*p), *size), (Origin::Heap, BUFFER_SIZE));
        }
        assert_eq!(pool.reserve_used.load(Relaxed), 0);
        // None left ahead, and allocation fails: the reserve.
        let (r, _) = pool.request(ptr::null_mut);
        assert!(matches!(pool.origin(r), Origin::Reserve(_)));
        for (p, _) in taken.into_iter().chain([(r, 0)]) {
            // SAFETY: from `request`; not used again.
            unsafe { pool.release(p) };
        }
    }

    #[test]
    fn without_any_memory_the_answer_is_an_empty_buffer() {
        let pool = Pool::new(ptr::null_mut);
        assert_eq!(pool.request(ptr::null_mut), (ptr::null_mut(), 0));
    }
}
