//! What one thread's last native walk read, so that its next walk can take the
//! outer part of the stack from it instead of unwinding it again.
//!
//! The walk is a pure function of its state at a frame (the frame's address,
//! the stack pointer, the frame pointer, the crossings of code without unwind
//! info made so far), the module tables, and the stack words it reads from
//! there on. A trail keeps, per frame of the last walk, that state, the frame
//! found, and the words (address, value) its step read. When the next walk
//! reaches a frame in the same state as a frame of the trail, with the same
//! tables, and every word the trail's steps read from that frame outward holds
//! the same value now (each is read again), the rest of the walk is the
//! trail's rest, frame for frame: nothing is assumed from the stack pointer or
//! a return address alone. A frame replaced at the same address, or a function
//! that returned and another one called into the same slot, changes a word the
//! trail read, and the walk goes on by itself.
//!
//! A crossing of code without unwind info (a stack scan, which reads many
//! words, some of them the callee's changing locals) is checked by running the
//! scan again from the kept state: it must find the caller the trail found.
//! Signal frames, framehop's own rules and truncated stacks are not kept for
//! reuse: a walk that meets them walks on by itself. Each scan's reads are
//! kept too (see [`ScanReads`]): when every word it read holds the same value
//! now, and no module was unloaded since the tables were built (the loader is
//! `stable`, then and now), the scan would find the same caller, and is not
//! made again.
//!
//! rbp is part of the state only where some later step depends on it: code
//! without frame pointers uses it as an ordinary register, whose value changes
//! from one launch to the next, while the frames outward of a frame that
//! restores it from the stack cannot depend on it. For the same reason the
//! saved rbp a step restores is read again only where a step after it uses
//! rbp before another sets it ([`Step::needed_reads`]).
//!
//! A trail also keeps whole walks under the caller's tags, for a capture that
//! expects one ([`Trail::expect`], [`kept`]).

use crate::frame::{Captured, Frame, StackEnd};
use crate::python::{CodeMemo, FrameTrail, LastMerge};
use crate::scan::{MAX_RECOVERIES, Role};
use kept::{Kept, Walked, Whole};

mod kept;

pub(crate) use kept::Start;

/// Skipped frames whose steps a trail keeps (see [`Trail::head`]).
pub(crate) const HEAD: usize = 4;

/// Reads a kept scan may have made; a scan that reads more is made again.
const SCAN_READS: usize = 32;

/// The stack words one crossing of code without unwind info read, in order:
/// the scan is a function of its start state, the tables, the code of their
/// modules and these words (its only other input, whether a module is still
/// loaded, cannot change while the loader is `stable`). Kept per crossing
/// number: the steps of a trail keep the crossing numbers they were walked
/// with, and a walk overwrites only the numbers of its own crossings, made
/// before any step it takes from the trail.
#[derive(Clone, Copy)]
pub(crate) struct ScanReads {
    /// `(address, value)`; a failed read has its bit in `failed`.
    reads: [(u64, u64); SCAN_READS],
    /// Per read, what the scan did with its value: 0 compared whole, 1 tried
    /// as a return address that was none ([`Role::NotCode`]), else below
    /// this limit ([`Role::Below`]).
    roles: [u64; SCAN_READS],
    failed: u32,
    n: u8,
    /// Every read fitted, and the loader was stable during the scan.
    whole: bool,
}

impl Default for ScanReads {
    fn default() -> Self {
        ScanReads {
            reads: [(0, 0); SCAN_READS],
            roles: [0; SCAN_READS],
            failed: 0,
            n: 0,
            whole: false,
        }
    }
}

