//! Crossing code without unwind info: a frame in a module's code that no FDE
//! covers (a library built without unwind tables, as stretches of NVIDIA's
//! driver are) is kept, and its caller is found by a bounded stack scan or a
//! frame-pointer step; the walk in [`crate::walk`] goes on from there with
//! the tables. Runs only at such frames: a walk that meets none never calls it.

use framehop::x86_64::UnwindRegsX86_64;
use framehop::{FrameAddress, Unwinder as _};

use crate::loader::Loader;
use crate::rule::{Rule, UnwindCache, cached_rule};
use crate::table::{Found, Tables};

/// What a scan did with the stack word it read last, where that is all it
/// did with it: then another value that leads to the same (see
/// [`crate::trail::ScanReads`]) makes the same scan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    /// Tried as a return address, and it was none ([`after_call`]).
    NotCode,
    /// Tried as a saved frame pointer, and it was below this address.
    Below(u64),
}

/// The module `ra` returns into, if it is a return address there: into a
/// module still loaded (its code is read), right after a call.
#[inline]
pub(crate) fn after_call<'a>(
    tables: Tables<'a>,
    loader: &impl Loader,
    ra: u64,
) -> Option<Found<'a>> {
    let lookup = ra.checked_sub(1)?;
    tables
        .find(lookup)
        .filter(|f| loader.still_loaded(f.entry, lookup) && loader.call_before(f.entry, ra))
}

/// Whether an instruction that ends at the end of `code` (the bytes before a
/// return address, at most 8) is a call: `call rel32` (`e8`) or `call r/m64`
/// (`ff /2`, with any ModRM, SIB and displacement; a REX prefix before it
/// changes nothing).
pub(crate) fn ends_with_call(code: &[u8]) -> bool {
    let n = code.len();
    if n >= 5 && code[n - 5] == 0xe8 {
        return true;
    }
    (2..=7.min(n)).any(|len| {
        let (op, modrm) = (code[n - len], code[n - len + 1]);
        if op != 0xff || (modrm >> 3) & 7 != 2 {
            return false;
        }
        let (md, rm) = (modrm >> 6, modrm & 7);
        let sib_base = (rm == 4 && md != 3).then(|| code.get(n - len + 2).map(|b| b & 7));
        let want = match (md, rm) {
            (3, _) => 2,
            (0, 5) => 6,
            (0, 4) => match sib_base {
                Some(Some(5)) => 7,
                Some(Some(_)) => 3,
                _ => return false,
            },
            (0, _) => 2,
            (1, 4) => 4,
            (1, _) => 3,
            (2, 4) => 7,
            _ => 6,
        };
        want == len
    })
}

/// Whether `code` begins with a jump (`jmp rel32`, `jmp rel8`, `jmp r/m64`),
/// maybe after `endbr64` and a `bnd` prefix: a PLT stub, or a thunk.
pub(crate) fn starts_with_jump(code: &[u8]) -> bool {
    let code = code.strip_prefix(&[0xf3, 0x0f, 0x1e, 0xfa]).unwrap_or(code);
    let code = code.strip_prefix(&[0xf2]).unwrap_or(code);
    match code {
        [0xe9 | 0xeb, ..] => true,
        [0xff, modrm, ..] => (modrm >> 3) & 7 == 4,
        _ => false,
    }
}

/// Where the call before a candidate return address went, as far as its
/// code says (see [`call_went`]).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Went {
    /// A direct call into the module of the code without unwind info.
    Here,
    /// An indirect call, a call to a stub or to code without unwind info:
    /// it may have led anywhere.
    Maybe,
    /// A direct call into code with unwind info of another module (its
    /// own: direct calls stay inside their module) that does not jump on.
    Elsewhere,
}

/// Where the call before `ra` (a return address into `found`'s code) went,
/// for the code without unwind info at `callee`.
fn call_went<'a>(
    tables: Tables<'a>,
    generation: u64,
    cache: &mut UnwindCache,
    loader: &impl Loader,
    found: Found<'a>,
    ra: u64,
    callee: u64,
) -> Went {
    let Some(target) = loader.call_target(found.entry, ra) else {
        return Went::Maybe;
    };
    let Some(t) = tables.find(target) else {
        return Went::Maybe;
    };
    if t.entry.avma.contains(&callee) {
        return Went::Here;
    }
    let Some(cfi) = t
        .entry
        .cfi
        .as_ref()
        .filter(|_| loader.still_loaded(t.entry, target))
    else {
        return Went::Maybe;
    };
    if cached_rule(cache, generation, cfi, target, t.entry.bias) == Rule::NotCovered
        || loader.starts_with_jump(t.entry, target)
    {
        return Went::Maybe;
    }
    Went::Elsewhere
}

/// Stack words a scan looks at, from the stack pointer up, to cross one
/// stretch of code without unwind info (8 KiB).
pub(crate) const SCAN_WORDS: u64 = 1024;

