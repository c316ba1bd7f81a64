//! The plan of outputs, and writing them all from one join.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use tracing::warn;

use super::Recording;
use crate::error::{Error, Result};
use crate::join::{self, Sink, Summary};
use crate::model::Origin;
use crate::model::{PC_SERIALIZED_NOTE, SIMULATED_GPU_NOTE, StringTable};
use crate::read::cpu::StackId;
use crate::read::driver::DriverTrace;
use crate::read::input::GpuInputs;
use crate::view::FullNames;
use crate::write::parquet::ParquetWriter;
use crate::write::report::{Reporter, Row};
use crate::write::{chrome, folded, idle, pc, perfetto, pprof, svg};

/// The flamegraph's title unless the user names another.
pub const DEFAULT_TITLE: &str = "gpuperf: GPU time by CPU stack";

/// Output files; each `None` is not written.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct Outputs {
    /// Merged folded stacks (`-` for stdout).
    pub folded: Option<PathBuf>,
    /// Chrome-trace timeline, or Perfetto's protobuf for a `.pftrace` name.
    pub chrome: Option<PathBuf>,
    /// SVG flamegraph.
    pub svg: Option<PathBuf>,
    /// Gzipped pprof profile.
    pub pprof: Option<PathBuf>,
    /// Flamegraph title.
    pub title: String,
    /// Subtitle, e.g. the command line.
    pub subtitle: Option<String>,
    /// Idle-time folded stacks.
    pub idle: Option<PathBuf>,
    /// Idle-time flamegraph.
    pub idle_svg: Option<PathBuf>,
    /// A directory for the Parquet tables ([`crate::write::parquet`]).
    pub parquet: Option<PathBuf>,
    /// GPU PC samples as folded stacks ([`crate::write::pc`]).
    pub pc_folded: Option<PathBuf>,
    /// Their flamegraph.
    pub pc_svg: Option<PathBuf>,
    /// Their gzipped pprof profile.
    pub pc_pprof: Option<PathBuf>,
    /// Where the recording was made, for the exports that say so.
    pub origin: Origin,
}

/// A file written, with how to look at it.
#[derive(Clone, Debug)]
pub struct Written {
    /// Where.
    pub path: PathBuf,
    /// "open it in …".
    pub how: &'static str,
}

impl Written {
    /// The line that says so, without the newline.
    pub fn line(&self) -> String {
        format!("gpuperf: wrote `{}`: {}", self.path.display(), self.how)
    }
}

/// How to look at a CPU trace written (`--cpu-trace`).
pub(crate) const CPU_TRACE_HOW: &str = "the CPU trace: one line per launch with its stack";

/// What a join produced besides the files.
pub struct Joined {
    /// The match summary.
    pub summary: Summary,
    /// Kernels by total GPU time.
    pub kernels: Vec<Row>,
    /// Files written.
    pub written: Vec<Written>,
    /// Where the GPU PC samples went, when a PC-sample output was asked for.
    pub pc: Option<pc::PcStats>,
}

fn create(path: &Path) -> Result<BufWriter<File>> {
    let f = File::create(path).map_err(Error::io("create", path))?;
    Ok(BufWriter::with_capacity(1 << 20, f))
}

/// `r`'s error, said to be `path`'s.
fn writing<T>(path: &Path, r: Result<T>) -> Result<T> {
    r.map_err(|e| Error::Output {
        path: path.to_owned(),
        source: Box::new(e),
    })
}

/// Whether a recorder said its trace was made on the simulated CUDA runtime,
/// or a trace another tool recorded names the simulated runtime's devices.
pub fn simulated(summary: &Summary) -> bool {
    summary
        .notes
        .iter()
        .any(|n| n.text.starts_with(SIMULATED_GPU_NOTE))
        || summary
            .gpu_read
            .notes
            .iter()
            .any(|n| n.starts_with(SIMULATED_GPU_NOTE))
}

/// Whether a recorder serialized kernels for PC sampling: the GPU times are
/// those of a serialized run.
pub fn serialized(summary: &Summary) -> bool {
    summary
        .notes
        .iter()
        .any(|n| n.text.starts_with(PC_SERIALIZED_NOTE))
}

