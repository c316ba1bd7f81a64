//! Nsight Systems SQLite exports (placeholder until the reader lands).

use std::path::Path;

use crate::error::Result;
use crate::input::Imported;
use crate::model::StringTable;

/// Whether the start of a file is an SQLite database.
pub fn is_sqlite(head: &[u8]) -> bool {
    head.starts_with(b"SQLite format 3\0")
}

/// Reads an export.
pub fn read(path: &Path, _strings: &mut StringTable) -> Result<Imported> {
    Err(crate::error::Error::NotATrace {
        path: path.to_owned(),
        expected: "GPU trace",
        found: "Nsight Systems exports are not read yet".into(),
    })
}
