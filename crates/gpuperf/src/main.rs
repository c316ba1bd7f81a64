//! The `gpuperf` command: a thin layer over `gpuperf-merge` and `gpuperf-profiler`.

mod cli;
mod diff;
mod driver;
mod inject_lib;
mod inproc;
mod monitor;
mod record;
mod render;
mod sync;
mod target;

use std::io::{self, IsTerminal};
use std::process::ExitCode;

use anyhow::Result;
use gpuperf_merge::write::idle::IdleFolder;
use gpuperf_merge::write::report;
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

use crate::cli::{Cli, Command, InputArgs, MergeArgs, ReportArgs};
use crate::render::{Loaded, Outputs};

fn main() -> ExitCode {
    let cli = Cli::try_parse_checked(std::env::args_os()).unwrap_or_else(|e| e.exit());
    let level = match (cli.quiet, cli.verbose) {
        (true, _) => tracing::Level::ERROR,
        (_, 0) => tracing::Level::WARN,
        (_, 1) => tracing::Level::INFO,
        (_, 2) => tracing::Level::DEBUG,
        _ => tracing::Level::TRACE,
    };
    // Other libraries' log lines (inferno's, libbpf's) are not written for
    // users: gpuperf says what matters in its own words. `-vv` shows them.
    let others = if cli.verbose >= 2 {
        LevelFilter::from_level(level)
    } else {
        LevelFilter::OFF
    };
    let filter = Targets::new()
        .with_default(others)
        .with_target("gpuperf", level);
    tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(io::stderr)
                .with_ansi(io::stderr().is_terminal())
                .without_time()
                .with_target(false),
        )
        .with(filter)
        .init();
    let quiet = cli.quiet;
    let r = match cli.command {
        Some(Command::Record(a)) => record::run(a, quiet).map(ExitCode::from),
        None => record::run(cli.record, quiet).map(ExitCode::from),
        Some(Command::Merge(a)) => merge(a, quiet).map(|()| ExitCode::SUCCESS),
        Some(Command::Report(a)) => run_report(a, quiet).map(|()| ExitCode::SUCCESS),
        Some(Command::Monitor(a)) => monitor::run(a, quiet).map(ExitCode::from),
        Some(Command::Diff(a)) => diff::run(&a, quiet).map(|()| ExitCode::SUCCESS),
    };
    match r {
        Ok(code) => code,
        // A closed stdout (`gpuperf merge … | head`) is the reader's choice, not an error.
        Err(e)
            if e.chain().any(|c| {
                c.downcast_ref::<io::Error>()
                    .is_some_and(|e| e.kind() == io::ErrorKind::BrokenPipe)
            }) =>
        {
            ExitCode::SUCCESS
        }
        Err(e) => {
            // One line, even when a path holds a newline.
            eprintln!("gpuperf: error: {}", format!("{e:#}").replace('\n', "\\n"));
            ExitCode::FAILURE
        }
    }
}

/// `gpuperf merge FILE`: a trace file in place of a recording directory is read
/// like `--gpu FILE`, its format found from its content.
fn trace_file_as_gpu_input(input: &mut InputArgs) {
    if input.recording.as_ref().is_some_and(|r| r.is_file()) {
        let file = input.recording.take().expect("checked above");
        input.gpu.insert(0, file);
    }
}

fn merge(mut a: MergeArgs, quiet: bool) -> Result<()> {
    trace_file_as_gpu_input(&mut a.input);
    let mut l = Loaded::from_args(&a.input)?;
    let outs = Outputs {
        // Folded stacks go to stdout when no file output is named.
        folded: a.folded.clone().or_else(|| {
            (a.chrome.is_none() && a.svg.is_none() && a.pprof.is_none()).then(|| "-".into())
        }),
        chrome: a.chrome.clone(),
        svg: a.svg.clone(),
        title: a.title.clone(),
        subtitle: None,
        idle: a.idle.clone(),
        idle_svg: a.idle_svg.clone(),
    };
    let joined = render::write_with_pprof(&mut l, &outs, a.pprof.as_deref())?;
    if let Some(p) = &a.cpu_trace {
        let (Some(_), Some(trace)) = (&l.inprocess, l.launch_stacks()) else {
            anyhow::bail!(
                "`{}` not written: the GPU traces carry no in-process stacks",
                p.display()
            );
        };
        inproc::write_cpu_trace(trace, p)?;
    }
    if !quiet {
        eprint!("gpuperf: {}", joined.summary);
        if let Some(s) = &l.inprocess {
            eprintln!("gpuperf: CPU side, taken in the program: {s}");
        }
        for w in &joined.written {
            eprintln!("gpuperf: wrote `{}`: {}", w.path.display(), w.how);
        }
    }
    Ok(())
}

