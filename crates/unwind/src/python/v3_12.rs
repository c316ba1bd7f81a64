//! CPython 3.12: as 3.11, but each eval-loop C frame starts with a shim frame
//! owned by the C stack (`FRAME_OWNED_BY_CSTACK`), which separates the groups.
//! Offsets from the 3.12 headers.

use super::layout::{DataStack, FrameKind, FrameWords, Layout, LineTable};

pub(crate) const LAYOUT: Layout = Layout {
    minor: 12,
    free_threaded: false,
    ob_type: 8,
    datastack: Some(DataStack {
        chunk: 232,                         // PyThreadState.datastack_chunk
        top: 240,                           // datastack_top
        frame_words: FrameWords::Field(76), // co_framesize
    }),
    tstate_frame: 56, // PyThreadState.cframe
    cframe_current: Some(0),
    root_cframe: Some(272), // PyThreadState.root_cframe
    frame_kind: FrameKind::Interpreter {
        cstack_owner: Some(3),
    },
    frame_size: 72,
    frame_previous: 8,
    frame_code: 0,   // f_code
    frame_instr: 56, // prev_instr
    frame_owner: Some(70),
    frame_is_entry: None,
    code_filename: 112,
    code_qualname: 128,
    code_linetable: 136,
    code_firstlineno: 68,
    code_adaptive: Some(192),
    line_table: LineTable::Locations,
    unicode_state: 32,
    unicode_length: 16,
    ascii_size: 40,
    compact_size: 56,
    bytes_size: 16,
    bytes_data: 32,
};
