//! What the unwinder knows about each module: enough to symbolize its frames after
//! the process has exited.

use std::ops::Range;
use std::path::PathBuf;

/// A module (executable, shared library, vDSO) as the unwinder saw it loaded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModuleInfo {
    /// The file: the loader's name for it, or the executable's real path. For the
    /// vDSO, its soname (`linux-vdso.so.1`), which is no file.
    pub path: PathBuf,
    /// The GNU build id (empty if the module has none).
    pub build_id: Vec<u8>,
    /// Load bias: absolute address = ELF virtual address + bias.
    pub bias: u64,
    /// Absolute range of its executable segments.
    pub text: Range<u64>,
    /// `true` if the module has `.eh_frame` unwind info that the unwinder uses.
    pub has_unwind_info: bool,
}

/// The GNU build id in an ELF note segment's bytes, if there is one.
pub(crate) fn build_id_in_notes(mut notes: &[u8]) -> Option<&[u8]> {
    const NT_GNU_BUILD_ID: u32 = 3;
    let u32_at = |b: &[u8], i: usize| -> Option<u32> {
        Some(u32::from_le_bytes(b.get(i..i + 4)?.try_into().ok()?))
    };
    let align4 = |n: usize| (n + 3) & !3;
    while notes.len() >= 12 {
        let namesz = u32_at(notes, 0)? as usize;
        let descsz = u32_at(notes, 4)? as usize;
        let kind = u32_at(notes, 8)?;
        let name_end = 12 + align4(namesz);
        let desc = notes.get(name_end..name_end.checked_add(descsz)?)?;
        if kind == NT_GNU_BUILD_ID && notes.get(12..12 + namesz)? == b"GNU\0" {
            return Some(desc);
        }
        notes = notes.get(name_end + align4(descsz)..)?;
    }
    None
}

/// Text range as a range; a helper for display.
pub(crate) fn union(a: Option<Range<u64>>, b: Range<u64>) -> Range<u64> {
    match a {
        Some(a) => a.start.min(b.start)..a.end.max(b.end),
        None => b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_id_found_after_another_note() {
        let mut n = Vec::new();
        // An ABI tag note, then the build id.
        n.extend_from_slice(&4u32.to_le_bytes());
        n.extend_from_slice(&16u32.to_le_bytes());
        n.extend_from_slice(&1u32.to_le_bytes());
        n.extend_from_slice(b"GNU\0");
        n.extend_from_slice(&[0; 16]);
        n.extend_from_slice(&4u32.to_le_bytes());
        n.extend_from_slice(&3u32.to_le_bytes());
        n.extend_from_slice(&3u32.to_le_bytes());
        n.extend_from_slice(b"GNU\0");
        n.extend_from_slice(&[0xab, 0xcd, 0xef, 0]);
        assert_eq!(build_id_in_notes(&n), Some(&[0xab, 0xcd, 0xef][..]));
        assert_eq!(build_id_in_notes(&n[..30]), None);
    }
}
