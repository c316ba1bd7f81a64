//! gpuperf's trace model, readers, exact CPU↔GPU join and writers, and the
//! recording that ties them together.
//!
//! The folders follow the data path:
//!
//! ```text
//!  read/                                       join/                 write/
//!  gputrace (ours, binary) ─┐                  index (pass 1)  ┌──> folded ──> svg (inferno), diff
//!  cupti_log (CUPTI text)   ├─ input ─> GpuInputs ─┐ stream    ├──> timeline ──> timeline_writer:
//!  kineto (PyTorch JSON)    │  (format  (imported: ├─> merge ──┤      chrome, perfetto
//!  nsys (Nsight SQLite)  ───┘  detection) foreign) │  (Sink,   ├──> idle (why the GPU waits)
//!  cpu (folded CPU stacks) ─────────────────────────┤  ordered, ├──> report, pprof, parquet
//!  symbols (kept frame names) ──> stacks ───────────┘  backward,├──> pc (GPU PC samples)
//!  driver (driver.tsv: GPU driver events) ────────────  summary)└──> driver (with read::driver:
//!                                                                    ioctls, jobs, fences)
//!                view (how stacks and names are shown, C++ names demangled),
//!                write::demangle (names demangled once per interned name): every writer
//!
//!  recording/: the directory `gpuperf record` leaves (env, names, load, plan, stacks,
//!              report, finish, diff)
//!  at the top: model, ioctl (ioctl command words named), error, diag, golden (tests)
//! ```
//!
//! - **`read/`**: one module per input format, each turning a file into the
//!   [`model`]'s records. [`read::input`] finds each file's format from its content
//!   and opens it; the foreign formats are read whole into
//!   [`read::imported::Imported`], which the readers and the chooser both depend
//!   on, so that they do not depend on each other. [`read::symbols`] reads and
//!   writes the frame names kept with a recording, and [`read::driver`] the GPU
//!   driver events of `gpuperf record --driver`. Readers depend on `model`,
//!   `diag` and `error` only: nothing in `read/` depends on `join/`, `write/`
//!   or [`recording`] (which names the files inside a recording directory).
//! - **`join/`**: [`join::merge`] pairs every GPU activity with its API call and
//!   the CPU stack of that call, exactly on (pid, correlation id) or ordered by
//!   time where the CPU side has no ids; [`join::stacks`] builds those CPU stacks
//!   from the in-process stacks a gpuperf recording carries, and
//!   [`join::backward`] charges a backward launch to the forward launch its
//!   autograd node came from; `index` (pass 1: the API calls by correlation
//!   id), `stream` (pass 2: every GPU record to the sinks), `ordered` (pairing
//!   by time) and `summary` (the counts) are its steps. The join hands its
//!   results to writers through the [`join::Sink`] trait, which lives beside the
//!   [`join::Context`] and [`join::Match`] it passes: `join/` depends on `read/`,
//!   never on `write/`.
//! - **`write/`**: one module per output, each a [`join::Sink`] (folded stacks,
//!   idle-time stacks, Chrome trace, Perfetto protobuf trace, report, pprof,
//!   the driver events' tracks and report, Parquet tables, PC-sample stacks),
//!   plus [`write::svg`], which renders
//!   folded stacks with inferno, and [`write::diff`], which compares two runs'
//!   folded stacks. The two timeline encoders (Chrome JSON, Perfetto protobuf)
//!   share one timeline model, `write/timeline/`, behind one sink
//!   (`write/timeline_writer.rs`), and every writer names
//!   kernels through [`view::demangle`]. Writers depend on `join/` (what a
//!   match holds), [`view`] (how stacks are shown) and `model`.
//! - **[`recording`]**: the directory `gpuperf record` leaves and the
//!   environment contract with the injection library ([`recording::env`]),
//!   and the output names that differ per rank and run (`names`);
//!   with the `render` feature, loading a recording or trace files
//!   ([`recording::Recording`]), the plan of outputs written from one join
//!   ([`recording::Outputs`]), the end of a `gpuperf record` run
//!   ([`recording::Finish`]) and the text tables the CLI prints
//!   ([`recording::report`]), and `gpuperf diff` of two runs (`diff`). It uses
//!   all three folders above.
//! - **At the top**: [`model`] (the records every part exchanges, and the
//!   [`model::Symbolize`] trait through which the caller names native frames),
//!   [`ioctl`] (ioctl command words decoded and named),
//!   [`view`] (Python frames in place of the interpreter's, short or full
//!   names, C++ names demangled), `error` (typed errors naming the file and
//!   place), `diag` (counted, capped diagnostics for malformed input) and, in
//!   tests only, `golden` (the golden-file helper).
//!
//! No module imports one that imports it back, directly or through others
//! (`tools/import-cycles.py` checks it): `read/` < `join/` < `write/` <
//! `recording/`, with `view` below `join/` and `model`, `diag`, `error` below
//! everything.
//!
//! The crate owns the trace data model; the injection library writes [`gputrace`]
//! files and the eBPF profiler writes [`cpu`] files. With the default `render`
//! feature off, only the model, the readers and writers of those two formats and
//! of `driver.tsv`, and [`recording`]'s names and environment contract are
//! built, which is what the injection library links.
//!
//! # Example
//!
//! Charge the GPU time of a PyTorch profiler trace to its CPU stacks, as
//! `gpuperf merge TRACE -m -` does:
//!
//! ```
//! # fn main() -> gpuperf_merge::Result<()> {
//! use gpuperf_merge::model::{Module, Symbolize};
//! use gpuperf_merge::recording::{Inputs, Outputs, Recording};
//!
//! /// Names native frames; a PyTorch profiler trace has none to name.
//! struct NoSymbols;
//! impl Symbolize for NoSymbols {
//!     fn symbolize(&mut self, _: &Module, offsets: &[u64]) -> Vec<Vec<String>> {
//!         vec![Vec::new(); offsets.len()]
//!     }
//! }
//!
//! let mut inputs = Inputs::default();
//! inputs.recording =
//!     Some("../../samples/recordings/real/v100_resnet50_kineto2021.pt.trace.json.gz".into());
//! let mut recording = Recording::open(&inputs, || NoSymbols)?;
//!
//! let mut outputs = Outputs::default();
//! outputs.folded = Some("-".into()); // `-`: to the writer given below
//! let mut folded = Vec::new();
//! let joined = recording.write(&outputs, &mut folded)?;
//!
//! assert_eq!(joined.summary.kernels_matched, joined.summary.kernels);
//! let folded = String::from_utf8(folded).unwrap();
//! assert!(folded.lines().any(|l| l.contains("[GPU_Kernel]")));
//! # Ok(())
//! # }
//! ```

mod diag;
mod error;
#[cfg(test)]
mod golden;
pub mod ioctl;
pub mod model;

pub mod read;
pub mod recording;

#[cfg(feature = "render")]
pub mod join;
#[cfg(feature = "render")]
pub mod view;
#[cfg(feature = "render")]
pub mod write;

// The two formats gpuperf's own recorders write (the injection library's GPU
// trace, the profiler's CPU stacks) are also reachable from the top: those crates
// produce them and have no business knowing how the merge reads them.
pub use read::{cpu, gputrace};

pub use diag::{Diagnostic, Diagnostics};
pub use error::{Error, Result};
