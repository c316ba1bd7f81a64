//! Stacks of the unwinder's own, so that a capture costs the calling thread
//! almost none of its stack.
//!
//! The caller may be a thread with a 16 KiB stack or a signal handler on an
//! 8 KiB `sigaltstack`. The walk's scratch space (gimli's FDE parsing, the Python
//! reader's string buffers, the `/proc/self/maps` buffer) is tens of KiB in
//! unoptimized builds, so the capture switches to a stack owned by its unwind
//! cache: one `mmap`, lazily resident, with a `PROT_NONE` guard page below it.
//! The trampoline has CFI that leads back to the caller's stack, so debuggers
//! and profilers still see one stack.

use std::ffi::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// Bytes of each scratch stack, guard page excluded. Only touched pages are
/// resident.
pub(crate) const SCRATCH_BYTES: usize = 256 << 10;
const GUARD: usize = 4096;

core::arch::global_asm!(
    ".text",
    ".p2align 4",
    ".globl gpuperf_unwind_on_stack",
    ".hidden gpuperf_unwind_on_stack",
    ".type gpuperf_unwind_on_stack, @function",
    // rdi = argument, rsi = function, rdx = new stack top (16-byte aligned).
    "gpuperf_unwind_on_stack:",
    ".cfi_startproc",
    "push rbp",
    ".cfi_def_cfa_offset 16",
    ".cfi_offset rbp, -16",
    "mov rbp, rsp",
    // While on the scratch stack the caller's frame is found through rbp.
    ".cfi_def_cfa_register rbp",
    "mov rsp, rdx",
    "call rsi",
    "mov rsp, rbp",
    ".cfi_def_cfa rsp, 16",
    "pop rbp",
    ".cfi_def_cfa_offset 8",
    "ret",
    ".cfi_endproc",
    ".size gpuperf_unwind_on_stack, . - gpuperf_unwind_on_stack",
);

unsafe extern "C" {
    fn gpuperf_unwind_on_stack(arg: *mut c_void, f: extern "C" fn(*mut c_void), top: *mut u8);
}

/// One scratch stack; used by one thread at a time (its cache slot's owner).
pub(crate) struct ScratchStack {
    base: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain memory; the slot's `busy` flag gives one thread
// at a time the right to run on it.
unsafe impl Send for ScratchStack {}
// SAFETY: as for `Send`; `&self` methods only read the two fields.
unsafe impl Sync for ScratchStack {}

impl ScratchStack {
    /// Maps a stack; `None` when memory is short (captures then run on the
    /// caller's stack).
    pub fn new() -> Option<ScratchStack> {
        let len = GUARD + SCRATCH_BYTES;
        // SAFETY: a fresh anonymous mapping; no existing memory is touched.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_STACK,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return None;
        }
        // SAFETY: the first page of the mapping just made. Overflowing the
        // scratch stack faults here instead of writing over other memory.
        if unsafe { libc::mprotect(base, GUARD, libc::PROT_NONE) } != 0 {
            // SAFETY: the mapping just made, unused.
            unsafe { libc::munmap(base, len) };
            return None;
        }
        Some(ScratchStack {
            base: base.cast(),
            len,
        })
    }

    /// Runs `f` on this stack and returns its result; `None` if it panicked
    /// (a panic never unwinds through the stack switch).
    ///
    /// # Safety
    /// No other thread may run on this stack meanwhile.
    pub unsafe fn run<R>(&self, f: impl FnOnce() -> R) -> Option<R> {
        let mut f = Some(f);
        let mut result = None;
        let mut call = || {
            if let Some(f) = f.take() {
                result = catch_unwind(AssertUnwindSafe(f)).ok();
            }
        };
        let mut dynf: &mut dyn FnMut() = &mut call;
        extern "C" fn shim(arg: *mut c_void) {
            // SAFETY: `arg` is the `&mut dyn FnMut()` below, alive for the call;
            // it catches its own panics.
            let f = unsafe { &mut *arg.cast::<&mut dyn FnMut()>() };
            f();
        }
        // The top of the mapping, 16-byte aligned as the ABI wants at a call.
        let top = self.base.wrapping_add(self.len);
        // SAFETY: the trampoline calls `shim(&mut dynf)` with rsp at `top`,
        // inside a mapping only this thread uses now (the caller's promise), and
        // restores rsp before returning.
        unsafe { gpuperf_unwind_on_stack((&raw mut dynf).cast(), shim, top) };
        result
    }
}

impl Drop for ScratchStack {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`; nothing runs on it (`&mut self`).
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_on_its_own_stack_and_returns_the_result() {
        let s = ScratchStack::new().expect("memory for a stack");
        let outside = 0u8;
        let outside = &outside as *const u8 as usize;
        // SAFETY: only this thread uses `s`.
        let inside = unsafe {
            s.run(|| {
                let x = 0u8;
                std::hint::black_box(&x as *const u8 as usize)
            })
        }
        .expect("no panic");
        let range = s.base as usize..s.base as usize + s.len;
        assert!(range.contains(&inside), "{inside:#x} not in {range:x?}");
        assert!(!range.contains(&outside));
    }

    #[test]
    fn a_panic_stays_on_the_scratch_stack() {
        let s = ScratchStack::new().expect("memory for a stack");
        // SAFETY: only this thread uses `s`.
        let r: Option<()> = unsafe { s.run(|| panic!("inside")) };
        assert!(r.is_none());
    }
}
