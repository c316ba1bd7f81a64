//! Complete stacks without frame pointers. When no recipe matches a launch, the
//! BPF program sends the top of its stack with the registers; this module
//! unwinds the copy with `.eh_frame` ([`gpuperf_unwind::RemoteUnwinder`]) over the
//! process's module table, and answers with a *recipe*: the stack words that the
//! result depended on. BPF stores it keyed by (process, ip, sp); a later launch
//! from there whose words still hold those values has the same stack, which BPF
//! then names by id without a copy. So a hot call site costs one copy, not one
//! per launch.
//!
//! # Why a recipe never attaches a wrong stack
//! The unwind is a pure function of the registers (ip, sp, bp), the module table
//! and the words it reads, and it reads them at addresses that follow from the
//! registers and earlier words. The key fixes ip and sp; if every word read whose
//! value mattered is unchanged (and bp, if it mattered), the same addresses are
//! read in the same order and the same stack comes out. A word "mattered" unless
//! the unwind is provably independent of it: the module is run again with the
//! word replaced by each of two small poison values, which fail any read based on
//! them and any frame-pointer sanity check; if both runs read the same addresses
//! and give the same frames (and did not fail), the value was never used as an
//! address, a return address or a frame pointer. Words holding a return address
//! of the result are always checked. (Callee-saved registers that the unwind
//! restores but never uses, such as loop counters, are what this leaves out, so
//! that a call in a loop still matches.)
//!
//! Words the BPF frame-pointer walk read are not checked again when the walk
//! gave the same frame-pointer stack (its return addresses, compared whole)
//! through the same places relative to sp: its saved frame pointers are
//! compared by a 64-bit hash of that chain, so two chains would have to collide
//! in it, at the same sp with the same return addresses.
//!
//! When it can be wrong: the module table is not part of the key, so a library
//! unmapped and another mapped at the same address between the copy and a later
//! launch is not noticed until its mapping event arrives (recipes of a process are
//! dropped on each new mapping and on exec). A read of the map racing with user
//! space replacing the same recipe is caught by sequence numbers at both ends of
//! the value.
//!
//! When a copy cannot be unwound to a root frame and the frame-pointer walk found
//! more frames, the frame-pointer stack is kept instead (and the recipe then also
//! requires that frame-pointer stack). Either way the stack is counted truncated.
//!
//! A launch in a signal handler is unwound through the signal frame: the
//! copy starts at the handler's stack pointer, and above the handler's frames
//! it holds the kernel's `rt_sigframe`, whose `ucontext_t` has the
//! interrupted code's registers. Where the copy ends before them, or the
//! handler ran on an alternate signal stack (the interrupted code's stack is
//! then not in the copy), the stack stops there and is counted
//! ([`Counts::signal_cut`]).

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use gpuperf_unwind::{
    Frame as UFrame, Mapping, Regs, RemoteUnwinder, StackCopy, StackEnd, UnwindCache, parse_maps,
};

use crate::elf;
use crate::event::{
    Copy, FULL_ID_BASE, FileIdentity, FileMapped, Frame, INLINE_STACK_ID_BASE, Place, Stack,
};

/// Frames kept of an unwound stack (as many as the kernel's walk keeps).
const MAX_FRAMES: usize = crate::event::MAX_STACK_DEPTH;
/// `MAX_CHECKS` in launch.h: words a recipe can check.
pub(crate) const MAX_CHECKS: usize = 128;
/// `enum recipe_flags`.
const RECIPE_BP: u32 = 1;
const RECIPE_LEN: u32 = 2;
/// Values that fail any read based on them (no user page is mapped that low) and
/// the frame-pointer rule's "the caller's frame is above" check.
const POISON: [u64; 2] = [0x18, 0x30];
/// How often a module table read from `/proc/PID/maps` may be read again when a
/// stack runs into code it does not know (a library loaded since).
const PROC_REFRESH: Duration = Duration::from_millis(100);

/// Files held open beyond which a file found is used by the path it was
/// found at (for a process's own view, valid only while the process lives).
const MAX_HELD_FILES: usize = 512;

/// The files traced processes map, found as each process sees them and held
/// open, so that the unwinder and the symbolizer read the very file a
/// process mapped even when this process sees another file (or none) at its
/// path: a process in another mount namespace (a container) or a chroot, a
/// library replaced since.
///
/// A file is looked for when its mapping is reported, while the process
/// most likely lives, in this order: `/proc/PID/map_files/START-END`, the
/// mapping itself (`/proc/PID/exe` for the executable); the path under
/// `/proc/PID/root`, the process's root in its own mount namespace; the path
/// from here (under the process's root as seen from here, when that is
/// another directory). The first whose inode number and size are those the
/// kernel reported for the mapped file is held open and named by
/// `/proc/self/fd/N`, which keeps working after the process exits (the
/// table is often built later, at its first stack copy, and symbolization
/// can be deferred to the end). A mapping that has changed since (the
/// process unmapped it or exec'd, a race the event cannot prevent) or a path
/// naming another file fails the identity check: nothing is read then, and
/// the reason is reported. The device is not compared: btrfs subvolumes and
/// overlayfs report another device to `stat` than the one the kernel's
/// inode has.
#[derive(Default)]
pub(crate) struct ModuleFiles {
    /// Open files by (device, inode) as seen from here, with the path that
    /// names each.
    held: HashMap<(u64, u64), (File, PathBuf)>,
    /// For each path that names a held file, the path the process mapped it
    /// by, for messages.
    names: HashMap<PathBuf, PathBuf>,
}

