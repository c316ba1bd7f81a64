//! Opening GPU-side inputs. The format of each file is found from its content:
//!
//! | content | format | reader |
//! |---|---|---|
//! | `GPUPERF` magic | gpuperf's binary GPU trace, streamed at each pass | [`gputrace`] |
//! | gzip magic | a gzipped PyTorch profiler (Kineto) trace, checked by peeking at the decompressed JSON | [`kineto`] |
//! | a JSON object | a PyTorch profiler (Kineto) trace | [`kineto`] |
//! | `SQLite format 3` | an Nsight Systems SQLite export, which must hold the CUPTI tables | [`nsys`] |
//! | a line starting with a CUPTI record kind | the reference tooling's CUPTI text log | [`cupti_log`] |
//!
//! A directory contributes every gpuperf GPU trace, CUPTI log, `*.pt.trace.json(.gz)`
//! and `*.sqlite` in it, in name order; other files there are ignored.
//!
//! The foreign formats are read whole when opened, into an [`Imported`] trace: their
//! records are kept in memory, and the CPU launch stacks they carry (Kineto's Python
//! and operator stacks, nsys's call chains) are gathered in
//! [`GpuInputs::launch_stacks`], which the join uses like a CPU trace.

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};

use crate::diag::Diagnostics;
use crate::error::{Error, Result};
use crate::model::{Clock, Record, StringTable};
use crate::read::cpu::CpuTrace;
use crate::read::cupti_log;
use crate::read::gputrace::{self, ReadStats};
use crate::read::imported::Imported;
use crate::read::kineto;
use crate::read::nsys;

/// How many bytes of a file (decompressed, for gzip) are looked at to find its format.
const HEAD: usize = 64 * 1024;

enum Source {
    Binary(PathBuf),
    // Foreign traces are read once, when opened, and kept.
    Imported(Box<Imported>),
}

/// A set of GPU traces, read in order, possibly several times.
pub struct GpuInputs {
    sources: Vec<Source>,
    launch_stacks: Option<CpuTrace>,
}

/// What reading every GPU input saw besides its records.
#[derive(Clone, Debug, Default)]
pub struct GpuReadSummary {
    /// Records delivered.
    pub records: u64,
    /// Files that were cut off, with the offset of their incomplete record.
    pub truncated: Vec<(PathBuf, u64)>,
    /// Recordings not closed by their process's exit flush (it was killed, or
    /// ended with `_exit`): the end of what the process did is missing.
    pub unclosed: Vec<PathBuf>,
    /// Unknown record kinds skipped (binary) or record kinds not used (text logs,
    /// Kineto events).
    pub skipped: u64,
    /// Lines of text logs that are not records (the reference tool's own output).
    pub other_lines: u64,
    /// Messages from the readers, each naming its file.
    pub notes: Vec<String>,
    /// Malformed records and lines.
    pub diagnostics: Diagnostics,
}

impl GpuInputs {
    /// Opens files and directories. A named file in no GPU format is an error.
    pub fn open(paths: &[PathBuf], strings: &mut StringTable) -> Result<Self> {
        Self::open_with(paths, strings, &kineto::Options::default())
    }

    /// [`GpuInputs::open`], with the PyTorch profiler reader's options.
    pub(crate) fn open_with(
        paths: &[PathBuf],
        strings: &mut StringTable,
        kineto: &kineto::Options,
    ) -> Result<Self> {
        let mut sources = Vec::new();
        for path in paths {
            if path.is_dir() {
                let io_err = |source| Error::Io {
                    action: "list",
                    path: path.clone(),
                    source,
                };
                let mut files: Vec<PathBuf> = fs::read_dir(path)
                    .map_err(io_err)?
                    .filter_map(|e| e.ok().map(|e| e.path()))
                    .collect();
                files.sort_by_key(|f| recording_order(f));
                let before = sources.len();
                for f in files.into_iter().filter(|f| f.is_file()) {
                    let kind = sniff(&f)?;
                    // Other JSON files (a timeline gpuperf wrote, say) may share the
                    // directory: only profiler traces by their usual name are read.
                    let by_name = match kind {
                        Kind::Kineto { .. } => {
                            has_suffix(&f, &[".pt.trace.json", ".pt.trace.json.gz"])
                        }
                        Kind::Sqlite => has_suffix(&f, &[".sqlite"]),
                        _ => true,
                    };
                    if by_name {
                        // The CPU trace, logs and other files are skipped here.
                        if let Some(s) = open_source(&f, kind, strings, kineto, true)? {
                            sources.push(s);
                        }
                    }
                }
                if sources.len() == before {
                    return Err(Error::NotATrace {
                        path: path.clone(),
                        expected: "directory holding GPU traces",
                        found: "it holds no gpuperf GPU trace, CUPTI log, PyTorch profiler trace or Nsight Systems export".into(),
                    });
                }
                continue;
            }
            let kind = sniff(path)?;
            if let Some(s) = open_source(path, kind, strings, kineto, false)? {
                sources.push(s);
            }
        }
        let mut launch_stacks: Option<CpuTrace> = None;
        for s in &mut sources {
            if let Source::Imported(imp) = s
                && let Some(stacks) = imp.launch_stacks.take()
            {
                match &mut launch_stacks {
                    Some(all) => all.append(&stacks),
                    None => launch_stacks = Some(stacks),
                }
            }
        }
        Ok(Self {
            sources,
            launch_stacks,
        })
    }

