//! CPython 3.13: the interpreter publishes its own layout in `_Py_DebugOffsets`, the
//! first member of `_PyRuntime`. This module knows only where each offset sits in
//! that struct (its 3.13 version) and reads the values from the running process,
//! the free-threaded build (3.13t, `free_threaded` set, a 32-byte object header
//! with `ob_type` at 24) included.

use super::layout::{DataStack, FrameKind, FrameWords, Layout, LineTable};

/// `_Py_DebugOffsets.cookie`.
pub(crate) const COOKIE: &[u8; 8] = b"xdebugpy";

/// Reads the layout from `_PyRuntime`'s debug offsets (`read` reads a u64 at an
/// offset into them). `None` if the cookie or version do not match.
pub(crate) fn layout(cookie: &[u8], version: u64, read: impl Fn(u64) -> u64) -> Option<Layout> {
    if cookie != COOKIE || version >> 16 != 0x030d {
        return None;
    }
    let firstlineno = read(312);
    // PyThreadState keeps datastack_top right after datastack_chunk, and the
    // code object co_framesize two ints after co_firstlineno (after
    // co_nlocalsplus), in both builds; neither is published.
    let chunk = read(208);
    Some(Layout {
        minor: 13,
        free_threaded: read(16) != 0,
        ob_type: read(360), // pyobject.ob_type
        datastack: Some(DataStack {
            chunk, // thread_state.datastack_chunk
            top: chunk + 8,
            frame_words: FrameWords::Field(firstlineno + 8),
        }),
        tstate_frame: read(184), // thread_state.current_frame
        cframe_current: None,
        root_cframe: None,
        frame_kind: FrameKind::Interpreter {
            cstack_owner: Some(3),
        },
        frame_size: read(224),     // interpreter_frame.size
        frame_previous: read(232), // interpreter_frame.previous
        frame_code: read(240),     // interpreter_frame.executable
        frame_instr: read(248),    // interpreter_frame.instr_ptr
        frame_owner: Some(read(264)),
        frame_is_entry: None,
        code_filename: read(280),
        code_qualname: read(296),
        code_linetable: read(304),
        code_firstlineno: firstlineno,
        code_adaptive: Some(read(344)),
        line_table: LineTable::Locations,
        unicode_state: read(544),
        unicode_length: read(552),
        ascii_size: read(560),
        // Not published: PyCompactUnicodeObject adds utf8_length and utf8.
        compact_size: read(560) + 16,
        bytes_size: read(520),
        bytes_data: read(528),
    })
}
