//! Reading a recording, or named trace files, ready to join.

use std::path::{Path, PathBuf};

use tracing::{info, warn};

use crate::Diagnostics;
use crate::error::{Error, Result};
use crate::join::stacks::StackStats;
use crate::join::{self, Sink, Summary};
use crate::model::{StringTable, Symbolize};
use crate::read::cpu::CpuTrace;
use crate::read::driver::DriverTrace;
use crate::read::input::GpuInputs;
use crate::read::kineto;
use crate::read::symbols::SymbolCache;
use crate::view::{FullNames, View};

/// What to read: plain data, built from the command line.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct Inputs {
    /// A directory that `gpuperf record --raw-dir` wrote: its GPU traces, and
    /// its CPU trace unless [`Inputs::cpu`] names one. A file here is read as
    /// the first GPU trace, its format found from its content.
    pub recording: Option<PathBuf>,
    /// GPU traces, files or directories of them, in any format read.
    pub gpu: Vec<PathBuf>,
    /// A CPU trace.
    pub cpu: Option<PathBuf>,
    /// The PyTorch profiler reader's options.
    pub kineto: kineto::Options,
    /// How the join pairs and describes what it finds.
    pub join: join::Options,
}

/// Traces read and ready to join.
pub struct Recording {
    strings: StringTable,
    /// The CPU side, when there is one.
    pub cpu: Option<CpuTrace>,
    gpu: Option<GpuInputs>,
    /// How the join pairs and describes what it finds.
    pub opts: join::Options,
    /// What the in-process stacks of the GPU traces held.
    pub inprocess: Option<StackStats>,
    /// The names of the in-process stacks' frames, to keep with a recording.
    pub symbols: Option<SymbolCache>,
    /// The GPU driver's events, when a recording has them (`record --driver`).
    pub driver: Option<DriverTrace>,
    /// The full names of the stack frames the view shortened, once joined.
    pub full_names: FullNames,
    /// The view the stacks were rewritten for, once they are.
    viewed: Option<View>,
    /// The launch stacks the GPU traces carry, as recorded, once the view
    /// rewrote the join's copy.
    raw_launch_stacks: Option<CpuTrace>,
}

impl Recording {
    /// Reads `inputs`. `symbolizer` makes what names the native frames of
    /// in-process stacks; it is called only when a trace has some.
    pub fn open<S: Symbolize>(inputs: &Inputs, symbolizer: impl FnOnce() -> S) -> Result<Self> {
        let mut gpu = inputs.gpu.clone();
        let mut cpu = inputs.cpu.clone();
        match &inputs.recording {
            Some(file) if file.is_file() => gpu.insert(0, file.clone()),
            Some(dir) => {
                if !dir.is_dir() {
                    return Err(Error::NotARecording { path: dir.clone() });
                }
                if driver_only(dir) {
                    // `record --driver` of a program that never loaded CUDA.
                    let mut l = Self::read(&gpu, cpu.as_deref(), &inputs.kineto, symbolizer)?;
                    l.driver = read_driver(std::slice::from_ref(dir))?;
                    l.opts = inputs.join.clone();
                    return Ok(l);
                }
                gpu.push(dir.clone());
                let c = dir.join(super::CPU_TRACE);
                if cpu.is_none() && c.is_file() {
                    cpu = Some(c);
                }
            }
            None => {}
        }
        let mut l = Self::read(&gpu, cpu.as_deref(), &inputs.kineto, symbolizer)?;
        l.opts = inputs.join.clone();
        Ok(l)
    }

    /// Reads GPU traces (files or directories; none for a CPU-only recording)
    /// and a CPU trace.
    fn read<S: Symbolize>(
        gpu_paths: &[PathBuf],
        cpu: Option<&Path>,
        kineto: &kineto::Options,
        symbolizer: impl FnOnce() -> S,
    ) -> Result<Self> {
        let mut strings = StringTable::new();
        let mut gpu = if gpu_paths.is_empty() {
            None
        } else {
            Some(GpuInputs::open_with(gpu_paths, &mut strings, kineto)?)
        };
        let cpu = cpu
            .map(|p| -> Result<CpuTrace> {
                let t = CpuTrace::open(p)?;
                info!(
                    "read {} CPU launches ({} distinct stacks) from `{}`",
                    t.launches.len(),
                    t.stacks.len(),
                    p.display()
                );
                report_diagnostics("CPU", &t.diagnostics);
                Ok(t)
            })
            .transpose()?;
        // Stacks the injection library took in process: GPU-side launch stacks,
        // joined like the importers' ones (a CPU trace's stack wins where both
        // have one).
        let mut inprocess = None;
        let mut symbols = None;
        if let Some(g) = gpu.as_mut().filter(|_| super::any_has_stacks(gpu_paths)) {
            let (stacks, names) = super::stacks::collect(g, gpu_paths, &mut strings, symbolizer)?;
            report_diagnostics("symbols", &names.diagnostics);
            symbols = Some(names);
            if let Some(s) = stacks {
                info!("in-process stacks: {}", s.stats);
                inprocess = Some(s.stats);
                g.add_launch_stacks(s.trace);
            }
        }
        let driver = read_driver(gpu_paths)?;
        Ok(Self {
            strings,
            cpu,
            gpu,
            opts: join::Options::default(),
            inprocess,
            symbols,
            driver,
            full_names: FullNames::default(),
            viewed: None,
            raw_launch_stacks: None,
        })
    }

