//! `resolve()`: the code table. A code object's name, file, first line and
//! line table are copied into the arena the first time it is seen, and
//! resolved to `module.function (file:line)` later, off the hot path.

use std::sync::atomic::{AtomicU64, Ordering};

use super::layout::LineTable;
use super::memo::{CodeMemo, MemoEntry, code_hash};
use super::memory::Known;
use super::{CODE_SLOTS, Python, PythonFrame, linetable, reason};

use crate::frame::CodeId;

impl Python {
    /// `true` if the code table or its arena filled up (later code objects are
    /// shown unresolved).
    pub fn code_table_full(&self) -> bool {
        self.overflow.load(Ordering::Relaxed)
    }

    /// Resolves a Python frame to `module.function`, file and line. Off the hot
    /// path (allocates the strings).
    pub fn resolve(&self, code: CodeId, instruction: u32) -> Option<PythonFrame> {
        let slot = self.codes.get(code.0 as usize)?;
        if slot.state.load(Ordering::Acquire) != 2 {
            return None;
        }
        let text = |r: &AtomicU64| {
            String::from_utf8_lossy(self.arena_slice(r.load(Ordering::Relaxed))).into_owned()
        };
        let qualname = text(&slot.qualname);
        let file = text(&slot.file);
        let table = self.arena_slice(slot.line_table.load(Ordering::Relaxed));
        let first = slot.first_line.load(Ordering::Relaxed) as i32;
        let line = match self.layout.line_table {
            LineTable::V310 => linetable::line_310(table, first, instruction.saturating_mul(2)),
            LineTable::Locations => linetable::line_locations(table, first, instruction),
        };
        let stem = file.rsplit('/').next().unwrap_or(&file);
        let module = stem.strip_suffix(".py").unwrap_or(stem);
        Some(PythonFrame {
            function: format!("{module}.{qualname}"),
            file,
            line: line.unwrap_or(0),
        })
    }

    pub(super) fn arena_slice(&self, packed: u64) -> &[u8] {
        let (start, len) = ((packed >> 32) as usize, (packed & 0xffff_ffff) as usize);
        let Some(cells) = self.arena.get(start..start + len) else {
            return &[];
        };
        // SAFETY: published bytes are never written again (see `impl Sync`);
        // UnsafeCell<u8> has u8's layout.
        unsafe { std::slice::from_raw_parts(cells.as_ptr().cast::<u8>(), len) }
    }

