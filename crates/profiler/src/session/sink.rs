//! The records' way out: stacks unwound and symbolized, launches written.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::rc::Rc;

use gpuperf_merge::model::ROOT_FRAMES;
use gpuperf_merge::read::cpu::{LaunchLine, TRUNCATED_FRAME, Writer};
use libbpf_rs::{MapCore, MapFlags, MapHandle};

use super::Summary;
use super::attach::Attach;
use crate::error::{Error, Result};
use crate::event::{
    COPY_ID_BASE, Copy, Event, FULL_ID_BASE, FileMapped, INLINE_STACK_ID_BASE, Launch, Origin,
    Place, Stack,
};
use crate::symbolize::Symbolizer;
use crate::unwinding::Unwinding;

/// Turns the ring buffer's records into CPU trace lines: unwinds stack
/// copies, symbolizes stacks, and writes each launch once its frames are here.
pub(super) struct Sink<W: Write> {
    pub(super) writer: Writer<W>,
    pub(super) symbolizer: Symbolizer,
    pub(super) unwinding: Unwinding,
    /// The BPF recipe map, when unwinding is on.
    pub(super) recipes: Option<MapHandle>,
    pub(super) recipe_seq: u64,
    /// Copy id → the stack its launch gets.
    pub(super) aliases: HashMap<i32, i32>,
    /// Stacks unwound here and not yet symbolized, with whether complete.
    pub(super) unwound: HashMap<i32, (Stack, bool)>,
    /// Stacks that end at a signal frame for want of stack.
    pub(super) signal_cut: HashSet<i32>,
    /// Frames in each frame-pointer stack.
    pub(super) fp_frames: HashMap<i32, usize>,
    /// Symbolized stacks by id, root first, starting with [`TRUNCATED_FRAME`]
    /// when incomplete.
    pub(super) stacks: HashMap<i32, Rc<[String]>>,
    pub(super) waiting: Vec<Launch>,
    pub(super) seen_pids: HashSet<u32>,
    pub(super) discover: bool,
    /// Events held until the end when symbolization is deferred.
    pub(super) deferred: Option<Vec<Option<Event>>>,
    /// The root directory of each process whose file paths were seen, as
    /// [`root_seen_from_here`] found it.
    pub(super) roots: HashMap<u32, Option<PathBuf>>,
    pub(super) summary: Summary,
}

impl<W: Write> Sink<W> {
    /// Unwinds the batch's stack copies and sends their recipes to BPF, in
    /// arrival order and before the batch is symbolized (which can take long):
    /// until a recipe arrives, each launch from its call site sends a copy.
    /// Runs on every batch, also when symbolization is deferred.
    pub(super) fn prepare(&mut self, events: &mut [Option<Event>]) {
        for e in events.iter_mut().flatten() {
            match e {
                Event::Exec(x) => {
                    self.roots.remove(&x.pid);
                }
                Event::File(f) => self.find_file(f),
                Event::Stack(s) if s.stack_id < COPY_ID_BASE => {
                    self.fp_frames.insert(s.stack_id, s.frames.len());
                }
                Event::Copy(c) => self.unwind_copy(c),
                _ => {}
            }
        }
    }

    /// Finds the file a process mapped, whose path is the process's own
    /// (from its root directory, in its mount namespace), and makes `f`'s
    /// path one from which this process reads that very file
    /// ([`ModuleFiles`](crate::unwinding::ModuleFiles)). A file not found,
    /// or only another one by its path, is reported and neither unwound
    /// through nor placed for the symbolizer.
    fn find_file(&mut self, f: &mut FileMapped) {
        let root = self
            .roots
            .entry(f.pid)
            .or_insert_with(|| root_seen_from_here(f.pid))
            .clone();
        let found = self.unwinding.files.find(f, root.as_deref());
        let keys = self.unwinding.mapped(
            f,
            found.as_ref().map(PathBuf::as_path).map_err(Clone::clone),
        );
        match found {
            Ok(here) => {
                self.symbolizer.name_file(&here, &f.path);
                f.path = here;
            }
            Err(_) => f.place = Place::Unknown,
        }
        for key in keys {
            if let Some(map) = &self.recipes {
                let _ = map.delete(&key.to_bytes());
            }
        }
    }

    fn unwind_copy(&mut self, c: &Copy) {
        let fp_frames = self.fp_frames.get(&c.fp_id).copied();
        let r = self.unwinding.resolve(c, fp_frames);
        if let (Some((key, recipe)), Some(map)) = (r.recipe, &self.recipes) {
            self.recipe_seq += 1;
            // A failed update only costs copies.
            let _ = map.update(
                &key.to_bytes(),
                &recipe.to_bytes(self.recipe_seq),
                MapFlags::ANY,
            );
        }
        if let Some((stack, complete)) = r.new_stack {
            self.unwound.insert(stack.stack_id, (stack, complete));
        }
        if r.signal_cut {
            self.signal_cut.insert(r.stack_id);
        }
        self.aliases.insert(c.copy_id, r.stack_id);
    }

    /// The stack a launch's id stands for (a copy stands for its result).
    fn target(&self, id: i32) -> i32 {
        if (COPY_ID_BASE..FULL_ID_BASE).contains(&id) {
            self.aliases.get(&id).copied().unwrap_or(id)
        } else {
            id
        }
    }

    /// Whether the frames of a launch's stack are here (or never will be).
    fn known(&self, id: i32) -> bool {
        let id = self.target(id);
        id < 0 || self.stacks.contains_key(&id) || self.unwound.contains_key(&id)
    }