impl ScanReads {
    /// `n` empty records, zeroed on the heap: never built on the stack first
    /// (unoptimized builds do that with `vec!` of a value, and a trail may
    /// be made on an 8 KiB signal stack). `None` when memory is short.
    fn none(n: usize) -> Option<Box<[ScanReads]>> {
        use std::alloc::{Layout, alloc_zeroed};
        let n = n.max(1);
        let layout = Layout::array::<ScanReads>(n).ok()?;
        // SAFETY: `layout` has a non-zero size (n >= 1, and a record is not
        // empty).
        let p = unsafe { alloc_zeroed(layout) }.cast::<ScanReads>();
        if p.is_null() {
            return None;
        }
        // SAFETY: `p` is a fresh allocation of `layout`, as the global
        // allocator gives a `Box<[ScanReads]>` of `n`, and all zeros is a
        // valid `ScanReads` (integers, and `whole` false: an empty record
        // that no walk takes).
        Some(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(p, n)) })
    }

    /// Starts a new record, usable only if the loader is `stable`.
    pub(crate) fn start(&mut self, stable: bool) {
        self.n = 0;
        self.failed = 0;
        self.whole = stable;
    }

    /// Reads `address` through `read` and records it.
    #[inline(always)]
    pub(crate) fn read<F>(&mut self, read: &mut F, address: u64) -> Result<u64, ()>
    where
        F: FnMut(u64) -> Result<u64, ()>,
    {
        let r = read(address);
        let i = usize::from(self.n);
        match self.reads.get_mut(i) {
            Some(slot) => {
                *slot = (address, r.unwrap_or(0));
                self.roles[i] = 0;
                if r.is_err() {
                    self.failed |= 1 << i;
                }
                self.n += 1;
            }
            None => self.whole = false,
        }
        r
    }

    /// Every read of the scan was kept, with the loader stable.
    pub(crate) fn is_whole(&self) -> bool {
        self.whole
    }

    /// What the scan did with the value of its last read (if kept).
    pub(crate) fn note(&mut self, role: Role) {
        let Some(i) = usize::from(self.n).checked_sub(1) else {
            return;
        };
        if self.whole && self.failed & (1 << i) == 0 {
            self.roles[i] = match role {
                Role::NotCode => 1,
                // A limit is a stack address above the scan's start, never 0 or 1.
                Role::Below(limit) if limit > 1 => limit,
                Role::Below(_) => 0,
            };
        }
    }

    /// Whether every word the scan read leads it to the same now: the same
    /// value, or another that its role treats alike (a return address that
    /// is still none, by `after_call`; a word still below the limit); and
    /// failed reads still fail.
    pub(crate) fn unchanged<F>(&self, read: &mut F, after_call: &mut dyn FnMut(u64) -> bool) -> bool
    where
        F: FnMut(u64) -> Result<u64, ()>,
    {
        self.whole
            && self.reads[..usize::from(self.n)]
                .iter()
                .zip(&self.roles)
                .enumerate()
                .all(|(i, (&(a, v), &role))| match read(a) {
                    Ok(x) if self.failed & (1 << i) == 0 => {
                        x == v
                            || match role {
                                0 => false,
                                1 => !after_call(x),
                                limit => x < limit,
                            }
                    }
                    Ok(_) => false,
                    Err(()) => self.failed & (1 << i) != 0,
                })
    }
}

/// One frame of a walk: the state the walk reached it in, what it found, and
/// what its step read.
#[derive(Clone, Copy, Default)]
pub(crate) struct Step {
    /// `memo_key` of the frame's address (the address and whether it is a
    /// return address).
    pub key: u64,
    pub sp: u64,
    pub bp: u64,
    /// Crossings of code without unwind info before this frame (the walk
    /// makes a bounded number).
    pub recovered: u32,
    pub frame: Frame,
    /// Stack words the step read, `(address, value)`; `reads[..nreads]`.
    pub reads: [(u64, u64); 2],
    pub nreads: u8,
    /// The caller was found by a stack scan: checked by scanning again.
    pub scanned: bool,
    /// The step uses rbp (a CFA rule from rbp, a stack scan), and sets it
    /// from the stack (a rule with an rbp save slot).
    pub uses_bp: bool,
    pub sets_bp: bool,
    /// The walk from this frame on depends on rbp's value here: some step
    /// uses it before any step sets it.
    pub bp_matters: bool,
    /// The walk from this frame on depends only on the state, the reads and
    /// the tables: a CFA rule, a stack scan, or the end at a root.
    pub plain: bool,
}