impl ModuleFiles {
    /// A path from which this process reads the file `f` reports, or why
    /// there is none. `our_root` is the process's root as seen from here
    /// when that is another directory than ours.
    pub fn find(&mut self, f: &FileMapped, our_root: Option<&Path>) -> Result<PathBuf, String> {
        let mut why = None;
        let mut mismatch = None;
        for path in candidates(f, our_root) {
            let found = File::open(&path).and_then(|file| Ok((file.metadata()?, file)));
            let (meta, file) = match found {
                Ok(x) => x,
                Err(e) => {
                    why.get_or_insert_with(|| e.to_string());
                    continue;
                }
            };
            let seen = FileIdentity {
                ino: meta.ino(),
                size: meta.len(),
            };
            if seen != f.identity {
                mismatch = Some((path, seen));
                continue;
            }
            let key = (meta.dev(), meta.ino());
            if let Some((_, here)) = self.held.get(&key) {
                return Ok(here.clone());
            }
            if self.held.len() >= MAX_HELD_FILES {
                return Ok(path);
            }
            let here = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
            self.names.insert(here.clone(), f.path.clone());
            self.held.insert(key, (file, here.clone()));
            return Ok(here);
        }
        let what = format!("failed to read `{}` of pid {}", f.path.display(), f.pid);
        Err(match mismatch {
            Some((path, seen)) => format!(
                "{what}: `{}` is another file (inode {}, {} bytes) than the one mapped (inode {}, \
                 {} bytes)",
                path.display(),
                seen.ino,
                seen.size,
                f.identity.ino,
                f.identity.size
            ),
            None => format!(
                "{what}: {}",
                why.unwrap_or_else(|| "no place to look".into())
            ),
        })
    }

    /// `line` with each path that names a held file replaced by the path it
    /// was mapped by.
    pub fn describe(&self, line: &str) -> String {
        let mut line = line.to_owned();
        for (here, name) in &self.names {
            let (here, name) = (here.to_string_lossy(), name.to_string_lossy());
            if line.contains(&*here) {
                line = line.replace(&format!("`{here}`"), &format!("`{name}`"));
            }
        }
        line
    }
}

/// Where the file of `f` may be found, most exact first: see [`ModuleFiles`].
fn candidates(f: &FileMapped, our_root: Option<&Path>) -> Vec<PathBuf> {
    let pid = f.pid;
    let relative = f.path.strip_prefix("/").unwrap_or(&f.path);
    let mut out = Vec::with_capacity(3);
    match f.place {
        Place::Mapping { start, end, .. } => {
            // The entry is named by the mapping's range, whose end is the
            // mmap's length rounded up to a page; where that is not 4 KiB
            // (or the mapping was split since), it is found by its start.
            let dir = PathBuf::from(format!("/proc/{pid}/map_files"));
            let direct = dir.join(format!("{start:x}-{:x}", end.next_multiple_of(4096)));
            if direct.symlink_metadata().is_ok() {
                out.push(direct);
            } else if let Ok(entries) = std::fs::read_dir(&dir) {
                let prefix = format!("{start:x}-");
                out.extend(
                    entries
                        .flatten()
                        .find(|e| e.file_name().to_string_lossy().starts_with(&prefix))
                        .map(|e| e.path()),
                );
            }
        }
        Place::Exec { .. } => out.push(PathBuf::from(format!("/proc/{pid}/exe"))),
        Place::Unknown => {}
    }
    out.push(PathBuf::from(format!("/proc/{pid}/root")).join(relative));
    out.push(our_root.map_or_else(|| f.path.clone(), |r| r.join(relative)));
    out
}

/// Where a recipe applies: `struct recipe_key`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct RecipeKey {
    pub tgid: u32,
    pub ip: u64,
    pub sp: u64,
}

impl RecipeKey {
    /// The key as the BPF map stores it.
    pub fn to_bytes(self) -> Vec<u8> {
        let mut b = Vec::with_capacity(24);
        b.extend(self.tgid.to_ne_bytes());
        b.extend(0u32.to_ne_bytes());
        b.extend(self.ip.to_ne_bytes());
        b.extend(self.sp.to_ne_bytes());
        b
    }
}

/// What an unwind depended on, and its result: `struct recipe`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Recipe {
    /// The stack a launch that matches gets.
    pub stack_id: i32,
    /// The frame-pointer stack a launch must have, or -1.
    pub fp_id: i32,
    pub flags: u32,
    /// The initial frame pointer (with [`RECIPE_BP`]).
    pub bp: u64,
    /// The copy's length (with [`RECIPE_LEN`]).
    pub len: u32,
    /// (offset from sp, value): words the frame-pointer walk did not read,
    /// by offset, then those it read, by offset.
    pub checks: Vec<(u32, u64)>,
    /// How many checks the walk did not read.
    pub uncovered: u32,
    /// The walk that read the other checks' words: its frame-pointer stack
    /// (-1: none) and where it went.
    pub walk_fp_id: i32,
    pub walk_hash: u64,
}