/// What the time flamegraphs add to their title when [`serialized`].
pub(crate) const SERIALIZED_TITLE: &str = "kernels serialized for PC sampling";

impl Recording {
    /// Joins and writes every output `outs` names; folded stacks for `-` go to
    /// `stdout`. Every file is created before the join, so a bad path fails fast.
    pub fn write(&mut self, outs: &Outputs, stdout: &mut dyn Write) -> Result<Joined> {
        let pprof_file = outs
            .pprof
            .as_deref()
            .map(|p| Ok::<_, Error>((p, create(p)?)))
            .transpose()?;
        let mut profile = pprof::Builder::new();
        let folded_file = match &outs.folded {
            Some(p) if p.as_os_str() != "-" => Some((p, create(p)?)),
            _ => None,
        };
        let svg_file = outs
            .svg
            .as_deref()
            .map(|p| Ok::<_, Error>((p, create(p)?)))
            .transpose()?;
        let mut chrome = outs
            .chrome
            .as_deref()
            .map(|p| Timeline::create(p, self.driver.clone()))
            .transpose()?;
        let idle_file = outs.idle.as_deref().map(create).transpose()?;
        let idle_svg_file = outs.idle_svg.as_deref().map(create).transpose()?;
        let mut idle = (idle_file.is_some() || idle_svg_file.is_some()).then(idle::IdleFolder::new);
        let mut parquet = outs
            .parquet
            .as_deref()
            .map(|d| ParquetWriter::create(d, outs.origin.clone()))
            .transpose()?;
        let pc_folded_file = outs.pc_folded.as_deref().map(create).transpose()?;
        let pc_svg_file = outs.pc_svg.as_deref().map(create).transpose()?;
        let pc_pprof_file = outs.pc_pprof.as_deref().map(create).transpose()?;
        let mut pc = if pc_pprof_file.is_some() {
            Some(pc::PcFolder::with_profile())
        } else {
            (pc_folded_file.is_some() || pc_svg_file.is_some()).then(pc::PcFolder::new)
        };
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
            if let Some(p) = parquet.as_mut() {
                sinks.push(p);
            }
            if let Some(p) = pc.as_mut() {
                sinks.push(p);
            }
            self.join(&mut sinks)?
        };
        let mut written = Vec::new();
        if let Some((p, f)) = folded_file {
            writing(p, folder.write(f))?;
            written.push(Written {
                path: p.clone(),
                how: folded_how(&folder),
            });
        } else if outs.folded.is_some() {
            folder.write(stdout)?;
        }
        if let (Some(p), Some(c)) = (&outs.chrome, chrome) {
            written.push(c.finish(p)?);
        }
        if let (Some(p), Some(f), Some(idler)) = (&outs.idle_svg, idle_svg_file, &idle) {
            written.push(idle_svg(outs, &self.full_names, &summary, idler, p, f)?);
        }
        if let (Some(p), Some(f), Some(idler)) = (&outs.idle, idle_file, &idle) {
            written.push(idle_folded(idler, p, f)?);
        }
        if let Some((p, f)) = pprof_file {
            writing(p, profile.write(f))?;
            written.push(Written {
                path: p.to_path_buf(),
                how: "pprof profile for Pyroscope, Parca, Grafana or `go tool pprof`",
            });
        }
        if let Some(pc) = &pc {
            let files = PcFiles {
                folded: pc_folded_file,
                svg: pc_svg_file,
                pprof: pc_pprof_file,
            };
            written.extend(pc_outputs(outs, &summary, pc, files)?);
        }
        if let Some(d) = &outs.parquet {
            written.push(Written {
                path: d.clone(),
                how: "Parquet tables (events.parquet, stacks.parquet) for DuckDB, pandas or Spark",
            });
        }
        if let Some((p, f)) = svg_file {
            written.push(time_svg(outs, &self.full_names, &summary, &folder, p, f)?);
        }
        Ok(Joined {
            summary,
            kernels: reporter.rows(),
            written,
            pc: pc.as_ref().map(pc::PcFolder::stats),
        })
    }

    /// Without a GPU trace: folded stacks weighted by launch count, and their
    /// flamegraph. The timeline needs GPU work, so it is not written.
    pub(crate) fn write_cpu_only(
        &self,
        outs: &Outputs,
        stdout: &mut dyn Write,
    ) -> Result<Vec<Written>> {
        let Some(cpu) = &self.cpu else {
            return Ok(Vec::new());
        };
        let mut counts: HashMap<String, u64> = HashMap::new();
        let mut titles = FullNames::default();
        let mut viewed: HashMap<StackId, String> = HashMap::new();
        for launch in &cpu.launches {
            let text = viewed.entry(launch.stack).or_insert_with(|| {
                let raw = cpu.stacks.text(launch.stack);
                titles.note_stack(&self.opts.view, raw);
                self.view_stack(raw)
            });
            *counts.entry(text.clone()).or_default() += 1;
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
                stdout
                    .write_all(text.as_bytes())
                    .map_err(|source| Error::Write {
                        what: "folded stacks",
                        source,
                    })?;
            } else {
                let mut f = create(p)?;
                f.write_all(text.as_bytes())
                    .and_then(|()| f.flush())
                    .map_err(Error::io("write", p))?;
                written.push(Written {
                    path: p.clone(),
                    how: "folded stacks (launch counts) for inferno or flamegraph.pl",
                });
            }
        }
        if let Some(p) = &outs.svg {
            render_svg(outs, "launches", &lines, &titles, p, create(p)?)?;
            written.push(Written {
                path: p.clone(),
                how: "open it in a web browser",
            });
        }
        Ok(written)
    }
}

