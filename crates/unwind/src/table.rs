//! The module table both unwinders search, and the one native walk loop they share.

use std::ops::{Deref, Range};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::{
    AllocationPolicy, Error as FhError, ExplicitModuleSectionInfo, FrameAddress,
    MustNotAllocateDuringUnwind, Unwinder as _,
};
use gimli::{
    BaseAddresses, CfaRule, EhFrame, EhFrameHdr, LittleEndian, ParsedEhFrameHdr, RegisterRule,
    UnwindSection, X86_64,
};

use crate::frame::{Frame, ModuleId, StackEnd};
#[cfg(test)]
use crate::scan::SCAN_WORDS;
use crate::scan::{MAX_RECOVERIES, recover};
use crate::trail::{Recording, Step, Trail};

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
        let parsed: Option<ParsedEhFrameHdr<_>> = self
            .hdr
            .as_ref()
            .and_then(|(hdr, _)| EhFrameHdr::new(hdr, LittleEndian).parse(&bases, 8).ok());
        let fde = match parsed.as_ref().and_then(|p| p.table()) {
            Some(table) => table.fde_for_address(&eh, &bases, svma, EhFrame::cie_from_offset),
            // No index: a linear scan, as rare as modules without .eh_frame_hdr.
            None => eh.fde_for_address(&bases, svma, EhFrame::cie_from_offset),
        };
        let Ok(fde) = fde else {
            return Rule::NotCovered;
        };
        let Ok(row) = fde.unwind_info_for_address(&eh, &bases, ctx, svma) else {
            return Rule::Framehop;
        };
        Rule::from_row(
            row.cfa(),
            row.register(X86_64::RBP),
            row.register(X86_64::RA),
        )
    }
}

/// gimli's unwind state, in fixed-size storage (framehop's, for the no-allocation
/// policy).
type GimliContext = gimli::UnwindContext<
    usize,
    <MustNotAllocateDuringUnwind as AllocationPolicy>::GimliUnwindContextStorage<usize>,
>;

/// How the walk unwinds one address.
///
/// The walk runs the common rules itself, from its own cache, and leaves the rest
/// (CFA expressions, registers other than rsp/rbp) to framehop. framehop's rule
/// cache is direct-mapped with 509 slots: two hot return addresses that share a
/// slot (about one process in three, by where ASLR put the modules, with the 20
/// frames of a ctypes call) evict each other on every capture, and each miss
/// reparses an FDE (microseconds for CPython's eval loop). It also has no rule for
/// a CFA at rbp + N other than 16 (libffi's `ffi_call_unix64`, under every ctypes
/// and cffi call), which it reparses every time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Rule {
    /// No FDE covers it: the walk stops with an unknown frame.
    #[default]
    NotCovered,
    /// A rule this walk does not run: framehop's.
    Framehop,
    /// The return address is undefined: the outermost frame.
    End,
    /// `CFA = (rbp if from_bp else rsp) + cfa`; the return address is at
    /// `[CFA - 8]`; rbp is restored from `[CFA + bp]` when `bp` is not 0 (0 is
    /// never a save slot: it holds the caller's data), else kept.
    Cfa { from_bp: bool, cfa: i32, bp: i16 },
}

impl Rule {
    fn from_row(
        cfa: &CfaRule<usize>,
        bp: Option<RegisterRule<usize>>,
        ra: Option<RegisterRule<usize>>,
    ) -> Rule {
        match ra {
            None | Some(RegisterRule::Undefined) => return Rule::End,
            Some(RegisterRule::Offset(-8)) => {}
            Some(_) => return Rule::Framehop,
        }
        let bp = match bp {
            None | Some(RegisterRule::Undefined | RegisterRule::SameValue) => 0,
            Some(RegisterRule::Offset(o)) if o != 0 => o,
            Some(_) => return Rule::Framehop,
        };
        let CfaRule::RegisterAndOffset { register, offset } = *cfa else {
            return Rule::Framehop;
        };
        let from_bp = match register {
            X86_64::RSP => false,
            // rbp as the CFA base while rbp itself is not saved: not a frame
            // rule this walk knows how to check.
            X86_64::RBP if bp != 0 => true,
            _ => return Rule::Framehop,
        };
        match (i32::try_from(offset), i16::try_from(bp)) {
            (Ok(cfa), Ok(bp)) if cfa >= 8 => Rule::Cfa { from_bp, cfa, bp },
            _ => Rule::Framehop,
        }
    }

    /// Packed into a cache word: kind, then the two offsets.
    fn pack(self) -> u64 {
        match self {
            Rule::NotCovered => 1,
            Rule::Framehop => 2,
            Rule::End => 3,
            Rule::Cfa { from_bp, cfa, bp } => {
                (4 | u64::from(from_bp)) | u64::from(cfa as u32) << 32 | u64::from(bp as u16) << 16
            }
        }
    }

    fn unpack(w: u64) -> Option<Rule> {
        Some(match w & 0xffff {
            1 => Rule::NotCovered,
            2 => Rule::Framehop,
            3 => Rule::End,
            k @ (4 | 5) => Rule::Cfa {
                from_bp: k == 5,
                cfa: (w >> 32) as u32 as i32,
                bp: (w >> 16) as u16 as i16,
            },
            _ => return None,
        })
    }

