//! Integration tests: real programs (C built with gcc, CPython 3.10–3.13) load the
//! test probe (`examples/unwind_probe.rs`) and print their own stacks, which are
//! symbolized here with blazesym.

// Test names put the inputs before `__`, as the other crates' tests do.
#![allow(non_snake_case)]

mod caches;
mod native;
mod python;
mod remote;
mod sim;
mod support;
