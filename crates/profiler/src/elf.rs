//! Where to put probes in an ELF file: symbol file offsets, and what the first
//! instruction there costs to probe.

use std::collections::HashMap;
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use blazesym::inspect::Inspector;
use blazesym::inspect::source::{Elf, Source};
use gpuperf_merge::model::{is_copy_api, is_launch_api, is_memset_api};
use object::elf::PF_X;
use object::{Object, ObjectSegment, ObjectSymbol, SegmentFlags, SymbolKind};

use crate::error::{Error, Result};

/// The first instruction at a probe point, which decides what a hit costs.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum FirstInsn {
    /// `0f 1f 44 00 00`: Linux 6.17+ turns it into a fast syscall path.
    Nop5,
    /// `push %rbp`: emulated, no single-step.
    PushRbp,
    /// `endbr64`: emulated as a NOP.
    Endbr64,
    /// Anything else: int3 plus an out-of-line single-step, about 10 µs a hit.
    Other,
}

impl FirstInsn {
    fn decode(bytes: &[u8]) -> Self {
        match bytes {
            [0x0f, 0x1f, 0x44, 0x00, 0x00, ..] => Self::Nop5,
            [0x55, ..] => Self::PushRbp,
            [0xf3, 0x0f, 0x1e, 0xfa, ..] => Self::Endbr64,
            _ => Self::Other,
        }
    }

    /// Whether a uprobe here avoids the single-step slow path.
    pub fn is_fast(self) -> bool {
        self != Self::Other
    }
}

/// A function to probe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbePoint {
    /// The ELF file.
    pub path: PathBuf,
    /// The symbol name.
    pub symbol: String,
    /// File offset of its first instruction, as uprobes take it.
    pub file_offset: u64,
    /// Its first instruction.
    pub first: FirstInsn,
}

struct FuncSym {
    addr: u64,
    file_offset: u64,
}

fn probe_error(path: &Path, message: impl Into<String>) -> Error {
    Error::Probe {
        path: path.to_owned(),
        message: message.into(),
    }
}

/// Every function symbol of `path` with its file offset, from the dynamic and
/// the static symbol table (statically linked executables keep cudart's
/// functions only in the latter).
fn functions(path: &Path) -> Result<HashMap<String, FuncSym>> {
    check_elf(path)?;
    let file = File::open(path).map_err(|e| probe_error(path, e.to_string()))?;
    // SAFETY: the mapping is read-only and dropped before returning; a file
    // truncated meanwhile by someone else could fault, as for any ELF reader.
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| probe_error(path, e.to_string()))?;
    let elf = object::File::parse(&*map).map_err(|e| probe_error(path, format!("bad ELF: {e}")))?;
    let segments: Vec<(u64, u64, u64)> = elf
        .segments()
        .filter_map(|s| {
            let (offset, size) = s.file_range();
            (size > 0).then(|| (s.address(), offset, size))
        })
        .collect();
    let to_offset = |addr: u64| {
        segments
            .iter()
            .find(|(va, _, size)| addr >= *va && addr < va + size)
            .map(|(va, off, _)| addr - va + off)
    };
    let mut out = HashMap::new();
    for sym in elf.dynamic_symbols().chain(elf.symbols()) {
        if sym.kind() != SymbolKind::Text || sym.is_undefined() || sym.address() == 0 {
            continue;
        }
        let (Ok(name), Some(file_offset)) = (sym.name(), to_offset(sym.address())) else {
            continue;
        };
        out.entry(name.to_owned()).or_insert(FuncSym {
            addr: sym.address(),
            file_offset,
        });
    }
    Ok(out)
}

fn check_elf(path: &Path) -> Result<()> {
    let mut magic = [0u8; 4];
    File::open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .map_err(|e| probe_error(path, e.to_string()))?;
    if magic != *b"\x7fELF" {
        return Err(probe_error(path, "not an ELF file"));
    }
    Ok(())
}

fn read_at(file: &File, offset: u64, len: usize) -> Vec<u8> {
    let mut buf = vec![0; len];
    let n = file.read_at(&mut buf, offset).unwrap_or(0);
    buf.truncate(n);
    buf
}

