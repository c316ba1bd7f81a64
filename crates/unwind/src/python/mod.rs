//! CPython frames (filled in by the next step).

use crate::frame::{Captured, Frame, Stats};
use crate::module::ModuleInfo;
use crate::table::Table;

/// Why Python frames are or are not read.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PythonStatus {
    /// The process runs no CPython.
    NotPython,
}

/// The Python frame reader of this process.
pub struct Python {}

impl Python {
    pub(crate) fn detect(_modules: &[ModuleInfo]) -> Option<Python> {
        None
    }

    /// Whether Python frames are on.
    pub fn status(&self) -> PythonStatus {
        PythonStatus::NotPython
    }

    /// A Python frame as text parts.
    pub fn resolve(&self, _code: crate::CodeId, _instruction: u32) -> Option<PythonFrame> {
        None
    }

    pub(crate) fn splice(
        &self,
        _table: &Table,
        _stats: &Stats,
        _stack: (u64, u64),
        _out: &mut [Frame],
        _captured: &mut Captured,
    ) {
    }
}

/// A resolved Python frame: `function (file:line)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PythonFrame {
    /// `module.qualified_name`.
    pub function: String,
    /// The code object's file name.
    pub file: String,
    /// The line, 0 if the instruction has none.
    pub line: u32,
}