impl Step {
    /// The reads the walk's frames depend on (`after`: the step after this
    /// one). The first is the return address; a second restores rbp, and
    /// matters only where some step after uses rbp before one sets it: code
    /// without frame pointers keeps data in rbp, saved in its callees'
    /// frames, which changes from one launch to the next while the stack
    /// stays the same.
    #[inline(always)]
    pub(crate) fn needed_reads(&self, after: Option<&Step>) -> &[(u64, u64)] {
        let n = usize::from(self.nreads);
        let n = if n == 2 && self.sets_bp && !after.is_some_and(|a| a.bp_matters) {
            1
        } else {
            n
        };
        &self.reads[..n.min(2)]
    }
}

/// The last native walk of one thread (see the module docs). Keep one per
/// thread and pass it to every capture of that thread
/// ([`crate::LocalUnwinder::capture_then_reusing`]); it is never shared.
/// About 125 KiB for 256 frames (steps, a memo of code objects and the
/// last Python frame chain), allocated once by [`Trail::new`]; and, once a
/// walk is kept ([`Trail::keep_last`]), about 1.9 MiB of address space for
/// the kept walks, resident as used ([`Trail::kept_bytes`]).
pub struct Trail {
    /// Two buffers: the last walk's steps, and the running walk's.
    pub(crate) bufs: [Box<[Step]>; 2],
    /// The buffer holding the last walk.
    pub(crate) cur: usize,
    /// Steps of the last walk.
    pub(crate) len: usize,
    /// Steps `from..len` are plain and the last walk reached the root: a new
    /// walk may continue with any of them.
    pub(crate) from: usize,
    /// The tables (their ids and rule generation) the last walk used; `None`
    /// when it is not to be reused.
    pub(crate) tables: Option<(u64, u64, u64)>,
    pub(crate) end: StackEnd,
    /// Crossings of code without unwind info the last walk made in all.
    pub(crate) recovered: u32,
    /// The code objects of the thread's last Python frames.
    pub(crate) codes: CodeMemo,
    /// The thread's last Python frame chain.
    pub(crate) python: FrameTrail,
    /// The last merge of native and Python frames, for a replay. Boxed: a
    /// thread's first capture may build its trail on a small signal stack.
    pub(crate) merged: Box<LastMerge>,
    /// Captures made with this trail (see [`crate::Captured::serial`]).
    pub(crate) serial: u64,
    /// The capture number of the walk kept here (0: none).
    pub(crate) walked: u64,
    /// Set by a walk that took the rest from this trail at the same depth as
    /// the walk before (`j` frames walked, the trail's from its `j`th on):
    /// its frames from `j` on, and their number, are that walk's.
    pub(crate) aligned: Option<usize>,
    /// What each crossing of code without unwind info read, by crossing number.
    pub(crate) scans: Box<[ScanReads]>,
    /// The steps of the frames the last walk skipped, outermost last:
    /// `head[..head_len]`; a kept walk starts with them.
    pub(crate) head: [Step; HEAD],
    pub(crate) head_len: usize,
    /// Every skipped frame's step is in `head`, each plain and no scan.
    pub(crate) head_plain: bool,
    /// The last walk's head holds every frame it skipped.
    pub(crate) from_first: bool,
    /// Whole walks kept under the caller's tags ([`Trail::keep_last`]).
    pub(crate) kept: Kept,
    /// The last capture, as returned.
    pub(crate) last: Captured,
    /// Whether the last capture read the thread's Python frame chain into
    /// `python`; `None` where the unwinder reads no Python frames.
    pub(crate) chain_read: Option<bool>,
}

