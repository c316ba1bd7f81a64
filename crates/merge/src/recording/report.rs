//! The text tables printed after a join: the top kernels of `gpuperf record`'s
//! summary and the idle-time section of `gpuperf report`.

use std::fmt;

use crate::write::idle::IdleFolder;
use crate::write::report::{Row, dur};

/// The top `top` kernels by GPU time, each line starting `gpuperf: `'s
/// summary; nothing when there are none or `top` is 0.
pub struct KernelTable<'a> {
    /// Kernels by total GPU time, largest first.
    pub rows: &'a [Row],
    /// How many to show.
    pub top: u64,
}

impl fmt::Display for KernelTable<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (rows, top) = (self.rows, self.top);
        if rows.is_empty() || top == 0 {
            return Ok(());
        }
        writeln!(f, "gpuperf: top kernels by GPU time")?;
        writeln!(f, "{:>7} {:>9} {:>11}  name", "% GPU", "count", "total")?;
        for r in rows.iter().take(usize::try_from(top).unwrap_or(usize::MAX)) {
            writeln!(
                f,
                "{:>6.1}% {:>9} {:>11}  {}",
                r.percent,
                r.count,
                dur(r.total_ns),
                r.name
            )?;
        }
        if rows.len() as u64 > top {
            writeln!(
                f,
                "  ({} more; `gpuperf report` lists all)",
                rows.len() as u64 - top
            )?;
        }
        Ok(())
    }
}

/// The report's idle section: each stream's idle share and causes, each
/// device's, then the `top` CPU stacks that made the GPU wait longest.
/// Nothing when no stream had an active span.
pub struct IdleTable<'a> {
    /// The idle time found by the join.
    pub idle: &'a IdleFolder,
    /// Stacks to list.
    pub top: usize,
}

fn share(idle_ns: u64, span_ns: u64) -> f64 {
    if span_ns == 0 {
        0.0
    } else {
        idle_ns as f64 * 100.0 / span_ns as f64
    }
}

impl fmt::Display for IdleTable<'_> {
    fn fmt(&self, out: &mut fmt::Formatter<'_>) -> fmt::Result {
        let streams = self.idle.streams();
        if streams.iter().all(|(_, s)| s.span_ns == 0) {
            return Ok(());
        }
        let us = |ns: u64| ns as f64 / 1000.0;
        let windows = self.idle.step_windows();
        writeln!(
            out,
            "\nGPU idle time by stream (gaps between its work, within its active span)"
        )?;
        for (pid, w) in windows {
            writeln!(
                out,
                "  pid {pid}: within its {} complete profiler steps (work launched from ProfilerStep#{} until ProfilerStep#{} began, as HTA counts); \"whole µs\" is the whole trace's",
                w.complete, w.first, w.last
            )?;
        }
        writeln!(
            out,
            "  {:>8} {:>6} {:>6} {:>6} {:>12} {:>12} {:>12} {:>12} {:>12} {:>12} {:>12} {:>12}",
            "pid",
            "device",
            "stream",
            "% idle",
            "idle µs",
            "whole µs",
            "CPU late",
            "host sync",
            "latency",
            "stream wait",
            "collective",
            "other"
        )?;
        for (((pid, device, stream), s), (_, whole)) in
            streams.iter().zip(self.idle.streams_whole())
        {
            write!(
                out,
                "  {pid:>8} {device:>6} {stream:>6} {:>5.1}% {:>12.2} {:>12.2}",
                share(s.idle_ns, s.span_ns),
                us(s.idle_ns),
                us(whole.idle_ns),
            )?;
            for ns in s.by_cause_ns {
                write!(out, " {:>12.2}", us(ns))?;
            }
            writeln!(out)?;
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
        for ((pid, device), d) in self.idle.devices() {
            writeln!(
                out,
                "  {pid:>8} {device:>6} {:>5.1}% {:>12.2} {:>8}",
                share(d.idle_ns, d.span_ns),
                us(d.idle_ns),
                d.gaps
            )?;
        }
        let mut lines: Vec<&(String, u64)> = self.idle.lines().iter().collect();
        lines.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        writeln!(out, "\nCPU stacks that made the GPU wait (µs, by cause)")?;
        for (stack, w) in lines.into_iter().take(self.top) {
            writeln!(out, "  {w:>12}  {stack}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(name: &str, total_ns: u64) -> Row {
        Row {
            name: name.to_owned(),
            count: 2,
            total_ns,
            mean_ns: total_ns / 2,
            p50_ns: total_ns / 2,
            p99_ns: total_ns / 2,
            percent: 50.0,
            latency_p50_ns: None,
            latency_p99_ns: None,
        }
    }

    #[test]
    fn the_kernel_table_shows_the_top_and_counts_the_rest() {
        let rows = [row("a", 3_000), row("b", 1_000)];
        assert_eq!(
            KernelTable {
                rows: &rows,
                top: 0
            }
            .to_string(),
            ""
        );
        let one = KernelTable {
            rows: &rows,
            top: 1,
        }
        .to_string();
        assert!(
            one.starts_with("gpuperf: top kernels by GPU time\n"),
            "{one}"
        );
        assert!(one.contains("  a\n") && !one.contains("  b\n"), "{one}");
        assert!(
            one.ends_with("  (1 more; `gpuperf report` lists all)\n"),
            "{one}"
        );
        assert!(
            !KernelTable {
                rows: &rows,
                top: 2
            }
            .to_string()
            .contains("more")
        );
    }

    #[test]
    fn no_active_stream_means_no_idle_section() {
        let idle = IdleFolder::new();
        assert_eq!(
            IdleTable {
                idle: &idle,
                top: 5
            }
            .to_string(),
            ""
        );
    }
}