/// The PC-sample output files opened: folded stacks, flamegraph, pprof.
struct PcFiles {
    folded: Option<BufWriter<File>>,
    svg: Option<BufWriter<File>>,
    pprof: Option<BufWriter<File>>,
}

/// The PC-sample folded stacks, flamegraph and pprof profile, as asked.
fn pc_outputs(
    outs: &Outputs,
    summary: &Summary,
    pc: &pc::PcFolder,
    files: PcFiles,
) -> Result<Vec<Written>> {
    const EMPTY: &str = "empty: the recording holds no PC samples (record with --pc-sampling)";
    let mut written = Vec::new();
    let empty = pc.stats().samples == 0;
    if let (Some(p), Some(f)) = (&outs.pc_pprof, files.pprof) {
        writing(p, pc.write_profile(f))?;
        written.push(Written {
            path: p.clone(),
            how: if empty {
                EMPTY
            } else {
                "PC-sample pprof profile: `go tool pprof -lines -top` for the hottest CUDA lines, \
                 `-tags` for the stall reasons"
            },
        });
    }
    if let (Some(p), Some(f)) = (&outs.pc_folded, files.folded) {
        writing(p, pc.write(f))?;
        written.push(Written {
            path: p.clone(),
            how: if empty {
                EMPTY
            } else {
                "PC-sample folded stacks (weights: samples) for inferno or flamegraph.pl"
            },
        });
    }
    if let (Some(p), Some(f)) = (&outs.pc_svg, files.svg) {
        let lines: Vec<String> = pc.lines().iter().map(|(s, w)| format!("{s} {w}")).collect();
        let mut o = outs.clone();
        o.title = "gpuperf: GPU PC samples by CPU stack, kernel, line and stall reason".to_owned();
        if simulated(summary) {
            o.title = format!("{} ({SIMULATED_GPU_NOTE})", o.title);
        }
        render_svg(&o, "samples", &lines, &FullNames::default(), p, f)?;
        written.push(Written {
            path: p.clone(),
            how: if empty {
                "it only says that there were no PC samples to draw (record with --pc-sampling)"
            } else {
                "open it in a web browser"
            },
        });
    }
    Ok(written)
}

/// What the folded stacks file holds, for the closing summary.
fn folded_how(folder: &folded::Folder) -> &'static str {
    if folder.unit() == "ns" {
        "folded stacks for inferno or flamegraph.pl, weights in ns (all the GPU work \
         together lasted under 1 µs)"
    } else {
        "folded stacks for inferno or flamegraph.pl"
    }
}

