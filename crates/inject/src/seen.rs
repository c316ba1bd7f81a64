//! The distinct stacks of the process: a lock-free table that a callback can
//! read and add to without `malloc` or a lock, even in a signal handler that
//! interrupted either.
//!
//! ```text
//!  capture ─▶ 128-bit hash ─▶ slot (open addressing, claimed by CAS on the
//!            low 64 bits) ─hit─▶ id
//!                         └─new─▶ frames and layout copied into the arenas,
//!                                 id = next id, published (Release)
//!                                 ─▶ flush reads ids in order
//! ```
//!
//! A stack's layout (the words its hash was taken over) is kept beside its
//! frames: a thread that expects a given stack next checks it by comparing
//! layouts, without hashing ([`Seen::layout`]).
//!
//! Fixed sizes, mapped once at start and resident only as used: a stack that
//! finds the table or the frame arena full gets no id and is counted; one that
//! finds the layout arena full is kept without its layout.

use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

use gpuperf_unwind::{Frame, StackEnd};

/// Distinct stacks held.
const SLOTS: usize = 1 << 16;
/// Frames of all distinct stacks together (16 bytes each).
const ARENA_FRAMES: usize = 1 << 22;
/// Layout words of all distinct stacks together: a word a frame and one for
/// the end, as real stacks take.
const ARENA_WORDS: usize = ARENA_FRAMES + SLOTS;
/// Slots probed before a stack counts as not fitting.
const PROBES: usize = 64;
/// Spins waiting for another thread to publish the stack it is adding.
const SPINS: usize = 1 << 12;

/// Why a stack got no id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Miss {
    /// The table or the arena is full.
    Full,
    /// Another thread was adding the same stack and did not finish in time.
    Contended,
}

struct Slot {
    /// The hash's low 64 bits (0 is stored as 1): set once, by the claimer.
    tag: AtomicU64,
    /// The hash's high 64 bits, written before `id` is published.
    high: AtomicU64,
    /// 0 until published; `u32::MAX` when the stack did not fit in the arena.
    id: AtomicU32,
}

/// One distinct stack, by id: where its frames are and how it ended.
struct Entry {
    /// `start << 32 | len << 16 | end << 1 | python_truncated`, 0 until ready.
    packed: AtomicU64,
    /// Where its layout is: `start << 32 | len` (0: not kept), written
    /// before `packed`.
    layout: AtomicU64,
}

/// A stack as stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stored<'a> {
    pub frames: &'a [Frame],
    pub end: StackEnd,
    pub python_truncated: bool,
}

/// The table. All methods take `&self`.
pub struct Seen {
    slots: Box<[Slot]>,
    by_id: Box<[Entry]>,
    arena: Arena<Frame>,
    layouts: Arena<u64>,
    next_id: AtomicU32,
    arena_used: AtomicUsize,
    layouts_used: AtomicUsize,
}

/// Frames (or layout words) of stored stacks: each range is written once, by
/// the thread that reserved it, before its stack is published.
struct Arena<T> {
    base: *mut UnsafeCell<MaybeUninit<T>>,
    len: usize,
}

// SAFETY: see `Arena`: a range is written by one thread before it is published
// (Release) and only read after (Acquire); `T` is plain data (`Copy`).
unsafe impl<T: Copy> Send for Arena<T> {}
// SAFETY: as for `Send`.
unsafe impl<T: Copy> Sync for Arena<T> {}

impl<T: Copy> Arena<T> {
    fn new(len: usize) -> Arena<T> {
        let bytes = len * size_of::<T>();
        // SAFETY: a fresh anonymous mapping, resident only where written.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Arena {
                base: std::ptr::null_mut(),
                len: 0,
            };
        }
        Arena {
            base: p.cast(),
            len,
        }
    }

    /// Writes `items` at `start..`, a range reserved by the calling thread
    /// alone and not yet published.
    fn write(&self, start: usize, items: &[T]) {
        assert!(start + items.len() <= self.len);
        for (i, x) in items.iter().enumerate() {
            // SAFETY: in the mapping (checked above), and reserved by this
            // thread alone: no other reads or writes it until published.
            unsafe {
                (*self.base.add(start + i))
                    .get()
                    .write(MaybeUninit::new(*x))
            };
        }
    }

    /// The items at `start..start + len`.
    ///
    /// # Safety
    /// The range was written by [`Arena::write`] before a Release store that
    /// the caller read with Acquire.
    unsafe fn read(&self, start: usize, len: usize) -> &[T] {
        if len == 0 {
            // The mapping may have failed: no pointer to make a slice from.
            return &[];
        }
        debug_assert!(start + len <= self.len);
        // SAFETY: written (initialized) before the store the caller read, so
        // visible and never written again; `UnsafeCell<MaybeUninit<T>>` has
        // the layout of `T`.
        unsafe { std::slice::from_raw_parts(self.base.add(start).cast::<T>(), len) }
    }
}