    pub(super) fn handle(
        &mut self,
        events: Vec<Option<Event>>,
        attach: &mut Attach<'_, '_>,
    ) -> Result<()> {
        if let Some(held) = &mut self.deferred {
            held.extend(events);
            return Ok(());
        }
        // A new process's probes and maps first, while it lives and before
        // its first launches pass: symbolizing the batch's stacks can take
        // long (the first stacks parse whole libraries).
        for e in events.iter().flatten() {
            if let Event::Launch(l) = e
                && self.seen_pids.insert(l.pid)
            {
                self.symbolizer.index_process(l.pid);
                if self.discover && l.origin == Origin::Marker {
                    attach.discover(l.pid);
                }
            }
        }
        let mut new_stack = false;
        for e in events {
            match e {
                None => self.summary.bad_records += 1,
                Some(Event::Exec(x)) => self.symbolizer.exec(x.pid, &x.filename),
                Some(Event::File(f)) => self.symbolizer.mapped(f),
                Some(Event::Stack(s)) => {
                    let names = self.symbolizer.frames(&s);
                    let complete = names
                        .first()
                        .is_some_and(|f| ROOT_FRAMES.contains(&f.as_str()));
                    self.stacks.insert(s.stack_id, mark(names, complete));
                    new_stack = true;
                }
                // Unwound in `prepare`.
                Some(Event::Copy(_)) => new_stack = true,
                Some(Event::Launch(l)) => {
                    if !self.known(l.stack_id) {
                        // Its frames were sent from another CPU and are still
                        // on their way.
                        self.waiting.push(l);
                    } else {
                        self.write(&l)?;
                    }
                }
            }
        }
        if new_stack && !self.waiting.is_empty() {
            let waiting = std::mem::take(&mut self.waiting);
            for l in waiting {
                if self.known(l.stack_id) {
                    self.write(&l)?;
                } else {
                    self.waiting.push(l);
                }
            }
        }
        Ok(())
    }

    fn write(&mut self, l: &Launch) -> Result<()> {
        let id = self.target(l.stack_id);
        if id != l.stack_id {
            self.aliases.remove(&l.stack_id);
        }
        if let Some((stack, complete)) = self.unwound.remove(&id) {
            let names = self.symbolizer.frames(&stack);
            self.stacks.insert(id, mark(names, complete));
        }
        let frames = if id >= INLINE_STACK_ID_BASE {
            self.stacks.remove(&id)
        } else {
            self.stacks.get(&id).cloned()
        };
        if frames.as_ref().is_none_or(|f| f.is_empty()) {
            self.summary.launches_without_stack += 1;
        } else if frames.as_ref().is_some_and(|f| f[0] == TRUNCATED_FRAME) {
            self.summary.truncated_stacks += 1;
            if self.signal_cut.contains(&id) {
                self.summary.signal_stacks_cut += 1;
            }
        }
        let line = LaunchLine {
            ts_ns: l.ts,
            comm: &l.comm,
            pid: l.pid,
            tid: l.tid,
            cpu: l.cpu,
            // CUPTI's ids are 32-bit; the marker passes them zero-extended.
            correlation_id: u32::try_from(l.correlation_id).unwrap_or(0),
        };
        let frames = frames.unwrap_or_else(|| Rc::from([]));
        self.writer
            .launch(&line, frames.iter().map(String::as_str))
            .map_err(Error::Output)?;
        self.summary.launches += 1;
        Ok(())
    }

    pub(super) fn finish(mut self, dropped: u64, attach: &mut Attach<'_, '_>) -> Result<Summary> {
        if let Some(held) = self.deferred.take() {
            self.discover = false;
            self.handle(held, attach)?;
        }
        for l in std::mem::take(&mut self.waiting) {
            self.write(&l)?;
        }
        if dropped > 0 {
            self.writer.dropped(dropped).map_err(Error::Output)?;
        }
        self.writer.flush().map_err(Error::Output)?;
        self.summary.unsymbolized_frames = self.symbolizer.unsymbolized_frames;
        self.summary.uncacheable_stacks = self.unwinding.counts.uncacheable;
        self.summary.unreadable_files = std::mem::take(&mut self.unwinding.unreadable);
        Ok(self.summary)
    }
}

/// Where the root directory of process `pid` is as this process sees it,
/// when it is another directory than ours; `None` when it is ours, or cannot
/// be told (the process is gone, or its root is not reachable from here).
fn root_seen_from_here(pid: u32) -> Option<PathBuf> {
    let id = |m: fs::Metadata| (m.dev(), m.ino());
    let link = PathBuf::from(format!("/proc/{pid}/root"));
    let theirs = id(fs::metadata(&link).ok()?);
    if id(fs::metadata("/").ok()?) == theirs {
        return None;
    }
    // The link's text is the directory's path from our root; it is theirs
    // only if it leads to the same directory.
    let path = fs::read_link(&link).ok()?;
    (path.is_absolute() && fs::metadata(&path).ok().map(id) == Some(theirs)).then_some(path)
}

/// A symbolized stack (root first), behind [`TRUNCATED_FRAME`] when it does not
/// reach a root frame. An empty stack stays empty (no stack, not a short one).
fn mark(mut names: Vec<String>, complete: bool) -> Rc<[String]> {
    if !complete && !names.is_empty() {
        names.insert(0, TRUNCATED_FRAME.to_owned());
    }
    names.into()
}
