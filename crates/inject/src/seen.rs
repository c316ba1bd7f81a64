//! The distinct stacks of the process: a lock-free table that a callback can
//! read and add to without `malloc` or a lock, even in a signal handler that
//! interrupted either.
//!
//! ```text
//!  capture ─▶ 128-bit hash ─▶ slot (open addressing, claimed by CAS on the
//!            low 64 bits) ─hit─▶ id
//!                         └─new─▶ frames copied into the arena, id = next id,
//!                                 published (Release) ─▶ flush reads ids in order
//! ```
//!
//! Fixed sizes, mapped once at start and resident only as used: a stack that
//! finds the table or the frame arena full gets no id and is counted.

use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

use gpuperf_unwind::{Frame, StackEnd};

/// Distinct stacks held.
const SLOTS: usize = 1 << 16;
/// Frames of all distinct stacks together (24 bytes each).
const ARENA_FRAMES: usize = 1 << 22;
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
    arena: Arena,
    next_id: AtomicU32,
    arena_used: AtomicUsize,
}

/// Frames of stored stacks: each range is written once, by the thread that
/// reserved it, before its stack is published.
struct Arena {
    base: *mut UnsafeCell<MaybeUninit<Frame>>,
    len: usize,
}

// SAFETY: see `Arena`: a range is written by one thread before it is published
// (Release) and only read after (Acquire).
unsafe impl Send for Arena {}
// SAFETY: as for `Send`.
unsafe impl Sync for Arena {}

impl Arena {
    fn new() -> Arena {
        let bytes = ARENA_FRAMES * size_of::<Frame>();
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
            len: ARENA_FRAMES,
        }
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        if !self.base.is_null() {
            // SAFETY: the mapping made in `new`; `&mut self`: no reader is left.
            unsafe { libc::munmap(self.base.cast(), self.len * size_of::<Frame>()) };
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
                })
                .collect(),
            arena: Arena::new(),
            next_id: AtomicU32::new(0),
            arena_used: AtomicUsize::new(0),
        }
    }

    /// The id of the stack with hash `h`, adding `frames` when it is new.
    /// Ids count from 1 in the order stacks were first seen.
    pub fn id(
        &self,
        h: u128,
        frames: &[Frame],
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
                    Ok(_) => return self.add(slot, high, frames, end, python_truncated),
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
        for (i, f) in frames.iter().enumerate() {
            // SAFETY: `start..start + len` was reserved by this thread alone and
            // lies inside the mapping.
            unsafe {
                (*self.arena.base.add(start + i))
                    .get()
                    .write(MaybeUninit::new(*f))
            };
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
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
            let frames = unsafe {
                std::slice::from_raw_parts(self.arena.base.add(start).cast::<Frame>(), len)
            };
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
        assert_eq!(s.id(7, &a, StackEnd::Root, false), Ok(1));
        assert_eq!(s.id(9 << 64 | 7, &b, StackEnd::DepthLimit, true), Ok(2));
        assert_eq!(s.id(7, &a, StackEnd::Root, false), Ok(1));
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
        assert_eq!(s.id(1, &[n(1)], StackEnd::Root, false), Ok(1));
        // Id 2 reserved by a thread still copying its frames.
        s.next_id.fetch_add(1, Ordering::Relaxed);
        assert_eq!(s.id(3, &[n(3)], StackEnd::Root, false), Ok(3));
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
            assert!(s.id(i as u128 + 1, &frames, end, false).is_ok());
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
                                    match s.id(h, &[n(i)], StackEnd::Root, false) {
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
    }
}
