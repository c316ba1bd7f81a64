//! Attaching the uprobes: the launch marker, the CUDA API's entry points in the
//! files given or discovered in a process's mappings.

use std::collections::HashSet;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use libbpf_rs::{Link, UprobeOpts};

use super::{MARKER_SYMBOL, SEMAPHORE_SYMBOL};
use crate::elf::{self, ProbePoint};
use crate::error::{Error, Result, bpf};
use crate::skel::LaunchSkel;

/// Cookie bit telling the entry program to write the record itself.
pub(super) const COOKIE_EMIT: u64 = 1 << 63;
/// Cookie bit: the probed instruction is one at which the kernel's stack walk
/// reads the caller's return address at `[sp]`; the BPF walk does the same,
/// so its frames match those the kernel sends.
const COOKIE_CALLER_AT_SP: u64 = 1 << 62;

/// The cookie bits that a probe on `first` needs.
pub(super) fn walk_cookie(first: elf::FirstInsn) -> u64 {
    match first {
        elf::FirstInsn::PushRbp | elf::FirstInsn::Endbr64 => COOKIE_CALLER_AT_SP,
        elf::FirstInsn::Nop5 | elf::FirstInsn::Other => 0,
    }
}

/// The probes attached so far, and what attaching skipped.
pub(super) struct Attach<'a, 'obj> {
    pub(super) skel: &'a LaunchSkel<'obj>,
    pub(super) links: Vec<Link>,
    /// Probed places: (file, offset in it).
    pub(super) attached: HashSet<(FileKey, u64)>,
    pub(super) examined: HashSet<FileKey>,
    pub(super) slow: Vec<String>,
    pub(super) api_files: Vec<PathBuf>,
}

impl Attach<'_, '_> {
    pub(super) fn marker(&mut self, lib: &Path) -> Result<()> {
        let point = elf::function(lib, MARKER_SYMBOL)?;
        let semaphore = elf::symbol_offset(lib, SEMAPHORE_SYMBOL)?;
        if elf::segments_mapping(lib, semaphore)? > 1 {
            return Err(Error::Probe {
                path: lib.to_owned(),
                message: format!(
                    "{SEMAPHORE_SYMBOL} shares a file page between two segments, so the kernel \
                     cannot count in it and the marker would never fire; rebuild gpuperf-inject"
                ),
            });
        }
        let opts = UprobeOpts {
            ref_ctr_offset: semaphore as usize,
            cookie: walk_cookie(point.first),
            ..Default::default()
        };
        let link = self
            .skel
            .progs
            .launch_marker
            .attach_uprobe_with_opts(-1, lib, point.file_offset as usize, opts)
            .map_err(bpf(format!(
                "attaching to {MARKER_SYMBOL} in {}",
                lib.display()
            )))?;
        self.links.push(link);
        Ok(())
    }

    /// Entry probes on every CUDA API function `file` defines; a file defining
    /// none is fine (the discovery path offers every mapped file).
    pub(super) fn api_file(&mut self, file: &Path) -> Result<usize> {
        self.api_file_named(file, file)
    }

    /// [`Attach::api_file`] of a file that a process names `shown`.
    fn api_file_named(&mut self, file: &Path, shown: &Path) -> Result<usize> {
        if !self.examined.insert(FileKey::of(file)) {
            return Ok(0);
        }
        let points = elf::api_functions(file)?;
        let mut n = 0;
        for p in &points {
            if self.entry(p, 0)? {
                n += 1;
            }
        }
        if n > 0 {
            self.api_files.push(shown.to_owned());
        }
        Ok(n)
    }

    /// Attaches the entry program; skips a function whose probe would
    /// single-step (about 10 µs a call) unless the user named it.
    pub(super) fn entry(&mut self, p: &ProbePoint, cookie: u64) -> Result<bool> {
        if cookie & COOKIE_EMIT == 0 && !p.first.is_fast() {
            self.slow.push(format!("{}:{}", p.path.display(), p.symbol));
            return Ok(false);
        }
        if !self.attached.insert((FileKey::of(&p.path), p.file_offset)) {
            return Ok(false);
        }
        let opts = UprobeOpts {
            cookie: cookie | walk_cookie(p.first),
            ..Default::default()
        };
        let link = self
            .skel
            .progs
            .launch_entry
            .attach_uprobe_with_opts(-1, &p.path, p.file_offset as usize, opts)
            .map_err(bpf(format!(
                "attaching to {} in {}",
                p.symbol,
                p.path.display()
            )))?;
        self.links.push(link);
        Ok(true)
    }

    /// Entry probes for the CUDA libraries `pid` maps (libcudart, libcuda, or
    /// an executable with cudart linked in). Each is probed through the
    /// file it maps: `/proc/PID/map_files` (which needs `CAP_SYS_ADMIN`),
    /// else its path here or under `/proc/PID/root` if that file has the
    /// mapping's inode number. Its path alone may name another file here, or
    /// none: the path `/proc/PID/maps` shows a file of another mount
    /// namespace (a container) by is the one it has there.
    pub(super) fn discover(&mut self, pid: u32) {
        let exe_link = fs::read_link(format!("/proc/{pid}/exe")).ok();
        let exe_ino = fs::metadata(format!("/proc/{pid}/exe"))
            .ok()
            .map(|m| m.ino());
        let root = PathBuf::from(format!("/proc/{pid}/root"));
        let Ok(maps) = fs::read_to_string(format!("/proc/{pid}/maps")) else {
            return;
        };
        let mut seen = HashSet::new();
        for m in maps.lines().filter_map(MapsLine::parse) {
            if !seen.insert(m.path) {
                continue;
            }
            let path = Path::new(m.path);
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            // Only libraries that can define the API, and the executable.
            let candidate = name.starts_with("libcudart")
                || name.starts_with("libcuda.")
                || exe_link.as_deref() == Some(path)
                || exe_ino == Some(m.ino);
            if !candidate {
                continue;
            }
            let own = PathBuf::from(format!("/proc/{pid}/map_files/{}", m.range));
            let file = [
                own,
                path.to_owned(),
                root.join(path.strip_prefix("/").unwrap_or(path)),
            ]
            .into_iter()
            .find(|p| fs::metadata(p).is_ok_and(|x| x.ino() == m.ino));
            if let Some(file) = file {
                let _ = self.api_file_named(&file, path);
            }
        }
    }
}

/// An executable file mapping of a `/proc/PID/maps` line.
struct MapsLine<'a> {
    /// `START-END`, as `/proc/PID/map_files` names it.
    range: &'a str,
    /// The inode number of the mapped file.
    ino: u64,
    path: &'a str,
}

impl<'a> MapsLine<'a> {
    fn parse(line: &'a str) -> Option<Self> {
        // addr perms offset dev inode path
        let mut f = line.split_ascii_whitespace();
        let range = f.next()?;
        let perms = f.next()?;
        let ino = f.nth(2)?.parse().ok()?;
        let path = f.next()?;
        (perms.contains('x') && path.starts_with('/') && f.next().is_none()).then_some(Self {
            range,
            ino,
            path,
        })
    }
}

/// A file as probes see it: its device and inode (the same file by any
/// path, another file at the same path in another mount namespace), or its
/// path when it cannot be read (attaching then fails with the reason).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) enum FileKey {
    Inode(u64, u64),
    Path(PathBuf),
}

impl FileKey {
    pub(super) fn of(path: &Path) -> Self {
        match fs::metadata(path) {
            Ok(m) => Self::Inode(m.dev(), m.ino()),
            Err(_) => Self::Path(path.to_owned()),
        }
    }
}
