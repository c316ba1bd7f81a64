//! The one native walk loop both unwinders share.

use framehop::x86_64::UnwindRegsX86_64;
use framehop::{Error as FhError, FrameAddress, Unwinder as _};

use crate::frame::{Frame, StackEnd};
use crate::loader::Loader;
use crate::rule::{Memo, Rule, UnwindCache, cached_rule, key_lookup, memo_key};
use crate::scan::{MAX_RECOVERIES, after_call, recover};
use crate::table::{Found, Tables};
use crate::trail::{Recording, ScanReads, Step, Trail};

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
    let ids = walk_ids(tables);
    cache.reused = 0;
    let mut rec = trail.map(|t| Recording::new(t, ids, loader.stable()));
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

/// What a walk's frames depend on besides its reads: the tables' ids and
/// their rule generation.
pub(crate) fn walk_ids(tables: Tables<'_>) -> (u64, u64, u64) {
    let (main, extra) = tables.ids();
    (main, extra, tables.main.generation)
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
    // Records a step of a frame just pushed, or of one skipped (the walk's
    // head, which only a kept walk checks again).
    macro_rules! record {
        ($recorded:expr, $step:expr) => {
            if let Some(r) = rec.as_deref_mut() {
                if $recorded {
                    r.record($step);
                } else {
                    r.record_head($step);
                }
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
    cache.stale_passed = 0;
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
                &mut |s: &Step, after: &Step, read: &mut F, kept: &mut ScanReads| {
                    // The scan again, from the kept state: the same caller?
                    let mut regs = UnwindRegsX86_64::new(0, s.sp, s.bp);
                    // Read and noted in turn, never one inside the other:
                    // the borrows do not overlap.
                    let kept = std::cell::RefCell::new(kept);
                    let mut read = |a| kept.borrow_mut().read(read, a);
                    let mut note = |role| kept.borrow_mut().note(role);
                    recover(
                        tables,
                        generation,
                        key_lookup(s.key),
                        &mut regs,
                        cache,
                        &mut read,
                        loader,
                        &mut note,
                    )
                    .and_then(FrameAddress::from_return_address)
                    .is_some_and(|a| {
                        memo_key(a) == after.key
                            && regs.sp() == after.sp
                            && (!after.bp_matters || regs.bp() == after.bp)
                    })
                },
                &mut |ra| after_call(tables, loader, ra).is_some(),
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
            // A recorded frame's scan keeps its reads, for the next walk.
            let kept = rec
                .as_deref_mut()
                .filter(|_| recorded)
                .and_then(|r| r.trail.scans.get_mut(cache.recovered as usize));
            let caller = match kept {
                _ if cache.recovered >= MAX_RECOVERIES => None,
                Some(kept) => {
                    kept.start(loader.stable());
                    let kept = std::cell::RefCell::new(kept);
                    let mut read = |a| kept.borrow_mut().read(read_stack, a);
                    let mut note = |role| kept.borrow_mut().note(role);
                    recover(
                        tables,
                        generation,
                        lookup,
                        &mut fh_regs,
                        cache,
                        &mut read,
                        loader,
                        &mut note,
                    )
                }
                None => recover(
                    tables,
                    generation,
                    lookup,
                    &mut fh_regs,
                    cache,
                    read_stack,
                    loader,
                    &mut |_| {},
                ),
            }
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
            rule if rec.is_some() => {
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

#[cfg(test)]
#[allow(non_snake_case)]
mod tests {
    use super::*;
    use crate::frame::ModuleId;
    use crate::scan::SCAN_WORDS;
    use crate::table::tests::{RBP_FRAME, SAVES_RBP, module};
    use crate::table::{Entry, Table};

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
        /// Of those, direct calls: (return address, target).
        direct: Vec<(u64, u64)>,
        /// Addresses whose code begins with a jump (PLT stubs).
        jumps: Vec<u64>,
        /// What `stable` says.
        stable: bool,
        /// The code reads made (`call_before`: one per scan candidate).
        code_reads: std::cell::Cell<u32>,
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
            self.code_reads.set(self.code_reads.get() + 1);
            self.calls.contains(&return_address)
        }
        fn call_target(&self, _entry: &Entry, return_address: u64) -> Option<u64> {
            let d = self.direct.iter().find(|(ra, _)| *ra == return_address);
            d.map(|&(_, target)| target)
        }
        fn starts_with_jump(&self, _entry: &Entry, address: u64) -> bool {
            self.jumps.contains(&address)
        }
        fn stable(&self) -> bool {
            self.stable
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
        let (frames, end, cache) = uncovered_walk(stack, bp, loader);
        (frames, end, cache.recovered)
    }

    /// [`from_uncovered`], with the walk's cache (its counts).
    fn uncovered_walk(
        stack: &Stack,
        bp: u64,
        loader: &FakeLoader,
    ) -> (Vec<Frame>, StackEnd, UnwindCache) {
        let t = table_scan();
        let mut cache = UnwindCache::new();
        let regs = Regs {
            ip: 0x3100,
            sp: 0x8000,
            bp,
        };
        let (frames, end) = stack.walk_from(regs, Tables::one(&t), &mut cache, loader);
        (frames, end, cache)
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
    fn trail__a_kept_scan_is_taken_only_while_every_word_it_read_is_the_same() {
        let t = table_scan();
        let tables = Tables::one(&t);
        // As above: the scan from 0x3100 skips 0x1105 (not after a call)
        // and takes 0x1305 where the stack holds it.
        let mut loader = loader_with_calls(&[0x1205, 0x1305]);
        loader.stable = true;
        let regs = Regs {
            ip: 0x3100,
            sp: 0x8000,
            bp: 0,
        };
        let stale = Stack(vec![(0x8000, 0x1105), (0x8008, 0x1205), (0x8010, 0)]);
        let live = Stack(vec![(0x8000, 0x1305), (0x8008, 0x1205), (0x8010, 0)]);
        let mut trail = Trail::new(16);
        let first = stale.walk_trail(regs, tables, &loader, &mut trail);
        assert_eq!(first.0.len(), 2);
        // The same words: the kept scan is the scan, not made again (no code
        // read).
        loader.code_reads.set(0);
        assert_eq!(
            stale.walk_trail(regs, tables, &loader, &mut trail),
            (first.0.clone(), StackEnd::Root, 2)
        );
        assert_eq!(loader.code_reads.get(), 0, "no scan");
        // One word the scan read changed (the slot it skipped), every word the
        // plain steps read is the same: the scan is made again and finds the
        // new caller.
        let (frames, end, reused) = live.walk_trail(regs, tables, &loader, &mut trail);
        assert_eq!(
            (frames, end, reused),
            (
                vec![
                    native(1, 0x3100, false),
                    native(0, 0x1305, true),
                    native(0, 0x1205, true)
                ],
                StackEnd::Root,
                1
            )
        );
        // And back: the trail's scan is now the live stack's, which reads
        // another word at 0x8000 than the stale one.
        let (frames, _, _) = stale.walk_trail(regs, tables, &loader, &mut trail);
        assert_eq!(frames, first.0);
        // Unstable (a module was unloaded since): scanned again, even with
        // the same words.
        loader.stable = false;
        loader.code_reads.set(0);
        assert_eq!(
            stale.walk_trail(regs, tables, &loader, &mut trail).0,
            first.0
        );
        assert!(loader.code_reads.get() > 0, "scanned again");
    }

    #[test]
    fn trail__a_kept_scan_takes_a_changed_word_only_where_the_scan_would_treat_it_alike() {
        let t = table_scan();
        let tables = Tables::one(&t);
        // From 0x3100 (no unwind info), sp 0x8000, rbp 0: the scan tries the
        // word at 0x8000 as a return address, then 0x5105 (module 2, whose
        // frames take their CFA from rbp) with the nearest frame pointer below
        // it as rbp. With a small number at 0x8000 there is none, 0x5105 leads
        // nowhere, and the scan takes 0x1205; with a frame pointer there
        // (0x9000: a saved rbp, then a return address), it takes 0x5105.
        let mut loader = loader_with_calls(&[0x1205, 0x5105]);
        loader.stable = true;
        let regs = Regs {
            ip: 0x3100,
            sp: 0x8000,
            bp: 0,
        };
        let stack = |w: u64| {
            Stack(vec![
                (0x8000, w),
                (0x8008, 0x5105),
                (0x8010, 0x1205),
                (0x8018, 0),
                (0x9000, 0),
                (0x9008, 0x1205),
                (0x9010, 0),
            ])
        };
        let short = vec![native(1, 0x3100, false), native(0, 0x1205, true)];
        let mut trail = Trail::new(16);
        assert_eq!(
            stack(0x42).walk_trail(regs, tables, &loader, &mut trail).0,
            short
        );
        // Another small number: no return address, below any frame pointer
        // the scan looked for; the kept scan stands, not made again.
        loader.code_reads.set(0);
        assert_eq!(
            stack(0x43).walk_trail(regs, tables, &loader, &mut trail),
            (short.clone(), StackEnd::Root, 2)
        );
        assert_eq!(loader.code_reads.get(), 0, "no scan");
        // A frame pointer there: no return address either, but no longer
        // below the limit: scanned again, with the new caller.
        let (frames, end, _) = stack(0x9000).walk_trail(regs, tables, &loader, &mut trail);
        assert_eq!(
            (frames, end),
            (
                vec![
                    native(1, 0x3100, false),
                    native(2, 0x5105, true),
                    native(0, 0x1205, true)
                ],
                StackEnd::Root
            )
        );
    }

    #[test]
    fn trail__the_rest_is_aligned_only_when_taken_at_the_same_depth() {
        let t = table_a();
        let tables = Tables::one(&t);
        let loader = FakeLoader::default();
        // 0x1100 <- 0x1105 <- 0x1205 <- root.
        let stack = Stack(vec![(0x8000, 0x1105), (0x8008, 0x1205), (0x8010, 0)]);
        let regs = |ip, sp| Regs { ip, sp, bp: 0 };
        let mut trail = Trail::new(16);
        let (first, end, _) = stack.walk_trail(regs(0x1100, 0x8000), tables, &loader, &mut trail);
        assert_eq!((first.len(), end, trail.aligned), (3, StackEnd::Root, None));
        let (again, _, reused) =
            stack.walk_trail(regs(0x1100, 0x8000), tables, &loader, &mut trail);
        assert_eq!(again, first);
        assert!(reused > 0);
        assert_eq!(trail.aligned, Some(first.len() - reused as usize));
        // From inside the caller: the rest is taken one frame shallower, so
        // its frames sit at other places than in the walk before.
        let (outer, _, reused) =
            stack.walk_trail(regs(0x1106, 0x8008), tables, &loader, &mut trail);
        assert!(reused > 0, "{outer:?}");
        assert_eq!(outer.len(), 2);
        assert_eq!(trail.aligned, None);
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

    /// Module 0 as in [`table_a`]; module 2 at 0x5000..0x6000, frame-pointer
    /// frames; module 3 at 0x6000..0x7000, frames that save rbp (CFA = rsp +
    /// 16, rbp at CFA - 16) without using it.
    fn table_saves_rbp() -> Table {
        Table::new(
            vec![
                module(
                    0,
                    0x1000..0x2000,
                    &[(0x1000, 0x800, 8), (0x1800, 0x800, 16)],
                ),
                module(2, 0x5000..0x6000, &[(0x5000, 0x1000, RBP_FRAME)]),
                module(3, 0x6000..0x7000, &[(0x6000, 0x1000, SAVES_RBP)]),
            ],
            |_| String::new(),
        )
    }

    #[test]
    fn trail__a_saved_rbp_is_checked_only_where_an_outer_frame_uses_it() {
        let t = table_saves_rbp();
        let tables = Tables::one(&t);
        let loader = FakeLoader::default();
        let regs = Regs {
            ip: 0x6100,
            sp: 0x8000,
            bp: 0,
        };
        // 0x6100 saves rbp at 0x8000, returns to 0x1105 (at 0x8008), whose
        // frame does not use rbp: a saved rbp that changes changes nothing.
        let unused = |saved| Stack(vec![(0x8000, saved), (0x8008, 0x1105), (0x8010, 0)]);
        // 0x6100 returns to 0x5105 (a frame-pointer frame): the saved rbp
        // (0x8020 or 0x8040) finds its caller (0x1105 or 0x1805).
        let used = |saved| {
            Stack(vec![
                (0x8000, saved),
                (0x8008, 0x5105),
                (0x8020, 0),
                (0x8028, 0x1105),
                (0x8030, 0),
                (0x8040, 0),
                (0x8048, 0x1805),
                (0x8058, 0),
            ])
        };
        let mut fresh = UnwindCache::new();
        for (stacks, reuses) in [
            ([unused(0x1111), unused(0x2222)], true),
            ([used(0x8020), used(0x8040)], false),
        ] {
            let mut trail = Trail::new(16);
            let mut reused = Vec::new();
            for stack in &stacks {
                let (frames, end, r) = stack.walk_trail(regs, tables, &loader, &mut trail);
                let r = (r as usize, frames.len());
                assert_eq!(
                    (frames.clone(), end),
                    stack.walk_from(regs, tables, &mut fresh, &loader)
                );
                assert_eq!(end, StackEnd::Root, "{frames:x?}");
                reused.push(r);
            }
            // The second walk takes the whole first one only where the
            // saved rbp it restores matters to no frame outward.
            assert_eq!(reused[1].0 == reused[1].1, reuses, "{reused:?}");
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
    fn scan__passes_over_a_stale_return_address_whose_call_went_to_another_modules_code() {
        // 0x1805 at 0x8000 was left by an earlier call tree of the caller:
        // its step (CFA = rsp + 16) reads 0x1305 at 0x8010, a live return
        // address, above the real caller 0x1205 at 0x8008. Its call was a
        // direct one to 0x1000, module 0's own code with unwind info, not
        // the code without unwind info at 0x3100 (module 1).
        let stack = Stack(vec![
            (0x8000, 0x1805),
            (0x8008, 0x1205),
            (0x8010, 0x1305),
            (0x8018, 0),
        ]);
        let loader = |target: u64, jumps: &[u64]| FakeLoader {
            calls: vec![0x1805, 0x1205, 0x1305],
            direct: vec![(0x1805, target)],
            jumps: jumps.to_vec(),
            ..FakeLoader::default()
        };
        let real = vec![
            native(1, 0x3100, false),
            native(0, 0x1205, true),
            native(0, 0x1305, true),
        ];
        let stale = vec![
            native(1, 0x3100, false),
            native(0, 0x1805, true),
            native(0, 0x1305, true),
        ];
        let (frames, end, cache) = uncovered_walk(&stack, 0, &loader(0x1000, &[]));
        assert_eq!((frames, end), (real, StackEnd::Root));
        assert_eq!(cache.stale_passed, 1);
        // A call that may have led here is taken, as before: into the
        // module without unwind info, or to a PLT stub that jumps on.
        for (target, jumps) in [(0x3000, &[][..]), (0x1000, &[0x1000][..])] {
            let (frames, _, _) = from_uncovered(&stack, 0, &loader(target, jumps));
            assert_eq!(frames, stale, "{target:#x}");
        }
    }

    #[test]
    fn scan__passes_over_one_whose_call_may_have_gone_anywhere_for_a_direct_caller_it_steps_over() {
        // 0x1805 at 0x8000 was left by an indirect call of the real caller's
        // callee: its step (CFA = rsp + 16) reads 0x1305 at 0x8010, the real
        // caller's caller, over the real caller 0x1205 at 0x8008, whose call
        // went directly into module 1, the code without unwind info.
        let stack = Stack(vec![
            (0x8000, 0x1805),
            (0x8008, 0x1205),
            (0x8010, 0x1305),
            (0x8018, 0),
        ]);
        let loader = |direct: &[(u64, u64)]| FakeLoader {
            calls: vec![0x1805, 0x1205, 0x1305],
            direct: direct.to_vec(),
            ..FakeLoader::default()
        };
        let (frames, end, cache) = uncovered_walk(&stack, 0, &loader(&[(0x1205, 0x3000)]));
        assert_eq!(
            (frames, end),
            (
                vec![
                    native(1, 0x3100, false),
                    native(0, 0x1205, true),
                    native(0, 0x1305, true)
                ],
                StackEnd::Root
            )
        );
        assert_eq!(cache.stale_passed, 1);
        // Were 0x1205's call indirect too, or direct into module 0's code,
        // nothing says which is real, and the first is kept.
        for direct in [&[][..], &[(0x1205, 0x1000)][..]] {
            let (frames, end, cache) = uncovered_walk(&stack, 0, &loader(direct));
            assert_eq!(
                (frames, end),
                (
                    vec![
                        native(1, 0x3100, false),
                        native(0, 0x1805, true),
                        native(0, 0x1305, true)
                    ],
                    StackEnd::Root
                ),
                "{direct:x?}"
            );
            assert_eq!(cache.stale_passed, 0);
        }
        // A direct caller above the slot the first one's step read its own
        // caller from is not looked at: the first is taken.
        let stack = Stack(vec![
            (0x8000, 0x1805),
            (0x8008, 0x7777),
            (0x8010, 0x1305),
            (0x8018, 0x1205),
            (0x8020, 0),
        ]);
        let (frames, ..) = uncovered_walk(&stack, 0, &loader(&[(0x1205, 0x3000)]));
        assert_eq!(frames[1], native(0, 0x1805, true));
    }

    #[test]
    fn scan__keeps_a_return_address_whose_call_went_elsewhere_when_its_caller_is_the_next() {
        // 0x1105 called 0x1000 directly (which tail-called into 0x3100):
        // its step reads the next candidate's slot, so it is the real one.
        let stack = Stack(vec![(0x8000, 0x1105), (0x8008, 0x1205), (0x8010, 0)]);
        let loader = FakeLoader {
            calls: vec![0x1105, 0x1205],
            direct: vec![(0x1105, 0x1000)],
            ..FakeLoader::default()
        };
        let (frames, end, _) = from_uncovered(&stack, 0, &loader);
        assert_eq!(
            (frames, end),
            (
                vec![
                    native(1, 0x3100, false),
                    native(0, 0x1105, true),
                    native(0, 0x1205, true)
                ],
                StackEnd::Root
            )
        );
    }

    #[test]
    fn scan__passes_over_one_whose_caller_called_the_module_without_unwind_info_directly() {
        // Module 0's code from 0x1800 has no unwind info; the walk starts
        // there, at 0x1900. 0x7105 (module 3) called 0x7000 directly, and
        // its step reads its caller at 0x8008: 0x1205, a direct call into
        // module 0 (0x1800), the real caller (then 0x1305); 0x7105 is
        // stale. Were that call indirect, 0x1205 could as well be 0x7105's
        // caller (0x7000 tail-calling into module 0), and the first is kept.
        let t = Table::new(
            vec![
                module(0, 0x1000..0x2000, &[(0x1000, 0x800, 8)]),
                module(3, 0x7000..0x7800, &[(0x7000, 0x800, 8)]),
            ],
            |_| String::new(),
        );
        let stack = Stack(vec![
            (0x8000, 0x7105),
            (0x8008, 0x1205),
            (0x8010, 0x1305),
            (0x8018, 0),
        ]);
        let regs = Regs {
            ip: 0x1900,
            sp: 0x8000,
            bp: 0,
        };
        for (direct, want) in [
            (
                vec![(0x7105, 0x7000), (0x1205, 0x1800)],
                vec![
                    native(0, 0x1900, false),
                    native(0, 0x1205, true),
                    native(0, 0x1305, true),
                ],
            ),
            (
                vec![(0x7105, 0x7000)],
                vec![
                    native(0, 0x1900, false),
                    native(3, 0x7105, true),
                    native(0, 0x1205, true),
                    native(0, 0x1305, true),
                ],
            ),
        ] {
            let loader = FakeLoader {
                calls: vec![0x7105, 0x1205, 0x1305],
                direct,
                ..FakeLoader::default()
            };
            let mut cache = UnwindCache::new();
            let (frames, end) = stack.walk_from(regs, Tables::one(&t), &mut cache, &loader);
            assert_eq!((frames, end), (want, StackEnd::Root));
        }
    }

    #[test]
    fn scan__takes_a_return_address_that_ends_the_stack_only_when_nothing_above_passes() {
        // 0x1105 at 0x8000 is a stale copy of a root's return address: its own
        // step ends the stack ([0x8008] = 0), as the real root's would. The
        // real caller 0x1205 is above it, and leads on to 0x1305 and the root.
        let stack = Stack(vec![
            (0x8000, 0x1105),
            (0x8008, 0),
            (0x8010, 0x1205),
            (0x8018, 0x1305),
            (0x8020, 0),
        ]);
        let loader = loader_with_calls(&[0x1105, 0x1205, 0x1305]);
        let (frames, end, _) = from_uncovered(&stack, 0, &loader);
        assert_eq!(
            (frames, end),
            (
                vec![
                    native(1, 0x3100, false),
                    native(0, 0x1205, true),
                    native(0, 0x1305, true)
                ],
                StackEnd::Root
            )
        );
        // With nothing else above it, the root is taken.
        let stack = Stack(vec![(0x8000, 0x1105), (0x8008, 0)]);
        let (frames, end, _) = from_uncovered(&stack, 0, &loader);
        assert_eq!(
            (frames, end),
            (
                vec![native(1, 0x3100, false), native(0, 0x1105, true)],
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
}
