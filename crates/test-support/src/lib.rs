//! Helpers shared by the tests and benchmarks of gpuperf's crates; a
//! dev-dependency only, never part of the product.
//!
//! ```text
//! require   GPUPERF_REQUIRE_*: a missing tool skips the test, or fails it in CI
//! scratch   a world-readable directory per test process, removed at exit
//! cc        gcc builds, once per process and output
//! cuda      NVIDIA's CUDA wheels, the simulated CUDA runtime, the C host programs
//! perfetto  Perfetto's trace processor (WebAssembly, run by Node.js)
//! pprof     `go tool pprof`, reading the pprof profiles
//! duckdb    DuckDB, reading the Parquet tables
//! dask      Dask's distributed scheduler, for the cross-rank report
//! python    the CPython interpreters the Python tests run on
//! process   running commands and showing what they printed
//! bench     medians, arguments, peak RSS and cached inputs of the benchmarks
//! traces    hand-made gpuperf GPU traces (processes, API calls, kernels)
//! ```
//!
//! A test that needs something the machine may lack asks for it and returns
//! when it is missing:
//!
//! ```no_run
//! use gpuperf_test_support::cuda;
//!
//! let Some(cuda) = cuda::cuda13() else { return };
//! let sim = cuda::sim(&cuda);
//! assert!(sim.join("libcupti.so.13").is_file());
//! ```

pub mod bench;
pub mod cc;
pub mod cuda;
pub mod dask;
pub mod duckdb;
pub mod perfetto;
pub mod pprof;
pub mod process;
pub mod python;
pub mod require;
pub mod scratch;
pub mod traces;
pub mod vm;

use std::path::{Path, PathBuf};

/// The root of the gpuperf checkout these helpers were built in.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `tests/data/<name>` of the crate `krate` (its directory under `crates/`).
pub fn test_data(krate: &str, name: &str) -> PathBuf {
    repo()
        .join("crates")
        .join(krate)
        .join("tests/data")
        .join(name)
}
