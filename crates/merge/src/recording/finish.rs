//! The end of `gpuperf record`: the program has exited, the recorders have
//! stopped, and the recording directory is read, joined and written out as
//! planned. [`Finish`] is plain data the CLI builds from its arguments;
//! [`Finished`] is what it prints and the files it hands to the user.

use std::ffi::OsString;
use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::Duration;

use super::plan::CPU_TRACE_HOW;
use super::{Inputs, Outputs, Recording, SYMBOLS, Written};
use crate::error::{Error, Result};
use crate::model::Symbolize;
use crate::view::View;

/// What a finished `gpuperf record` run asks of its recording.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Finish {
    /// The recording directory.
    pub dir: PathBuf,
    /// The eBPF profiler's CPU trace, when it ran.
    pub cpu: Option<PathBuf>,
    /// The outputs to write.
    pub outputs: Outputs,
    /// How stacks are shown.
    pub view: View,
    /// No launch stacks in the outputs (`--gpu-only`). Default is `false`.
    pub gpu_only: bool,
    /// No GPU side was recorded (`--cpu-only`). Default is `false`.
    pub cpu_only: bool,
    /// The directory is kept (`--raw-dir`): the frame names are written into
    /// it. Default is `false`.
    pub keep: bool,
    /// Where to copy the CPU trace (`--cpu-trace`).
    pub cpu_trace: Option<PathBuf>,
    /// Rows of the kernel table.
    pub top: u64,
    /// The program's name, for the first line.
    pub program: String,
    /// How the program ended.
    pub status: ExitStatus,
    /// How long it ran.
    pub wall: Duration,
    /// The eBPF profiler's own summary, as it says it.
    pub cpu_stats: Option<String>,
    /// The driver trace's summary line (with its newline), when one was taken.
    pub driver: String,
}

impl Finish {
    /// A run of `program` in `dir` that ended with `status` after `wall`,
    /// writing `outputs`; nothing else asked.
    pub fn new(
        dir: PathBuf,
        outputs: Outputs,
        program: String,
        status: ExitStatus,
        wall: Duration,
    ) -> Self {
        Self {
            dir,
            cpu: None,
            outputs,
            view: View::default(),
            gpu_only: false,
            cpu_only: false,
            keep: false,
            cpu_trace: None,
            top: 10,
            program,
            status,
            wall,
            cpu_stats: None,
            driver: String::new(),
        }
    }

    /// Reads, joins and writes the recording; folded stacks for `-` go to
    /// `stdout`.
    pub fn run<S: Symbolize>(
        &self,
        symbolizer: impl FnOnce() -> S,
        stdout: &mut dyn Write,
    ) -> Result<Finished> {
        let outs = &self.outputs;
        let gpu_traces = super::gpu_trace_count(&self.dir);
        let cpu = self.cpu.as_deref();
        let mut report = format!(
            "gpuperf: `{}` {} after {:.2} s\n",
            self.program,
            describe_status(self.status),
            self.wall.as_secs_f64()
        );
        let mut written: Vec<Written> = Vec::new();
        if !self.cpu_only && gpu_traces == 0 {
            report += "gpuperf: no CUDA process was recorded: the CUDA driver never loaded the \
                       injection library. Either the program made no CUDA call, or there is no \
                       CUDA driver (libcuda.so.1) and GPU on this machine.\n";
        }
        let mut inprocess_written = false;
        // No GPU trace, but driver events (a program driving a DRM device, or one
        // whose CUDA calls never reached the library): their timeline alone.
        let driver_only = match (&outs.chrome, gpu_traces) {
            (Some(c), 0) => super::read_driver(std::slice::from_ref(&self.dir))?
                .filter(|t| !t.events.is_empty())
                .map(|t| (c, t)),
            _ => None,
        };
        if gpu_traces > 0 {
            let mut inputs = Inputs {
                gpu: vec![self.dir.clone()],
                cpu: cpu.map(Path::to_path_buf),
                ..Inputs::default()
            };
            inputs.join.stacks_off = self.gpu_only;
            inputs.join.view = self.view;
            let mut l = Recording::open(&inputs, symbolizer)?;
            self.keep_symbols(&l, &mut report)?;
            let joined = l.write(outs, stdout)?;
            let kernels = super::report::KernelTable {
                rows: &joined.kernels,
                top: self.top,
            };
            report += &kernels.to_string();
            report += &format!("gpuperf: {}", joined.summary);
            if let Some(pc) = joined.pc {
                report += &format!("gpuperf: {pc}\n");
            }
            written = joined.written;
            if let (Some(stats), Some(trace)) = (&l.inprocess, l.launch_stacks()) {
                report += &format!("gpuperf: CPU side, taken in the program: {stats}\n");
                if let Some(p) = self.cpu_trace.as_ref().filter(|_| cpu.is_none()) {
                    super::write_cpu_trace(trace, p)?;
                    inprocess_written = true;
                    written.push(Written {
                        path: p.clone(),
                        how: CPU_TRACE_HOW,
                    });
                }
            }
        } else if let Some(cpu) = cpu {
            written =
                self.cpu_only_outputs(cpu, symbolizer, driver_only.is_some(), &mut report, stdout)?;
        }
        if let Some((c, trace)) = driver_only {
            written.push(super::driver_timeline(trace, c)?);
        }
        if let Some(s) = &self.cpu_stats {
            report += s;
        }
        if let Some(p) = &self.cpu_trace {
            if let Some(cpu) = cpu {
                std::fs::copy(cpu, p).map_err(Error::io("write", p))?;
                written.push(Written {
                    path: p.clone(),
                    how: CPU_TRACE_HOW,
                });
            } else if !inprocess_written {
                report += &format!(
                    "gpuperf: `{}` not written: no CPU stacks were recorded\n",
                    p.display()
                );
            }
        }
        report += &self.driver;
        Ok(Finished {
            report,
            written,
            kept: self.keep.then(|| self.dir.clone()),
        })
    }

