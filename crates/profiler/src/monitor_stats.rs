//! `gpuperf monitor`'s statistics of GPU driver events: per process, per ring
//! and per display CRTC, over each interval and over the whole run (printed
//! at its end, as bpftrace prints its maps at exit), and counts by kind.
//!
//! An interval's latencies are exact (nearest-rank p50 and p99, count and
//! max); the whole run's are kept as power-of-two histograms (memory stays
//! flat however long the run), so its percentiles are the upper bound of
//! their bucket, printed with `≤`, and each histogram is drawn.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use gpuperf_merge::ioctl::Ioctl;
use gpuperf_merge::write::driver::{VblankPairer, name_job_fence_contexts};

use crate::driver::{DriverEvent, DriverKind};

/// Events counted by kind, in words: `ioctls 3, interrupts 2`.
pub fn totals(t: &BTreeMap<DriverKind, u64>) -> String {
    if t.is_empty() {
        return "no events".into();
    }
    t.iter()
        .map(|(k, n)| format!("{} {n}", k.label()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Latencies of one thing: a power-of-two histogram with count and max,
/// and each value where the figures are exact (an interval's).
#[derive(Clone, Debug)]
struct Series {
    exact: bool,
    samples: Vec<u64>,
    count: u64,
    max: u64,
    /// Bucket `i` counts values in `[2^(i-1), 2^i)` ns (bucket 0: zero).
    buckets: [u64; 65],
}

impl Series {
    fn new(exact: bool) -> Self {
        Self {
            exact,
            samples: Vec::new(),
            count: 0,
            max: 0,
            buckets: [0; 65],
        }
    }

    fn push(&mut self, ns: u64) {
        self.count += 1;
        self.max = self.max.max(ns);
        self.buckets[bucket(ns)] += 1;
        if self.exact {
            self.samples.push(ns);
        }
    }

    fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The `p`th percentile: nearest rank where exact, else its bucket's
    /// upper bound (never above the max).
    fn pct(&self, p: usize) -> Option<String> {
        if self.count == 0 {
            return None;
        }
        if self.exact {
            let mut v = self.samples.clone();
            v.sort_unstable();
            return pct(&v, p).map(|ns| micros(Some(ns)));
        }
        let rank = (p as u64 * self.count).div_ceil(100).max(1);
        let mut seen = 0;
        for (i, n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return Some(format!("≤ {}", micros(Some(upper(i).min(self.max)))));
            }
        }
        None
    }

    /// `p50 X p99 Y max Z`.
    fn summary(&self) -> String {
        let p = |q| self.pct(q).unwrap_or_else(|| "-".into());
        if self.count == 0 {
            return "-".into();
        }
        format!("p50 {} p99 {} max {}", p(50), p(99), micros(Some(self.max)))
    }

    /// A bpftrace-like histogram, a line per bucket from the first to the
    /// last holding a value, each indented by `indent`.
    fn histogram(&self, f: &mut fmt::Formatter<'_>, indent: &str) -> fmt::Result {
        let Some(first) = self.buckets.iter().position(|&n| n > 0) else {
            return Ok(());
        };
        let last = self.buckets.iter().rposition(|&n| n > 0).unwrap_or(first);
        let most = self.buckets.iter().copied().max().unwrap_or(1).max(1);
        for i in first..=last {
            let n = self.buckets[i];
            let lo = if i == 0 { 0 } else { upper(i - 1) + 1 };
            let bar = "@".repeat(usize::try_from(n * 40 / most).unwrap_or(40));
            writeln!(
                f,
                "{indent}[{:>10}, {:>10}] {n:>8} |{bar:<40}|",
                micros(Some(lo)),
                micros(Some(upper(i)))
            )?;
        }
        Ok(())
    }
}

/// The histogram bucket of `ns`: 0 for 0, else its bit length.
fn bucket(ns: u64) -> usize {
    (64 - ns.leading_zeros()) as usize
}

/// The largest value of bucket `i`.
fn upper(i: usize) -> u64 {
    if i >= 64 { u64::MAX } else { (1u64 << i) - 1 }
}

/// Figures of one process.
#[derive(Clone, Debug)]
struct ProcStats {
    comm: String,
    ioctls: BTreeMap<Ioctl, Series>,
    counts: BTreeMap<DriverKind, u64>,
    /// Vblank events' queueing to delivery.
    vblank: Series,
    /// Its jobs (the events carry their submitter).
    jobs: JobStats,
}

/// Figures of the jobs of one ring or one process.
#[derive(Clone, Debug)]
struct JobStats {
    queued: u64,
    done: u64,
    dep_waits: u64,
    queue: Series,
    run: Series,
    /// A job's first dependency wait to its run.
    dep_wait: Series,
}

impl JobStats {
    fn new(exact: bool) -> Self {
        Self {
            queued: 0,
            done: 0,
            dep_waits: 0,
            queue: Series::new(exact),
            run: Series::new(exact),
            dep_wait: Series::new(exact),
        }
    }

    fn is_empty(&self) -> bool {
        self.queued == 0 && self.done == 0 && self.dep_waits == 0 && self.run.is_empty()
    }
}

/// Figures of one ring.
#[derive(Clone, Debug)]
struct RingStats {
    jobs: JobStats,
    /// The deepest queue the tracepoints gave at a job's queueing or run:
    /// its entity's queued jobs (`job_count`) and the hardware's in flight
    /// (`hw_job_count`).
    max_job_count: u64,
    max_hw_job_count: u64,
}

/// Fences of one context: made, signalled, and made to signalled.
#[derive(Clone, Debug)]
struct FenceStats {
    made: u64,
    signalled: u64,
    latency: Series,
}

/// The figures of an interval or of the whole run.
#[derive(Clone, Debug)]
struct Figures {
    exact: bool,
    procs: BTreeMap<u32, ProcStats>,
    rings: BTreeMap<String, RingStats>,
    other: BTreeMap<DriverKind, u64>,
    /// Vblanks per CRTC.
    vblanks: BTreeMap<String, u64>,
    /// Fences per context.
    fences: BTreeMap<u64, FenceStats>,
}

impl Figures {
    fn new(exact: bool) -> Self {
        Self {
            exact,
            procs: BTreeMap::new(),
            rings: BTreeMap::new(),
            other: BTreeMap::new(),
            vblanks: BTreeMap::new(),
            fences: BTreeMap::new(),
        }
    }

    fn fence(&mut self, context: u64) -> &mut FenceStats {
        let exact = self.exact;
        self.fences.entry(context).or_insert_with(|| FenceStats {
            made: 0,
            signalled: 0,
            latency: Series::new(exact),
        })
    }

    fn proc(&mut self, e: &DriverEvent) -> &mut ProcStats {
        let exact = self.exact;
        let p = self.procs.entry(e.pid).or_insert_with(|| ProcStats {
            comm: String::new(),
            ioctls: BTreeMap::new(),
            counts: BTreeMap::new(),
            vblank: Series::new(exact),
            jobs: JobStats::new(exact),
        });
        // A process's name is its main thread's, else the first seen.
        if p.comm.is_empty() || e.pid == e.tid {
            p.comm.clone_from(&e.comm);
        }
        p
    }

    fn ring(&mut self, name: &str) -> &mut RingStats {
        let exact = self.exact;
        self.rings
            .entry(name.to_owned())
            .or_insert_with(|| RingStats {
                jobs: JobStats::new(exact),
                max_job_count: 0,
                max_hw_job_count: 0,
            })
    }

    fn is_empty(&self) -> bool {
        self.procs.is_empty()
            && self.rings.is_empty()
            && self.other.is_empty()
            && self.vblanks.is_empty()
            && self.fences.is_empty()
    }
}

/// What a job event tells: its kind and, for a run or done, its latency.
enum JobStep {
    Queued,
    /// Its queue latency and, after a dependency wait, how long it waited.
    Ran(Option<u64>, Option<u64>),
    Done(Option<u64>),
    DepWait,
}

/// A job between its queueing and its end.
struct OpenJob {
    queued_ns: Option<u64>,
    wait_ns: Option<u64>,
    run_ns: Option<u64>,
}

/// Jobs and fences followed at once, at most: past it, new ones are not
/// followed (their latencies are not known, their counts still are), so a
/// source that never ends what it starts cannot grow the monitor's memory.
const MAX_OPEN: usize = 1 << 16;

/// Statistics of the events seen, by interval and over the run.
pub struct Stats {
    totals: BTreeMap<DriverKind, u64>,
    interval: Figures,
    run: Figures,
    /// Jobs by id, until done.
    jobs: HashMap<u64, OpenJob>,
    /// Vblank events' queue times until they are delivered.
    vblank_events: VblankPairer<u64>,
    /// Fences by id (context and seqno), made until signalled.
    fences: HashMap<u64, u64>,
    /// Fence contexts named by the jobs seen (`drm_sched RING finished`).
    contexts: HashMap<u64, String>,
    /// `--sample N`: one in N events kept (Xids all), rates scaled by N.
    sample_every: u32,
}

impl Default for Stats {
    fn default() -> Self {
        Self {
            totals: BTreeMap::new(),
            interval: Figures::new(true),
            run: Figures::new(false),
            jobs: HashMap::new(),
            vblank_events: VblankPairer::default(),
            fences: HashMap::new(),
            contexts: HashMap::new(),
            sample_every: 1,
        }
    }
}

/// One interval's statistics, or the whole run's, to print.
pub struct Interval {
    secs: f64,
    /// One in this many events was kept (`--sample`): rates are scaled by it.
    sample_every: u32,
    figures: Figures,
    contexts: HashMap<u64, String>,
}

impl Stats {
    /// Events counted by kind since the start.
    pub fn totals(&self) -> &BTreeMap<DriverKind, u64> {
        &self.totals
    }

    /// Counts `e`.
    pub fn record(&mut self, e: &DriverEvent) {
        *self.totals.entry(e.kind).or_default() += 1;
        match e.kind {
            DriverKind::JobQueued
            | DriverKind::JobRun
            | DriverKind::JobDone
            | DriverKind::JobWaitDep => {
                if self.contexts.len() < MAX_OPEN {
                    name_job_fence_contexts(e, &mut self.contexts);
                }
                let step = self.job_step(e);
                let depth = matches!(e.kind, DriverKind::JobQueued | DriverKind::JobRun)
                    .then(|| (u64::from(e.arg), u64::try_from(e.ret).unwrap_or(0)));
                for f in [&mut self.interval, &mut self.run] {
                    let r = f.ring(&e.ring);
                    if let Some((jobs, hw)) = depth {
                        r.max_job_count = r.max_job_count.max(jobs);
                        r.max_hw_job_count = r.max_hw_job_count.max(hw);
                    }
                    add_job(&mut r.jobs, &step);
                    add_job(&mut f.proc(e).jobs, &step);
                }
            }
            DriverKind::Irq | DriverKind::IrqBottomHalf => {
                for f in [&mut self.interval, &mut self.run] {
                    *f.other.entry(e.kind).or_default() += 1;
                }
            }
            DriverKind::Vblank => {
                for f in [&mut self.interval, &mut self.run] {
                    *f.vblanks.entry(e.ring.clone()).or_default() += 1;
                }
            }
            DriverKind::FenceInit | DriverKind::FenceSignaled => self.fence_step(e),
            _ => {
                let latency = match e.kind {
                    DriverKind::VblankQueued => {
                        self.vblank_events.queued(e, e.ts_ns);
                        None
                    }
                    DriverKind::VblankDelivered => self
                        .vblank_events
                        .delivered(e)
                        .map(|q| e.ts_ns.saturating_sub(q)),
                    _ => None,
                };
                for f in [&mut self.interval, &mut self.run] {
                    let exact = f.exact;
                    let p = f.proc(e);
                    *p.counts.entry(e.kind).or_default() += 1;
                    if e.kind == DriverKind::Ioctl {
                        p.ioctls
                            .entry(Ioctl::from_cmd(e.arg))
                            .or_insert_with(|| Series::new(exact))
                            .push(e.dur_ns);
                    }
                    if let Some(l) = latency {
                        p.vblank.push(l);
                    }
                }
            }
        }
    }

    /// Follows a job through its events: its latencies.
    fn job_step(&mut self, e: &DriverEvent) -> JobStep {
        match e.kind {
            DriverKind::JobQueued => {
                if self.jobs.len() < MAX_OPEN {
                    self.jobs.insert(
                        e.id,
                        OpenJob {
                            queued_ns: Some(e.ts_ns),
                            wait_ns: None,
                            run_ns: None,
                        },
                    );
                }
                JobStep::Queued
            }
            DriverKind::JobRun => {
                let Some(j) = self.jobs.get_mut(&e.id) else {
                    return JobStep::Ran(None, None);
                };
                j.run_ns = Some(e.ts_ns);
                let since = |t: Option<u64>| t.map(|t| e.ts_ns.saturating_sub(t));
                JobStep::Ran(since(j.queued_ns), since(j.wait_ns))
            }
            DriverKind::JobDone => match self.jobs.remove(&e.id) {
                Some(OpenJob {
                    run_ns: Some(run), ..
                }) => JobStep::Done(Some(e.ts_ns.saturating_sub(run))),
                _ => JobStep::Done(None),
            },
            _ => {
                // A job's first wait; one queued before the monitor started
                // is followed from here.
                if let Some(j) = self.jobs.get_mut(&e.id) {
                    j.wait_ns.get_or_insert(e.ts_ns);
                } else if self.jobs.len() < MAX_OPEN {
                    self.jobs.insert(
                        e.id,
                        OpenJob {
                            queued_ns: None,
                            wait_ns: Some(e.ts_ns),
                            run_ns: None,
                        },
                    );
                }
                JobStep::DepWait
            }
        }
    }

    /// Follows a fence from its making to its signal, by context.
    fn fence_step(&mut self, e: &DriverEvent) {
        let context = e.id >> 32;
        let latency = if e.kind == DriverKind::FenceInit {
            if self.fences.len() < MAX_OPEN {
                self.fences.insert(e.id, e.ts_ns);
            }
            None
        } else {
            self.fences
                .remove(&e.id)
                .map(|made| e.ts_ns.saturating_sub(made))
        };
        for f in [&mut self.interval, &mut self.run] {
            *f.proc(e).counts.entry(e.kind).or_default() += 1;
            let s = f.fence(context);
            if e.kind == DriverKind::FenceInit {
                s.made += 1;
            } else {
                s.signalled += 1;
            }
            if let Some(l) = latency {
                s.latency.push(l);
            }
        }
    }

    /// Statistics of events sampled one in `every` (`--sample`): the rates
    /// printed are scaled by `every` and say so.
    pub fn sampled(mut self, every: u32) -> Self {
        self.sample_every = every;
        self
    }

    /// Ends an interval of `secs` seconds: its statistics, reset here.
    pub fn take_interval(&mut self, secs: f64) -> Interval {
        let figures = std::mem::replace(&mut self.interval, Figures::new(true));
        self.interval_of(secs, figures)
    }

    /// The whole run's statistics, of `secs` seconds.
    pub fn run(&self, secs: f64) -> Interval {
        self.interval_of(secs, self.run.clone())
    }

    /// `figures` to print, with the names of the fence contexts they hold.
    fn interval_of(&self, secs: f64, figures: Figures) -> Interval {
        let contexts = figures
            .fences
            .keys()
            .filter_map(|c| Some((*c, self.contexts.get(c)?.clone())))
            .collect();
        Interval {
            secs,
            sample_every: self.sample_every.max(1),
            figures,
            contexts,
        }
    }
}

fn add_job(j: &mut JobStats, step: &JobStep) {
    match *step {
        JobStep::Queued => j.queued += 1,
        JobStep::Ran(queue, wait) => {
            if let Some(l) = queue {
                j.queue.push(l);
            }
            if let Some(l) = wait {
                j.dep_wait.push(l);
            }
        }
        JobStep::Done(l) => {
            j.done += 1;
            if let Some(l) = l {
                j.run.push(l);
            }
        }
        JobStep::DepWait => j.dep_waits += 1,
    }
}

impl Interval {
    /// Whether nothing happened.
    pub fn is_empty(&self) -> bool {
        self.figures.is_empty()
    }

    /// Jobs queued and done, with their rate, latencies and dependency waits.
    fn jobs(&self, j: &JobStats) -> String {
        let rate = j.queued as f64 * f64::from(self.sample_every) / self.secs;
        let mut s = format!(
            "jobs {} queued ({rate:.1}/s), {} done; queue {}; run {}",
            j.queued,
            j.done,
            j.queue.summary(),
            j.run.summary()
        );
        if j.dep_waits > 0 {
            s += &format!("; {} dependency waits", j.dep_waits);
            if !j.dep_wait.is_empty() {
                s += &format!(", waited {}", j.dep_wait.summary());
            }
        }
        s
    }

    /// The whole run's histograms, under their line.
    fn histograms(&self, f: &mut fmt::Formatter<'_>, what: &str, s: &Series) -> fmt::Result {
        if self.figures.exact || s.is_empty() {
            return Ok(());
        }
        writeln!(f, "  {what}:")?;
        s.histogram(f, "    ")
    }
}

/// A line per process, ring, CRTC, and one for the driver's interrupts;
/// over the whole run, a histogram under each latency. An interval without
/// events says so.
impl fmt::Display for Interval {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Rates of what happened: sampled counts scaled back up.
        let rate = |n: u64| n as f64 * f64::from(self.sample_every) / self.secs;
        let fig = &self.figures;
        if fig.is_empty() {
            return writeln!(f, "no events");
        }
        if self.sample_every > 1 {
            writeln!(
                f,
                "(sampled: 1 in {} of each kind, every Xid; rates scaled by {0}, counts as kept)",
                self.sample_every
            )?;
        }
        for (pid, p) in &fig.procs {
            let mut parts: Vec<String> = p
                .counts
                .iter()
                .filter(|(k, _)| **k != DriverKind::Ioctl)
                .map(|(k, n)| format!("{} {n}", k.label()))
                .collect();
            for (ioctl, s) in &p.ioctls {
                parts.push(format!(
                    "ioctl {} {}: {:.1}/s, {}",
                    ioctl.name(),
                    s.count,
                    rate(s.count),
                    s.summary()
                ));
            }
            if !p.vblank.is_empty() {
                parts.push(format!("vblank event latency {}", p.vblank.summary()));
            }
            if !p.jobs.is_empty() {
                parts.push(self.jobs(&p.jobs));
            }
            writeln!(f, "{} (pid {pid}): {}", p.comm, parts.join("; "))?;
            for (ioctl, s) in &p.ioctls {
                self.histograms(f, &format!("ioctl {}", ioctl.name()), s)?;
            }
            self.histograms(f, "vblank event latency", &p.vblank)?;
        }
        for (name, r) in &fig.rings {
            writeln!(
                f,
                "ring {name}: {}; queue depth max {} queued (job_count), {} on the hardware (hw_job_count)",
                self.jobs(&r.jobs),
                r.max_job_count,
                r.max_hw_job_count
            )?;
            self.histograms(f, "queue latency", &r.jobs.queue)?;
            self.histograms(f, "dependency wait", &r.jobs.dep_wait)?;
            self.histograms(f, "run time", &r.jobs.run)?;
        }
        for (context, s) in &fig.fences {
            let name = match self.contexts.get(context) {
                Some(n) => format!("fence context {context} ({n})"),
                None => format!("fence context {context}"),
            };
            let mut line = format!("{name}: {} made, {} signalled", s.made, s.signalled);
            if !s.latency.is_empty() {
                line += &format!("; made to signalled {}", s.latency.summary());
            }
            writeln!(f, "{line}")?;
            self.histograms(f, "made to signalled", &s.latency)?;
        }
        for (crtc, n) in &fig.vblanks {
            writeln!(f, "vblank {crtc}: {n} vblanks, {:.1}/s", rate(*n))?;
        }
        if !fig.other.is_empty() {
            writeln!(f, "driver: {}", totals(&fig.other))?;
        }
        Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    fn event(kind: DriverKind, ts_ns: u64, pid: u32, id: u64) -> DriverEvent {
        DriverEvent {
            ts_ns,
            dur_ns: 2_000,
            id,
            ret: 0,
            pid,
            tid: pid,
            kind,
            arg: 0,
            comm: format!("app{pid}"),
            ring: "ring0".into(),
            msg: String::new(),
        }
    }

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(pct(&v, 50), Some(50));
        assert_eq!(pct(&v, 99), Some(99));
        assert_eq!(pct(&[7], 99), Some(7));
        assert_eq!(pct(&[], 50), None);
    }

    #[test]
    fn an_interval_says_what_it_saw_and_is_reset_and_an_empty_one_says_so() {
        let mut s = Stats::default();
        let mut e = event(DriverKind::Ioctl, 1_000, 7, 9);
        e.arg = 0xc020_462a;
        s.record(&e);
        // The same ioctl with another size and direction.
        e.arg = 0x462a;
        e.dur_ns = 4_000;
        s.record(&e);
        e.kind = DriverKind::Irq;
        s.record(&e);
        let text = s.take_interval(2.0).to_string();
        assert_eq!(
            text,
            "app7 (pid 7): ioctl NV_ESC_RM_CONTROL 2: 1.0/s, p50 2.0 µs p99 4.0 µs max 4.0 µs\n\
             driver: interrupts 1\n"
        );
        let empty = s.take_interval(1.0);
        assert!(empty.is_empty());
        assert_eq!(empty.to_string(), "no events\n");
        assert_eq!(totals(s.totals()), "ioctls 2, interrupts 1");
    }

    #[test]
    fn sampled_rates_are_scaled_and_say_so() {
        let mut s = Stats::default().sampled(4);
        let mut e = event(DriverKind::Ioctl, 1_000, 7, 9);
        e.arg = 0x4646;
        s.record(&e);
        let text = s.take_interval(2.0).to_string();
        assert_eq!(
            text,
            "(sampled: 1 in 4 of each kind, every Xid; rates scaled by 4, counts as kept)\n\
             app7 (pid 7): ioctl 'F' 0x46 1: 2.0/s, p50 2.0 µs p99 2.0 µs max 2.0 µs\n"
        );
    }

    /// Two processes' jobs on one ring: each process's own statistics, the
    /// ring's queue depth, and over the whole run (after the intervals were
    /// taken) the same counts with histograms.
    #[test]
    fn jobs_are_counted_per_process_and_ring_and_over_the_run() {
        use DriverKind::{JobDone as D, JobQueued as Q, JobRun as R};
        let mut s = Stats::default();
        // Process 7: jobs 1 and 2 queued together, run 10 and 20 µs.
        // Process 8: job 3, queued while 1 and 2 wait.
        let seq = [
            (Q, 0, 7, 1),
            (Q, 1_000, 7, 2),
            (Q, 2_000, 8, 3),
            (R, 3_000, 7, 1),
            (D, 13_000, 7, 1),
            (R, 14_000, 7, 2),
            (D, 34_000, 7, 2),
            (R, 35_000, 8, 3),
            (D, 36_000, 8, 3),
        ];
        // The tracepoints' queue depth at each queueing and run.
        let depth = [
            (1, 0),
            (2, 0),
            (3, 0),
            (2, 1),
            (0, 0),
            (1, 1),
            (0, 0),
            (0, 1),
            (0, 0),
        ];
        for (i, &(k, ts, pid, id)) in seq.iter().enumerate() {
            let mut e = event(k, ts, pid, id);
            (e.arg, e.ret) = depth[i];
            s.record(&e);
            if i == 4 {
                let _ = s.take_interval(1.0);
            }
        }
        let text = s.take_interval(1.0).to_string();
        assert_eq!(
            text,
            "app7 (pid 7): jobs 0 queued (0.0/s), 1 done; queue p50 13.0 µs p99 13.0 µs max 13.0 µs; run p50 20.0 µs p99 20.0 µs max 20.0 µs\n\
             app8 (pid 8): jobs 0 queued (0.0/s), 1 done; queue p50 33.0 µs p99 33.0 µs max 33.0 µs; run p50 1.0 µs p99 1.0 µs max 1.0 µs\n\
             ring ring0: jobs 0 queued (0.0/s), 2 done; queue p50 13.0 µs p99 33.0 µs max 33.0 µs; run p50 1.0 µs p99 20.0 µs max 20.0 µs; queue depth max 1 queued (job_count), 1 on the hardware (hw_job_count)\n"
        );
        let run = s.run(2.0).to_string();
        let lines: Vec<&str> = run.lines().collect();
        assert_eq!(
            lines[0],
            "app7 (pid 7): jobs 2 queued (1.0/s), 2 done; queue p50 ≤ 4.1 µs p99 ≤ 13.0 µs max 13.0 µs; run p50 ≤ 16.4 µs p99 ≤ 20.0 µs max 20.0 µs"
        );
        let ring = lines
            .iter()
            .find(|l| l.starts_with("ring ring0: "))
            .unwrap();
        assert!(
            ring.starts_with("ring ring0: jobs 3 queued (1.5/s), 3 done;"),
            "{run}"
        );
        assert!(
            ring.ends_with(
                "queue depth max 3 queued (job_count), 1 on the hardware (hw_job_count)"
            ),
            "{run}"
        );
        // The run's histogram of run times: 1 µs, 10 µs and 20 µs.
        let hist: Vec<&&str> = lines
            .iter()
            .skip_while(|l| !l.contains("run time:"))
            .skip(1)
            .take_while(|l| l.starts_with("    ["))
            .collect();
        let counts: Vec<u64> = hist
            .iter()
            .map(|l| {
                l.split('|')
                    .next()
                    .unwrap()
                    .rsplit(' ')
                    .find(|w| !w.is_empty())
                    .unwrap()
                    .parse()
                    .unwrap()
            })
            .collect();
        assert_eq!(counts.iter().sum::<u64>(), 3, "{run}");
        assert_eq!(counts.first(), Some(&1), "{run}");
        assert_eq!(counts.last(), Some(&1), "{run}");
    }

    /// A job that waits on a dependency: how long it waited before it ran,
    /// per process and ring; fences by context, made to signalled, the
    /// scheduler's contexts named by the jobs on them; a fence signalled that
    /// was made before the monitor started is counted without a latency.
    #[test]
    fn dependency_waits_and_fences_have_their_latencies() {
        use DriverKind::{
            FenceInit as I, FenceSignaled as S, JobDone as D, JobQueued as Q, JobRun as R,
            JobWaitDep as W,
        };
        let mut s = Stats::default();
        // Job 9:1 (finished fence context 9, seqno 1) waits 40 µs on a
        // dependency; fences: 9:1 made at queueing, signalled at done; a
        // sw_sync fence 5:7 made and signalled 3 µs apart; 5:6 signalled only.
        let job = (9 << 32) | 1;
        let seq = [
            (Q, 0, job),
            (I, 0, job),
            (W, 2_000, job),
            (R, 42_000, job),
            (D, 50_000, job),
            (S, 50_000, job),
            (I, 60_000, (5 << 32) | 7),
            (S, 63_000, (5 << 32) | 7),
            (S, 64_000, (5 << 32) | 6),
        ];
        for (k, ts, id) in seq {
            s.record(&event(k, ts, 7, id));
        }
        let text = s.take_interval(1.0).to_string();
        assert_eq!(
            text,
            "app7 (pid 7): fences made 2; fences signalled 3; jobs 1 queued (1.0/s), 1 done; queue p50 42.0 µs p99 42.0 µs max 42.0 µs; run p50 8.0 µs p99 8.0 µs max 8.0 µs; 1 dependency waits, waited p50 40.0 µs p99 40.0 µs max 40.0 µs\n\
             ring ring0: jobs 1 queued (1.0/s), 1 done; queue p50 42.0 µs p99 42.0 µs max 42.0 µs; run p50 8.0 µs p99 8.0 µs max 8.0 µs; 1 dependency waits, waited p50 40.0 µs p99 40.0 µs max 40.0 µs; queue depth max 0 queued (job_count), 0 on the hardware (hw_job_count)\n\
             fence context 5: 1 made, 2 signalled; made to signalled p50 3.0 µs p99 3.0 µs max 3.0 µs\n\
             fence context 9 (drm_sched ring0 finished): 1 made, 1 signalled; made to signalled p50 50.0 µs p99 50.0 µs max 50.0 µs\n"
        );
        let run = s.run(1.0).to_string();
        assert!(run.contains("\n  dependency wait:\n    ["), "{run}");
        assert!(run.contains("\n  made to signalled:\n    ["), "{run}");
    }
}
