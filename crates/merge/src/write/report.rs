//! Kernel statistics: the top GPU work by time, and the latency from each launch
//! call to the start of the GPU work it caused (the reference's "launchlate").

use std::fmt::Write as _;
use std::io::Write;

use std::collections::BTreeMap;

use rustc_hash::FxHashMap;

use crate::error::{Error, Result};
use crate::join::{Context, Match, Sink};
use crate::model::{ActivityKind, Origin, Record};
use crate::read::cpu::StackId;
use crate::view::{elide_middle, fit_stack};
use crate::write::activity_label;
use crate::write::demangle::Demangler;

/// The widest line the text report writes, in characters.
pub(crate) const LINE_WIDTH: usize = 200;

#[derive(Default)]
struct Stats {
    durations: Vec<u64>,
    // Launch call start → GPU start, for activities whose API call is known.
    latencies: Vec<u64>,
}

/// Collects per-kernel statistics; a [`Sink`].
#[derive(Default)]
pub struct Reporter {
    by_name: FxHashMap<String, Stats>,
    by_stack: FxHashMap<StackId, (u64, u64)>,
    stack_texts: FxHashMap<StackId, String>,
    total_ns: u64,
    demangler: Demangler,
    /// Each process's executable and origin (host, ranks).
    processes: BTreeMap<u32, (String, Origin)>,
}

/// One row of the kernel table.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// Demangled kernel name, or `[Memcpy HtoD]` / `[Memset]`.
    pub name: String,
    /// Executions.
    pub count: u64,
    /// Total GPU time, ns.
    pub total_ns: u64,
    /// Mean, ns.
    pub mean_ns: u64,
    /// Median, ns.
    pub p50_ns: u64,
    /// 99th percentile, ns.
    pub p99_ns: u64,
    /// Share of all GPU time, percent.
    pub percent: f64,
    /// Launch-to-start latency median, ns (`None` without API records).
    pub latency_p50_ns: Option<u64>,
    /// Launch-to-start latency 99th percentile, ns.
    pub latency_p99_ns: Option<u64>,
}

impl Reporter {
    /// The traced processes by pid: executable and where each ran.
    pub fn processes(&self) -> &BTreeMap<u32, (String, Origin)> {
        &self.processes
    }

    /// An empty reporter.
    pub fn new() -> Self {
        Self::default()
    }

    /// Rows sorted by total GPU time, largest first.
    pub fn rows(&mut self) -> Vec<Row> {
        let total = self.total_ns.max(1);
        let mut rows: Vec<Row> = self
            .by_name
            .iter_mut()
            .map(|(name, s)| {
                s.durations.sort_unstable();
                s.latencies.sort_unstable();
                let sum = s.durations.iter().fold(0u64, |a, &d| a.saturating_add(d));
                let count = s.durations.len() as u64;
                Row {
                    name: name.clone(),
                    count,
                    total_ns: sum,
                    mean_ns: sum / count.max(1),
                    p50_ns: percentile(&s.durations, 50).unwrap_or(0),
                    p99_ns: percentile(&s.durations, 99).unwrap_or(0),
                    percent: 100.0 * sum as f64 / total as f64,
                    latency_p50_ns: percentile(&s.latencies, 50),
                    latency_p99_ns: percentile(&s.latencies, 99),
                }
            })
            .collect();
        rows.sort_by(|a, b| {
            b.total_ns
                .cmp(&a.total_ns)
                .then_with(|| a.name.cmp(&b.name))
        });
        rows
    }

    /// GPU time (ns) and launches by CPU stack, largest first.
    pub fn stacks(&self) -> Vec<(&str, u64, u64)> {
        let mut stacks: Vec<(&str, u64, u64)> = self
            .by_stack
            .iter()
            .map(|(id, (ns, n))| (self.stack_texts[id].as_str(), *ns, *n))
            .collect();
        stacks.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
        stacks
    }

    /// Total GPU time, ns.
    pub fn total_ns(&self) -> u64 {
        self.total_ns
    }

