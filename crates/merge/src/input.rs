//! Opening GPU-side inputs: gpuperf's binary traces, the reference tooling's CUPTI
//! text logs, and directories of traces (one file per process).

use std::fs::{self, File};
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};

use crate::cupti_log::{self, CuptiLog};
use crate::diag::Diagnostics;
use crate::error::{Error, Result};
use crate::gputrace::{self, ReadStats};
use crate::model::{Clock, Record, StringTable};

enum Source {
    Binary(PathBuf),
    // Text logs are small and slow to parse, so they are parsed once and kept.
    CuptiLog(CuptiLog),
}

/// A set of GPU traces, read in order, possibly several times.
pub struct GpuInputs {
    sources: Vec<Source>,
}

/// What reading every GPU input saw besides its records.
#[derive(Clone, Debug, Default)]
pub struct GpuReadSummary {
    /// Records delivered.
    pub records: u64,
    /// Files that were cut off, with the offset of their incomplete record.
    pub truncated: Vec<(PathBuf, u64)>,
    /// Unknown record kinds skipped (binary) or record kinds not used (text logs).
    pub skipped: u64,
    /// Malformed records and lines.
    pub diagnostics: Diagnostics,
}

impl GpuInputs {
    /// Opens files and directories. A directory contributes every gpuperf GPU trace
    /// in it, in name order. A named file in neither GPU format is an error.
    pub fn open(paths: &[PathBuf], strings: &mut StringTable) -> Result<Self> {
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
                files.sort();
                let before = sources.len();
                for f in files.into_iter().filter(|f| f.is_file()) {
                    match sniff(&f)? {
                        Kind::Binary => sources.push(Source::Binary(f)),
                        Kind::CuptiLog => sources.push(Source::CuptiLog(parse_log(&f, strings)?)),
                        // Other files (the CPU trace, logs) may share the directory.
                        Kind::Other(_) => {}
                    }
                }
                if sources.len() == before {
                    return Err(Error::NotATrace {
                        path: path.clone(),
                        expected: "directory holding GPU traces",
                        found: "it holds no gpuperf GPU trace or CUPTI log".into(),
                    });
                }
                continue;
            }
            match sniff(path)? {
                Kind::Binary => sources.push(Source::Binary(path.clone())),
                Kind::CuptiLog => sources.push(Source::CuptiLog(parse_log(path, strings)?)),
                Kind::Other(found) => {
                    return Err(Error::NotATrace {
                        path: path.clone(),
                        expected: "GPU trace (gpuperf binary trace or CUPTI text log)",
                        found,
                    });
                }
            }
        }
        Ok(Self { sources })
    }

    /// The clock of the inputs' timestamps: CUPTI text logs are on `CLOCK_REALTIME`.
    pub fn clock(&self) -> Clock {
        if self
            .sources
            .iter()
            .any(|s| matches!(s, Source::CuptiLog(..)))
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
        for source in &self.sources {
            match source {
                Source::Binary(path) => {
                    let file = File::open(path).map_err(|source| Error::Io {
                        action: "open",
                        path: path.clone(),
                        source,
                    })?;
                    let ReadStats {
                        records,
                        truncated_at,
                        unknown_kinds,
                        diagnostics,
                        ..
                    } = gputrace::read(
                        BufReader::with_capacity(1 << 20, file),
                        path,
                        strings,
                        visit,
                    )?;
                    summary.records += records;
                    summary.skipped += unknown_kinds;
                    summary.diagnostics.extend(diagnostics);
                    if let Some(at) = truncated_at {
                        summary.truncated.push((path.clone(), at));
                    }
                }
                Source::CuptiLog(log) => {
                    for r in &log.records {
                        visit(r, strings);
                    }
                    summary.records += log.records.len() as u64;
                    summary.skipped += log.skipped_kinds;
                    summary.diagnostics.extend(log.diagnostics.clone());
                }
            }
        }
        Ok(summary)
    }
}

fn parse_log(path: &Path, strings: &mut StringTable) -> Result<CuptiLog> {
    let text = fs::read(path).map_err(|source| Error::Io {
        action: "read",
        path: path.to_owned(),
        source,
    })?;
    Ok(cupti_log::parse(&text, path, strings))
}

#[derive(PartialEq, Eq)]
enum Kind {
    Binary,
    CuptiLog,
    Other(String),
}

fn sniff(path: &Path) -> Result<Kind> {
    let mut head = [0u8; 256];
    let mut file = File::open(path).map_err(|source| Error::Io {
        action: "open",
        path: path.to_owned(),
        source,
    })?;
    let mut n = 0;
    while n < head.len() {
        match file.read(&mut head[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(source) => {
                return Err(Error::Io {
                    action: "read",
                    path: path.to_owned(),
                    source,
                });
            }
        }
    }
    let head = &head[..n];
    Ok(if gputrace::is_gpu_trace(head) {
        Kind::Binary
    } else if cupti_log::looks_like_cupti_log(head) {
        Kind::CuptiLog
    } else {
        Kind::Other(crate::error::describe_start(&head[..n.min(24)]))
    })
}
