//! What one thread's last Python frame chain read, so that its next read can
//! take the outer part of the chain from it instead of reading it again.
//!
//! A chain's output is a function of the words the read takes from memory:
//! per link (a frame, or a 3.12+ shim frame on the C stack) its link to its
//! caller, owner and entry flags, code object and instruction pointer, and per
//! code object its type, frame size, first line and line table's address (what
//! the code memo identifies it by). The trail keeps, per link of the last
//! read, those words and the frame produced; the link to the caller as the
//! next outer link's address, which it is in a chain read to its root. When
//! the next read reaches, from its innermost frame outward, a frame at the
//! address of a frame of the trail, the trail's part from there to the root
//! is proven again, outermost first, exactly as a fresh read proves it: each
//! data-stack frame by tiling its chunk from the chunk's first frame (so that
//! it is live, and with it its code object), then every word the last read
//! took there read again and compared. Only when all are unchanged is that part of the last chain taken:
//! nothing is assumed from an address alone. A frame replaced at the same
//! address by another function, the same function called from another line,
//! or a generator resumed from another frame changes a word, and the read
//! goes on by itself.
//!
//! From 3.11 on, while no code object was destroyed since the trail was read
//! (`watch.rs`), a frame that follows one proven in its chunk is proven by its
//! own words alone (code pointer, instruction, link, flags): its code object
//! is then the one read, with the same size, first line and line table, and
//! the frame's size as kept (`Proof::size`) tiles on to the next.
//!
//! Only the outer run of links in the data stack or on the thread's own stack
//! is kept for reuse: frames elsewhere (3.10's heap frames, a generator's
//! frame) are read in full every time.

use super::chunks::{Chunks, Raw};
use super::layout::{FrameKind, FrameWords};
use super::memory::Known;
use super::{MAX_PYTHON_FRAMES, Python};

/// Links a trail holds: each Python frame, and a shim frame per eval loop.
pub(super) const LINKS: usize = 2 * MAX_PYTHON_FRAMES;
/// Slots of the address index.
const INDEX: usize = 256;

/// What a proof compares of one link of a chain ([`Python::prove`]): where
/// it is and the words read there. Half a cache line: the proof of a kept
/// chain reads one line of them per two links (64 bytes a link had cost a
/// line each, a first-level miss per link in callgrind's count).
///
/// The link to its caller is not kept: in a chain read to its root it is the
/// next outer link's address (0 for the outermost), as the read follows it.
#[derive(Clone, Copy, Default)]
pub(crate) struct Proof {
    pub addr: u64,
    /// The code object; 0 for a shim frame.
    pub code: u64,
    /// The instruction word as read, less `code`: a 3.11+ instruction
    /// pointer points into its code object. A link whose word does not fit
    /// is not cheap, so never proven.
    pub instr: u32,
    /// Bytes the frame takes in the data stack, from its code object (0
    /// where it lies elsewhere).
    pub size: u32,
    /// The frame's owner and entry bytes, as one word
    /// ([`Layout::flags_word`](super::layout::Layout::flags_word)).
    pub flags: u16,
    pub shim: bool,
}

const _: () = assert!(size_of::<Proof>() == 32);

/// What the proof compares besides where a code object may have been
/// replaced since the link was read: its line table's address and first
/// line.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Codes {
    pub table: u64,
    pub first_line: u32,
}

/// The frame a link made, and what its trail needs of it.
#[derive(Clone, Copy, Default)]
pub(super) struct Made {
    /// Code id and instruction offset.
    pub id: u32,
    pub instruction: u32,
    /// Frames (not shims) in the chain from the root to this link, this
    /// one included.
    pub frames: u16,
    pub group_end: bool,
    /// In the data stack (the chunk) or on the thread's stack: provable
    /// without a probe.
    pub cheap: bool,
}

/// One link of a chain as a read records it: where it is, the words read
/// there, the frame made.
#[derive(Clone, Copy, Default)]
pub(super) struct Link {
    pub proof: Proof,
    pub codes: Codes,
    pub made: Made,
}

/// A chain's links, outermost first, as a proof reads them: what each
/// compares, and beside it the code words (read only where code objects
/// may have been replaced).
#[derive(Clone, Copy)]
pub(crate) struct Chain<'a> {
    pub links: &'a [Proof],
    pub codes: &'a [Codes],
}

