//! The module table both unwinders search: built from each module's unwind
//! sections, and searched by address.

use std::ops::{Deref, Range};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use framehop::x86_64::UnwinderX86_64;
use framehop::{ExplicitModuleSectionInfo, MustNotAllocateDuringUnwind, Unwinder as _};
use gimli::BaseAddresses;

use crate::fallible;
use crate::frame::ModuleId;

/// Bytes of an unwind section: in place in this process's memory (a loaded module),
/// or in a mapped file (out-of-process mode).
#[derive(Clone)]
pub(crate) enum Bytes {
    /// Memory of a module loaded in this process.
    InPlace { ptr: *const u8, len: usize },
    /// Part of a mapped file.
    File {
        map: Arc<memmap2::Mmap>,
        range: Range<usize>,
    },
}

// SAFETY: `InPlace` points at read-only sections of a loaded module, which any
// thread may read while the module stays loaded (the local unwinder's contract).
unsafe impl Send for Bytes {}
// SAFETY: as for `Send`: the bytes are never written through this type.
unsafe impl Sync for Bytes {}

impl Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            // SAFETY: built by `LocalTable` from a loaded module's segment, which
            // stays mapped while the module is loaded; removed modules are never
            // read (see `local`'s unload check).
            Bytes::InPlace { ptr, len } => unsafe { std::slice::from_raw_parts(*ptr, *len) },
            Bytes::File { map, range } => &map[range.clone()],
        }
    }
}

/// Call frame information of one module, for the "is this address covered by an
/// FDE" check that framehop does not expose (it silently falls back to frame
/// pointers, which gives garbage in code without frame pointers).
pub(crate) struct Cfi {
    pub eh_frame: Bytes,
    pub eh_frame_svma: u64,
    pub hdr: Option<(Bytes, u64)>,
    pub text_svma: u64,
}

impl Cfi {
    pub(crate) fn bases(&self) -> BaseAddresses {
        let b = BaseAddresses::default()
            .set_eh_frame(self.eh_frame_svma)
            .set_text(self.text_svma);
        match &self.hdr {
            Some((_, svma)) => b.set_eh_frame_hdr(*svma),
            None => b,
        }
    }
}

/// One module in a table.
pub(crate) struct Entry {
    pub id: ModuleId,
    /// Executable range (absolute addresses).
    pub avma: Range<u64>,
    /// Load bias: absolute address minus ELF virtual address.
    pub bias: u64,
    pub cfi: Option<Cfi>,
    /// For the local unwinder's unload check: the module's `.eh_frame_hdr` address
    /// as `_dl_find_object` reports it (0 if none).
    pub eh_frame_hdr_avma: u64,
    /// Every executable segment is also readable (`PF_R`): the local unwinder
    /// may read its code (to recognize a signal return trampoline).
    pub text_readable: bool,
}

/// Modules sorted by address, and a framehop unwinder over the same modules.
pub(crate) struct Table {
    pub entries: Vec<Entry>,
    /// `entries[i].avma.start`, searched apart: eight per cache line.
    starts: Vec<u64>,
    /// The end of the highest module's executable range.
    end: u64,
    /// The module of each hashed region (`1 << shift` bytes) of the address
    /// space: 0 for none, index + 1 for the only module whose executable
    /// range touches the regions hashed there, `u32::MAX` for several.
    slots: Box<[u32]>,
    /// Log2 of the region size of `slots`.
    shift: u32,
    /// Unique per table: keys the coverage cache, shared by tables over time.
    pub generation: u64,
    /// Unique per table, unlike `generation` (which an extra table shares with
    /// its main one): keys the walk's per-depth memo, which holds entry indices.
    id: u64,
    pub unwinder: UnwinderX86_64<Bytes, MustNotAllocateDuringUnwind>,
}

/// The tables a walk searches: the main one, and the modules added to it
/// since it was built (a `dlopen`), which share its generation.
#[derive(Clone, Copy)]
pub(crate) struct Tables<'a> {
    pub main: &'a Table,
    pub extra: Option<&'a Table>,
}

