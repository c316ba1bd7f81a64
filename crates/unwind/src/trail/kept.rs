//! Whole native walks one thread keeps under its caller's tags (in the
//! injection library, stack ids), so that a capture expected to repeat one of
//! them proves it unchanged and takes its frames without walking; and the
//! capture made of each, taken whole when the thread's Python frame chain is
//! proven the same too.
//!
//! A walk is a pure function of its start state (the frame's address, the
//! stack pointer, and the frame pointer where some step depends on it), the
//! module tables and the stack words it reads (see [`crate::trail`]). A kept
//! walk is that start state, every word its steps read that its frames depend
//! on (a saved rbp that no later step uses is not one), each stack scan's
//! reads, and the frames it found. A capture that expects tag `T` and starts
//! in `T`'s state reads each kept word again and takes `T`'s frames only when
//! every one holds the same value now (a scan's word, one its scan treats
//! alike): then a walk would read the same words in the same order and find
//! the same frames. Nothing is assumed from an address or the expectation: a
//! wrong one costs the reads up to the first changed word (eight at a time),
//! and the capture walks as before. The capture's Python frame chain is then
//! proven as the trail's is (`Python::chain_is`), and the merged frames kept
//! with the walk taken, without reading or merging.
//!
//! Consecutive launches of a training step come from different operators, so
//! the last walk (the [`crate::Trail`]) shares only the outer frames with the
//! next; the stack expected next (in inject: one of the last two that
//! followed the last eight, else the one that followed the last two; right
//! 99.8 % of the time in a GPT-2 training loop) was walked a step earlier, and proving it reads its words in order, where walking its inner
//! frames again costs rule and module look-ups scattered over the tables.
//!
//! Kept only: walks that started at the capture's first frame, reached the
//! root through plain steps (CFA rules, scans whose every read was kept, the
//! root), with the tables unchanged since; and taken only while no module
//! was unloaded since the tables were read (the loader is `stable`).
//!
//! Each walk keeps its own words and links, in order, though a thread's
//! stacks share most of them (their outer frames): proving one streams them
//! in the order it reads the stack. Stored once each in a pool and named by
//! index, they missed the caches less than half as often (callgrind) but
//! took longer to prove (perf, a GPT-2 decode loop: the indirection makes
//! each word's load wait on its name's). Prefetching them when the capture
//! starts shortened the proof and lengthened what ran meanwhile as much.
//!
//! Bounded: a stack kept again is rewritten in place when its walk has the
//! same shape; when a buffer is full, every kept walk is dropped and keeping
//! starts again.

use super::{ScanReads, Step};
use crate::frame::{Captured, Frame};
use crate::python::{Chain, Codes, Proof};

/// Stack words kept, for all walks (16 bytes each).
const READS: usize = 24 * 1024;
/// Frames kept, for all walks and captures.
const FRAMES: usize = 32 * 1024;
/// Scans kept, for all walks (about 800 bytes each).
const SCANS: usize = 64;
/// Python frame chain links kept, for all captures.
const LINKS: usize = 12 * 1024;
/// Walks kept.
const WALKS: usize = 1024;
/// Slots of the walks' index: twice as many, a power of two (a probe masks
/// its slot number, where a division would cost tens of cycles).
const INDEX: usize = 2 * WALKS;
const _: () = assert!(INDEX.is_power_of_two());

/// A walk to keep: `head` (the steps of the frames it skipped, plain, without
/// scans) then `steps` (a trail's, every step plain, to the root), the scans
/// it made (`scans`, by crossing number) and their number.
#[derive(Clone, Copy)]
pub(crate) struct Walked<'a> {
    pub head: &'a [Step],
    pub steps: &'a [Step],
    pub scans: &'a [ScanReads],
    pub recovered: u32,
}

