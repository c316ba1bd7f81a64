//! The text tables printed after a join: the top kernels of `gpuperf record`'s
//! summary and the idle-time section of `gpuperf report`.

use std::fmt;

use std::collections::BTreeMap;

use crate::view::fit_stack;
use crate::view::{elide_middle, innermost_python};
use crate::write::idle::IdleFolder;
use crate::write::pc::{KernelSamples, PcFolder};
use crate::write::report::{LINE_WIDTH, Reporter, Row, dur};

/// The top `top` kernels by GPU time, each line starting `gpuperf: `'s
/// summary; nothing when there are none or `top` is 0.
pub(crate) struct KernelTable<'a> {
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

/// A device as the text report prints it: its number, or `unknown`.
fn device_text(device: Option<u32>) -> String {
    device.map_or_else(|| "unknown".to_owned(), |d| d.to_string())
}

/// A stream as the text report prints it: its number, or `none`.
fn stream_text(stream: Option<u32>) -> String {
    stream.map_or_else(|| "none".to_owned(), |s| s.to_string())
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
        for ((key, s), (_, whole)) in streams.iter().zip(self.idle.streams_whole()) {
            let pid = key.pid;
            let (device, stream) = (device_text(key.device), stream_text(key.stream));
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
            "\nGPU idle time by device (no stream of the device busy, within its active span; \
             within the profiler steps above where a process marks them)"
        )?;
        writeln!(
            out,
            "  {:>8} {:>6} {:>6} {:>12} {:>12} {:>8}",
            "pid", "device", "% idle", "idle µs", "whole µs", "gaps"
        )?;
        for ((key, d), (_, whole)) in self.idle.devices().iter().zip(self.idle.devices_whole()) {
            let (pid, device) = (key.pid, device_text(key.device));
            writeln!(
                out,
                "  {pid:>8} {device:>6} {:>5.1}% {:>12.2} {:>12.2} {:>8}",
                share(d.idle_ns, d.span_ns),
                us(d.idle_ns),
                us(whole.idle_ns),
                d.gaps
            )?;
        }
        let mut lines: Vec<&(String, u64)> = self.idle.lines().iter().collect();
        lines.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        writeln!(
            out,
            "\nCPU stacks that made the GPU wait (µs, by cause; leaf first, ← its callers)"
        )?;
        for (stack, w) in lines.into_iter().take(self.top) {
            writeln!(out, "  {w:>12}  {}", fit_stack(stack, LINE_WIDTH - 16))?;
        }
        Ok(())
    }
}

/// Where stacks have no Python frame, the row of [`PythonLines`] they fall in.
pub(crate) const NO_PYTHON_LINE: &str = "[no Python line]";

/// GPU time and GPU idle time by source line: the innermost Python frame of
/// each launch stack and of each stack that made the GPU wait.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PythonLines {
    /// (line, GPU ns, launches, idle ns), by GPU and idle time together, largest first.
    pub rows: Vec<(String, u64, u64, u64)>,
    /// All GPU time, ns.
    pub gpu_total_ns: u64,
}

impl PythonLines {
    /// The table of a join's report and idle stacks; empty when no stack has
    /// a Python frame.
    pub fn of(rep: &Reporter, idle: &IdleFolder) -> Self {
        let mut by: BTreeMap<&str, (u64, u64, u64)> = BTreeMap::new();
        let mut any = false;
        for (stack, ns, n) in rep.stacks() {
            let line = innermost_python(stack);
            any |= line.is_some();
            let e = by.entry(line.unwrap_or(NO_PYTHON_LINE)).or_default();
            e.0 += ns;
            e.1 += n;
        }
        for (stack, us) in idle.lines() {
            let line = innermost_python(stack);
            any |= line.is_some();
            by.entry(line.unwrap_or(NO_PYTHON_LINE)).or_default().2 += us * 1000;
        }
        if !any {
            return Self::default();
        }
        let mut rows: Vec<(String, u64, u64, u64)> = by
            .into_iter()
            .map(|(l, (g, n, i))| (l.to_owned(), g, n, i))
            .collect();
        rows.sort_by(|a, b| (b.1 + b.3).cmp(&(a.1 + a.3)).then_with(|| a.0.cmp(&b.0)));
        Self {
            rows,
            gpu_total_ns: rep.total_ns(),
        }
    }
}

/// [`PythonLines`] as text, the `top` rows.
pub struct PythonLineTable<'a> {
    /// The table.
    pub lines: &'a PythonLines,
    /// Rows to show.
    pub top: usize,
}

