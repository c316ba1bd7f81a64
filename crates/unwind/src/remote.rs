//! Out-of-process unwinding: another process's stack, from a copy of its top and its
//! registers (what the eBPF profiler takes at a probe), with unwind info read from
//! the module files.

use std::collections::HashMap;
use std::fs::File;
use std::ops::Range;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use object::{Object, ObjectSection, ObjectSegment};

use crate::error::{Error, Result};
use crate::frame::{Captured, Frame, ModuleId};
use crate::loader::Loader;
use crate::module::ModuleInfo;
use crate::rule::UnwindCache;
use crate::table::{Bytes, Cfi, Entry, Table, Tables};
use crate::walk::{Regs, walk};

/// A file mapping of the target process: one executable line of `/proc/PID/maps`,
/// or the same facts recorded earlier (so that a process can be unwound after it
/// exited, as long as its files are still there).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    /// Absolute address range.
    pub avma: Range<u64>,
    /// File offset of `avma.start`.
    pub file_offset: u64,
    /// The file. Read through `/proc/PID/root` by [`RemoteUnwinder::from_pid`].
    pub path: PathBuf,
}

/// Unwinds copied stacks of one process.
pub struct RemoteUnwinder {
    table: Table,
    modules: Vec<ModuleInfo>,
    /// Each module's executable segment in its file, by [`ModuleId`]: where
    /// signal return trampolines are recognized.
    texts: Vec<Option<Text>>,
}

/// The file bytes of a module's executable segment.
struct Text {
    map: Arc<memmap2::Mmap>,
    /// The segment's ELF virtual addresses.
    svma: Range<u64>,
    /// The file offset of `svma.start`.
    file_offset: u64,
}

impl Text {
    /// The file's bytes at ELF virtual address `svma`, `n` of them.
    fn bytes(&self, svma: u64, n: u64) -> Option<&[u8]> {
        if svma < self.svma.start || svma.checked_add(n)? > self.svma.end {
            return None;
        }
        let off = usize::try_from(self.file_offset + (svma - self.svma.start)).ok()?;
        self.map
            .get(off..off.checked_add(usize::try_from(n).ok()?)?)
    }
}

/// `mov $15, %rax; syscall` (`rt_sigreturn`): the x86-64 signal return
/// trampoline of glibc (`__restore_rt`) and musl, which the kernel makes a
/// handler return to (as the in-process unwinder recognizes it in memory).
const SIGRETURN: [u8; 9] = [0x48, 0xc7, 0xc0, 0x0f, 0x00, 0x00, 0x00, 0x0f, 0x05];

/// A copy of the top of a thread's stack.
#[derive(Clone, Copy, Debug)]
pub struct StackCopy<'a> {
    /// The address of `bytes[0]` in the target (its stack pointer at the copy).
    pub start: u64,
    /// The bytes.
    pub bytes: &'a [u8],
}

impl StackCopy<'_> {
    /// The 8 bytes at `addr`, or `None` outside the copy.
    pub fn read(&self, addr: u64) -> Option<u64> {
        let off = usize::try_from(addr.checked_sub(self.start)?).ok()?;
        let b = self.bytes.get(off..off.checked_add(8)?)?;
        Some(u64::from_le_bytes(b.try_into().ok()?))
    }
}