/// What a capture made of a kept walk besides it, for a later capture to
/// prove and take whole.
#[derive(Clone, Copy)]
pub(crate) struct Whole<'a> {
    /// The thread's Python frame chain ([`crate::python::FrameTrail::whole`]);
    /// `None` where the unwinder reads no Python frames.
    pub chain: Option<Chain<'a>>,
    /// The code watcher's generation the chain was read at (0: none).
    pub codes_at: u64,
    /// The capture's frames: to keep, only where Python frames were spliced
    /// into the walk's; as taken ([`Kept::whole_taken`]), always.
    pub frames: Option<&'a [Frame]>,
    /// How it ended, its length and its Python frames.
    pub captured: Captured,
}

/// Where one kept walk starts, and where its words and frames lie.
#[derive(Clone, Copy)]
struct Walk {
    tag: u32,
    /// The tables' ids and rule generation it was walked with.
    tables: (u64, u64, u64),
    /// The first step's state: `memo_key` of its address, sp, and rbp when
    /// the walk depends on it.
    key: u64,
    sp: u64,
    bp: Option<u64>,
    /// Frames it skipped (their steps are the first it read).
    skip: u32,
    /// Crossings of code without unwind info it made.
    recovered: u32,
    /// `[lowest, highest + 8)` of the addresses its steps read.
    span: (u64, u64),
    /// Where its parts lie: the chain and final frames only with `whole`.
    at: At,
    /// How its capture ended, its length and Python frames, if kept whole.
    whole: Option<Captured>,
    /// The generation its chain was read at ([`Whole::codes_at`]).
    codes_at: u64,
}

/// How many words, frames, scans and links a kept walk has.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Shape {
    reads: usize,
    frames: usize,
    scans: usize,
    chain: Option<usize>,
    finals: Option<usize>,
}

/// Where a kept walk's parts lie in the buffers (`chain`: `None` where the
/// unwinder reads no Python frames).
#[derive(Clone, Copy)]
struct At {
    reads: (u32, u32),
    frames: (u32, u32),
    scans: (u32, u32),
    chain: Option<(u32, u32)>,
    finals: Option<(u32, u32)>,
}

impl At {
    fn shape(&self) -> Shape {
        let len = |(a, b): (u32, u32)| (b - a) as usize;
        Shape {
            reads: len(self.reads),
            frames: len(self.frames),
            scans: len(self.scans),
            chain: self.chain.map(len),
            finals: self.finals.map(len),
        }
    }
}

/// Whether buffers that hold `used` (words, frames, scans, links) have room
/// for a walk of `shape`.
fn room(shape: Shape, [reads, frames, scans, links]: [usize; 4]) -> bool {
    reads + shape.reads <= READS
        && frames + shape.frames + shape.finals.unwrap_or(0) <= FRAMES
        && scans + shape.scans <= SCANS
        && links + shape.chain.unwrap_or(0) <= LINKS
}

/// The walks one thread keeps (see the module docs); part of its
/// [`crate::Trail`]. Its buffers are allocated at the first walk kept.
#[derive(Default)]
pub(crate) struct Kept {
    /// `walks` index + 1 by the tag's slot (0: none); open addressing.
    index: Box<[u32]>,
    walks: Vec<Walk>,
    reads: Vec<(u64, u64)>,
    frames: Vec<Frame>,
    scans: Vec<ScanReads>,
    links: Vec<Proof>,
    /// The code words of `links`, at the same index.
    codes: Vec<Codes>,
    /// The walk the last `take` took.
    taken_at: Option<usize>,
    /// The tags the next capture expects, tried in order (0: none).
    pub(crate) expect: [u32; 2],
    /// The last capture took the walk kept under `expect`.
    pub(crate) taken: bool,
    /// What `take` found for a capture that tried it on its caller's stack
    /// and goes on on the scratch stack (`LocalUnwinder::whole_then`): read
    /// there once, instead of taking again.
    pub(crate) tried: Option<Option<u32>>,
    /// A walk was not kept: its buffers could not be allocated.
    short_of_memory: bool,
}

