//! Loading traces and writing the outputs: shared by `merge` and `record`.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use gpuperf_merge::Diagnostics;
use gpuperf_merge::join::{self, Sink, Summary};
use gpuperf_merge::model::{SIMULATED_GPU_NOTE, StringTable};
use gpuperf_merge::read::cpu::CpuTrace;
use gpuperf_merge::read::driver::{self as driver_file, DriverTrace};
use gpuperf_merge::read::input::GpuInputs;
use gpuperf_merge::read::kineto;
use gpuperf_merge::write::report::{Reporter, Row};
use gpuperf_merge::write::{chrome, folded, idle, perfetto, pprof, svg};
use tracing::{info, warn};

use crate::cli::InputArgs;

/// The CPU trace's name inside a recording directory.
pub const CPU_TRACE: &str = "cpu.txt";

/// Traces read and ready to join.
pub struct Loaded {
    strings: StringTable,
    /// The CPU side, when there is one.
    pub cpu: Option<CpuTrace>,
    gpu: Option<GpuInputs>,
    /// How the join pairs and describes what it finds.
    pub opts: join::Options,
    /// What the in-process stacks of the GPU traces held.
    pub inprocess: Option<join::stacks::StackStats>,
    /// The names of the in-process stacks' frames, to keep with a recording.
    pub symbols: Option<gpuperf_merge::read::symbols::SymbolCache>,
    /// The GPU driver's events, when a recording has them (`record --driver`).
    pub driver: Option<DriverTrace>,
}

impl Loaded {
    /// Reads what `merge` and `report` are pointed at.
    pub fn from_args(input: &InputArgs) -> Result<Self> {
        let mut gpu = input.gpu.clone();
        let mut cpu = input.cpu.clone();
        if let Some(dir) = &input.recording {
            anyhow::ensure!(
                dir.is_dir(),
                "`{}` is not a recording directory (gpuperf record --raw-dir writes one)",
                dir.display()
            );
            gpu.push(dir.clone());
            let c = dir.join(CPU_TRACE);
            if cpu.is_none() && c.is_file() {
                cpu = Some(c);
            }
        }
        let mut kineto = kineto::Options::default();
        kineto.link_backward = !input.no_link_backward;
        let mut l = Self::open_with(&gpu, cpu.as_deref(), &kineto)?;
        l.opts.slack_ns = input.slack_us * 1000;
        l.opts.cpu_clock_offset_ns = input.cpu_clock_offset_ns;
        Ok(l)
    }

    /// Reads GPU traces (files or directories; none for a CPU-only recording)
    /// and a CPU trace.
    pub fn open(gpu: &[PathBuf], cpu: Option<&Path>) -> Result<Self> {
        Self::open_with(gpu, cpu, &kineto::Options::default())
    }

    /// [`Loaded::open`], with the PyTorch profiler reader's options.
    pub fn open_with(
        gpu: &[PathBuf],
        cpu: Option<&Path>,
        kineto: &kineto::Options,
    ) -> Result<Self> {
        let gpu_paths = gpu;
        let mut strings = StringTable::new();
        let gpu = if gpu.is_empty() {
            None
        } else {
            Some(GpuInputs::open_with(gpu, &mut strings, kineto)?)
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
        let mut gpu = gpu;
        let mut inprocess = None;
        let mut symbols = None;
        if let Some(g) = gpu
            .as_mut()
            .filter(|_| crate::inproc::any_has_stacks(gpu_paths))
        {
            let (stacks, names) = crate::inproc::collect(g, gpu_paths, &mut strings)?;
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
        })
    }

    /// The CPU launch stacks the GPU traces carry (in-process or imported).
    pub fn launch_stacks(&self) -> Option<&CpuTrace> {
        self.gpu.as_ref().and_then(GpuInputs::launch_stacks)
    }

    /// Runs the join into `sinks`.
    pub fn join(&mut self, sinks: &mut [&mut dyn Sink]) -> Result<Summary> {
        let Some(gpu) = &self.gpu else {
            anyhow::bail!("no GPU trace to join");
        };
        let summary = join::merge(self.cpu.as_mut(), gpu, &mut self.strings, &self.opts, sinks)?;
        report_diagnostics("GPU", &summary.gpu_read.diagnostics);
        Ok(summary)
    }
}

