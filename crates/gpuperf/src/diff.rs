//! `gpuperf diff BEFORE AFTER`: a differential flamegraph of two runs, and a table
//! of the stacks whose GPU (or idle) time changed most.

use std::fs::File;
use std::io::{self, BufReader, Write as _};
use std::path::Path;

use anyhow::{Context as _, Result};
use gpuperf_merge::recording::{Comparison, Inputs, Recording, Run};
use gpuperf_merge::view::View;
use gpuperf_merge::write::diff::{self, Options};
use gpuperf_profiler::Symbolizer;

use crate::cli::{DiffArgs, Format};

/// Compares the two runs; `Ok(false)` when `--fail-above` found a regression.
pub fn run(a: &DiffArgs, quiet: bool) -> Result<bool> {
    let view = a.view.view();
    let before = load(&a.before, a.idle, view).with_context(|| "BEFORE not read")?;
    let after = load(&a.after, a.idle, view).with_context(|| "AFTER not read")?;
    let opts = {
        let mut o = Options::default();
        o.ignore_lines = a.ignore_lines;
        o
    };
    let c = Comparison::new(&before, &after, a.idle, &opts)?;
    if let Some(w) = c.overlap_warning() {
        tracing::warn!("{w}");
    }
    let regressed = a.fail_above.and_then(|pct| c.regression(pct));
    let mut out = io::stdout().lock();
    if a.format == Format::Json {
        let top = usize::try_from(a.top).unwrap_or(usize::MAX);
        writeln!(out, "{}", c.json(top, regressed.as_deref()))?;
    } else {
        write!(out, "{}", c.table(&a.before, &a.after, a.top as usize))?;
        if let Some(r) = &regressed {
            writeln!(out, "regression: {r}")?;
        }
    }
    out.flush()?;
    c.write_svg(&a.output, a.title.clone(), &a.before, &a.after)?;
    if !quiet {
        eprintln!(
            "gpuperf: wrote `{}`: differential flamegraph, widths from AFTER; open it in a web browser",
            a.output.display()
        );
    }
    Ok(regressed.is_none())
}

/// Reads one run: a recording directory or a trace file, joined as `gpuperf merge`
/// joins it, or a folded stacks file.
fn load(path: &Path, idle: bool, view: View) -> Result<Run> {
    anyhow::ensure!(
        path.is_dir() || path.is_file(),
        "`{}` is neither a recording directory nor a file",
        path.display()
    );
    let mut inputs = Inputs::default();
    inputs.recording = Some(path.to_owned());
    inputs.join.view = view;
    if path.is_dir() {
        return join(&inputs, idle);
    }
    match join(&inputs, idle) {
        Ok(r) => Ok(r),
        // Not a trace: folded stacks, or a file gpuperf cannot read.
        Err(e)
            if e.chain().any(|c| {
                matches!(
                    c.downcast_ref::<gpuperf_merge::Error>(),
                    Some(gpuperf_merge::Error::NotATrace { .. })
                )
            }) =>
        {
            let f =
                File::open(path).with_context(|| format!("failed to open `{}`", path.display()))?;
            match diff::read_folded(BufReader::new(f), path) {
                // GPU time in µs, or PC samples (`--pc-folded`), by its stacks.
                Ok(lines) => Ok(Run::from_folded(lines)),
                Err(gpuperf_merge::Error::NotATrace { found, .. }) => {
                    Err(anyhow::anyhow!("{e:#}, nor folded stacks ({found})"))
                }
                Err(other) => Err(other.into()),
            }
        }
        Err(e) => Err(e),
    }
}

/// Joins a recording into folded stacks, GPU or idle time.
fn join(inputs: &Inputs, idle: bool) -> Result<Run> {
    Ok(Recording::open(inputs, Symbolizer::new)?.folded_run(idle)?)
}
