//! Each thread's stack mapping, found without allocating or locking.
//!
//! `pthread_getattr_np` would be the obvious source, but glibc's allocates (a
//! `realloc`ed CPU set for every thread, `fopen` of `/proc/self/maps` for the main
//! thread), which can deadlock inside a malloc replacement that calls CUDA. So the
//! mapping holding the stack pointer is read from `/proc/self/maps` with raw
//! `openat`/`read` system calls (no cancellation points) into a buffer on the
//! capture's scratch stack, once per thread, and cached
//! in a fixed table keyed by `pthread_self()`. glibc keeps a thread's descriptor at
//! the top of its stack, so a reused `pthread_t` means the same stack; the cached
//! ranges are still checked against the stack pointer on every use. A thread
//! keeps several ranges: coroutines and fibers run on stacks of their own.
//!
//! Threads that exit are never told to the table, so a program that keeps
//! making threads would fill it, and every capture of its later threads would
//! read `/proc/self/maps`. So a thread that finds its probe window full takes
//! over one slot of it, round-robin: the slot's key is swapped first and its
//! ranges cleared after, and a reader re-checks the key after reading a range
//! (a seqlock), so that it never uses a range the new owner wrote. An evicted
//! thread still alive reads the maps once more and takes a slot again.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Slots in the table; threads beyond it are looked up on every capture (counted).
const SLOTS: usize = 4096;
/// Linear probing limit.
const PROBES: usize = 64;
/// Stack ranges kept per thread: its own stack and the coroutine or fiber
/// stacks it switches to (ucontext, boost.context), replaced round-robin.
const RANGES: usize = 4;

struct Range {
    lo: AtomicU64,
    hi: AtomicU64,
}

struct Slot {
    key: AtomicUsize,
    ranges: [Range; RANGES],
    /// The range the next new one replaces.
    next: AtomicUsize,
}

pub(crate) struct StackTable {
    slots: Box<[Slot]>,
    /// Evictions so far, which picks the next victim in a full window.
    evictions: AtomicUsize,
}

impl StackTable {
    pub fn new() -> Self {
        let slots = (0..SLOTS)
            .map(|_| Slot {
                key: AtomicUsize::new(0),
                ranges: std::array::from_fn(|_| Range {
                    lo: AtomicU64::new(0),
                    hi: AtomicU64::new(0),
                }),
                next: AtomicUsize::new(0),
            })
            .collect();
        StackTable {
            slots,
            evictions: AtomicUsize::new(0),
        }
    }

    /// The calling thread's stack mapping `[lo, hi)` holding `sp`. The second value
    /// is `true` when `/proc/self/maps` had to be read.
    pub fn bounds(&self, sp: u64) -> (Option<(u64, u64)>, bool) {
        // SAFETY: pthread_self has no preconditions.
        let me = unsafe { libc::pthread_self() } as usize;
        self.bounds_of(me, sp, mapping_containing)
    }

    /// [`StackTable::bounds`] for the thread `me`, with `lookup` reading the
    /// maps.
    fn bounds_of(
        &self,
        me: usize,
        sp: u64,
        lookup: impl Fn(u64) -> Option<(u64, u64)>,
    ) -> (Option<(u64, u64)>, bool) {
        let start = (me >> 12).wrapping_mul(0x9e37_79b9_7f4a_7c15) % SLOTS;
        let mut mine = None;
        for i in 0..PROBES {
            let slot = &self.slots[(start + i) % SLOTS];
            let mut key = slot.key.load(Ordering::Acquire);
            if key == 0 {
                key = match slot
                    .key
                    .compare_exchange(0, me, Ordering::AcqRel, Ordering::Acquire)
                {
                    Ok(_) => {
                        clear(slot);
                        me
                    }
                    Err(other) => other,
                };
            }
            if key == me {
                mine = Some(slot);
                break;
            }
        }
        let slot = match mine {
            Some(slot) => slot,
            None => {
                // The window is full of other threads, most of them gone:
                // take one slot over.
                let k = self.evictions.fetch_add(1, Ordering::Relaxed) % PROBES;
                let slot = &self.slots[(start + k) % SLOTS];
                let old = slot.key.load(Ordering::Acquire);
                if slot
                    .key
                    .compare_exchange(old, me, Ordering::AcqRel, Ordering::Acquire)
                    .is_err()
                {
                    // Another thread took it meanwhile: look up without caching.
                    return (lookup(sp), true);
                }
                // The key first, then the ranges: an old owner reading them
                // meanwhile sees the key change and drops what it read.
                std::sync::atomic::fence(Ordering::Release);
                clear(slot);
                slot
            }
        };
        for r in &slot.ranges {
            let (lo, hi) = (r.lo.load(Ordering::Relaxed), r.hi.load(Ordering::Relaxed));
            std::sync::atomic::fence(Ordering::Acquire);
            if slot.key.load(Ordering::Relaxed) != me {
                // Taken over while reading: this range may be the new owner's.
                return (lookup(sp), true);
            }
            if lo <= sp && sp < hi {
                return (Some((lo, hi)), false);
            }
        }
        // Not the thread's stack: a signal handler's alternate stack is
        // tighter than the mapping it lies in (often the heap), and is not
        // cached (the thread comes back to its own stack).
        if let Some(alt) = alt_stack_holding(sp) {
            return (Some(alt), false);
        }
        let found = lookup(sp);
        // Stored even if the slot was just taken over: a range of this
        // thread's stack mapping holds no other live thread's stack
        // pointer, so its new owner never uses it.
        if let Some((lo, hi)) = found {
            let i = slot.next.fetch_add(1, Ordering::Relaxed) % RANGES;
            slot.ranges[i].lo.store(lo, Ordering::Relaxed);
            slot.ranges[i].hi.store(hi, Ordering::Relaxed);
        }
        (found, true)
    }
}

