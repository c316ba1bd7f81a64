//! Integration tests: readers, the join and the writers on golden files.
// Test names are `<input>__<what is checked>`.
#![allow(non_snake_case)]

// The shared golden helper lives in the library's test-only module; it names the
// model as `crate::model`, which this re-export provides.
#[path = "../../src/golden.rs"]
#[allow(dead_code)]
mod golden;
pub use gpuperf_merge::model;

mod backward;
mod captured;
mod driver;
mod idle;
mod idle_hta;
mod imported;
mod join;
mod names;
mod nsys;
mod pc;
mod perfetto;
mod scenario;
mod stacks;
mod trace_processor;

use std::path::{Path, PathBuf};

/// A file under `tests/data`.
pub fn data(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(rel)
}
