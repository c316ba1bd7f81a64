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

/// How many words a frame takes in the thread's data stack (3.11+): the
/// interpreter pushes exactly this many for each call, so the live frames of a
/// data-stack chunk tile it from its first frame on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FrameWords {
    /// `co_framesize`, an `int` at this offset in the code object (3.12+).
    Field(u64),
    /// 3.11: `co_nlocalsplus + co_stacksize` (`int`s at these offsets) plus the
    /// frame's own fields.
    Sum {
        nlocalsplus: u64,
        stacksize: u64,
        specials: u64,
    },
}

/// Where a thread's data stack (3.11+) is found. A chunk starts with
/// `previous`, `size` (bytes, header included) and `top` (the saved top, in
/// words from the data, of a chunk that is not the current one); its frames
/// follow at byte 24, one word later in the thread's first chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DataStack {
    /// `PyThreadState.datastack_chunk`: the current chunk.
    pub chunk: u64,
    /// `PyThreadState.datastack_top`: the first free word of the current chunk.
    pub top: u64,
    pub frame_words: FrameWords,
}

/// Byte offsets into the interpreter's structs, x86-64.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Layout {
    pub minor: u8,
    /// A free-threaded build (3.13t): a larger object header.
    pub free_threaded: bool,
    /// `PyObject.ob_type`: 8, or 24 in a free-threaded build.
    pub ob_type: u64,
    /// The thread's data stack, where 3.11+ keeps the frames of running calls.
    pub datastack: Option<DataStack>,
    /// PyThreadState → the frame chain's head (3.11/3.12: the `_PyCFrame*`).
    pub tstate_frame: u64,
    /// `_PyCFrame.current_frame` (3.11/3.12).
    pub cframe_current: Option<u64>,
    /// `PyThreadState.root_cframe` (3.11/3.12): the `_PyCFrame` inside the
    /// thread state that `cframe` points to while no eval loop runs on the
    /// thread (a thread the interpreter knows, between Python calls).
    pub root_cframe: Option<u64>,
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

impl Layout {
    /// Where a 3.11+ frame's owner and entry bytes lie in one 16-bit word,
    /// and the mask of their bits in it: every supported version has them
    /// side by side, or only the owner, so the proof compares them as one
    /// word. `None` for a layout whose two bytes lie apart. The word lies
    /// within the frame's `frame_size` bytes.
    pub fn flags_word(&self) -> Option<(u64, u16)> {
        let fits = |at: u64| at.checked_add(2).is_some_and(|e| e <= self.frame_size);
        match (self.frame_owner, self.frame_is_entry) {
            (Some(a), Some(b)) if a.abs_diff(b) == 1 => {
                Some(a.min(b)).filter(|&at| fits(at)).map(|at| (at, 0xffff))
            }
            (Some(_), Some(_)) => None,
            (Some(o), None) | (None, Some(o)) if fits(o) => Some((o, 0x00ff)),
            (Some(o), None) | (None, Some(o)) => o
                .checked_sub(1)
                .filter(|&at| fits(at))
                .map(|at| (at, 0xff00)),
            (None, None) => Some((self.frame_code, 0)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Layout;
    use crate::python::{v3_11, v3_12};

    /// The one word the proof compares holds the owner byte and, where a
    /// version has it, the entry byte, within the frame's bytes.
    fn covers(l: &Layout) {
        let (at, mask) = l.flags_word().expect("a flags word");
        assert!(at + 2 <= l.frame_size);
        for off in [l.frame_owner, l.frame_is_entry].into_iter().flatten() {
            let bit = (off - at) * 8;
            assert_eq!((mask >> bit) & 0xff, 0xff, "byte at {off}");
        }
    }

    #[test]
    fn the_flags_word_holds_the_owner_and_entry_bytes() {
        covers(&v3_11::LAYOUT);
        covers(&v3_12::LAYOUT);
        assert_eq!(v3_11::LAYOUT.flags_word(), Some((68, 0xffff)));
        assert_eq!(v3_12::LAYOUT.flags_word(), Some((70, 0x00ff)));
        // An owner in the frame's last byte: the word ends there.
        let last = Layout {
            frame_owner: Some(71),
            ..v3_12::LAYOUT
        };
        assert_eq!(last.flags_word(), Some((70, 0xff00)));
        covers(&last);
        // Two bytes apart: not one word, so never proven that way.
        let apart = Layout {
            frame_owner: Some(60),
            frame_is_entry: Some(68),
            ..v3_11::LAYOUT
        };
        assert_eq!(apart.flags_word(), None);
    }
}
