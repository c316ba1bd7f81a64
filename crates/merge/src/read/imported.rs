//! [`Imported`]: what every reader of a foreign format (Kineto, Nsight Systems,
//! CUPTI text logs) returns, and what [`input`](super::input) keeps of it. It lives
//! apart from both so that the readers and the chooser among them depend on it,
//! not on each other.

use std::path::{Path, PathBuf};

use crate::diag::Diagnostics;
use crate::model::{Clock, Record};
use crate::read::cpu::CpuTrace;

/// A foreign GPU trace read whole into the model: what each importer returns.
#[derive(Clone, Debug)]
pub struct Imported {
    /// The file.
    pub path: PathBuf,
    /// Its format, for messages: "PyTorch profiler trace", ….
    pub format: &'static str,
    /// Processes, devices, API calls and GPU activities.
    pub records: Vec<Record>,
    /// CPU launch stacks the trace carries, keyed by (pid, correlation id).
    pub launch_stacks: Option<CpuTrace>,
    /// Clock of the timestamps.
    pub clock: Clock,
    /// Events or rows of kinds gpuperf does not use.
    pub skipped: u64,
    /// Lines that are not records (text logs).
    pub other_lines: u64,
    /// Malformed events or rows.
    pub diagnostics: Diagnostics,
    /// Where the file is cut off, when it is.
    pub truncated_at: Option<u64>,
    /// What the reader wants the user to know (missing tables, stacks it could not
    /// build).
    pub notes: Vec<String>,
}

impl Imported {
    /// An empty import of `path`.
    pub fn new(path: &Path, format: &'static str, clock: Clock) -> Self {
        Self {
            path: path.to_owned(),
            format,
            records: Vec::new(),
            launch_stacks: None,
            clock,
            skipped: 0,
            other_lines: 0,
            diagnostics: Diagnostics::default(),
            truncated_at: None,
            notes: Vec::new(),
        }
    }
}
