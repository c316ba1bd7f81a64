//! gpuperf's trace model, readers, exact CPU↔GPU join and writers.
//!
//! ```text
//!  GPU side (input)                CPU side
//!  gputrace (ours, binary)         cpu (extended folded: reference, or gpuperf's
//!  cupti_log (reference text)           variant with correlation ids)
//!  kineto (PyTorch profiler JSON) ─┐    │
//!  nsys (Nsight Systems SQLite)  ──┴─> launch stacks carried by the GPU side
//!          \                        /
//!           `----> join::merge <---'    exact on (pid, correlation id), or ordered
//!                     |                 per thread with a time check
//!          Sink: folded | chrome | report | pprof
//!                     |
//!                  svg (inferno)
//! ```
//!
//! The crate owns the trace data model ([`model`]); the injection library writes
//! [`gputrace`] files and the profiler writes [`cpu`] files. With the default
//! `render` feature off, only the model and the GPU trace writer/reader are built,
//! which is what the injection library links.

mod diag;
mod error;
#[cfg(test)]
mod golden;
pub mod model;

pub mod read;

#[cfg(feature = "render")]
pub mod join;
#[cfg(feature = "render")]
pub mod write;

// The two formats gpuperf's own recorders write (the injection library's GPU
// trace, the profiler's CPU stacks) are also reachable from the top: those crates
// produce them and have no business knowing how the merge reads them.
pub use read::{cpu, gputrace};

pub use diag::{Diagnostic, Diagnostics};
pub use error::{Error, Result};
