//! Two runs' folded stacks side by side: which CPU stacks' GPU (or idle) time changed.
//!
//! Stacks are matched by name only. Two runs of one program load at other
//! addresses, so a frame's address part is dropped before matching: a
//! `+0x…` offset (`libfoo.so+0x1a2b`, `main+0x10`) and a frame that is nothing
//! but an address (`0x7f3a…`, which becomes `[unknown]`). With
//! [`Options::ignore_lines`], Python line numbers go too (`m.f (file.py:12)` →
//! `m.f (file.py)`, Kineto's `file.py(12): f` → `file.py: f`), so an edit above a
//! function does not make its stacks new ones. Stacks that become equal are summed.
//!
//! ```
//! use gpuperf_merge::write::diff::{Options, Profile, changes};
//!
//! let o = Options::default();
//! let before = Profile::from_lines([("main;run+0x10;[GPU_Kernel]k", 30)], &o);
//! let after = Profile::from_lines([("main;run+0x24;[GPU_Kernel]k", 50)], &o);
//! let rows = changes(&before, &after);
//! assert_eq!(rows[0].stack, "main;run;[GPU_Kernel]k");
//! assert_eq!(rows[0].delta(), 20);
//! ```

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::io::{self, BufRead};
use std::path::Path;

use crate::error::{Error, Result};

/// How stacks are matched across runs.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct Options {
    /// Drop Python line numbers from frames. Default is `false`.
    pub ignore_lines: bool,
}

/// One frame with its address parts removed (and its Python line number, when
/// `opts` says so).
pub(crate) fn normalize_frame<'a>(frame: &'a str, opts: &Options) -> Cow<'a, str> {
    if is_address(frame) {
        return Cow::Borrowed("[unknown]");
    }
    let mut out = Cow::Borrowed(frame);
    // `+0x…` offsets, wherever they sit (`file+0x10`, `f+0x3 (inlined)`).
    while let Some(i) = out.find("+0x") {
        let hex = out[i + 3..]
            .bytes()
            .take_while(u8::is_ascii_hexdigit)
            .count();
        if hex == 0 {
            break;
        }
        let mut s = out.into_owned();
        s.replace_range(i..i + 3 + hex, "");
        out = Cow::Owned(s);
    }
    if opts.ignore_lines && out.contains(".py") {
        out = Cow::Owned(strip_py_lines(&out));
    }
    out
}

