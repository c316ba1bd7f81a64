//! `gpuperf diff`: two runs' folded stacks compared in one unit, the table of
//! the stacks that changed most, and the differential flamegraph.

use std::fmt;
use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};

use super::Recording;
use crate::error::{Error, Result};
use crate::view::fit_stack;
use crate::write::diff::{self, Change, KernelOverlap, Options, Profile};
use crate::write::report::LINE_WIDTH;
use crate::write::{folded, idle, svg};

/// One run's folded stacks.
#[derive(Clone, Debug)]
pub struct Run {
    /// The stacks and their weights.
    pub lines: Vec<(String, u64)>,
    /// "µs", or "ns" when merge wrote ns (all its GPU work lasted under half a µs),
    /// or "samples" for GPU PC samples ([`crate::write::pc::UNIT`]).
    pub unit: &'static str,
}

impl Run {
    /// Folded stacks read from a file: PC samples when they are
    /// ([`crate::write::pc::is_pc_folded`]), else GPU time in µs.
    pub fn from_folded(lines: Vec<(String, u64)>) -> Self {
        let unit = if crate::write::pc::is_pc_folded(&lines) {
            crate::write::pc::UNIT
        } else {
            "µs"
        };
        Self { lines, unit }
    }
}

impl Recording {
    /// Joins into folded stacks: GPU time, or with `idle` idle time.
    pub fn folded_run(&mut self, idle: bool) -> Result<Run> {
        if idle {
            let mut idler = idle::IdleFolder::new();
            self.join(&mut [&mut idler])?;
            Ok(Run {
                lines: idler.lines().to_vec(),
                unit: "µs",
            })
        } else {
            let mut folder = folded::Folder::new();
            self.join(&mut [&mut folder])?;
            Ok(Run {
                lines: folder.lines().to_vec(),
                unit: folder.unit(),
            })
        }
    }
}

/// Two runs compared: their profiles in one unit and the stacks that changed.
#[derive(Debug)]
#[non_exhaustive]
pub struct Comparison {
    /// "GPU time" or "idle time".
    pub what: &'static str,
    /// The unit of both profiles.
    pub unit: &'static str,
    /// BEFORE.
    pub before: Profile,
    /// AFTER.
    pub after: Profile,
    /// The stacks that changed, largest change first.
    pub rows: Vec<Change>,
}

impl Comparison {
    /// Compares `before` and `after`, of idle time when `idle`. PC samples
    /// compare only with PC samples.
    pub fn new(before: &Run, after: &Run, idle: bool, opts: &Options) -> Result<Self> {
        let samples = crate::write::pc::UNIT;
        if (before.unit == samples) != (after.unit == samples) {
            return Err(Error::UnlikeProfiles(
                "one run is GPU PC samples (folded stacks ending in stall reasons) and the \
                 other GPU time: they do not compare; diff two --pc-folded files, or two \
                 time profiles",
            ));
        }
        let profile =
            |r: &Run| Profile::from_lines(r.lines.iter().map(|(s, w)| (s.as_str(), *w)), opts);
        let (mut b, mut f) = (profile(before), profile(after));
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
        Ok(Self {
            what: if unit == samples {
                "GPU PC samples"
            } else if idle {
                "idle time"
            } else {
                "GPU time"
            },
            unit,
            before: b,
            after: f,
            rows,
        })
    }

    /// Stacks are matched by name: two runs whose kernels are named apart
    /// (another tool's spelling, another program) would show every stack as
    /// changed, and nothing else would say why.
    pub fn overlap_warning(&self) -> Option<String> {
        KernelOverlap::of(&self.before, &self.after).warning()
    }

    /// What grew by more than `pct` percent, if anything did.
    pub fn regression(&self, pct: f64) -> Option<String> {
        diff::regression(&self.before, &self.after, &self.rows, pct)
    }

    /// The comparison as JSON, its `top` largest changes.
    pub fn json(&self, top: usize, regressed: Option<&str>) -> String {
        diff::changes_json(
            self.what,
            self.unit,
            &self.before,
            &self.after,
            &self.rows,
            top,
            regressed,
        )
        .to_string()
    }

    /// The summary line and the table of the `top` largest changes, the runs
    /// named by their paths.
    pub fn table<'a>(&'a self, before: &'a Path, after: &'a Path, top: usize) -> Table<'a> {
        Table {
            c: self,
            before,
            after,
            top,
        }
    }

    /// Writes the differential flamegraph (widths from AFTER) to `path`;
    /// `title` replaces the default one.
    pub fn write_svg(
        &self,
        path: &Path,
        title: Option<String>,
        before: &Path,
        after: &Path,
    ) -> Result<()> {
        let lines = diff::differential_lines(&self.before, &self.after)?;
        let file = File::create(path).map_err(Error::io("create", path))?;
        let o = svg::Options {
            title: title.unwrap_or_else(|| {
                format!(
                    "gpuperf diff: {} by CPU stack (red: more in AFTER, blue: less)",
                    self.what
                )
            }),
            subtitle: Some(format!("{} → {}", file_name(before), file_name(after))),
            count_name: self.unit.to_owned(),
            ..svg::Options::default()
        };
        svg::render(&o, lines.iter().map(String::as_str), BufWriter::new(file)).map_err(|e| {
            Error::Output {
                path: PathBuf::from(path),
                source: Box::new(e),
            }
        })
    }

    fn stacks_in_either(&self) -> usize {
        let b = self.before.stacks();
        b.len()
            + self
                .after
                .stacks()
                .keys()
                .filter(|s| !b.contains_key(*s))
                .count()
    }
}

/// [`Comparison::table`]: a summary line, then before, after, delta, percent
/// and stack of the largest changes.
pub struct Table<'a> {
    c: &'a Comparison,
    before: &'a Path,
    after: &'a Path,
    top: usize,
}

impl fmt::Display for Table<'_> {
    fn fmt(&self, out: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Comparison {
            what,
            unit,
            before: b,
            after: f,
            rows,
        } = self.c;
        writeln!(
            out,
            "{what} by CPU stack: {} {unit} in `{}`, {} {unit} in `{}` ({:+} {unit}); {} of {} stacks changed",
            b.total(),
            self.before.display(),
            f.total(),
            self.after.display(),
            i128::from(f.total()) - i128::from(b.total()),
            rows.len(),
            self.c.stacks_in_either(),
        )?;
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
        for c in rows.iter().take(self.top) {
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
        if rows.len() > self.top {
            writeln!(
                out,
                "({} more changed stacks; --top N shows more)",
                rows.len() - self.top
            )?;
        }
        Ok(())
    }
}

/// A path's last component, for the subtitle: directories tell a reader of the
/// SVG nothing.
fn file_name(p: &Path) -> String {
    p.file_name().map_or_else(
        || p.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}
