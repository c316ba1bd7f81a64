//! CPython 3.10: heap `PyFrameObject`s linked by `f_back`, one eval-loop C frame
//! per Python frame. Offsets from the 3.10 headers (`offsetof`, x86-64).

use super::layout::{FrameKind, Layout, LineTable};

pub(crate) const LAYOUT: Layout = Layout {
    minor: 10,
    free_threaded: false,
    ob_type: 8,
    datastack: None,
    tstate_frame: 24, // PyThreadState.frame
    cframe_current: None,
    root_cframe: None,
    frame_kind: FrameKind::Object,
    frame_size: 104,
    frame_previous: 24, // PyFrameObject.f_back
    frame_code: 32,     // f_code
    frame_instr: 96,    // f_lasti: instruction index (int)
    frame_owner: None,
    frame_is_entry: None,
    code_filename: 104,
    code_qualname: 112, // no co_qualname before 3.11: co_name
    code_linetable: 120,
    code_firstlineno: 40,
    code_adaptive: None,
    line_table: LineTable::V310,
    unicode_state: 32,
    unicode_length: 16,
    ascii_size: 48,
    compact_size: 72,
    bytes_size: 16,
    bytes_data: 32,
};
