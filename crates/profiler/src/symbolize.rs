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
//! is not known otherwise, and at most once. Raw-address frames (anonymous
//! memory, such as JIT code with a perf map) are resolved through the live
//! process.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::path::{Path, PathBuf};

use blazesym::Pid;
use blazesym::helper::read_elf_build_id;
use blazesym::symbolize::source::{Elf, Process, Source};
use blazesym::symbolize::{Input, Symbolized};

use crate::event::{Frame, Stack};

/// Frame-name resolver with a build-id → file index.
pub struct Symbolizer {
    inner: blazesym::symbolize::Symbolizer,
    by_build_id: HashMap<Vec<u8>, PathBuf>,
    indexed: HashSet<PathBuf>,
    /// (pid, build id) pairs already looked for in that pid's maps.
    searched: HashSet<(u32, Vec<u8>)>,
    /// Files traced processes mapped, not yet read for their build id.
    mapped: Vec<PathBuf>,
    /// Every path ever put in `mapped`.
    mapped_seen: HashSet<PathBuf>,
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
            indexed: HashSet::new(),
            searched: HashSet::new(),
            mapped: Vec::new(),
            mapped_seen: HashSet::new(),
            hidden: HashSet::new(),
            unsymbolized_frames: 0,
            unknown_files: 0,
        };
        s.index_maps("/proc/self/maps");
        s
    }

    /// Learns the build id of `path`. Returns it, if the file has one.
    pub fn index_file(&mut self, path: &Path) -> Option<Vec<u8>> {
        let id = read_elf_build_id(path).ok().flatten()?.into_owned();
        if self.indexed.insert(path.to_owned()) {
            self.by_build_id
                .entry(id.clone())
                .or_insert_with(|| path.to_owned());
        }
        Some(id)
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

    /// A traced process exec'd or mapped `path` as code: frames in it may
    /// come when the process is gone.
    pub fn mapped(&mut self, path: PathBuf) {
        if !self.indexed.contains(&path) && self.mapped_seen.insert(path.clone()) {
            self.mapped.push(path);
        }
    }

    fn index_maps(&mut self, maps: &str) {
        for p in executable_files(maps) {
            if !self.indexed.contains(&p) {
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
                    let src = Source::Elf(Elf::new(&path));
                    let sym = self
                        .inner
                        .symbolize_single(&src, Input::FileOffset(offset.saturating_sub(back)));
                    push_symbolized(
                        &mut out,
                        sym.ok(),
                        || module_offset(&path, *offset),
                        &mut self.unsymbolized_frames,
                    );
                }
                Frame::Ip(ip) => {
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
