//! Links the injection library so that it is never unloaded (`-z nodelete`):
//! once loaded it leaves its functions where others call them for the rest of
//! the process (CUPTI's callbacks, thread-exit destructors, CPython 3.11's
//! code deallocator, see `gpuperf_unwind`'s Python reader), and a `dlclose`
//! would leave those calls jumping into unmapped code.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,nodelete");
}