impl Recipe {
    /// Whether a copy taken at this recipe's key has the recipe's stack.
    fn holds(&self, c: &Copy) -> bool {
        let stack = StackCopy {
            start: c.sp,
            bytes: &c.bytes,
        };
        (self.fp_id < 0 || self.fp_id == c.fp_id)
            && (self.flags & RECIPE_BP == 0 || self.bp == c.bp)
            && (self.flags & RECIPE_LEN == 0 || self.len as usize == c.bytes.len())
            && self
                .checks
                .iter()
                .all(|&(off, v)| stack.read(c.sp + u64::from(off)) == Some(v))
    }

    /// The value as the BPF map stores it; `seq` is written at both ends.
    pub fn to_bytes(&self, seq: u64) -> Vec<u8> {
        let mut b = Vec::with_capacity(RECIPE_SIZE);
        b.extend(seq.to_ne_bytes());
        b.extend(self.stack_id.to_ne_bytes());
        b.extend(self.fp_id.to_ne_bytes());
        b.extend((self.checks.len() as u32).to_ne_bytes());
        b.extend(self.flags.to_ne_bytes());
        b.extend(self.bp.to_ne_bytes());
        b.extend(self.len.to_ne_bytes());
        b.extend(self.uncovered.to_ne_bytes());
        b.extend(self.walk_fp_id.to_ne_bytes());
        b.extend(0u32.to_ne_bytes());
        b.extend(self.walk_hash.to_ne_bytes());
        for i in 0..MAX_CHECKS {
            let (off, v) = self.checks.get(i).copied().unwrap_or_default();
            b.extend(off.to_ne_bytes());
            b.extend(0u32.to_ne_bytes());
            b.extend(v.to_ne_bytes());
        }
        b.extend(seq.to_ne_bytes());
        b
    }
}

/// `sizeof(struct recipe)`.
pub(crate) const RECIPE_SIZE: usize = 56 + MAX_CHECKS * 16 + 8;

/// What became of a copy.
#[derive(Debug)]
pub(crate) struct Resolved {
    /// The stack the launch gets: one unwound here, or its frame-pointer stack.
    pub stack_id: i32,
    /// A stack unwound for the first time: its frames, leaf first, and whether
    /// it reaches a root frame.
    pub new_stack: Option<(Stack, bool)>,
    /// The recipe to store in BPF, unless the result cannot be cached (more
    /// words to check than a recipe holds).
    pub recipe: Option<(RecipeKey, Recipe)>,
    /// The stack passed a signal frame and ends there for want of stack
    /// (see [`Counts::signal_cut`]).
    pub signal_cut: bool,
}

/// Counts for the summary.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    /// Copies unwound.
    pub unwound: u64,
    /// Copies whose stack a known recipe gave (sent before BPF had it).
    pub reused: u64,
    /// Results that depend on more words than a recipe holds: each launch
    /// there sends a copy.
    pub uncacheable: u64,
    /// Copies of processes whose modules could not be read.
    pub no_modules: u64,
    /// Copies unwound through a signal frame (a launch in a signal handler)
    /// that end at it: the copy holds neither the interrupted code's
    /// registers nor its stack.
    pub signal_cut: u64,
}

/// One process's modules.
#[derive(Default)]
struct Process {
    /// Code mappings seen (BPF file events), oldest first.
    recorded: Vec<Mapping>,
    /// The table and the mappings it was built from.
    table: Option<(RemoteUnwinder, Vec<Mapping>)>,
    /// Why the file of a recorded mapping (by its start) or of the
    /// executable (`None`) was not found: reported once a table is built
    /// that needs it, so the files of a program replaced by its exec before
    /// they were looked for (a shell that execs) are not.
    unfound: HashMap<Option<u64>, String>,
    /// `recorded` changed since the table was built.
    dirty: bool,
    /// When the table was read from `/proc/PID/maps` (no recorded mappings).
    from_proc: Option<Instant>,
    /// Recipes made for it.
    recipes: Vec<RecipeKey>,
}

/// Unwinds copies and keeps what BPF's recipes point at.
pub(crate) struct Unwinding {
    processes: HashMap<u32, Process>,
    recipes: HashMap<RecipeKey, Recipe>,
    /// Unwound stacks by (pid, frames, complete), deduplicated.
    stacks: HashMap<(u32, Vec<Frame>, bool), i32>,
    next_id: i32,
    cache: UnwindCache,
    out: Vec<UFrame>,
    pub counts: Counts,
    /// Module files that could not be read, each once with why: stacks
    /// through their code stop there.
    pub unreadable: Vec<String>,
    /// Where the module files are read from.
    pub files: ModuleFiles,
}

/// One unwind of a copy.
struct Run {
    /// Addresses read, in order, and whether the read succeeded.
    reads: Vec<(u64, Option<u64>)>,
    frames: Vec<UFrame>,
    end: StackEnd,
}

