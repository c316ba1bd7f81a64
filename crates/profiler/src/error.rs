//! Typed errors of the profiler.

use std::io;
use std::path::PathBuf;

/// Errors from setting up or running the profiler.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The process lacks the privileges to load BPF programs.
    #[error("{0}")]
    Privilege(String),
    /// The running kernel cannot host the probes.
    #[error("{0}")]
    Kernel(String),
    /// A libbpf operation failed.
    #[error("{what}: {source}")]
    Bpf {
        /// What was being done.
        what: String,
        /// libbpf's error.
        #[source]
        source: libbpf_rs::Error,
    },
    /// A file to probe could not be read or has no such symbol.
    #[error("{path}: {message}")]
    Probe {
        /// The ELF file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// A `LIB:SYMBOL` probe argument is malformed.
    #[error("bad probe `{spec}`: {message}")]
    Spec {
        /// The argument as given.
        spec: String,
        /// What is wrong with it.
        message: String,
    },
    /// Writing the CPU trace failed.
    #[error("writing the CPU trace: {0}")]
    Output(#[source] io::Error),
}

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

pub(crate) fn bpf(what: impl Into<String>) -> impl FnOnce(libbpf_rs::Error) -> Error {
    let what = what.into();
    move |source| Error::Bpf { what, source }
}