    /// CPU launch stacks that the GPU inputs carry themselves, keyed by (pid,
    /// correlation id): the stacks of a PyTorch profiler trace or of an Nsight
    /// Systems export. The join uses them exactly like a CPU trace's launches.
    pub fn launch_stacks(&self) -> Option<&CpuTrace> {
        self.launch_stacks.as_ref()
    }

    /// The CPU launch stacks the inputs carry, to rewrite them for a view.
    pub(crate) fn launch_stacks_mut(&mut self) -> Option<&mut CpuTrace> {
        self.launch_stacks.as_mut()
    }

    /// Adds CPU launch stacks found after opening, keyed by (pid, correlation id)
    /// like the importers' ones: the injection library's in-process stacks, once
    /// symbolized ([`crate::join::stacks::collect`]).
    pub fn add_launch_stacks(&mut self, stacks: CpuTrace) {
        match &mut self.launch_stacks {
            Some(all) => all.append(&stacks),
            None => self.launch_stacks = Some(stacks),
        }
    }

    /// The clock of the inputs' timestamps: gpuperf's traces are on
    /// `CLOCK_MONOTONIC`; CUPTI text logs and the foreign formats on wall-clock time.
    pub fn clock(&self) -> Clock {
        if self
            .sources
            .iter()
            .any(|s| matches!(s, Source::Imported(i) if i.clock == Clock::Realtime))
        {
            Clock::Realtime
        } else {
            Clock::Monotonic
        }
    }

    /// Calls `visit` for every record of every input, in order, with the table its
    /// names are interned in.
    pub fn visit(
        &self,
        strings: &mut StringTable,
        visit: &mut dyn FnMut(&Record, &StringTable),
    ) -> Result<GpuReadSummary> {
        let mut summary = GpuReadSummary::default();
        // Recordings per pid so far: a process that execs itself keeps its pid
        // and writes one file per image (see `image_pid`).
        let mut images: HashMap<u32, u32> = HashMap::new();
        for source in &self.sources {
            match source {
                Source::Binary(path) => {
                    let file = File::open(path).map_err(Error::io("open", path))?;
                    // The pid this file's records are given: its own, or an
                    // image's (set at the file's PROCESS record).
                    let mut pid_as: Option<(u32, u32)> = None;
                    let mut renamed = |r: &Record, st: &StringTable| {
                        if let Record::Process(p) = r {
                            let n = images.entry(p.pid).or_insert(0);
                            pid_as = (*n > 0).then(|| (p.pid, image_pid(p.pid, *n)));
                            *n += 1;
                        }
                        match pid_as {
                            Some((_, as_pid)) => {
                                let mut r = r.clone();
                                *r.pid_mut() = as_pid;
                                visit(&r, st);
                            }
                            None => visit(r, st),
                        }
                    };
                    let stats = gputrace::read(
                        BufReader::with_capacity(1 << 20, file),
                        path,
                        strings,
                        &mut renamed,
                    )?;
                    if let Some((pid, as_pid)) = pid_as {
                        summary.notes.push(format!(
                            "`{}`: pid {pid} again (a process that executed itself, or a \
                             reused pid): shown as process {as_pid}",
                            path.display()
                        ));
                    }
                    if stats.unclosed() {
                        summary.unclosed.push(path.clone());
                    }
                    let ReadStats {
                        records,
                        truncated_at,
                        unknown_kinds,
                        diagnostics,
                        ..
                    } = stats;
                    summary.records += records;
                    summary.skipped += unknown_kinds;
                    summary.diagnostics.extend(diagnostics);
                    if let Some(at) = truncated_at {
                        summary.truncated.push((path.clone(), at));
                    }
                }
                Source::Imported(imp) => {
                    for r in &imp.records {
                        visit(r, strings);
                    }
                    summary.records += imp.records.len() as u64;
                    summary.skipped += imp.skipped;
                    summary.other_lines += imp.other_lines;
                    summary.diagnostics.extend(imp.diagnostics.clone());
                    if let Some(at) = imp.truncated_at {
                        summary.truncated.push((imp.path.clone(), at));
                    }
                    summary.notes.extend(
                        imp.notes
                            .iter()
                            .map(|n| format!("`{}`: {n}", imp.path.display())),
                    );
                }
            }
        }
        Ok(summary)
    }
}

