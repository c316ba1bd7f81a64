//! Turns kernel stack frames into function names with blazesym.
//!
//! Frames come as (build id, file offset) wherever the kernel could read the
//! build id, so a stack stays symbolizable after its process has exited as long
//! as some file with that build id is known. Files are learned from our own
//! mappings, the files we probe, each traced process's `exec` and its
//! `/proc/PID/maps` while it lives, and the full paths of the files that
//! traced processes exec or map as code, which the BPF program sends as it
//! happens: those keep a process's executable and libraries findable after it
//! exits. Such a file is read for its build id only when a frame's build id
//! is not known otherwise, and at most once.
//!
//! Raw-address frames (the kernel could not read the build id, for example
//! while another thread held the process's memory map lock) are placed by
//! where each file was mapped, which comes with its path, so they too are
//! named after the process exits. Raw addresses outside those files
//! (anonymous memory, such as JIT code with a perf map) are resolved through
//! the live process.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::path::{Path, PathBuf};

use blazesym::Pid;
use blazesym::helper::read_elf_build_id;
use blazesym::symbolize::source::{Elf, Process, Source};
use blazesym::symbolize::{Input, Symbolized};

use crate::elf;
use crate::event::{FileMapped, Frame, Place, Stack};

/// Where a file's code sits in a process.
#[derive(Clone, Debug)]
struct Mapping {
    start: u64,
    end: u64,
    /// The file offset at `start`.
    offset: u64,
    path: PathBuf,
}

/// Frame-name resolver with a build-id → file index.
pub struct Symbolizer {
    inner: blazesym::symbolize::Symbolizer,
    by_build_id: HashMap<Vec<u8>, PathBuf>,
    /// Files read for their build id, and what it was.
    indexed: HashMap<PathBuf, Option<Vec<u8>>>,
    /// (pid, build id) pairs already looked for in that pid's maps.
    searched: HashSet<(u32, Vec<u8>)>,
    /// Files traced processes mapped, not yet read for their build id.
    mapped: Vec<PathBuf>,
    /// The code mappings of each traced process, oldest first.
    mappings: HashMap<u32, Vec<Mapping>>,
    /// Every path ever put in `mapped`.
    mapped_seen: HashSet<PathBuf>,
    /// The paths traced processes named files by, for the paths they are
    /// read from here (`/proc/self/fd/N`): frames without a symbol name
    /// their file by the former.
    shown: HashMap<PathBuf, PathBuf>,
    /// Files whose frames are left out of stacks (our own marker library).
    hidden: HashSet<Vec<u8>>,
    /// Frames printed without a function name.
    pub unsymbolized_frames: u64,
    /// Frames whose file could not be found by build id.
    pub unknown_files: u64,
}

impl Default for Symbolizer {
    fn default() -> Self {
        Self::new()
    }
}

/// Names the native frames of the stacks the injection library took in
/// process (`gpuperf merge` of a recording that has them).
impl gpuperf_merge::model::Symbolize for Symbolizer {
    fn symbolize(
        &mut self,
        module: &gpuperf_merge::model::Module,
        offsets: &[u64],
    ) -> Vec<Vec<String>> {
        self.module_frames(
            module.pid,
            Path::new(&module.path),
            &module.build_id,
            offsets,
        )
    }
}

impl Symbolizer {
    /// A symbolizer that knows the files mapped into this process.
    pub fn new() -> Self {
        let mut s = Self {
            inner: blazesym::symbolize::Symbolizer::builder()
                .enable_code_info(false)
                .enable_inlined_fns(true)
                .enable_demangling(true)
                .build(),
            by_build_id: HashMap::new(),
            indexed: HashMap::new(),
            searched: HashSet::new(),
            mapped: Vec::new(),
            mappings: HashMap::new(),
            mapped_seen: HashSet::new(),
            shown: HashMap::new(),
            hidden: HashSet::new(),
            unsymbolized_frames: 0,
            unknown_files: 0,
        };
        s.index_maps("/proc/self/maps");
        s
    }

    /// Learns the build id of `path`. Returns it, if the file has one.
    pub fn index_file(&mut self, path: &Path) -> Option<Vec<u8>> {
        if let Some(id) = self.indexed.get(path) {
            return id.clone();
        }
        let id = read_elf_build_id(path)
            .ok()
            .flatten()
            .map(|id| id.into_owned());
        if let Some(id) = &id {
            self.by_build_id
                .entry(id.clone())
                .or_insert_with(|| path.to_owned());
        }
        self.indexed.insert(path.to_owned(), id.clone());
        id
    }