/// The last Python chain of one thread (see the module docs); part of its
/// [`crate::Trail`].
pub(crate) struct FrameTrail {
    /// The last chain's links, outermost first: `links[..len]`, their code
    /// words and frames at the same index in `codes` and `made`.
    pub(super) links: Box<[Proof]>,
    pub(super) codes: Box<[Codes]>,
    pub(super) made: Box<[Made]>,
    pub(super) len: usize,
    /// `links[..reusable]` may be reused: cheap, and the chain reached its
    /// root.
    pub(super) reusable: usize,
    /// The running read's links, innermost first.
    pub(super) fresh: Box<[Link]>,
    /// `depth + 1` of a link by its address's slot (0: none). A stale or
    /// colliding entry only loses a candidate: the address is compared.
    pub(super) index: Box<[u16]>,
    /// Frames the last read took from the read before it.
    pub(super) reused: u32,
    /// The last read reached the chain's root.
    pub(super) complete: bool,
    /// The code watcher's generation the last read started at (0: none;
    /// `watch.rs`): while it holds, every code object the chain names is the
    /// one it was.
    pub(super) codes_at: u64,
}

impl FrameTrail {
    pub(crate) fn new() -> FrameTrail {
        FrameTrail::try_new().expect("memory for a frame trail")
    }

    /// [`FrameTrail::new`], or `None` when memory is short.
    pub(crate) fn try_new() -> Option<FrameTrail> {
        use crate::fallible::slice;
        Some(FrameTrail {
            links: slice(LINKS, Proof::default())?,
            codes: slice(LINKS, Codes::default())?,
            made: slice(LINKS, Made::default())?,
            len: 0,
            reusable: 0,
            fresh: slice(LINKS, Link::default())?,
            // On the heap from the start: `Box::new([..])` builds the array on
            // the (maybe 8 KiB signal) stack first in unoptimized builds.
            index: slice(INDEX, 0)?,
            reused: 0,
            complete: false,
            codes_at: 0,
        })
    }

    /// Records a link of the running read as `fresh[n]`: the new count (one
    /// past the buffer's length once it overflowed).
    #[inline(always)]
    pub(super) fn record(&mut self, n: usize, link: Link) -> usize {
        if let Some(s) = self.fresh.get_mut(n) {
            *s = link;
            n + 1
        } else {
            self.fresh.len() + 1
        }
    }

    /// Forgets the last chain.
    pub(crate) fn clear(&mut self) {
        self.len = 0;
        self.reusable = 0;
        self.complete = false;
    }

    /// The last chain, outermost first, if it reached its root and every
    /// link can be proven without a probe (see [`Python::chain_is`]), and the
    /// code watcher's generation it was read at.
    pub(crate) fn whole(&self) -> Option<(Chain<'_>, u64)> {
        (self.complete && self.reusable == self.len).then(|| (self.chain(), self.codes_at))
    }