impl Trail {
    /// An empty trail for walks of up to `frames` frames.
    pub fn new(frames: usize) -> Trail {
        Trail::try_new(frames).expect("memory for a trail")
    }

    /// [`Trail::new`], or `None` when memory is short: a thread's first
    /// capture builds its trail inside the application's call, where a failed
    /// allocation must not abort the program.
    pub fn try_new(frames: usize) -> Option<Trail> {
        use crate::fallible::slice;
        Some(Trail {
            bufs: [
                slice(frames, Step::default())?,
                slice(frames, Step::default())?,
            ],
            cur: 0,
            len: 0,
            from: 0,
            tables: None,
            end: StackEnd::Root,
            recovered: 0,
            codes: CodeMemo::try_new()?,
            python: FrameTrail::try_new()?,
            merged: LastMerge::try_boxed()?,
            serial: 0,
            walked: 0,
            aligned: None,
            scans: ScanReads::none(MAX_RECOVERIES as usize)?,
            head: [Step::default(); HEAD],
            head_len: 0,
            head_plain: true,
            from_first: false,
            kept: Kept::default(),
            last: Captured::default(),
            chain_read: Some(false),
        })
    }

    /// The next capture with this trail expects the walk kept under one of
    /// `tags` ([`Trail::keep_last`]; 0: none), the first first: it proves
    /// that walk unchanged and takes its frames without walking
    /// ([`crate::Captured::kept`], [`crate::Captured::tag`]), or, when any
    /// word each read changed, walks as before. A second guess costs only
    /// when the first is wrong.
    pub fn expect(&mut self, tags: [u32; 2]) {
        self.kept.expect = tags;
    }

    /// Keeps the last capture's native walk under `tag` (not 0), replacing
    /// the one kept under it, for a later capture that expects it
    /// ([`Trail::expect`]), and `note` with the whole capture (a capture that
    /// takes it whole has it in [`crate::Captured::note`]: what the caller
    /// derived from its frames). Nothing is kept when that capture took a kept
    /// walk, or its walk cannot be proven later (it did not reach the root
    /// through plain steps, skipped frames, or read more than is kept):
    /// `false`. About 1.9 MiB of address space per thread once used (see
    /// [`Trail::kept_bytes`]).
    #[inline]
    pub fn keep_last(&mut self, tag: u32, note: u32) -> bool {
        // Checked where the caller is: most captures in a loop took a kept
        // walk, and keep nothing.
        !self.kept.taken && self.keep_walked(tag, note)
    }

    /// Whether a walk was not kept since the last call because the thread's
    /// buffers for kept walks could not be allocated (memory short): those
    /// captures are walked again instead.
    pub fn kept_short_of_memory(&mut self) -> bool {
        self.kept.take_short_of_memory()
    }

    /// [`Trail::keep_last`] for a capture that walked.
    #[inline(never)]
    fn keep_walked(&mut self, tag: u32, note: u32) -> bool {
        let Some(tables) = self.tables else {
            return false;
        };
        if !self.from_first
            || self.walked != self.serial
            || self.end != StackEnd::Root
            || self.from != 0
        {
            return false;
        }
        let steps = &self.bufs[self.cur][..self.len];
        let head = &mut self.head[..self.head_len];
        bp_matters(head, steps.first().is_some_and(|s| s.bp_matters));
        // The capture besides the walk: its Python chain (read by it, whole)
        // and frames (the walk's, or the merge's it kept).
        let last = Captured { note, ..self.last };
        let whole = match self.chain_read {
            _ if last.serial != self.serial => None,
            None => (last.len == steps.len()).then_some(Whole {
                chain: None,
                codes_at: 0,
                frames: None,
                captured: last,
            }),
            Some(true) => self.python.whole().and_then(|(chain, codes_at)| {
                let frames = match chain.links.is_empty() {
                    true => (last.len == steps.len()).then_some(None)?,
                    false => Some(self.merged.output(self.serial)?),
                };
                Some(Whole {
                    chain: Some(chain),
                    codes_at,
                    frames,
                    captured: last,
                })
            }),
            Some(false) => None,
        };
        let walk = Walked {
            head,
            steps,
            scans: &self.scans,
            recovered: self.recovered,
        };
        self.kept.keep(tag, tables, walk, whole)
    }