impl Run {
    /// Same addresses read, same frames, and no failure that a poison could
    /// have caused.
    fn same_as(&self, other: &Run) -> bool {
        self.end == other.end
            && self.end != StackEnd::UnwindFailed
            && self.frames == other.frames
            && self.reads.len() == other.reads.len()
            && self
                .reads
                .iter()
                .zip(&other.reads)
                .all(|(a, b)| a.0 == b.0 && a.1.is_some() == b.1.is_some())
    }
}

impl Default for Unwinding {
    fn default() -> Self {
        Self {
            processes: HashMap::new(),
            recipes: HashMap::new(),
            stacks: HashMap::new(),
            next_id: FULL_ID_BASE,
            cache: UnwindCache::new(),
            out: vec![UFrame::default(); MAX_FRAMES],
            counts: Counts::default(),
            unreadable: Vec::new(),
            files: ModuleFiles::default(),
        }
    }
}

impl Unwinding {
    /// A traced process mapped or exec'd a file as code, which is read from
    /// `file` (see [`ModuleFiles::find`]); `Err` says why it cannot be, and
    /// the code there is then known to have no unwind information. Returns
    /// the recipes of that process that no longer hold (its modules
    /// changed).
    pub fn mapped(&mut self, f: &FileMapped, file: Result<&Path, String>) -> Vec<RecipeKey> {
        let p = self.processes.entry(f.pid).or_default();
        if let Place::Exec { .. } = f.place {
            p.unfound.clear();
        }
        let file = match file {
            Ok(file) => file.to_owned(),
            Err(why) => {
                let at = match f.place {
                    Place::Mapping { start, .. } => Some(start),
                    _ => None,
                };
                p.unfound.insert(at, why);
                // An empty path: it hides older mappings there, and is not read.
                PathBuf::new()
            }
        };
        match f.place {
            Place::Mapping { start, end, offset } => p.recorded.push(Mapping {
                avma: start..end,
                file_offset: offset,
                path: file,
            }),
            Place::Exec { start_code } => {
                p.recorded.clear();
                let segments = if file.as_os_str().is_empty() {
                    Vec::new()
                } else {
                    elf::code_segments(&file).unwrap_or_default()
                };
                if let Some(lowest) = segments.iter().map(|s| s.vaddr).min() {
                    let bias = start_code.wrapping_sub(lowest);
                    p.recorded.extend(segments.iter().map(|s| {
                        let start = s.vaddr.wrapping_add(bias);
                        Mapping {
                            avma: start..start.saturating_add(s.size),
                            file_offset: s.offset,
                            path: file.clone(),
                        }
                    }));
                }
            }
            Place::Unknown => return Vec::new(),
        }
        p.dirty = true;
        let keys = std::mem::take(&mut p.recipes);
        for k in &keys {
            self.recipes.remove(k);
        }
        keys
    }

    /// Unwinds a copy, or finds its stack by a recipe made from an earlier one.
    /// `fp_frames` is the number of frames of the copy's frame-pointer stack,
    /// when known.
    pub fn resolve(&mut self, c: &Copy, fp_frames: Option<usize>) -> Resolved {
        let key = RecipeKey {
            tgid: c.pid,
            ip: c.ip,
            sp: c.sp,
        };
        if let Some(r) = self.recipes.get(&key)
            && r.holds(c)
        {
            self.counts.reused += 1;
            return Resolved {
                stack_id: r.stack_id,
                new_stack: None,
                recipe: None,
                signal_cut: false,
            };
        }
        let fp_usable = (0..INLINE_STACK_ID_BASE).contains(&c.fp_id);
        if !self.ensure_table(c.pid) {
            self.counts.no_modules += 1;
            return Resolved {
                stack_id: c.fp_id,
                new_stack: None,
                recipe: None,
                signal_cut: false,
            };
        }
        let mut base = self.run(c, c.bp, &HashMap::new());
        // A library loaded since a table read from /proc: read it again.
        if base.end == StackEnd::NoUnwindInfo && self.refresh_proc_table(c.pid) {
            base = self.run(c, c.bp, &HashMap::new());
        }
        self.counts.unwound += 1;
        let signal_cut = self.cut_at_signal_frame(c.pid, &base);
        if signal_cut {
            self.counts.signal_cut += 1;
        }
        let complete = base.end == StackEnd::Root;
        let (recipe_checks, flags) = self.dependencies(c, &base);

        // Keep the frame-pointer stack when the unwind is cut short earlier.
        let keep_fp = !complete && fp_usable && fp_frames.is_some_and(|n| n > base.frames.len());
        let (stack_id, new_stack) = if keep_fp {
            (c.fp_id, None)
        } else {
            let frames = self.frames(c.pid, &base.frames);
            let dedupe = (c.pid, frames, complete);
            match self.stacks.get(&dedupe) {
                Some(&id) => (id, None),
                None => {
                    let id = self.next_id;
                    // Past the range, ids wrap within it; a stack that old is
                    // long written.
                    self.next_id = if id + 1 >= INLINE_STACK_ID_BASE {
                        FULL_ID_BASE
                    } else {
                        id + 1
                    };
                    let stack = Stack {
                        stack_id: id,
                        pid: c.pid,
                        frames: dedupe.1.clone(),
                    };
                    self.stacks.insert(dedupe, id);
                    (id, Some((stack, complete)))
                }
            }
        };
        let recipe = match recipe_checks {
            Some(checks) => {
                // Words the frame-pointer walk read need no second look when
                // it took the same way.
                let walked = walk_words(c);
                let (mut checks, covered): (Vec<_>, Vec<_>) =
                    checks.into_iter().partition(|(off, _)| {
                        walked
                            .as_ref()
                            .is_none_or(|w| !w.contains(&(c.sp + u64::from(*off))))
                    });
                let uncovered = checks.len() as u32;
                checks.extend(covered);
                let r = Recipe {
                    stack_id,
                    fp_id: if keep_fp { c.fp_id } else { -1 },
                    flags,
                    bp: c.bp,
                    len: c.bytes.len() as u32,
                    checks,
                    uncovered,
                    walk_fp_id: if walked.is_some() { c.fp_id } else { -1 },
                    walk_hash: c.walk_hash,
                };
                self.recipes.insert(key, r.clone());
                let p = self.processes.entry(c.pid).or_default();
                p.recipes.push(key);
                Some((key, r))
            }
            None => {
                self.counts.uncacheable += 1;
                None
            }
        };
        Resolved {
            stack_id,
            new_stack,
            recipe,
            signal_cut,
        }
    }

