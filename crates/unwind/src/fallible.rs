//! Allocations that fail instead of aborting the process.
//!
//! A thread's unwinding state is built at its first capture, inside the
//! application's CUDA call. Where memory is short (an address space limit
//! reached, allocations of a few KiB refused) an allocation that fails must
//! leave the program running, as it would without gpuperf: these return
//! `None`, and the caller goes without (a capture skipped and counted). The
//! injection library builds the rest of a thread's capture state with them.

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
    v.try_reserve_exact(n).ok()?;
    Some(v)
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
    }
}
