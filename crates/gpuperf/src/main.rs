//! The `gpuperf` command: a thin layer over `gpuperf-merge`.

mod cli;

use std::fs::File;
use std::io::{self, BufWriter, IsTerminal, Write};
use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context as _, Result};
use clap::Parser;
use gpuperf_merge::cpu::CpuTrace;
use gpuperf_merge::input::GpuInputs;
use gpuperf_merge::join::{self, Sink, Summary};
use gpuperf_merge::model::StringTable;
use gpuperf_merge::{Diagnostics, chrome, folded, report, svg};
use tracing::{info, warn};

use crate::cli::{Cli, Command, InputArgs, MergeArgs, ReportArgs};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let level = match (cli.quiet, cli.verbose) {
        (true, _) => tracing::Level::ERROR,
        (_, 0) => tracing::Level::WARN,
        (_, 1) => tracing::Level::INFO,
        (_, 2) => tracing::Level::DEBUG,
        _ => tracing::Level::TRACE,
    };
    tracing_subscriber::fmt()
        .with_writer(io::stderr)
        .with_ansi(io::stderr().is_terminal())
        .with_max_level(level)
        .without_time()
        .with_target(false)
        .init();
    let quiet = cli.quiet;
    let r = match cli.command {
        Command::Merge(a) => merge(a, quiet),
        Command::Report(a) => run_report(a, quiet),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
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

struct Loaded {
    strings: StringTable,
    cpu: Option<CpuTrace>,
    gpu: GpuInputs,
    opts: join::Options,
}

fn load(input: &InputArgs) -> Result<Loaded> {
    let mut strings = StringTable::new();
    let gpu = GpuInputs::open(&input.gpu, &mut strings)?;
    let cpu = match &input.cpu {
        Some(p) => {
            let t = CpuTrace::open(p)?;
            info!(
                "read {} CPU launches ({} distinct stacks) from `{}`",
                t.launches.len(),
                t.stacks.len(),
                p.display()
            );
            report_diagnostics("CPU", &t.diagnostics);
            Some(t)
        }
        None => None,
    };
    let mut opts = join::Options::default();
    opts.slack_ns = input.slack_us * 1000;
    opts.cpu_clock_offset_ns = input.cpu_clock_offset_ns;
    Ok(Loaded {
        strings,
        cpu,
        gpu,
        opts,
    })
}

fn report_diagnostics(side: &str, d: &Diagnostics) {
    if d.is_empty() {
        return;
    }
    warn!(
        "skipped {} malformed {side} trace line(s) or record(s):",
        d.count
    );
    for x in &d.first {
        warn!("  {x}");
    }
    if d.count > d.first.len() as u64 {
        warn!("  … and {} more", d.count - d.first.len() as u64);
    }
}

fn run_join(l: &mut Loaded, sinks: &mut [&mut dyn Sink]) -> Result<Summary> {
    let summary = join::merge(l.cpu.as_mut(), &l.gpu, &mut l.strings, &l.opts, sinks)?;
    report_diagnostics("GPU", &summary.gpu_read.diagnostics);
    Ok(summary)
}

fn create(path: &Path) -> Result<BufWriter<File>> {
    let f = File::create(path).with_context(|| format!("failed to create `{}`", path.display()))?;
    Ok(BufWriter::with_capacity(1 << 20, f))
}

fn merge(a: MergeArgs, quiet: bool) -> Result<()> {
    let mut l = load(&a.input)?;
    // Every output is created before the join, so a bad path fails fast.
    let folded_file = match &a.folded {
        Some(p) if p.as_os_str() != "-" => Some((p, create(p)?)),
        _ => None,
    };
    let svg_file = a
        .svg
        .as_deref()
        .map(|p| Ok::<_, anyhow::Error>((p, create(p)?)))
        .transpose()?;
    let mut chrome = a
        .chrome
        .as_deref()
        .map(|p| -> Result<_> { Ok(chrome::Writer::new(create(p)?)?) })
        .transpose()?;
    let mut folder = folded::Folder::new();
    let summary = {
        let mut sinks: Vec<&mut dyn Sink> = vec![&mut folder];
        if let Some(c) = chrome.as_mut() {
            sinks.push(c);
        }
        run_join(&mut l, &mut sinks)?
    };
    if !quiet {
        eprint!("gpuperf: {summary}");
    }
    if let Some((p, f)) = folded_file {
        folder
            .write(f)
            .with_context(|| format!("failed to write `{}`", p.display()))?;
        info!("wrote folded stacks to `{}`", p.display());
    } else if a.folded.is_some() || (a.chrome.is_none() && a.svg.is_none()) {
        folder.write(io::stdout().lock())?;
    }
    if let (Some(p), Some(c)) = (&a.chrome, chrome) {
        c.into_inner()
            .flush()
            .with_context(|| format!("failed to write `{}`", p.display()))?;
        if !quiet {
            eprintln!(
                "gpuperf: wrote timeline to `{}`; open it in https://ui.perfetto.dev or chrome://tracing",
                p.display()
            );
        }
    }
    if let Some((p, f)) = svg_file {
        let mut opts = svg::Options::default();
        opts.title = a.title.clone();
        let lines: Vec<String> = folder
            .lines()
            .iter()
            .map(|(s, w)| format!("{s} {w}"))
            .collect();
        svg::render(&opts, lines.iter().map(String::as_str), f)
            .with_context(|| format!("failed to write `{}`", p.display()))?;
        if !quiet {
            eprintln!(
                "gpuperf: wrote flamegraph to `{}`; open it in a web browser",
                p.display()
            );
        }
    }
    Ok(())
}

fn run_report(a: ReportArgs, quiet: bool) -> Result<()> {
    let mut l = load(&a.input)?;
    let mut rep = report::Reporter::new();
    let summary = run_join(&mut l, &mut [&mut rep])?;
    rep.write(
        io::stdout().lock(),
        usize::try_from(a.top).unwrap_or(usize::MAX),
    )?;
    if l.cpu.is_some() && !quiet {
        eprint!("gpuperf: {summary}");
    }
    Ok(())
}