impl RemoteUnwinder {
    /// Reads `/proc/PID/maps` and the ELF files of its executable mappings. Modules
    /// that cannot be read are skipped (their frames end stacks as
    /// [`crate::StackEnd::NoUnwindInfo`]); the second value lists them with the reason.
    ///
    /// Each file is read through its mapping, `/proc/PID/map_files/START-END`
    /// (which needs `CAP_SYS_ADMIN`), else by its path here or under
    /// `/proc/PID/root` if that file has the mapping's inode number: the path
    /// `/proc/PID/maps` shows is the reader's (from its root) where the file is
    /// reachable, and the process's own in another mount namespace, where the
    /// same path may name another file.
    pub fn from_pid(pid: u32) -> Result<(RemoteUnwinder, Vec<Error>)> {
        let maps_path = PathBuf::from(format!("/proc/{pid}/maps"));
        let text = std::fs::read_to_string(&maps_path).map_err(|source| Error::Io {
            path: maps_path.clone(),
            source,
        })?;
        let mappings = parse_maps(&text, &maps_path)?;
        let inodes: HashMap<u64, u64> = text.lines().filter_map(start_and_inode).collect();
        let root = PathBuf::from(format!("/proc/{pid}/root"));
        Ok(Self::from_mappings_at(&mappings, |m| {
            let relative = m.path.strip_prefix("/").unwrap_or(&m.path);
            let own = PathBuf::from(format!(
                "/proc/{pid}/map_files/{:x}-{:x}",
                m.avma.start, m.avma.end
            ));
            let ino = inodes.get(&m.avma.start).copied();
            let under_root = root.join(relative);
            [own, m.path.clone(), under_root.clone()]
                .into_iter()
                .find(|p| std::fs::metadata(p).is_ok_and(|x| Some(x.ino()) == ino))
                .unwrap_or(under_root)
        }))
    }

    /// Builds the table from mappings (for instance a module table recorded while
    /// the process ran). Unreadable files are skipped and returned as errors.
    pub fn from_mappings(mappings: &[Mapping]) -> (RemoteUnwinder, Vec<Error>) {
        Self::from_mappings_at(mappings, |m| m.path.clone())
    }

    /// [`RemoteUnwinder::from_mappings`], each file read from `file(mapping)`.
    fn from_mappings_at(
        mappings: &[Mapping],
        file: impl Fn(&Mapping) -> PathBuf,
    ) -> (RemoteUnwinder, Vec<Error>) {
        let mut modules = Vec::new();
        let mut entries = Vec::new();
        let mut texts = Vec::new();
        let mut errors = Vec::new();
        for m in mappings {
            let file = file(m);
            match read_module(&file, m) {
                Ok((mut info, cfi, text)) => {
                    info.path = m.path.clone();
                    let id = ModuleId(modules.len() as u32);
                    entries.push(Entry {
                        id,
                        avma: m.avma.clone(),
                        bias: info.bias,
                        cfi,
                        eh_frame_hdr_avma: 0,
                        text_readable: false,
                    });
                    modules.push(info);
                    texts.push(text);
                }
                Err(e) => errors.push(e),
            }
        }
        let names: Vec<String> = modules
            .iter()
            .map(|m: &ModuleInfo| m.path.to_string_lossy().into_owned())
            .collect();
        let table = Table::new(entries, |id| names[id.0 as usize].clone());
        (
            RemoteUnwinder {
                table,
                modules,
                texts,
            },
            errors,
        )
    }

    /// Whether `offset` (an ELF virtual address) of module `module` is a
    /// signal return trampoline (`__restore_rt`), which the unwind passes
    /// through into the code the signal interrupted, reading its registers
    /// from the signal frame's `ucontext_t` above the handler's frame: a
    /// stack that ends right after one ([`crate::StackEnd::StackReadFailed`])
    /// was cut before the interrupted code (the copy ends before the signal
    /// frame, or the handler ran on an alternate signal stack).
    pub fn is_signal_return(&self, module: ModuleId, offset: u64) -> bool {
        self.texts
            .get(module.0 as usize)
            .and_then(Option::as_ref)
            .and_then(|t| t.bytes(offset, SIGRETURN.len() as u64))
            == Some(&SIGRETURN[..])
    }

    /// The modules, indexed by [`ModuleId`].
    pub fn modules(&self) -> &[ModuleInfo] {
        &self.modules
    }