    /// Writes the kernel table and, when stacks are known, the top launch stacks.
    pub fn write<W: Write>(&mut self, mut out: W, top: usize) -> Result<()> {
        let rows = self.rows();
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{:>7} {:>9} {:>11} {:>10} {:>10} {:>10} {:>11} {:>11}  name",
            "% GPU", "count", "total", "mean", "p50", "p99", "launch p50", "launch p99"
        );
        for r in rows.iter().take(top) {
            let lat = |v: Option<u64>| v.map_or_else(|| "-".to_owned(), dur);
            let _ = writeln!(
                s,
                "{:>6.1}% {:>9} {:>11} {:>10} {:>10} {:>10} {:>11} {:>11}  {}",
                r.percent,
                r.count,
                dur(r.total_ns),
                dur(r.mean_ns),
                dur(r.p50_ns),
                dur(r.p99_ns),
                lat(r.latency_p50_ns),
                lat(r.latency_p99_ns),
                elide_middle(&r.name, LINE_WIDTH - 90)
            );
        }
        if rows.len() > top {
            let _ = writeln!(
                s,
                "({} more rows; raise --top to see them)",
                rows.len() - top
            );
        }
        let _ = writeln!(
            s,
            "launch = time from the launch API call's start to the GPU work's start"
        );
        if !self.by_stack.is_empty() {
            let _ = writeln!(
                s,
                "\ntop launch stacks by GPU time (leaf first, ← its callers):"
            );
            for (text, ns, n) in self.stacks().into_iter().take(top) {
                let _ = writeln!(
                    s,
                    "{:>6.1}% {:>9} {:>11}  {}",
                    100.0 * ns as f64 / self.total_ns.max(1) as f64,
                    n,
                    dur(ns),
                    fit_stack(text, LINE_WIDTH - 31)
                );
            }
        }
        out.write_all(s.as_bytes())
            .and_then(|()| out.flush())
            .map_err(|source| Error::Write {
                what: "report",
                source,
            })
    }
}

impl Sink for Reporter {
    fn record(&mut self, ctx: &Context<'_>, rec: &Record, m: &Match<'_>) -> Result<()> {
        let a = match rec {
            Record::Activity(a) => a,
            Record::Process(p) => {
                self.processes
                    .entry(p.pid)
                    .or_default()
                    .0
                    .clone_from(&p.exe);
                return Ok(());
            }
            Record::Origin(o) => {
                self.processes.entry(o.pid).or_default().1 = o.origin.clone();
                return Ok(());
            }
            _ => return Ok(()),
        };
        if let ActivityKind::Sync { .. } = a.kind {
            return Ok(());
        }
        let name = activity_label(a.kind, |name| {
            self.demangler.label(name, ctx.strings, ctx.view).to_owned()
        });
        let d = a.duration_ns();
        self.total_ns = self.total_ns.saturating_add(d);
        let s = self.by_name.entry(name).or_default();
        s.durations.push(d);
        if let Some(api) = m.api {
            s.latencies.push(a.start_ns.saturating_sub(api.start_ns));
        }
        if let (Some(stack), Some(cpu)) = (m.stack(), ctx.cpu) {
            let e = self.by_stack.entry(stack).or_default();
            e.0 = e.0.saturating_add(d);
            e.1 += 1;
            self.stack_texts
                .entry(stack)
                .or_insert_with(|| cpu.stacks.text(stack).to_owned());
        }
        Ok(())
    }
}

/// Nearest-rank percentile of sorted values.
pub(crate) fn percentile(sorted: &[u64], p: u64) -> Option<u64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (p as usize * sorted.len()).div_ceil(100).max(1);
    sorted.get(rank - 1).copied()
}

/// A duration in the largest unit that keeps it readable.
pub fn dur(ns: u64) -> String {
    match ns {
        0..1_000 => format!("{ns} ns"),
        1_000..1_000_000 => format!("{:.2} µs", ns as f64 / 1e3),
        1_000_000..1_000_000_000 => format!("{:.2} ms", ns as f64 / 1e6),
        _ => format!("{:.2} s", ns as f64 / 1e9),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&v, 50), Some(50));
        assert_eq!(percentile(&v, 99), Some(99));
        assert_eq!(percentile(&[7], 99), Some(7));
        assert_eq!(percentile(&[], 50), None);
    }

    #[test]
    fn durations_pick_units() {
        assert_eq!(dur(999), "999 ns");
        assert_eq!(dur(1_500), "1.50 µs");
        assert_eq!(dur(2_500_000), "2.50 ms");
        assert_eq!(dur(3_000_000_000), "3.00 s");
    }
}
