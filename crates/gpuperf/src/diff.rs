//! `gpuperf diff BEFORE AFTER`: a differential flamegraph of two runs, and a table
//! of the stacks whose GPU (or idle) time changed most.

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Write as _};
use std::path::Path;

use anyhow::{Context as _, Result};
use gpuperf_merge::recording::{Inputs, Recording};
use gpuperf_merge::view::{View, fit_stack};
use gpuperf_merge::write::diff::{self, Change, KernelOverlap, Options, Profile};
use gpuperf_merge::write::report::LINE_WIDTH;
use gpuperf_merge::write::{folded, idle, svg};
use gpuperf_profiler::Symbolizer;

use crate::cli::{DiffArgs, Format};

/// One run's folded stacks.
struct Run {
    lines: Vec<(String, u64)>,
    /// "µs", or "ns" when merge wrote ns (all its GPU work lasted under 1 µs).
    unit: &'static str,
}

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
    let profile =
        |r: &Run| Profile::from_lines(r.lines.iter().map(|(s, w)| (s.as_str(), *w)), &opts);
    let (mut b, mut f) = (profile(&before), profile(&after));
    // Compare in one unit: ns wins, as µs would round the ns run to nothing.
    let unit = if before.unit == after.unit {
        before.unit
    } else {
        if before.unit == "µs" {
            b = b.scaled(1000);
        } else {
            f = f.scaled(1000);
        }
        "ns"
    };
    let rows = diff::changes(&b, &f);
    // Stacks are matched by name: two runs whose kernels are named apart
    // (another tool's spelling, another program) would show every stack as
    // changed, and nothing else would say why.
    if let Some(w) = KernelOverlap::of(&b, &f).warning() {
        tracing::warn!("{w}");
    }

    let what = if a.idle { "idle time" } else { "GPU time" };
    let regressed = a
        .fail_above
        .and_then(|pct| diff::regression(&b, &f, &rows, pct));
    let mut out = io::stdout().lock();
    if a.format == Format::Json {
        let top = usize::try_from(a.top).unwrap_or(usize::MAX);
        let doc = diff::changes_json(what, unit, &b, &f, &rows, top, regressed.as_deref());
        writeln!(out, "{doc}")?;
    } else {
        write_summary(&mut out, a, what, unit, &b, &f, &rows)?;
        if let Some(r) = &regressed {
            writeln!(out, "regression: {r}")?;
        }
    }
    out.flush()?;
    write_svg(a, what, unit, &b, &f, quiet)?;
    Ok(regressed.is_none())
}

fn write_summary(
    out: &mut impl io::Write,
    a: &DiffArgs,
    what: &str,
    unit: &str,
    b: &Profile,
    f: &Profile,
    rows: &[Change],
) -> Result<()> {
    writeln!(
        out,
        "{what} by CPU stack: {} {unit} in `{}`, {} {unit} in `{}` ({:+} {unit}); {} of {} stacks changed",
        b.total(),
        a.before.display(),
        f.total(),
        a.after.display(),
        i128::from(f.total()) - i128::from(b.total()),
        rows.len(),
        stacks_in_either(b, f),
    )?;
    write_table(out, rows, unit, a.top as usize)
}

fn write_svg(
    a: &DiffArgs,
    what: &str,
    unit: &str,
    b: &Profile,
    f: &Profile,
    quiet: bool,
) -> Result<()> {
    let lines = diff::differential_lines(b, f)?;
    let file = File::create(&a.output)
        .with_context(|| format!("failed to create `{}`", a.output.display()))?;
    let mut o = svg::Options::default();
    o.title = a.title.clone().unwrap_or_else(|| {
        format!("gpuperf diff: {what} by CPU stack (red: more in AFTER, blue: less)")
    });
    o.subtitle = Some(format!(
        "{} → {}",
        file_name(&a.before),
        file_name(&a.after)
    ));
    o.count_name = unit.to_owned();
    svg::render(&o, lines.iter().map(String::as_str), BufWriter::new(file))
        .with_context(|| format!("failed to write `{}`", a.output.display()))?;
    if !quiet {
        eprintln!(
            "gpuperf: wrote `{}`: differential flamegraph, widths from AFTER; open it in a web browser",
            a.output.display()
        );
    }
    Ok(())
}

/// A path's last component, for the subtitle: directories tell a reader of the
/// SVG nothing.
fn file_name(p: &Path) -> String {
    p.file_name().map_or_else(
        || p.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

fn stacks_in_either(b: &Profile, f: &Profile) -> usize {
    b.stacks().len()
        + f.stacks()
            .keys()
            .filter(|s| !b.stacks().contains_key(*s))
            .count()
}

/// The `top` largest changes: before, after, delta, percent, stack.
fn write_table(out: &mut impl io::Write, rows: &[Change], unit: &str, top: usize) -> Result<()> {
    if rows.is_empty() {
        return Ok(());
    }
    writeln!(
        out,
        "{:>12} {:>12} {:>12} {:>9}  stack",
        format!("before {unit}"),
        format!("after {unit}"),
        format!("delta {unit}"),
        "change"
    )?;
    for c in rows.iter().take(top) {
        let pct = c
            .percent()
            .map_or_else(|| "new".to_owned(), |p| format!("{p:+.1}%"));
        writeln!(
            out,
            "{:>12} {:>12} {:>+12} {:>9}  {}",
            c.before,
            c.after,
            c.delta(),
            pct,
            fit_stack(&c.stack, LINE_WIDTH - 50)
        )?;
    }
    if rows.len() > top {
        writeln!(
            out,
            "({} more changed stacks; --top N shows more)",
            rows.len() - top
        )?;
    }
    Ok(())
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
                Ok(lines) => Ok(Run { lines, unit: "µs" }),
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
    let mut l = Recording::open(inputs, Symbolizer::new)?;
    let mut folder = folded::Folder::new();
    let mut idler = idle::IdleFolder::new();
    if idle {
        l.join(&mut [&mut idler])?;
        Ok(Run {
            lines: idler.lines().to_vec(),
            unit: "µs",
        })
    } else {
        l.join(&mut [&mut folder])?;
        Ok(Run {
            lines: folder.lines().to_vec(),
            unit: folder.unit(),
        })
    }
}