/// A walk's state at its first frame, as the walk loop starts it.
pub(crate) struct Start {
    pub key: u64,
    pub sp: u64,
    pub bp: u64,
    /// Frames the capture skips.
    pub skip: usize,
}

impl Kept {
    /// The index slot where a probe for `tag` starts.
    fn slot(tag: u32) -> usize {
        (tag.wrapping_mul(0x9e37_79b1) >> (32 - INDEX.trailing_zeros())) as usize
    }

    /// The index of the walk kept under `tag`.
    fn find(&self, tag: u32) -> Option<usize> {
        if self.index.len() != INDEX || tag == 0 {
            return None;
        }
        let mut s = Self::slot(tag);
        for _ in 0..INDEX {
            let w = usize::try_from(self.index[s]).ok()?.checked_sub(1)?;
            if self.walks.get(w)?.tag == tag {
                return Some(w);
            }
            s = (s + 1) & (INDEX - 1);
        }
        None
    }

    /// Room for a walk of `shape` at the ends of the buffers (which have it).
    fn append(&mut self, shape: Shape) -> At {
        fn grow<T: Clone + Default>(v: &mut Vec<T>, n: usize) -> (u32, u32) {
            let a = v.len();
            v.resize(a + n, T::default());
            (a as u32, v.len() as u32)
        }
        At {
            reads: grow(&mut self.reads, shape.reads),
            frames: grow(&mut self.frames, shape.frames),
            scans: grow(&mut self.scans, shape.scans),
            chain: shape.chain.map(|n| {
                grow(&mut self.codes, n);
                grow(&mut self.links, n)
            }),
            finals: shape.finals.map(|n| grow(&mut self.frames, n)),
        }
    }

    /// Allocates the buffers ([`Kept::bytes`]), on the application's thread
    /// inside its CUDA call: where memory is short (an address space full,
    /// a limit reached) that must fail here, never abort the program. `false`
    /// when it did; nothing is left allocated then.
    fn allocate(&mut self) -> bool {
        use crate::fallible::{slice, vec};
        let (
            Some(index),
            Some(walks),
            Some(reads),
            Some(frames),
            Some(scans),
            Some(links),
            Some(codes),
        ) = (
            slice(INDEX, 0),
            vec(WALKS),
            vec(READS),
            vec(FRAMES),
            vec(SCANS),
            vec(LINKS),
            vec(LINKS),
        )
        else {
            return false;
        };
        self.index = index;
        (self.walks, self.reads, self.frames, self.scans) = (walks, reads, frames, scans);
        (self.links, self.codes) = (links, codes);
        true
    }

    /// Whether a walk was not kept since the last call because its buffers
    /// could not be allocated.
    pub(crate) fn take_short_of_memory(&mut self) -> bool {
        std::mem::take(&mut self.short_of_memory)
    }

    /// Drops every kept walk (the buffers stay allocated).
    fn clear(&mut self) {
        self.index.fill(0);
        self.walks.clear();
        self.reads.clear();
        self.frames.clear();
        self.scans.clear();
        self.links.clear();
        self.codes.clear();
    }

    /// Drops every kept walk.
    pub(crate) fn forget(&mut self) {
        self.clear();
        self.taken_at = None;
    }