    /// Leaves the frames of `path` out of every stack (the marker's library:
    /// its frames say nothing about the application).
    pub fn hide_file(&mut self, path: &Path) {
        if let Some(id) = self.index_file(path) {
            self.hidden.insert(id);
        }
    }

    /// Learns every file-backed executable mapping of `pid`, while it lives.
    pub fn index_process(&mut self, pid: u32) {
        self.index_maps(&format!("/proc/{pid}/maps"));
    }

    /// A traced process exec'd `filename`.
    pub fn exec(&mut self, pid: u32, filename: &str) {
        // The link is exact while the process lives; the name as passed to
        // execve is the fallback when it is absolute.
        let exe = fs::read_link(format!("/proc/{pid}/exe")).ok().or_else(|| {
            Path::new(filename)
                .is_absolute()
                .then(|| PathBuf::from(filename))
        });
        if let Some(exe) = exe {
            self.index_file(&exe);
        }
    }

    /// The file read from `here` is the one a traced process named `shown`.
    pub fn name_file(&mut self, here: &Path, shown: &Path) {
        self.shown.insert(here.to_owned(), shown.to_owned());
    }

    /// A traced process exec'd or mapped a file as code: frames in it may
    /// come when the process is gone.
    pub fn mapped(&mut self, f: FileMapped) {
        let FileMapped {
            pid, path, place, ..
        } = f;
        match place {
            Place::Mapping { start, end, offset } => {
                self.mappings.entry(pid).or_default().push(Mapping {
                    start,
                    end,
                    offset,
                    path: path.clone(),
                });
            }
            Place::Exec { start_code } => {
                // A new program: the old address space is gone.
                let maps = self.mappings.entry(pid).or_default();
                maps.clear();
                let segments = elf::code_segments(&path).unwrap_or_default();
                // The kernel puts the lowest executable segment at start_code.
                if let Some(lowest) = segments.iter().map(|s| s.vaddr).min() {
                    let bias = start_code.wrapping_sub(lowest);
                    maps.extend(segments.iter().map(|s| Mapping {
                        start: s.vaddr.wrapping_add(bias),
                        end: s.vaddr.wrapping_add(bias).saturating_add(s.size),
                        offset: s.offset,
                        path: path.clone(),
                    }));
                }
            }
            Place::Unknown => {}
        }
        if !self.indexed.contains_key(&path) && self.mapped_seen.insert(path.clone()) {
            self.mapped.push(path);
        }
    }

    /// The file and file offset of `ip` in `pid`, by the mappings it was
    /// seen to make; the newest mapping wins where they overlap.
    fn place(&self, pid: u32, ip: u64) -> Option<(PathBuf, u64)> {
        let m = self
            .mappings
            .get(&pid)?
            .iter()
            .rev()
            .find(|m| m.start <= ip && ip < m.end)?;
        Some((m.path.clone(), ip - m.start + m.offset))
    }

    fn index_maps(&mut self, maps: &str) {
        for p in executable_files(maps) {
            if !self.indexed.contains_key(&p) {
                self.index_file(&p);
            }
        }
    }

    fn file_of(&mut self, pid: u32, build_id: &[u8]) -> Option<PathBuf> {
        if let Some(p) = self.by_build_id.get(build_id) {
            return Some(p.clone());
        }
        if self.searched.insert((pid, build_id.to_vec())) {
            self.index_process(pid);
            if let Some(p) = self.by_build_id.get(build_id) {
                return Some(p.clone());
            }
        }
        // Each mapped file is read once, only until the build id is found.
        while let Some(path) = self.mapped.pop() {
            if self.index_file(&path).as_deref() == Some(build_id) {
                break;
            }
        }
        self.by_build_id.get(build_id).cloned()
    }