impl<'a> Tables<'a> {
    pub fn one(main: &'a Table) -> Self {
        Tables { main, extra: None }
    }

    /// The module whose executable range holds `address`.
    pub(crate) fn find(&self, address: u64) -> Option<Found<'a>> {
        if let Some(i) = self.main.find_index(address) {
            return self.get(i as u32);
        }
        let extra = self.extra?;
        let i = extra.find_index(address)?;
        self.get(u32::try_from(self.main.entries.len() + i).ok()?)
    }

    /// The module at `index` (main table first, then the extra one).
    pub(crate) fn get(&self, index: u32) -> Option<Found<'a>> {
        let i = index as usize;
        let (entry, table) = match self.main.entries.get(i) {
            Some(e) => (e, self.main),
            None => {
                let extra = self.extra?;
                (extra.entries.get(i - self.main.entries.len())?, extra)
            }
        };
        Some(Found {
            entry,
            table,
            index,
        })
    }

    /// What identifies these tables for the memo.
    pub(crate) fn ids(&self) -> (u64, u64) {
        (self.main.id, self.extra.map_or(0, |t| t.id))
    }
}

/// A module the walk found, with its table and its index in [`Tables`].
#[derive(Clone, Copy)]
pub(crate) struct Found<'a> {
    pub entry: &'a Entry,
    pub table: &'a Table,
    pub index: u32,
}

/// A number no table had before (never 0).
pub(crate) fn unique() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

impl Table {
    pub fn new(entries: Vec<Entry>, name_of: impl Fn(ModuleId) -> String) -> Table {
        Table::with_generation(entries, name_of, unique())
    }

    /// A table whose rules are cached under `generation`: another table's,
    /// when this one only adds modules at addresses that one does not cover.
    pub fn with_generation(
        entries: Vec<Entry>,
        name_of: impl Fn(ModuleId) -> String,
        generation: u64,
    ) -> Table {
        Table::try_with_generation(entries, |id| Some(name_of(id)), generation)
            .expect("memory for a module table")
    }

    /// [`Table::with_generation`], or `None` when memory is short: its own
    /// allocations are fallible (`name_of` too, a name it refuses leaves the
    /// module unnamed), framehop's (a few hundred bytes a module) are not.
    pub fn try_with_generation(
        mut entries: Vec<Entry>,
        name_of: impl Fn(ModuleId) -> Option<String>,
        generation: u64,
    ) -> Option<Table> {
        // Unstable: a stable sort allocates; the modules do not overlap.
        entries.sort_unstable_by_key(|e| e.avma.start);
        let (slots, shift) = slots_of(&entries)?;
        let mut starts = fallible::vec(entries.len())?;
        starts.extend(entries.iter().map(|e| e.avma.start));
        let mut unwinder = UnwinderX86_64::new();
        for e in &entries {
            let Some(cfi) = &e.cfi else { continue };
            let info = ExplicitModuleSectionInfo {
                base_svma: 0,
                text_svma: Some(cfi.text_svma..e.avma.end - e.bias),
                eh_frame_svma: Some(
                    cfi.eh_frame_svma..cfi.eh_frame_svma + cfi.eh_frame.len() as u64,
                ),
                eh_frame: Some(cfi.eh_frame.clone()),
                eh_frame_hdr_svma: cfi
                    .hdr
                    .as_ref()
                    .map(|(b, svma)| *svma..*svma + b.len() as u64),
                eh_frame_hdr: cfi.hdr.as_ref().map(|(b, _)| b.clone()),
                text: None,
                stubs_svma: None,
                stub_helper_svma: None,
                got_svma: None,
                unwind_info: None,
                debug_frame: None,
                text_segment_svma: None,
                text_segment: None,
            };
            unwinder.add_module(framehop::Module::new(
                name_of(e.id).unwrap_or_default(),
                e.avma.clone(),
                e.bias,
                info,
            ));
        }
        Some(Table {
            slots,
            shift,
            starts,
            end: entries.iter().map(|e| e.avma.end).max().unwrap_or(0),
            entries,
            generation,
            id: unique(),
            unwinder,
        })
    }