    /// Keeps `walk` under `tag`, walked with `tables`, and what its capture
    /// made of it besides (`whole`), replacing what `tag` had. `false` when
    /// it cannot be proven later (a scan whose reads were not all kept), or
    /// the buffers cannot be allocated, and is not kept.
    pub(crate) fn keep(
        &mut self,
        tag: u32,
        tables: (u64, u64, u64),
        walk: Walked<'_>,
        whole: Option<Whole<'_>>,
    ) -> bool {
        let Walked {
            head,
            steps,
            scans,
            recovered,
        } = walk;
        let Some(first) = head.first().or(steps.first()) else {
            return false;
        };
        if tag == 0
            || steps.is_empty()
            || steps.iter().any(|s| {
                s.scanned
                    && !scans
                        .get(s.recovered as usize)
                        .is_some_and(ScanReads::is_whole)
            })
        {
            return false;
        }
        // By index: an iterator of each step with the one after it cost more
        // than the copies.
        let n = head.len() + steps.len();
        let step = |i: usize| head.get(i).or_else(|| steps.get(i - head.len()));
        let needed = |i: usize| step(i).map_or(&[][..], |s| s.needed_reads(step(i + 1)));
        let chain = whole.and_then(|w| w.chain);
        let finals = whole.and_then(|w| w.frames);
        let shape = Shape {
            reads: (0..n).map(|i| needed(i).len()).sum(),
            frames: steps.len(),
            scans: steps.iter().filter(|s| s.scanned).count(),
            chain: chain.map(|c| c.links.len()),
            finals: finals.map(<[Frame]>::len),
        };
        if !room(shape, [0; 4]) {
            return false;
        }
        if self.index.is_empty() && !self.allocate() {
            self.short_of_memory = true;
            return false;
        }
        // In place of the walk kept under `tag` when it has the same shape (a
        // stack kept again, as after a wrong expectation), so that keeping
        // the same stacks over and over does not fill the buffers; else at
        // their ends, all dropped first when they are full.
        let mut old = self.find(tag);
        let at = match old
            .and_then(|w| self.walks.get(w))
            .filter(|w| w.at.shape() == shape)
        {
            Some(w) => w.at,
            None => {
                let used = [
                    self.reads.len(),
                    self.frames.len(),
                    self.scans.len(),
                    self.links.len(),
                ];
                if !room(shape, used) || self.walks.len() >= WALKS {
                    self.clear();
                    old = None;
                }
                self.append(shape)
            }
        };
        let (mut lo, mut hi) = (u64::MAX, 0);
        let mut r = at.reads.0 as usize;
        for i in 0..n {
            for &(a, v) in needed(i) {
                (lo, hi) = (lo.min(a), hi.max(a));
                self.reads[r] = (a, v);
                r += 1;
            }
        }
        let f = at.frames.0 as usize;
        for (d, s) in self.frames[f..f + steps.len()].iter_mut().zip(steps) {
            *d = s.frame;
        }
        let kept_scans = steps
            .iter()
            .filter(|s| s.scanned)
            .filter_map(|s| scans.get(s.recovered as usize));
        let k = at.scans.0 as usize;
        for (d, s) in self.scans[k..k + shape.scans].iter_mut().zip(kept_scans) {
            *d = *s;
        }
        let range = |(a, b): (u32, u32)| a as usize..b as usize;
        if let (Some(src), Some(r)) = (chain, at.chain) {
            self.links[range(r)].copy_from_slice(src.links);
            self.codes[range(r)].copy_from_slice(src.codes);
        }
        if let (Some(src), Some(r)) = (finals, at.finals) {
            self.frames[range(r)].copy_from_slice(src);
        }
        let walk = Walk {
            tag,
            tables,
            key: first.key,
            sp: first.sp,
            bp: first.bp_matters.then_some(first.bp),
            skip: head.len() as u32,
            recovered,
            span: (lo, hi.saturating_add(8)),
            at,
            whole: whole.map(|w| w.captured),
            codes_at: whole.map_or(0, |w| w.codes_at),
        };
        match old {
            Some(w) => self.walks[w] = walk,
            None => {
                let mut s = Self::slot(tag);
                while self.index[s] != 0 {
                    s = (s + 1) & (INDEX - 1);
                }
                self.walks.push(walk);
                self.index[s] = self.walks.len() as u32;
            }
        }
        true
    }

