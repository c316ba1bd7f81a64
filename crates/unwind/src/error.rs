//! The crate's error type.

use std::path::PathBuf;

/// What can go wrong while building a module table (never while capturing a stack:
/// capture reports how a stack ended in [`crate::StackEnd`] instead).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A file could not be read.
    #[error("failed to read `{}`", .path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A module file is not an ELF file this crate can read.
    #[error("failed to parse `{}` as ELF: {reason}", .path.display())]
    Elf {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        reason: String,
    },
    /// A line of `/proc/PID/maps` could not be parsed.
    #[error("`{}` line {line}: {reason}", .path.display())]
    Maps {
        /// The maps file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What was wrong.
        reason: &'static str,
    },
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