    /// The module whose executable range holds `address`.
    pub fn find(&self, address: u64) -> Option<&Entry> {
        self.entries.get(self.find_index(address)?)
    }

    /// The index in `entries` of the module whose executable range holds `address`.
    fn find_index(&self, address: u64) -> Option<usize> {
        // Most words a stack scan tries are no code address at all (stack
        // and heap pointers, counters): outside every module, said at once.
        if address < *self.starts.first()? || address >= self.end {
            return None;
        }
        // Most lookups end at the one module their region may hold: no search.
        let i = match self.slots.get(slot_of(address, self.shift)) {
            Some(&u32::MAX) => self
                .starts
                .partition_point(|&s| s <= address)
                .checked_sub(1)?,
            Some(&i) => (i as usize).checked_sub(1)?,
            None => return None,
        };
        self.entries.get(i)?.avma.contains(&address).then_some(i)
    }
}

/// Log2 of the slots in [`Table`]'s region index (8192 slots: 32 KiB).
const SLOT_BITS: u32 = 13;

/// The slot of the region (`1 << shift` bytes) that holds `address`: a
/// multiplicative hash of the region's number, so that neighbours spread.
fn slot_of(address: u64, shift: u32) -> usize {
    ((address >> shift).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - SLOT_BITS)) as usize
}

/// The region index of `entries` (sorted, not overlapping) and its region
/// size: the smallest, from a page up, at which the modules touch at most
/// half as many regions as there are slots. Each slot holds the module
/// whose range touches a region hashed there, or says there are several.
/// `None` when memory is short.
fn slots_of(entries: &[Entry]) -> Option<(Box<[u32]>, u32)> {
    let ranges = || entries.iter().map(|e| &e.avma).filter(|r| r.start < r.end);
    let regions = |shift: u32| -> u64 {
        ranges()
            .map(|r| ((r.end - 1) >> shift) - (r.start >> shift) + 1)
            .sum()
    };
    let shift = (12..63)
        .find(|&shift| regions(shift) <= 1 << (SLOT_BITS - 1))
        .unwrap_or(63);
    // On the heap directly: `Box::new` of an array builds it on the stack
    // first in unoptimized builds, and a table may be built on a sigaltstack.
    let mut slots = fallible::slice(1 << SLOT_BITS, 0u32)?;
    for (i, e) in entries.iter().enumerate() {
        let r = &e.avma;
        if r.start >= r.end {
            continue;
        }
        let here = u32::try_from(i + 1).unwrap_or(u32::MAX);
        for region in (r.start >> shift)..=((r.end - 1) >> shift) {
            let slot = &mut slots[slot_of(region << shift, shift)];
            *slot = if *slot == 0 || *slot == here {
                here
            } else {
                u32::MAX
            };
        }
    }
    Some((slots, shift))
}

#[cfg(test)]
#[allow(non_snake_case)]
pub(crate) mod tests {
    use super::*;

    /// An FDE's `cfa` that means a frame-pointer frame: CFA = rbp + 16, the
    /// caller's rbp saved at CFA - 16.
    pub(crate) const RBP_FRAME: u8 = 0xff;
    /// An FDE with CFA = rsp + 16 that saves rbp at CFA - 16 (code without
    /// frame pointers that uses rbp as an ordinary register).
    pub(crate) const SAVES_RBP: u8 = 0xfe;

