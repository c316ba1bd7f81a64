//! The version-neutral description of a CPython layout that the walker uses.

/// How frames are linked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FrameKind {
    /// 3.10: `PyFrameObject`s; `frame_instr` is an instruction index (int).
    Object,
    /// 3.11+: `_PyInterpreterFrame`s; `frame_instr` points at the instruction.
    /// `cstack_owner`: the owner value of the shim frame each eval-loop C frame
    /// pushes (3.12+).
    Interpreter { cstack_owner: Option<u8> },
}

/// The line table format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LineTable {
    /// 3.10 `co_linetable`: (bytecode bytes, line delta) pairs.
    V310,
    /// 3.11+ location table (PEP 657).
    Locations,
}

/// Byte offsets into the interpreter's structs, x86-64.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Layout {
    pub minor: u8,
    /// PyThreadState → the frame chain's head (3.11/3.12: the `_PyCFrame*`).
    pub tstate_frame: u64,
    /// `_PyCFrame.current_frame` (3.11/3.12).
    pub cframe_current: Option<u64>,
    pub frame_kind: FrameKind,
    /// Bytes to check readable per frame.
    pub frame_size: u64,
    pub frame_previous: u64,
    pub frame_code: u64,
    pub frame_instr: u64,
    pub frame_owner: Option<u64>,
    pub frame_is_entry: Option<u64>,
    pub code_filename: u64,
    pub code_qualname: u64,
    pub code_linetable: u64,
    pub code_firstlineno: u64,
    /// `co_code_adaptive`: the bytecode inside the code object (3.11+).
    pub code_adaptive: Option<u64>,
    pub line_table: LineTable,
    pub unicode_state: u64,
    pub unicode_length: u64,
    pub ascii_size: u64,
    pub compact_size: u64,
    pub bytes_size: u64,
    pub bytes_data: u64,
}
