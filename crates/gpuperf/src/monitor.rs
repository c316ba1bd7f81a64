//! `gpuperf monitor`: GPU driver events system-wide, without a target
//! program. Statistics per process, per ring and per display CRTC each
//! `--interval` on stderr,
//! Xid errors as they happen, optionally every kept event to a file; filters,
//! sampling and a rate limit, with what each left out counted.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use clap::Args;
use flate2::write::GzEncoder;
use gpuperf_merge::read::driver::DriverTrace;
use gpuperf_merge::write::driver::VblankPairer;
use gpuperf_profiler::driver::{
    self, DriverEvent, DriverKind, DriverOptions, DriverSink, DriverStats, PidFilter, Source,
};

/// `gpuperf monitor`.
#[derive(Debug, Args)]
#[command(after_help = "EXAMPLES:
    sudo gpuperf monitor
    sudo gpuperf monitor --pid 1234 --interval 5
    sudo gpuperf monitor --event drm_sched --ring gfx --duration 60
    sudo gpuperf monitor --sample 10 --max-rate 5000 --output events.tsv
    sudo gpuperf monitor --duration 10 --output events.tsv.gz --timeline driver.json")]
pub struct MonitorArgs {
    /// Print statistics every this many seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 1.0, value_parser = positive_secs)]
    pub interval: f64,
    /// Stop after this many seconds (default: at Ctrl-C).
    #[arg(long, value_name = "SECONDS", value_parser = positive_secs)]
    pub duration: Option<f64>,
    /// Only these processes (repeatable); the driver's interrupts and kernel threads are kept.
    #[arg(long, value_name = "PID")]
    pub pid: Vec<u32>,
    /// Only threads with this command name (the first 15 bytes count).
    #[arg(long, value_name = "NAME")]
    pub comm: Option<String>,
    /// Only jobs on these rings (repeatable); other events are unaffected.
    #[arg(long, value_name = "NAME")]
    pub ring: Vec<String>,
    /// Only these event sources (repeatable): nvidia, irq, xid, drm_sched, dma_fence, vblank.
    #[arg(long, value_name = "SOURCE", value_parser = ["nvidia", "irq", "xid", "drm_sched", "dma_fence", "vblank"])]
    pub event: Vec<String>,
    /// Keep one in N matching events (whole jobs), in BPF.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub sample: u32,
    /// Keep at most this many events per second (of event time); the rest are counted.
    #[arg(long, value_name = "EVENTS/S", value_parser = clap::value_parser!(u64).range(1..))]
    pub max_rate: Option<u64>,
    /// Write every kept event here, one tab-separated line each; gzip-compressed
    /// when FILE ends in `.gz` (about a tenth of the size).
    #[arg(long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// At the end, write the kept events as a timeline: Chrome JSON, or
    /// Perfetto's protobuf for a `.pftrace` name.
    #[arg(long, value_name = "FILE")]
    pub timeline: Option<PathBuf>,
}

/// Where kept events go: a file as written, or gzip-compressed.
enum EventFile {
    Plain(BufWriter<File>),
    Gz(Box<GzEncoder<BufWriter<File>>>),
}

impl EventFile {
    fn create(p: &Path) -> Result<Self> {
        let f = BufWriter::with_capacity(
            1 << 16,
            File::create(p).with_context(|| format!("creating {}", p.display()))?,
        );
        Ok(if p.extension().is_some_and(|e| e == "gz") {
            Self::Gz(Box::new(GzEncoder::new(f, flate2::Compression::fast())))
        } else {
            Self::Plain(f)
        })
    }

    /// Flushes, and ends a gzip stream.
    fn finish(self) -> std::io::Result<()> {
        match self {
            Self::Plain(mut f) => f.flush(),
            Self::Gz(g) => g.finish()?.flush(),
        }
    }
}

impl Write for EventFile {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        match self {
            Self::Plain(f) => f.write(b),
            Self::Gz(g) => g.write(b),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Self::Plain(f) => f.flush(),
            Self::Gz(g) => g.flush(),
        }
    }
}

