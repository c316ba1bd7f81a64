//! The CUDA driver's version, asked of the libcuda already in the process.

use std::ffi::{CStr, c_int, c_void};

/// `cuDriverGetVersion` (12080 for CUDA 12.8), or why it is unknown.
///
/// The driver is loaded (it is calling us), but often privately: the symbol is
/// looked up in the global scope first, then in a `libcuda.so.1` already mapped.
/// Nothing is loaded. `cuDriverGetVersion` needs no `cuInit`.
pub fn version() -> Result<u32, String> {
    let name = c"cuDriverGetVersion";
    let mut f = lookup(libc::RTLD_DEFAULT, name);
    if f.is_null() {
        // SAFETY: RTLD_NOLOAD returns a handle only to a library already
        // mapped, running no initializer; the name is NUL-terminated.
        let h = unsafe {
            libc::dlopen(
                c"libcuda.so.1".as_ptr(),
                libc::RTLD_NOLOAD | libc::RTLD_LAZY,
            )
        };
        if h.is_null() {
            return Err("no cuDriverGetVersion and no libcuda.so.1 in the process".into());
        }
        f = lookup(h, name);
        // SAFETY: `h` came from dlopen; the driver keeps its own reference, so
        // the library stays mapped.
        unsafe { libc::dlclose(h) };
        if f.is_null() {
            return Err("libcuda.so.1 has no cuDriverGetVersion".into());
        }
    }
    // SAFETY: `cuDriverGetVersion` is `CUresult (int *)` in every CUDA release.
    let f: unsafe extern "C" fn(*mut c_int) -> c_int = unsafe { std::mem::transmute(f) };
    let mut v: c_int = 0;
    // SAFETY: `v` is a valid out-pointer.
    match unsafe { f(&mut v) } {
        0 if v > 0 => Ok(v as u32),
        0 => Err(format!("cuDriverGetVersion returned {v}")),
        e => Err(format!("cuDriverGetVersion failed with CUresult {e}")),
    }
}

fn lookup(handle: *mut c_void, name: &CStr) -> *mut c_void {
    // SAFETY: `handle` is RTLD_DEFAULT or a live dlopen handle; `name` is
    // NUL-terminated.
    unsafe { libc::dlsym(handle, name.as_ptr()) }
}