/// The file offset of a symbol (function or data) in `path`.
pub fn symbol_offset(path: &Path, name: &str) -> Result<u64> {
    check_elf(path)?;
    let inspector = Inspector::new();
    let src = Source::Elf(Elf::new(path));
    let found = inspector
        .lookup(&src, &[name])
        .map_err(|e| probe_error(path, format!("reading symbols: {e}")))?;
    found
        .into_iter()
        .flatten()
        .find_map(|s| s.file_offset)
        .ok_or_else(|| probe_error(path, format!("no symbol `{name}`")))
}

/// How many loadable segments map the file page holding `file_offset`. A
/// uprobe semaphore must be mapped once: when the page that ends the RELRO
/// segment also starts the data segment, the kernel may count in the copy
/// that becomes read-only, and the traced code never sees the count.
pub fn segments_mapping(path: &Path, file_offset: u64) -> Result<usize> {
    check_elf(path)?;
    let file = File::open(path).map_err(|e| probe_error(path, e.to_string()))?;
    // SAFETY: the file is opened read-only and only read through this map; a
    // concurrent writer could change what we read, not memory safety.
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| probe_error(path, e.to_string()))?;
    let elf = object::File::parse(&*map).map_err(|e| probe_error(path, format!("bad ELF: {e}")))?;
    const PAGE: u64 = 4096;
    let page = file_offset / PAGE;
    Ok(elf
        .segments()
        .filter(|s| {
            let (start, size) = s.file_range();
            size > 0 && start / PAGE <= page && page <= (start + size - 1) / PAGE
        })
        .count())
}

/// A loadable segment of an ELF file.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct Segment {
    /// Its address in the file's ELF address space.
    pub vaddr: u64,
    /// Its size in memory.
    pub size: u64,
    /// Where its bytes start in the file.
    pub offset: u64,
}

/// The executable loadable segments of `path`.
pub(crate) fn code_segments(path: &Path) -> Result<Vec<Segment>> {
    check_elf(path)?;
    let file = File::open(path).map_err(|e| probe_error(path, e.to_string()))?;
    // SAFETY: the file is opened read-only and only read through this map; a
    // concurrent writer could change what we read, not memory safety.
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| probe_error(path, e.to_string()))?;
    let elf = object::File::parse(&*map).map_err(|e| probe_error(path, format!("bad ELF: {e}")))?;
    Ok(elf
        .segments()
        .filter(
            |s| matches!(s.flags(), SegmentFlags::Elf { p_flags, .. } if p_flags.0 & PF_X.0 != 0),
        )
        .map(|s| Segment {
            vaddr: s.address(),
            size: s.size(),
            offset: s.file_range().0,
        })
        .collect())
}

/// The probe point of one named function.
pub fn function(path: &Path, name: &str) -> Result<ProbePoint> {
    let funcs = functions(path)?;
    let f = funcs
        .get(name)
        .ok_or_else(|| probe_error(path, format!("no function `{name}`")))?;
    let file = File::open(path).map_err(|e| probe_error(path, e.to_string()))?;
    Ok(ProbePoint {
        path: path.to_owned(),
        symbol: name.to_owned(),
        file_offset: f.file_offset,
        first: FirstInsn::decode(&read_at(&file, f.file_offset, 5)),
    })
}

/// Whether a symbol is a CUDA API call that `gpuperf-inject` marks: kernel and
/// graph launches, copies and memsets, runtime or driver API.
pub fn is_marked_api(name: &str) -> bool {
    (name.starts_with("cu") || name.starts_with("__cu"))
        && (is_launch_api(name) || is_copy_api(name) || is_memset_api(name))
}