fn positive_secs(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v > 0.0 && v.is_finite() => Ok(v),
        _ => Err(format!("`{s}` is not a positive number of seconds")),
    }
}

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
            let mut out = EventFile::create(p)?;
            out.write_all(crate::driver::file_header(&present, &why).as_bytes())
                .with_context(|| format!("writing {}", p.display()))?;
            Some(out)
        }
        None => None,
    };
    let mut mon = Monitor::new(&args, stop, output, quiet);
    let summary = driver::trace(&options, &mut mon)?;
    mon.flush_interval(true);
    if let Some(mut out) = mon.output.take() {
        let tail = crate::driver::file_tail(&summary.stats, summary.malformed);
        out.write_all(tail.as_bytes())
            .and_then(|()| out.finish())
            .context("writing the event file")?;
    }
    let s = &summary.stats;
    eprintln!(
        "gpuperf monitor: {} events kept, {} sampled out (--sample), {} over --max-rate, \
         {} not on --ring, {} lost (ring buffer full), {} starts not kept (map full), {} malformed",
        mon.kept,
        s.sampled_out,
        mon.over_rate,
        mon.off_ring,
        s.ring_buffer_drops,
        s.map_full,
        summary.malformed
    );
    eprintln!("gpuperf monitor: totals: {}", totals(&mon.totals));
    for c in &summary.costs {
        if c.runs > 0 {
            eprintln!(
                "gpuperf monitor: BPF cost: {} ran {} times, {:.3} µs each",
                c.program,
                c.runs,
                c.run_time_ns as f64 / c.runs as f64 / 1000.0
            );
        }
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
        let w = crate::render::driver_timeline(trace, t)?;
        eprintln!("gpuperf monitor: wrote `{}`: {}", w.path.display(), w.how);
    }
    Ok(0)
}