    /// The last chain's links.
    pub(super) fn chain(&self) -> Chain<'_> {
        Chain {
            links: &self.links[..self.len],
            codes: &self.codes[..self.len],
        }
    }

    #[inline(always)]
    pub(super) fn slot(addr: u64) -> usize {
        (((addr >> 3) ^ (addr >> 11)) as usize) % INDEX
    }

    /// The depth of the link at `addr` among the first `limit`, if any.
    #[inline(always)]
    pub(super) fn find(&self, addr: u64, limit: usize) -> Option<usize> {
        let d = usize::from(self.index[Self::slot(addr)]).checked_sub(1)?;
        (d < limit && self.links[d].addr == addr && !self.links[d].shim).then_some(d)
    }

    /// The frames of `links[..=depth]`, innermost first, into `out`, which
    /// has room for them (`links[depth].frames`).
    pub(super) fn frames_into(&self, depth: usize, out: &mut [std::mem::MaybeUninit<Raw>]) {
        let raw = |(p, m): (&Proof, &Made)| Raw {
            code: m.id,
            instruction: m.instruction,
            group_end: m.group_end,
            code_ptr: p.code,
            in_stack: 0,
            chunk: 0,
        };
        let links = self.links[..=depth].iter().zip(&self.made[..=depth]);
        if usize::from(self.made[depth].frames) == depth + 1 {
            // No shim frame among them (before 3.12, or one eval loop): each
            // link is a frame.
            for (d, l) in out.iter_mut().zip(links.rev()) {
                d.write(raw(l));
            }
            return;
        }
        for (d, l) in out.iter_mut().zip(links.rev().filter(|(p, _)| !p.shim)) {
            d.write(raw(l));
        }
    }

    /// Makes the trail `links[..keep]` followed by the running read's
    /// `fresh[..nfresh]` (innermost first), reusable up to its first link
    /// that is not cheap, if `complete` (the chain reached its root).
    pub(super) fn commit(&mut self, keep: usize, nfresh: usize, complete: bool) {
        let total = keep + nfresh;
        if total > self.links.len() {
            self.clear();
            return;
        }
        let mut frames = keep.checked_sub(1).map_or(0, |d| self.made[d].frames);
        // The kept links were all reusable (only those are taken).
        let mut reusable = keep;
        let mut cheap_run = true;
        for (i, f) in self.fresh[..nfresh].iter().rev().enumerate() {
            let d = keep + i;
            let Link {
                proof,
                codes,
                mut made,
            } = *f;
            frames += u16::from(!proof.shim);
            made.frames = frames;
            (self.links[d], self.codes[d], self.made[d]) = (proof, codes, made);
            self.index[Self::slot(proof.addr)] = (d + 1) as u16;
            cheap_run &= made.cheap;
            if cheap_run {
                reusable = d + 1;
            }
        }
        self.len = total;
        self.reusable = if complete { reusable } else { 0 };
        self.complete = complete;
    }
}

impl Default for FrameTrail {
    fn default() -> Self {
        FrameTrail::new()
    }
}

/// What the trail's proof reads of a 3.11+ frame and its code object,
/// resolved from the layout once per proof: a field a version lacks is
/// read at an offset every version has and masked off.
struct Words {
    code: u64,
    instr: u64,
    previous: u64,
    /// The word of the owner and entry bytes, and its mask.
    flags: (u64, u16),
    ob_type: u64,
    first_line: u64,
    line_table: u64,
    /// The frame's words: the first `int`, plus the second masked, plus
    /// `specials` (see [`FrameWords`]).
    size: (u64, u64, i64, i64),
}

impl Words {
    fn new(l: &super::layout::Layout, fw: FrameWords) -> Option<Words> {
        Some(Words {
            code: l.frame_code,
            instr: l.frame_instr,
            previous: l.frame_previous,
            flags: l.flags_word()?,
            ob_type: l.ob_type,
            first_line: l.code_firstlineno,
            line_table: l.code_linetable,
            size: match fw {
                FrameWords::Field(o) => (o, o, 0, 0),
                FrameWords::Sum {
                    nlocalsplus,
                    stacksize,
                    specials,
                } => (nlocalsplus, stacksize, -1, specials as i64),
            },
        })
    }

    /// The frame's code object and, if it is one (of type `code_type`), the
    /// bytes the frame takes in the data stack.
    ///
    /// # Safety
    ///
    /// `frame` is a live frame.
    #[inline(always)]
    unsafe fn frame(&self, frame: u64, code_type: u64) -> (u64, Option<u64>) {
        // SAFETY: the caller's.
        let code = unsafe { ((frame + self.code) as *const u64).read_unaligned() };
        if code == 0 || !code.is_multiple_of(8) {
            return (code, None);
        }
        // SAFETY: the code object of a live frame is live; its header first.
        let ty = unsafe { ((code + self.ob_type) as *const u64).read_unaligned() };
        if ty != code_type {
            return (code, None);
        }
        // SAFETY: as above.
        let rd32 = |o: u64| i64::from(unsafe { ((code + o) as *const i32).read_unaligned() });
        let (a, b, mask, specials) = self.size;
        let words = rd32(a) + (rd32(b) & mask) + specials;
        let bytes = u64::try_from(words).ok().and_then(|w| w.checked_mul(8));
        (code, bytes)
    }