    /// `.eh_frame` bytes: a CIE (CFA = rsp + 8, return address at CFA - 8,
    /// addresses as absolute 8-byte pointers), then per `(start, len, cfa)` an
    /// FDE with CFA = rsp + cfa (or [`RBP_FRAME`]).
    pub(crate) fn eh_frame(fdes: &[(u64, u64, u8)]) -> Vec<u8> {
        // Id 0, version 1, no augmentation, code alignment 1, data alignment
        // -8, return address r16; DW_CFA_def_cfa rsp 8; DW_CFA_offset r16 at
        // CFA - 8; two DW_CFA_nop.
        let cie = [0, 0, 0, 0, 1, 0, 1, 0x78, 16, 0x0c, 7, 8, 0x90, 1, 0, 0];
        let mut b = (cie.len() as u32).to_le_bytes().to_vec();
        b.extend_from_slice(&cie);
        for &(start, len, cfa) in fdes {
            // The CIE pointer: from itself back to the CIE at 0.
            let mut fde = (b.len() as u32 + 4).to_le_bytes().to_vec();
            fde.extend_from_slice(&start.to_le_bytes());
            fde.extend_from_slice(&len.to_le_bytes());
            if cfa == RBP_FRAME {
                // DW_CFA_def_cfa rbp 16; DW_CFA_offset rbp at CFA - 16; nops.
                fde.extend_from_slice(&[0x0c, 6, 16, 0x86, 2, 0, 0, 0]);
            } else if cfa == SAVES_RBP {
                // DW_CFA_def_cfa_offset 16; DW_CFA_offset rbp at CFA - 16; nops.
                fde.extend_from_slice(&[0x0e, 16, 0x86, 2, 0, 0, 0, 0]);
            } else {
                // DW_CFA_def_cfa_offset cfa; two DW_CFA_nop.
                fde.extend_from_slice(&[0x0e, cfa, 0, 0]);
            }
            b.extend_from_slice(&(fde.len() as u32).to_le_bytes());
            b.extend_from_slice(&fde);
        }
        b.extend_from_slice(&0u32.to_le_bytes());
        b
    }

    /// A module `id` at `avma` (bias 0) with the FDEs of [`eh_frame`].
    pub(crate) fn module(id: u32, avma: Range<u64>, fdes: &[(u64, u64, u8)]) -> Entry {
        let bytes = eh_frame(fdes);
        let mut map = memmap2::MmapOptions::new()
            .len(bytes.len())
            .map_anon()
            .unwrap();
        map.copy_from_slice(&bytes);
        let map = Arc::new(map.make_read_only().unwrap());
        Entry {
            id: ModuleId(id),
            avma,
            bias: 0,
            cfi: Some(Cfi {
                eh_frame: Bytes::File {
                    map,
                    range: 0..bytes.len(),
                },
                eh_frame_svma: 0,
                hdr: None,
                text_svma: 0,
            }),
            eh_frame_hdr_avma: 0,
            text_readable: true,
        }
    }

    #[test]
    fn find__every_address_of_modules_over_many_regions_is_found() {
        // An executable and libraries as a process has them: one module over
        // many regions, heap between them, and small modules that share
        // pages (several modules in one region, so in one slot).
        let mut ranges = vec![
            0x5555_5555_4000..0x5555_5560_0000,
            0x7f12_3400_1000..0x7f12_3530_0000,
            0x7f12_3530_4000..0x7f12_3531_0000,
            0x7f12_3600_1000..0x7f12_3600_2000,
        ];
        ranges.extend((0..16).map(|k| {
            let start = 0x7f12_3700_0000 + k * 0x800;
            start..start + 0x700
        }));
        let entries: Vec<Entry> = (0..)
            .zip(&ranges)
            .map(|(id, r)| module(id, r.clone(), &[]))
            .collect();
        let t = Table::new(entries, |_| String::new());
        let expected = |a: u64| {
            (0..)
                .zip(&ranges)
                .find(|(_, r)| r.contains(&a))
                .map(|(id, _)| ModuleId(id))
        };
        let mut probes = Vec::new();
        for r in &ranges {
            probes.extend([r.start - 1, r.start, r.end - 1, r.end]);
            probes.extend((r.start..r.end).step_by(0x1_0000));
        }
        probes.extend((0x5555_5560_0000..0x5555_5580_0000).step_by(0x1000));
        probes.extend((0x7f12_3000_0000..0x7f12_3800_0000).step_by(0x8_0000));
        probes.extend((0x7f12_36ff_f000..0x7f12_3701_0000).step_by(0x80));
        for a in probes {
            assert_eq!(t.find(a).map(|e| e.id), expected(a), "{a:#x}");
        }
    }
}