    /// Whether the walk kept under one of `expect` (tried in order) is the
    /// capture's: it starts in its state with the same `tables`, and every
    /// word it read holds the same value now (its steps' words all lie in
    /// `stack`, the part of the thread's stack the capture's `read` reads; a
    /// scan's, one its scan treats alike, by `after_call`). Then
    /// [`Kept::taken`] has its frames, [`Kept::taken_tag`] its tag, and this
    /// its crossings of code without unwind info. Nothing is copied: the
    /// whole capture kept with it may be taken instead.
    #[inline(never)]
    pub(crate) fn take<F>(
        &mut self,
        tables: (u64, u64, u64),
        start: Start,
        stack: (u64, u64),
        read: &mut F,
        after_call: &mut dyn FnMut(u64) -> bool,
    ) -> Option<u32>
    where
        F: FnMut(u64) -> Result<u64, ()>,
    {
        self.taken_at = None;
        let range = |(a, b): (u32, u32)| a as usize..b as usize;
        // The second only when the first is not the capture's: a wrong first
        // costs its reads up to the first changed word.
        'tags: for tag in self.expect {
            let Some(at) = self.find(tag) else {
                continue;
            };
            let w = self.walks.get(at)?;
            if w.tables != tables
                || w.key != start.key
                || w.sp != start.sp
                || w.skip as usize != start.skip
                || w.bp.is_some_and(|bp| bp != start.bp)
            {
                continue;
            }
            // Innermost first: a different stack differs there.
            let reads = self.reads.get(range(w.at.reads))?;
            if !reads.is_empty() {
                if w.span.0 < stack.0 || w.span.1 > stack.1 {
                    continue;
                }
                // SAFETY: every address read lies in `stack`, inside the
                // thread's own stack mapping (checked just above), which
                // stays mapped while the thread runs.
                let word = |a: u64| unsafe { (a as *const u64).read_unaligned() };
                // Eight words at a time, without a branch per word: once
                // expected, a walk rarely differs, and then within eight.
                // Chunks of exactly eight, so that the compiler unrolls each
                // into loads whose differences stay in registers (over
                // `chunks(8)` it kept them on the stack, each word's `or`
                // waiting on the last one's store).
                let differs = |c: &[(u64, u64)]| c.iter().fold(0, |d, &(a, v)| d | (word(a) ^ v));
                let (eights, rest) = reads.as_chunks::<8>();
                for chunk in eights {
                    if differs(chunk) != 0 {
                        continue 'tags;
                    }
                }
                if differs(rest) != 0 {
                    continue 'tags;
                }
            }
            let scans = self.scans.get(range(w.at.scans))?;
            if !scans.iter().all(|s| s.unchanged(read, after_call)) {
                continue;
            }
            self.taken_at = Some(at);
            return Some(w.recovered);
        }
        None
    }

    /// The tag of the walk the last [`Kept::take`] took.
    pub(crate) fn taken_tag(&self) -> Option<u32> {
        Some(self.walks.get(self.taken_at?)?.tag)
    }

    /// The frames of the walk the last [`Kept::take`] took.
    pub(crate) fn taken(&self) -> Option<&[Frame]> {
        let (a, b) = self.walks.get(self.taken_at?)?.at.frames;
        self.frames.get(a as usize..b as usize)
    }

    /// What the capture of the walk the last [`Kept::take`] took made of it
    /// besides, if kept.
    pub(crate) fn whole_taken(&self) -> Option<Whole<'_>> {
        let w = self.walks.get(self.taken_at?)?;
        let captured = w.whole?;
        let range = |(a, b): (u32, u32)| a as usize..b as usize;
        Some(Whole {
            chain: match w.at.chain {
                Some(r) => Some(Chain {
                    links: self.links.get(range(r))?,
                    codes: self.codes.get(range(r))?,
                }),
                None => None,
            },
            codes_at: w.codes_at,
            frames: Some(self.whole_frames()?),
            captured,
        })
    }

    /// The frames of the whole capture kept with the walk the last
    /// [`Kept::take`] took: its merged frames, or the walk's where no Python
    /// frames were spliced in.
    pub(crate) fn whole_frames(&self) -> Option<&[Frame]> {
        let w = self.walks.get(self.taken_at?)?;
        w.whole?;
        let (a, b) = w.at.finals.unwrap_or(w.at.frames);
        self.frames.get(a as usize..b as usize)
    }

    /// Bytes the kept walks' buffers take (their capacity).
    pub(crate) fn bytes(&self) -> usize {
        use std::mem::size_of;
        self.index.len() * size_of::<u32>()
            + self.walks.capacity() * size_of::<Walk>()
            + self.reads.capacity() * size_of::<(u64, u64)>()
            + self.frames.capacity() * size_of::<Frame>()
            + self.scans.capacity() * size_of::<ScanReads>()
            + self.links.capacity() * size_of::<Proof>()
            + self.codes.capacity() * size_of::<Codes>()
    }
}