    /// The words (and flags) the base run's result depends on; `None` when
    /// they do not fit in a recipe.
    fn dependencies(&mut self, c: &Copy, base: &Run) -> (Option<Vec<(u32, u64)>>, u32) {
        let Some((unwinder, _)) = self.processes.get(&c.pid).and_then(|p| p.table.as_ref()) else {
            return (None, 0);
        };
        // Absolute addresses of the result's frames: words holding one are
        // return addresses, always checked.
        let outputs: HashSet<u64> = base
            .frames
            .iter()
            .filter_map(|f| match *f {
                UFrame::Native { module, offset, .. } => unwinder
                    .modules()
                    .get(module.0 as usize)
                    .map(|m| offset.wrapping_add(m.bias)),
                UFrame::Unknown { address } => Some(address),
                UFrame::Python { .. } => None,
            })
            .collect();
        let mut must = Vec::new();
        let mut candidates = Vec::new();
        let mut flags = 0;
        for &(addr, v) in &base.reads {
            match v {
                Some(v) if outputs.contains(&v) => must.push(addr),
                Some(_) => candidates.push(addr),
                None => flags |= RECIPE_LEN,
            }
        }
        candidates.sort_unstable();
        candidates.dedup();
        candidates.retain(|a| !must.contains(a));
        // All at once first: usually none of them matters.
        let independent = |this: &mut Self, words: &[u64], bp: bool| {
            POISON.iter().all(|&p| {
                let perturb = words.iter().map(|&a| (a, p)).collect();
                let run = this.run(c, if bp { p } else { c.bp }, &perturb);
                run.same_as(base)
            })
        };
        if !independent(self, &candidates, true) {
            for &a in &candidates {
                if !independent(self, &[a], false) {
                    must.push(a);
                }
            }
            if !independent(self, &[], true) {
                flags |= RECIPE_BP;
            }
        }
        must.sort_unstable();
        must.dedup();
        if must.len() > MAX_CHECKS {
            return (None, flags);
        }
        let stack = StackCopy {
            start: c.sp,
            bytes: &c.bytes,
        };
        let checks = must
            .iter()
            .filter_map(|&a| Some(((a - c.sp) as u32, stack.read(a)?)))
            .collect();
        (Some(checks), flags)
    }

    /// Unwinds the copy with the initial frame pointer `bp` and the words at
    /// `perturb`'s addresses replaced.
    fn run(&mut self, c: &Copy, bp: u64, perturb: &HashMap<u64, u64>) -> Run {
        let mut reads = Vec::new();
        let stack = StackCopy {
            start: c.sp,
            bytes: &c.bytes,
        };
        let Some((unwinder, _)) = self.processes.get(&c.pid).and_then(|p| p.table.as_ref()) else {
            return Run {
                reads,
                frames: Vec::new(),
                end: StackEnd::NoUnwindInfo,
            };
        };
        let mut read = |addr: u64| -> Result<u64, ()> {
            let v = stack
                .read(addr)
                .map(|v| perturb.get(&addr).copied().unwrap_or(v));
            reads.push((addr, v));
            v.ok_or(())
        };
        let regs = Regs {
            ip: c.ip,
            sp: c.sp,
            bp,
        };
        let cap = unwinder.unwind_with(regs, &mut read, &mut self.cache, &mut self.out);
        Run {
            reads,
            frames: self.out[..cap.len].to_vec(),
            end: cap.end,
        }
    }

