//! DuckDB, to read the Parquet tables gpuperf writes as a user's DuckDB reads
//! them: its Python package, in the venv `crates/test-support/duckdb/install.sh`
//! makes (or the Python named by `GPUPERF_DUCKDB_PYTHON`). Where it is missing
//! the tests skip, or fail with `GPUPERF_REQUIRE_DUCKDB=1` (CI sets it).
//!
//! ```no_run
//! use gpuperf_test_support::duckdb;
//!
//! let Some(rows) = duckdb::query("select count(*) from 'events.parquet'") else {
//!     return; // skipped: no DuckDB here
//! };
//! assert!(rows[0][0].as_i64().unwrap() > 0);
//! ```

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::require::Need;

/// The variable naming a Python that imports `duckdb`.
pub const PYTHON_VAR: &str = "GPUPERF_DUCKDB_PYTHON";

/// The pinned version, in the install script's default directory's name.
const VERSION: &str = "2.0.1";

/// The Python to run DuckDB with, or why there is none.
fn python() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os(PYTHON_VAR) {
        return Ok(PathBuf::from(p));
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache")))
        .unwrap_or_default();
    let p = cache.join(format!("gpuperf/duckdb-{VERSION}/bin/python"));
    if p.is_file() {
        Ok(p)
    } else {
        Err(format!(
            "DuckDB is not installed at `{}` and {PYTHON_VAR} is unset (install it with \
             `bash crates/test-support/duckdb/install.sh`)",
            p.display()
        ))
    }
}

/// Runs `sql` in a fresh in-memory DuckDB and returns its rows (integers exact,
/// strings, floats, nulls; lists as arrays). `None` when DuckDB is missing (the
/// test skips; with `GPUPERF_REQUIRE_DUCKDB=1` this panics). Panics with DuckDB's
/// message when the query fails.
#[track_caller]
pub fn query(sql: &str) -> Option<Vec<Vec<Value>>> {
    let python = match python() {
        Ok(p) => p,
        Err(why) => {
            Need::DuckDb.missing(why);
            return None;
        }
    };
    const SCRIPT: &str = "import duckdb, json, sys\n\
        rows = duckdb.connect().execute(sys.argv[1]).fetchall()\n\
        print(json.dumps([list(r) for r in rows]))\n";
    let out = Command::new(&python)
        .args(["-c", SCRIPT, sql])
        .output()
        .unwrap_or_else(|e| panic!("failed to run `{}`: {e}", python.display()));
    assert!(
        out.status.success(),
        "DuckDB failed on {sql}:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Value = serde_json::from_slice(&out.stdout).expect("DuckDB's rows as JSON");
    Some(
        rows.as_array()
            .into_iter()
            .flatten()
            .map(|r| r.as_array().cloned().unwrap_or_default())
            .collect(),
    )
}
