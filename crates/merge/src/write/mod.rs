//! Writers: one module per output.

use crate::model::{ActivityKind, StringId};

/// The timelines' marker for a CPU launch that caused no GPU activity.
pub(crate) const PENDING_MARKER: &str = "launch without GPU activity";
/// The timelines' marker for a CPU launch captured into a CUDA graph.
pub(crate) const CAPTURED_MARKER: &str = "launch captured into a CUDA graph";

/// The name the report gives an activity, which the Parquet export's `name`
/// column repeats: the kernel's name as `kernel` spells it, `[Memcpy HtoD]`
/// (the copy's kind), `[Memset]`, `[Sync]`.
pub(crate) fn activity_label(
    kind: ActivityKind,
    kernel: impl FnOnce(StringId) -> String,
) -> String {
    match kind {
        ActivityKind::Kernel { name, .. } => kernel(name),
        ActivityKind::Memcpy { kind, .. } => format!("[Memcpy {kind}]"),
        ActivityKind::Memset { .. } => "[Memset]".to_owned(),
        ActivityKind::Sync { .. } => "[Sync]".to_owned(),
    }
}

pub mod chrome;
mod demangle;
pub mod diff;
pub mod driver;
pub mod folded;
pub mod idle;
pub mod parquet;
pub mod pc;
pub mod perfetto;
pub mod pprof;
pub mod report;
pub mod svg;
pub(crate) mod timeline;
mod timeline_writer;
pub use timeline_writer::TimelineWriter;