    /// Whether there is a GPU trace to join.
    pub fn has_gpu(&self) -> bool {
        self.gpu.is_some()
    }

    /// The CPU launch stacks the GPU traces carry (in-process or imported),
    /// complete whatever the view.
    pub fn launch_stacks(&self) -> Option<&CpuTrace> {
        self.raw_launch_stacks
            .as_ref()
            .or_else(|| self.gpu.as_ref().and_then(GpuInputs::launch_stacks))
    }

    /// Runs the join into `sinks`, the stacks shown as [`join::Options::view`]
    /// says.
    pub fn join(&mut self, sinks: &mut [&mut dyn Sink]) -> Result<Summary> {
        if self.gpu.is_none() {
            return Err(Error::NoGpuTrace);
        }
        self.apply_view();
        let Some(gpu) = &self.gpu else {
            return Err(Error::NoGpuTrace);
        };
        let summary = join::merge(self.cpu.as_mut(), gpu, &mut self.strings, &self.opts, sinks)?;
        report_diagnostics("GPU", &summary.gpu_read.diagnostics);
        Ok(summary)
    }
}

impl Recording {
    /// Rewrites the CPU stacks (the CPU trace's and those the GPU traces carry)
    /// as the view shows them, once; notes the full names of shortened frames.
    fn apply_view(&mut self) {
        let view = self.opts.view;
        // Stacks are rewritten once: `opts.view` is set before the first join.
        if self.viewed.is_some() || view.is_complete() {
            return;
        }
        self.viewed = Some(view);
        self.raw_launch_stacks = self
            .gpu
            .as_ref()
            .and_then(GpuInputs::launch_stacks)
            .cloned();
        let full = &mut self.full_names;
        let traces = self
            .cpu
            .iter_mut()
            .chain(self.gpu.as_mut().and_then(GpuInputs::launch_stacks_mut));
        for t in traces {
            let interp = std::mem::take(&mut t.interpreter_frames);
            t.map_stacks(|s| {
                full.note_stack(&view, s);
                view.stack(s, &|f| interp.contains(f))
            });
            t.interpreter_frames = interp;
        }
    }

    /// The CPU stack text `s` as the view shows it (for outputs written
    /// without a join).
    pub(crate) fn view_stack(&self, s: &str) -> String {
        let empty = rustc_hash::FxHashSet::default();
        let interp = self.cpu.as_ref().map_or(&empty, |c| &c.interpreter_frames);
        self.opts.view.stack(s, &|f| interp.contains(f))
    }
}

/// Whether recording directory `dir` holds driver events and nothing else to
/// join: no GPU trace, no CPU trace, no file but what a recording writes.
fn driver_only(dir: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    let names: Vec<String> = entries
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.iter().any(|n| n == super::DRIVER_EVENTS)
        && names.iter().all(|n| {
            n == super::DRIVER_EVENTS || n == super::SYMBOLS || n.ends_with(super::LOG_SUFFIX)
        })
}

/// The driver event file of the first recording directory among `paths` that
/// has one.
pub(crate) fn read_driver(paths: &[PathBuf]) -> Result<Option<DriverTrace>> {
    let Some(p) = paths
        .iter()
        .map(|d| d.join(super::DRIVER_EVENTS))
        .find(|p| p.is_file())
    else {
        return Ok(None);
    };
    let t = DriverTrace::open(&p)?;
    info!(
        "read {} driver events from `{}`",
        t.events.len(),
        p.display()
    );
    report_diagnostics("driver", &t.diagnostics);
    Ok(Some(t))
}

fn report_diagnostics(side: &str, d: &Diagnostics) {
    if d.is_empty() {
        return;
    }
    warn!("skipped {} malformed {side} line(s) or record(s):", d.count);
    for x in &d.first {
        warn!("  {x}");
    }
    if d.count > d.first.len() as u64 {
        warn!("  … and {} more", d.count - d.first.len() as u64);
    }
}