/// The pid given to the `n`th (from 1) further recording of process `pid`:
/// above Linux's largest pid (2^22), so that it names no other process.
pub(crate) fn image_pid(pid: u32, n: u32) -> u32 {
    pid.wrapping_add(n << 22)
}

/// The order files of a directory are read in: by name, except that the
/// injection library's numbered names for a taken one (`gpu-42.1.gputrace`,
/// a process that executed itself) come after the first (`gpu-42.gputrace`).
fn recording_order(path: &Path) -> (String, u32, String) {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if let Some(stem) = name.strip_suffix(".gputrace") {
        if let Some((base, n)) = stem.rsplit_once('.')
            && let Ok(n) = n.parse::<u32>()
        {
            return (format!("{base}.gputrace"), n, name);
        }
        return (name.clone(), 0, name);
    }
    (name.clone(), 0, name)
}

fn has_suffix(path: &Path, suffixes: &[&str]) -> bool {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    suffixes.iter().any(|s| name.ends_with(s))
}

/// Reads `path` as `kind`. In a directory (`lenient`), files in no GPU format are
/// skipped (`None`); a named file in no GPU format is an error.
fn open_source(
    path: &Path,
    kind: Kind,
    strings: &mut StringTable,
    kineto_options: &kineto::Options,
    lenient: bool,
) -> Result<Option<Source>> {
    let open = || File::open(path).map_err(Error::io("open", path));
    Ok(Some(match kind {
        Kind::Binary => Source::Binary(path.to_owned()),
        Kind::CuptiLog => {
            let text = fs::read(path).map_err(Error::io("read", path))?;
            let log = cupti_log::parse(&text, path, strings);
            let mut imp = Imported::new(path, "CUPTI text log", Clock::Realtime);
            imp.records = log.records;
            imp.skipped = log.skipped_kinds;
            imp.other_lines = log.other_lines;
            imp.diagnostics = log.diagnostics;
            Source::Imported(Box::new(imp))
        }
        Kind::Kineto { gzip } => {
            let file = BufReader::with_capacity(1 << 20, open()?);
            let imp = if gzip {
                let gz = flate2::bufread::MultiGzDecoder::new(file);
                kineto::read_with(gz, path, strings, kineto_options)?
            } else {
                kineto::read_with(file, path, strings, kineto_options)?
            };
            Source::Imported(Box::new(imp))
        }
        Kind::Sqlite => Source::Imported(Box::new(nsys::read(path, strings)?)),
        Kind::Other(_) if lenient => return Ok(None),
        Kind::Other(found) => {
            return Err(Error::NotATrace {
                path: path.to_owned(),
                expected: "GPU trace (gpuperf trace, CUPTI text log, PyTorch profiler trace or Nsight Systems SQLite export)",
                found,
            });
        }
    }))
}

#[derive(PartialEq, Eq, Debug)]
enum Kind {
    Binary,
    CuptiLog,
    Kineto { gzip: bool },
    Sqlite,
    Other(String),
}

/// Reads up to `HEAD` bytes of `input`.
fn read_head(mut input: impl Read) -> std::io::Result<Vec<u8>> {
    let mut head = Vec::with_capacity(HEAD);
    input.by_ref().take(HEAD as u64).read_to_end(&mut head)?;
    Ok(head)
}

