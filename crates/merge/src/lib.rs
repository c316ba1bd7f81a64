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

pub mod cpu;
mod diag;
mod error;
#[cfg(test)]
mod golden;
pub mod gputrace;
pub mod model;

#[cfg(feature = "render")]
pub mod chrome;
#[cfg(feature = "render")]
pub mod cupti_log;
#[cfg(feature = "render")]
mod demangle;
#[cfg(feature = "render")]
pub mod folded;
#[cfg(feature = "render")]
pub mod input;
#[cfg(feature = "render")]
pub mod join;
#[cfg(feature = "render")]
pub mod kineto;
#[cfg(feature = "render")]
pub mod nsys;
#[cfg(feature = "render")]
pub mod pprof;
#[cfg(feature = "render")]
pub mod report;
#[cfg(feature = "render")]
pub mod stacks;
#[cfg(feature = "render")]
pub mod svg;
#[cfg(feature = "render")]
pub mod symbols;

pub use diag::{Diagnostic, Diagnostics};
pub use error::{Error, Result};