/// Empties a slot's ranges (its key was just taken).
fn clear(slot: &Slot) {
    for r in &slot.ranges {
        r.lo.store(0, Ordering::Relaxed);
        r.hi.store(0, Ordering::Relaxed);
    }
}

/// The alternate signal stack `[lo, hi)`, if the thread is running on it and
/// it holds `sp`.
fn alt_stack_holding(sp: u64) -> Option<(u64, u64)> {
    let mut ss = libc::stack_t {
        ss_sp: std::ptr::null_mut(),
        ss_flags: 0,
        ss_size: 0,
    };
    // SAFETY: queries only (no new stack); `ss` is a valid out-pointer.
    if unsafe { libc::sigaltstack(std::ptr::null(), &mut ss) } != 0
        || ss.ss_flags & libc::SS_ONSTACK == 0
    {
        return None;
    }
    let lo = ss.ss_sp as u64;
    let hi = lo.checked_add(ss.ss_size as u64)?;
    (lo <= sp && sp < hi).then_some((lo, hi))
}

/// Raw system calls: glibc's `open`, `read` and `close` are cancellation
/// points, and a thread cancelled inside a capture would unwind through frames
/// that must not be unwound.
fn sys_open(path: &std::ffi::CStr) -> i32 {
    // SAFETY: a NUL-terminated path; openat does not touch other memory.
    unsafe {
        libc::syscall(
            libc::SYS_openat,
            libc::AT_FDCWD,
            path.as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        ) as i32
    }
}

fn sys_read(fd: i32, buf: &mut [u8]) -> isize {
    // SAFETY: writes at most `buf.len()` bytes into `buf`.
    unsafe { libc::syscall(libc::SYS_read, fd, buf.as_mut_ptr(), buf.len()) as isize }
}

fn sys_close(fd: i32) {
    // SAFETY: closes a descriptor this module opened.
    unsafe { libc::syscall(libc::SYS_close, fd) };
}

/// The top of the main thread's stack mapping (`[stack]` in the maps), once
/// a lookup has met it; 0 before.
static MAIN_STACK_TOP: AtomicU64 = AtomicU64::new(0);

/// Whether the stack mapping ending at `hi` is the main thread's, which the
/// kernel grows as it is touched: its low end is only where the deepest frame
/// so far reached, not how far the stack may grow (that is `RLIMIT_STACK`).
pub(crate) fn grows_down(hi: u64) -> bool {
    hi == MAIN_STACK_TOP.load(Ordering::Relaxed)
}

/// Whether the mapping `[lo, hi)` is the calling thread's own stack as its C
/// library made it: glibc and musl put the thread's descriptor at the top of
/// the mapping they allocate for its stack. A stack the program gave
/// (`pthread_attr_setstack`), and a coroutine's on the heap or in a mapping
/// of its own, do not hold it, nor does the main thread's.
#[inline(always)]
pub(crate) fn holds_thread(lo: u64, hi: u64) -> bool {
    // SAFETY: pthread_self has no preconditions.
    let me = unsafe { libc::pthread_self() } as u64;
    lo <= me && me < hi
}

/// Notes `line`'s range as the main thread's stack if the maps name it so.
fn note_main_stack(line: &[u8], hi: u64) {
    if line.trim_ascii_end().ends_with(b"[stack]") {
        MAIN_STACK_TOP.store(hi, Ordering::Relaxed);
    }
}