#[cfg(test)]
#[allow(non_snake_case)]
mod tests {
    use super::*;
    use crate::frame::ModuleId;

    const TABLES: (u64, u64, u64) = (1, 0, 1);

    fn frame(offset: u64) -> Frame {
        Frame::Native {
            module: ModuleId(0),
            offset,
            return_address: true,
        }
    }

    /// A two-frame walk over `stack`: the first frame saves rbp at word 0
    /// (its return address at word 1); the second reads its return address
    /// (0, the root) at word 2 and, when `bp_used`, depends on rbp.
    fn walk_over(stack: &[u64], bp_used: bool) -> [Step; 2] {
        let at = |i: usize| stack.as_ptr() as u64 + 8 * i as u64;
        [
            Step {
                key: 0x1101,
                sp: at(0),
                frame: frame(0x100),
                reads: [(at(1), stack[1]), (at(0), stack[0])],
                nreads: 2,
                sets_bp: true,
                plain: true,
                ..Step::default()
            },
            Step {
                key: 0x2201,
                sp: at(2),
                frame: frame(0x200),
                reads: [(at(2), stack[2]), (0, 0)],
                nreads: 1,
                uses_bp: bp_used,
                bp_matters: bp_used,
                plain: true,
                ..Step::default()
            },
        ]
    }