    /// The frame's code pointer and instruction word.
    ///
    /// # Safety
    ///
    /// `frame` is a live frame.
    #[inline(always)]
    unsafe fn own(&self, frame: u64) -> (u64, u64) {
        // SAFETY: the caller's.
        unsafe {
            (
                ((frame + self.code) as *const u64).read_unaligned(),
                ((frame + self.instr) as *const u64).read_unaligned(),
            )
        }
    }

    /// The frame's instruction word, and its code object's first line and
    /// line table's address.
    ///
    /// # Safety
    ///
    /// `frame` is a live frame and `code` its code object, checked one.
    #[inline(always)]
    unsafe fn words(&self, frame: u64, code: u64) -> (u64, u32, u64) {
        // SAFETY: the caller's.
        unsafe {
            (
                ((frame + self.instr) as *const u64).read_unaligned(),
                ((code + self.first_line) as *const i32).read_unaligned() as u32,
                ((code + self.line_table) as *const u64).read_unaligned(),
            )
        }
    }

    /// The frame's link to its caller, and its owner and entry bytes (one
    /// word, masked).
    ///
    /// # Safety
    ///
    /// `frame` is readable for the layout's frame size.
    #[inline(always)]
    unsafe fn links(&self, frame: u64) -> (u64, u16) {
        let (at, mask) = self.flags;
        // SAFETY: the caller's; the flags word lies within the frame size.
        unsafe {
            (
                ((frame + self.previous) as *const u64).read_unaligned(),
                ((frame + at) as *const u16).read_unaligned() & mask,
            )
        }
    }
}

/// Where a proof stands: the chunk of the last frame proven (`k`; `last`,
/// the last address a whole frame fits at below its live end, 0 for none),
/// that frame (`cur`, the chunk's cursor, stored when the proof leaves the
/// chunk or ends), where the frame after it starts (`next`: `tile_to`'s step,
/// made as each frame is proven; `u64::MAX` before the first, so that no
/// frame follows then: it would have to lie both there and at 0), and the
/// depth past the last frame proven.
struct Tiling {
    k: usize,
    last: u64,
    cur: u64,
    next: u64,
    done: usize,
}