/// The `/proc/self/maps` range holding `address`, read with system calls only.
pub(crate) fn mapping_containing(address: u64) -> Option<(u64, u64)> {
    let fd = sys_open(c"/proc/self/maps");
    if fd < 0 {
        return None;
    }
    let mut buf = [0u8; 4096];
    let mut filled = 0;
    let mut found = None;
    'read: loop {
        let n = sys_read(fd, &mut buf[filled..]);
        if n <= 0 {
            break;
        }
        filled += n as usize;
        let mut line_start = 0;
        while let Some(nl) = buf[line_start..filled].iter().position(|&b| b == b'\n') {
            let line = &buf[line_start..line_start + nl];
            if let Some((lo, hi)) = parse_range(line)
                && lo <= address
                && address < hi
            {
                note_main_stack(line, hi);
                found = Some((lo, hi));
                break 'read;
            }
            line_start += nl + 1;
        }
        // Keep the partial last line; a line longer than the buffer (a long path)
        // still has its range at the front, which is all we parse.
        if line_start == 0 && filled == buf.len() {
            if let Some((lo, hi)) = parse_range(&buf[..filled])
                && lo <= address
                && address < hi
            {
                found = Some((lo, hi));
                break;
            }
            // Skip to the end of this long line.
            loop {
                let n = sys_read(fd, &mut buf);
                if n <= 0 {
                    break 'read;
                }
                let n = n as usize;
                if let Some(nl) = buf[..n].iter().position(|&b| b == b'\n') {
                    buf.copy_within(nl + 1..n, 0);
                    filled = n - nl - 1;
                    break;
                }
            }
            continue;
        }
        buf.copy_within(line_start..filled, 0);
        filled -= line_start;
    }
    sys_close(fd);
    found
}

/// `start-end` at the front of a maps line.
fn parse_range(line: &[u8]) -> Option<(u64, u64)> {
    let dash = line.iter().position(|&b| b == b'-')?;
    let space = line.iter().position(|&b| b == b' ')?;
    Some((hex(line.get(..dash)?)?, hex(line.get(dash + 1..space)?)?))
}

fn hex(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 16 {
        return None;
    }
    s.iter().try_fold(0u64, |acc, &c| {
        let d = (c as char).to_digit(16)?;
        Some(acc << 4 | u64::from(d))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_stack_mapping_holds_a_local() {
        let x = 5u64;
        let a = &x as *const u64 as u64;
        let (lo, hi) = mapping_containing(a).expect("stack is mapped");
        assert!(lo <= a && a < hi);
        let t = StackTable::new();
        let (b, scanned) = t.bounds(a);
        assert_eq!(b, Some((lo, hi)));
        assert!(scanned);
        assert_eq!(t.bounds(a), (Some((lo, hi)), false));
        std::hint::black_box(x);
    }

    #[test]
    fn only_the_main_threads_stack_mapping_grows_down() {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let line = maps.lines().find(|l| l.ends_with("[stack]")).unwrap();
        let (lo, hi) = parse_range(line.as_bytes()).unwrap();
        assert_eq!(mapping_containing(lo), Some((lo, hi)));
        assert!(grows_down(hi));
        // A test runs on a thread of its own, in a mapping of fixed size.
        let x = 5u64;
        let (_, own_hi) = mapping_containing(&x as *const u64 as u64).unwrap();
        assert_ne!(own_hi, hi);
        assert!(!grows_down(own_hi));
        std::hint::black_box(x);
    }

    /// Issue 39, item 6: threads that exit are never removed, so a program
    /// that keeps making threads filled the table and every capture of its
    /// later threads read `/proc/self/maps`. A later thread takes over a slot.
    #[test]
    fn a_table_full_of_gone_threads_still_caches_new_ones() {
        let t = StackTable::new();
        let maps = std::cell::Cell::new(0u32);
        let lookup = |sp: u64| {
            maps.set(maps.get() + 1);
            Some((sp & !0xfff, (sp & !0xfff) + 0x1000))
        };
        // Threads with distinct descriptors, each capturing twice and gone.
        let n = SLOTS * 3;
        for k in 1..=n {
            let me = k << 21;
            let sp = (k as u64) << 24;
            assert!(t.bounds_of(me, sp, lookup).1);
            assert!(!t.bounds_of(me, sp + 8, lookup).1, "thread {k}");
        }
        assert_eq!(maps.get() as usize, n);
        // The first thread, evicted long ago and still alive, reads the maps
        // once more, and is cached again.
        assert!(t.bounds_of(1 << 21, 1 << 24, lookup).1);
        assert!(!t.bounds_of(1 << 21, 1 << 24, lookup).1);
    }

    #[test]
    fn parse_maps_line() {
        assert_eq!(
            parse_range(b"7ffd1000-7ffd2000 rw-p 00000000 00:00 0   [stack]"),
            Some((0x7ffd1000, 0x7ffd2000))
        );
        assert_eq!(parse_range(b"garbage"), None);
    }
}
