//! The module table both unwinders search, and the one native walk loop they share.

use std::ops::{Deref, Range};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::{
    AllocationPolicy, Error as FhError, ExplicitModuleSectionInfo, FrameAddress,
    MustNotAllocateDuringUnwind, Unwinder as _,
};
use gimli::{BaseAddresses, EhFrame, EhFrameHdr, LittleEndian, ParsedEhFrameHdr, UnwindSection};

use crate::frame::{Frame, ModuleId, StackEnd};

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
    fn bases(&self) -> BaseAddresses {
        let b = BaseAddresses::default()
            .set_eh_frame(self.eh_frame_svma)
            .set_text(self.text_svma);
        match &self.hdr {
            Some((_, svma)) => b.set_eh_frame_hdr(*svma),
            None => b,
        }
    }

    /// How to unwind `svma`: not at all (no FDE covers it), by framehop, or by
    /// the frame-pointer-with-offset rule framehop cannot cache (see [`Rule`]).
    /// Allocation-free (gimli parses in place, with fixed-size unwind state).
    fn rule(&self, svma: u64, ctx: &mut GimliContext) -> Rule {
        let bases = self.bases();
        let mut eh = EhFrame::new(&self.eh_frame, LittleEndian);
        eh.set_address_size(8);
        let fde = match &self.hdr {
            Some((hdr, _)) => {
                let parsed: Option<ParsedEhFrameHdr<_>> =
                    EhFrameHdr::new(hdr, LittleEndian).parse(&bases, 8).ok();
                match parsed.as_ref().and_then(|p| p.table()) {
                    Some(table) => {
                        table.fde_for_address(&eh, &bases, svma, EhFrame::cie_from_offset)
                    }
                    None => eh.fde_for_address(&bases, svma, EhFrame::cie_from_offset),
                }
            }
            // No index: a linear scan, as rare as modules without .eh_frame_hdr.
            None => eh.fde_for_address(&bases, svma, EhFrame::cie_from_offset),
        };
        let Ok(fde) = fde else {
            return Rule::NotCovered;
        };
        let Ok(row) = fde.unwind_info_for_address(&eh, &bases, ctx, svma) else {
            return Rule::Framehop;
        };
        use gimli::{CfaRule, RegisterRule, X86_64};
        match (
            row.cfa(),
            row.register(X86_64::RBP),
            row.register(X86_64::RA),
        ) {
            (
                CfaRule::RegisterAndOffset {
                    register: X86_64::RBP,
                    offset: cfa,
                },
                Some(RegisterRule::Offset(bp)),
                Some(RegisterRule::Offset(-8)),
            ) if !(*cfa == 16 && bp == -16) => match (i32::try_from(*cfa), i32::try_from(bp)) {
                (Ok(cfa), Ok(bp)) => Rule::BpOffset { cfa, bp },
                _ => Rule::Framehop,
            },
            _ => Rule::Framehop,
        }
    }
}

/// gimli's unwind state, in fixed-size storage (framehop's, for the no-allocation
/// policy).
type GimliContext = gimli::UnwindContext<
    usize,
    <MustNotAllocateDuringUnwind as AllocationPolicy>::GimliUnwindContextStorage<usize>,
>;

/// How the walk unwinds one address.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Rule {
    /// No FDE covers it: the walk stops with an unknown frame.
    #[default]
    NotCovered,
    /// framehop's rules (cached by framehop where it can).
    Framehop,
    /// `CFA = rbp + cfa`, `rbp = [CFA + bp]`, return address `[CFA - 8]`, other
    /// than the plain frame-pointer frame. framehop has no cacheable rule for it
    /// and reparses the FDE on every unwind; libffi's `ffi_call_unix64` (every
    /// ctypes and cffi call) is such a frame, so the walk runs it itself.
    BpOffset { cfa: i32, bp: i32 },
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
}

/// Modules sorted by address, and a framehop unwinder over the same modules.
pub(crate) struct Table {
    pub entries: Vec<Entry>,
    /// `entries[i].avma.start`, searched apart: eight per cache line.
    starts: Vec<u64>,
    /// Unique per table: keys the coverage cache, shared by tables over time.
    pub generation: u64,
    pub unwinder: UnwinderX86_64<Bytes, MustNotAllocateDuringUnwind>,
}