    /// Unwinds a copied stack into `out` (innermost first; `out.len()` is the depth
    /// cap). Reads outside the copy end the stack as [`crate::StackEnd::StackReadFailed`].
    /// Does not allocate.
    pub fn unwind(
        &self,
        regs: Regs,
        stack: StackCopy<'_>,
        cache: &mut UnwindCache,
        out: &mut [Frame],
    ) -> Captured {
        let mut read = |addr: u64| stack.read(addr).ok_or(());
        self.unwind_with(regs, &mut read, cache, out)
    }

    /// [`RemoteUnwinder::unwind`] with the stack read through `read_stack`, which
    /// gets an address and returns the 8 bytes there, or `Err(())` where the stack
    /// cannot be read. The walk is a pure function of `regs`, the module table and
    /// what `read_stack` returns, so a caller can log the reads to learn which stack
    /// words a result depends on (the eBPF profiler caches results that way).
    /// Does not allocate.
    pub fn unwind_with<F>(
        &self,
        regs: Regs,
        read_stack: &mut F,
        cache: &mut UnwindCache,
        out: &mut [Frame],
    ) -> Captured
    where
        F: FnMut(u64) -> Result<u64, ()>,
    {
        let loader = RemoteLoader { unwinder: self };
        let (len, end) = walk(
            Tables::one(&self.table),
            regs,
            cache,
            read_stack,
            &loader,
            0,
            out,
            None,
        );
        Captured {
            len,
            end,
            python_frames: 0,
            python_truncated: false,
            recovered: cache.recovered,
            reused: 0,
            serial: 0,
            unchanged: false,
            kept: false,
            whole: false,
            ends_unknown: matches!(out[..len].last(), Some(Frame::Unknown { .. })),
            note: 0,
            tag: 0,
        }
    }
}

/// The module table is fixed; code is read from the module files.
struct RemoteLoader<'a> {
    unwinder: &'a RemoteUnwinder,
}

impl Loader for RemoteLoader<'_> {
    fn loaded_elsewhere(&self, _address: u64) -> bool {
        false
    }
    fn still_loaded(&self, _entry: &Entry, _address: u64) -> bool {
        true
    }
    fn is_signal_return(&self, entry: &Entry, return_address: u64) -> bool {
        self.unwinder
            .is_signal_return(entry.id, return_address.wrapping_sub(entry.bias))
    }
}

/// The start address and inode number of a `/proc/PID/maps` line.
fn start_and_inode(line: &str) -> Option<(u64, u64)> {
    let mut f = line.split_ascii_whitespace();
    let start = f.next()?.split_once('-')?.0;
    let ino = f.nth(3)?.parse().ok()?;
    Some((u64::from_str_radix(start, 16).ok()?, ino))
}

/// The executable file mappings of a `/proc/PID/maps` text.
pub fn parse_maps(text: &str, path: &Path) -> Result<Vec<Mapping>> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let err = |reason| Error::Maps {
            path: path.to_path_buf(),
            line: i + 1,
            reason,
        };
        let mut f = line.split_ascii_whitespace();
        let range = f.next().ok_or_else(|| err("empty line"))?;
        let perms = f.next().ok_or_else(|| err("no permissions"))?;
        let offset = f.next().ok_or_else(|| err("no offset"))?;
        let (_dev, _inode) = (f.next(), f.next());
        let file: Vec<&str> = f.collect();
        let (lo, hi) = range.split_once('-').ok_or_else(|| err("bad range"))?;
        let parse = |s: &str| u64::from_str_radix(s, 16).map_err(|_| err("bad hex number"));
        let (lo, hi, offset) = (parse(lo)?, parse(hi)?, parse(offset)?);
        let file = file.join(" ");
        if !perms.contains('x') || !file.starts_with('/') || file.ends_with(" (deleted)") {
            continue;
        }
        out.push(Mapping {
            avma: lo..hi,
            file_offset: offset,
            path: PathBuf::from(file),
        });
    }
    Ok(out)
}

