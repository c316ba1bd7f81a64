//! `splice()`: the thread state → the frame chain, walked through the live
//! data-stack chunks (3.11+) → (code, instruction) per frame, grouped by
//! eval-loop invocation, each group replacing one native
//! `_PyEval_EvalFrameDefault` frame.

use std::mem::MaybeUninit;
use std::sync::atomic::Ordering;

use super::layout::{FrameKind, FrameWords};
use super::memory::Known;
use super::{CodeMemo, MAX_PYTHON_FRAMES, Python, reason};

use crate::frame::{Captured, CodeId, Frame, StackEnd, Stats};
use crate::table::Table;

/// Data-stack chunks a capture reads without probes; frames in older chunks
/// are probed.
pub(super) const MAX_CHUNKS: usize = 16;
/// Bytes of a chunk's header (`previous`, `size`, `top`) before its frames.
pub(super) const CHUNK_DATA: u64 = 24;

/// The live parts `[lo, hi)` of the thread's data-stack chunks, current chunk
/// first, and per chunk the last frame proven live (`tile_to`).
pub(super) struct Chunks {
    pub(super) n: usize,
    pub(super) lo: [u64; MAX_CHUNKS],
    pub(super) hi: [u64; MAX_CHUNKS],
    pub(super) cursor: [u64; MAX_CHUNKS],
}

impl Chunks {
    /// The chunk holding `[addr, addr+len)` in its live part.
    pub(super) fn find(&self, addr: u64, len: u64) -> Option<usize> {
        let end = addr.checked_add(len)?;
        (0..self.n).find(|&k| self.lo[k] <= addr && end <= self.hi[k])
    }
}

/// One Python frame as read.
#[derive(Clone, Copy, Default)]
pub(super) struct Raw {
    pub(super) code: u32,
    pub(super) instruction: u32,
    /// This frame is the outermost of its eval-loop invocation.
    pub(super) group_end: bool,
    /// The code object's address, until `code` is set from it.
    pub(super) code_ptr: u64,
    /// The frame's address when it lies in the data stack, else 0.
    pub(super) in_stack: u64,
    /// The data-stack chunk it lies in (when `in_stack` is set).
    pub(super) chunk: u8,
}

impl Python {
    /// Reads the calling thread's Python frames and splices them into the native
    /// frames `out[..captured.len]`. `stack` is the thread's stack mapping.
    pub(crate) fn splice(
        &self,
        _table: &Table,
        stats: &Stats,
        stack: (u64, u64),
        out: &mut [Frame],
        captured: &mut Captured,
        codes: Option<&mut CodeMemo>,
    ) {
        if self.disabled.load(Ordering::Relaxed) != 0 {
            return;
        }
        // SAFETY: the interpreter's lock-free accessor (see the module docs).
        let tstate = unsafe { (self.this_thread_state)() } as u64;
        if tstate == 0 {
            return;
        }
        // Uninitialized: zeroing these two buffers cost more than the walk itself.
        let mut raw = [const { MaybeUninit::<Raw>::uninit() }; MAX_PYTHON_FRAMES];
        let mut mem = Known::with_codes(stack, codes);
        let read = self.read_chain(tstate, &mut mem, &mut raw);
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
            return;
        }
        Stats::bump(&stats.python_stacks);
        // SAFETY: read_chain initialized `raw[..n]`; MaybeUninit<Raw> has Raw's layout.
        let raw: &[Raw] = unsafe { std::slice::from_raw_parts(raw.as_ptr().cast::<Raw>(), n) };
        // Merge: each native eval-loop frame becomes its group of Python frames.
        let mut native = [const { MaybeUninit::<Frame>::uninit() }; crate::MAX_FRAMES];
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
    /// objects only after a probe in this capture.
    pub(super) fn read_chain(
        &self,
        tstate: u64,
        mem: &mut Known,
        raw: &mut [MaybeUninit<Raw>],
    ) -> Result<(usize, bool), &'static str> {
        let l = &self.layout;
        // The thread state is the interpreter's own, live while the thread is.
        let rd = |a: u64| -> u64 {
            // SAFETY: inside the live PyThreadState / _PyCFrame of this thread,
            // or a frame checked readable by the caller of `rd`.
            unsafe { (a as *const u64).read_unaligned() }
        };
        let mut frame = rd(tstate + l.tstate_frame);
        if let Some(off) = l.cframe_current {
            if frame == 0 {
                return Ok((0, false));
            }
            if !self.readable(frame, off + 8, mem) {
                return Err(reason::CHAIN);
            }
            frame = rd(frame + off);
        }
        if frame == 0 {
            return Ok((0, false));
        }
        let mut chunks = self.data_stack(tstate);
        let mut n: usize = 0;
        let mut steps = 0;
        let mut truncated = false;
        // Consecutive frames mostly share a chunk: try the last one first.
        let mut last_chunk = 0;
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
            let previous = rd(frame + l.frame_previous);
            let owner = l.frame_owner.map(|o| {
                // SAFETY: within the frame just checked.
                unsafe { *((frame + o) as *const u8) }
            });
            if let FrameKind::Interpreter {
                cstack_owner: Some(cs),
            } = l.frame_kind
                && owner == Some(cs)
            {
                // The shim frame of an eval-loop invocation: the frames before it
                // (inner) were that invocation's.
                if let Some(last) = n.checked_sub(1) {
                    // SAFETY: `raw[..n]` is initialized.
                    unsafe { raw[last].assume_init_mut().group_end = true };
                }
                frame = previous;
                continue;
            }
            if n == raw.len() {
                truncated = true;
                break;
            }
            let code = rd(frame + l.frame_code);
            let instruction = match l.frame_kind {
                FrameKind::Object => {
                    // SAFETY: within the frame just checked.
                    let lasti = unsafe { ((frame + l.frame_instr) as *const i32).read_unaligned() };
                    lasti.max(0) as u32
                }
                FrameKind::Interpreter { .. } => {
                    let ptr = rd(frame + l.frame_instr);
                    let base = code + l.code_adaptive.unwrap_or(0);
                    if ptr < base || ptr - base > (64 << 20) {
                        return Err(reason::INSTRUCTION);
                    }
                    ((ptr - base) / 2) as u32
                }
            };
            let is_entry = l.frame_is_entry.is_some_and(|o| {
                // SAFETY: within the frame just checked.
                unsafe { *((frame + o) as *const u8) != 0 }
            });
            raw[n].write(Raw {
                code: 0,
                instruction,
                group_end: l.frame_kind == FrameKind::Object || is_entry,
                code_ptr: code,
                in_stack: if chunk.is_some() { frame } else { 0 },
                chunk: chunk.unwrap_or(0) as u8,
            });
            n += 1;
            frame = previous;
        }
        // Outermost first: each chunk is tiled once, from its first frame.
        // SAFETY: `raw[..n]` is initialized; MaybeUninit<Raw> has Raw's layout.
        let read: &mut [Raw] =
            unsafe { std::slice::from_raw_parts_mut(raw.as_mut_ptr().cast::<Raw>(), n) };
        for r in read.iter().rev().filter(|r| r.in_stack != 0) {
            self.tile_to(&mut chunks, usize::from(r.chunk), r.in_stack)?;
        }
        let unproven = read.iter().filter(|r| r.in_stack == 0).map(|r| r.code_ptr);
        self.probe_code_pages(unproven, mem)?;
        for r in read.iter_mut() {
            r.code = self.code_id(r.code_ptr, mem, r.in_stack != 0)?;
        }
        Ok((n, truncated))
    }
}
