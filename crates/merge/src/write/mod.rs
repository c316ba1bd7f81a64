//! Writers: one module per output.

pub mod chrome;
mod demangle;
pub mod folded;
pub mod idle;
pub mod perfetto;
pub mod pprof;
pub mod report;
pub mod svg;