impl fmt::Display for PythonLineTable<'_> {
    fn fmt(&self, out: &mut fmt::Formatter<'_>) -> fmt::Result {
        let rows = &self.lines.rows;
        if rows.is_empty() {
            return Ok(());
        }
        writeln!(
            out,
            "\nGPU time and GPU idle time by Python line (innermost Python frame)"
        )?;
        writeln!(
            out,
            "{:>7} {:>11} {:>9} {:>11}  line",
            "% GPU", "GPU", "launches", "idle"
        )?;
        for (line, gpu, n, idle) in rows.iter().take(self.top) {
            writeln!(
                out,
                "{:>6.1}% {:>11} {:>9} {:>11}  {}",
                100.0 * *gpu as f64 / self.lines.gpu_total_ns.max(1) as f64,
                dur(*gpu),
                n,
                dur(*idle),
                elide_middle(line, LINE_WIDTH - 45)
            )?;
        }
        if rows.len() > self.top {
            writeln!(
                out,
                "({} more lines; raise --top to see them)",
                rows.len() - self.top
            )?;
        }
        Ok(())
    }
}

/// The report's PC-sample section: per kernel (most samples first), its
/// hottest source lines, each with its three commonest stall
/// reasons, and its stall reasons, `top` of each, a reason's not-issued
/// samples beside it. Nothing without samples.
pub struct PcTable<'a> {
    /// The samples, after the join.
    pub pc: &'a PcFolder,
    /// Kernels, and lines and reasons per kernel, to list.
    pub top: usize,
}

/// Stall reasons listed under each source line of the text report (the JSON
/// lists `top`).
const LINE_STALLS: usize = 3;

/// `(name, samples)` largest first, ties by name.
fn by_samples(m: &BTreeMap<String, u64>) -> Vec<(&str, u64)> {
    let mut v: Vec<(&str, u64)> = m.iter().map(|(k, &n)| (k.as_str(), n)).collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
    v
}

/// Kernels by samples, largest first, ties by name.
fn kernels_by_samples(pc: &PcFolder) -> Vec<(&str, &KernelSamples)> {
    let mut v: Vec<(u64, &str, &KernelSamples)> = pc
        .kernels()
        .iter()
        .map(|(k, s)| (s.samples(), k.as_str(), s))
        .collect();
    v.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(b.1)));
    v.into_iter().map(|(_, k, s)| (k, s)).collect()
}

impl fmt::Display for PcTable<'_> {
    fn fmt(&self, out: &mut fmt::Formatter<'_>) -> fmt::Result {
        let stats = self.pc.stats();
        if stats.samples == 0 {
            return Ok(());
        }
        writeln!(
            out,
            "\nGPU PC samples by kernel: source lines (under each, why its warps stalled, \
             % of the line's samples) and stall reasons"
        )?;
        writeln!(out, "({stats})")?;
        let pct = |n: u64, of: u64| n as f64 * 100.0 / of.max(1) as f64;
        let kernels = kernels_by_samples(self.pc);
        for (name, k) in kernels.iter().take(self.top) {
            let (samples, lines, stalls) = (k.samples(), k.lines(), k.stalls());
            // Kernel-serialized samples name their launches: how many gave these.
            let launches = match k.launches {
                0 => String::new(),
                1 => " (1 launch)".to_owned(),
                n => format!(" ({n} launches)"),
            };
            writeln!(
                out,
                "{:>9} {:>5.1}%  {}{launches}",
                samples,
                pct(samples, stats.samples),
                elide_middle(name, (LINE_WIDTH - 18).saturating_sub(launches.len()))
            )?;
            // A stall reason's row: its samples, of `of`, and their not-issued part.
            let stall = |out: &mut fmt::Formatter<'_>,
                         indent: &str,
                         reason: &str,
                         n: u64,
                         of: u64,
                         not_issued: &BTreeMap<String, u64>|
             -> fmt::Result {
                write!(out, "{n:>9} {:>5.1}%    {indent}{reason}", pct(n, of))?;
                if let Some(&ni) = not_issued.get(reason) {
                    write!(out, " (not issued {ni}, {:.1}%)", pct(ni, n))?;
                }
                writeln!(out)
            };
            for (line, n) in by_samples(&lines).into_iter().take(self.top) {
                writeln!(out, "{:>9} {:>5.1}%    line   {line}", n, pct(n, samples))?;
                if let Some(at) = k.line_stalls.get(line) {
                    for (reason, r) in by_samples(&at.stalls).into_iter().take(LINE_STALLS) {
                        stall(out, "         ", reason, r, n, &at.not_issued)?;
                    }
                }
            }
            for (reason, n) in by_samples(&stalls.stalls).into_iter().take(self.top) {
                stall(out, "stall  ", reason, n, samples, &stalls.not_issued)?;
            }
        }
        if kernels.len() > self.top {
            writeln!(
                out,
                "({} more kernels; raise --top to see them)",
                kernels.len() - self.top
            )?;
        }
        Ok(())
    }
}