/// The driver event file of the first recording directory among `paths` that
/// has one.
pub fn read_driver(paths: &[PathBuf]) -> Result<Option<DriverTrace>> {
    let Some(p) = paths
        .iter()
        .map(|d| d.join(driver_file::FILE_NAME))
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

/// gpuperf GPU traces at `path`: 1 for a file, those inside a directory.
pub fn gpu_trace_files(path: &Path) -> usize {
    if !path.is_dir() {
        return 1;
    }
    std::fs::read_dir(path)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".gputrace"))
        .count()
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

/// Whether a recorder said its trace was made on the simulated CUDA runtime.
pub fn simulated(summary: &Summary) -> bool {
    // Notes read "pid N: text".
    summary.notes.iter().any(|n| {
        n.split_once(": ")
            .is_some_and(|(_, t)| t.starts_with(SIMULATED_GPU_NOTE))
    })
}

/// Output files; each `None` is not written.
#[derive(Clone, Debug, Default)]
pub struct Outputs {
    /// Merged folded stacks (`-` for stdout).
    pub folded: Option<PathBuf>,
    /// Chrome-trace timeline.
    pub chrome: Option<PathBuf>,
    /// SVG flamegraph.
    pub svg: Option<PathBuf>,
    /// Flamegraph title.
    pub title: String,
    /// Subtitle, e.g. the command line.
    pub subtitle: Option<String>,
    /// Idle-time folded stacks.
    pub idle: Option<PathBuf>,
    /// Idle-time flamegraph.
    pub idle_svg: Option<PathBuf>,
}

/// A file written, with how to look at it.
pub struct Written {
    /// Where.
    pub path: PathBuf,
    /// "open it in …".
    pub how: &'static str,
}

/// What a join produced besides the files.
pub struct Joined {
    /// The match summary.
    pub summary: Summary,
    /// Kernels by total GPU time.
    pub kernels: Vec<Row>,
    /// Files written.
    pub written: Vec<Written>,
}

fn create(path: &Path) -> Result<BufWriter<File>> {
    let f = File::create(path).with_context(|| format!("failed to create `{}`", path.display()))?;
    Ok(BufWriter::with_capacity(1 << 20, f))
}

/// Joins and writes every output named. Every file is created before the join,
/// so a bad path fails fast.
pub fn write(l: &mut Loaded, outs: &Outputs) -> Result<Joined> {
    write_with_pprof(l, outs, None)
}