impl<T> Drop for Arena<T> {
    fn drop(&mut self) {
        if !self.base.is_null() {
            // SAFETY: the mapping made in `new`; `&mut self`: no reader is left.
            unsafe { libc::munmap(self.base.cast(), self.len * size_of::<T>()) };
        }
    }
}

/// Stored in 4 bits of the packed word (bits 1-4).
const ENDS: [StackEnd; 9] = [
    StackEnd::Root,
    StackEnd::NoUnwindInfo,
    StackEnd::ModuleNotInTable,
    StackEnd::StackReadFailed,
    StackEnd::UnwindFailed,
    StackEnd::DepthLimit,
    StackEnd::Busy,
    StackEnd::NoStackLeft,
    StackEnd::PythonCut,
];

impl Seen {
    /// Maps the table (a few MB, resident as used). Allocates: call at start.
    pub fn new() -> Seen {
        Seen {
            slots: (0..SLOTS)
                .map(|_| Slot {
                    tag: AtomicU64::new(0),
                    high: AtomicU64::new(0),
                    id: AtomicU32::new(0),
                })
                .collect(),
            by_id: (0..=SLOTS)
                .map(|_| Entry {
                    packed: AtomicU64::new(0),
                    layout: AtomicU64::new(0),
                })
                .collect(),
            arena: Arena::new(ARENA_FRAMES),
            layouts: Arena::new(ARENA_WORDS),
            next_id: AtomicU32::new(0),
            arena_used: AtomicUsize::new(0),
            layouts_used: AtomicUsize::new(0),
        }
    }

    /// The id of the stack with hash `h`, adding `frames` and `layout` (the
    /// words hashed) when it is new. Ids count from 1 in the order stacks were
    /// first seen.
    pub fn id(
        &self,
        h: u128,
        frames: &[Frame],
        layout: &[u64],
        end: StackEnd,
        python_truncated: bool,
    ) -> Result<u32, Miss> {
        let tag = (h as u64).max(1);
        let high = (h >> 64) as u64;
        let start = (tag as usize).wrapping_mul(0x9e37_79b9) % SLOTS;
        for i in 0..PROBES {
            let slot = &self.slots[(start + i) % SLOTS];
            let mut t = slot.tag.load(Ordering::Acquire);
            if t == 0 {
                match slot
                    .tag
                    .compare_exchange(0, tag, Ordering::AcqRel, Ordering::Acquire)
                {
                    Ok(_) => return self.add(slot, high, frames, layout, end, python_truncated),
                    Err(other) => t = other,
                }
            }
            if t != tag {
                continue;
            }
            let id = self.published(slot)?;
            if slot.high.load(Ordering::Relaxed) == high {
                return if id == u32::MAX {
                    Err(Miss::Full)
                } else {
                    Ok(id)
                };
            }
        }
        Err(Miss::Full)
    }

    /// The slot's id once its claimer published it.
    fn published(&self, slot: &Slot) -> Result<u32, Miss> {
        for _ in 0..SPINS {
            let id = slot.id.load(Ordering::Acquire);
            if id != 0 {
                return Ok(id);
            }
            std::hint::spin_loop();
        }
        Err(Miss::Contended)
    }

