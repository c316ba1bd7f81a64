//! The `gpuperf` command: a thin layer over `gpuperf-merge` and `gpuperf-profiler`.

mod cli;
mod diff;
mod driver;
mod inject_lib;
mod monitor;
mod record;
mod sync;
mod target;

use std::io::{self, IsTerminal, Write as _};
use std::process::ExitCode;

use anyhow::Result;
use gpuperf_merge::recording::report::{
    IdleTable, PcTable, PythonLineTable, PythonLines, report_json,
};
use gpuperf_merge::recording::{self, Recording};
use gpuperf_merge::write::idle::IdleFolder;
use gpuperf_merge::write::report;
use gpuperf_profiler::Symbolizer;
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

use crate::cli::{Cli, Command, Format, MergeArgs, ReportArgs};

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
        Some(Command::Record(mut a)) => recording::expand_names_here(a.names_mut())
            .map_err(anyhow::Error::from)
            .and_then(|()| record::run(a, quiet))
            .map(ExitCode::from),
        None => {
            let mut a = cli.record;
            recording::expand_names_here(a.names_mut())
                .map_err(anyhow::Error::from)
                .and_then(|()| record::run(a, quiet))
                .map(ExitCode::from)
        }
        Some(Command::Merge(mut a)) => recording::expand_names_here(a.names_mut())
            .map_err(anyhow::Error::from)
            .and_then(|()| merge(a, quiet))
            .map(|()| ExitCode::SUCCESS),
        Some(Command::Report(a)) => run_report(a, quiet).map(|()| ExitCode::SUCCESS),
        Some(Command::Monitor(a)) => monitor::run(a, quiet).map(ExitCode::from),
        // 3: `--fail-above` found a regression (1 is an error, 2 clap's usage error).
        Some(Command::Diff(a)) => diff::run(&a, quiet).map(|ok| {
            if ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(3)
            }
        }),
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

fn merge(a: MergeArgs, quiet: bool) -> Result<()> {
    let mut l = Recording::open(&a.input.to_inputs(), Symbolizer::new)?;
    let outs = a.outputs();
    if let Some(trace) = driver_only(&mut l) {
        // Driver events alone (`record --driver` of a program that never
        // loaded CUDA): their timeline; the report has their tables.
        let Some(c) = &outs.chrome else {
            anyhow::bail!(
                "the recording holds GPU driver events only: write their timeline with \
                 `-c timeline.pftrace`, or read them with `gpuperf report`"
            );
        };
        let w = recording::driver_timeline(trace, c)?;
        if !quiet {
            eprintln!("{}", w.line());
        }
        return Ok(());
    }
    let joined = l.write(&outs, &mut io::stdout().lock())?;
    if let Some(p) = &a.cpu_trace {
        let (Some(_), Some(trace)) = (&l.inprocess, l.launch_stacks()) else {
            anyhow::bail!(
                "`{}` not written: the GPU traces carry no in-process stacks",
                p.display()
            );
        };
        recording::write_cpu_trace(trace, p)?;
    }
    if !quiet {
        eprint!("gpuperf: {}", joined.summary);
        if let Some(pc) = joined.pc {
            eprintln!("gpuperf: {pc}");
        }
        if let Some(s) = &l.inprocess {
            eprintln!("gpuperf: CPU side, taken in the program: {s}");
        }
        for w in &joined.written {
            eprintln!("{}", w.line());
        }
    }
    Ok(())
}

/// The driver events of a recording that holds nothing else to join.
fn driver_only(l: &mut Recording) -> Option<gpuperf_merge::read::driver::DriverTrace> {
    if l.has_gpu() || l.cpu.is_some() {
        return None;
    }
    l.driver.take()
}

fn run_report(a: ReportArgs, quiet: bool) -> Result<()> {
    let mut l = Recording::open(&a.input.to_inputs(), Symbolizer::new)?;
    if let Some(trace) = driver_only(&mut l) {
        let top = usize::try_from(a.top).unwrap_or(usize::MAX);
        let d = gpuperf_merge::write::driver::Reporter::new(trace);
        if a.format == Format::Json {
            anyhow::bail!(
                "the recording holds GPU driver events only, which `--format text` reports"
            );
        }
        d.write(io::stdout().lock(), top)?;
        return Ok(());
    }
    let mut rep = report::Reporter::new();
    let mut idle = IdleFolder::new();
    let mut pc = gpuperf_merge::write::pc::PcFolder::new();
    let mut driver = l
        .driver
        .take()
        .map(gpuperf_merge::write::driver::Reporter::new);
    let summary = match driver.as_mut() {
        Some(d) => l.join(&mut [&mut rep, &mut idle, &mut pc, d])?,
        None => l.join(&mut [&mut rep, &mut idle, &mut pc])?,
    };
    let top = usize::try_from(a.top).unwrap_or(usize::MAX);
    let lines = PythonLines::of(&rep, &idle);
    let mut out = io::stdout().lock();
    if a.format == Format::Json {
        writeln!(out, "{}", report_json(&mut rep, &idle, &lines, &pc, top))?;
    } else {
        rep.write(&mut out, top)?;
        write!(out, "{}", PythonLineTable { lines: &lines, top })?;
        write!(out, "{}", IdleTable { idle: &idle, top })?;
        write!(out, "{}", PcTable { pc: &pc, top })?;
        if let Some(d) = &driver {
            d.write(&mut out, top)?;
        }
    }
    if (l.cpu.is_some() || summary.gpu_launch_stacks > 0) && !quiet {
        eprint!("gpuperf: {summary}");
    }
    Ok(())
}