/// Crossings of code without unwind info per walk.
pub(crate) const MAX_RECOVERIES: u32 = 16;

/// A caller for a frame in code without unwind info, at `regs`: sets `regs` to
/// the caller's and returns its return address, or `None` if none is found.
///
/// Candidates are stack words from the stack pointer up (at most
/// [`SCAN_WORDS`]) that are return addresses into code with unwind info
/// (covered by an FDE, right after a call instruction), taken only if one step
/// of that code's own rule from there leads to another return address (or to
/// the root): a stale return address left in a dead part of the stack seldom
/// passes both. One that leads to the root passes the second test trivially (a
/// stale copy of `_start`'s return address did, in a frame of code without
/// unwind info), so it is taken only when no other word of the scan passes and
/// there is no frame-pointer step. A stale return address whose step leads into
/// the live frames passes both: one left by an earlier call tree of the caller
/// (a `malloc` inside the caller's last call) unwinds through that tree's dead
/// frames back into the caller, at the return address of that earlier call; one
/// left by a call of the caller's own callee steps over the real caller to the
/// caller's caller. So a candidate whose call went elsewhere ([`call_went`]: a
/// direct call into another module's code) is passed over for a later one below
/// the slot its own step read its caller from, or one in that slot whose call
/// went directly into the callee's module; a candidate whose call may have gone
/// anywhere (an indirect call, a stub) only for a later one up to that slot
/// whose call went directly into the callee's module. Failing that, the first
/// is taken (its callee may have tail-called into the code without unwind
/// info). The scan stops at rbp's
/// return address slot when rbp is a frame pointer (it points at a saved rbp
/// with a return address above it); if no word below passes, that is a
/// frame-pointer step. The caller's rbp: rbp itself when it is a frame pointer
/// above the found slot (code without frame pointers leaves it alone), else the
/// nearest word below the slot that is one (where code that uses rbp as a
/// register saved it), else rbp. Reads only through `read_stack`; after a read
/// whose value it used only as a [`Role`] says, it tells `note`.
#[cold]
#[inline(never)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn recover<F>(
    tables: Tables<'_>,
    generation: u64,
    callee: u64,
    regs: &mut UnwindRegsX86_64,
    cache: &mut UnwindCache,
    read_stack: &mut F,
    loader: &impl Loader,
    note: &mut dyn FnMut(Role),
) -> Option<u64>
where
    F: FnMut(u64) -> Result<u64, ()>,
{
    let (sp, bp) = (regs.sp(), regs.bp());
    let after_call = |ra: u64| after_call(tables, loader, ra);
    let returns_to = |ra: u64| after_call(ra).is_some();
    // A frame pointer at `w`: `[w + 8]` is a return address.
    let frame_at = |w: u64, read: &mut F| {
        w.is_multiple_of(8)
            && w.checked_add(8)
                .and_then(|at| read(at).ok())
                .is_some_and(returns_to)
    };
    let bp_frame = bp >= sp && frame_at(bp, read_stack);
    let end = sp.saturating_add(SCAN_WORDS * 8);
    let mut end = if bp_frame { end.min(bp + 8) } else { end };
    // The first candidate whose own step ends the stack (see above).
    let mut root: Option<(u64, UnwindRegsX86_64)> = None;
    // The first candidate that passed but whose call did not go directly
    // into the callee's module: where it went, its return address, the
    // caller's registers, and the slot its own step read its caller from.
    let mut first: Option<(Went, u64, UnwindRegsX86_64, u64)> = None;
    let mut slot = sp;
    while slot < end {
        let Ok(ra) = read_stack(slot) else { break };
        let here = slot;
        slot += 8;
        let Some(found) = after_call(ra) else {
            note(Role::NotCode);
            continue;
        };
        let Some(cfi) = &found.entry.cfi else {
            continue;
        };
        let rule = cached_rule(cache, generation, cfi, ra - 1, found.entry.bias);
        if rule == Rule::NotCovered {
            continue;
        }
        let new_sp = here + 8;
        let mut new_bp = bp;
        if !(bp_frame && bp >= new_sp) {
            let mut at = here;
            while at > sp {
                at -= 8;
                let Ok(w) = read_stack(at) else { continue };
                if w < new_sp {
                    note(Role::Below(new_sp));
                } else if frame_at(w, read_stack) {
                    new_bp = w;
                    break;
                }
            }
        }
        // One step of the candidate's own rule, on a copy.
        let mut next = UnwindRegsX86_64::new(ra, new_sp, new_bp);
        let address = FrameAddress::from_return_address(ra)?;
        let step = match rule {
            Rule::Framehop => found.table.unwinder.unwind_frame(
                address,
                &mut next,
                &mut cache.framehop,
                read_stack,
            ),
            rule => rule.step(&mut next, read_stack),
        };
        match step {
            Ok(Some(up)) if returns_to(up) => {
                let caller = UnwindRegsX86_64::new(ra, new_sp, new_bp);
                let went = call_went(tables, generation, cache, loader, found, ra, callee);
                let take = match (went, &first) {
                    (Went::Here, _) => true,
                    (went, None) => {
                        // Its step read its caller's return address at
                        // `sp - 8`: the scan goes on up to that slot.
                        end = end.min(next.sp());
                        first = Some((went, ra, caller, next.sp().saturating_sub(8)));
                        false
                    }
                    (Went::Elsewhere, Some(_)) => false,
                    // Below a first one whose call went elsewhere, and not
                    // its own caller (it may have reached the callee by a
                    // tail call, and is kept).
                    (Went::Maybe, Some((first_went, .., its_caller))) => {
                        *first_went == Went::Elsewhere && here != *its_caller
                    }
                };
                if take {
                    cache.stale_passed += u32::from(first.is_some());
                    *regs = caller;
                    return Some(ra);
                }
            }
            Ok(None) if root.is_none() && first.is_none() => {
                root = Some((ra, UnwindRegsX86_64::new(ra, new_sp, new_bp)))
            }
            _ => {}
        }
    }
    if let Some((_, ra, caller, _)) = first {
        *regs = caller;
        return Some(ra);
    }
    if bp_frame {
        let ra = read_stack(bp + 8).ok()?;
        let caller_bp = read_stack(bp).ok()?;
        *regs = UnwindRegsX86_64::new(ra, bp + 16, caller_bp);
        return Some(ra);
    }
    let (ra, caller) = root?;
    *regs = caller;
    Some(ra)
}

