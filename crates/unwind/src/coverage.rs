//! How much of a module's code its `.eh_frame` covers: code outside every FDE is
//! where the tables cannot unwind, and a stack crosses it only by a frame-pointer
//! step or a stack scan. Reads the file; not for the capture path.

use std::ops::Range;
use std::path::Path;

use gimli::{BaseAddresses, CieOrFde, EhFrame, LittleEndian, UnwindSection};
use object::{Object, ObjectSection, SectionKind};

use crate::error::{Error, Result};

/// The unwind coverage of one ELF file, by [`coverage`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Coverage {
    /// Bytes of its executable sections (`SHF_EXECINSTR`: `.text`, `.plt`, …).
    pub executable_bytes: u64,
    /// Of them, the bytes some `.eh_frame` FDE covers.
    pub covered_bytes: u64,
    /// The executable address ranges (ELF virtual addresses), sorted.
    pub executable: Vec<Range<u64>>,
    /// The covered address ranges, sorted, merged, within `executable`.
    pub covered: Vec<Range<u64>>,
}

impl Coverage {
    /// `covered_bytes / executable_bytes` (1 for a file without code).
    pub fn fraction(&self) -> f64 {
        if self.executable_bytes == 0 {
            return 1.0;
        }
        self.covered_bytes as f64 / self.executable_bytes as f64
    }

    /// Whether an FDE covers the ELF virtual address `svma`.
    pub fn covers(&self, svma: u64) -> bool {
        let i = self.covered.partition_point(|r| r.end <= svma);
        self.covered.get(i).is_some_and(|r| r.contains(&svma))
    }
}

/// Reads `path` (an executable or shared library) and measures which of its
/// executable bytes an `.eh_frame` FDE covers.
///
/// ```no_run
/// let c = gpuperf_unwind::coverage("/usr/lib/x86_64-linux-gnu/libcuda.so.1".as_ref())?;
/// println!("coverage {:.1}% of {} executable bytes", 100.0 * c.fraction(), c.executable_bytes);
/// # Ok::<(), gpuperf_unwind::Error>(())
/// ```
pub fn coverage(path: &Path) -> Result<Coverage> {
    let io = |source| Error::Io {
        path: path.to_owned(),
        source,
    };
    let elf = |reason: String| Error::Elf {
        path: path.to_owned(),
        reason,
    };
    let data = std::fs::read(path).map_err(io)?;
    let obj = object::File::parse(&data[..]).map_err(|e| elf(e.to_string()))?;
    let mut executable: Vec<Range<u64>> = obj
        .sections()
        // object's `Text` kind is ELF's SHF_EXECINSTR.
        .filter(|s| s.kind() == SectionKind::Text && s.size() > 0)
        .map(|s| s.address()..s.address() + s.size())
        .collect();
    if executable.is_empty() && obj.sections().next().is_none() {
        return Err(elf("no section headers".into()));
    }
    merge(&mut executable);
    let mut fdes = Vec::new();
    if let Some(eh) = obj.section_by_name(".eh_frame") {
        let bytes = eh.data().map_err(|e| elf(e.to_string()))?;
        let mut section = EhFrame::new(bytes, LittleEndian);
        section.set_address_size(8);
        let mut bases = BaseAddresses::default().set_eh_frame(eh.address());
        if let Some(text) = obj.section_by_name(".text") {
            bases = bases.set_text(text.address());
        }
        if let Some(got) = obj.section_by_name(".got") {
            bases = bases.set_got(got.address());
        }
        let mut entries = section.entries(&bases);
        loop {
            match entries.next() {
                Ok(Some(CieOrFde::Fde(partial))) => {
                    let fde = partial
                        .parse(EhFrame::cie_from_offset)
                        .map_err(|e| elf(format!(".eh_frame: {e}")))?;
                    let start = fde.initial_address();
                    fdes.push(start..start.saturating_add(fde.len()));
                }
                Ok(Some(CieOrFde::Cie(_))) => {}
                Ok(None) => break,
                Err(e) => return Err(elf(format!(".eh_frame: {e}"))),
            }
        }
    }
    merge(&mut fdes);
    let covered = intersect(&fdes, &executable);
    let len = |v: &[Range<u64>]| v.iter().map(|r| r.end - r.start).sum();
    Ok(Coverage {
        executable_bytes: len(&executable),
        covered_bytes: len(&covered),
        executable,
        covered,
    })
}

/// Sorts and merges overlapping or touching ranges.
fn merge(v: &mut Vec<Range<u64>>) {
    v.retain(|r| r.start < r.end);
    v.sort_by_key(|r| r.start);
    let mut out: Vec<Range<u64>> = Vec::with_capacity(v.len());
    for r in v.drain(..) {
        match out.last_mut() {
            Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
            _ => out.push(r),
        }
    }
    *v = out;
}

/// The parts of `a` inside `b` (both sorted and merged).
fn intersect(a: &[Range<u64>], b: &[Range<u64>]) -> Vec<Range<u64>> {
    let (mut i, mut j, mut out) = (0, 0, Vec::new());
    while i < a.len() && j < b.len() {
        let (start, end) = (a[i].start.max(b[j].start), a[i].end.min(b[j].end));
        if start < end {
            out.push(start..end);
        }
        if a[i].end < b[j].end {
            i += 1;
        } else {
            j += 1;
        }
    }
    out
}

#[cfg(test)]
#[allow(non_snake_case)]
mod tests {
    use super::*;

    #[test]
    fn ranges_merge_and_intersect() {
        let mut v = vec![5..8, 0..2, 2..3, 7..9, 10..10];
        merge(&mut v);
        assert_eq!(v, vec![0..3, 5..9]);
        assert_eq!(intersect(&v, &[1..6, 8..20]), vec![1..3, 5..6, 8..9]);
    }

    #[test]
    fn this_test_binary__mostly_covered_and_covers_answers_by_range() {
        let exe = std::env::current_exe().unwrap();
        let c = coverage(&exe).unwrap();
        assert!(c.executable_bytes > 0);
        assert!(c.fraction() > 0.9, "{:.3}", c.fraction());
        let r = c.covered[0].clone();
        assert!(c.covers(r.start) && c.covers(r.end - 1));
        // Merged ranges: the byte before one is not covered.
        assert!(!c.covers(r.start.wrapping_sub(1)));
        assert!(!c.covers(u64::MAX));
    }
}
