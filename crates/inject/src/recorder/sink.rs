//! The trace file: the writer, its string table, and what it remembers
//! between records (API names, correlation aliases, thread names).

use std::ffi::{CStr, c_char};
use std::path::{Path, PathBuf};

use gpuperf_merge::gputrace::Writer;
use gpuperf_merge::model::{Note, Record, StringId, StringTable};
use rustc_hash::FxHashMap;

use crate::error::{Error, Result};
use crate::outfile::OutFile;

use super::ALIAS_GENERATION;

pub(super) struct Sink {
    pub(super) writer: Option<Writer<OutFile>>,
    pub(super) strings: StringTable,
    pid: u32,
    pub(super) api_names: [Vec<Option<StringId>>; 2],
    /// Looked up for every record, and `aliases` too (a launch adds one):
    /// keyed by ids CUPTI numbers, so hashed by FxHash, where std's SipHash
    /// cost hundreds of instructions a launch on the flush thread.
    pub(super) context_device: FxHashMap<u32, u32>,
    aliases: [FxHashMap<u32, u32>; 2],
    /// The last name written for each thread.
    pub(super) thread_names: FxHashMap<u32, [u8; 16]>,
    /// The last kernel name interned: runs of one kernel are the rule.
    last_kernel: Option<StringId>,
    pub(super) write_errors: u64,
    pub(super) first_error: Option<String>,
    /// The `CLOSED` record is written: only notes may follow.
    pub(super) closed: bool,
    /// Records refused because they came after `CLOSED` (a flush that raced
    /// with the exit path).
    pub(super) refused: u64,
    /// Nested driver calls not linked to their runtime call for lack of
    /// memory: their GPU work keeps the driver call's correlation id.
    pub(super) aliases_lost: u64,
}

impl Sink {
    /// Creates the trace at `path`, or at a free name beside it (see
    /// [`crate::config::create_new`]); returns it and where it is.
    pub(super) fn create(path: &Path, flags: u32) -> Result<(Self, PathBuf)> {
        let (file, path) = crate::config::create_new(path).map_err(|source| Error::Output {
            path: path.to_owned(),
            source,
        })?;
        let path = path.as_path();
        let out = OutFile::new(file, path, 1 << 20);
        let writer = Writer::with_flags(out, flags).map_err(|source| Error::Output {
            path: path.to_owned(),
            source,
        })?;
        let sink = Self {
            writer: Some(writer),
            strings: StringTable::new(),
            pid: std::process::id(),
            api_names: [Vec::new(), Vec::new()],
            context_device: FxHashMap::default(),
            aliases: [FxHashMap::default(), FxHashMap::default()],
            thread_names: FxHashMap::default(),
            last_kernel: None,
            write_errors: 0,
            aliases_lost: 0,
            first_error: None,
            closed: false,
            refused: 0,
        };
        Ok((sink, path.to_owned()))
    }

    pub(super) fn write(&mut self, rec: &Record) {
        if self.closed && !matches!(rec, Record::Note(_)) {
            self.refused += 1;
            return;
        }
        let Some(w) = self.writer.as_mut() else {
            self.write_errors += 1;
            return;
        };
        if let Err(e) = w.write(rec, &self.strings) {
            // A full disk loses the rest of the trace, never the app's own writes.
            self.write_errors += 1;
            self.first_error.get_or_insert_with(|| e.to_string());
            self.writer = None;
        }
    }

    /// Writes an API record with its in-process stack id. (stacks hook)
    pub(super) fn write_api(&mut self, rec: &Record, stack: u32) {
        let (Record::Api(a), Some(w)) = (rec, self.writer.as_mut()) else {
            return self.write(rec);
        };
        if stack == 0 || self.closed {
            return self.write(rec);
        }
        if let Err(e) = w.write_api(a, Some(stack), &self.strings) {
            self.write_errors += 1;
            self.first_error.get_or_insert_with(|| e.to_string());
            self.writer = None;
        }
    }

    /// The id of a kernel name as CUPTI's record holds it, without copying it
    /// when it is the last one's (compared, not assumed: record storage is
    /// reused).
    ///
    /// # Safety
    /// `p` is null or a NUL-terminated string valid for the call.
    pub(super) unsafe fn kernel_name(&mut self, p: *const c_char) -> StringId {
        if p.is_null() {
            return self.strings.intern("<unnamed kernel>");
        }
        // SAFETY: as this function's contract.
        let bytes = unsafe { CStr::from_ptr(p) }.to_bytes();
        if let Some(id) = self.last_kernel
            && self.strings.get(id).as_bytes() == bytes
        {
            return id;
        }
        let id = match std::str::from_utf8(bytes) {
            Ok(text) => self.strings.intern(text),
            Err(_) => self.strings.intern(&String::from_utf8_lossy(bytes)),
        };
        self.last_kernel = Some(id);
        id
    }

    pub(super) fn flush(&mut self) {
        if let Some(w) = self.writer.as_mut()
            && let Err(e) = w.flush()
        {
            self.write_errors += 1;
            self.first_error.get_or_insert_with(|| e.to_string());
            self.writer = None;
        }
    }

    pub(super) fn note(&mut self, text: String) {
        let pid = self.pid;
        self.write(&Record::Note(Note { pid, text }));
        self.flush();
    }

    /// Notes that GPU work of the driver call `nested` belongs to the runtime
    /// call `outer`. Never aborts the program for memory: the older
    /// generation's table is reused, and an entry that would need memory the
    /// process cannot have is counted in `aliases_lost` instead.
    pub(super) fn add_alias(&mut self, nested: u32, outer: u32) {
        if self.aliases[0].len() >= ALIAS_GENERATION {
            self.aliases.swap(0, 1);
            self.aliases[0].clear();
        }
        if self.aliases[0].try_reserve(1).is_err() {
            self.aliases_lost += 1;
            return;
        }
        self.aliases[0].insert(nested, outer);
    }

    pub(super) fn resolve(&self, correlation_id: u32) -> Option<u32> {
        self.aliases
            .iter()
            .find_map(|m| m.get(&correlation_id).copied())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ptr;

    #[test]
    fn kernel_names_are_compared_not_taken_from_the_pointer() {
        let dir = std::env::temp_dir().join(format!("gpuperf-sink-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (mut sink, _) = Sink::create(&dir.join("t.gputrace"), 0).unwrap();
        fn name(sink: &mut Sink, p: *const u8) -> StringId {
            // SAFETY: every caller passes null or a NUL-terminated buffer it owns.
            unsafe { sink.kernel_name(p.cast()) }
        }
        // One buffer, as CUPTI's record storage reused for another name.
        let mut storage = *b"_Z5firstv\0";
        let first = name(&mut sink, storage.as_ptr());
        assert_eq!(name(&mut sink, storage.as_ptr()), first);
        storage[..9].copy_from_slice(b"_Z5otherv");
        let other = name(&mut sink, storage.as_ptr());
        assert_ne!(other, first);
        assert_eq!(sink.strings.get(other), "_Z5otherv");
        // Another pointer with an earlier name's text.
        assert_eq!(name(&mut sink, c"_Z5firstv".as_ptr().cast()), first);
        assert_eq!(sink.strings.get(first), "_Z5firstv");
        let lossy = name(&mut sink, [0x66u8, 0xff, 0].as_ptr());
        assert_eq!(sink.strings.get(lossy), "f\u{fffd}");
        let unnamed = name(&mut sink, ptr::null());
        assert_eq!(sink.strings.get(unnamed), "<unnamed kernel>");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
