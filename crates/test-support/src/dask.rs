//! Dask's distributed scheduler, for the test that fans the cross-rank report
//! (`python/gpuperf/ranks.py`) out over a local cluster: its Python packages,
//! in the venv `crates/test-support/dask/install.sh` makes (or the Python named
//! by `GPUPERF_DASK_PYTHON`). Where it is missing the tests skip, or fail with
//! `GPUPERF_REQUIRE_DASK=1` (CI sets it).
//!
//! ```no_run
//! use gpuperf_test_support::dask;
//!
//! let Some(python) = dask::python() else {
//!     return; // skipped: no Dask here
//! };
//! assert!(python.is_file());
//! ```

use std::path::{Path, PathBuf};

use crate::require::Need;

/// The variable naming a Python that imports `dask.distributed`.
pub const PYTHON_VAR: &str = "GPUPERF_DASK_PYTHON";

/// The pinned version, in the install script's default directory's name.
const VERSION: &str = "2026.8.0";

/// A Python that imports `dask.distributed`; `None` when there is none (the
/// test skips; with `GPUPERF_REQUIRE_DASK=1` this panics).
#[track_caller]
pub fn python() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(PYTHON_VAR) {
        return Some(PathBuf::from(p));
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache")))
        .unwrap_or_default();
    let p = cache.join(format!("gpuperf/dask-{VERSION}/bin/python"));
    if p.is_file() {
        return Some(p);
    }
    Need::Dask.missing(format_args!(
        "Dask is not installed at `{}` and {PYTHON_VAR} is unset (install it with \
         `bash crates/test-support/dask/install.sh`)",
        p.display()
    ));
    None
}
