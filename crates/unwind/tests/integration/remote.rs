//! The out-of-process unwinder, given this process's maps and a copy of its stack,
//! finds the same frames as the in-process unwinder.

use std::path::PathBuf;

use gpuperf_unwind::{
    Frame, LocalUnwinder, MAX_FRAMES, Options, RemoteUnwinder, StackCopy, StackEnd, UnwindCache,
    current_regs,
};

/// (path, offset) per frame.
type Named = Vec<(PathBuf, u64)>;

#[inline(never)]
fn both(local: &LocalUnwinder, depth: u32) -> (Named, StackEnd, Named, StackEnd) {
    if depth > 0 {
        let r = both(local, depth - 1);
        std::hint::black_box(&r);
        return r;
    }
    let regs = current_regs!();
    // Copy 256 KiB above the stack pointer, as BPF copies the top of a stack.
    let (lo, hi) = stack_bounds(regs.sp);
    assert!(lo <= regs.sp);
    let len = (hi - regs.sp).min(256 * 1024) as usize;
    let mut copy = vec![0u8; len];
    // SAFETY: [sp, sp+len) is inside this thread's stack mapping.
    unsafe { std::ptr::copy_nonoverlapping(regs.sp as *const u8, copy.as_mut_ptr(), len) };

    let mut frames = [Frame::default(); MAX_FRAMES];
    let l = local.capture_from(regs, 0, &mut frames);
    let lm = local.modules();
    let lframes = named(&frames[..l.len], |i| lm[i].path.clone());

    let (remote, errors) = RemoteUnwinder::from_pid(std::process::id()).unwrap();
    assert!(errors.is_empty(), "{errors:?}");
    let mut cache = UnwindCache::new();
    let mut rframes = [Frame::default(); MAX_FRAMES];
    let stack = StackCopy {
        start: regs.sp,
        bytes: &copy,
    };
    let r = remote.unwind(regs, stack, &mut cache, &mut rframes);
    let rm = remote.modules();
    let rframes = named(&rframes[..r.len], |i| rm[i].path.clone());
    (lframes, l.end, rframes, r.end)
}

fn named(frames: &[Frame], path: impl Fn(usize) -> PathBuf) -> Vec<(PathBuf, u64)> {
    frames
        .iter()
        .map(|f| match *f {
            Frame::Native { module, offset, .. } => {
                let p = path(module.0 as usize);
                (p.canonicalize().unwrap_or(p), offset)
            }
            other => panic!("unexpected frame {other:?}"),
        })
        .collect()
}

fn stack_bounds(sp: u64) -> (u64, u64) {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    maps.lines()
        .find_map(|l| {
            let (r, _) = l.split_once(' ')?;
            let (a, b) = r.split_once('-')?;
            let (a, b) = (
                u64::from_str_radix(a, 16).ok()?,
                u64::from_str_radix(b, 16).ok()?,
            );
            (a <= sp && sp < b).then_some((a, b))
        })
        .unwrap()
}

#[test]
fn remote_unwind_of_a_copied_stack__matches_the_local_unwind_frame_for_frame() {
    let local = LocalUnwinder::new(Options::default());
    let (l, lend, r, rend) = both(&local, 5);
    assert_eq!(lend, StackEnd::Root, "{l:#x?}");
    assert_eq!(rend, StackEnd::Root, "{r:#x?}");
    assert!(l.len() > 8, "{l:#x?}");
    assert_eq!(l, r);
}

#[test]
fn remote_unwind_of_a_short_copy__is_truncated_not_complete() {
    let local = LocalUnwinder::new(Options::default());
    let regs = current_regs!();
    let copy = vec![0u8; 64];
    let (remote, _) = RemoteUnwinder::from_pid(std::process::id()).unwrap();
    let mut frames = [Frame::default(); MAX_FRAMES];
    let r = remote.unwind(
        regs,
        StackCopy {
            start: regs.sp,
            bytes: &copy,
        },
        &mut UnwindCache::new(),
        &mut frames,
    );
    assert!(r.end.is_truncated(), "{r:?}");
    assert!(r.len >= 1);
    drop(local);
}
