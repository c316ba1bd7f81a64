//! Allocations that fail instead of aborting the process.
//!
//! A thread's unwinding state is built at its first capture, inside the
//! application's CUDA call. Where memory is short (an address space limit
//! reached, allocations of a few KiB refused) an allocation that fails must
//! leave the program running, as it would without gpuperf: these return
//! `None`, and the caller goes without (a capture skipped and counted). The
//! injection library builds the rest of a thread's capture state with them,
//! and [`LocalUnwinder::add_loaded`](crate::LocalUnwinder::add_loaded) the
//! table of the modules a `dlopen` added.

use std::ffi::{OsStr, OsString};
use std::path::PathBuf;

/// `n` clones of `v` on the heap, or `None` when memory is short.
pub fn slice<T: Clone>(n: usize, v: T) -> Option<Box<[T]>> {
    let mut s = vec(n)?;
    // Within the capacity reserved: no allocation.
    s.resize(n, v);
    Some(s.into_boxed_slice())
}

/// An empty vector with room for `n`, or `None` when memory is short.
pub fn vec<T>(n: usize) -> Option<Vec<T>> {
    let mut v = Vec::new();
    reserve_exact(&mut v, n).then_some(v)
}

/// Room for `n` more in `v` (grown as `push` grows it); `false` when memory
/// is short.
pub fn reserve<T>(v: &mut Vec<T>, n: usize) -> bool {
    !mock::refuses() && v.try_reserve(n).is_ok()
}

/// Room for exactly `n` more in `v`; `false` when memory is short.
pub fn reserve_exact<T>(v: &mut Vec<T>, n: usize) -> bool {
    !mock::refuses() && v.try_reserve_exact(n).is_ok()
}

/// `x` pushed onto `v`, or handed back when memory is short.
pub fn push<T>(v: &mut Vec<T>, x: T) -> Result<(), T> {
    if !reserve(v, 1) {
        return Err(x);
    }
    // Within the capacity reserved: no allocation.
    v.push(x);
    Ok(())
}

/// A copy of `b` on the heap, or `None` when memory is short.
pub fn bytes(b: &[u8]) -> Option<Vec<u8>> {
    let mut v = vec(b.len())?;
    v.extend_from_slice(b);
    Some(v)
}

/// A copy of `s` on the heap, or `None` when memory is short.
pub fn string(s: &str) -> Option<String> {
    let mut o = String::new();
    if mock::refuses() || o.try_reserve_exact(s.len()).is_err() {
        return None;
    }
    o.push_str(s);
    Some(o)
}

/// `p` as a path of its own, or `None` when memory is short.
pub fn path(p: &OsStr) -> Option<PathBuf> {
    let mut o = OsString::new();
    if mock::refuses() || o.try_reserve_exact(p.len()).is_err() {
        return None;
    }
    o.push(p);
    Some(PathBuf::from(o))
}

/// `v` on the heap, or `None` when memory is short.
pub fn boxed<T>(v: T) -> Option<Box<T>> {
    let mut s = vec(1)?;
    s.push(v);
    let one = Box::into_raw(s.into_boxed_slice());
    // SAFETY: a boxed slice of exactly one `T` was allocated with the layout
    // of `[T; 1]`, which is `T`'s (same size and alignment), as `Box<T>`
    // frees it.
    Some(unsafe { Box::from_raw(one.cast::<T>()) })
}

/// A mock of the allocator for the unit tests: while a thread sets it, this
/// module's allocations on that thread are refused from the `n`-th on, as
/// when memory runs short in the middle of building something. Outside the
/// tests it never refuses, and costs nothing.
pub(crate) mod mock {
    #[cfg(test)]
    thread_local! {
        /// Allocations still granted before refusals start; `None`: all.
        static LEFT: std::cell::Cell<Option<usize>> = const { std::cell::Cell::new(None) };
    }

    /// Refuses this thread's fallible allocations after the next `n`
    /// (`None`: grants them all again).
    #[cfg(test)]
    pub(crate) fn refuse_after(n: Option<usize>) {
        LEFT.set(n);
    }

    /// Whether this allocation is refused (counting it when granted).
    #[cfg(test)]
    pub(crate) fn refuses() -> bool {
        match LEFT.get() {
            None => false,
            Some(0) => true,
            Some(n) => {
                LEFT.set(Some(n - 1));
                false
            }
        }
    }

    /// Never, outside the tests.
    #[cfg(not(test))]
    #[inline(always)]
    pub(crate) const fn refuses() -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slices_and_boxes_hold_what_was_given() {
        assert_eq!(slice(3, 7u16).as_deref(), Some(&[7, 7, 7][..]));
        assert_eq!(slice(0, 1u8).as_deref(), Some(&[][..]));
        assert_eq!(
            boxed(String::from("kept")).as_deref().map(String::as_str),
            Some("kept")
        );
        assert_eq!(boxed(()).map(|b| *b), Some(()));
        assert!(vec::<u64>(5).is_some_and(|v| v.is_empty() && v.capacity() >= 5));
    }

    #[test]
    fn an_impossible_size_is_refused_not_aborted() {
        // More than the address space: the allocator refuses it, as it
        // refuses smaller ones when memory is short.
        assert!(slice(usize::MAX / 16, 0u64).is_none());
        assert!(vec::<u64>(usize::MAX / 16).is_none());
        let mut v = vec![1u64];
        assert!(!reserve(&mut v, usize::MAX / 16));
        assert_eq!(v, [1]);
    }

    #[test]
    fn mock_refuses_from_the_nth_allocation_on() {
        mock::refuse_after(Some(2));
        assert!(bytes(b"ab").is_some());
        assert!(string("cd").is_some());
        assert!(path(OsStr::new("/x")).is_none());
        let mut v = Vec::<u8>::new();
        assert_eq!(push(&mut v, 7), Err(7));
        mock::refuse_after(None);
        assert_eq!(push(&mut v, 7), Ok(()));
        assert_eq!(path(OsStr::new("/x")), Some(PathBuf::from("/x")));
    }
}