/// [`write()`], plus a gzipped pprof profile when `pprof` names a file.
pub fn write_with_pprof(l: &mut Loaded, outs: &Outputs, pprof: Option<&Path>) -> Result<Joined> {
    let pprof_file = pprof
        .map(|p| Ok::<_, anyhow::Error>((p, create(p)?)))
        .transpose()?;
    let mut profile = pprof::Builder::new();
    let folded_file = match &outs.folded {
        Some(p) if p.as_os_str() != "-" => Some((p, create(p)?)),
        _ => None,
    };
    let svg_file = outs
        .svg
        .as_deref()
        .map(|p| Ok::<_, anyhow::Error>((p, create(p)?)))
        .transpose()?;
    let mut chrome = outs
        .chrome
        .as_deref()
        .map(|p| Timeline::create(p, l.driver.clone()))
        .transpose()?;
    let idle_file = outs.idle.as_deref().map(create).transpose()?;
    let idle_svg_file = outs.idle_svg.as_deref().map(create).transpose()?;
    let mut idle = (idle_file.is_some() || idle_svg_file.is_some()).then(idle::IdleFolder::new);
    // Several processes in the data stay apart under a frame each.
    let mut folder = folded::Folder::new();
    let mut reporter = Reporter::new();
    let summary = {
        let mut sinks: Vec<&mut dyn Sink> = vec![&mut folder, &mut reporter];
        if let Some(c) = chrome.as_mut() {
            sinks.push(c.sink());
        }
        if pprof_file.is_some() {
            sinks.push(&mut profile);
        }
        if let Some(idler) = idle.as_mut() {
            sinks.push(idler);
        }
        l.join(&mut sinks)?
    };
    let mut written = Vec::new();
    if let Some((p, f)) = folded_file {
        folder
            .write(f)
            .with_context(|| format!("failed to write `{}`", p.display()))?;
        written.push(Written {
            path: p.clone(),
            how: if folder.unit() == "ns" {
                "folded stacks for inferno or flamegraph.pl, weights in ns (all the GPU work \
                 together lasted under 1 µs)"
            } else {
                "folded stacks for inferno or flamegraph.pl"
            },
        });
    } else if outs.folded.is_some() {
        folder.write(io::stdout().lock())?;
    }
    if let (Some(p), Some(c)) = (&outs.chrome, chrome) {
        written.push(c.finish(p)?);
    }
    if let (Some(p), Some(f), Some(idler)) = (&outs.idle_svg, idle_svg_file, &idle) {
        let lines: Vec<String> = idler
            .lines()
            .iter()
            .map(|(s, w)| format!("{s} {w}"))
            .collect();
        let mut o = outs.clone();
        // A title of the user's names the run: it becomes the subtitle.
        if o.title != crate::cli::DEFAULT_TITLE {
            o.subtitle = Some(std::mem::take(&mut o.title));
        }
        o.title = "gpuperf: GPU idle time by the CPU stack that made it wait".to_owned();
        if simulated(&summary) {
            o.title = format!("{} ({SIMULATED_GPU_NOTE})", o.title);
        }
        render_svg(&o, "µs", &lines, p, f)?;
        written.push(Written {
            path: p.clone(),
            how: if lines.is_empty() {
                "it only says that no stream had a gap to draw"
            } else {
                "open it in a web browser"
            },
        });
    }
    if let (Some(p), Some(f), Some(idler)) = (&outs.idle, idle_file, &idle) {
        idler
            .write(f)
            .with_context(|| format!("failed to write `{}`", p.display()))?;
        let (idle_ns, span_ns) = idler.streams().iter().fold((0u64, 0u64), |(i, s), (_, x)| {
            (i + x.idle_ns, s + x.span_ns)
        });
        written.push(Written {
            path: p.to_path_buf(),
            how: if span_ns == 0 {
                "idle-time folded stacks: no stream had two pieces of work, so no gaps"
            } else {
                "idle-time folded stacks (µs): why each stream waited, by CPU stack"
            },
        });
        if span_ns > 0 {
            tracing::info!(
                "streams idle {:.1}% of their active time ({} of {} µs)",
                idle_ns as f64 * 100.0 / span_ns as f64,
                idle_ns / 1000,
                span_ns / 1000
            );
        }
    }
    if let Some((p, f)) = pprof_file {
        profile
            .write(f)
            .with_context(|| format!("failed to write `{}`", p.display()))?;
        written.push(Written {
            path: p.to_path_buf(),
            how: "pprof profile for Pyroscope, Parca, Grafana or `go tool pprof`",
        });
    }
    if let Some((p, f)) = svg_file {
        let lines: Vec<String> = folder
            .lines()
            .iter()
            .map(|(s, w)| format!("{s} {w}"))
            .collect();
        let mut outs = outs.clone();
        if simulated(&summary) {
            outs.title = format!("{} ({SIMULATED_GPU_NOTE})", outs.title);
        }
        render_svg(&outs, folder.unit(), &lines, p, f)?;
        written.push(Written {
            path: p.to_path_buf(),
            how: if folder.total() == 0 {
                "it only says that there was no GPU work to draw"
            } else {
                "open it in a web browser"
            },
        });
    }
    Ok(Joined {
        summary,
        kernels: reporter.rows(),
        written,
    })
}

/// The timeline writer that the file name asks for: Perfetto's protobuf for
/// `.pftrace` and `.perfetto-trace`, Chrome JSON otherwise.
enum Timeline {
    Chrome(Box<chrome::Writer<BufWriter<File>>>),
    Perfetto(Box<perfetto::Writer<BufWriter<File>>>),
}

/// A JSON timeline larger than this gets a hint to write `.pftrace` instead:
/// Perfetto's UI runs out of memory on JSON files of a few hundred MiB.
const LARGE_JSON: u64 = 256 << 20;

impl Timeline {
    fn create(p: &Path, driver: Option<DriverTrace>) -> Result<Self> {
        let f = create(p)?;
        Ok(if perfetto::wanted_for(p) {
            let mut w = perfetto::Writer::new(f)?.with_idle_slices();
            if let Some(d) = driver {
                w = w.with_driver(d);
            }
            Self::Perfetto(Box::new(w))
        } else {
            let mut w = chrome::Writer::new(f)?.with_idle_slices();
            if let Some(d) = driver {
                w = w.with_driver(d);
            }
            Self::Chrome(Box::new(w))
        })
    }

    fn sink(&mut self) -> &mut dyn Sink {
        match self {
            Self::Chrome(w) => &mut **w,
            Self::Perfetto(w) => &mut **w,
        }
    }

