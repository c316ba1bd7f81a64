//! The per-thread memo of code objects ([`CodeMemo`]): what the shared code
//! table answered for the code objects a thread saw last.

/// A code object's address mixed for the shared table and the memos (objects
/// are 16-aligned: the low bits carry nothing).
pub(super) fn code_hash(code: u64) -> u64 {
    (code >> 4).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// Code objects one thread saw last, by address: what the shared code table
/// answered for them, with what identified them there.
pub(crate) struct CodeMemo {
    pub(super) entries: Box<[MemoEntry]>,
}

#[derive(Clone, Copy, Default)]
pub(super) struct MemoEntry {
    pub(super) code: u64,
    pub(super) line_table: u64,
    pub(super) first_line: u32,
    pub(super) id: u32,
}

/// Entries of a [`CodeMemo`] (6 KiB).
pub(super) const MEMO_CODES: usize = 256;

impl CodeMemo {
    /// An empty memo.
    pub(crate) fn new() -> CodeMemo {
        CodeMemo::try_new().expect("memory for a code memo")
    }

    /// [`CodeMemo::new`], or `None` when memory is short.
    pub(crate) fn try_new() -> Option<CodeMemo> {
        Some(CodeMemo {
            entries: crate::fallible::slice(MEMO_CODES, MemoEntry::default())?,
        })
    }

    pub(super) fn index(code: u64) -> usize {
        (code_hash(code) >> 56) as usize % MEMO_CODES
    }
}

impl Default for CodeMemo {
    fn default() -> Self {
        CodeMemo::new()
    }
}
