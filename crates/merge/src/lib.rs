//! gpuperf's trace model, readers, exact CPU↔GPU join and writers.
//!
//! The folders follow the data path:
//!
//! ```text
//!  read/                                       join/                 write/
//!  gputrace (ours, binary) ─┐                                  ┌──> folded ──> svg (inferno)
//!  cupti_log (CUPTI text)   ├─ input ─> GpuInputs ─┐           ├──> chrome, perfetto (timelines)
//!  kineto (PyTorch JSON)    │  (format             ├─> merge ──┼──> report
//!  nsys (Nsight SQLite)  ───┘   detection)         │  (Sink)   └──> pprof
//!  cpu (folded CPU stacks) ─────────────────────────┤
//!  symbols (kept frame names) ──> stacks ───────────┘
//! ```
//!
//! - **`read/`**: one module per input format, each turning a file into the
//!   [`model`]'s records. [`read::input`] finds each file's format from its content
//!   and opens it; the foreign formats are read whole into
//!   [`read::imported::Imported`], which the readers and the chooser both depend
//!   on, so that they do not depend on each other. [`read::symbols`] reads and
//!   writes the frame names kept with a recording. Readers depend on `model`,
//!   `diag` and `error` only; nothing in `read/` depends on `join/` or `write/`,
//!   except that `symbols` implements [`join::stacks::Symbolize`].
//! - **`join/`**: [`join::merge`] pairs every GPU activity with its API call and
//!   the CPU stack of that call, exactly on (pid, correlation id) or ordered by
//!   time where the CPU side has no ids; [`join::stacks`] builds those CPU stacks
//!   from the in-process stacks a gpuperf recording carries. The join hands its
//!   results to writers through the [`join::Sink`] trait, which lives beside the
//!   [`join::Context`] and [`join::Match`] it passes: `join/` depends on `read/`,
//!   never on `write/`.
//! - **`write/`**: one module per output, each a [`join::Sink`] (folded stacks,
//!   Chrome trace, Perfetto protobuf trace, report, pprof), plus [`write::svg`], which renders folded stacks
//!   with inferno. Writers depend on `join/` (what a match holds) and `model`.
//! - **At the top**: [`model`] (the records every part exchanges), `error`
//!   (typed errors naming the file and place) and `diag` (counted, capped
//!   diagnostics for malformed input).
//!
//! The crate owns the trace data model; the injection library writes [`gputrace`]
//! files and the profiler writes [`cpu`] files. With the default `render` feature
//! off, only the model and those two formats are built, which is what the
//! injection library links.

mod diag;
mod error;
#[cfg(test)]
mod golden;
pub mod model;

pub mod read;
pub mod recording;

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