    /// Names the frame at file `offset` of `path` (`back` bytes before it for a
    /// return address) into `out`, as `file+0xoffset` without a symbol.
    fn push_file_frame(&mut self, out: &mut Vec<String>, path: &Path, offset: u64, back: u64) {
        let src = Source::Elf(Elf::new(path));
        let sym = self
            .inner
            .symbolize_single(&src, Input::FileOffset(offset.saturating_sub(back)));
        let shown = self.shown.get(path).map_or(path, PathBuf::as_path);
        push_symbolized(
            out,
            sym.ok(),
            || module_offset(shown, offset),
            &mut self.unsymbolized_frames,
        );
    }

    /// The frame names of a stack, root first. Frames of hidden files are
    /// dropped; a frame without a symbol prints as `file+0xoffset`.
    pub fn frames(&mut self, stack: &Stack) -> Vec<String> {
        let mut out = Vec::with_capacity(stack.frames.len());
        for (depth, frame) in stack.frames.iter().enumerate() {
            // Callers' frames hold return addresses, which can point past the
            // end of the calling function; look up the call instruction.
            let back = u64::from(depth > 0);
            match frame {
                Frame::BuildId { build_id, offset } => {
                    if self.hidden.contains(build_id) {
                        continue;
                    }
                    let Some(path) = self.file_of(stack.pid, build_id) else {
                        self.unknown_files += 1;
                        self.unsymbolized_frames += 1;
                        out.push(format!("[build-id {}]+{offset:#x}", hex(&build_id[..8])));
                        continue;
                    };
                    self.push_file_frame(&mut out, &path, *offset, back);
                }
                Frame::Ip(ip) => {
                    if let Some((path, offset)) = self.place(stack.pid, *ip) {
                        if self
                            .index_file(&path)
                            .is_some_and(|id| self.hidden.contains(&id))
                        {
                            continue;
                        }
                        self.push_file_frame(&mut out, &path, offset, back);
                        continue;
                    }
                    let mut process = Process::new(Pid::from(stack.pid));
                    process.map_files = false;
                    let src = Source::Process(process);
                    let sym = self
                        .inner
                        .symbolize_single(&src, Input::AbsAddr(ip.saturating_sub(back)));
                    push_symbolized(
                        &mut out,
                        sym.ok(),
                        || format!("{ip:#x}"),
                        &mut self.unsymbolized_frames,
                    );
                }
            }
        }
        out.reverse();
        out
    }
}

impl Symbolizer {
    /// Names addresses of one module for stacks taken in process: `offsets` are
    /// ELF virtual addresses in the file (return addresses already moved back
    /// into their call). The file is `path` when its build id is `build_id`, else
    /// any known file with that build id. Each result lists the function and the
    /// functions inlined at the address, innermost first; an empty list means no
    /// symbol (counted in [`Symbolizer::unsymbolized_frames`]).
    pub fn module_frames(
        &mut self,
        pid: u32,
        path: &Path,
        build_id: &[u8],
        offsets: &[u64],
    ) -> Vec<Vec<String>> {
        let file = match self.index_file(path) {
            Some(id) if build_id.is_empty() || id == build_id => Some(path.to_owned()),
            None if build_id.is_empty() && path.is_file() => Some(path.to_owned()),
            _ if !build_id.is_empty() => self.file_of(pid, build_id),
            _ => None,
        };
        let Some(file) = file else {
            self.unknown_files += 1;
            self.unsymbolized_frames += offsets.len() as u64;
            return vec![Vec::new(); offsets.len()];
        };
        let src = Source::Elf(Elf::new(&file));
        let syms = self
            .inner
            .symbolize(&src, Input::VirtOffset(offsets))
            .unwrap_or_default();
        let mut out = Vec::with_capacity(offsets.len());
        for i in 0..offsets.len() {
            let mut names = Vec::new();
            push_symbolized(
                &mut names,
                syms.get(i).cloned(),
                String::new,
                &mut self.unsymbolized_frames,
            );
            names.retain(|n| !n.is_empty());
            out.push(names);
        }
        out
    }
}

/// Appends one frame (and the functions inlined at it, innermost last) to a
/// leaf-first list.
fn push_symbolized(
    out: &mut Vec<String>,
    sym: Option<Symbolized<'_>>,
    fallback: impl FnOnce() -> String,
    unsymbolized: &mut u64,
) {
    match sym {
        Some(Symbolized::Sym(s)) => {
            for inlined in s.inlined.iter().rev() {
                out.push(inlined.name.to_string());
            }
            out.push(s.name.to_string());
        }
        _ => {
            *unsymbolized += 1;
            out.push(fallback());
        }
    }
}

