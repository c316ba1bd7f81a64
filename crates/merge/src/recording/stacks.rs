//! CPU stacks the injection library took in process: found in the GPU traces,
//! symbolized (names kept with a recording first), and written as a CPU trace
//! on request.

use std::fs::File;
use std::io::{BufWriter, Read as _, Write as _};
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::join::stacks::{self, LaunchStacks};
use crate::model::{StringTable, Symbolize};
use crate::read::cpu::{self, CpuTrace, LaunchLine};
use crate::read::gputrace::{self, FLAG_STACKS};
use crate::read::input::GpuInputs;
use crate::read::symbols::{Cached, SymbolCache};

/// Whether any gpuperf GPU trace among `paths` (files, or directories of
/// `*.gputrace`) says it holds in-process stacks. Reads only their headers.
pub(crate) fn any_has_stacks(paths: &[PathBuf]) -> bool {
    let flagged = |p: &Path| {
        let mut h = [0u8; gputrace::HEADER_LEN];
        File::open(p)
            .and_then(|mut f| f.read_exact(&mut h))
            .is_ok_and(|()| gputrace::header_flags(&h).is_some_and(|f| f & FLAG_STACKS != 0))
    };
    paths.iter().any(|p| {
        if p.is_dir() {
            super::gpu_traces(p).any(|t| flagged(&t))
        } else {
            flagged(p)
        }
    })
}

/// The symbol files of recording directories among `paths`.
fn symbol_files_in(paths: &[PathBuf]) -> Vec<PathBuf> {
    paths
        .iter()
        .filter(|p| p.is_dir())
        .map(|d| d.join(super::SYMBOLS))
        .filter(|f| f.is_file())
        .collect()
}

/// The launch stacks of `gpu`, symbolized, or `None` when it carries none; and
/// every name found. Names kept with a recording (`symbols.txt` in the
/// directories among `paths`) come first; `symbolizer`'s names the rest.
pub(super) fn collect<S: Symbolize>(
    gpu: &GpuInputs,
    paths: &[PathBuf],
    strings: &mut StringTable,
    symbolizer: impl FnOnce() -> S,
) -> Result<(Option<LaunchStacks>, SymbolCache)> {
    let mut kept = SymbolCache::new();
    for f in symbol_files_in(paths) {
        // Without them the frames are named from the files, as far as they
        // still exist: worth a warning, not a failed merge.
        match SymbolCache::read(&f) {
            Ok(c) => {
                tracing::info!(
                    "{} names kept with the recording in `{}`",
                    c.len(),
                    f.display()
                );
                kept.merge(c);
            }
            Err(e) => tracing::warn!("{e}; its names are not used"),
        }
    }
    let mut sym = Cached::new(symbolizer(), kept);
    let stacks = stacks::collect(gpu, strings, &mut sym)?;
    Ok((stacks, sym.cache))
}

/// Writes `trace` in gpuperf's CPU trace format (one line per launch with its
/// stack and correlation id). The CPU column is 0: the injection library does not
/// record it. A stack that stops before a root frame (code without unwind info,
/// the depth cap) is written behind `[truncated]`, as the format requires, so
/// that readers of the file count it truncated too.
pub fn write_cpu_trace(trace: &CpuTrace, path: &Path) -> Result<()> {
    let f = File::create(path).map_err(Error::io("create", path))?;
    let mut w = cpu::Writer::new(BufWriter::new(f)).map_err(Error::io("write", path))?;
    // Synchronization calls' stacks charge waits; the file holds launches only.
    for l in trace.launches.iter().filter(|l| !trace.is_wait(l)) {
        let comm = trace.comms.get(&(l.pid, l.pid)).map_or("?", String::as_str);
        let text = trace.stacks.text(l.stack);
        let line = LaunchLine {
            ts_ns: l.ts_ns,
            comm,
            pid: l.pid,
            tid: l.tid,
            cpu: 0,
            correlation_id: l.correlation_id.map_or(0, NonZeroU32::get),
        };
        let frames = if text == cpu::NO_STACK_FRAME {
            None
        } else {
            Some(text.split(';'))
        };
        let mark = (frames.is_some() && !stacks::is_complete(text)).then_some(cpu::TRUNCATED_FRAME);
        w.launch(&line, mark.into_iter().chain(frames.into_iter().flatten()))
            .map_err(Error::io("write", path))?;
    }
    w.into_inner().flush().map_err(Error::io("write", path))
}