    /// Drops every walk kept ([`Trail::keep_last`]): for a caller whose tags
    /// no longer name what they named (its stack ids changed meaning).
    pub fn forget_kept(&mut self) {
        self.kept.forget();
    }

    /// Bytes the kept walks take.
    pub fn kept_bytes(&self) -> usize {
        self.kept.bytes()
    }

    /// Forgets the last walk: the next one walks every frame.
    pub fn clear(&mut self) {
        self.tables = None;
        self.len = 0;
        self.from = 0;
    }
}

/// A walk's use of a trail: the candidates it may continue with, and the
/// steps it records for the next walk.
pub(crate) struct Recording<'t> {
    pub trail: &'t mut Trail,
    /// Steps recorded by this walk (in the other buffer); `usize::MAX` once
    /// the walk ended with the trail's rest.
    pub n: usize,
    /// The last walk may be reused at all (same tables, reached the root).
    pub usable: bool,
    /// The next candidate step of the last walk (its frames are in order of
    /// growing stack pointer).
    pub next: usize,
    /// Steps `verified..len` of the last walk were checked in this walk.
    pub verified: usize,
    /// The last step recorded that is not plain, plus one.
    pub unplain: usize,
    /// The recording overflowed: the next walk reuses nothing.
    pub overflow: bool,
    /// The loader is `stable`: a kept scan whose words are unchanged needs
    /// no new scan.
    pub stable: bool,
}