/// The report's idle section: each stream's idle share and causes, then the CPU
/// stacks that made the GPU wait longest.
fn write_idle(out: &mut impl io::Write, idle: &IdleFolder, top: usize) -> Result<()> {
    let streams = idle.streams();
    if streams.iter().all(|(_, s)| s.span_ns == 0) {
        return Ok(());
    }
    let us = |ns: u64| ns as f64 / 1000.0;
    writeln!(
        out,
        "\nGPU idle time by stream (gaps between its work, within its active span)"
    )?;
    writeln!(
        out,
        "  {:>8} {:>6} {:>6} {:>6} {:>12} {:>12} {:>12} {:>12}",
        "pid", "device", "stream", "% idle", "idle µs", "CPU late", "host sync", "latency"
    )?;
    for ((pid, device, stream), s) in streams {
        let share = if s.span_ns == 0 {
            0.0
        } else {
            s.idle_ns as f64 * 100.0 / s.span_ns as f64
        };
        writeln!(
            out,
            "  {pid:>8} {device:>6} {stream:>6} {share:>5.1}% {:>12.2} {:>12.2} {:>12.2} {:>12.2}",
            us(s.idle_ns),
            us(s.by_cause_ns[0]),
            us(s.by_cause_ns[1]),
            us(s.by_cause_ns[2])
        )?;
    }
    writeln!(
        out,
        "\nGPU idle time by device (no stream of the device busy, within its active span)"
    )?;
    writeln!(
        out,
        "  {:>8} {:>6} {:>6} {:>12} {:>8}",
        "pid", "device", "% idle", "idle µs", "gaps"
    )?;
    for ((pid, device), d) in idle.devices() {
        let share = if d.span_ns == 0 {
            0.0
        } else {
            d.idle_ns as f64 * 100.0 / d.span_ns as f64
        };
        writeln!(
            out,
            "  {pid:>8} {device:>6} {share:>5.1}% {:>12.2} {:>8}",
            us(d.idle_ns),
            d.gaps
        )?;
    }
    let mut lines: Vec<&(String, u64)> = idle.lines().iter().collect();
    lines.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    writeln!(out, "\nCPU stacks that made the GPU wait (µs, by cause)")?;
    for (stack, w) in lines.into_iter().take(top) {
        writeln!(out, "  {w:>12}  {stack}")?;
    }
    Ok(())
}

fn run_report(mut a: ReportArgs, quiet: bool) -> Result<()> {
    trace_file_as_gpu_input(&mut a.input);
    let mut l = Loaded::from_args(&a.input)?;
    let mut rep = report::Reporter::new();
    let mut idle = IdleFolder::new();
    let mut driver = l
        .driver
        .take()
        .map(gpuperf_merge::write::driver::Reporter::new);
    let summary = match driver.as_mut() {
        Some(d) => l.join(&mut [&mut rep, &mut idle, d])?,
        None => l.join(&mut [&mut rep, &mut idle])?,
    };
    let top = usize::try_from(a.top).unwrap_or(usize::MAX);
    let mut out = io::stdout().lock();
    rep.write(&mut out, top)?;
    write_idle(&mut out, &idle, top)?;
    if let Some(d) = &driver {
        d.write(&mut out, top)?;
    }
    if (l.cpu.is_some() || summary.gpu_launch_stacks > 0) && !quiet {
        eprint!("gpuperf: {summary}");
    }
    Ok(())
}
