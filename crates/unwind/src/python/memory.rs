//! Reads: the memory a capture knows to be readable ([`Known`]), and the probes
//! that prove a page readable without faulting (`rt_sigprocmask`, else
//! `process_vm_readv`).

use std::ffi::c_void;
use std::mem::MaybeUninit;
use std::sync::atomic::Ordering;

use super::memo::CodeMemo;
use super::{MAX_PYTHON_FRAMES, Python, reason};

/// Memory known readable during one capture: the thread's stack, and the last
/// page spans found readable in this capture (the frames of a thread share a
/// few pages, and so do the code objects of a module), which spares most
/// probes. Nothing is remembered across captures: a page found readable once
/// may be unmapped before the next.
pub(super) struct Known<'m> {
    pub(super) stack: (u64, u64),
    /// The capturing thread's code memo, if it keeps one.
    pub(super) codes: Option<&'m mut CodeMemo>,
    /// `[start, end)` of page-aligned spans; empty when equal.
    pub(super) recent: [(u64, u64); RECENT],
    pub(super) next: usize,
    /// Pages probed together (the code objects of the chain), unordered.
    /// `pages[..npages]` are set; the rest is never read (zeroing it cost more
    /// than a whole walk).
    pub(super) pages: [MaybeUninit<u64>; PAGES],
    pub(super) npages: usize,
    /// System calls made to probe.
    pub(super) probes: u64,
}

/// Spans a capture remembers.
pub(super) const RECENT: usize = 8;
/// Pages of code objects a capture probes in one system call.
pub(super) const PAGES: usize = 2 * MAX_PYTHON_FRAMES;

impl<'m> Known<'m> {
    #[cfg(test)]
    pub(super) fn new(stack: (u64, u64)) -> Known<'m> {
        Known::with_codes(stack, None)
    }

    pub(super) fn with_codes(stack: (u64, u64), codes: Option<&'m mut CodeMemo>) -> Known<'m> {
        Known {
            stack,
            codes,
            recent: [(0, 0); RECENT],
            next: 0,
            pages: [MaybeUninit::uninit(); PAGES],
            npages: 0,
            probes: 0,
        }
    }

    pub(super) fn has_page(&self, page: u64) -> bool {
        self.pages[..self.npages].iter().any(|p| {
            // SAFETY: `pages[..npages]` were written by `probe_code_pages`.
            unsafe { p.assume_init() == page }
        })
    }

    #[inline(always)]
    pub(super) fn covers(&self, addr: u64, end: u64) -> bool {
        (self.stack.0 <= addr && end <= self.stack.1)
            || self.recent.iter().any(|&(lo, hi)| lo <= addr && end <= hi)
            || (self.npages > 0
                && end > addr
                && (addr >> 12..=(end - 1) >> 12).all(|p| self.has_page(p)))
    }

    /// Pages `first..=last` are readable.
    pub(super) fn remember(&mut self, first: u64, last: u64) {
        self.recent[self.next % RECENT] = (first << 12, (last + 1) << 12);
        self.next = self.next.wrapping_add(1);
    }
}

impl Python {
    /// Probes the pages of the code objects `codes` not already known, and
    /// remembers them for this capture. An unreadable one is left for
    /// `code_id` to report.
    pub(super) fn probe_code_pages(
        &self,
        codes: impl Iterator<Item = u64>,
        mem: &mut Known,
    ) -> Result<(), &'static str> {
        for code in codes {
            let Some(end) = code.checked_add(self.code_span) else {
                return Err(reason::CODE_UNREADABLE);
            };
            if mem.covers(code, end) {
                continue;
            }
            for p in code >> 12..=(end - 1) >> 12 {
                if mem.has_page(p) {
                    continue;
                }
                mem.probes += 1;
                if !self.page_readable(p) {
                    continue;
                }
                if mem.npages < PAGES {
                    mem.pages[mem.npages].write(p);
                    mem.npages += 1;
                }
            }
        }
        Ok(())
    }

    /// Whether page `page` can be read now, without faulting.
    ///
    /// `rt_sigprocmask` with an invalid `how` copies the 8-byte set from the
    /// address first (EFAULT if it cannot) and then refuses (EINVAL), changing
    /// nothing: a probe at the cost of a plain system call. `process_vm_readv`
    /// says the same at about ten times the cost (pinning the page), and is
    /// the fallback where a seccomp filter refuses the first.
    pub(super) fn page_readable(&self, page: u64) -> bool {
        const HOW_INVALID: libc::c_long = -1;
        // SAFETY: the kernel only reads 8 bytes at the address (or fails with
        // EFAULT), and with an invalid `how` changes no signal mask.
        let r = unsafe {
            libc::syscall(
                libc::SYS_rt_sigprocmask,
                HOW_INVALID,
                page << 12,
                std::ptr::null_mut::<c_void>(),
                8usize,
            )
        };
        let errno = if r < 0 {
            std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
        } else {
            0
        };
        match errno {
            libc::EINVAL => true,
            libc::EFAULT => false,
            _ => {
                if self.vm_read(page << 12, &mut [0u8; 1]) {
                    return true;
                }
                let e = std::io::Error::last_os_error().raw_os_error();
                if matches!(e, Some(libc::EPERM | libc::ENOSYS | libc::EACCES)) {
                    self.refused.store(true, Ordering::Relaxed);
                }
                false
            }
        }
    }

    /// May `[addr, addr+len)` be read directly? The thread's stack may; other
    /// memory once its pages were read successfully by `process_vm_readv` in
    /// this capture.
    #[inline(always)]
    pub(super) fn readable(&self, addr: u64, len: u64, mem: &mut Known) -> bool {
        let Some(end) = addr.checked_add(len) else {
            return false;
        };
        mem.covers(addr, end) || self.readable_pages(addr, end, mem)
    }

    #[inline(never)]
    pub(super) fn readable_pages(&self, addr: u64, end: u64, mem: &mut Known) -> bool {
        let (first, last) = (addr >> 12, (end - 1) >> 12);
        if !(first..=last).all(|p| {
            mem.probes += 1;
            self.page_readable(p)
        }) {
            return false;
        }
        mem.remember(first, last);
        true
    }

    /// Copies `dst.len()` bytes from `addr` if they are live (`live`: part of
    /// an object a live code object refers to) or found readable.
    pub(super) fn safe_read(&self, addr: u64, dst: &mut [u8], mem: &mut Known, live: bool) -> bool {
        if dst.is_empty() {
            return true;
        }
        if live || self.readable(addr, dst.len() as u64, mem) {
            // SAFETY: live, or checked readable above.
            unsafe {
                std::ptr::copy_nonoverlapping(addr as *const u8, dst.as_mut_ptr(), dst.len())
            };
            return true;
        }
        false
    }

    pub(super) fn vm_read(&self, addr: u64, dst: &mut [u8]) -> bool {
        let local = libc::iovec {
            iov_base: dst.as_mut_ptr().cast(),
            iov_len: dst.len(),
        };
        let remote = libc::iovec {
            iov_base: addr as *mut c_void,
            iov_len: dst.len(),
        };
        // SAFETY: reads this process's memory into `dst`; a bad address returns
        // EFAULT instead of faulting.
        let n = unsafe { libc::process_vm_readv(self.pid, &local, 1, &remote, 1, 0) };
        n == dst.len() as isize
    }
}
