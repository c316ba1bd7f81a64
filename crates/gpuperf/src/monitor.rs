//! `gpuperf monitor`: GPU driver events system-wide, without a target
//! program. Statistics per process, per ring and per display CRTC each
//! `--interval` and over the whole run at its end (Ctrl-C too), on stdout;
//! Xid errors as they happen and what was left out, on stderr; optionally
//! every kept event to a file. The filters, sampling and rate limit are
//! the profiler library's ([`gpuperf_profiler::monitor_filter`]).

use std::io::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use gpuperf_merge::read::driver::{self as driver_file, DriverTrace, EventFile};
use gpuperf_merge::recording;
use gpuperf_profiler::driver::{
    self, DriverEvent, DriverKind, DriverOptions, DriverSink, DriverStats, PidFilter, Source,
};
use gpuperf_profiler::monitor_filter::Filter;
use gpuperf_profiler::monitor_stats::{Stats, totals};

use crate::cli::MonitorArgs;

/// Runs the monitor until `--duration` or Ctrl-C; the exit code.
pub fn run(args: MonitorArgs, quiet: bool) -> Result<u8> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone()).context("installing a signal handler")?;
    }
    let sources = if args.event.is_empty() {
        Source::ALL.to_vec()
    } else {
        args.event
            .iter()
            .filter_map(|e| Source::from_name(e))
            .collect()
    };
    let options = DriverOptions {
        pids: args.pid.clone(),
        comm: args.comm.clone(),
        sample_every: args.sample,
        sources,
        ..DriverOptions::default()
    };
    // A timeline is drawn from the event file at the end: without --output
    // the events are kept in a temporary one (memory stays flat however long
    // the run).
    let spool = match (&args.output, &args.timeline) {
        (None, Some(_)) => {
            Some(tempfile::NamedTempFile::new().context("creating a temporary file")?)
        }
        _ => None,
    };
    let events_path = args
        .output
        .clone()
        .or_else(|| spool.as_ref().map(|f| f.path().to_path_buf()));
    let output = match &events_path {
        Some(p) => {
            let kallsyms = std::fs::read_to_string("/proc/kallsyms").unwrap_or_default();
            let (present, absent) = driver::available(&kallsyms, &options.sources);
            let why: Vec<&str> = absent.iter().map(|(_, w)| w.as_str()).collect();
            let out = EventFile::create(p).with_context(|| format!("creating {}", p.display()))?;
            Some(
                crate::driver::start_file(out, &present, &why)
                    .with_context(|| format!("writing {}", p.display()))?,
            )
        }
        None => None,
    };
    let mut mon = Monitor::new(&args, stop, output, quiet);
    mon.sources = options.sources.len();
    let summary = driver::trace(&options, &mut mon)?;
    if mon.nothing {
        anyhow::bail!(
            "nothing can be watched: none of the sources asked for is present (each said why above)"
        );
    }
    mon.flush_interval(true);
    mon.whole_run();
    if let Some(out) = mon.output.take() {
        crate::driver::finish_file(out, &summary.stats, summary.malformed)
            .and_then(EventFile::finish)
            .context("writing the event file")?;
    }
    let s = &summary.stats;
    eprintln!(
        "gpuperf monitor: {} events kept, {} sampled out (--sample), {} over --max-rate, \
         {} not on --ring, {} lost (ring buffer full), {} starts not kept (map full), {} malformed",
        mon.kept,
        s.sampled_out,
        mon.filter.over_rate,
        mon.filter.off_ring,
        s.ring_buffer_drops,
        s.map_full,
        summary.malformed
    );
    for c in &summary.costs {
        let each = c.run_time_ns as f64 / c.runs.max(1) as f64 / 1000.0;
        tracing::info!(
            "BPF cost: {} ran {} times, {each:.3} µs each",
            c.program,
            c.runs
        );
    }
    if let Some(p) = &args.output {
        eprintln!(
            "gpuperf monitor: wrote {} events to {}",
            mon.kept,
            p.display()
        );
    }
    if let (Some(t), Some(events)) = (&args.timeline, &events_path) {
        let trace = DriverTrace::open(events)?;
        let w = recording::driver_timeline(trace, t)?;
        eprintln!("gpuperf monitor: wrote `{}`: {}", w.path.display(), w.how);
    }
    Ok(0)
}

struct Monitor {
    interval: Duration,
    duration: Option<Duration>,
    deadline: Option<Instant>,
    started: Instant,
    last: Instant,
    stop: Arc<AtomicBool>,
    quiet: bool,
    filter: Filter,
    output: Option<driver_file::Writer<EventFile>>,
    kept: u64,
    stats: Stats,
    /// How many sources were asked for; `nothing` when none is present.
    sources: usize,
    nothing: bool,
}

impl Monitor {
    fn new(
        args: &MonitorArgs,
        stop: Arc<AtomicBool>,
        output: Option<driver_file::Writer<EventFile>>,
        quiet: bool,
    ) -> Self {
        let now = Instant::now();
        Self {
            interval: Duration::from_secs_f64(args.interval),
            duration: args.duration.map(Duration::from_secs_f64),
            deadline: args.duration.map(|d| now + Duration::from_secs_f64(d)),
            started: now,
            last: now,
            stop,
            quiet,
            filter: Filter::new(args.ring.clone(), args.max_rate),
            output,
            kept: 0,
            stats: Stats::default().sampled(args.sample),
            sources: 0,
            nothing: false,
        }
    }