/// Per-thread (or per-user) scratch state of the walk: framehop's rule cache and the
/// FDE coverage cache. Allocated once; the walk itself never allocates.
pub struct UnwindCache {
    pub(crate) framehop: CacheX86_64<MustNotAllocateDuringUnwind>,
    coverage: Box<[CoverageSlot; COVERAGE_SLOTS]>,
    gimli: Box<GimliContext>,
}

const COVERAGE_SLOTS: usize = 509;

#[derive(Clone, Copy, Default)]
struct CoverageSlot {
    /// Lookup address + 1 (0 = empty), table generation, answer.
    address: u64,
    generation: u64,
    rule: Rule,
}

impl UnwindCache {
    /// A new cache (about 40 KiB).
    pub fn new() -> Self {
        UnwindCache {
            framehop: CacheX86_64::new_in(),
            coverage: Box::new([CoverageSlot::default(); COVERAGE_SLOTS]),
            gimli: Box::new(GimliContext::new_in()),
        }
    }
}

impl Default for UnwindCache {
    fn default() -> Self {
        Self::new()
    }
}

impl Table {
    pub fn new(mut entries: Vec<Entry>, name_of: impl Fn(ModuleId) -> String) -> Table {
        entries.sort_by_key(|e| e.avma.start);
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
                name_of(e.id),
                e.avma.clone(),
                e.bias,
                info,
            ));
        }
        static GENERATION: AtomicU64 = AtomicU64::new(1);
        let generation = GENERATION.fetch_add(1, Ordering::Relaxed);
        Table {
            starts: entries.iter().map(|e| e.avma.start).collect(),
            entries,
            generation,
            unwinder,
        }
    }

    /// The module whose executable range holds `address`.
    pub fn find(&self, address: u64) -> Option<&Entry> {
        let i = self.starts.partition_point(|&s| s <= address);
        let e = self.entries.get(i.checked_sub(1)?)?;
        (address < e.avma.end).then_some(e)
    }
}

/// The x86-64 registers unwinding starts from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Regs {
    /// Instruction pointer.
    pub ip: u64,
    /// Stack pointer.
    pub sp: u64,
    /// Frame pointer.
    pub bp: u64,
}

/// What the walk asks its owner about addresses outside the table.
pub(crate) trait Loader {
    /// An address in no table entry: is it inside a module loaded after the table
    /// was built (then the table is stale), or in anonymous code?
    fn loaded_elsewhere(&self, address: u64) -> bool;
    /// May the entry still be read? (The local unwinder checks modules that may
    /// have been unloaded since the table was built.)
    fn still_loaded(&self, entry: &Entry, address: u64) -> bool;
}

