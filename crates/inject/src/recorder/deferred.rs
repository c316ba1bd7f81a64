//! The activity buffers that a flush inside a CUDA callback made CUPTI hand
//! back on the application's thread, waiting for the flush thread to decode
//! them.
//!
//! Decoding allocates (the string table, the correlation maps, the encoder),
//! and an allocation that fails aborts the process. So a flush inside a
//! callback (`cudaDeviceReset`, a context destroyed) only makes CUPTI deliver
//! its buffers before the context dies; the buffers, gpuperf's own
//! allocations, wait here, and the flush thread decodes them in the order they
//! came, before anything delivered later. Nothing here grows: the queue's
//! slots, the copies of the names and their table are allocated once, at
//! start.
//!
//! Kernel and device names are pointers into CUPTI's memory, which is only
//! known to be valid while the buffer callback runs (a context being destroyed
//! takes its modules with it). So their strings are copied here while it
//! runs, and the later decoding reads the copies. A buffer whose names do not
//! fit, or that finds the queue full, is decoded where it arrived, as before
//! (counted).

use std::ffi::{CStr, c_char};
use std::ptr;

/// Buffers that may wait at once.
pub(super) const SLOTS: usize = 64;
/// Bytes of name copies, with their NULs.
const NAME_BYTES: usize = 1 << 20;
/// Slots of the table of names copied (a power of two), filled to 3/4 at most.
const NAME_SLOTS: usize = 1 << 12;

/// One buffer waiting to be decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Waiting {
    /// The buffer, as `buffer_requested` handed it out.
    pub(super) buf: *mut u8,
    /// Its size.
    pub(super) size: usize,
    /// The bytes of records in it.
    pub(super) valid: usize,
    /// The records CUPTI dropped in its context and stream, read when it
    /// arrived (the context may be gone when it is decoded).
    pub(super) dropped: u64,
}

/// A name copied: the address CUPTI's records hold, and where the copy is.
#[derive(Clone, Copy, Default)]
struct Copied {
    /// 0 for an empty slot.
    from: usize,
    at: usize,
}

/// The queue of buffers waiting, and the copies of their names.
pub(super) struct Deferred {
    slots: [Option<Waiting>; SLOTS],
    head: usize,
    len: usize,
    /// Never grown past the capacity reserved at start: the copies stay put.
    names: Vec<u8>,
    table: Vec<Copied>,
    kept: usize,
    /// The last name kept, which runs of one kernel repeat.
    last: usize,
}

// SAFETY: the buffers are gpuperf's own, handed over by CUPTI; whoever pops
// one owns it. The struct is only reached under its mutex.
unsafe impl Send for Deferred {}

impl Deferred {
    /// The queue, its copies allocated fallibly: without them (memory short
    /// at start) nothing waits, and every buffer is decoded where it arrives.
    pub(super) fn new() -> Self {
        let mut names = Vec::new();
        let mut table = Vec::new();
        if names.try_reserve_exact(NAME_BYTES).is_err()
            || table.try_reserve_exact(NAME_SLOTS).is_err()
        {
            names = Vec::new();
            table = Vec::new();
        } else {
            // Within the capacity reserved: no allocation.
            table.resize(NAME_SLOTS, Copied::default());
        }
        Self {
            slots: [None; SLOTS],
            head: 0,
            len: 0,
            names,
            table,
            kept: 0,
            last: 0,
        }
    }

    /// Whether buffers can wait here at all.
    pub(super) fn usable(&self) -> bool {
        !self.table.is_empty()
    }

    /// Buffers waiting.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Copies the name at `p` (null: nothing to copy), unless a copy of the
    /// same text from the same address is kept already. False when it does
    /// not fit, or when the address held another text before (its memory was
    /// reused): the buffer must then be decoded now.
    ///
    /// # Safety
    /// `p` is null or a NUL-terminated string valid for the call.
    pub(super) unsafe fn keep_name(&mut self, p: *const c_char) -> bool {
        let from = p as usize;
        if from == 0 || from == self.last {
            return true;
        }
        if !self.usable() {
            return false;
        }
        // SAFETY: as this function's contract.
        let text = unsafe { CStr::from_ptr(p) }.to_bytes_with_nul();
        let (i, found) = self.probe(from);
        if let Some(c) = found {
            let same = self.names.get(c.at..c.at + text.len()) == Some(text);
            if same {
                self.last = from;
            }
            return same;
        }
        if self.kept >= NAME_SLOTS / 4 * 3 || self.names.len() + text.len() > NAME_BYTES {
            return false;
        }
        let at = self.names.len();
        // Within the capacity reserved (checked above): no allocation.
        self.names.extend_from_slice(text);
        self.table[i] = Copied { from, at };
        self.kept += 1;
        self.last = from;
        true
    }

    /// The copy of the name CUPTI's records hold at `p`: null for a null
    /// `p`, or for a name not copied (never the case for a buffer queued).
    pub(super) fn name(&self, p: *const c_char) -> *const c_char {
        let from = p as usize;
        if from == 0 || !self.usable() {
            return ptr::null();
        }
        match self.probe(from).1 {
            Some(c) => self.names[c.at..].as_ptr().cast(),
            None => ptr::null(),
        }
    }

