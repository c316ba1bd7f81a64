//! `splice()`: the thread state → the frame chain, walked through the live
//! data-stack chunks (3.11+) → (code, instruction) per frame, grouped by
//! eval-loop invocation, each group replacing one native
//! `_PyEval_EvalFrameDefault` frame.

use std::mem::MaybeUninit;
use std::sync::atomic::Ordering;

use super::chunks::{CHUNK_DATA, Chunks, MAX_CHUNKS, Raw};
use super::layout::{FrameKind, FrameWords};
use super::memory::Known;
use super::replay::LastMerge;
use super::reuse::{Codes, FrameTrail, Link, Made, Proof};
use super::{CodeMemo, MAX_PYTHON_FRAMES, Python, reason};

use crate::frame::{Captured, CodeId, Frame, StackEnd, Stats};
use crate::table::Table;

impl Python {
    /// Reads the calling thread's Python frames and splices them into the native
    /// frames `out[..captured.len]`. `stack` is the thread's stack mapping.
    /// `true` when the chain was read (the trail's chain is this capture's,
    /// or cleared).
    pub(crate) fn splice(
        &self,
        _table: &Table,
        stats: &Stats,
        stack: (u64, u64),
        out: &mut [Frame],
        captured: &mut Captured,
        trail: Option<(&mut CodeMemo, &mut FrameTrail, &mut LastMerge)>,
    ) -> bool {
        if self.disabled.load(Ordering::Relaxed) != 0 {
            return false;
        }
        // SAFETY: the interpreter's lock-free accessor (see the module docs).
        let tstate = unsafe { (self.this_thread_state)() } as u64;
        if tstate == 0 {
            return false;
        }
        // Uninitialized: zeroing these two buffers cost more than the walk itself.
        let mut raw = [const { MaybeUninit::<Raw>::uninit() }; MAX_PYTHON_FRAMES];
        let (codes, mut frames, mut last) = match trail {
            Some((c, f, l)) => (Some(c), Some(f), Some(l)),
            None => (None, None, None),
        };
        let mut mem = Known::with_codes(stack, codes);
        let read = self.read_chain(tstate, &mut mem, &mut raw, frames.as_deref_mut());
        if frames.is_some_and(|t| t.reused > 0) {
            Stats::bump(&stats.python_reused);
        }
        if mem.probes > 0 {
            stats.python_probes.fetch_add(mem.probes, Ordering::Relaxed);
        }
        let (n, truncated) = match read {
            Ok(r) => {
                if !self.read_one.load(Ordering::Relaxed) {
                    self.read_one.store(true, Ordering::Relaxed);
                }
                r
            }
            Err(why) => self.skip(stats, why),
        };
        if n == 0 {
            return true;
        }
        Stats::bump(&stats.python_stacks);
        // SAFETY: read_chain initialized `raw[..n]`; MaybeUninit<Raw> has Raw's layout.
        let raw: &[Raw] = unsafe { std::slice::from_raw_parts(raw.as_ptr().cast::<Raw>(), n) };
        let walk_end = captured.end;
        let replayed = last.as_deref_mut().and_then(|l| {
            let r = l.replay(
                out,
                (captured.len, walk_end),
                raw,
                truncated,
                captured.serial,
            );
            if r.is_none() {
                // Before the merge overwrites the native frames.
                l.keep_input(out, captured.len, walk_end, raw, truncated);
            }
            r
        });
        let merged = match replayed {
            Some((m, follows)) => Some((m, 0, Some(follows))),
            None => self
                .merge_with_room(raw, truncated, out, captured.len)
                .map(|(w, spliced, cut, unmatched)| ((w, spliced, cut), unmatched, None)),
        };
        if let Some(((w, spliced, cut), unmatched, replay)) = merged {
            if unmatched > 0 {
                stats
                    .python_unmatched
                    .fetch_add(unmatched as u64, Ordering::Relaxed);
            } else if replay.is_none()
                && let Some(l) = last
            {
                // Kept only without unmatched frames: a replay counts none.
                l.keep_output(out, (w, spliced, cut), captured.serial);
            }
            captured.unchanged = replay == Some(true);
            captured.len = w;
            captured.python_frames = spliced;
            captured.python_truncated = truncated;
            if truncated {
                Stats::bump(&stats.python_truncated);
                captured.end = StackEnd::DepthLimit;
            } else if cut && captured.end == StackEnd::Root {
                captured.end = StackEnd::PythonCut;
            }
            return true;
        }
        // Merge: each native eval-loop frame becomes its group of Python frames.
        let mut native = [const { MaybeUninit::<Frame>::uninit() }; crate::frame::MAX_FRAMES];
        let native_len = captured.len.min(native.len()).min(out.len());
        for (d, s) in native.iter_mut().zip(&out[..native_len]) {
            d.write(*s);
        }
        // SAFETY: `native[..native_len]` was written just above.
        let native: &[Frame] =
            unsafe { std::slice::from_raw_parts(native.as_ptr().cast::<Frame>(), native_len) };
        let mut w = 0;
        let mut p = 0;
        let mut full = false;
        let mut put = |f: Frame, w: &mut usize| -> bool {
            match out.get_mut(*w) {
                Some(s) => {
                    *s = f;
                    *w += 1;
                    true
                }
                None => false,
            }
        };
        let mut spliced = 0;
        let mut cut = false;
        'native: for f in native {
            let is_eval = matches!(*f, Frame::Native { module, .. } if module == self.eval_module)
                && f.lookup_offset()
                    .is_some_and(|o| self.eval_range.contains(&o));
            if is_eval && p >= raw.len() && !truncated {
                // An eval loop whose Python frames are not in this chain: the
                // thread runs a subinterpreter inside another interpreter's call.
                cut = true;
            }
            if is_eval && p < raw.len() {
                while p < raw.len() {
                    let r = raw[p];
                    p += 1;
                    let frame = Frame::Python {
                        code: CodeId(r.code),
                        instruction: r.instruction,
                    };
                    if !put(frame, &mut w) {
                        full = true;
                        break 'native;
                    }
                    spliced += 1;
                    if r.group_end {
                        break;
                    }
                }
                continue;
            }
            if !put(*f, &mut w) {
                full = true;
                break;
            }
        }
        if !full && p < raw.len() {
            // Python frames no native eval frame accounts for (a truncated native
            // stack, or an eval frame outside the symbol's range): keep them at
            // the outer end, counted.
            stats
                .python_unmatched
                .fetch_add((raw.len() - p) as u64, Ordering::Relaxed);
            for r in &raw[p..] {
                let frame = Frame::Python {
                    code: CodeId(r.code),
                    instruction: r.instruction,
                };
                if !put(frame, &mut w) {
                    full = true;
                    break;
                }
                spliced += 1;
            }
        }
        captured.len = w;
        captured.python_frames = spliced;
        captured.python_truncated = truncated || full;
        if captured.python_truncated {
            Stats::bump(&stats.python_truncated);
        }
        if full || truncated {
            captured.end = StackEnd::DepthLimit;
        } else if cut && captured.end == StackEnd::Root {
            captured.end = StackEnd::PythonCut;
        }
        true
    }

    /// `splice`'s merge where `out` has room for every frame and every Python
    /// frame has its eval-loop frame (the usual case): the native frames
    /// before the first eval-loop frame stay in place, the rest move as
    /// copied. `(frames, Python frames, cut, Python frames unmatched)`, or
    /// `None` (nothing written) for the general merge.
    #[inline(always)]
    fn merge_with_room(
        &self,
        raw: &[Raw],
        truncated: bool,
        out: &mut [Frame],
        native_len: usize,
    ) -> Option<(usize, usize, bool, usize)> {
        let total = native_len.checked_add(raw.len())?;
        if native_len > crate::frame::MAX_FRAMES || total > out.len() {
            return None;
        }
        let (em, er) = (self.eval_module, &self.eval_range);
        let is_eval = |f: &Frame| match *f {
            Frame::Native {
                module,
                offset,
                return_address,
            } => module == em && er.contains(&offset.saturating_sub(u64::from(return_address))),
            _ => false,
        };
        let first = out[..native_len].iter().position(is_eval)?;
        // Groups: one per eval-loop frame, each ending at a group end.
        let mut tail = [const { MaybeUninit::<Frame>::uninit() }; crate::frame::MAX_FRAMES];
        let tail_len = native_len - first;
        // SAFETY: `out[first..native_len]` are initialized Frames and `tail`
        // has room for them (native_len <= MAX_FRAMES); the two do not overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(
                out.as_ptr().add(first),
                tail.as_mut_ptr().cast::<Frame>(),
                tail_len,
            );
        }
        // SAFETY: `tail[..tail_len]` was written just above.
        let tail: &[Frame] =
            unsafe { std::slice::from_raw_parts(tail.as_ptr().cast::<Frame>(), tail_len) };
        let (mut w, mut p, mut cut) = (first, 0, false);
        for f in tail {
            if is_eval(f) {
                if p < raw.len() {
                    for r in &raw[p..] {
                        out[w] = Frame::Python {
                            code: CodeId(r.code),
                            instruction: r.instruction,
                        };
                        w += 1;
                        p += 1;
                        if r.group_end {
                            break;
                        }
                    }
                    continue;
                }
                // An eval loop whose Python frames are not in this chain: the
                // thread runs a subinterpreter inside another interpreter's call.
                cut |= !truncated;
            }
            out[w] = *f;
            w += 1;
        }
        // Python frames no native eval frame accounts for: kept at the outer
        // end, as the general merge does.
        let unmatched = raw.len() - p;
        for r in &raw[p..] {
            out[w] = Frame::Python {
                code: CodeId(r.code),
                instruction: r.instruction,
            };
            w += 1;
        }
        Some((w, raw.len(), cut, unmatched))
    }

    /// The thread's current (innermost) frame; 0 for none.
    pub(super) fn current_frame(&self, tstate: u64, mem: &mut Known) -> Result<u64, &'static str> {
        let l = &self.layout;
        // The thread state is the interpreter's own, live while the thread is.
        let rd = |a: u64| -> u64 {
            // SAFETY: inside the live PyThreadState / _PyCFrame of this thread
            // (checked readable below where it may be elsewhere).
            unsafe { (a as *const u64).read_unaligned() }
        };
        let frame = rd(tstate + l.tstate_frame);
        let Some(off) = l.cframe_current else {
            return Ok(frame);
        };
        if frame == 0 {
            return Ok(0);
        }
        // The thread state's own root cframe (no eval loop running, as on a
        // thread the interpreter knows between Python calls) is inside the
        // live thread state; an eval loop's is on the thread's stack.
        let root = l.root_cframe.and_then(|r| tstate.checked_add(r));
        if root != Some(frame) && !self.readable(frame, off + 8, mem) {
            return Err(reason::CHAIN);
        }
        Ok(rd(frame + off))
    }

    /// The live parts of the thread's data-stack chunks (3.11+), current chunk
    /// first; empty before 3.11.
    pub(super) fn data_stack(&self, tstate: u64) -> Chunks {
        let mut c = Chunks {
            n: 0,
            lo: [0; MAX_CHUNKS],
            hi: [0; MAX_CHUNKS],
            cursor: [0; MAX_CHUNKS],
        };
        let Some(ds) = self.layout.datastack else {
            return c;
        };
        // The thread state and its chunks are the interpreter's own: a chunk is
        // freed only by its thread, when it returns from the chunk's first call,
        // which cannot happen while that thread is in this capture.
        let rd = |a: u64| -> u64 {
            // SAFETY: inside the live PyThreadState or one of its chunk headers.
            unsafe { (a as *const u64).read_unaligned() }
        };
        let mut chunk = rd(tstate + ds.chunk);
        let mut end = rd(tstate + ds.top);
        while c.n < MAX_CHUNKS && chunk != 0 && chunk.is_multiple_of(8) {
            let (previous, size) = (rd(chunk), rd(chunk + 8));
            // The thread's first chunk keeps its first word unused.
            let start = chunk + CHUNK_DATA + if previous == 0 { 8 } else { 0 };
            if end < start || end > chunk.saturating_add(size) || !end.is_multiple_of(8) {
                break;
            }
            (c.lo[c.n], c.hi[c.n], c.cursor[c.n]) = (start, end, start);
            c.n += 1;
            if previous == 0 || !previous.is_multiple_of(8) {
                break;
            }
            end = (previous + CHUNK_DATA).saturating_add(rd(previous + 16).saturating_mul(8));
            chunk = previous;
        }
        c
    }

    /// Proves that the frame at `target` in chunk `k` is a live frame: the
    /// chunk's frames, from its first, each as long as its code object says,
    /// must reach `target` exactly. Every frame passed over is live (the
    /// interpreter pushed it and has not popped it), so its code object is too
    /// (a frame holds a strong reference to it) and is read directly. Targets
    /// come outermost first, so each chunk is walked once.
    pub(super) fn tile_to(
        &self,
        chunks: &mut Chunks,
        k: usize,
        target: u64,
    ) -> Result<(), &'static str> {
        let l = &self.layout;
        let Some(ds) = l.datastack else {
            return Err(reason::CHAIN);
        };
        let mut s = chunks.cursor[k];
        while s < target {
            if s + l.frame_size > chunks.hi[k] {
                return Err(reason::CHAIN);
            }
            // SAFETY: `s` starts a live frame inside the chunk (induction from
            // the chunk's first frame).
            let code = unsafe { ((s + l.frame_code) as *const u64).read_unaligned() };
            let words = self.frame_words(code, ds.frame_words)?;
            match words.checked_mul(8) {
                Some(b) if b >= l.frame_size => s += b,
                _ => return Err(reason::CHAIN),
            }
        }
        if s != target {
            return Err(reason::CHAIN);
        }
        chunks.cursor[k] = target;
        Ok(())
    }

    /// The data-stack words of a live frame whose code object is `code`.
    #[inline]
    pub(super) fn frame_words(&self, code: u64, fw: FrameWords) -> Result<u64, &'static str> {
        if code == 0 || !code.is_multiple_of(8) {
            return Err(reason::CODE_TYPE);
        }
        // SAFETY: the code object of a live frame is live (see `tile_to`).
        let rd32 = |o: u64| unsafe { ((code + o) as *const i32).read_unaligned() };
        // SAFETY: as above; the header comes first.
        let ty = unsafe { ((code + self.layout.ob_type) as *const u64).read_unaligned() };
        if ty != self.code_type {
            return Err(reason::CODE_TYPE);
        }
        let words = match fw {
            FrameWords::Field(o) => i64::from(rd32(o)),
            FrameWords::Sum {
                nlocalsplus,
                stacksize,
                specials,
            } => i64::from(rd32(nlocalsplus)) + i64::from(rd32(stacksize)) + specials as i64,
        };
        u64::try_from(words).map_err(|_| reason::CHAIN)
    }

    /// The frame chain, innermost first, into `raw`: (frames, truncated).
    ///
    /// Frames in the live part of the thread's data stack (3.11+) are read
    /// directly and proven live by `tile_to`, and so are their code objects;
    /// other frames (3.10's heap frames, generators' frames) and their code
    /// objects only after a probe in this capture. With the thread's
    /// [`FrameTrail`], the outer part of the chain is taken from the last read
    /// where it is proven unchanged (see `reuse.rs`).
    pub(super) fn read_chain(
        &self,
        tstate: u64,
        mem: &mut Known,
        raw: &mut [MaybeUninit<Raw>],
        mut trail: Option<&mut FrameTrail>,
    ) -> Result<(usize, bool), &'static str> {
        if let Some(t) = trail.as_deref_mut() {
            t.reused = 0;
        }
        let r = self.read_chain_in(tstate, mem, raw, trail.as_deref_mut());
        if r.is_err()
            && let Some(t) = trail
        {
            t.clear();
        }
        r
    }

    fn read_chain_in(
        &self,
        tstate: u64,
        mem: &mut Known,
        raw: &mut [MaybeUninit<Raw>],
        mut trail: Option<&mut FrameTrail>,
    ) -> Result<(usize, bool), &'static str> {
        let l = &self.layout;
        // The thread state is the interpreter's own, live while the thread is.
        let rd = |a: u64| -> u64 {
            // SAFETY: a frame checked readable by the caller of `rd`.
            unsafe { (a as *const u64).read_unaligned() }
        };
        // Before any code object is read: what the links this read keeps are
        // proven against.
        let codes_at = self.code_generation(tstate);
        let mut frame = self.current_frame(tstate, mem)?;
        if frame == 0 {
            if let Some(t) = trail {
                t.commit(0, 0, true);
                t.codes_at = codes_at;
            }
            return Ok((0, false));
        }
        let mut chunks = self.data_stack(tstate);
        let mut n: usize = 0;
        let mut steps = 0;
        let mut truncated = false;
        // Consecutive frames mostly share a chunk: try the last one first.
        let mut last_chunk = 0;
        // The trail: candidates lie below `limit`; `links[..verified]` were
        // proven in this read, `links[..tiled]` tiled; the read's own links,
        // innermost first, in `fresh[..nfresh]`.
        let mut limit = trail.as_deref().map_or(0, |t| t.reusable);
        let same_codes = codes_at != 0 && trail.as_deref().is_some_and(|t| t.codes_at == codes_at);
        let (mut verified, mut tiled, mut nfresh) = (0, 0, 0);
        let mut keep = None;
        while frame != 0 {
            // Bounded: a cycle in a corrupted chain ends at the cap.
            steps += 1;
            if steps > 4 * raw.len() {
                truncated = true;
                break;
            }
            let chunk = if last_chunk < chunks.n
                && chunks.lo[last_chunk] <= frame
                && frame
                    .checked_add(l.frame_size)
                    .is_some_and(|end| end <= chunks.hi[last_chunk])
            {
                Some(last_chunk)
            } else {
                chunks.find(frame, l.frame_size)
            };
            if let Some(k) = chunk {
                last_chunk = k;
            }
            if !frame.is_multiple_of(8)
                || (chunk.is_none() && !self.readable(frame, l.frame_size, mem))
            {
                return Err(reason::FRAME_UNREADABLE);
            }
            if chunk.is_some()
                && let Some(t) = trail.as_deref_mut()
                && let Some(d) = t.find(frame, limit)
            {
                if d >= verified {
                    match self.prove(
                        t.chain(),
                        (verified, d),
                        &mut chunks,
                        mem,
                        &mut tiled,
                        same_codes,
                    ) {
                        Ok(()) => verified = d + 1,
                        Err(e) => (verified, limit) = (e, e),
                    }
                }
                let m = usize::from(t.made[d].frames);
                if d < verified && n + m <= raw.len() {
                    if tiled != d + 1 {
                        self.rewind(t, d + 1, &mut chunks);
                    }
                    t.frames_into(d, &mut raw[n..]);
                    t.reused = m as u32;
                    keep = Some((d + 1, m));
                    break;
                }
                if d < verified {
                    // Too deep to add to: read on, without the trail.
                    limit = 0;
                }
            }
            let previous = rd(frame + l.frame_previous);
            let owner = self.frame_byte(frame, l.frame_owner);
            let entry = self.frame_byte(frame, l.frame_is_entry);
            let shim = matches!(l.frame_kind, FrameKind::Interpreter { cstack_owner: Some(cs) }
                if l.frame_owner.is_some() && owner == cs);
            let mut link = Link {
                proof: Proof {
                    addr: frame,
                    flags: self.frame_flags(frame),
                    shim,
                    ..Proof::default()
                },
                made: Made {
                    cheap: chunk.is_some()
                        || (mem.stack.0 <= frame && frame + l.frame_size <= mem.stack.1),
                    ..Made::default()
                },
                ..Link::default()
            };
            if shim {
                // The shim frame of an eval-loop invocation: the frames before it
                // (inner) were that invocation's.
                if let Some(last) = n.checked_sub(1) {
                    // SAFETY: `raw[..n]` is initialized.
                    unsafe { raw[last].assume_init_mut().group_end = true };
                }
                if let Some(t) = trail.as_deref_mut() {
                    nfresh = t.record(nfresh, link);
                }
                frame = previous;
                continue;
            }
            if n == raw.len() {
                truncated = true;
                break;
            }
            let code = rd(frame + l.frame_code);
            let word = self.instr_word(frame);
            let instruction = match l.frame_kind {
                FrameKind::Object => (word as u32 as i32).max(0) as u32,
                FrameKind::Interpreter { .. } => {
                    let base = code + l.code_adaptive.unwrap_or(0);
                    if word < base || word - base > (64 << 20) {
                        return Err(reason::INSTRUCTION);
                    }
                    ((word - base) / 2) as u32
                }
            };
            raw[n].write(Raw {
                code: 0,
                instruction,
                group_end: l.frame_kind == FrameKind::Object || entry != 0,
                code_ptr: code,
                in_stack: if chunk.is_some() { frame } else { 0 },
                chunk: chunk.unwrap_or(0) as u8,
            });
            if let Some(t) = trail.as_deref_mut() {
                // Kept less the code pointer (see `Proof::instr`).
                match u32::try_from(word.wrapping_sub(code)) {
                    Ok(instr) => (link.proof.code, link.proof.instr) = (code, instr),
                    Err(_) => link.made.cheap = false,
                }
                nfresh = t.record(nfresh, link);
            }
            n += 1;
            frame = previous;
        }
        // Outermost first: each chunk is tiled once, from its first frame (or
        // from the last frame taken from the trail).
        if keep.is_none() && tiled > 0 {
            chunks.cursor = chunks.lo;
        }
        // SAFETY: `raw[..n]` is initialized; MaybeUninit<Raw> has Raw's layout.
        let read: &mut [Raw] =
            unsafe { std::slice::from_raw_parts_mut(raw.as_mut_ptr().cast::<Raw>(), n) };
        for r in read.iter().rev().filter(|r| r.in_stack != 0) {
            self.tile_to(&mut chunks, usize::from(r.chunk), r.in_stack)?;
        }
        let unproven = read.iter().filter(|r| r.in_stack == 0).map(|r| r.code_ptr);
        self.probe_code_pages(unproven, mem)?;
        let mut links = trail
            .as_deref_mut()
            .map(|t| t.fresh.iter_mut().take(nfresh).filter(|l| !l.proof.shim));
        for r in read.iter_mut() {
            let (id, first_line, table) = self.code_id(r.code_ptr, mem, r.in_stack != 0)?;
            r.code = id;
            if let Some(link) = links.as_mut().and_then(|i| i.next()) {
                let m = &mut link.made;
                (m.id, m.instruction, m.group_end) = (id, r.instruction, r.group_end);
                link.codes = Codes { table, first_line };
                // A frame in the data stack was tiled: its code object is one.
                link.proof.size = match (r.in_stack, l.datastack) {
                    (0, _) | (_, None) => 0,
                    (_, Some(ds)) => self
                        .frame_words(r.code_ptr, ds.frame_words)
                        .ok()
                        .and_then(|w| u32::try_from(w.checked_mul(8)?).ok())
                        .unwrap_or(0),
                };
            }
        }
        if let Some(t) = trail {
            let (kept, m) = keep.unwrap_or((0, 0));
            if nfresh > t.fresh.len() {
                t.clear();
            } else {
                t.commit(kept, nfresh, !truncated);
                t.codes_at = codes_at;
            }
            return Ok((n + m, truncated));
        }
        Ok((n, truncated))
    }
}