fn read_module(file: &Path, m: &Mapping) -> Result<(ModuleInfo, Option<Cfi>, Option<Text>)> {
    let io = |source| Error::Io {
        path: file.to_path_buf(),
        source,
    };
    let elf_err = |reason: String| Error::Elf {
        path: file.to_path_buf(),
        reason,
    };
    let f = File::open(file).map_err(io)?;
    // SAFETY: a read-only private mapping; a file truncated under us could fault,
    // as with any mmap-based reader (the files are the target's loaded modules).
    let map = Arc::new(unsafe { memmap2::Mmap::map(&f) }.map_err(io)?);
    let obj = object::File::parse(&map[..]).map_err(|e| elf_err(e.to_string()))?;
    // The segment this mapping comes from gives the load bias. A segment's mapping
    // starts at its file offset rounded down to a page, with the same rounding of
    // its address (the two are congruent modulo the page size).
    let seg = obj
        .segments()
        .find(|s| {
            let (off, size) = s.file_range();
            // Only executable mappings are read, and the page they start at may
            // also hold the end of the read-only segment before.
            let exec = matches!(s.flags(), object::SegmentFlags::Elf { p_flags, .. } if p_flags.0 & 1 != 0);
            exec && off & !0xfff <= m.file_offset && m.file_offset < off + size.max(1)
        })
        .ok_or_else(|| elf_err(format!("no segment at file offset {:#x}", m.file_offset)))?;
    let bias = m.avma.start.wrapping_sub(
        seg.address()
            .wrapping_sub(seg.file_range().0)
            .wrapping_add(m.file_offset),
    );
    let section = |name: &str| -> Option<(Bytes, u64)> {
        let s = obj.section_by_name(name)?;
        let (off, size) = s.file_range()?;
        Some((
            Bytes::File {
                map: map.clone(),
                range: off as usize..(off + size) as usize,
            },
            s.address(),
        ))
    };
    let cfi = section(".eh_frame").map(|(eh_frame, eh_frame_svma)| Cfi {
        eh_frame,
        eh_frame_svma,
        hdr: section(".eh_frame_hdr"),
        text_svma: obj.section_by_name(".text").map_or(0, |s| s.address()),
    });
    let (seg_offset, seg_size) = seg.file_range();
    let text = Some(Text {
        map: map.clone(),
        svma: seg.address()..seg.address().saturating_add(seg_size),
        file_offset: seg_offset,
    });
    let build_id = obj
        .build_id()
        .ok()
        .flatten()
        .map(<[u8]>::to_vec)
        .unwrap_or_default();
    Ok((
        ModuleInfo {
            path: file.to_path_buf(),
            build_id,
            bias,
            text: m.avma.clone(),
            has_unwind_info: cfi.is_some(),
        },
        cfi,
        text,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_keep_executable_file_mappings_only() {
        let text = "\
55d0c000-55d0d000 r--p 00000000 08:01 123 /usr/bin/app
55d0d000-55d0e000 r-xp 00001000 08:01 123 /usr/bin/app
7f00000-7f01000 r-xp 00000000 00:00 0 
7ffd1000-7ffd2000 rw-p 00000000 00:00 0 [stack]
7f10000-7f11000 r-xp 00002000 08:01 9 /tmp/my lib.so
";
        let m = parse_maps(text, Path::new("maps")).unwrap();
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].avma, 0x55d0d000..0x55d0e000);
        assert_eq!(m[0].file_offset, 0x1000);
        assert_eq!(m[1].path, PathBuf::from("/tmp/my lib.so"));
        assert_eq!(
            start_and_inode(text.lines().nth(1).unwrap()),
            Some((0x55d0d000, 123))
        );
        let e = parse_maps("zz-1 r-xp 0 0 0 /x\n", Path::new("maps")).unwrap_err();
        assert_eq!(e.to_string(), "`maps` line 1: bad hex number");
    }
}