fn totals(t: &BTreeMap<DriverKind, u64>) -> String {
    if t.is_empty() {
        return "no events".into();
    }
    t.iter()
        .map(|(k, n)| format!("{} {n}", k.name()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Per-interval figures of one process.
#[derive(Default)]
struct ProcStats {
    comm: String,
    ioctls: BTreeMap<u32, Vec<u64>>,
    counts: BTreeMap<DriverKind, u64>,
    /// Vblank events' queueing to delivery.
    vblank_ns: Vec<u64>,
}

/// Per-interval figures of one ring.
#[derive(Default)]
struct RingStats {
    queued: u64,
    done: u64,
    dep_waits: u64,
    queue_ns: Vec<u64>,
    run_ns: Vec<u64>,
}

struct Monitor {
    interval: Duration,
    duration: Option<Duration>,
    deadline: Option<Instant>,
    started: Instant,
    last: Instant,
    stop: Arc<AtomicBool>,
    quiet: bool,
    rings: Vec<String>,
    max_rate: Option<u64>,
    rate_window: (u64, u64),
    output: Option<EventFile>,
    kept: u64,
    over_rate: u64,
    off_ring: u64,
    totals: BTreeMap<DriverKind, u64>,
    procs: BTreeMap<u32, ProcStats>,
    ring_stats: BTreeMap<String, RingStats>,
    other: BTreeMap<DriverKind, u64>,
    /// Vblanks per CRTC.
    vblanks: BTreeMap<String, u64>,
    /// A job's queue and run times, by id, until it is done.
    jobs: HashMap<u64, (u64, Option<u64>)>,
    /// Vblank events' queue times until they are delivered.
    vblank_events: VblankPairer<u64>,
}

impl Monitor {
    fn new(
        args: &MonitorArgs,
        stop: Arc<AtomicBool>,
        output: Option<EventFile>,
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
            rings: args.ring.clone(),
            max_rate: args.max_rate,
            rate_window: (u64::MAX, 0),
            output,
            kept: 0,
            over_rate: 0,
            off_ring: 0,
            totals: BTreeMap::new(),
            procs: BTreeMap::new(),
            ring_stats: BTreeMap::new(),
            other: BTreeMap::new(),
            vblanks: BTreeMap::new(),
            jobs: HashMap::new(),
            vblank_events: VblankPairer::default(),
        }
    }

    /// Whether the rate limit lets `e` through: at most `max_rate` events in
    /// each second of event time.
    fn within_rate(&mut self, e: &DriverEvent) -> bool {
        let Some(max) = self.max_rate else {
            return true;
        };
        let second = e.ts_ns / 1_000_000_000;
        if self.rate_window.0 != second {
            self.rate_window = (second, 0);
        }
        if self.rate_window.1 >= max {
            return false;
        }
        self.rate_window.1 += 1;
        true
    }

    fn record(&mut self, e: &DriverEvent) {
        *self.totals.entry(e.kind).or_default() += 1;
        match e.kind {
            DriverKind::JobQueued
            | DriverKind::JobRun
            | DriverKind::JobDone
            | DriverKind::JobWaitDep => {
                let r = self.ring_stats.entry(e.ring.clone()).or_default();
                match e.kind {
                    DriverKind::JobQueued => {
                        r.queued += 1;
                        self.jobs.insert(e.id, (e.ts_ns, None));
                    }
                    DriverKind::JobRun => {
                        if let Some(j) = self.jobs.get_mut(&e.id) {
                            r.queue_ns.push(e.ts_ns.saturating_sub(j.0));
                            j.1 = Some(e.ts_ns);
                        }
                    }
                    DriverKind::JobDone => {
                        r.done += 1;
                        if let Some((_, Some(run))) = self.jobs.remove(&e.id) {
                            r.run_ns.push(e.ts_ns.saturating_sub(run));
                        }
                    }
                    _ => r.dep_waits += 1,
                }
            }
            DriverKind::Irq | DriverKind::IrqBottomHalf => {
                *self.other.entry(e.kind).or_default() += 1;
            }
            DriverKind::Vblank => *self.vblanks.entry(e.ring.clone()).or_default() += 1,
            _ => {
                let p = self.procs.entry(e.pid).or_default();
                p.comm.clone_from(&e.comm);
                *p.counts.entry(e.kind).or_default() += 1;
                match e.kind {
                    DriverKind::Ioctl => p.ioctls.entry(e.arg).or_default().push(e.dur_ns),
                    DriverKind::VblankQueued => self.vblank_events.queued(e, e.ts_ns),
                    DriverKind::VblankDelivered => {
                        if let Some(q) = self.vblank_events.delivered(e) {
                            p.vblank_ns.push(e.ts_ns.saturating_sub(q));
                        }
                    }
                    _ => {}
                }
            }
        }
        if e.kind == DriverKind::Xid && !self.quiet {
            let on = if e.ring.is_empty() {
                String::new()
            } else {
                format!(" on {}", e.ring)
            };
            eprintln!(
                "gpuperf monitor: Xid {}{on} (pid {} {}): {}",
                e.arg, e.pid, e.comm, e.msg
            );
        }
    }

    fn write(&mut self, e: &DriverEvent) {
        if let Some(out) = self.output.as_mut() {
            // Write errors surface at the final flush.
            let _ = writeln!(out, "{}", crate::driver::event_line(e));
        }
    }

    /// Prints the interval's statistics (and resets them); `last` at the end.
    fn flush_interval(&mut self, last: bool) {
        let secs = self.last.elapsed().as_secs_f64().max(1e-9);
        let at = self.started.elapsed().as_secs_f64();
        self.last = Instant::now();
        let procs = std::mem::take(&mut self.procs);
        let rings = std::mem::take(&mut self.ring_stats);
        let other = std::mem::take(&mut self.other);
        let vblanks = std::mem::take(&mut self.vblanks);
        let nothing =
            procs.is_empty() && rings.is_empty() && other.is_empty() && vblanks.is_empty();
        if self.quiet || (nothing && !last) {
            return;
        }
        eprintln!("--- {at:.1} s");
        for (pid, p) in &procs {
            let mut parts: Vec<String> = p
                .counts
                .iter()
                .filter(|(k, _)| **k != DriverKind::Ioctl)
                .map(|(k, n)| format!("{} {n}", k.name()))
                .collect();
            for (cmd, durs) in &p.ioctls {
                let mut d = durs.clone();
                d.sort_unstable();
                parts.push(format!(
                    "ioctl {cmd:#x}: {:.1}/s, p50 {} p99 {}",
                    d.len() as f64 / secs,
                    micros(pct(&d, 50)),
                    micros(pct(&d, 99))
                ));
            }
            if !p.vblank_ns.is_empty() {
                let mut d = p.vblank_ns.clone();
                d.sort_unstable();
                parts.push(format!(
                    "vblank event latency p50 {} p99 {}",
                    micros(pct(&d, 50)),
                    micros(pct(&d, 99))
                ));
            }
            eprintln!("pid {pid} ({}): {}", p.comm, parts.join("; "));
        }
        for (name, mut r) in rings {
            r.queue_ns.sort_unstable();
            r.run_ns.sort_unstable();
            eprintln!(
                "ring {name}: {:.1} jobs/s queued, {} done, queue p50 {} p99 {}, run p50 {} p99 {}, {} dependency waits",
                r.queued as f64 / secs,
                r.done,
                micros(pct(&r.queue_ns, 50)),
                micros(pct(&r.queue_ns, 99)),
                micros(pct(&r.run_ns, 50)),
                micros(pct(&r.run_ns, 99)),
                r.dep_waits
            );
        }
        for (crtc, n) in &vblanks {
            eprintln!("vblank {crtc}: {n} vblanks, {:.1}/s", *n as f64 / secs);
        }
        if !other.is_empty() {
            eprintln!("driver: {}", totals(&other));
        }
    }
}

/// The nearest-rank percentile of sorted `v`.
fn pct(v: &[u64], p: usize) -> Option<u64> {
    if v.is_empty() {
        return None;
    }
    let rank = (p * v.len()).div_ceil(100).max(1);
    Some(v[rank - 1])
}

fn micros(ns: Option<u64>) -> String {
    match ns {
        Some(ns) => format!("{:.1} µs", ns as f64 / 1000.0),
        None => "-".into(),
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
        eprintln!("gpuperf monitor: attached; Ctrl-C stops");
    }

    fn event(&mut self, e: DriverEvent) {
        let is_job = matches!(
            e.kind,
            DriverKind::JobQueued
                | DriverKind::JobRun
                | DriverKind::JobDone
                | DriverKind::JobWaitDep
        );
        if is_job && !self.rings.is_empty() && !self.rings.contains(&e.ring) {
            self.off_ring += 1;
            return;
        }
        if !self.within_rate(&e) {
            self.over_rate += 1;
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
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(pct(&v, 50), Some(50));
        assert_eq!(pct(&v, 99), Some(99));
        assert_eq!(pct(&[7], 99), Some(7));
        assert_eq!(pct(&[], 50), None);
    }

    fn event(ts_ns: u64) -> DriverEvent {
        DriverEvent {
            ts_ns,
            dur_ns: 0,
            id: 0,
            ret: 0,
            pid: 1,
            tid: 1,
            kind: DriverKind::Ioctl,
            arg: 0,
            comm: "app".into(),
            ring: String::new(),
            msg: String::new(),
        }
    }

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
        crate::render::driver_timeline(trace, &out).unwrap();
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
            .filter(|e| e["cat"] == "driver" && e["ph"] == "X")
            .count();
        assert!(driver_slices >= jobs, "{json}");
    }

    #[test]
    fn max_rate_keeps_that_many_per_second_of_event_time() {
        let args = MonitorArgs {
            interval: 1.0,
            duration: None,
            pid: vec![],
            comm: None,
            ring: vec![],
            event: vec![],
            sample: 1,
            max_rate: Some(3),
            output: None,
            timeline: None,
        };
        let mut m = Monitor::new(&args, Arc::default(), None, true);
        // Five events in second 1, two in second 2.
        for ts in [1_000, 1_100, 1_200, 1_300, 1_400, 2_000, 2_100] {
            m.event(event(ts * 1_000_000));
        }
        assert_eq!((m.kept, m.over_rate), (5, 2));
    }
}