    fn finish(self, p: &Path) -> Result<Written> {
        let what = || format!("failed to write `{}`", p.display());
        match self {
            Self::Chrome(w) => {
                let mut f = w.into_inner();
                f.flush().with_context(what)?;
                let bytes = f.get_ref().metadata().map_or(0, |m| m.len());
                if let Some(hint) = large_json_hint(p, bytes) {
                    warn!("{hint}");
                }
            }
            Self::Perfetto(w) => {
                w.into_inner().flush().with_context(what)?;
                return Ok(Written {
                    path: p.to_path_buf(),
                    how: "open it in https://ui.perfetto.dev",
                });
            }
        }
        Ok(Written {
            path: p.to_path_buf(),
            how: "open it in https://ui.perfetto.dev or chrome://tracing",
        })
    }
}

/// A timeline of GPU driver events alone, without a GPU trace (`gpuperf
/// monitor --timeline`): the driver's tracks, and each process's vblank
/// events; Chrome JSON, or Perfetto's protobuf for a `.pftrace` path.
pub fn driver_timeline(trace: DriverTrace, p: &Path) -> Result<Written> {
    let mut strings = StringTable::new();
    let none = GpuInputs::open(&[], &mut strings)?;
    let mut timeline = Timeline::create(p, Some(trace))?;
    join::merge(
        None,
        &none,
        &mut strings,
        &join::Options::default(),
        &mut [timeline.sink()],
    )?;
    timeline.finish(p)
}

/// One line suggesting `.pftrace` when a JSON timeline of `bytes` is too large
/// for Perfetto's UI.
fn large_json_hint(p: &Path, bytes: u64) -> Option<String> {
    (bytes > LARGE_JSON).then(|| {
        format!(
            "`{}` is {} MiB, more than Perfetto's UI may open: write `-c {}` instead for a \
             smaller protobuf timeline",
            p.display(),
            bytes >> 20,
            p.with_extension("pftrace").display()
        )
    })
}

fn render_svg(
    outs: &Outputs,
    count_name: &str,
    lines: &[String],
    path: &Path,
    out: BufWriter<File>,
) -> Result<()> {
    let mut opts = svg::Options::default();
    opts.title = outs.title.clone();
    opts.subtitle = outs.subtitle.clone();
    opts.count_name = count_name.to_owned();
    svg::render(&opts, lines.iter().map(String::as_str), out)
        .with_context(|| format!("failed to write `{}`", path.display()))
}

/// Without a GPU trace: folded stacks weighted by launch count, and their
/// flamegraph. The timeline needs GPU work, so it is not written.
pub fn write_cpu_only(l: &Loaded, outs: &Outputs) -> Result<Vec<Written>> {
    let Some(cpu) = &l.cpu else {
        return Ok(Vec::new());
    };
    let mut counts: HashMap<&str, u64> = HashMap::new();
    for launch in &cpu.launches {
        *counts.entry(cpu.stacks.text(launch.stack)).or_default() += 1;
    }
    let mut lines: Vec<String> = counts.iter().map(|(s, n)| format!("{s} {n}")).collect();
    lines.sort_unstable();
    let mut written = Vec::new();
    if let Some(p) = &outs.folded {
        let mut text = String::new();
        for line in &lines {
            let _ = writeln!(text, "{line}");
        }
        if p.as_os_str() == "-" {
            io::stdout().lock().write_all(text.as_bytes())?;
        } else {
            let mut f = create(p)?;
            f.write_all(text.as_bytes())
                .and_then(|()| f.flush())
                .with_context(|| format!("failed to write `{}`", p.display()))?;
            written.push(Written {
                path: p.clone(),
                how: "folded stacks (launch counts) for inferno or flamegraph.pl",
            });
        }
    }
    if let Some(p) = &outs.svg {
        render_svg(outs, "launches", &lines, p, create(p)?)?;
        written.push(Written {
            path: p.clone(),
            how: "open it in a web browser",
        });
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_json_hint_names_the_pftrace_file() {
        let p = Path::new("out/timeline.json");
        assert_eq!(large_json_hint(p, LARGE_JSON), None);
        let hint = large_json_hint(p, 3 << 30).unwrap();
        assert!(hint.contains("3072 MiB"), "{hint}");
        assert!(hint.contains("`-c out/timeline.pftrace`"), "{hint}");
    }
}