    /// One step, with framehop's contract: the caller's return address, or
    /// `None` at the end of the stack; the stack must move up.
    pub(crate) fn step<F>(
        self,
        regs: &mut UnwindRegsX86_64,
        read_stack: &mut F,
    ) -> Result<Option<u64>, FhError>
    where
        F: FnMut(u64) -> Result<u64, ()>,
    {
        let Rule::Cfa { from_bp, cfa, bp } = self else {
            return Ok(None);
        };
        let base = if from_bp { regs.bp() } else { regs.sp() };
        let cfa = base
            .checked_add_signed(i64::from(cfa))
            .ok_or(FhError::IntegerOverflow)?;
        if cfa <= regs.sp() {
            return Err(FhError::DidNotAdvance);
        }
        let mut read = |at: Option<u64>| {
            let at = at.ok_or(FhError::IntegerOverflow)?;
            read_stack(at).map_err(|_| FhError::CouldNotReadStack(at))
        };
        let ra = read(cfa.checked_sub(8))?;
        let new_bp = match bp {
            0 => regs.bp(),
            o => read(cfa.checked_add_signed(i64::from(o)))?,
        };
        if ra == 0 {
            return Ok(None);
        }
        regs.set_ip(ra);
        regs.set_sp(cfa);
        regs.set_bp(new_bp);
        Ok(Some(ra))
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

/// Per-thread (or per-user) scratch state of the walk: framehop's rule cache and the
/// FDE coverage cache. Allocated once; the walk itself never allocates.
pub struct UnwindCache {
    pub(crate) framehop: CacheX86_64<MustNotAllocateDuringUnwind>,
    /// The walk's rules: `RULE_SETS` sets of two ways, each `[lookup address,
    /// packed rule]` (address 0 = empty), most recent way first. Zeroed memory,
    /// so that the pages a thread never touches are never resident.
    rules: Box<[[u64; 2]]>,
    /// The table generation the rules belong to.
    generation: u64,
    /// Any rule stored since the last clear.
    filled: bool,
    /// What the last walks found at each frame depth: a thread that captures
    /// from the same call sites again (a launch loop) finds each frame's module
    /// and rule here, in order, instead of searching the module table and the
    /// rule sets (both cache misses in a large process).
    memo: Box<[Memo]>,
    /// The tables the memo's entry indices point into: `Table::id` of the main
    /// table and of the extra one (0 for none).
    memo_tables: (u64, u64),
    /// Frames the last walk found past code without unwind info (by a
    /// frame-pointer step or a stack scan).
    pub(crate) recovered: u32,
    /// Frames the last walk took from its trail.
    pub(crate) reused: u32,
    gimli: Box<GimliContext>,
}

/// 2048 rules, 32 KiB.
const RULE_SETS: usize = 1024;

/// Frame depths the memo covers (3 KiB).
const MEMO_DEPTH: usize = 128;

/// One frame depth's memo: valid only while the walk's tables are those of
/// `UnwindCache::memo_tables`; the unload and root checks still run on a hit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Memo {
    /// [`memo_key`] of the frame's address (0: empty).
    key: u64,
    /// The packed rule (0: not looked up: the frame is a signal trampoline).
    rule: u64,
    /// The module's index in [`Tables`] (main table first, then the extra one).
    entry: u32,
    /// The address is a signal return trampoline. Code does not change while
    /// its module stays loaded, which the walk checks on every frame.
    signal: bool,
}

/// A frame's address and whether it is a return address, as one word: the
/// same lookup address means a different frame for an instruction pointer
/// (no signal check, `return_address: false`).
fn memo_key(address: FrameAddress) -> u64 {
    (address.address() << 1 | u64::from(address.is_return_address())).wrapping_add(1)
}

impl UnwindCache {
    /// A new cache (about 60 KiB, resident as used).
    pub fn new() -> Self {
        UnwindCache {
            framehop: CacheX86_64::new_in(),
            // `vec!` of zeros allocates zeroed pages without writing them.
            rules: vec![[0u64; 2]; RULE_SETS * 2].into_boxed_slice(),
            generation: 0,
            filled: false,
            memo: vec![Memo::default(); MEMO_DEPTH].into_boxed_slice(),
            memo_tables: (0, 0),
            recovered: 0,
            reused: 0,
            gimli: Box::new(GimliContext::new_in()),
        }
    }
}

impl UnwindCache {
    /// Forgets the rules of another table.
    #[cold]
    fn clear(&mut self, generation: u64) {
        if self.filled {
            self.rules.fill([0; 2]);
            self.filled = false;
        }
        self.generation = generation;
    }

    /// Forgets the memo of other tables.
    #[cold]
    fn clear_memo(&mut self, tables: (u64, u64)) {
        self.memo.fill(Memo::default());
        self.memo_tables = tables;
    }
}

impl Default for UnwindCache {
    fn default() -> Self {
        Self::new()
    }
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
    fn get(&self, index: u32) -> Option<Found<'a>> {
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
    fn ids(&self) -> (u64, u64) {
        (self.main.id, self.extra.map_or(0, |t| t.id))
    }
}

/// A module the walk found, with its table and its index in [`Tables`].
#[derive(Clone, Copy)]
pub(crate) struct Found<'a> {
    pub entry: &'a Entry,
    pub table: &'a Table,
    index: u32,
}