#[cfg(test)]
#[allow(non_snake_case)]
mod tests {
    use super::*;
    use crate::frame::ModuleId;

    unsafe extern "C" fn no_thread_state() -> *mut std::ffi::c_void {
        std::ptr::null_mut()
    }

    /// The merge as the module docs state it, frame by frame: each eval-loop
    /// frame (module 1, offsets 0x100..0x200) replaced by the next group of
    /// Python frames while there are some, the rest kept at the outer end.
    fn reference(native: &[Frame], raw: &[Raw], truncated: bool) -> (Vec<Frame>, bool, usize) {
        let is_eval = |f: &Frame| {
            matches!(
                *f,
                Frame::Native {
                    module: ModuleId(1),
                    ..
                }
            ) && f
                .lookup_offset()
                .is_some_and(|o| (0x100..0x200).contains(&o))
        };
        let python = |r: &Raw| Frame::Python {
            code: CodeId(r.code),
            instruction: r.instruction,
        };
        let (mut out, mut p, mut cut) = (Vec::new(), 0, false);
        for f in native {
            if is_eval(f) && p < raw.len() {
                while p < raw.len() {
                    out.push(python(&raw[p]));
                    p += 1;
                    if raw[p - 1].group_end {
                        break;
                    }
                }
                continue;
            }
            cut |= is_eval(f) && !truncated;
            out.push(*f);
        }
        out.extend(raw[p..].iter().map(python));
        (out, cut, raw.len() - p)
    }

