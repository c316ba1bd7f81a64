//! CPython 3.11: `_PyInterpreterFrame`s in the thread's data stack, reached through
//! `tstate->cframe->current_frame`; one eval-loop C frame runs frames up to and
//! including one marked `is_entry`. Offsets from the 3.11 headers.

use super::layout::{DataStack, FrameKind, FrameWords, Layout, LineTable};

pub(crate) const LAYOUT: Layout = Layout {
    minor: 11,
    free_threaded: false,
    ob_type: 8,
    datastack: Some(DataStack {
        chunk: 296, // PyThreadState.datastack_chunk
        top: 304,   // datastack_top
        frame_words: FrameWords::Sum {
            nlocalsplus: 76, // co_nlocalsplus
            stacksize: 68,   // co_stacksize
            specials: 9,     // FRAME_SPECIALS_SIZE: the frame's own 72 bytes
        },
    }),
    tstate_frame: 56, // PyThreadState.cframe
    cframe_current: Some(8),
    root_cframe: Some(336), // PyThreadState.root_cframe
    frame_kind: FrameKind::Interpreter { cstack_owner: None },
    frame_size: 72,
    frame_previous: 48,
    frame_code: 32,  // f_code
    frame_instr: 56, // prev_instr
    frame_owner: Some(69),
    frame_is_entry: Some(68),
    code_filename: 112,
    code_qualname: 128,
    code_linetable: 136,
    code_firstlineno: 72,
    code_adaptive: Some(184),
    line_table: LineTable::Locations,
    unicode_state: 32,
    unicode_length: 16,
    ascii_size: 48,
    compact_size: 72,
    bytes_size: 16,
    bytes_data: 32,
};