/// A number no table had before (never 0).
fn unique() -> u64 {
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
        mut entries: Vec<Entry>,
        name_of: impl Fn(ModuleId) -> String,
        generation: u64,
    ) -> Table {
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
        let (slots, shift) = slots_of(&entries);
        Table {
            slots,
            shift,
            starts: entries.iter().map(|e| e.avma.start).collect(),
            end: entries.iter().map(|e| e.avma.end).max().unwrap_or(0),
            entries,
            generation,
            id: unique(),
            unwinder,
        }
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
fn slots_of(entries: &[Entry]) -> (Box<[u32]>, u32) {
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
    let mut slots = vec![0u32; 1 << SLOT_BITS].into_boxed_slice();
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
    (slots, shift)
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
    /// Is `return_address` the start of a stack's outermost function, which
    /// has no caller to unwind to (glibc's `__start_context`, where a
    /// `makecontext` coroutine starts)? Then the stack is complete there.
    fn is_root_return(&self, _return_address: u64) -> bool {
        false
    }
    /// Is `return_address` a signal return trampoline (glibc's `__restore_rt`:
    /// `mov $15, %rax; syscall`), where a signal handler returns to the kernel?
    /// Then the kernel's signal frame sits above the handler's frame, holding
    /// the interrupted code's registers.
    fn is_signal_return(&self, _entry: &Entry, _return_address: u64) -> bool {
        false
    }
    /// The walk continues in code interrupted by a signal, whose stack pointer
    /// is `sp`: maybe another stack than the handler's (an alternate signal
    /// stack, `sigaltstack`), which reads must then accept.
    fn enter_stack(&self, _sp: u64) {}
    /// Is the instruction that ends at `return_address` (inside `entry`'s
    /// code) a call? Only a loader that can read the code says yes; the
    /// default turns the crossing of code without unwind info off.
    fn call_before(&self, _entry: &Entry, _return_address: u64) -> bool {
        false
    }
}

/// Offsets in the x86-64 `ucontext_t` that the kernel writes at the top of a
/// signal frame (the stack pointer a handler returns with points at it):
/// `uc_flags`, `uc_link`, `uc_stack` (24 bytes), then `uc_mcontext`'s general
/// registers in glibc's `REG_*` order.
const UC_GREGS: u64 = 40;
const REG_RBP: u64 = 10;
const REG_RSP: u64 = 15;
const REG_RIP: u64 = 16;

/// Walks the native stack: one [`Frame`] per frame into `out` (after skipping
/// `skip` frames), stopping at a root frame, code without unwind info, a failed
/// read, or a full `out`. Never allocates.
///
/// With a `trail` (the calling thread's last walk, see [`Trail`]), the walk
/// ends early where the rest of the stack is provably the trail's, takes the
/// rest from it (counted in `cache.reused`), and leaves its own steps there.
#[allow(clippy::too_many_arguments)]
pub(crate) fn walk<F>(
    tables: Tables<'_>,
    regs: Regs,
    cache: &mut UnwindCache,
    read_stack: &mut F,
    loader: &impl Loader,
    skip: usize,
    out: &mut [Frame],
    trail: Option<&mut Trail>,
) -> (usize, StackEnd)
where
    F: FnMut(u64) -> Result<u64, ()>,
{
    let (main, extra) = tables.ids();
    let ids = (main, extra, tables.main.generation);
    cache.reused = 0;
    let mut rec = trail.map(|t| Recording::new(t, ids));
    let r = walk_steps(
        tables,
        regs,
        cache,
        read_stack,
        loader,
        skip,
        out,
        rec.as_mut(),
    );
    if let Some(rec) = rec {
        rec.finish(ids, r.1, cache.recovered);
    }
    r
}

/// Writes `frame` at `out[*len]`, or skips it while `skip` is not 0; `false`
/// when `out` is full.
#[inline(always)]
fn push(out: &mut [Frame], len: &mut usize, frame: Frame, skip: &mut usize) -> bool {
    if *skip > 0 {
        *skip -= 1;
        return true;
    }
    match out.get_mut(*len) {
        Some(slot) => {
            *slot = frame;
            *len += 1;
            true
        }
        None => false,
    }
}

#[allow(clippy::too_many_arguments)]
fn walk_steps<F>(
    tables: Tables<'_>,
    regs: Regs,
    cache: &mut UnwindCache,
    read_stack: &mut F,
    loader: &impl Loader,
    mut skip: usize,
    out: &mut [Frame],
    mut rec: Option<&mut Recording<'_>>,
) -> (usize, StackEnd)
where
    F: FnMut(u64) -> Result<u64, ()>,
{
    let mut fh_regs = UnwindRegsX86_64::new(regs.ip, regs.sp, regs.bp);
    let mut address = FrameAddress::from_instruction_pointer(regs.ip);
    let mut len = 0;
    macro_rules! push {
        ($frame:expr, $skip:expr) => {
            push(out, &mut len, $frame, $skip)
        };
    }
    // Records a step of a frame just pushed (not skipped).
    macro_rules! record {
        ($recorded:expr, $step:expr) => {
            if $recorded && let Some(r) = rec.as_deref_mut() {
                r.record($step);
            }
        };
    }
    // Consecutive frames are mostly in the same module.
    // Its index only: copying a whole `Found` here stalled each frame on a
    // store-to-load forward (perf annotate).
    let mut last: Option<u32> = None;
    let generation = tables.main.generation;
    if cache.memo_tables != tables.ids() {
        cache.clear_memo(tables.ids());
    }
    cache.recovered = 0;
    // Bounds the loop even if framehop's progress checks were fooled.
    for depth in 0..4096 {
        let lookup = address.address_for_lookup();
        let unknown = Frame::Unknown {
            address: address.address(),
        };
        let key = memo_key(address);
        let recorded = skip == 0;
        if recorded
            && let Some(r) = rec.as_deref_mut()
            && let Some(j) = r.candidate(
                key,
                (fh_regs.sp(), fh_regs.bp(), cache.recovered),
                read_stack,
                &mut |s: &Step, after: &Step, read: &mut F| {
                    // The scan again, from the kept state: the same caller?
                    let mut regs = UnwindRegsX86_64::new(0, s.sp, s.bp);
                    recover(tables, generation, &mut regs, cache, read, loader)
                        .and_then(FrameAddress::from_return_address)
                        .is_some_and(|a| {
                            memo_key(a) == after.key
                                && regs.sp() == after.sp
                                && (!after.bp_matters || regs.bp() == after.bp)
                        })
                },
            )
            && let Some(n) = r.reuse(j, out, len)
        {
            cache.reused = (n - len) as u32;
            cache.recovered = r.trail.recovered;
            return (n, StackEnd::Root);
        }
        let state = Step {
            key,
            sp: fh_regs.sp(),
            bp: fh_regs.bp(),
            recovered: cache.recovered,
            ..Step::default()
        };
        let memo = cache
            .memo
            .get(depth)
            .copied()
            .filter(|m| m.key == key)
            .and_then(|m| Some((m, tables.get(m.entry)?)));
        let found = match memo {
            Some((_, f)) => Some(f),
            None => last
                .and_then(|i| tables.get(i))
                .filter(|f| f.entry.avma.contains(&lookup))
                .or_else(|| tables.find(lookup)),
        };
        let Some(Found {
            entry,
            table,
            index,
        }) = found
        else {
            let end = if loader.loaded_elsewhere(lookup) {
                StackEnd::ModuleNotInTable
            } else {
                StackEnd::NoUnwindInfo
            };
            return finish(push!(unknown, &mut skip), len, end);
        };
        last = Some(index);
        if !loader.still_loaded(entry, lookup) {
            return finish(push!(unknown, &mut skip), len, StackEnd::ModuleNotInTable);
        }
        let signal = match memo {
            Some((m, _)) => m.signal,
            None => {
                address.is_return_address() && loader.is_signal_return(entry, address.address())
            }
        };
        if memo.is_none()
            && let Some(m) = cache.memo.get_mut(depth)
        {
            *m = Memo {
                key,
                rule: 0,
                entry: index,
                signal,
            };
        }
        if signal {
            // The trampoline itself, by its own address (the instruction
            // before it belongs to something else).
            let frame = Frame::Native {
                module: entry.id,
                offset: address.address() - entry.bias,
                return_address: false,
            };
            if !push!(frame, &mut skip) {
                return (len, StackEnd::DepthLimit);
            }
            record!(
                recorded,
                Step {
                    frame,
                    uses_bp: true,
                    ..state
                }
            );
            let uc = fh_regs.sp();
            let mut greg = |r: u64| {
                uc.checked_add(UC_GREGS + 8 * r)
                    .ok_or(())
                    .and_then(&mut *read_stack)
            };
            let (Ok(ip), Ok(sp), Ok(bp)) = (greg(REG_RIP), greg(REG_RSP), greg(REG_RBP)) else {
                return (len, StackEnd::StackReadFailed);
            };
            if ip == 0 {
                return (len, StackEnd::UnwindFailed);
            }
            loader.enter_stack(sp);
            // The interrupted instruction itself, not a return address.
            fh_regs = UnwindRegsX86_64::new(ip, sp, bp);
            address = FrameAddress::from_instruction_pointer(ip);
            continue;
        }
        if address.is_return_address() && loader.is_root_return(address.address()) {
            // Named by the function itself, not by the call before it.
            let root = Frame::Native {
                module: entry.id,
                offset: address.address() - entry.bias,
                return_address: false,
            };
            let pushed = push!(root, &mut skip);
            record!(
                recorded && pushed,
                Step {
                    frame: root,
                    plain: true,
                    ..state
                }
            );
            return finish(pushed, len, StackEnd::Root);
        }
        let memo_rule = memo.and_then(|(m, _)| Rule::unpack(m.rule));
        let rule = match (memo_rule, &entry.cfi) {
            (Some(rule), _) => rule,
            (None, None) => Rule::NotCovered,
            (None, Some(cfi)) => {
                let rule = cached_rule(cache, generation, cfi, lookup, entry.bias);
                if let Some(m) = cache.memo.get_mut(depth) {
                    m.rule = rule.pack();
                }
                rule
            }
        };
        if rule == Rule::NotCovered {
            // Code of a known module that no FDE covers (a library built
            // without unwind tables, as stretches of NVIDIA's driver are):
            // the frame is real, its caller is found by a frame-pointer step
            // or a bounded stack scan, and the tables take over again there.
            // Without a caller the stack ends as before, in an unknown frame.
            let caller = (cache.recovered < MAX_RECOVERIES)
                .then(|| recover(tables, generation, &mut fh_regs, cache, read_stack, loader))
                .flatten()
                .and_then(FrameAddress::from_return_address);
            let Some(caller) = caller else {
                return finish(push!(unknown, &mut skip), len, StackEnd::NoUnwindInfo);
            };
            let frame = Frame::Native {
                module: entry.id,
                offset: address.address() - entry.bias,
                return_address: address.is_return_address(),
            };
            if !push!(frame, &mut skip) {
                return (len, StackEnd::DepthLimit);
            }
            record!(
                recorded,
                Step {
                    frame,
                    plain: true,
                    scanned: true,
                    uses_bp: true,
                    ..state
                }
            );
            cache.recovered += 1;
            address = caller;
            continue;
        }
        let frame = Frame::Native {
            module: entry.id,
            offset: address.address() - entry.bias,
            return_address: address.is_return_address(),
        };
        if !push!(frame, &mut skip) {
            return (len, StackEnd::DepthLimit);
        }
        let (uses_bp, sets_bp) = match rule {
            Rule::Cfa { from_bp, bp, .. } => (from_bp, bp != 0),
            Rule::End => (false, false),
            _ => (true, false),
        };
        let mut step_rec = Step {
            frame,
            uses_bp,
            sets_bp,
            ..state
        };
        let step = match rule {
            Rule::Framehop => {
                table
                    .unwinder
                    .unwind_frame(address, &mut fh_regs, &mut cache.framehop, read_stack)
            }
            rule if rec.is_some() && recorded => {
                // What the step reads is what the next walk checks again.
                let mut n = 0usize;
                let r = rule.step(&mut fh_regs, &mut |a| {
                    let v = read_stack(a)?;
                    if let Some(slot) = step_rec.reads.get_mut(n) {
                        *slot = (a, v);
                    }
                    n += 1;
                    Ok(v)
                });
                step_rec.nreads = n.min(2) as u8;
                step_rec.plain = n <= 2;
                r
            }
            rule => rule.step(&mut fh_regs, read_stack),
        };
        record!(recorded, step_rec);
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

/// The rule for `avma`, from the cache; the fast path stays small enough to
/// inline into the walk, the FDE parse is out of line.
#[inline(always)]
pub(crate) fn cached_rule(
    cache: &mut UnwindCache,
    generation: u64,
    cfi: &Cfi,
    avma: u64,
    bias: u64,
) -> Rule {
    if cache.generation != generation {
        cache.clear(generation);
    }
    let key = avma.wrapping_add(1);
    let set = ((avma.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 40) as usize % RULE_SETS) * 2;
    if let Some(ways) = cache.rules.get_mut(set..set + 2) {
        if ways[0][0] == key
            && let Some(rule) = Rule::unpack(ways[0][1])
        {
            return rule;
        }
        if ways[1][0] == key
            && let Some(rule) = Rule::unpack(ways[1][1])
        {
            ways.swap(0, 1);
            return rule;
        }
    }
    fill_rule(cache, cfi, avma, bias, set)
}

#[cold]
#[inline(never)]
fn fill_rule(cache: &mut UnwindCache, cfi: &Cfi, avma: u64, bias: u64, set: usize) -> Rule {
    let rule = cfi.rule(avma - bias, &mut cache.gimli);
    if let Some(ways) = cache.rules.get_mut(set..set + 2) {
        ways[1] = ways[0];
        ways[0] = [avma.wrapping_add(1), rule.pack()];
        cache.filled = true;
    }
    rule
}

/// The rule for an address, as text (for the tests of other modules).
#[cfg(test)]
pub(crate) fn rule_of(cache: &mut UnwindCache, cfi: &Cfi, svma: u64) -> String {
    format!("{:?}", cfi.rule(svma, &mut cache.gimli))
}

#[cfg(test)]
#[allow(non_snake_case)]
mod tests {
    use super::*;

    #[test]
    fn packed_rules__unpack_to_themselves() {
        for rule in [
            Rule::NotCovered,
            Rule::Framehop,
            Rule::End,
            Rule::Cfa {
                from_bp: false,
                cfa: 8,
                bp: 0,
            },
            Rule::Cfa {
                from_bp: false,
                cfa: 4104,
                bp: -56,
            },
            Rule::Cfa {
                from_bp: true,
                cfa: 32,
                bp: -16,
            },
            Rule::Cfa {
                from_bp: true,
                cfa: i32::MAX,
                bp: i16::MIN,
            },
        ] {
            assert_eq!(Rule::unpack(rule.pack()), Some(rule));
        }
        assert_eq!(Rule::unpack(0), None, "an empty slot is no rule");
    }

    #[test]
    fn cfa_rule_step__moves_up_and_restores_bp() {
        // A stack at 0x1000..: [0x1010] = saved rbp, [0x1018] = return address.
        let mut read = |a: u64| match a {
            0x1010 => Ok(0x2222),
            0x1018 => Ok(0x4444),
            _ => Err(()),
        };
        let mut regs = UnwindRegsX86_64::new(0x10, 0x1000, 0x0ff0);
        let rule = Rule::Cfa {
            from_bp: true,
            cfa: 0x30,
            bp: -16,
        };
        assert_eq!(rule.step(&mut regs, &mut read), Ok(Some(0x4444)));
        assert_eq!((regs.sp(), regs.bp()), (0x1020, 0x2222));
        // A CFA at or below the stack pointer would loop: refused.
        let mut regs = UnwindRegsX86_64::new(0x10, 0x1000, 0x0800);
        assert_eq!(rule.step(&mut regs, &mut read), Err(FhError::DidNotAdvance));
        // An unreadable slot is a failed read, not a guess.
        let mut regs = UnwindRegsX86_64::new(0x10, 0x2000, 0x2000);
        assert!(matches!(
            Rule::Cfa {
                from_bp: false,
                cfa: 8,
                bp: 0
            }
            .step(&mut regs, &mut read),
            Err(FhError::CouldNotReadStack(0x2000))
        ));
    }

    /// An FDE's `cfa` that means a frame-pointer frame: CFA = rbp + 16, the
    /// caller's rbp saved at CFA - 16.
    const RBP_FRAME: u8 = 0xff;

    /// `.eh_frame` bytes: a CIE (CFA = rsp + 8, return address at CFA - 8,
    /// addresses as absolute 8-byte pointers), then per `(start, len, cfa)` an
    /// FDE with CFA = rsp + cfa (or [`RBP_FRAME`]).
    fn eh_frame(fdes: &[(u64, u64, u8)]) -> Vec<u8> {
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
    fn module(id: u32, avma: Range<u64>, fdes: &[(u64, u64, u8)]) -> Entry {
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

    /// Module 0 at 0x1000..0x2000: CFA = rsp + 8 below 0x1800, rsp + 16 above.
    fn table_a() -> Table {
        let a = module(
            0,
            0x1000..0x2000,
            &[(0x1000, 0x800, 8), (0x1800, 0x800, 16)],
        );
        Table::new(vec![a], |_| String::new())
    }

    #[derive(Default)]
    struct FakeLoader {
        unloaded: Option<ModuleId>,
        /// A signal return trampoline's address.
        signal_return: Option<u64>,
        /// Return addresses with a call instruction before them.
        calls: Vec<u64>,
    }

    impl Loader for FakeLoader {
        fn loaded_elsewhere(&self, _address: u64) -> bool {
            false
        }
        fn still_loaded(&self, entry: &Entry, _address: u64) -> bool {
            Some(entry.id) != self.unloaded
        }
        fn is_signal_return(&self, _entry: &Entry, return_address: u64) -> bool {
            Some(return_address) == self.signal_return
        }
        fn call_before(&self, _entry: &Entry, return_address: u64) -> bool {
            self.calls.contains(&return_address)
        }
    }

    /// A stack at 0x8000 (words at the given addresses), from ip 0x1100.
    struct Stack(Vec<(u64, u64)>);

    impl Stack {
        fn walk(
            &self,
            tables: Tables<'_>,
            cache: &mut UnwindCache,
            loader: &FakeLoader,
        ) -> (Vec<Frame>, StackEnd) {
            let regs = Regs {
                ip: 0x1100,
                sp: 0x8000,
                bp: 0,
            };
            self.walk_from(regs, tables, cache, loader)
        }

        fn walk_from(
            &self,
            regs: Regs,
            tables: Tables<'_>,
            cache: &mut UnwindCache,
            loader: &FakeLoader,
        ) -> (Vec<Frame>, StackEnd) {
            let words: std::collections::HashMap<u64, u64> = self.0.iter().copied().collect();
            let mut read = |a: u64| words.get(&a).copied().ok_or(());
            let mut out = [Frame::default(); 16];
            let (n, end) = walk(tables, regs, cache, &mut read, loader, 0, &mut out, None);
            (out[..n].to_vec(), end)
        }

        /// The walk from `regs` with `trail`: (frames, end, frames reused).
        fn walk_trail(
            &self,
            regs: Regs,
            tables: Tables<'_>,
            loader: &FakeLoader,
            trail: &mut Trail,
        ) -> (Vec<Frame>, StackEnd, u32) {
            let words: std::collections::HashMap<u64, u64> = self.0.iter().copied().collect();
            let mut read = |a: u64| words.get(&a).copied().ok_or(());
            let mut out = [Frame::default(); 16];
            let mut cache = UnwindCache::new();
            let (n, end) = walk(
                tables,
                regs,
                &mut cache,
                &mut read,
                loader,
                0,
                &mut out,
                Some(trail),
            );
            (out[..n].to_vec(), end, cache.reused)
        }

        /// The walk with `cache`, checked against one with a new cache.
        fn walk_as_cold(
            &self,
            tables: Tables<'_>,
            cache: &mut UnwindCache,
            loader: &FakeLoader,
        ) -> (Vec<Frame>, StackEnd) {
            let cold = self.walk(tables, &mut UnwindCache::new(), loader);
            let warm = self.walk(tables, cache, loader);
            assert_eq!(warm, cold, "a warm cache walks as a new one");
            warm
        }
    }

    fn native(module: u32, offset: u64, return_address: bool) -> Frame {
        Frame::Native {
            module: ModuleId(module),
            offset,
            return_address,
        }
    }

    // Depth 1 at 0x1105 (CFA = rsp + 8): its caller's return address is 0.
    fn stack_1() -> Stack {
        Stack(vec![(0x8000, 0x1105), (0x8008, 0)])
    }

    // Depth 1 at 0x1805 (CFA = rsp + 16): the return address is at 0x8010;
    // 0x8008 holds what a reused rule for 0x1105 would take for one.
    fn stack_2() -> Stack {
        Stack(vec![(0x8000, 0x1805), (0x8008, 0x1105), (0x8010, 0)])
    }

    // Depth 1 is a signal return trampoline at 0x1905: the signal frame at
    // 0x8008 holds the interrupted code's rip 0x1200 and rsp 0x9000.
    fn stack_3() -> Stack {
        let gregs = 0x8008 + UC_GREGS;
        Stack(vec![
            (0x8000, 0x1905),
            (0x8008, 0x1105),
            (gregs + 8 * REG_RIP, 0x1200),
            (gregs + 8 * REG_RSP, 0x9000),
            (gregs + 8 * REG_RBP, 0),
            (0x9000, 0),
        ])
    }

    #[test]
    fn per_depth_memo__is_what_a_repeated_walk_uses() {
        let a = table_a();
        let tables = Tables::one(&a);
        let loader = FakeLoader::default();
        let mut cache = UnwindCache::new();
        let (frames, end) = stack_2().walk_as_cold(tables, &mut cache, &loader);
        assert_eq!(
            (frames, end),
            (
                vec![native(0, 0x1100, false), native(0, 0x1805, true)],
                StackEnd::Root
            )
        );
        // A memo that said CFA = rsp + 8 at depth 1 would be followed (so that
        // the tests below, which check it is not reused wrongly, test a memo
        // that is in use).
        let plain = Rule::Cfa {
            from_bp: false,
            cfa: 8,
            bp: 0,
        };
        assert_eq!(
            Rule::unpack(cache.memo[1].rule),
            Some(Rule::Cfa {
                from_bp: false,
                cfa: 16,
                bp: 0
            })
        );
        cache.memo[1].rule = plain.pack();
        assert_eq!(stack_2().walk(tables, &mut cache, &loader).0.len(), 3);
    }

    #[test]
    fn per_depth_memo__another_address_at_a_depth_is_looked_up_again() {
        let a = table_a();
        let tables = Tables::one(&a);
        let loader = FakeLoader {
            signal_return: Some(0x1905),
            ..FakeLoader::default()
        };
        let mut cache = UnwindCache::new();
        let one = stack_1().walk_as_cold(tables, &mut cache, &loader);
        assert_eq!(
            one,
            (
                vec![native(0, 0x1100, false), native(0, 0x1105, true)],
                StackEnd::Root
            )
        );
        let two = stack_2().walk_as_cold(tables, &mut cache, &loader);
        assert_eq!(two.0.len(), 2, "{two:?}");
        let three = stack_3().walk_as_cold(tables, &mut cache, &loader);
        assert_eq!(
            three,
            (
                vec![
                    native(0, 0x1100, false),
                    native(0, 0x1905, false),
                    native(0, 0x1200, false)
                ],
                StackEnd::Root
            )
        );
        // In every order, and again (memo hits, the trampoline's included).
        for stack in [
            stack_1(),
            stack_3(),
            stack_3(),
            stack_2(),
            stack_1(),
            stack_1(),
        ] {
            stack.walk_as_cold(tables, &mut cache, &loader);
        }
    }

    #[test]
    fn per_depth_memo__another_table_is_looked_up_again() {
        let a = table_a();
        let loader = FakeLoader::default();
        let mut cache = UnwindCache::new();
        stack_1().walk_as_cold(Tables::one(&a), &mut cache, &loader);
        // A rebuilt table: another module where 0x1100 is, with another rule,
        // and another module at the index module 0 had.
        let b = Table::new(
            vec![
                module(5, 0x800..0x1000, &[(0x800, 0x800, 8)]),
                module(6, 0x1000..0x2000, &[(0x1000, 0x1000, 16)]),
            ],
            |_| String::new(),
        );
        let (frames, end) = stack_1().walk_as_cold(Tables::one(&b), &mut cache, &loader);
        assert_eq!(
            (frames, end),
            (vec![native(6, 0x1100, false)], StackEnd::Root)
        );
        // Modules added in an extra table (same rule generation): a second
        // one puts a module before the first, which moves its index.
        let m = || module(9, 0x3000..0x4000, &[(0x3000, 0x1000, 8)]);
        let e1 = Table::with_generation(vec![m()], |_| String::new(), a.generation);
        let e2 = Table::with_generation(
            vec![module(10, 0x2000..0x3000, &[(0x2000, 0x1000, 8)]), m()],
            |_| String::new(),
            a.generation,
        );
        let stack_4 = || Stack(vec![(0x8000, 0x3105), (0x8008, 0)]);
        for extra in [&e1, &e2] {
            let tables = Tables {
                main: &a,
                extra: Some(extra),
            };
            let (frames, end) = stack_4().walk_as_cold(tables, &mut cache, &loader);
            assert_eq!(
                (frames, end),
                (
                    vec![native(0, 0x1100, false), native(9, 0x3105, true)],
                    StackEnd::Root
                )
            );
        }
    }

    #[test]
    fn per_depth_memo__an_unloaded_module_ends_the_stack() {
        let a = table_a();
        let tables = Tables::one(&a);
        let mut cache = UnwindCache::new();
        stack_1().walk_as_cold(tables, &mut cache, &FakeLoader::default());
        let unloaded = FakeLoader {
            unloaded: Some(ModuleId(0)),
            ..FakeLoader::default()
        };
        let (frames, end) = stack_1().walk_as_cold(tables, &mut cache, &unloaded);
        assert_eq!(
            (frames, end),
            (
                vec![Frame::Unknown { address: 0x1100 }],
                StackEnd::ModuleNotInTable
            )
        );
    }

    /// Module 0 as in [`table_a`]; module 1 at 0x3000..0x4000 with no FDE;
    /// module 2 at 0x5000..0x6000, frame-pointer frames.
    fn table_scan() -> Table {
        Table::new(
            vec![
                module(
                    0,
                    0x1000..0x2000,
                    &[(0x1000, 0x800, 8), (0x1800, 0x800, 16)],
                ),
                module(1, 0x3000..0x4000, &[]),
                module(2, 0x5000..0x6000, &[(0x5000, 0x1000, RBP_FRAME)]),
            ],
            |_| String::new(),
        )
    }

    /// From ip 0x3100 (no unwind info), sp 0x8000, rbp `bp`.
    fn from_uncovered(stack: &Stack, bp: u64, loader: &FakeLoader) -> (Vec<Frame>, StackEnd, u32) {
        let t = table_scan();
        let mut cache = UnwindCache::new();
        let regs = Regs {
            ip: 0x3100,
            sp: 0x8000,
            bp,
        };
        let (frames, end) = stack.walk_from(regs, Tables::one(&t), &mut cache, loader);
        (frames, end, cache.recovered)
    }

    fn loader_with_calls(calls: &[u64]) -> FakeLoader {
        FakeLoader {
            calls: calls.to_vec(),
            ..FakeLoader::default()
        }
    }

    #[test]
    fn trail__a_scan_that_would_find_another_caller_now__is_walked_again() {
        let t = table_scan();
        let tables = Tables::one(&t);
        // 0x1105 is not after a call, 0x1305 is: the scan from 0x3100 skips
        // the first and takes the second, which unwinds to 0x1205.
        let loader = loader_with_calls(&[0x1205, 0x1305]);
        let regs = Regs {
            ip: 0x3100,
            sp: 0x8000,
            bp: 0,
        };
        let stale = Stack(vec![(0x8000, 0x1105), (0x8008, 0x1205), (0x8010, 0)]);
        let live = Stack(vec![(0x8000, 0x1305), (0x8008, 0x1205), (0x8010, 0)]);
        let mut trail = Trail::new(16);
        let first = stale.walk_trail(regs, tables, &loader, &mut trail);
        assert_eq!(
            first,
            (
                vec![native(1, 0x3100, false), native(0, 0x1205, true)],
                StackEnd::Root,
                0
            )
        );
        // The same again: taken from the trail, the scan made again.
        assert_eq!(
            stale.walk_trail(regs, tables, &loader, &mut trail),
            (first.0.clone(), StackEnd::Root, 2)
        );
        // Every word the trail's plain steps read is the same (the outer
        // frame's return address slot), and the walk starts in the same
        // state; only the scan, made again, finds the new caller.
        let (frames, end, reused) = live.walk_trail(regs, tables, &loader, &mut trail);
        assert_eq!(
            (frames, end),
            (
                vec![
                    native(1, 0x3100, false),
                    native(0, 0x1305, true),
                    native(0, 0x1205, true)
                ],
                StackEnd::Root
            )
        );
        assert_eq!(reused, 1, "the outer frame, proven the same");
    }

    #[test]
    fn trail__rbp_is_checked_where_an_outer_frame_depends_on_it() {
        // Module 2's frames take their CFA from rbp: two walks from the same
        // ip and sp but another rbp find other callers.
        let t = table_scan();
        let tables = Tables::one(&t);
        let loader = FakeLoader::default();
        let regs = |bp| Regs {
            ip: 0x5100,
            sp: 0x8000,
            bp,
        };
        // rbp 0x8010: saved rbp 0 at 0x8010, return address 0x1205 at 0x8018;
        // rbp 0x8020: return address 0x1105 at 0x8028.
        let stack = Stack(vec![
            (0x8010, 0),
            (0x8018, 0x1205),
            (0x8020, 0),
            (0x8028, 0x1105),
            (0x8030, 0),
        ]);
        let mut trail = Trail::new(16);
        let mut fresh = UnwindCache::new();
        for bp in [0x8010, 0x8010, 0x8020, 0x8010] {
            let (frames, end, _) = stack.walk_trail(regs(bp), tables, &loader, &mut trail);
            assert_eq!(
                (frames, end),
                stack.walk_from(regs(bp), tables, &mut fresh, &loader),
                "rbp {bp:#x}"
            );
        }
    }

    #[test]
    fn scan__skips_a_covered_address_not_after_a_call() {
        // 0x1105 would unwind to 0x1205 and a root: only the missing call
        // before it rules it out.
        let stack = Stack(vec![(0x8000, 0x1105), (0x8008, 0x1205), (0x8010, 0)]);
        let (frames, end, recovered) = from_uncovered(&stack, 0, &loader_with_calls(&[0x1205]));
        assert_eq!(
            (frames, end, recovered),
            (
                vec![native(1, 0x3100, false), native(0, 0x1205, true)],
                StackEnd::Root,
                1
            )
        );
        // The same candidate after a call is taken (the scan goes by it).
        let (frames, ..) = from_uncovered(&stack, 0, &loader_with_calls(&[0x1105, 0x1205]));
        assert_eq!(frames[1], native(0, 0x1105, true));
        // A loader that cannot read code (the remote one) crosses nothing:
        // the stack ends as before, in an unknown frame.
        let (frames, end, recovered) = from_uncovered(&stack, 0, &FakeLoader::default());
        assert_eq!(
            (frames, end, recovered),
            (
                vec![Frame::Unknown { address: 0x3100 }],
                StackEnd::NoUnwindInfo,
                0
            )
        );
    }

    #[test]
    fn scan__reads_no_code_of_a_module_unloaded_since_the_table_was_built() {
        let stack = Stack(vec![(0x8000, 0x1205), (0x8008, 0)]);
        let loader = FakeLoader {
            unloaded: Some(ModuleId(0)),
            calls: vec![0x1205],
            ..FakeLoader::default()
        };
        let (frames, end, _) = from_uncovered(&stack, 0, &loader);
        assert_eq!(
            (frames, end),
            (
                vec![Frame::Unknown { address: 0x3100 }],
                StackEnd::NoUnwindInfo
            )
        );
    }

    #[test]
    fn scan__skips_a_stale_return_address_whose_own_step_leads_nowhere() {
        // 0x1805 (CFA = rsp + 16) would take [0x8010] = data for its caller.
        let stack = Stack(vec![
            (0x8000, 0x1805),
            (0x8008, 0x7777),
            (0x8010, 0xdead),
            (0x8018, 0x1205),
            (0x8020, 0),
        ]);
        let (frames, end, _) = from_uncovered(&stack, 0, &loader_with_calls(&[0x1805, 0x1205]));
        assert_eq!(
            (frames, end),
            (
                vec![native(1, 0x3100, false), native(0, 0x1205, true)],
                StackEnd::Root
            )
        );
    }

    #[test]
    fn frame_pointer_step__when_no_word_below_rbp_passes_and_rbp_is_restored() {
        // rbp = 0x8010 is a frame: saved rbp 0x9000, return address 0x3205
        // (again without unwind info); 0x9000 is the next frame.
        let stack = Stack(vec![
            (0x8000, 0x5555),
            (0x8008, 0x6666),
            (0x8010, 0x9000),
            (0x8018, 0x3205),
            (0x9000, 0),
            (0x9008, 0x1105),
            (0x9010, 0),
        ]);
        let (frames, end, recovered) =
            from_uncovered(&stack, 0x8010, &loader_with_calls(&[0x3205, 0x1105]));
        assert_eq!(
            (frames, end, recovered),
            (
                vec![
                    native(1, 0x3100, false),
                    native(1, 0x3205, true),
                    native(0, 0x1105, true)
                ],
                StackEnd::Root,
                2
            )
        );
    }

    #[test]
    fn scan__finds_the_callers_rbp_where_code_that_used_rbp_saved_it() {
        // The code without unwind info keeps data in rbp (0x8000) and saved
        // the caller's frame pointer 0x8040 at 0x8008; the caller 0x5105
        // unwinds by rbp. With rbp as it was, only 0x1105 (the caller's
        // caller) would pass, and the caller's frame would be lost.
        let stack = Stack(vec![
            (0x8000, 0x4242),
            (0x8008, 0x8040),
            (0x8010, 0x5105),
            (0x8040, 0),
            (0x8048, 0x1105),
            (0x8050, 0),
        ]);
        let (frames, end, _) =
            from_uncovered(&stack, 0x8000, &loader_with_calls(&[0x5105, 0x1105]));
        assert_eq!(
            (frames, end),
            (
                vec![
                    native(1, 0x3100, false),
                    native(2, 0x5105, true),
                    native(0, 0x1105, true)
                ],
                StackEnd::Root
            )
        );
    }

    #[test]
    fn scan__is_bounded_a_return_address_beyond_it_is_not_found() {
        let mut words: Vec<(u64, u64)> = (0..SCAN_WORDS).map(|i| (0x8000 + 8 * i, 0x42)).collect();
        let past = 0x8000 + 8 * SCAN_WORDS;
        words.extend([(past, 0x1205), (past + 8, 0)]);
        let loader = loader_with_calls(&[0x1205]);
        let (frames, end, _) = from_uncovered(&Stack(words.clone()), 0, &loader);
        assert_eq!(
            (frames, end),
            (
                vec![Frame::Unknown { address: 0x3100 }],
                StackEnd::NoUnwindInfo
            )
        );
        // One word nearer, it is.
        words[SCAN_WORDS as usize - 1].1 = 0x1205;
        words.last_mut().unwrap().1 = 0x1205;
        words.push((past + 16, 0));
        let (frames, end, _) = from_uncovered(&Stack(words), 0, &loader);
        assert_eq!(frames.get(1), Some(&native(0, 0x1205, true)), "{end:?}");
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
