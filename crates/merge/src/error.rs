use std::io;
use std::path::{Path, PathBuf};

/// Errors of the merge crate. Malformed lines and records are not errors: they are
/// counted in [`crate::Diagnostics`]. These are the failures that stop a read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Reading or writing a file failed.
    #[error("failed to {action} `{}`", .path.display())]
    Io {
        /// What was being done: "read", "write", "open".
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The file is not in any format gpuperf reads.
    #[error("`{}` is not a {expected} ({found})", .path.display())]
    NotATrace {
        /// The file.
        path: PathBuf,
        /// What was expected, e.g. "GPU trace".
        expected: &'static str,
        /// What was found instead, e.g. `it starts with "RUNTIME"` or `it is empty`.
        found: String,
    },
    /// A gpuperf GPU trace written by a newer version.
    #[error("`{}` is GPU trace format version {version}; this gpuperf reads up to {supported}", .path.display())]
    UnsupportedVersion {
        /// The file.
        path: PathBuf,
        /// Version in the file.
        version: u16,
        /// Newest version this build reads.
        supported: u16,
    },
    /// A recording directory named is not one.
    #[error("`{}` is not a recording directory (gpuperf record --raw-dir writes one)", .path.display())]
    NotARecording {
        /// What was named.
        path: PathBuf,
    },
    /// A join was asked for without a GPU trace.
    #[error("no GPU trace to join")]
    NoGpuTrace,
    /// Writing an output file failed.
    #[error("failed to write `{}`", .path.display())]
    Output {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: Box<Error>,
    },
    /// `diff` was given two profiles of different kinds (PC samples and time).
    #[error("{0}")]
    UnlikeProfiles(&'static str),
    /// Writing an output failed.
    #[error("failed to write {what}")]
    Write {
        /// Which output.
        what: &'static str,
        /// The cause.
        #[source]
        source: io::Error,
    },
}

impl Error {
    /// For `map_err`: doing `action` ("read", "write", "create") on `path` failed.
    pub(crate) fn io(action: &'static str, path: &Path) -> impl FnOnce(io::Error) -> Self + use<> {
        let path = path.to_path_buf();
        move |source| Self::Io {
            action,
            path,
            source,
        }
    }
}

/// Describes the start of a file for [`Error::NotATrace`].
pub(crate) fn describe_start(bytes: &[u8]) -> String {
    if bytes.is_empty() {
        "it is empty".to_owned()
    } else {
        format!("it starts with {:?}", String::from_utf8_lossy(bytes))
    }
}

/// Result with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