    /// Writes the frame names into a kept recording's directory.
    fn keep_symbols(&self, l: &Recording, report: &mut String) -> Result<()> {
        if self.keep
            && let Some(names) = l.symbols.as_ref().filter(|n| !n.is_empty())
        {
            // Named now, while the program's files are where the stacks say: the
            // kept recording then merges the same after they are rebuilt, moved
            // or deleted, or on another machine.
            let path = self.dir.join(SYMBOLS);
            let left_out = names.write(&path)?;
            if left_out > 0 {
                *report += &format!(
                    "gpuperf: {left_out} symbol names with tabs or line breaks were not kept in `{}`\n",
                    path.display()
                );
            }
        }
        Ok(())
    }

    /// Without a GPU trace: the CPU launch stacks alone, counted by launch.
    fn cpu_only_outputs<S: Symbolize>(
        &self,
        cpu: &Path,
        symbolizer: impl FnOnce() -> S,
        driver_only: bool,
        report: &mut String,
        stdout: &mut dyn Write,
    ) -> Result<Vec<Written>> {
        let outs = &self.outputs;
        let mut written = Vec::new();
        let mut inputs = Inputs {
            cpu: Some(cpu.to_path_buf()),
            ..Inputs::default()
        };
        inputs.join.view = self.view;
        let l = Recording::open(&inputs, symbolizer)?;
        let n = l.cpu.as_ref().map_or(0, |c| c.launches.len());
        if n == 0 {
            *report += "gpuperf: no launch was recorded; no outputs written\n";
        } else {
            *report += &format!(
                "gpuperf: {n} CPU launch stacks and no GPU trace: the flamegraph counts launches\n"
            );
            if outs.chrome.is_some() && !driver_only {
                *report += "gpuperf: no timeline written: it needs a GPU trace\n";
            }
            written = l.write_cpu_only(outs, stdout)?;
        }
        Ok(written)
    }
}

/// What a finished run wrote, and the summary it prints.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Finished {
    /// The summary lines before the list of files.
    pub report: String,
    /// The files written.
    pub written: Vec<Written>,
    /// The recording directory, when it is kept.
    pub kept: Option<PathBuf>,
}

impl fmt::Display for Finished {
    /// The whole summary: the report, a line per file written, and where the
    /// kept recording is.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.report)?;
        for w in &self.written {
            writeln!(f, "{}", w.line())?;
        }
        if let Some(d) = &self.kept {
            writeln!(
                f,
                "gpuperf: raw traces kept in `{}`; rerun the join with `gpuperf merge {}`",
                d.display(),
                d.display()
            )?;
        }
        Ok(())
    }
}

/// How a program ended, as the summary's first line says it.
pub(crate) fn describe_status(s: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt as _;
    match (s.code(), s.signal()) {
        (Some(c), _) => format!("exited with code {c}"),
        (None, Some(sig)) => format!("was killed by signal {sig}"),
        _ => "ended".to_owned(),
    }
}

/// The flamegraph's subtitle: the command, absolute paths shown by their file
/// names (the machine's directories tell a reader of the SVG nothing).
pub fn command_line(argv: &[OsString]) -> String {
    let s: Vec<String> = argv
        .iter()
        .map(|a| {
            let p = Path::new(a);
            match p.file_name() {
                Some(n) if p.is_absolute() => n.to_string_lossy().into_owned(),
                _ => a.to_string_lossy().into_owned(),
            }
        })
        .collect();
    let mut s = s.join(" ");
    if s.len() > 200 {
        let cut = (0..=200)
            .rev()
            .find(|&i| s.is_char_boundary(i))
            .unwrap_or(0);
        s.truncate(cut);
        s.push('…');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_subtitle_names_files_not_their_directories() {
        let argv: Vec<OsString> = ["/usr/bin/python3.11", "/tmp/x/train.py", "--out", "a/b.txt"]
            .map(OsString::from)
            .to_vec();
        assert_eq!(command_line(&argv), "python3.11 train.py --out a/b.txt");
    }

    #[test]
    fn long_command_lines_are_cut_on_a_char_boundary() {
        let argv = vec![OsString::from("é".repeat(150))];
        let s = command_line(&argv);
        assert!(s.ends_with('…'));
        assert!(s.len() <= 204);
    }
}