impl<'t> Recording<'t> {
    pub(crate) fn new(
        trail: &'t mut Trail,
        tables: (u64, u64, u64),
        stable: bool,
    ) -> Recording<'t> {
        let usable = trail.tables == Some(tables) && trail.end == StackEnd::Root;
        trail.aligned = None;
        let (next, verified) = (trail.from, trail.len);
        trail.head_len = 0;
        trail.head_plain = true;
        Recording {
            trail,
            n: 0,
            usable,
            next,
            verified,
            unplain: 0,
            overflow: false,
            stable,
        }
    }

    /// Records a step of the running walk.
    #[inline(always)]
    pub(crate) fn record(&mut self, step: Step) {
        let buf = &mut self.trail.bufs[1 - self.trail.cur];
        match buf.get_mut(self.n) {
            Some(s) => {
                *s = step;
                self.n += 1;
                if !step.plain {
                    self.unplain = self.n;
                }
            }
            None => self.overflow = true,
        }
    }

    /// Records a step of a frame the walk skipped.
    #[inline(always)]
    pub(crate) fn record_head(&mut self, step: Step) {
        let t = &mut *self.trail;
        t.head_plain &= step.plain && !step.scanned;
        match t.head.get_mut(t.head_len) {
            Some(s) => {
                *s = step;
                t.head_len += 1;
            }
            None => t.head_plain = false,
        }
    }

    /// Whether the walk, in state `(sp, bp, recovered)` at a frame of key
    /// `key`, may end with the last walk's steps from there: the index of
    /// that step, once every word those steps read was read again (`read`)
    /// and found unchanged, and every scan they made, made again (`rescan`:
    /// the scan from a step's state, which must lead to the state of the
    /// step after it, recording its reads) unless its words are unchanged,
    /// found the same caller. A change found rules out every
    /// candidate at or inside its frame, for the rest of this walk.
    #[inline(always)]
    pub(crate) fn candidate<F>(
        &mut self,
        key: u64,
        (sp, bp, recovered): (u64, u64, u32),
        read: &mut F,
        rescan: &mut dyn FnMut(&Step, &Step, &mut F, &mut ScanReads) -> bool,
        after_call: &mut dyn FnMut(u64) -> bool,
    ) -> Option<usize>
    where
        F: FnMut(u64) -> Result<u64, ()>,
    {
        if !self.usable {
            return None;
        }
        let t = &mut *self.trail;
        let old = &t.bufs[t.cur][..t.len];
        while self.next < old.len() && old[self.next].sp < sp {
            self.next += 1;
        }
        let j = self.next;
        let s = old.get(j)?;
        if s.sp != sp || s.key != key || (s.bp_matters && s.bp != bp) || s.recovered != recovered {
            return None;
        }
        // Outermost first: a change found at a frame leaves the frames outward
        // of it checked, for a later candidate.
        while self.verified > j {
            let m = self.verified - 1;
            let s = &old[m];
            let same = s
                .needed_reads(old.get(m + 1))
                .iter()
                .all(|&(a, v)| read(a) == Ok(v))
                && (!s.scanned
                    || old.get(m + 1).is_some_and(|after| {
                        let Some(kept) = t.scans.get_mut(s.recovered as usize) else {
                            return false;
                        };
                        (self.stable && kept.unchanged(read, after_call)) || {
                            kept.start(self.stable);
                            rescan(s, after, read, kept)
                        }
                    }));
            if !same {
                self.next = self.verified;
                return None;
            }
            self.verified = m;
        }
        Some(j)
    }

    /// Ends the walk with the last walk's frames from step `j` on (see
    /// [`Recording::candidate`]), written to `out` from `len`: the new length,
    /// or `None` when they do not fit.
    pub(crate) fn reuse(&mut self, j: usize, out: &mut [Frame], len: usize) -> Option<usize> {
        let t = &mut *self.trail;
        let rest = t.len - j;
        if out.len() < len + rest || t.bufs[0].len() < self.n + rest {
            return None;
        }
        // Every frame written was recorded, in order (and a walk whose
        // frames overflowed the trail is not kept): the last walk's frames
        // are its steps' frames, as many.
        t.aligned = (self.n == j && len == j).then_some(j);
        let [a, b] = &mut t.bufs;
        let (old, new) = if t.cur == 0 { (a, b) } else { (b, a) };
        for (d, s) in out[len..len + rest].iter_mut().zip(&old[j..t.len]) {
            *d = s.frame;
        }
        if self.n == j {
            // The same depth: the old steps lie where the next walk wants
            // them; only the new inner ones move.
            old[..j].copy_from_slice(&new[..j]);
        } else {
            new[self.n..self.n + rest].copy_from_slice(&old[j..t.len]);
            t.cur = 1 - t.cur;
        }
        t.len = self.n + rest;
        let steps = &mut t.bufs[t.cur][..t.len];
        let after = steps[self.n].bp_matters;
        bp_matters(&mut steps[..self.n], after);
        // The reused steps are plain: only the new inner ones can move `from`.
        t.from = self.unplain;
        // `tables`, `end` and `recovered` stay those of the last walk, which
        // this one had: the steps from `j` on made the same crossings.
        self.n = usize::MAX;
        Some(len + rest)
    }

    /// Ends a walk that reused nothing: its steps become the trail.
    pub(crate) fn finish(self, tables: (u64, u64, u64), end: StackEnd, recovered: u32) {
        if self.n == usize::MAX {
            return;
        }
        let t = self.trail;
        t.cur = 1 - t.cur;
        t.len = self.n;
        bp_matters(&mut t.bufs[t.cur][..self.n], false);
        t.end = end;
        t.recovered = recovered;
        t.from = if end == StackEnd::Root {
            self.unplain
        } else {
            self.n
        };
        t.tables = (!self.overflow).then_some(tables);
    }
}

/// Sets each step's `bp_matters`, from the outermost in: `after` is the value
/// of the step that follows the last of `steps`.
fn bp_matters(steps: &mut [Step], mut after: bool) {
    for s in steps.iter_mut().rev() {
        after = s.uses_bp || (!s.sets_bp && after);
        s.bp_matters = after;
    }
}