    /// `steps` as a walk that skipped no frame and made no scan.
    fn walked(steps: &[Step]) -> Walked<'_> {
        Walked {
            head: &[],
            steps,
            scans: &[],
            recovered: 0,
        }
    }

    /// The tag of the walk taken expecting `tags`.
    fn take_either(kept: &mut Kept, stack: &[u64], tags: [u32; 2]) -> Option<u32> {
        take_expecting(kept, stack, tags)?;
        kept.taken_tag()
    }

    fn take(kept: &mut Kept, stack: &[u64], tag: u32) -> Option<Vec<Frame>> {
        take_expecting(kept, stack, [tag, 0])
    }

    fn take_expecting(kept: &mut Kept, stack: &[u64], tags: [u32; 2]) -> Option<Vec<Frame>> {
        let base = stack.as_ptr() as u64;
        kept.expect = tags;
        let start = Start {
            key: 0x1101,
            sp: base,
            bp: 0,
            skip: 0,
        };
        let mut read = |_| -> Result<u64, ()> { unreachable!("no scan") };
        kept.take(
            TABLES,
            start,
            (base, base + 8 * stack.len() as u64),
            &mut read,
            &mut |_| false,
        )?;
        kept.taken().map(<[Frame]>::to_vec)
    }

    #[test]
    fn kept_walk__taken_while_every_word_it_depends_on_holds() {
        let mut stack = vec![0x7777, 0x1234, 0, 0];
        let mut kept = Kept::default();
        for (tag, bp_used) in [(1, false), (2, true)] {
            let steps = walk_over(&stack, bp_used);
            assert!(kept.keep(tag, TABLES, walked(&steps), None));
        }
        let frames = vec![frame(0x100), frame(0x200)];
        assert_eq!(take(&mut kept, &stack, 1), Some(frames.clone()));
        assert_eq!(take(&mut kept, &stack, 2), Some(frames.clone()));
        assert_eq!(take(&mut kept, &stack, 3), None, "nothing kept under 3");
        // The second tag expected, when the first is not the capture's.
        assert_eq!(take_either(&mut kept, &stack, [3, 2]), Some(2));
        assert_eq!(take_either(&mut kept, &stack, [1, 2]), Some(1));
        assert_eq!(take_either(&mut kept, &stack, [0, 1]), Some(1));
        // A saved rbp that changed: only the walk that depends on it is not
        // taken.
        stack[0] = 0x8888;
        assert_eq!(take(&mut kept, &stack, 1), Some(frames.clone()));
        assert_eq!(take(&mut kept, &stack, 2), None);
        assert_eq!(take_either(&mut kept, &stack, [2, 1]), Some(1));
        stack[0] = 0x7777;
        // A return address, or the root's word, that changed: neither is.
        for i in [1, 2] {
            stack[i] ^= 0x10;
            assert_eq!(take(&mut kept, &stack, 1), None, "word {i}");
            assert_eq!(take(&mut kept, &stack, 2), None, "word {i}");
            stack[i] ^= 0x10;
        }
        assert_eq!(take(&mut kept, &stack, 2), Some(frames));
    }

    #[test]
    fn kept_walks__each_found_under_its_tag_with_the_index_full_to_half() {
        let stack = vec![0x7777, 0x1234, 0, 0];
        let steps = walk_over(&stack, false);
        let mut kept = Kept::default();
        // Tags whose probes collide and wrap around the index's end.
        let tags: Vec<u32> = (1..=WALKS as u32 / 2)
            .chain((1..=WALKS as u32 / 2).map(|t| t << 21))
            .collect();
        for &tag in &tags {
            assert!(kept.keep(tag, TABLES, walked(&steps), None), "{tag}");
        }
        for &tag in &tags {
            let w = kept
                .find(tag)
                .unwrap_or_else(|| panic!("{tag:#x} not found"));
            assert_eq!(kept.walks[w].tag, tag);
            assert_eq!(take(&mut kept, &stack, tag).map(|f| f.len()), Some(2));
        }
        for tag in [0, WALKS as u32 + 1, 3 << 29] {
            assert_eq!(kept.find(tag), None, "{tag:#x}");
        }
    }

    #[test]
    fn kept_walk__not_taken_from_another_start_other_tables_or_outside_the_stack() {
        let stack = vec![0x7777, 0x1234, 0, 0];
        let steps = walk_over(&stack, false);
        let mut kept = Kept::default();
        assert!(kept.keep(1, TABLES, walked(&steps), None));
        kept.expect = [1, 0];
        let base = stack.as_ptr() as u64;
        let bounds = (base, base + 32);
        let start = |key, sp, skip| Start {
            key,
            sp,
            bp: 0,
            skip,
        };
        let mut read = |_| -> Result<u64, ()> { Err(()) };
        let mut try_take = |tables, start, bounds| {
            kept.take(tables, start, bounds, &mut read, &mut |_| false)?;
            kept.taken().map(<[Frame]>::len)
        };
        assert_eq!(try_take(TABLES, start(0x1101, base, 0), bounds), Some(2));
        assert_eq!(
            try_take((1, 0, 2), start(0x1101, base, 0), bounds),
            None,
            "tables"
        );
        assert_eq!(
            try_take(TABLES, start(0x1111, base, 0), bounds),
            None,
            "address"
        );
        assert_eq!(
            try_take(TABLES, start(0x1101, base + 8, 0), bounds),
            None,
            "sp"
        );
        assert_eq!(
            try_take(TABLES, start(0x1101, base, 1), bounds),
            None,
            "skip"
        );
        // A word it read outside the part of the stack the capture may read
        // (the root's, word 2; the saved rbp at word 0 is none it needs).
        let from_word_1 = (base + 8, base + 32);
        assert_eq!(
            try_take(TABLES, start(0x1101, base, 0), from_word_1),
            Some(2)
        );
        let to_word_1 = (base, base + 16);
        assert_eq!(try_take(TABLES, start(0x1101, base, 0), to_word_1), None);
    }
}
