//! Symbols kept with a recording, so that in-process stacks are named the same
//! after the program's files were rebuilt, moved or deleted, or on another
//! machine.
//!
//! `gpuperf record --raw-dir DIR` symbolizes the stacks the injection library
//! took while the files are still where they were, and writes every name it
//! found to `DIR/symbols.txt`; `gpuperf merge DIR` names frames from it first and
//! asks the symbolizer only for the rest. One line per address:
//!
//! ```text
//! # gpuperf symbols 1: build id (- if none), offset, file, frames (innermost first)
//! 3f1c…e2<TAB>11a9<TAB>/opt/app/bin/train<TAB>layer_forward<TAB>train_step
//! ```
//!
//! A module is found by its build id when it has one, else by its path. Bad lines
//! are counted in [`Diagnostics`] with their line number and skipped.

use std::collections::HashMap;
use std::fs;
use std::io::{BufWriter, Write as _};
use std::path::Path;

use crate::diag::Diagnostics;
use crate::model::Module;
use crate::model::Symbolize;
use crate::{Error, Result};

const HEADER: &str =
    "# gpuperf symbols 1: build id (- if none), offset, file, frames (innermost first)";

/// How a module is found.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum ModuleKey {
    BuildId(Vec<u8>),
    Path(String),
}

impl ModuleKey {
    fn of(m: &Module) -> ModuleKey {
        if m.build_id.is_empty() {
            ModuleKey::Path(m.path.clone())
        } else {
            ModuleKey::BuildId(m.build_id.clone())
        }
    }
}

/// Names of (module, offset) pairs: read from a recording, or collected while
/// symbolizing.
#[derive(Debug, Default)]
pub struct SymbolCache {
    /// (module, offset) → (path, frames innermost first; empty = unknown).
    names: HashMap<(ModuleKey, u64), (String, Vec<String>)>,
    /// Problems found reading the file.
    pub diagnostics: Diagnostics,
}

impl SymbolCache {
    /// An empty cache.
    pub fn new() -> SymbolCache {
        SymbolCache::default()
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// Whether it holds no entry.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// Reads `path`; bad lines are counted in [`SymbolCache::diagnostics`].
    pub fn read(path: &Path) -> Result<SymbolCache> {
        let bytes = fs::read(path).map_err(Error::io("read", path))?;
        let text = String::from_utf8_lossy(&bytes);
        let mut cache = SymbolCache::new();
        let shown = path.display().to_string();
        for (i, line) in text.lines().enumerate() {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            match parse_line(line) {
                Ok((key, offset, file, frames)) => {
                    cache.names.insert((key, offset), (file, frames));
                }
                Err(why) => cache
                    .diagnostics
                    .push(|| format!("{shown}:{}", i + 1), || why.to_owned()),
            }
        }
        Ok(cache)
    }

    /// Writes the cache to `path`, sorted. Names holding a tab or a line break
    /// cannot be written and are left out (the frame is then symbolized again,
    /// or shown as `file+0xoffset`); their number is returned.
    pub fn write(&self, path: &Path) -> Result<usize> {
        let io_err = |source| Error::Io {
            action: "write",
            path: path.to_owned(),
            source,
        };
        let f = fs::File::create(path).map_err(io_err)?;
        let mut w = BufWriter::new(f);
        let mut entries: Vec<_> = self.names.iter().collect();
        entries.sort_by(|a, b| a.0.cmp(b.0));
        let bad = |s: &str| s.contains(['\t', '\n', '\r']);
        let mut skipped = 0;
        writeln!(w, "{HEADER}").map_err(io_err)?;
        for ((key, offset), (file, frames)) in entries {
            if bad(file) || frames.iter().any(|f| bad(f)) {
                skipped += 1;
                continue;
            }
            let id = match key {
                ModuleKey::BuildId(b) => b.iter().map(|x| format!("{x:02x}")).collect(),
                ModuleKey::Path(_) => "-".to_owned(),
            };
            write!(w, "{id}\t{offset:x}\t{file}").map_err(io_err)?;
            for f in frames {
                write!(w, "\t{f}").map_err(io_err)?;
            }
            writeln!(w).map_err(io_err)?;
        }
        w.flush().map_err(io_err)?;
        Ok(skipped)
    }

    /// Adds the entries and diagnostics of `other` (its entries win).
    pub fn merge(&mut self, other: SymbolCache) {
        self.names.extend(other.names);
        self.diagnostics.extend(other.diagnostics);
    }

    fn get(&self, m: &Module, offset: u64) -> Option<&Vec<String>> {
        self.names
            .get(&(ModuleKey::of(m), offset))
            .map(|(_, frames)| frames)
    }

    fn insert(&mut self, m: &Module, offset: u64, frames: Vec<String>) {
        self.names
            .insert((ModuleKey::of(m), offset), (m.path.clone(), frames));
    }
}

fn parse_line(
    line: &str,
) -> std::result::Result<(ModuleKey, u64, String, Vec<String>), &'static str> {
    let mut fields = line.split('\t');
    let (Some(id), Some(offset), Some(file)) = (fields.next(), fields.next(), fields.next()) else {
        return Err("expected build id, offset and file, separated by tabs");
    };
    let offset = u64::from_str_radix(offset, 16).map_err(|_| "the offset is not hexadecimal")?;
    let key = if id == "-" {
        if file.is_empty() {
            return Err("a module without build id needs its file");
        }
        ModuleKey::Path(file.to_owned())
    } else {
        if id.is_empty() || id.len() % 2 != 0 {
            return Err("the build id is not hexadecimal bytes");
        }
        let bytes = (0..id.len())
            .step_by(2)
            .map(|i| {
                id.get(i..i + 2)
                    .and_then(|b| u8::from_str_radix(b, 16).ok())
            })
            .collect::<Option<Vec<u8>>>()
            .ok_or("the build id is not hexadecimal bytes")?;
        ModuleKey::BuildId(bytes)
    };
    let frames = fields.map(str::to_owned).collect();
    Ok((key, offset, file.to_owned(), frames))
}