    fn record(&mut self, e: &DriverEvent) {
        self.stats.record(e);
        if e.kind == DriverKind::Xid && !self.quiet {
            let on = if e.ring.is_empty() {
                String::new()
            } else {
                format!(" on {}", e.ring)
            };
            let who = match gpuperf_merge::write::driver::xid_process(e) {
                Some((pid, comm)) => format!("{comm} (pid {pid})"),
                None => "process unknown (interrupt context)".to_owned(),
            };
            eprintln!("gpuperf monitor: Xid {}{on}, {who}: {}", e.arg, e.msg);
        }
    }

    fn write(&mut self, e: &DriverEvent) {
        if let Some(out) = self.output.as_mut() {
            // Write errors surface at the final flush.
            let _ = out.event(e);
        }
    }

    /// Prints the interval's statistics (and resets them), an empty one as
    /// such; `last` at the end, where an empty tail is not worth a line.
    fn flush_interval(&mut self, last: bool) {
        let secs = self.last.elapsed().as_secs_f64().max(1e-9);
        let at = self.started.elapsed().as_secs_f64();
        self.last = Instant::now();
        let interval = self.stats.take_interval(secs);
        if self.quiet || (interval.is_empty() && last) {
            return;
        }
        // Stdout gone (a closed pipe) is no reason to stop watching.
        let _ = write!(std::io::stdout().lock(), "--- {at:.1} s\n{interval}");
    }

    /// Prints the whole run's statistics, with histograms.
    fn whole_run(&self) {
        if self.quiet {
            return;
        }
        let secs = self.started.elapsed().as_secs_f64().max(1e-9);
        let _ = write!(
            std::io::stdout().lock(),
            "=== whole run, {secs:.1} s\n{}totals: {}\n",
            self.stats.run(secs),
            totals(self.stats.totals())
        );
    }
}

impl DriverSink for Monitor {
    fn attached(&mut self, _pids: PidFilter, absent: &[(Source, String)]) {
        // --duration and the first interval count from here, not from loading.
        let now = Instant::now();
        if let Some(d) = self.duration {
            self.deadline = Some(now + d);
        }
        (self.started, self.last) = (now, now);
        crate::driver::say_absent("monitor", absent);
        if absent.len() >= self.sources {
            // Stops at the first tick: there is nothing to wait for.
            self.nothing = true;
            self.stop.store(true, Ordering::Relaxed);
            return;
        }
        eprintln!("gpuperf monitor: attached; Ctrl-C stops");
    }

    fn event(&mut self, e: DriverEvent) {
        if !self.filter.admit(&e) {
            return;
        }
        self.kept += 1;
        self.record(&e);
        self.write(&e);
    }

    fn tick(&mut self, _stats: &DriverStats) -> bool {
        if self.last.elapsed() >= self.interval {
            self.flush_interval(false);
        }
        !self.stop.load(Ordering::Relaxed) && self.deadline.is_none_or(|d| Instant::now() < d)
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;
    use std::path::Path;

    use super::*;

    /// The events of merge's hand-made driver file, and its head and tail.
    fn sample_file() -> String {
        let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../merge/tests/data/driver/small.tsv");
        std::fs::read_to_string(p).unwrap()
    }

    #[test]
    fn a_gz_event_file_reads_back_as_the_plain_one_and_is_smaller() {
        let dir = tempfile::tempdir().unwrap();
        // Enough lines for compression to show.
        let text = sample_file().repeat(50);
        let mut sizes = Vec::new();
        let mut traces = Vec::new();
        for name in ["events.tsv", "events.tsv.gz"] {
            let p = dir.path().join(name);
            let mut f = EventFile::create(&p).unwrap();
            f.write_all(text.as_bytes()).unwrap();
            f.finish().unwrap();
            sizes.push(std::fs::metadata(&p).unwrap().len());
            traces.push(DriverTrace::open(&p).unwrap());
        }
        assert!(traces[0].events.len() > 50, "{:?}", traces[0]);
        assert_eq!(traces[0], traces[1]);
        assert!(sizes[1] * 5 < sizes[0], "{sizes:?}");
    }

    #[test]
    fn a_timeline_of_driver_events_alone_has_the_driver_tracks() {
        let dir = tempfile::tempdir().unwrap();
        let events = dir.path().join("events.tsv");
        std::fs::write(&events, sample_file()).unwrap();
        let trace = DriverTrace::open(&events).unwrap();
        let jobs = trace
            .events
            .iter()
            .filter(|e| e.kind == DriverKind::JobQueued)
            .count();
        assert!(jobs > 0);
        let out = dir.path().join("t.json");
        recording::driver_timeline(trace, &out).unwrap();
        let json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
        let evs = json["traceEvents"].as_array().unwrap();
        let named = |n: &str| {
            evs.iter().any(|e| {
                e["name"] == "process_name"
                    && e["args"]["name"].as_str().is_some_and(|s| s.starts_with(n))
            })
        };
        assert!(named("GPU driver"), "{json}");
        let driver_slices = evs
            .iter()
            .filter(|e| e["cat"] == "driver" && (e["ph"] == "X" || e["ph"] == "b"))
            .count();
        assert!(driver_slices >= jobs, "{json}");
    }
}