    fn add(
        &self,
        slot: &Slot,
        high: u64,
        frames: &[Frame],
        layout: &[u64],
        end: StackEnd,
        python_truncated: bool,
    ) -> Result<u32, Miss> {
        slot.high.store(high, Ordering::Relaxed);
        let len = frames.len();
        let start = self.arena_used.fetch_add(len, Ordering::Relaxed);
        if start + len > self.arena.len || len >= 1 << 16 {
            slot.id.store(u32::MAX, Ordering::Release);
            return Err(Miss::Full);
        }
        self.arena.write(start, frames);
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        // Without room for its layout the stack is kept all the same: it is
        // then never expected, only hashed.
        let words = layout.len();
        let at = self.layouts_used.fetch_add(words, Ordering::Relaxed);
        if words > 0 && at + words <= self.layouts.len && words < 1 << 32 {
            self.layouts.write(at, layout);
            self.by_id[id as usize]
                .layout
                .store((at as u64) << 32 | words as u64, Ordering::Relaxed);
        }
        let end = ENDS.iter().position(|e| *e == end).unwrap_or(4) as u64;
        let packed =
            (start as u64) << 32 | (len as u64) << 16 | end << 1 | u64::from(python_truncated);
        // Never 0: `end << 1 | …` may be, so the ready bit is bit 15.
        self.by_id[id as usize]
            .packed
            .store(packed | 1 << 15, Ordering::Release);
        slot.id.store(id, Ordering::Release);
        Ok(id)
    }

    /// Stacks with ids `after + 1 ..` that are published, in id order, up to the
    /// first one still being written.
    #[cfg(test)]
    pub fn published_after<'s>(&'s self, after: u32, f: impl FnMut(u32, Stored<'s>)) -> u32 {
        self.published_from(after, false, f)
    }

    /// [`Seen::published_after`]; with `past_gaps`, past ids still being
    /// written (another thread copying its stack) too: for the table's last
    /// write, after which no id is read again. A call whose record names a
    /// stack published it before the record was made, so a stack still being
    /// copied under an earlier id cannot hold its one back.
    pub fn published_from<'s>(
        &'s self,
        after: u32,
        past_gaps: bool,
        mut f: impl FnMut(u32, Stored<'s>),
    ) -> u32 {
        let mut last = after;
        let next = self.next_id.load(Ordering::Acquire);
        for id in after + 1..=next {
            let Some(e) = self.by_id.get(id as usize) else {
                break;
            };
            let p = e.packed.load(Ordering::Acquire);
            if p == 0 && past_gaps {
                continue;
            }
            if p == 0 {
                break;
            }
            let (start, len) = ((p >> 32) as usize, ((p >> 16) & 0xffff) as usize);
            // SAFETY: published ranges are written once, before the Release
            // store just read with Acquire.
            let frames = unsafe { self.arena.read(start, len) };
            f(
                id,
                Stored {
                    frames,
                    end: ENDS
                        .get(((p >> 1) & 0xf) as usize)
                        .copied()
                        .unwrap_or(StackEnd::UnwindFailed),
                    python_truncated: p & 1 == 1,
                },
            );
            last = id;
        }
        last
    }

    /// The layout that stack `id` was added with, once published; `None`
    /// before, or when it was kept without one.
    #[inline]
    pub fn layout(&self, id: u32) -> Option<&[u64]> {
        let e = self.by_id.get(id as usize)?;
        if e.packed.load(Ordering::Acquire) == 0 {
            return None;
        }
        let l = e.layout.load(Ordering::Relaxed);
        let (start, len) = ((l >> 32) as usize, (l & 0xffff_ffff) as usize);
        // SAFETY: a layout's range is written once, before the Release store
        // of `packed` just read with Acquire (`layout` was stored before it:
        // the Acquire makes that visible too). 0 (not kept) is empty.
        (len > 0).then(|| unsafe { self.layouts.read(start, len) })
    }