/// A [`Symbolize`] that answers from a [`SymbolCache`] first, asks `inner` for
/// the rest, and keeps every answer, so that the cache can be written after.
pub struct Cached<S> {
    /// The names known so far.
    pub cache: SymbolCache,
    inner: S,
}

impl<S: Symbolize> Cached<S> {
    /// Wraps `inner` with `cache`.
    pub fn new(inner: S, cache: SymbolCache) -> Cached<S> {
        Cached { cache, inner }
    }
}

impl<S: Symbolize> Symbolize for Cached<S> {
    fn symbolize(&mut self, module: &Module, offsets: &[u64]) -> Vec<Vec<String>> {
        let missing: Vec<u64> = offsets
            .iter()
            .copied()
            .filter(|&o| self.cache.get(module, o).is_none_or(Vec::is_empty))
            .collect();
        if !missing.is_empty() {
            let found = self.inner.symbolize(module, &missing);
            for (o, frames) in missing.iter().zip(found) {
                // An unknown from the symbolizer does not replace a name kept
                // with the recording.
                if !frames.is_empty() || self.cache.get(module, *o).is_none() {
                    self.cache.insert(module, *o, frames);
                }
            }
        }
        offsets
            .iter()
            .map(|&o| self.cache.get(module, o).cloned().unwrap_or_default())
            .collect()
    }
}

#[cfg(test)]
#[allow(non_snake_case)]
mod tests {
    use super::*;
    use crate::recording::SYMBOLS as FILE_NAME;

    fn module(path: &str, build_id: &[u8]) -> Module {
        Module {
            pid: 7,
            id: 1,
            path: path.to_owned(),
            build_id: build_id.to_vec(),
            bias: 0,
            text_start: 0,
            text_end: 0,
        }
    }

    /// A symbolizer that names `f<offset>` and counts its calls; offsets above
    /// 0xf000 are unknown.
    struct Counting(Vec<u64>);

