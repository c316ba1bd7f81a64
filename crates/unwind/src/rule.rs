//! How the walk unwinds one address: the rule an FDE's row gives, and the
//! per-thread caches of rules and of each depth's last frame.

use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64};
use framehop::{AllocationPolicy, Error as FhError, FrameAddress, MustNotAllocateDuringUnwind};
use gimli::{
    CfaRule, EhFrame, EhFrameHdr, LittleEndian, ParsedEhFrameHdr, RegisterRule, UnwindSection,
    X86_64,
};

use crate::table::Cfi;

impl Cfi {
    /// How to unwind `svma`: not at all (no FDE covers it), by framehop, or by
    /// the frame-pointer-with-offset rule framehop cannot cache (see [`Rule`]).
    /// Allocation-free (gimli parses in place, with fixed-size unwind state).
    pub(crate) fn rule(&self, svma: u64, ctx: &mut GimliContext) -> Rule {
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
pub(crate) type GimliContext = gimli::UnwindContext<
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
    pub(crate) fn pack(self) -> u64 {
        match self {
            Rule::NotCovered => 1,
            Rule::Framehop => 2,
            Rule::End => 3,
            Rule::Cfa { from_bp, cfa, bp } => {
                (4 | u64::from(from_bp)) | u64::from(cfa as u32) << 32 | u64::from(bp as u16) << 16
            }
        }
    }

    pub(crate) fn unpack(w: u64) -> Option<Rule> {
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
    pub(crate) memo: Box<[Memo]>,
    /// The tables the memo's entry indices point into: `Table::id` of the main
    /// table and of the extra one (0 for none).
    pub(crate) memo_tables: (u64, u64),
    /// Frames the last walk found past code without unwind info (by a
    /// frame-pointer step or a stack scan).
    pub(crate) recovered: u32,
    /// Scans of the last walk that passed over a stale return address.
    pub(crate) stale_passed: u32,
    /// Frames the last walk took from its trail.
    pub(crate) reused: u32,
    gimli: Box<GimliContext>,
}

/// 16384 rules, 256 KiB (resident as the sets are used). A training step of a
/// small Hugging Face model returns to some thousands of distinct addresses:
/// 2048 rules missed about once a capture there, each miss an FDE parsed again.
const RULE_SETS: usize = 8192;

/// Frame depths the memo covers (3 KiB).
const MEMO_DEPTH: usize = 128;

/// One frame depth's memo: valid only while the walk's tables are those of
/// `UnwindCache::memo_tables`; the unload and root checks still run on a hit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Memo {
    /// [`memo_key`] of the frame's address (0: empty).
    pub key: u64,
    /// The packed rule (0: not looked up: the frame is a signal trampoline).
    pub rule: u64,
    /// The module's index in [`Tables`] (main table first, then the extra one).
    pub entry: u32,
    /// The address is a signal return trampoline. Code does not change while
    /// its module stays loaded, which the walk checks on every frame.
    pub signal: bool,
}

/// A frame's address and whether it is a return address, as one word: the
/// same lookup address means a different frame for an instruction pointer
/// (no signal check, `return_address: false`).
pub(crate) fn memo_key(address: FrameAddress) -> u64 {
    (address.address() << 1 | u64::from(address.is_return_address())).wrapping_add(1)
}

/// The lookup address of the frame address a [`memo_key`] was made of (one
/// byte before a return address: inside the call).
pub(crate) fn key_lookup(key: u64) -> u64 {
    let k = key.wrapping_sub(1);
    (k >> 1) - (k & 1)
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
            stale_passed: 0,
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
    pub(crate) fn clear_memo(&mut self, tables: (u64, u64)) {
        self.memo.fill(Memo::default());
        self.memo_tables = tables;
    }
}

impl Default for UnwindCache {
    fn default() -> Self {
        Self::new()
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
    fn key_lookup__is_the_lookup_address_of_the_keyed_frame_address() {
        for a in [
            FrameAddress::from_return_address(0x1205).unwrap(),
            FrameAddress::from_instruction_pointer(0x3100),
        ] {
            assert_eq!(key_lookup(memo_key(a)), a.address_for_lookup(), "{a:?}");
        }
    }

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
}
