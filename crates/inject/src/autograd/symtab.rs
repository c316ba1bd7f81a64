//! Finds local symbols in an ELF file's `.symtab`, which the loader does not
//! map and `dlsym` cannot see. The file is mapped read-only and only the
//! symbol table and the names of candidate symbols are touched.

use std::fs::File;
use std::os::fd::AsRawFd as _;
use std::path::Path;

const SHT_SYMTAB: u32 = 2;
const STT_OBJECT: u8 = 1;
const STB_LOCAL: u8 = 0;
const SYM_LEN: usize = 24;
const SHDR_LEN: usize = 64;

/// A read-only mapping of a whole file, unmapped on drop.
struct Mapped {
    ptr: *mut libc::c_void,
    len: usize,
}

impl Mapped {
    fn open(path: &Path) -> Result<Mapped, String> {
        let f = File::open(path).map_err(|e| format!("cannot open `{}`: {e}", path.display()))?;
        let len = f
            .metadata()
            .map_err(|e| format!("cannot stat `{}`: {e}", path.display()))?
            .len() as usize;
        if len < SHDR_LEN {
            return Err(format!("`{}` is too short for ELF", path.display()));
        }
        // SAFETY: a fresh private read-only mapping of an open file; the
        // descriptor may close after the call. A file truncated while mapped
        // would fault on read: shared libraries in use are not truncated.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_PRIVATE,
                f.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(format!(
                "cannot map `{}`: {}",
                path.display(),
                std::io::Error::last_os_error()
            ));
        }
        Ok(Mapped { ptr, len })
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: the mapping is `len` readable bytes and lives as long as `self`.
        unsafe { std::slice::from_raw_parts(self.ptr.cast::<u8>(), self.len) }
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `open`, once.
        unsafe { libc::munmap(self.ptr, self.len) };
    }
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}
fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}
fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// The ELF virtual address of the local data object `name` of `size` bytes in
/// the file at `path`.
pub(super) fn local_object(path: &Path, name: &[u8], size: u64) -> Result<u64, String> {
    let m = Mapped::open(path)?;
    let b = m.bytes();
    let bad = || format!("`{}` is not a readable 64-bit ELF file", path.display());
    if b.get(..4) != Some(b"\x7fELF") || b.get(4) != Some(&2) || b.get(5) != Some(&1) {
        return Err(bad());
    }
    let shoff = u64_at(b, 0x28).ok_or_else(bad)? as usize;
    let shentsize = usize::from(u16_at(b, 0x3a).ok_or_else(bad)?);
    let shnum = usize::from(u16_at(b, 0x3c).ok_or_else(bad)?);
    if shentsize < SHDR_LEN {
        return Err(bad());
    }
    let section = |i: usize| -> Option<(u32, usize, usize, u32)> {
        let at = shoff.checked_add(i.checked_mul(shentsize)?)?;
        Some((
            u32_at(b, at + 4)?,
            u64_at(b, at + 0x18)? as usize,
            u64_at(b, at + 0x20)? as usize,
            u32_at(b, at + 0x28)?,
        ))
    };
    let (_, symoff, symsize, link) = (0..shnum)
        .filter_map(section)
        .find(|s| s.0 == SHT_SYMTAB)
        .ok_or_else(|| format!("`{}` has no .symtab (stripped)", path.display()))?;
    let (_, stroff, strsize, _) = section(link as usize).ok_or_else(bad)?;
    let syms = b
        .get(symoff..symoff.saturating_add(symsize))
        .ok_or_else(bad)?;
    let strs = b
        .get(stroff..stroff.saturating_add(strsize))
        .ok_or_else(bad)?;
    for s in syms.chunks_exact(SYM_LEN) {
        let info = s[4];
        // Only local objects of the size asked: the names of a few thousand
        // symbols are read, not of half a million.
        if info & 0xf != STT_OBJECT || info >> 4 != STB_LOCAL || u64_at(s, 16) != Some(size) {
            continue;
        }
        let at = u32_at(s, 0).unwrap_or(0) as usize;
        let Some(rest) = strs.get(at..) else { continue };
        if rest.starts_with(name) && rest.get(name.len()) == Some(&0) {
            return u64_at(s, 8).ok_or_else(bad);
        }
    }
    Err(format!(
        "`{}` has no symbol `{}`",
        path.display(),
        String::from_utf8_lossy(name)
    ))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_file_that_is_not_elf_is_an_error_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.so");
        std::fs::write(&p, vec![0u8; 4096]).unwrap();
        let e = super::local_object(&p, b"x", 8).unwrap_err();
        assert!(e.contains("not a readable 64-bit ELF"), "{e}");
    }
}