/// The GPU time flamegraph, titled for a simulated or serialized run.
fn time_svg(
    outs: &Outputs,
    full_names: &FullNames,
    summary: &Summary,
    folder: &folded::Folder,
    p: &Path,
    f: BufWriter<File>,
) -> Result<Written> {
    let lines: Vec<String> = folder
        .lines()
        .iter()
        .map(|(s, w)| format!("{s} {w}"))
        .collect();
    let mut outs = outs.clone();
    if simulated(summary) {
        outs.title = format!("{} ({SIMULATED_GPU_NOTE})", outs.title);
    }
    if serialized(summary) {
        outs.title = format!("{}, {SERIALIZED_TITLE}", outs.title);
    }
    let mut titles = full_names.clone();
    for (label, full) in folder.full_names().pairs() {
        titles.note(
            &format!("{}{label}", folded::KERNEL_PREFIX),
            &format!("{}{full}", folded::KERNEL_PREFIX),
        );
    }
    render_svg(&outs, folder.unit(), &lines, &titles, p, f)?;
    Ok(Written {
        path: p.to_path_buf(),
        how: if folder.total() == 0 {
            "it only says that there was no GPU work to draw"
        } else {
            "open it in a web browser"
        },
    })
}

fn idle_svg(
    outs: &Outputs,
    titles: &FullNames,
    summary: &Summary,
    idler: &idle::IdleFolder,
    p: &Path,
    f: BufWriter<File>,
) -> Result<Written> {
    let lines: Vec<String> = idler
        .lines()
        .iter()
        .map(|(s, w)| format!("{s} {w}"))
        .collect();
    let mut o = outs.clone();
    // A title of the user's names the run: it becomes the subtitle.
    if o.title != DEFAULT_TITLE {
        o.subtitle = Some(std::mem::take(&mut o.title));
    }
    o.title = "gpuperf: GPU idle time by the CPU stack that made it wait".to_owned();
    if simulated(summary) {
        o.title = format!("{} ({SIMULATED_GPU_NOTE})", o.title);
    }
    if serialized(summary) {
        o.title = format!("{}, {SERIALIZED_TITLE}", o.title);
    }
    render_svg(&o, "µs", &lines, titles, p, f)?;
    Ok(Written {
        path: p.to_path_buf(),
        how: if lines.is_empty() {
            "it only says that no stream had a gap to draw"
        } else {
            "open it in a web browser"
        },
    })
}

fn idle_folded(idler: &idle::IdleFolder, p: &Path, f: BufWriter<File>) -> Result<Written> {
    writing(p, idler.write(f))?;
    let (idle_ns, span_ns) = idler.streams().iter().fold((0u64, 0u64), |(i, s), (_, x)| {
        (i + x.idle_ns, s + x.span_ns)
    });
    if span_ns > 0 {
        tracing::info!(
            "streams idle {:.1}% of their active time ({} of {} µs)",
            idle_ns as f64 * 100.0 / span_ns as f64,
            idle_ns / 1000,
            span_ns / 1000
        );
    }
    Ok(Written {
        path: p.to_path_buf(),
        how: if span_ns == 0 {
            "idle-time folded stacks: no stream had two pieces of work, so no gaps"
        } else {
            "idle-time folded stacks (µs): why each stream waited, by CPU stack"
        },
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
        match self {
            Self::Chrome(w) => {
                let mut f = w.into_inner();
                f.flush().map_err(Error::io("write", p))?;
                let bytes = f.get_ref().metadata().map_or(0, |m| m.len());
                if let Some(hint) = large_json_hint(p, bytes) {
                    warn!("{hint}");
                }
            }
            Self::Perfetto(w) => {
                w.into_inner().flush().map_err(Error::io("write", p))?;
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
    titles: &FullNames,
    path: &Path,
    out: BufWriter<File>,
) -> Result<()> {
    let opts = svg::Options {
        title: outs.title.clone(),
        subtitle: outs.subtitle.clone(),
        count_name: count_name.to_owned(),
        titles: titles
            .pairs()
            .into_iter()
            .map(|(l, f)| (l.to_owned(), f.to_owned()))
            .collect(),
        ..svg::Options::default()
    };
    writing(
        path,
        svg::render(&opts, lines.iter().map(String::as_str), out),
    )
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