/// Walks the native stack: one [`Frame`] per frame into `out` (after skipping
/// `skip` frames), stopping at a root frame, code without unwind info, a failed
/// read, or a full `out`. Never allocates.
#[allow(clippy::too_many_arguments)]
pub(crate) fn walk<F>(
    table: &Table,
    regs: Regs,
    cache: &mut UnwindCache,
    read_stack: &mut F,
    loader: &impl Loader,
    mut skip: usize,
    out: &mut [Frame],
) -> (usize, StackEnd)
where
    F: FnMut(u64) -> Result<u64, ()>,
{
    let mut fh_regs = UnwindRegsX86_64::new(regs.ip, regs.sp, regs.bp);
    let mut address = FrameAddress::from_instruction_pointer(regs.ip);
    let mut len = 0;
    let mut push = |frame: Frame, skip: &mut usize| -> bool {
        if *skip > 0 {
            *skip -= 1;
            return true;
        }
        match out.get_mut(len) {
            Some(slot) => {
                *slot = frame;
                len += 1;
                true
            }
            None => false,
        }
    };
    // Consecutive frames are mostly in the same module.
    let mut last: Option<&Entry> = None;
    // Bounds the loop even if framehop's progress checks were fooled.
    for _ in 0..4096 {
        let lookup = address.address_for_lookup();
        let unknown = Frame::Unknown {
            address: address.address(),
        };
        let found = match last {
            Some(e) if e.avma.contains(&lookup) => Some(e),
            _ => table.find(lookup),
        };
        last = found;
        let Some(entry) = found else {
            let end = if loader.loaded_elsewhere(lookup) {
                StackEnd::ModuleNotInTable
            } else {
                StackEnd::NoUnwindInfo
            };
            return finish(push(unknown, &mut skip), len, end);
        };
        if !loader.still_loaded(entry, lookup) {
            return finish(push(unknown, &mut skip), len, StackEnd::ModuleNotInTable);
        }
        let rule = entry.cfi.as_ref().map_or(Rule::NotCovered, |cfi| {
            cached_rule(cache, table.generation, cfi, lookup, entry.bias)
        });
        if rule == Rule::NotCovered {
            return finish(push(unknown, &mut skip), len, StackEnd::NoUnwindInfo);
        }
        let frame = Frame::Native {
            module: entry.id,
            offset: address.address() - entry.bias,
            return_address: address.is_return_address(),
        };
        if !push(frame, &mut skip) {
            return (len, StackEnd::DepthLimit);
        }
        let step = match rule {
            Rule::BpOffset { cfa, bp } => bp_offset_step(&mut fh_regs, cfa, bp, read_stack),
            _ => {
                table
                    .unwinder
                    .unwind_frame(address, &mut fh_regs, &mut cache.framehop, read_stack)
            }
        };
        match step {
            Ok(Some(ra)) => match FrameAddress::from_return_address(ra) {
                Some(a) => address = a,
                None => return (len, StackEnd::UnwindFailed),
            },
            Ok(None) => return (len, StackEnd::Root),
            Err(FhError::CouldNotReadStack(_)) => return (len, StackEnd::StackReadFailed),
            Err(_) => return (len, StackEnd::UnwindFailed),
        }
    }
    (len, StackEnd::UnwindFailed)
}

fn finish(pushed: bool, len: usize, end: StackEnd) -> (usize, StackEnd) {
    if pushed {
        (len, end)
    } else {
        (len, StackEnd::DepthLimit)
    }
}

fn cached_rule(cache: &mut UnwindCache, generation: u64, cfi: &Cfi, avma: u64, bias: u64) -> Rule {
    let slot = &mut cache.coverage[(avma % COVERAGE_SLOTS as u64) as usize];
    if slot.address == avma.wrapping_add(1) && slot.generation == generation {
        return slot.rule;
    }
    let rule = cfi.rule(avma - bias, &mut cache.gimli);
    *slot = CoverageSlot {
        address: avma.wrapping_add(1),
        generation,
        rule,
    };
    rule
}

/// One step by [`Rule::BpOffset`], with framehop's contract: the caller's return
/// address, or `None` at the end of the stack; the stack must move up.
fn bp_offset_step<F>(
    regs: &mut UnwindRegsX86_64,
    cfa: i32,
    bp: i32,
    read_stack: &mut F,
) -> Result<Option<u64>, FhError>
where
    F: FnMut(u64) -> Result<u64, ()>,
{
    let cfa = regs
        .bp()
        .checked_add_signed(i64::from(cfa))
        .ok_or(FhError::IntegerOverflow)?;
    if cfa <= regs.sp() {
        return Err(FhError::DidNotAdvance);
    }
    let read = |read_stack: &mut F, at: Option<u64>| {
        let at = at.ok_or(FhError::IntegerOverflow)?;
        read_stack(at).map_err(|_| FhError::CouldNotReadStack(at))
    };
    let ra = read(read_stack, cfa.checked_sub(8))?;
    let new_bp = read(read_stack, cfa.checked_add_signed(i64::from(bp)))?;
    if ra == 0 {
        return Ok(None);
    }
    regs.set_ip(ra);
    regs.set_sp(cfa);
    regs.set_bp(new_bp);
    Ok(Some(ra))
}

/// The rule for an address, as text (for the tests of other modules).
#[cfg(test)]
pub(crate) fn rule_of(cache: &mut UnwindCache, cfi: &Cfi, svma: u64) -> String {
    format!("{:?}", cfi.rule(svma, &mut cache.gimli))
}