    #[test]
    fn merge_with_room__the_same_as_the_frame_by_frame_merge() {
        let py = Python::with_layout(
            super::super::v3_12::LAYOUT,
            no_thread_state,
            [1, 2, 3],
            ModuleId(1),
            0x100..0x200,
        );
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let mut merged = 0;
        for case in 0..4000 {
            let native: Vec<Frame> = (0..next(40))
                .map(|_| match next(8) {
                    0 => Frame::Unknown { address: 0x150 },
                    k => Frame::Native {
                        module: ModuleId(1 + u32::from(k == 1)),
                        offset: 0xf0 + next(0x120),
                        return_address: next(2) == 0,
                    },
                })
                .collect();
            let raw: Vec<Raw> = (0..1 + next(30))
                .map(|i| Raw {
                    code: i as u32,
                    instruction: next(100) as u32,
                    group_end: next(3) == 0,
                    ..Raw::default()
                })
                .collect();
            let truncated = next(4) == 0;
            let room = native.len() + raw.len() + next(3) as usize;
            let mut out = vec![Frame::default(); room];
            out[..native.len()].copy_from_slice(&native);
            let got = py.merge_with_room(&raw, truncated, &mut out, native.len());
            let (want, cut, unmatched) = reference(&native, &raw, truncated);
            let Some((w, spliced, got_cut, got_unmatched)) = got else {
                // Only without an eval-loop frame; nothing written.
                assert_eq!(unmatched, raw.len(), "case {case}");
                assert_eq!(&out[..native.len()], &native[..], "case {case}");
                continue;
            };
            merged += 1;
            assert_eq!(&out[..w], &want[..], "case {case}");
            assert_eq!(
                (spliced, got_cut, got_unmatched),
                (raw.len(), cut, unmatched),
                "case {case}"
            );
        }
        assert!(merged > 2000, "{merged}");
    }
}