/// `0x` followed by hex digits, and nothing else.
fn is_address(frame: &str) -> bool {
    frame
        .strip_prefix("0x")
        .is_some_and(|h| !h.is_empty() && h.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// Removes the digits after each `.py:` and inside each `.py(…)`.
fn strip_py_lines(frame: &str) -> String {
    let mut out = String::with_capacity(frame.len());
    let mut rest = frame;
    while let Some(i) = rest.find(".py") {
        out.push_str(&rest[..i + 3]);
        rest = &rest[i + 3..];
        let digits = |s: &str| s.bytes().take_while(u8::is_ascii_digit).count();
        if let Some(after) = rest.strip_prefix(':') {
            let n = digits(after);
            if n > 0 {
                rest = &after[n..];
            }
        } else if let Some(after) = rest.strip_prefix('(') {
            let n = digits(after);
            if n > 0 && after[n..].starts_with(')') {
                rest = &after[n + 1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// A whole stack (`;`-separated frames), each frame normalised.
pub(crate) fn normalize_stack(stack: &str, opts: &Options) -> String {
    let mut out = String::with_capacity(stack.len());
    for (i, frame) in stack.split(';').enumerate() {
        if i > 0 {
            out.push(';');
        }
        out.push_str(&normalize_frame(frame, opts));
    }
    out
}

/// Reads folded stacks (`frame;frame;… weight`, one a line; blank lines and
/// `# ` comments are skipped).
///
/// # Errors
///
/// [`Error::NotATrace`] naming the file and the first line that is not
/// `stack weight` with an integer weight; [`Error::Io`] when reading fails.
pub fn read_folded<R: BufRead>(r: R, path: &Path) -> Result<Vec<(String, u64)>> {
    let mut lines = Vec::new();
    for (n, line) in r.lines().enumerate() {
        let line = line.map_err(Error::io("read", path))?;
        let line = line.trim();
        if line.is_empty() || line.starts_with("# ") {
            continue;
        }
        let parsed = line
            .rsplit_once(' ')
            .and_then(|(s, w)| Some((s.trim_end(), w.parse::<u64>().ok()?)))
            .filter(|(s, _)| !s.is_empty());
        let Some((stack, w)) = parsed else {
            let shown: String = line.chars().take(40).collect();
            return Err(Error::NotATrace {
                path: path.to_owned(),
                expected: "folded stacks file",
                found: format!("line {} is {shown:?}, not `stack weight`", n + 1),
            });
        };
        lines.push((stack.to_owned(), w));
    }
    Ok(lines)
}

/// One run's weights by normalised stack.
#[derive(Clone, Debug, Default)]
pub struct Profile {
    stacks: BTreeMap<String, u64>,
}

impl Profile {
    /// Sums `(stack, weight)` lines by normalised stack.
    pub fn from_lines<'a, I>(lines: I, opts: &Options) -> Self
    where
        I: IntoIterator<Item = (&'a str, u64)>,
    {
        let mut stacks = BTreeMap::new();
        for (s, w) in lines {
            let v: &mut u64 = stacks.entry(normalize_stack(s, opts)).or_default();
            *v = v.saturating_add(w);
        }
        Self { stacks }
    }

    /// Every weight multiplied by `k` (µs → ns when the other run is in ns).
    pub fn scaled(mut self, k: u64) -> Self {
        for w in self.stacks.values_mut() {
            *w = w.saturating_mul(k);
        }
        self
    }

    /// The sum of the weights.
    pub fn total(&self) -> u64 {
        self.stacks.values().fold(0, |a, w| a.saturating_add(*w))
    }

    /// The stacks and their weights, sorted by stack.
    pub fn stacks(&self) -> &BTreeMap<String, u64> {
        &self.stacks
    }

    /// The weight under each kernel name (the stacks' `[GPU_Kernel]` frames).
    fn kernel_weights(&self) -> BTreeMap<&str, u64> {
        let mut out = BTreeMap::new();
        for (s, w) in &self.stacks {
            if let Some(k) = s.rsplit(';').find_map(|f| f.strip_prefix(KERNEL_FRAME)) {
                let v: &mut u64 = out.entry(k).or_default();
                *v = v.saturating_add(*w);
            }
        }
        out
    }

    /// Writes `stack weight` lines, for inferno's differential reader.
    fn folded(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for (s, w) in &self.stacks {
            out.extend_from_slice(s.as_bytes());
            out.extend_from_slice(format!(" {w}\n").as_bytes());
        }
        out
    }
}

/// One stack's weight in both runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    /// The normalised stack.
    pub stack: String,
    /// Its weight in the first run (0 when absent there).
    pub before: u64,
    /// Its weight in the second run (0 when absent there).
    pub after: u64,
}

impl Change {
    /// `after - before`.
    pub fn delta(&self) -> i128 {
        i128::from(self.after) - i128::from(self.before)
    }

    /// The change in percent of `before`; `None` for a stack new in the second run.
    pub fn percent(&self) -> Option<f64> {
        (self.before > 0).then(|| self.delta() as f64 * 100.0 / self.before as f64)
    }
}

/// `gpuperf diff --format json`: the totals, the `top` largest changes with
/// their whole stacks, and the regression found, if any.
pub(crate) fn changes_json(
    what: &str,
    unit: &str,
    before: &Profile,
    after: &Profile,
    rows: &[Change],
    top: usize,
    regression: Option<&str>,
) -> String {
    let changes: Vec<serde_json::Value> = rows
        .iter()
        .take(top)
        .map(|c| {
            serde_json::json!({
                "stack": c.stack, "before": c.before, "after": c.after,
                "delta": i64::try_from(c.delta()).unwrap_or(i64::MAX),
                "percent": c.percent(),
            })
        })
        .collect();
    let doc = serde_json::json!({
        "what": what, "unit": unit,
        "before_total": before.total(), "after_total": after.total(),
        "stacks_changed": rows.len(), "changes": changes, "regression": regression,
    });
    serde_json::to_string_pretty(&doc).unwrap_or_default()
}

/// Why the second run regressed by more than `pct` percent of the first run's
/// total: its total grew by more, or one stack did (the largest such stack is
/// named). `None` when neither did.
pub fn regression(before: &Profile, after: &Profile, rows: &[Change], pct: f64) -> Option<String> {
    let base = before.total().max(1) as f64;
    let share = |d: i128| d as f64 * 100.0 / base;
    let total = i128::from(after.total()) - i128::from(before.total());
    if share(total) > pct {
        return Some(format!(
            "the total grew by {:.1}% of BEFORE's total, more than {pct}%",
            share(total)
        ));
    }
    rows.iter()
        .filter(|c| share(c.delta()) > pct)
        .max_by_key(|c| c.delta())
        .map(|c| {
            format!(
                "a stack grew by {:.1}% of BEFORE's total, more than {pct}%: {}",
                share(c.delta()),
                crate::view::fit_stack(&c.stack, 120)
            )
        })
}

/// Every stack of either run whose weight changed, largest change first (by
/// absolute value; ties by stack).
pub fn changes(before: &Profile, after: &Profile) -> Vec<Change> {
    let mut rows: Vec<Change> = before
        .stacks
        .keys()
        .chain(
            after
                .stacks
                .keys()
                .filter(|s| !before.stacks.contains_key(*s)),
        )
        .map(|s| Change {
            stack: s.clone(),
            before: before.stacks.get(s).copied().unwrap_or(0),
            after: after.stacks.get(s).copied().unwrap_or(0),
        })
        .filter(|c| c.before != c.after)
        .collect();
    rows.sort_by(|a, b| {
        b.delta()
            .unsigned_abs()
            .cmp(&a.delta().unsigned_abs())
            .then_with(|| a.stack.cmp(&b.stack))
    });
    rows
}

/// The folded frame that names a kernel: `[GPU_Kernel]` and its name.
const KERNEL_FRAME: &str = "[GPU_Kernel]";

/// How much of each run's kernel time is under kernel names that the other run
/// has too: two runs of one program share nearly all of it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct KernelOverlap {
    /// Kernel time (weight of stacks ending in a kernel) of the first run.
    pub before_total: u64,
    /// The part of it under kernel names that the second run has.
    pub before_shared: u64,
    /// Kernel time of the second run.
    pub after_total: u64,
    /// The part of it under kernel names that the first run has.
    pub after_shared: u64,
    /// The first run's heaviest kernel name that the second run lacks.
    pub before_only: Option<String>,
    /// The second run's heaviest kernel name that the first run lacks.
    pub after_only: Option<String>,
}

impl KernelOverlap {
    /// Compares the kernel names of two runs, by weight.
    pub fn of(before: &Profile, after: &Profile) -> Self {
        let (b, a) = (before.kernel_weights(), after.kernel_weights());
        let side = |this: &BTreeMap<&str, u64>, other: &BTreeMap<&str, u64>| {
            let total = this.values().fold(0u64, |t, w| t.saturating_add(*w));
            let shared = this
                .iter()
                .filter(|(k, _)| other.contains_key(*k))
                .fold(0u64, |t, (_, w)| t.saturating_add(*w));
            let only = this
                .iter()
                .filter(|(k, _)| !other.contains_key(*k))
                .max_by(|x, y| x.1.cmp(y.1).then_with(|| y.0.cmp(x.0)))
                .map(|(k, _)| (*k).to_owned());
            (total, shared, only)
        };
        let (before_total, before_shared, before_only) = side(&b, &a);
        let (after_total, after_shared, after_only) = side(&a, &b);
        Self {
            before_total,
            before_shared,
            after_total,
            after_shared,
            before_only,
            after_only,
        }
    }

    /// Whether less than half of either run's kernel time is under names the
    /// other run has (runs without kernels are not compared).
    pub fn is_low(&self) -> bool {
        let low = |shared: u64, total: u64| total > 0 && u128::from(shared) * 2 < u128::from(total);
        self.before_total > 0
            && self.after_total > 0
            && (low(self.before_shared, self.before_total)
                || low(self.after_shared, self.after_total))
    }

    /// One line saying that the runs share few kernel names and why that may
    /// be, when [`KernelOverlap::is_low`].
    pub fn warning(&self) -> Option<String> {
        if !self.is_low() {
            return None;
        }
        let pct = |shared: u64, total: u64| shared as f64 * 100.0 / total as f64;
        let (b, a) = (
            self.before_only.as_deref().unwrap_or(""),
            self.after_only.as_deref().unwrap_or(""),
        );
        // Show each name from a little before where the two first differ.
        let same = b
            .char_indices()
            .zip(a.chars())
            .find(|((_, x), y)| x != y)
            .map_or(b.len().min(a.len()), |((i, _), _)| i);
        let excerpt = |n: &str| {
            let from = n[..same.min(n.len())]
                .char_indices()
                .rev()
                .nth(19)
                .map_or(0, |(i, _)| i);
            let mut e: String = n[from..].chars().take(60).collect();
            if from > 0 {
                e.insert(0, '…');
            }
            if n[from..].chars().count() > 60 {
                e.push('…');
            }
            e
        };
        Some(format!(
            "BEFORE and AFTER share few kernel names: {:.0}% of BEFORE's kernel time and {:.0}% of AFTER's \
             is under names the other has, so stacks differ by kernel name alone; the two runs spell \
             kernel names differently (another demangler or profiler) or ran different programs \
             (heaviest only in BEFORE: `{}`; only in AFTER: `{}`)",
            pct(self.before_shared, self.before_total),
            pct(self.after_shared, self.after_total),
            excerpt(b),
            excerpt(a),
        ))
    }
}

/// The lines of a differential flamegraph, `stack before after`, as inferno's
/// `differential` module writes them: drawn with the second run's widths and
/// coloured red where time grew, blue where it shrank.
///
/// # Errors
///
/// [`Error::Write`] if inferno fails (it reads and writes memory only).
pub(crate) fn differential_lines(before: &Profile, after: &Profile) -> Result<Vec<String>> {
    let mut out = Vec::new();
    inferno::differential::from_readers(
        inferno::differential::Options::default(),
        io::Cursor::new(before.folded()),
        io::Cursor::new(after.folded()),
        &mut out,
    )
    .map_err(|source| Error::Write {
        what: "differential folded stacks",
        source,
    })?;
    Ok(String::from_utf8_lossy(&out)
        .lines()
        .map(str::to_owned)
        .collect())
}

#[cfg(test)]
#[allow(non_snake_case)]
mod tests {
    use super::*;

    fn lines_opts() -> Options {
        Options { ignore_lines: true }
    }

    #[test]
    fn normalize_frame__offsets_and_raw_addresses_dropped() {
        let o = Options::default();
        assert_eq!(normalize_frame("libfoo.so+0x1a2b", &o), "libfoo.so");
        assert_eq!(normalize_frame("[a.out]+0x1234", &o), "[a.out]");
        assert_eq!(normalize_frame("run+0x10+0xff", &o), "run");
        assert_eq!(normalize_frame("0x7f3a12bc", &o), "[unknown]");
        // Not an address: kept as it is.
        assert_eq!(normalize_frame("0xcafe_kernel", &o), "0xcafe_kernel");
        assert_eq!(normalize_frame("operator+", &o), "operator+");
        assert_eq!(normalize_frame("a+0xg", &o), "a+0xg");
        assert!(matches!(normalize_frame("main", &o), Cow::Borrowed(_)));
    }

    #[test]
    fn normalize_frame__python_lines_only_with_ignore_lines() {
        let f = "model.forward (model.py:123)";
        assert_eq!(normalize_frame(f, &Options::default()), f);
        assert_eq!(
            normalize_frame(f, &lines_opts()),
            "model.forward (model.py)"
        );
        assert_eq!(
            normalize_frame(
                "torch/nn/modules/module.py(1736): _call_impl",
                &lines_opts()
            ),
            "torch/nn/modules/module.py: _call_impl"
        );
        // A `.pyx` file or a `.py` without a number is left alone.
        assert_eq!(
            normalize_frame("m.f (a.pyx:3)", &lines_opts()),
            "m.f (a.pyx:3)"
        );
        assert_eq!(normalize_frame("x.py:abc", &lines_opts()), "x.py:abc");
    }

    #[test]
    fn profiles__stacks_matched_across_address_and_line_changes() {
        let before = Profile::from_lines(
            [
                ("main;run+0x10;train (t.py:10);[GPU_Kernel]k", 30),
                ("main;0x7f00aa;[GPU_Kernel]j", 5),
            ],
            &lines_opts(),
        );
        let after = Profile::from_lines(
            [
                ("main;run+0x24;train (t.py:14);[GPU_Kernel]k", 50),
                ("main;run+0x30;train (t.py:15);[GPU_Kernel]k", 4),
                ("main;0x7f11bb;[GPU_Kernel]j", 5),
                ("main;new;[GPU_Kernel]n", 1),
            ],
            &lines_opts(),
        );
        assert_eq!(
            changes(&before, &after),
            [
                Change {
                    stack: "main;run;train (t.py);[GPU_Kernel]k".into(),
                    before: 30,
                    after: 54
                },
                Change {
                    stack: "main;new;[GPU_Kernel]n".into(),
                    before: 0,
                    after: 1
                },
            ]
        );
        // Without --ignore-lines, the line shift makes them other stacks.
        let before = Profile::from_lines([("train (t.py:10)", 30)], &Options::default());
        let after = Profile::from_lines([("train (t.py:14)", 30)], &Options::default());
        assert_eq!(changes(&before, &after).len(), 2);
    }

    #[test]
    fn change__delta_and_percent() {
        let c = Change {
            stack: "s".into(),
            before: 40,
            after: 10,
        };
        assert_eq!(c.delta(), -30);
        assert_eq!(c.percent(), Some(-75.0));
        let new = Change { before: 0, ..c };
        assert_eq!(new.percent(), None);
    }

    #[test]
    fn read_folded__weights_summed_and_bad_line_named() {
        let text = "# comment\nmain;a 3\n\nmain;b  7\n";
        let l = read_folded(text.as_bytes(), Path::new("x.folded")).unwrap();
        assert_eq!(l, [("main;a".into(), 3), ("main;b".into(), 7)]);
        let err = read_folded("main;a 3\nmain;b x\n".as_bytes(), Path::new("x.folded"))
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "`x.folded` is not a folded stacks file (line 2 is \"main;b x\", not `stack weight`)"
        );
        assert!(read_folded("1234\n".as_bytes(), Path::new("y")).is_err());
    }

    #[test]
    fn kernel_overlap__low_when_either_run_has_most_time_under_names_the_other_lacks() {
        let o = Options::default();
        let before = Profile::from_lines(
            [
                ("main;a;[GPU_Kernel]std::array<char*, 3ul>", 60),
                ("main;b;[GPU_Kernel]k(int)", 40),
                ("main;c;[GPU_Idle: CPU late]", 500),
            ],
            &o,
        );
        // The same program, another spelling of its heaviest kernel.
        let after = Profile::from_lines(
            [
                ("main;a;[GPU_Kernel]std::array<char*, (unsigned long)3>", 60),
                ("main;b;[GPU_Kernel]k(int)", 40),
            ],
            &o,
        );
        let k = KernelOverlap::of(&before, &after);
        assert_eq!(
            (
                k.before_total,
                k.before_shared,
                k.after_total,
                k.after_shared
            ),
            (100, 40, 100, 40)
        );
        assert_eq!(k.before_only.as_deref(), Some("std::array<char*, 3ul>"));
        let w = k.warning().unwrap();
        assert!(!w.contains('\n'), "{w}");
        assert!(
            w.starts_with("BEFORE and AFTER share few kernel names: 40% of BEFORE's kernel time and 40% of AFTER's"),
            "{w}"
        );
        assert!(w.contains("spell kernel names differently"), "{w}");
        assert!(
            w.ends_with(
                "(heaviest only in BEFORE: `std::array<char*, 3ul>`; \
                 only in AFTER: `std::array<char*, (unsigned long)3>`)"
            ),
            "{w}"
        );
        // Half or more shared on both sides: no warning; nor without kernels.
        let after = Profile::from_lines(
            [
                ("main;a;[GPU_Kernel]std::array<char*, 3ul>", 50),
                ("main;d;[GPU_Kernel]new()", 50),
            ],
            &o,
        );
        assert_eq!(KernelOverlap::of(&before, &after).warning(), None);
        let idle = Profile::from_lines([("main;c;[GPU_Idle: CPU late]", 5)], &o);
        assert_eq!(KernelOverlap::of(&idle, &idle).warning(), None);
        assert_eq!(KernelOverlap::of(&before, &idle).warning(), None);
        // One side's time mostly elsewhere is enough.
        let after = Profile::from_lines(
            [
                ("main;a;[GPU_Kernel]std::array<char*, 3ul>", 10),
                ("main;d;[GPU_Kernel]new()", 90),
            ],
            &o,
        );
        assert!(KernelOverlap::of(&before, &after).is_low());
    }

    #[test]
    fn differential_lines__before_and_after_counts_per_stack() {
        let before = Profile::from_lines([("main;a", 3), ("main;b", 7)], &Options::default());
        let after = Profile::from_lines([("main;a", 5), ("main;c", 2)], &Options::default());
        let mut l = differential_lines(&before, &after).unwrap();
        l.sort();
        assert_eq!(l, ["main;a 3 5", "main;b 7 0", "main;c 0 2"]);
    }
}