    /// Whether an unwind that passed a signal frame stopped at it for want
    /// of stack: the copy ends before the `ucontext_t` above the handler's
    /// frame (the trampoline is the last frame), or the interrupted code's
    /// stack is not in the copy (its first frame is the last: the handler ran
    /// on an alternate signal stack, or the copy ends there).
    fn cut_at_signal_frame(&self, pid: u32, run: &Run) -> bool {
        let Some((unwinder, _)) = self.processes.get(&pid).and_then(|p| p.table.as_ref()) else {
            return false;
        };
        run.end == StackEnd::StackReadFailed
            && run.frames.iter().rev().take(2).any(|f| match *f {
                UFrame::Native { module, offset, .. } => unwinder.is_signal_return(module, offset),
                _ => false,
            })
    }

    /// The unwound frames as the symbolizer takes them: (build id, file
    /// offset) where the module has a build id, absolute addresses otherwise.
    fn frames(&self, pid: u32, frames: &[UFrame]) -> Vec<Frame> {
        let Some((unwinder, mappings)) = self.processes.get(&pid).and_then(|p| p.table.as_ref())
        else {
            return Vec::new();
        };
        frames
            .iter()
            .enumerate()
            .filter_map(|(depth, f)| match *f {
                UFrame::Native {
                    module,
                    offset,
                    return_address,
                } => {
                    let m = unwinder.modules().get(module.0 as usize)?;
                    // The symbolizer looks up a caller's frame a byte before
                    // it, as a return address; past a signal frame the
                    // interrupted instruction (and the trampoline) are no
                    // return addresses, so it looks them up exactly.
                    let exact = u64::from(depth > 0 && !return_address);
                    let abs = offset.wrapping_add(m.bias).wrapping_add(exact);
                    let mapping = mappings.iter().find(|x| x.avma == m.text);
                    Some(match mapping {
                        Some(x) if !m.build_id.is_empty() => Frame::BuildId {
                            build_id: m.build_id.clone(),
                            offset: abs - x.avma.start + x.file_offset,
                        },
                        _ => Frame::Ip(abs),
                    })
                }
                UFrame::Unknown { address } => Some(Frame::Ip(address)),
                UFrame::Python { .. } => None,
            })
            .collect()
    }

    /// Builds or rebuilds the module table of `pid`; false if there is none.
    fn ensure_table(&mut self, pid: u32) -> bool {
        let p = self.processes.entry(pid).or_default();
        if p.table.is_some() && !p.dirty {
            return true;
        }
        if p.recorded.is_empty() {
            self.refresh_proc_table(pid);
            return self.processes.get(&pid).is_some_and(|p| p.table.is_some());
        }
        // Newest first; an older mapping that overlaps a newer one is gone.
        let mut effective: Vec<Mapping> = Vec::new();
        for m in p.recorded.iter().rev() {
            if !effective
                .iter()
                .any(|e| e.avma.start < m.avma.end && m.avma.start < e.avma.end)
            {
                effective.push(m.clone());
            }
        }
        let mut unfound: Vec<String> = p.unfound.get(&None).cloned().into_iter().collect();
        effective.retain(|m| {
            let found = !m.path.as_os_str().is_empty();
            if !found {
                unfound.extend(p.unfound.get(&Some(m.avma.start)).cloned());
            }
            found
        });
        let (unwinder, unreadable) = RemoteUnwinder::from_mappings(&effective);
        p.table = Some((unwinder, effective));
        p.dirty = false;
        for why in unfound {
            self.note(why);
        }
        self.note_unreadable(unreadable);
        true
    }

    /// Keeps the first report of each file that could not be read.
    fn note_unreadable(&mut self, errors: Vec<gpuperf_unwind::Error>) {
        for e in errors {
            let mut line = e.to_string();
            if let Some(cause) = std::error::Error::source(&e) {
                line = format!("{line}: {cause}");
            }
            self.note(self.files.describe(&line));
        }
    }

    /// Keeps `line` unless it was reported already.
    fn note(&mut self, line: String) {
        if !self.unreadable.contains(&line) {
            self.unreadable.push(line);
        }
    }

    /// Reads the table of a process without recorded mappings from
    /// `/proc/PID/maps`, at most every [`PROC_REFRESH`]; true if it did.
    fn refresh_proc_table(&mut self, pid: u32) -> bool {
        let p = self.processes.entry(pid).or_default();
        if !p.recorded.is_empty() || p.from_proc.is_some_and(|t| t.elapsed() < PROC_REFRESH) {
            return false;
        }
        p.from_proc = Some(Instant::now());
        let maps = PathBuf::from(format!("/proc/{pid}/maps"));
        let Some(mappings) = std::fs::read_to_string(&maps)
            .ok()
            .and_then(|t| parse_maps(&t, &maps).ok())
        else {
            return false;
        };
        let Ok((unwinder, unreadable)) = RemoteUnwinder::from_pid(pid) else {
            return false;
        };
        p.table = Some((unwinder, mappings));
        self.note_unreadable(unreadable);
        true
    }
}

/// `mix` in launch.bpf.c.
fn mix(h: u64, v: u64) -> u64 {
    let h = (h ^ v).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    h ^ (h >> 32)
}

/// Below this no user page is mapped (`MIN_USER_ADDR`).
const MIN_USER_ADDR: u64 = 4096;