    impl Symbolize for Counting {
        fn symbolize(&mut self, _: &Module, offsets: &[u64]) -> Vec<Vec<String>> {
            self.0.extend_from_slice(offsets);
            offsets
                .iter()
                .map(|o| {
                    if *o > 0xf000 {
                        vec![]
                    } else {
                        vec![format!("f{o:x}"), format!("outer{o:x}")]
                    }
                })
                .collect()
        }
    }

    #[test]
    fn names_written_with_a_recording__read_back_without_the_symbolizer() {
        let a = module("/opt/app/train", &[0x3f, 0x1c, 0xe2]);
        let b = module("/tmp/jit.so", &[]);
        let mut first = Cached::new(Counting(vec![]), SymbolCache::new());
        assert_eq!(
            first.symbolize(&a, &[0x10, 0xf100]),
            [vec!["f10".to_owned(), "outer10".to_owned()], vec![]]
        );
        first.symbolize(&b, &[0x20]);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        assert_eq!(first.cache.write(&path).unwrap(), 0);
        let text = fs::read_to_string(&path).unwrap();
        assert_eq!(
            text,
            format!(
                "{HEADER}\n3f1ce2\t10\t/opt/app/train\tf10\touter10\n3f1ce2\tf100\t/opt/app/train\n\
                 -\t20\t/tmp/jit.so\tf20\touter20\n"
            )
        );

        // The same build id at another path is found; the path-keyed module only
        // at its path.
        let moved = module("/elsewhere/train", &[0x3f, 0x1c, 0xe2]);
        let mut second = Cached::new(Counting(vec![]), SymbolCache::read(&path).unwrap());
        assert_eq!(second.cache.diagnostics.count, 0);
        assert_eq!(
            second.symbolize(&moved, &[0x10]),
            [vec!["f10".to_owned(), "outer10".to_owned()]]
        );
        second.symbolize(&b, &[0x20]);
        assert_eq!(second.inner.0, Vec::<u64>::new(), "all from the file");
        // Unknown in the file: asked again; new offsets too.
        second.symbolize(&moved, &[0xf100, 0x30]);
        assert_eq!(second.inner.0, [0xf100, 0x30]);
    }

    #[test]
    fn an_unknown_from_the_symbolizer__keeps_the_recorded_name() {
        let a = module("/opt/app/train", &[1, 2]);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        fs::write(&path, "0102\tf200\t/opt/app/train\tkept\n").unwrap();
        let mut c = Cached::new(Counting(vec![]), SymbolCache::read(&path).unwrap());
        assert_eq!(c.symbolize(&a, &[0xf200]), [vec!["kept".to_owned()]]);
    }

    #[test]
    fn bad_lines__counted_with_their_line_and_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        fs::write(
            &path,
            "# header\n\
             0102\t10\t/a\tok\n\
             only-two\tfields\n\
             0102\tzz\t/a\tf\n\
             012\t10\t/a\tf\n\
             -\t10\t\tf\n\
             \u{0}\u{ff}\n\
             0102\t11\t/a\n",
        )
        .unwrap();
        let c = SymbolCache::read(&path).unwrap();
        assert_eq!(c.len(), 2);
        assert_eq!(c.diagnostics.count, 5);
        let lines: Vec<String> = c
            .diagnostics
            .first
            .iter()
            .map(|d| d.location.rsplit(':').next().unwrap().to_owned())
            .collect();
        assert_eq!(lines, ["3", "4", "5", "6", "7"]);
        assert!(c.diagnostics.first[1].message.contains("hexadecimal"));
        assert!(c.diagnostics.first[0].location.contains(FILE_NAME));
    }

    #[test]
    fn names_with_tabs__left_out_and_counted() {
        let a = module("/a", &[1]);
        let mut c = SymbolCache::new();
        c.insert(&a, 1, vec!["bad\tname".to_owned()]);
        c.insert(&a, 2, vec!["good".to_owned()]);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        assert_eq!(c.write(&path).unwrap(), 1);
        assert_eq!(SymbolCache::read(&path).unwrap().len(), 1);
    }

    #[test]
    fn a_missing_file__is_an_error_naming_it() {
        let e = SymbolCache::read(Path::new("/nonexistent/symbols.txt")).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/symbols.txt"), "{e}");
    }
}
