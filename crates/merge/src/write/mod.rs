//! Writers: one module per output.

/// The timelines' marker for a CPU launch that caused no GPU activity.
pub const PENDING_MARKER: &str = "launch without GPU activity";
/// The timelines' marker for a CPU launch captured into a CUDA graph.
pub const CAPTURED_MARKER: &str = "launch captured into a CUDA graph";

pub mod chrome;
mod demangle;
pub use demangle::demangle;
pub mod diff;
pub mod driver;
pub mod folded;
pub mod idle;
pub mod parquet;
pub mod perfetto;
pub mod pprof;
pub mod report;
pub mod svg;
pub(crate) mod timeline;
mod timeline_writer;
pub use timeline_writer::TimelineWriter;