#[cfg(test)]
#[allow(non_snake_case)]
mod tests {
    use super::*;

    #[test]
    fn ends_with_call__call_forms_and_others() {
        let calls: [&[u8]; 9] = [
            &[0xe8, 1, 2, 3, 4],             // call rel32
            &[0xff, 0xd0],                   // call rax
            &[0x41, 0xff, 0xd3],             // call r11
            &[0xff, 0x15, 1, 2, 3, 4],       // call [rip + disp32]
            &[0xff, 0x50, 0x08],             // call [rax + 8]
            &[0xff, 0x14, 0x24],             // call [rsp]
            &[0xff, 0x94, 0x24, 1, 2, 3, 4], // call [rsp + disp32]
            &[0x41, 0xff, 0x54, 0x24, 0x10], // call [r12 + 16]
            &[0xff, 0x14, 0x25, 1, 2, 3, 4], // call [disp32]
        ];
        for c in calls {
            let mut code = vec![0x90; 8 - c.len()];
            code.extend_from_slice(c);
            assert!(ends_with_call(&code), "{c:x?}");
            assert!(ends_with_call(c), "{c:x?} alone");
        }
        let others: [&[u8]; 5] = [
            &[0x90, 0x90, 0x90],       // nops
            &[0xff, 0xe0],             // jmp rax
            &[0xff, 0x50],             // a call cut short
            &[0x48, 0x89, 0xc7],       // mov rdi, rax
            &[0xe8, 1, 2, 3, 4, 0x90], // a call, then a nop
        ];
        for c in others {
            assert!(!ends_with_call(c), "{c:x?}");
        }
    }

    #[test]
    fn starts_with_jump__plt_stubs_and_thunks_but_not_function_entries() {
        let jumps: [&[u8]; 6] = [
            &[0xff, 0x25, 0x12, 0x34, 0, 0, 0],          // jmp *GOT(%rip)
            &[0xf2, 0xff, 0x25, 0x12, 0x34, 0, 0],       // bnd jmp *GOT(%rip)
            &[0xf3, 0x0f, 0x1e, 0xfa, 0xf2, 0xff, 0x25], // endbr64; bnd jmp
            &[0xf3, 0x0f, 0x1e, 0xfa, 0xff, 0x25, 0x12], // endbr64; jmp *
            &[0xe9, 1, 2, 3, 4, 0x90, 0x90],             // jmp rel32
            &[0xff, 0xe0, 0x90, 0x90, 0x90, 0x90, 0x90], // jmp *%rax
        ];
        for c in jumps {
            assert!(starts_with_jump(c), "{c:x?}");
        }
        let entries: [&[u8]; 4] = [
            &[0x55, 0x48, 0x89, 0xe5, 0x90, 0x90, 0x90], // push rbp; mov rbp, rsp
            &[0xf3, 0x0f, 0x1e, 0xfa, 0x55, 0x48, 0x89], // endbr64; push rbp
            &[0xff, 0x15, 1, 2, 3, 4, 0x90],             // call *(%rip): no jump
            &[0x48, 0x83, 0xec, 0x08, 0xe9, 0, 0],       // sub rsp, 8; then a jump
        ];
        for c in entries {
            assert!(!starts_with_jump(c), "{c:x?}");
        }
    }
}