/// The files mapped executable in a `/proc/PID/maps` file, each once, in
/// address order; empty when it cannot be read (the process is gone).
pub(crate) fn executable_files(maps: &str) -> Vec<PathBuf> {
    let Ok(text) = fs::read_to_string(maps) else {
        return Vec::new();
    };
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for line in text.lines() {
        // addr perms offset dev inode path
        let mut f = line.split_ascii_whitespace();
        let perms = f.nth(1).unwrap_or("");
        let path = f.nth(3).unwrap_or("");
        if perms.contains('x')
            && path.starts_with('/')
            && !path.ends_with("(deleted)")
            && seen.insert(path)
        {
            out.push(PathBuf::from(path));
        }
    }
    out
}

fn module_offset(path: &Path, offset: u64) -> String {
    let name = path
        .file_name()
        .unwrap_or(path.as_os_str())
        .to_string_lossy();
    format!("{name}+{offset:#x}")
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A function of this test binary, found by its address.
    #[inline(never)]
    #[unsafe(no_mangle)]
    extern "C" fn gpuperf_symbolize_test_target() -> u64 {
        std::hint::black_box(7)
    }

    /// Above any pid_max: a process that is gone, whose maps cannot be read.
    const GONE: u32 = u32::MAX - 1;

    fn target_ip() -> u64 {
        gpuperf_symbolize_test_target as *const () as u64
    }

    fn stack() -> Stack {
        Stack {
            stack_id: 1,
            pid: GONE,
            frames: vec![Frame::Ip(target_ip())],
        }
    }

    /// The mapping of this process that holds `ip`: start, end, offset, path.
    fn own_mapping(ip: u64) -> (u64, u64, u64, PathBuf) {
        let maps = fs::read_to_string("/proc/self/maps").unwrap();
        for line in maps.lines() {
            let f: Vec<&str> = line.split_ascii_whitespace().collect();
            let (range, offset, path) = (f[0], f[2], f.get(5).copied().unwrap_or(""));
            let (start, end) = range.split_once('-').unwrap();
            let start = u64::from_str_radix(start, 16).unwrap();
            let end = u64::from_str_radix(end, 16).unwrap();
            if start <= ip && ip < end {
                let offset = u64::from_str_radix(offset, 16).unwrap();
                return (start, end, offset, PathBuf::from(path));
            }
        }
        panic!("{ip:#x} is in no mapping");
    }

    #[test]
    fn raw_address_frames_of_an_exited_process_are_named_by_its_mappings() {
        let mut s = Symbolizer::new();
        let ip = target_ip();
        assert_eq!(s.frames(&stack()), vec![format!("{ip:#x}")], "unknown");
        let (start, end, offset, path) = own_mapping(ip);
        s.mapped(FileMapped {
            pid: GONE,
            path,
            place: Place::Mapping { start, end, offset },
            identity: Default::default(),
        });
        assert_eq!(s.frames(&stack()), vec!["gpuperf_symbolize_test_target"]);
        assert_eq!(s.unsymbolized_frames, 1, "only the first try");
    }

    #[test]
    fn the_executable_is_placed_by_its_start_code() {
        // /proc/self/stat: field 26 is startcode; fields after the `(comm)`
        // start at field 3.
        let stat = fs::read_to_string("/proc/self/stat").unwrap();
        let after_comm = &stat[stat.rfind(')').unwrap() + 1..];
        let start_code: u64 = after_comm
            .split_ascii_whitespace()
            .nth(26 - 3)
            .unwrap()
            .parse()
            .unwrap();
        let mut s = Symbolizer::new();
        s.mapped(FileMapped {
            pid: GONE,
            path: std::env::current_exe().unwrap(),
            place: Place::Exec { start_code },
            identity: Default::default(),
        });
        assert_eq!(s.frames(&stack()), vec!["gpuperf_symbolize_test_target"]);
        // A new program in the same process forgets the old one's places.
        s.mapped(FileMapped {
            pid: GONE,
            path: std::env::current_exe().unwrap(),
            place: Place::Exec {
                start_code: 1 << 40,
            },
            identity: Default::default(),
        });
        assert_eq!(s.frames(&stack()), vec![format!("{:#x}", target_ip())]);
    }
}