fn sniff(path: &Path) -> Result<Kind> {
    let io_err = |action, source| Error::Io {
        action,
        path: path.to_owned(),
        source,
    };
    let file = File::open(path).map_err(|e| io_err("open", e))?;
    let head = read_head(file).map_err(|e| io_err("read", e))?;
    Ok(if gputrace::is_gpu_trace(&head) {
        Kind::Binary
    } else if head.starts_with(&[0x1f, 0x8b]) {
        // Peek into the decompressed start; a file cut off early still has one.
        let inner = read_head(flate2::read::MultiGzDecoder::new(&head[..]))
            .or_else(|_| {
                let mut out = Vec::new();
                let mut d = flate2::read::MultiGzDecoder::new(&head[..]);
                let mut buf = [0u8; 4096];
                while let Ok(n @ 1..) = d.read(&mut buf) {
                    out.extend_from_slice(&buf[..n]);
                }
                Ok::<_, std::io::Error>(out)
            })
            .unwrap_or_default();
        if kineto::looks_like_kineto(&inner) {
            Kind::Kineto { gzip: true }
        } else {
            Kind::Other(format!(
                "it is gzip-compressed, and the decompressed data is not a PyTorch profiler trace: {}",
                crate::error::describe_start(&inner[..inner.len().min(24)])
            ))
        }
    } else if nsys::is_sqlite(&head) {
        Kind::Sqlite
    } else if kineto::looks_like_kineto(&head) {
        Kind::Kineto { gzip: false }
    } else if cupti_log::looks_like_cupti_log(&head) {
        Kind::CuptiLog
    } else {
        Kind::Other(crate::error::describe_start(&head[..head.len().min(24)]))
    })
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    fn sniff_bytes(bytes: &[u8]) -> Kind {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(bytes).unwrap();
        sniff(f.path()).unwrap()
    }

    fn gzip(bytes: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(bytes).unwrap();
        e.finish().unwrap()
    }

    #[test]
    fn formats_are_found_from_content() {
        assert_eq!(
            sniff_bytes(b" {\"traceEvents\": []}"),
            Kind::Kineto { gzip: false }
        );
        assert_eq!(
            sniff_bytes(&gzip(b"{\"schemaVersion\": 1, \"traceEvents\": []}")),
            Kind::Kineto { gzip: true }
        );
        // A gzip file cut off early is still recognised from what it holds.
        let gz = gzip(&[b"{\"traceEvents\": [".as_slice(), &[b' '; 300_000]].concat());
        assert_eq!(
            sniff_bytes(&gz[..gz.len() / 2]),
            Kind::Kineto { gzip: true }
        );
        assert!(matches!(sniff_bytes(&gzip(b"hello")), Kind::Other(m) if m.contains("gzip")));
        assert_eq!(sniff_bytes(b"SQLite format 3\0rest"), Kind::Sqlite);
        assert_eq!(
            sniff_bytes(b"Found 2 devices\nRUNTIME [ 1, 2 ] duration 1"),
            Kind::CuptiLog
        );
        assert!(matches!(sniff_bytes(b"hello\n"), Kind::Other(_)));
        assert!(matches!(sniff_bytes(b""), Kind::Other(m) if m == "it is empty"));
    }

    /// Issue 39, item 3: a process that executes itself writes one trace per
    /// image under one pid (`gpu-42.gputrace`, then `gpu-42.1.gputrace`), with
    /// correlation ids starting again. Both are read, the later image as a
    /// process of its own, so that neither's calls meet the other's GPU work.
    #[test]
    fn two_recordings_of_one_pid_are_both_read_as_two_processes() {
        use crate::model::{ApiCall, ApiDomain, Process};
        let dir = tempfile::tempdir().unwrap();
        let mut strings = StringTable::new();
        let name = strings.intern("cudaLaunchKernel");
        for (file, exe) in [
            ("gpu-42.1.gputrace", "second"),
            ("gpu-42.gputrace", "first"),
        ] {
            let mut w = gputrace::Writer::new(Vec::new()).unwrap();
            for r in [
                Record::Process(Process {
                    pid: 42,
                    ppid: Some(1),
                    exe: exe.into(),
                    start_ns: 1,
                    start_realtime_ns: None,
                }),
                Record::Api(ApiCall {
                    pid: 42,
                    tid: 42,
                    start_ns: 2,
                    end_ns: 3,
                    correlation_id: 1,
                    cbid: 211,
                    domain: ApiDomain::Runtime,
                    name,
                }),
            ] {
                w.write(&r, &strings).unwrap();
            }
            fs::write(dir.path().join(file), w.into_inner()).unwrap();
        }
        let mut strings = StringTable::new();
        let inputs = GpuInputs::open(&[dir.path().to_owned()], &mut strings).unwrap();
        let mut seen = Vec::new();
        let summary = inputs
            .visit(&mut strings, &mut |r, _| match r {
                Record::Process(p) => seen.push((p.exe.clone(), p.pid)),
                Record::Api(a) => seen.push(("api".into(), a.pid)),
                _ => {}
            })
            .unwrap();
        let again = image_pid(42, 1);
        assert_eq!(
            seen,
            [
                ("first".into(), 42),
                ("api".into(), 42),
                ("second".into(), again),
                ("api".into(), again),
            ]
        );
        assert_eq!(summary.notes.len(), 1, "{:?}", summary.notes);
        assert!(
            summary.notes[0].contains(&format!("shown as process {again}")),
            "{:?}",
            summary.notes
        );
    }
}