/// `gpuperf report --format json`: the tables of the text report, with whole
/// stacks and names (`top` rows each).
pub fn report_json(
    rep: &mut Reporter,
    idle: &IdleFolder,
    lines: &PythonLines,
    pc: &PcFolder,
    top: usize,
) -> String {
    use serde_json::json;
    let kernels: Vec<_> = rep
        .rows()
        .iter()
        .take(top)
        .map(|r| {
            json!({
                "name": r.name, "count": r.count, "total_ns": r.total_ns, "mean_ns": r.mean_ns,
                "p50_ns": r.p50_ns, "p99_ns": r.p99_ns, "percent": r.percent,
                "launch_p50_ns": r.latency_p50_ns, "launch_p99_ns": r.latency_p99_ns,
            })
        })
        .collect();
    let stacks: Vec<_> = rep
        .stacks()
        .into_iter()
        .take(top)
        .map(|(s, ns, n)| json!({ "stack": s, "gpu_ns": ns, "launches": n }))
        .collect();
    let python_lines: Vec<_> = lines
        .rows
        .iter()
        .take(top)
        .map(|(l, g, n, i)| json!({ "line": l, "gpu_ns": g, "launches": n, "idle_ns": i }))
        .collect();
    let streams: Vec<_> = idle
        .streams()
        .iter()
        .map(|(key, s)| {
            json!({ "pid": key.pid, "device": key.device, "stream": key.stream, "span_ns": s.span_ns,
                    "idle_ns": s.idle_ns, "idle_by_cause_ns": s.by_cause_ns, "gaps": s.gaps })
        })
        .collect();
    let mut waits: Vec<&(String, u64)> = idle.lines().iter().collect();
    waits.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let idle_stacks: Vec<_> = waits
        .into_iter()
        .take(top)
        .map(|(s, us)| json!({ "stack": s, "idle_us": us }))
        .collect();
    let processes: Vec<_> = rep
        .processes()
        .iter()
        .map(|(pid, (exe, o))| {
            json!({ "pid": pid, "exe": exe, "host": o.host, "rank": o.rank,
                    "local_rank": o.local_rank, "world_size": o.world_size })
        })
        .collect();
    let stats = pc.stats();
    let pc_kernels: Vec<_> = kernels_by_samples(pc)
        .into_iter()
        .take(top)
        .map(|(name, k)| {
            // `not_issued`: a part of an entry's samples, said where known.
            let list = |m: &BTreeMap<String, u64>,
                        key: &str,
                        not_issued: Option<&BTreeMap<String, u64>>|
             -> Vec<serde_json::Value> {
                by_samples(m)
                    .into_iter()
                    .take(top)
                    .map(|(x, n)| {
                        let mut e = json!({ key: x, "samples": n });
                        if let Some(ni) = not_issued.and_then(|m| m.get(x)) {
                            e["not_issued"] = json!(ni);
                        }
                        e
                    })
                    .collect()
            };
            let stalls = k.stalls();
            let mut lines = list(&k.lines(), "line", None);
            for l in &mut lines {
                if let Some(at) = l["line"].as_str().and_then(|x| k.line_stalls.get(x)) {
                    l["stalls"] = json!(list(&at.stalls, "reason", Some(&at.not_issued)));
                }
            }
            json!({ "kernel": name, "samples": k.samples(),
                    "launches": stats.serialized.then_some(k.launches),
                    "lines": lines,
                    "stalls": list(&stalls.stalls, "reason", Some(&stalls.not_issued)) })
        })
        .collect();
    let doc = json!({
        "gpu_total_ns": rep.total_ns(),
        "pc_samples": { "samples": stats.samples, "attributed": stats.attributed,
                        "unattributed": stats.unattributed, "unmatched": stats.unmatched,
                        "without_line": stats.without_line, "not_issued": stats.not_issued,
                        "launches_sampled": stats.launches.map(|l| l.sampled),
                        "launches_unsampled": stats.launches.map(|l| l.unsampled),
                        "launches_with_samples": stats.serialized.then_some(stats.launches_with_samples),
                        "serialized": stats.serialized, "continuous": stats.continuous,
                        "kernels": pc_kernels },
        "processes": processes,
        "kernels": kernels,
        "stacks": stacks,
        "python_lines": python_lines,
        "idle_streams": streams,
        "idle_stacks": idle_stacks,
    });
    serde_json::to_string_pretty(&doc).unwrap_or_default()
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

#[cfg(test)]
mod unknown_tests {
    use super::*;
    use crate::join;
    use crate::model::{Activity, ActivityKind, ApiCall, ApiDomain, Process, Record, StringTable};
    use crate::read::gputrace;
    use crate::read::input::GpuInputs;
    use serde_json::{Value, json};

    /// A trace of process 42: a kernel on stream 7 that waits for a kernel on
    /// no stream, two kernels on stream 3 of no known device, and a context
    /// sync on no stream. Times in µs.
    fn trace() -> Vec<u8> {
        let mut strings = StringTable::new();
        let mut records = vec![Record::Process(Process {
            pid: 42,
            ppid: Some(1),
            exe: "/bin/app".into(),
            start_ns: 0,
            start_realtime_ns: None,
        })];
        let gpu = [
            // (call, start, end, device, stream, kernel; `None`: a sync)
            (1, 5, 10, Some(0), Some(7), Some("k1")),
            (2, 10, 40, Some(0), None, Some("unstreamed")),
            // Called at 12, starts at 50: waits for the kernel on no stream.
            (12, 50, 55, Some(0), Some(7), Some("k2")),
            (13, 60, 65, None, Some(3), Some("k3")),
            (14, 70, 75, None, Some(3), Some("k4")),
            (80, 80, 81, Some(0), None, None),
        ];
        for (corr, (call, start, end, device, stream, kernel)) in (1..).zip(gpu) {
            let api = if kernel.is_some() {
                "cudaLaunchKernel"
            } else {
                "cudaDeviceSynchronize"
            };
            records.push(Record::Api(ApiCall {
                pid: 42,
                tid: 42,
                start_ns: call * 1000,
                end_ns: call * 1000 + 500,
                correlation_id: corr,
                cbid: 211,
                domain: ApiDomain::Runtime,
                name: strings.intern(api),
            }));
            let kind = match kernel {
                Some(k) => ActivityKind::Kernel {
                    name: strings.intern(k),
                    grid: [1, 1, 1],
                    block: [32, 1, 1],
                },
                // CUPTI's context sync.
                None => ActivityKind::Sync {
                    sync_type: 3,
                    wait: None,
                },
            };
            records.push(Record::Activity(Activity {
                pid: 42,
                start_ns: start * 1000,
                end_ns: end * 1000,
                correlation_id: corr,
                device,
                context: 1,
                stream,
                graph_id: None,
                graph_node_id: None,
                kind,
            }));
        }
        let mut w = gputrace::Writer::new(Vec::new()).unwrap();
        for r in &records {
            w.write(r, &strings).unwrap();
        }
        w.into_inner()
    }

    #[test]
    fn an_unknown_device_and_no_stream_are_words_in_text_and_null_in_json() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("unknown.gputrace");
        std::fs::write(&path, trace()).unwrap();
        let mut strings = StringTable::new();
        let inputs = GpuInputs::open(&[path], &mut strings).unwrap();
        let mut idle = IdleFolder::new();
        let opts = join::Options::default();
        join::merge(None, &inputs, &mut strings, &opts, &mut [&mut idle]).unwrap();

        let text = IdleTable {
            idle: &idle,
            top: 10,
        }
        .to_string();
        let rows: Vec<Vec<&str>> = text
            .lines()
            .map(|l| l.split_whitespace().collect())
            .collect();
        // Stream rows: pid, device, stream, …; device rows: pid, device, % idle, ….
        let stream_row = |device: &str, stream: &str| {
            rows.iter()
                .any(|r| r.len() == 12 && r[1] == device && r[2] == stream)
        };
        assert!(stream_row("0", "7"), "{text}");
        assert!(stream_row("0", "none"), "{text}");
        assert!(stream_row("unknown", "3"), "{text}");
        assert!(
            rows.iter().any(|r| r.len() == 6 && r[1] == "unknown"),
            "{text}"
        );
        assert!(
            text.contains("[waited for stream none: unstreamed]"),
            "{text}"
        );
        assert!(!text.contains("4294967295"), "{text}");

        let (mut rep, pc) = (Reporter::new(), PcFolder::new());
        let lines = PythonLines::of(&rep, &idle);
        let doc = report_json(&mut rep, &idle, &lines, &pc, 10);
        assert!(!doc.contains("4294967295"), "{doc}");
        let doc: Value = serde_json::from_str(&doc).unwrap();
        let streams: Vec<(Value, Value)> = doc["idle_streams"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| (s["device"].clone(), s["stream"].clone()))
            .collect();
        assert_eq!(
            streams,
            [
                (json!(0), json!(7)),
                (json!(0), Value::Null),
                (Value::Null, json!(3)),
            ]
        );
        let waits = doc["idle_stacks"].to_string();
        assert!(
            waits.contains("[waited for stream none: unstreamed]"),
            "{waits}"
        );
    }
}