    /// The table slot of the name copied from `from` (non-zero), and the
    /// copy; or, where none was, the empty slot where it would go. The table
    /// is never full (filled to 3/4 at most), so the probe ends.
    fn probe(&self, from: usize) -> (usize, Option<Copied>) {
        let mask = NAME_SLOTS - 1;
        let mut i = (from >> 3).wrapping_mul(0x9E37_79B9_7F4A_7C15) & mask;
        loop {
            let c = self.table[i];
            if c.from == from {
                return (i, Some(c));
            }
            if c.from == 0 {
                return (i, None);
            }
            i = (i + 1) & mask;
        }
    }

    /// Queues a buffer whose names are kept; false when every slot is taken.
    pub(super) fn push(&mut self, w: Waiting) -> bool {
        if self.len == SLOTS {
            return false;
        }
        self.slots[(self.head + self.len) % SLOTS] = Some(w);
        self.len += 1;
        true
    }

    /// Starts the walk of a buffer's names: the last name kept is compared
    /// again (another buffer's name may sit where it was).
    pub(super) fn start_buffer(&mut self) {
        self.last = 0;
    }

    /// Takes the buffer that has waited longest. Its names stay copied until
    /// [`Deferred::forget_names`].
    pub(super) fn pop(&mut self) -> Option<Waiting> {
        if self.len == 0 {
            return None;
        }
        let w = self.slots[self.head].take();
        self.head = (self.head + 1) % SLOTS;
        self.len -= 1;
        w
    }

    /// Lets the copies of the names go, once no buffer waits.
    pub(super) fn forget_names(&mut self) {
        if self.kept == 0 || self.len > 0 {
            return;
        }
        self.names.clear();
        self.table.fill(Copied::default());
        self.kept = 0;
        self.last = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waiting(n: usize) -> Waiting {
        Waiting {
            buf: n as *mut u8,
            size: 4,
            valid: n,
            dropped: 0,
        }
    }

    #[test]
    fn buffers_come_out_in_the_order_they_went_in_and_a_full_queue_refuses() {
        let mut d = Deferred::new();
        assert!(d.usable());
        for i in 1..=SLOTS {
            assert!(d.push(waiting(i)));
        }
        assert!(!d.push(waiting(SLOTS + 1)));
        for i in 1..=SLOTS / 2 {
            assert_eq!(d.pop(), Some(waiting(i)));
        }
        // Slots freed at the front are used again, after the others.
        assert!(d.push(waiting(1000)));
        for i in SLOTS / 2 + 1..=SLOTS {
            assert_eq!(d.pop(), Some(waiting(i)));
        }
        assert_eq!(d.pop(), Some(waiting(1000)));
        assert_eq!((d.pop(), d.len()), (None, 0));
    }

    #[test]
    fn names_are_read_from_their_copies_after_the_original_is_gone() {
        let mut d = Deferred::new();
        let a = c"_Z6kernelv".to_owned();
        let b = c"_Z5otherv".to_owned();
        // SAFETY: both are NUL-terminated and live for the calls.
        unsafe {
            assert!(d.keep_name(a.as_ptr()));
            assert!(d.keep_name(b.as_ptr()));
            assert!(d.keep_name(a.as_ptr()));
            assert!(d.keep_name(ptr::null()));
        }
        let (pa, pb) = (a.as_ptr(), b.as_ptr());
        drop((a, b));
        // SAFETY: copies in `d`, which lives and is not changed meanwhile.
        let text = |p| unsafe { CStr::from_ptr(d.name(p)) }.to_str().unwrap();
        assert_eq!(text(pa), "_Z6kernelv");
        assert_eq!(text(pb), "_Z5otherv");
        assert!(d.name(ptr::null()).is_null());
        assert!(d.name(8usize as *const c_char).is_null());
    }

    #[test]
    fn an_address_reused_for_another_name_is_refused_not_confused() {
        let mut d = Deferred::new();
        let mut s = *b"_Z3onev\0";
        let raw = s.as_mut_ptr();
        let p = raw.cast::<c_char>().cast_const();
        // SAFETY: `s` is NUL-terminated and lives for the calls; byte 4 is
        // inside it.
        unsafe {
            assert!(d.keep_name(p));
            raw.add(4).write(b't');
            // A later buffer's name at that address is compared.
            d.start_buffer();
            assert!(!d.keep_name(p));
        }
        d.push(waiting(1));
        // A buffer waits: its names stay.
        d.forget_names();
        assert_eq!(d.kept, 1);
        d.pop();
        d.forget_names();
        // Nothing waits: the copies are gone, and the new text is kept.
        // SAFETY: as above.
        unsafe { assert!(d.keep_name(p)) };
        // SAFETY: the copy lives in `d`.
        let copy = unsafe { CStr::from_ptr(d.name(p)) };
        assert_eq!(copy.to_bytes(), b"_Z3otev");
    }

    #[test]
    fn names_past_the_room_are_refused() {
        let mut d = Deferred::new();
        let long = vec![b'x'; NAME_BYTES / 2];
        let texts: Vec<std::ffi::CString> = (0..2)
            .map(|i| {
                let mut t = long.clone();
                t[0] = b'a' + i;
                std::ffi::CString::new(t).unwrap()
            })
            .collect();
        // SAFETY: each is NUL-terminated and lives for the calls.
        unsafe {
            assert!(d.keep_name(texts[0].as_ptr()));
            assert!(!d.keep_name(texts[1].as_ptr()));
        }
        // The copies never moved: no allocation once made.
        assert_eq!(d.names.capacity(), NAME_BYTES);
    }
}