/// The words the BPF frame-pointer walk read at the copy's probe, found by
/// walking the copy as `walk_stack` does; `None` unless the result is
/// provably the BPF walk's (same `walk_hash`, every word in the copy, a frame
/// -pointer stack that is kept). Those words hold whenever the walk gives the
/// same frames through the same places again.
fn walk_words(c: &Copy) -> Option<HashSet<u64>> {
    if !(0..INLINE_STACK_ID_BASE).contains(&c.fp_id) {
        return None;
    }
    let stack = StackCopy {
        start: c.sp,
        bytes: &c.bytes,
    };
    let mut words = HashSet::new();
    let mut n = 1;
    if c.caller_at_sp {
        stack.read(c.sp)?;
        words.insert(c.sp);
        n = 2;
    }
    let (mut fp, mut hash) = (c.bp, 0);
    for _ in 0..MAX_FRAMES {
        hash = mix(hash, fp.wrapping_sub(c.sp));
        if n >= MAX_FRAMES || fp < MIN_USER_ADDR {
            break;
        }
        let (Some(next), Some(_)) = (stack.read(fp), stack.read(fp.wrapping_add(8))) else {
            return None;
        };
        words.insert(fp);
        words.insert(fp + 8);
        n += 1;
        fp = next;
    }
    (hash == c.walk_hash).then_some(words)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recipe_layout_is_the_bpf_programs() {
        let r = Recipe {
            stack_id: FULL_ID_BASE,
            fp_id: -1,
            flags: RECIPE_BP,
            bp: 0x7ffd_0000,
            len: 512,
            checks: vec![(8, 0x40_1234), (40, 0x40_2000)],
            uncovered: 1,
            walk_fp_id: 3,
            walk_hash: 0x77,
        };
        let b = r.to_bytes(9);
        assert_eq!(b.len(), RECIPE_SIZE);
        assert_eq!(RECIPE_SIZE, size_of::<crate::skel::types::recipe>());
        assert_eq!(
            RecipeKey {
                tgid: 1,
                ip: 2,
                sp: 3
            }
            .to_bytes()
            .len(),
            size_of::<crate::skel::types::recipe_key>()
        );
        assert_eq!(&b[..8], &9u64.to_ne_bytes());
        assert_eq!(&b[RECIPE_SIZE - 8..], &9u64.to_ne_bytes());
        assert_eq!(&b[16..20], &2u32.to_ne_bytes(), "nchecks");
        assert_eq!(&b[36..40], &1u32.to_ne_bytes(), "uncovered");
        assert_eq!(&b[40..44], &3u32.to_ne_bytes(), "walk_fp_id");
        assert_eq!(&b[48..56], &0x77u64.to_ne_bytes(), "walk_hash");
        assert_eq!(&b[56..60], &8u32.to_ne_bytes(), "first check's offset");
        assert_eq!(&b[64..72], &0x40_1234u64.to_ne_bytes());
    }

    fn copy(words: &[u64]) -> Copy {
        Copy {
            copy_id: 0x2000_0000,
            pid: 1,
            tid: 1,
            ip: 0x40_1000,
            sp: 0x7000,
            bp: 0x7100,
            fp_id: 3,
            caller_at_sp: true,
            walk_hash: 0,
            bytes: words.iter().flat_map(|w| w.to_ne_bytes()).collect(),
        }
    }

    #[test]
    fn a_recipe_holds_only_while_its_words_flags_and_frame_pointer_stack_do() {
        let r = Recipe {
            stack_id: FULL_ID_BASE,
            fp_id: -1,
            flags: 0,
            bp: 0,
            len: 0,
            checks: vec![(8, 0x40_1234)],
            uncovered: 1,
            walk_fp_id: -1,
            walk_hash: 0,
        };
        let c = copy(&[5, 0x40_1234, 6]);
        assert!(r.holds(&c));
        assert!(!r.holds(&copy(&[5, 0x40_1235, 6])), "a word changed");
        assert!(!r.holds(&copy(&[5])), "the word is not in the copy");
        let with_bp = Recipe {
            flags: RECIPE_BP,
            bp: 0x7100,
            ..r.clone()
        };
        assert!(with_bp.holds(&c));
        assert!(!with_bp.holds(&Copy {
            bp: 0x7200,
            ..c.clone()
        }));
        let with_len = Recipe {
            flags: RECIPE_LEN,
            len: 24,
            ..r.clone()
        };
        assert!(with_len.holds(&c));
        assert!(!with_len.holds(&copy(&[5, 0x40_1234, 6, 7])));
        let with_fp = Recipe { fp_id: 4, ..r };
        assert!(!with_fp.holds(&c));
        assert!(with_fp.holds(&Copy { fp_id: 4, ..c }));
    }

    #[test]
    fn a_mapped_file_that_cannot_be_read_is_reported_once_with_why() {
        let mut u = Unwinding::default();
        let gone = PathBuf::from("/nonexistent/gpuperf-test/libgone.so");
        for start in [0x40_0000, 0x50_0000] {
            let f = FileMapped {
                pid: 1,
                path: gone.clone(),
                place: Place::Mapping {
                    start,
                    end: start + 0x1000,
                    offset: 0,
                },
                identity: FileIdentity::default(),
            };
            u.mapped(&f, Ok(&gone));
            let r = u.resolve(&copy(&[0x40_1234]), Some(5));
            assert_eq!(r.stack_id, 3, "the frame-pointer stack is kept");
        }
        assert_eq!(u.counts.unwound, 2);
        assert_eq!(
            u.unreadable,
            [format!(
                "failed to read `{}`: No such file or directory (os error 2)",
                gone.display()
            )]
        );
    }

    /// No process has this pid (above `pid_max`'s limit).
    const GONE: u32 = u32::MAX;

    fn mapped_file(path: &Path, identity: FileIdentity) -> FileMapped {
        FileMapped {
            pid: GONE,
            path: path.to_owned(),
            place: Place::Mapping {
                start: 0x40_0000,
                end: 0x40_1000,
                offset: 0,
            },
            identity,
        }
    }

    fn identity(path: &Path) -> FileIdentity {
        let m = std::fs::metadata(path).unwrap();
        FileIdentity {
            ino: m.ino(),
            size: m.len(),
        }
    }

    #[test]
    fn a_file_is_held_open_only_when_it_is_the_one_mapped() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("liba.so"), dir.path().join("libb.so"));
        std::fs::write(&a, b"one build").unwrap();
        std::fs::write(&b, b"another build").unwrap();
        let mut files = ModuleFiles::default();
        let here = files.find(&mapped_file(&a, identity(&a)), None).unwrap();
        assert!(here.starts_with("/proc/self/fd"), "{here:?}");
        // It stays the same file whatever happens to the path.
        std::fs::rename(&b, &a).unwrap();
        assert_eq!(std::fs::read(&here).unwrap(), b"one build");
        assert_eq!(
            files.describe(&format!("failed to read `{}`: x", here.display())),
            format!("failed to read `{}`: x", a.display())
        );
        // Now the path names another file: never used for the first.
        let old = identity(&here);
        let err = files.find(&mapped_file(&a, old), None).unwrap_err();
        let new = identity(&a);
        assert_eq!(
            err,
            format!(
                "failed to read `{0}` of pid {GONE}: `{0}` is another file (inode {1}, 13 \
                 bytes) than the one mapped (inode {2}, 9 bytes)",
                a.display(),
                new.ino,
                old.ino
            )
        );
        // Found again, the same file is held once.
        let again = files.find(&mapped_file(&a, new), None).unwrap();
        assert_eq!(files.find(&mapped_file(&a, new), None).unwrap(), again);
        assert_eq!(files.held.len(), 2);
        let missing = dir.path().join("libc.so");
        let err = files
            .find(&mapped_file(&missing, old), Some(dir.path()))
            .unwrap_err();
        assert!(
            err.ends_with("No such file or directory (os error 2)"),
            "{err}"
        );
    }

    #[test]
    fn a_file_that_is_not_the_one_mapped_is_reported_and_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let other = dir.path().join("libother.so");
        std::fs::write(&other, b"not the mapped file").unwrap();
        let mut u = Unwinding::default();
        let f = mapped_file(&other, FileIdentity { ino: 1, size: 2 });
        let found = u.files.find(&f, None);
        assert!(found.is_err());
        u.mapped(
            &f,
            found.as_ref().map(PathBuf::as_path).map_err(Clone::clone),
        );
        let mut c = copy(&[0x40_1234]);
        c.pid = GONE;
        let r = u.resolve(&c, Some(5));
        assert_eq!(r.stack_id, 3, "the frame-pointer stack is kept");
        assert_eq!(u.unreadable.len(), 1, "{:?}", u.unreadable);
        assert!(
            u.unreadable[0].contains("is another file"),
            "{:?}",
            u.unreadable
        );
        let (unwinder, effective) = u.processes[&GONE].table.as_ref().unwrap();
        assert!(unwinder.modules().is_empty() && effective.is_empty());
    }

    #[test]
    fn the_frame_pointer_walks_words_are_found_only_for_the_walk_bpf_made() {
        // sp 0x7000: [sp] the caller; bp 0x7010 -> 0x7030 -> 0 (chain end).
        let mut c = copy(&[0x40_1000, 0, 0x7030, 0x40_2000, 0, 0, 0, 0x40_3000]);
        c.bp = 0x7010;
        let hash = mix(mix(mix(0, 0x10), 0x30), 0u64.wrapping_sub(0x7000));
        c.walk_hash = hash;
        let words = walk_words(&c).expect("the walk BPF made");
        let mut words: Vec<u64> = words.into_iter().collect();
        words.sort_unstable();
        assert_eq!(words, [0x7000, 0x7010, 0x7018, 0x7030, 0x7038]);
        c.walk_hash = hash ^ 1;
        assert_eq!(walk_words(&c), None, "another walk");
        c.walk_hash = hash;
        c.fp_id = -1;
        assert_eq!(walk_words(&c), None, "no kept frame-pointer stack");
        c.fp_id = 3;
        c.bytes.truncate(0x38);
        assert_eq!(walk_words(&c), None, "a word outside the copy");
    }
}