/// The CUDA API functions defined in `path` that the marker fires for, sorted
/// by name. A function that only tail-jumps to another one in the list (CUDA
/// 13's `__cudaLaunchKernel` → `cudaLaunchKernel`) is left out, so that one
/// call hits one probe.
pub fn api_functions(path: &Path) -> Result<Vec<ProbePoint>> {
    let funcs = functions(path)?;
    let file = File::open(path).map_err(|e| probe_error(path, e.to_string()))?;
    let mut api: Vec<(&String, &FuncSym)> =
        funcs.iter().filter(|(n, _)| is_marked_api(n)).collect();
    api.sort_by(|a, b| a.0.cmp(b.0));
    let starts: HashMap<u64, ()> = api.iter().map(|(_, f)| (f.addr, ())).collect();
    let mut out = Vec::new();
    for (name, f) in api {
        let head = read_at(&file, f.file_offset, 16);
        if let Some(target) = tail_jump_target(&head, f.addr)
            && target != f.addr
            && starts.contains_key(&target)
        {
            continue;
        }
        out.push(ProbePoint {
            path: path.to_owned(),
            symbol: name.clone(),
            file_offset: f.file_offset,
            first: FirstInsn::decode(&head),
        });
    }
    Ok(out)
}

/// The target of a function that is only a frame set-up and a tail jump:
/// `[endbr64] push %rbp; mov %rsp,%rbp; pop %rbp; jmp rel32` or `jmp rel32`.
fn tail_jump_target(code: &[u8], addr: u64) -> Option<u64> {
    let (skip, code) = match code {
        [0xf3, 0x0f, 0x1e, 0xfa, rest @ ..] => (4, rest),
        _ => (0, code),
    };
    let (skip, code) = match code {
        [0x55, 0x48, 0x89, 0xe5, 0x5d, rest @ ..] => (skip + 5, rest),
        _ => (skip, code),
    };
    match code {
        [0xe9, a, b, c, d, ..] => {
            let rel = i32::from_le_bytes([*a, *b, *c, *d]);
            Some((addr + skip + 5).wrapping_add_signed(rel.into()))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_instructions() {
        assert_eq!(
            FirstInsn::decode(&[0x0f, 0x1f, 0x44, 0, 0, 0xc3]),
            FirstInsn::Nop5
        );
        assert_eq!(FirstInsn::decode(&[0x55, 0x48]), FirstInsn::PushRbp);
        assert_eq!(
            FirstInsn::decode(&[0xf3, 0x0f, 0x1e, 0xfa]),
            FirstInsn::Endbr64
        );
        assert_eq!(
            FirstInsn::decode(&[0x48, 0x83, 0xec, 0x08]),
            FirstInsn::Other
        );
        assert_eq!(FirstInsn::decode(&[]), FirstInsn::Other);
        assert!(!FirstInsn::Other.is_fast());
    }

    #[test]
    fn tail_jumps_resolve_like_the_cuda13_wrapper() {
        // 229a0: push rbp; mov rbp,rsp; pop rbp; jmp 74370 (libcudart.so.13)
        let code = [0x55, 0x48, 0x89, 0xe5, 0x5d, 0xe9, 0xc6, 0x19, 0x05, 0x00];
        assert_eq!(tail_jump_target(&code, 0x229a0), Some(0x74370));
        let code = [0xf3, 0x0f, 0x1e, 0xfa, 0xe9, 0xfb, 0xff, 0xff, 0xff];
        assert_eq!(tail_jump_target(&code, 0x1000), Some(0x1004));
        // A real function body is not a wrapper.
        let code = [0x55, 0x48, 0x89, 0xe5, 0x41, 0x57, 0x41, 0x56];
        assert_eq!(tail_jump_target(&code, 0x74370), None);
    }

    #[test]
    fn marked_api_names() {
        for n in [
            "cudaLaunchKernel",
            "__cudaLaunchKernel_ptsz",
            "cuLaunchKernelEx",
            "cudaMemcpyAsync",
            "cuMemsetD8_v2",
            "cudaGraphLaunch",
        ] {
            assert!(is_marked_api(n), "{n}");
        }
        for n in [
            "cudaLaunchHostFunc",
            "cudaMalloc",
            "cudaStreamSynchronize",
            "memcpy",
            "my_cudaLaunchKernel",
        ] {
            assert!(!is_marked_api(n), "{n}");
        }
    }
}