impl Python {
    /// Proves `chain`'s links `from..=depth` again, outermost first (see the
    /// module docs): `Err` with the depth of the first link found changed.
    /// `chain` was read to its root: each link's caller is the link outward
    /// of it.
    /// `tiled` becomes the depth past the last frame tiled in `chunks`. With
    /// `same_codes` (no code object destroyed since the links were read, see
    /// `watch.rs`), a frame that follows one proven, in the same chunk, is
    /// proven by its own words: its code object is the one read then, and so
    /// its size and the fields its link compares.
    ///
    /// Not inlined: once per capture, and its loop keeps its values in
    /// registers on its own (inlined into `splice`, it spilled them). What
    /// each frame is read and compared on is resolved once, before the loop
    /// ([`Words`]): no layout is looked up per frame.
    #[inline(never)]
    pub(super) fn prove(
        &self,
        chain: Chain<'_>,
        (from, depth): (usize, usize),
        chunks: &mut Chunks,
        mem: &Known,
        tiled: &mut usize,
        same_codes: bool,
    ) -> Result<(), usize> {
        let l = &self.layout;
        let (Some(ds), FrameKind::Interpreter { .. }) = (l.datastack, l.frame_kind) else {
            return Err(from);
        };
        let Some(links) = chain.links.get(from..=depth) else {
            return Err(from);
        };
        let Some(w) = Words::new(l, ds.frame_words) else {
            return Err(from);
        };
        // The link the first one proven here was read to call from.
        let mut outer = from.checked_sub(1).map_or(0, |o| chain.links[o].addr);
        let fs = l.frame_size;
        let mut t = Tiling {
            k: usize::MAX,
            last: 0,
            cur: 0,
            next: u64::MAX,
            done: from,
        };
        let mut i = 0;
        let r = 'links: loop {
            // The links most are: a frame that follows the last one proven,
            // below its chunk's top (live, see `tile_to`), proven by its own
            // words where no code object was destroyed; and a shim frame on
            // the thread's own stack (mapped). No call in this loop, so that
            // its values stay in registers; any other link stops it.
            let (mut next, last, mut cur, mut done) = (t.next, t.last, t.cur, t.done);
            while let Some(link) = links.get(i) {
                let a = link.addr;
                if link.shim {
                    let on_stack =
                        mem.stack.0 <= a && a.checked_add(fs).is_some_and(|e| e <= mem.stack.1);
                    if !on_stack {
                        break;
                    }
                } else {
                    if !(same_codes && a == next && a <= last && u64::from(link.size) >= fs) {
                        break;
                    }
                    (cur, done) = (a, from + i + 1);
                    // SAFETY: a live frame (just proven).
                    let (code, instr) = unsafe { w.own(a) };
                    if code != link.code || instr.wrapping_sub(code) != u64::from(link.instr) {
                        (t.cur, t.done) = (cur, done);
                        break 'links Err(from + i);
                    }
                    next = a + u64::from(link.size);
                }
                // SAFETY: a live frame, or a shim frame on the thread's
                // stack, proven above.
                let (previous, flags) = unsafe { w.links(a) };
                if previous != outer || flags != link.flags {
                    (t.cur, t.done) = (cur, done);
                    break 'links Err(from + i);
                }
                outer = a;
                i += 1;
            }
            (t.next, t.cur, t.done) = (next, cur, done);
            let Some(link) = links.get(i) else {
                break Ok(());
            };
            let (d, a) = (from + i, link.addr);
            if link.shim {
                // In the live data stack: mapped.
                if chunks.find(a, fs).is_none() {
                    break Err(d);
                }
            } else {
                // Out of line (a frame in another chunk, or code objects
                // destroyed).
                let follows = a == t.next && a <= t.last;
                if !self.prove_frame(&w, &mut t, chunks, (d, link, follows), chain.codes.get(d)) {
                    break Err(d);
                }
            }
            // SAFETY: a live frame (proven above), or a shim frame in mapped
            // memory.
            let (previous, flags) = unsafe { w.links(a) };
            if previous != outer || flags != link.flags {
                break Err(d);
            }
            outer = a;
            i += 1;
        };
        if let Some(c) = chunks.cursor.get_mut(t.k) {
            *c = t.cur;
        }
        if t.done > from {
            *tiled = t.done;
        }
        r
    }

    /// Proves the frame (not a shim) at link `d` of a chain as
    /// [`Python::prove`] does, but for the words common to all links (the
    /// link to the caller, the flags): live (tiled in its chunk, from the last
    /// frame proven there), then its code object's words and its own compared
    /// with what the link kept (`codes`: its code words). `follows`: the frame
    /// after the last one proven, below its chunk's top, so live. `t` moves
    /// on.
    #[inline(never)]
    fn prove_frame(
        &self,
        w: &Words,
        t: &mut Tiling,
        chunks: &mut Chunks,
        (d, link, follows): (usize, &Proof, bool),
        codes: Option<&Codes>,
    ) -> bool {
        let fs = self.layout.frame_size;
        let a = link.addr;
        if follows {
            t.cur = a;
        } else {
            if let Some(c) = chunks.cursor.get_mut(t.k) {
                *c = t.cur;
            }
            t.k = usize::MAX;
            // Live only if the chunk's frames, from its first, reach it.
            let Some(c) = chunks.find(a, fs) else {
                return false;
            };
            if self.tile_to(chunks, c, a).is_err() {
                return false;
            }
            let last = chunks.hi[c].saturating_sub(fs);
            (t.k, t.last, t.cur) = (c, last, a);
        }
        t.done = d + 1;
        // SAFETY: a live frame (just proven); its code object is live too (the
        // frame holds a reference to it), and read only once its address is a
        // code object's.
        let (code, size) = unsafe { w.frame(a, self.code_type) };
        let Some(b) = size.filter(|&b| b >= fs) else {
            return false;
        };
        t.next = a + b;
        // SAFETY: as above.
        let (instr, first_line, table) = unsafe { w.words(a, code) };
        // The size too, as the links keep it for the proof of the frames that
        // follow: a code object taking a destroyed one's address could match
        // in the rest.
        code == link.code
            && instr.wrapping_sub(code) == u64::from(link.instr)
            && codes == Some(&Codes { table, first_line })
            && (link.size == 0 || b == u64::from(link.size))
    }

    /// Whether the calling thread's whole Python frame chain is `chain` now
    /// (a chain [`FrameTrail::whole`] gave, outermost first; none for an
    /// empty one): the thread state's current frame is its innermost link,
    /// and every link is proven again as [`Python::prove`] proves a trail's,
    /// outermost first. Then a read would make the same frames. `stack` is
    /// the thread's stack mapping; `codes_at`, the code watcher's generation the
    /// chain was read at ([`FrameTrail::whole`]).
    pub(crate) fn chain_is(&self, stack: (u64, u64), chain: Chain<'_>, codes_at: u64) -> bool {
        if self.disabled.load(std::sync::atomic::Ordering::Relaxed) != 0 {
            return false;
        }
        // SAFETY: the interpreter's lock-free accessor (see the module docs).
        let tstate = unsafe { (self.this_thread_state)() } as u64;
        if tstate == 0 {
            return false;
        }
        let mut mem = Known::with_codes(stack, None);
        let Ok(frame) = self.current_frame(tstate, &mut mem) else {
            return false;
        };
        let Some(depth) = chain.links.len().checked_sub(1) else {
            return frame == 0;
        };
        if frame != chain.links[depth].addr {
            return false;
        }
        let same_codes = codes_at != 0 && self.code_generation(tstate) == codes_at;
        let mut chunks = self.data_stack(tstate);
        let mut tiled = 0;
        self.prove(chain, (0, depth), &mut chunks, &mem, &mut tiled, same_codes)
            .is_ok()
    }

    /// Sets the chunks' tiling cursors for a read that keeps `links[..keep]`
    /// (each frame there was tiled in this read, `links[keep - 1]` a frame)
    /// and tiles the frames inward of them next: the chunk of `links[keep -
    /// 1]` from that frame, the newer chunks (which hold only frames inward of
    /// it: a caller is pushed before its callee) from their first frame. Older
    /// chunks keep their cursors, each a frame tiled in this read. Every
    /// cursor is where a tiling walk may start: a frame proven live.
    pub(super) fn rewind(&self, t: &FrameTrail, keep: usize, chunks: &mut Chunks) {
        let Some(last) = keep.checked_sub(1).and_then(|d| t.links.get(d)) else {
            chunks.cursor = chunks.lo;
            return;
        };
        let Some(k) = chunks.find(last.addr, self.layout.frame_size) else {
            chunks.cursor = chunks.lo;
            return;
        };
        chunks.cursor[..k].copy_from_slice(&chunks.lo[..k]);
        chunks.cursor[k] = last.addr;
    }

    /// A word of the frame at `frame`.
    #[inline(always)]
    pub(super) fn frame_word(&self, frame: u64, off: u64) -> u64 {
        // SAFETY: callers pass a frame checked readable (live data stack, the
        // thread's stack, or probed in this capture).
        unsafe { ((frame + off) as *const u64).read_unaligned() }
    }

    /// The owner and entry bytes of the frame at `frame`, as the proof
    /// compares them ([`Layout::flags_word`](super::layout::Layout::flags_word);
    /// 0 where they lie apart, whose frames the proof never takes).
    #[inline(always)]
    pub(super) fn frame_flags(&self, frame: u64) -> u16 {
        self.layout.flags_word().map_or(0, |(at, mask)| {
            // SAFETY: as in `frame_word`; the word lies within the frame size.
            unsafe { ((frame + at) as *const u16).read_unaligned() & mask }
        })
    }

    /// A byte of the frame at `frame` (0 for a field this version lacks).
    #[inline(always)]
    pub(super) fn frame_byte(&self, frame: u64, off: Option<u64>) -> u8 {
        // SAFETY: as in `frame_word`.
        off.map_or(0, |o| unsafe { *((frame + o) as *const u8) })
    }

    /// The frame's instruction word: 3.10's index, or the pointer (3.11+).
    #[inline(always)]
    pub(super) fn instr_word(&self, frame: u64) -> u64 {
        match self.layout.frame_kind {
            // SAFETY: as in `frame_word`.
            FrameKind::Object => u64::from(unsafe {
                ((frame + self.layout.frame_instr) as *const i32).read_unaligned()
            } as u32),
            FrameKind::Interpreter { .. } => self.frame_word(frame, self.layout.frame_instr),
        }
    }
}