    /// Distinct stacks with an id.
    pub fn len(&self) -> u32 {
        self.next_id.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use gpuperf_unwind::ModuleId;

    use super::*;

    fn n(offset: u64) -> Frame {
        Frame::Native {
            module: ModuleId(1),
            offset,
            return_address: true,
        }
    }

    #[test]
    fn same_hash_same_id_new_hash_next_id_and_published_in_order() {
        let s = Seen::new();
        let a = [n(1), n(2)];
        let b = [n(3)];
        assert_eq!(s.id(7, &a, &[], StackEnd::Root, false), Ok(1));
        assert_eq!(
            s.id(9 << 64 | 7, &b, &[], StackEnd::DepthLimit, true),
            Ok(2)
        );
        assert_eq!(s.id(7, &a, &[], StackEnd::Root, false), Ok(1));
        let mut got = Vec::new();
        let last = s.published_after(0, |id, st| {
            got.push((id, st.frames.to_vec(), st.end, st.python_truncated))
        });
        assert_eq!(last, 2);
        assert_eq!(
            got,
            [
                (1, a.to_vec(), StackEnd::Root, false),
                (2, b.to_vec(), StackEnd::DepthLimit, true)
            ]
        );
        assert_eq!(s.published_after(2, |_, _| panic!("nothing new")), 2);
    }

    #[test]
    fn the_last_write_takes_stacks_published_after_one_still_being_copied() {
        let s = Seen::new();
        assert_eq!(s.id(1, &[n(1)], &[], StackEnd::Root, false), Ok(1));
        // Id 2 reserved by a thread still copying its frames.
        s.next_id.fetch_add(1, Ordering::Relaxed);
        assert_eq!(s.id(3, &[n(3)], &[], StackEnd::Root, false), Ok(3));
        let mut got = Vec::new();
        assert_eq!(s.published_from(0, false, |id, _| got.push(id)), 1);
        assert_eq!(got, [1]);
        got.clear();
        assert_eq!(s.published_from(1, true, |id, _| got.push(id)), 3);
        assert_eq!(got, [3]);
    }

    #[test]
    fn every_stack_end_reads_back_as_stored() {
        let s = Seen::new();
        for (i, &end) in ENDS.iter().enumerate() {
            let frames = [n(i as u64)];
            assert!(s.id(i as u128 + 1, &frames, &[], end, false).is_ok());
        }
        let mut got = Vec::new();
        s.published_after(0, |_, st| got.push(st.end));
        assert_eq!(got, ENDS);
    }

    #[test]
    fn threads_adding_the_same_stacks_agree_on_ids() {
        let s = Seen::new();
        let ids: Vec<Vec<u32>> = std::thread::scope(|sc| {
            let hs: Vec<_> = (0..4)
                .map(|_| {
                    sc.spawn(|| {
                        (0..200u64)
                            .map(|i| {
                                // A thread that finds the stack being added by
                                // a descheduled claimer gets `Contended` (by
                                // design, the launch path never waits long):
                                // asking again later must give the same id.
                                for _ in 0..1_000_000 {
                                    let h = u128::from(i) * 0x1_0001;
                                    match s.id(h, &[n(i)], &[i, 7], StackEnd::Root, false) {
                                        Ok(id) => return id,
                                        Err(Miss::Contended) => std::thread::yield_now(),
                                        Err(Miss::Full) => panic!("table full at {i}"),
                                    }
                                }
                                panic!("stack {i} was never published")
                            })
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(ids.windows(2).all(|w| w[0] == w[1]));
        assert_eq!(s.len(), 200);
        for (i, &id) in ids[0].iter().enumerate() {
            assert_eq!(s.layout(id), Some(&[i as u64, 7][..]));
        }
    }

    #[test]
    fn a_stacks_layout_is_read_back_once_published_and_none_when_not_kept() {
        let s = Seen::new();
        assert_eq!(s.layout(1), None);
        assert_eq!(s.id(5, &[n(1)], &[1, 2, 3], StackEnd::Root, false), Ok(1));
        assert_eq!(s.id(6, &[n(2)], &[], StackEnd::Root, false), Ok(2));
        // Found again: the layout given then is not stored.
        assert_eq!(s.id(5, &[n(1)], &[9], StackEnd::Root, false), Ok(1));
        assert_eq!(s.layout(1), Some(&[1, 2, 3][..]));
        assert_eq!(s.layout(2), None);
        assert_eq!(s.layout(3), None);
        // Reserved, not yet published.
        s.next_id.fetch_add(1, Ordering::Relaxed);
        assert_eq!(s.layout(3), None);
        assert_eq!(s.layout(u32::MAX), None);
    }
}
