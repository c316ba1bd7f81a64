//! Why recording could not start in a process.

use std::io;
use std::path::PathBuf;

/// A failed CUPTI call. Codes that say the machine itself is out of CUPTI's
/// reach carry a plain sentence after CUPTI's name for them.
#[derive(Clone, Debug, thiserror::Error)]
#[error("{call} failed: {message}{}", plain(*status).map(|p| format!(" ({p})")).unwrap_or_default())]
pub struct CuptiError {
    /// The function called.
    pub call: &'static str,
    /// Its status code.
    pub status: u32,
    /// CUPTI's description of the status.
    pub message: String,
}

/// Why the injection library is not recording.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// No libcupti was found.
    #[error(
        "libcupti not found (looked in: {}); set GPUPERF_CUPTI_PATH to its path, or install CUPTI (pip install nvidia-cuda-cupti)",
        searched.join(", ")
    )]
    CuptiNotFound {
        /// Places searched, in order.
        searched: Vec<String>,
    },
    /// The library could not be loaded or lacks a function.
    #[error("cannot use `{}`: {reason}", .path.display())]
    CuptiLoad {
        /// The library.
        path: PathBuf,
        /// The loader's or our message.
        reason: String,
    },
    /// A CUPTI release whose record layouts this build does not know.
    #[error("`{}` is CUPTI API version {version}; gpuperf supports CUDA 12.0 to 13.x (API 19 to 28, 130000 to 139999)", .path.display())]
    UnsupportedVersion {
        /// The library.
        path: PathBuf,
        /// `cuptiGetVersion`.
        version: u32,
    },
    /// Every libcupti found was rejected.
    #[error("no usable libcupti: {}", tried.join("; "))]
    NoUsableCupti {
        /// Each library and why it was rejected.
        tried: Vec<String>,
    },
    /// Another tool already subscribed to CUPTI.
    #[error(
        "another profiler (Nsight Systems, torch.profiler, ...) already holds CUPTI in this process; it ran without gpuperf"
    )]
    CuptiBusy,
    /// Any other CUPTI failure during set-up.
    #[error(transparent)]
    Cupti(#[from] CuptiError),
    /// The trace file could not be created.
    #[error("cannot create `{}`: {source}", .path.display())]
    Output {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
}

/// What a status means for the user, where CUPTI's name alone does not say it.
pub fn plain(status: u32) -> Option<&'static str> {
    match status {
        crate::sys::VIRTUALIZED_DEVICE => Some(
            "CUPTI does not support this virtualized GPU (vGPU or passthrough without \
             profiling enabled): GPU activity cannot be recorded here",
        ),
        crate::sys::CONFIDENTIAL_COMPUTING => Some(
            "CUPTI is unavailable while confidential computing is on: GPU activity \
             cannot be recorded here",
        ),
        _ => None,
    }
}

/// Result with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