    /// The code table index of a code object, copying it the first time,
    /// with what identifies the object (its first line and line table's
    /// address). `live`: the code object of a frame proven live (`tile_to`),
    /// read without a probe, as are the name, file and line table it holds
    /// references to.
    pub(super) fn code_id(
        &self,
        code: u64,
        mem: &mut Known,
        live: bool,
    ) -> Result<(u32, u32, u64), &'static str> {
        let l = &self.layout;
        if !code.is_multiple_of(8) || !(live || self.readable(code, self.code_span, mem)) {
            return Err(reason::CODE_UNREADABLE);
        }
        // SAFETY: inside the code object, live or just checked readable.
        let rd = |a: u64| unsafe { (a as *const u64).read_unaligned() };
        if rd(code + l.ob_type) != self.code_type {
            return Err(reason::CODE_TYPE);
        }
        // SAFETY: as above.
        let first_line =
            unsafe { ((code + l.code_firstlineno) as *const i32).read_unaligned() } as u32;
        let table_ptr = rd(code + l.code_linetable);
        // The thread's own memo first: the shared table's slot is a cache
        // line other threads write, and one more line per frame. The memo
        // checks what the table checks (the type above, the first line and
        // the line table's address), so it answers as the table would.
        let m = CodeMemo::index(code);
        if let Some(e) = mem.codes.as_deref().map(|c| c.entries[m])
            && e.code == code
            && e.first_line == first_line
            && e.line_table == table_ptr
        {
            return Ok((e.id, first_line, table_ptr));
        }
        let id = self.code_slot(code, first_line, table_ptr, mem, live)?;
        if let Some(c) = mem.codes.as_deref_mut()
            && id != u32::MAX
        {
            c.entries[m] = MemoEntry {
                code,
                line_table: table_ptr,
                first_line,
                id,
            };
        }
        Ok((id, first_line, table_ptr))
    }

    /// The shared table's slot of a code object (see [`Python::code_id`]).
    fn code_slot(
        &self,
        code: u64,
        first_line: u32,
        table_ptr: u64,
        mem: &mut Known,
        live: bool,
    ) -> Result<u32, &'static str> {
        let l = &self.layout;
        // SAFETY: the caller read the code object's header the same way.
        let rd = |a: u64| unsafe { (a as *const u64).read_unaligned() };
        let start = (code_hash(code) >> 40) as usize % CODE_SLOTS;
        for i in 0..32 {
            let idx = (start + i) % CODE_SLOTS;
            let slot = &self.codes[idx];
            let key = slot.key.load(Ordering::Acquire);
            if key == code {
                if slot.state.load(Ordering::Acquire) == 2
                    && slot.first_line.load(Ordering::Relaxed) == first_line
                    && slot.line_table_ptr.load(Ordering::Relaxed) == table_ptr
                {
                    return Ok(idx as u32);
                }
                // Being written by another thread, or a new code object at a
                // freed one's address: take another slot.
                continue;
            }
            if key == 0
                && slot
                    .key
                    .compare_exchange(0, code, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
            {
                slot.state.store(1, Ordering::Relaxed);
                let qualname = self.copy_str(rd(code + l.code_qualname), mem, live)?;
                let file = self.copy_str(rd(code + l.code_filename), mem, live)?;
                let table = self.copy_bytes(table_ptr, mem, live)?;
                slot.first_line.store(first_line, Ordering::Relaxed);
                slot.line_table_ptr.store(table_ptr, Ordering::Relaxed);
                slot.qualname.store(qualname, Ordering::Relaxed);
                slot.file.store(file, Ordering::Relaxed);
                slot.line_table.store(table, Ordering::Relaxed);
                slot.state.store(2, Ordering::Release);
                return Ok(idx as u32);
            }
        }
        self.overflow.store(true, Ordering::Relaxed);
        Ok(u32::MAX)
    }

    /// Copies a `str` object's text into the arena as UTF-8.
    pub(super) fn copy_str(
        &self,
        obj: u64,
        mem: &mut Known,
        live: bool,
    ) -> Result<u64, &'static str> {
        let l = &self.layout;
        let mut head = [0u8; 128];
        let hlen = l.compact_size as usize;
        if !obj.is_multiple_of(8)
            || hlen > head.len()
            || !self.safe_read(obj, &mut head[..hlen], mem, live)
        {
            return Err(reason::STRING);
        }
        let field = |o: u64, n: usize| -> Option<u64> {
            let b = head.get(o as usize..(o as usize).checked_add(n)?)?;
            let mut v = [0u8; 8];
            v[..n].copy_from_slice(b);
            Some(u64::from_le_bytes(v))
        };
        let (Some(ty), Some(len), Some(state)) = (
            field(l.ob_type, 8),
            field(l.unicode_length, 8),
            field(l.unicode_state, 4),
        ) else {
            return Err(reason::STRING);
        };
        if ty != self.unicode_type {
            return Err(reason::STRING);
        }
        let len = len.min(1024) as usize;
        let (kind, compact, ascii) = ((state >> 2) & 7, (state >> 5) & 1, (state >> 6) & 1);
        if compact == 0 || !(1..=4).contains(&kind) || kind == 3 {
            return Err(reason::STRING);
        }
        let data = obj
            + if ascii == 1 {
                l.ascii_size
            } else {
                l.compact_size
            };
        let mut buf = [0u8; 4096];
        let raw = &mut buf[..len * kind as usize];
        if !self.safe_read(data, raw, mem, live) {
            return Err(reason::STRING);
        }
        let mut utf8 = [0u8; 4096];
        let mut w = 0;
        for c in raw.chunks_exact(kind as usize) {
            let cp = match kind {
                1 => u32::from(c[0]),
                2 => u32::from(u16::from_le_bytes([c[0], c[1]])),
                _ => u32::from_le_bytes([c[0], c[1], c[2], c[3]]),
            };
            let ch = char::from_u32(cp).unwrap_or('?');
            if w + ch.len_utf8() > utf8.len() {
                break;
            }
            w += ch.encode_utf8(&mut utf8[w..]).len();
        }
        Ok(self.arena_put(&utf8[..w]))
    }

    /// Copies a `bytes` object's contents into the arena.
    pub(super) fn copy_bytes(
        &self,
        obj: u64,
        mem: &mut Known,
        live: bool,
    ) -> Result<u64, &'static str> {
        let l = &self.layout;
        let mut head = [0u8; 64];
        let n = l.bytes_data as usize;
        if !obj.is_multiple_of(8)
            || n > head.len()
            || !self.safe_read(obj, &mut head[..n], mem, live)
        {
            return Err(reason::LINE_TABLE);
        }
        let field = |o: u64| -> Option<u64> {
            Some(u64::from_le_bytes(
                head.get(o as usize..o as usize + 8)?.try_into().ok()?,
            ))
        };
        let (Some(ty), Some(len)) = (field(l.ob_type), field(l.bytes_size)) else {
            return Err(reason::LINE_TABLE);
        };
        if ty != self.bytes_type {
            return Err(reason::LINE_TABLE);
        }
        let len = len as usize;
        if len > 1 << 20 {
            return Err(reason::LINE_TABLE);
        }
        let Some(start) = self.arena_reserve(len) else {
            return Ok(0);
        };
        // SAFETY: the reserved range is ours alone until published.
        let dst = unsafe {
            std::slice::from_raw_parts_mut(self.arena[start..start + len].as_ptr() as *mut u8, len)
        };
        if !self.safe_read(obj + l.bytes_data, dst, mem, live) {
            return Err(reason::LINE_TABLE);
        }
        Ok((start as u64) << 32 | len as u64)
    }

    pub(super) fn arena_reserve(&self, len: usize) -> Option<usize> {
        let start = self.arena_used.fetch_add(len, Ordering::Relaxed);
        if start + len > self.arena.len() {
            self.overflow.store(true, Ordering::Relaxed);
            return None;
        }
        Some(start)
    }

    pub(super) fn arena_put(&self, bytes: &[u8]) -> u64 {
        let Some(start) = self.arena_reserve(bytes.len()) else {
            return 0;
        };
        for (cell, b) in self.arena[start..start + bytes.len()].iter().zip(bytes) {
            // SAFETY: the reserved range is ours alone until published.
            unsafe { *cell.get() = *b };
        }
        (start as u64) << 32 | bytes.len() as u64
    }
}
