//! `gpuperf monitor`'s statistics of GPU driver events: per process, per ring
//! and per display CRTC over each interval, and counts by kind over the run.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use gpuperf_merge::write::driver::VblankPairer;

use crate::driver::{DriverEvent, DriverKind};

/// Events counted by kind, in words: `ioctl 3, irq 2`.
pub fn totals(t: &BTreeMap<DriverKind, u64>) -> String {
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

/// Statistics of the events seen, by interval.
#[derive(Default)]
pub struct Stats {
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
    /// `--sample N`: one in N events kept (Xids all), rates scaled by N.
    sample_every: u32,
}

/// One interval's statistics, to print.
pub struct Interval {
    secs: f64,
    /// One in this many events was kept (`--sample`): rates are scaled by it.
    sample_every: u32,
    procs: BTreeMap<u32, ProcStats>,
    rings: BTreeMap<String, RingStats>,
    other: BTreeMap<DriverKind, u64>,
    vblanks: BTreeMap<String, u64>,
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
    }

    /// Statistics of events sampled one in `every` (`--sample`): the rates
    /// printed are scaled by `every` and say so.
    pub fn sampled(mut self, every: u32) -> Self {
        self.sample_every = every;
        self
    }

    /// Ends an interval of `secs` seconds: its statistics, reset here.
    pub fn take_interval(&mut self, secs: f64) -> Interval {
        Interval {
            secs,
            sample_every: self.sample_every.max(1),
            procs: std::mem::take(&mut self.procs),
            rings: std::mem::take(&mut self.ring_stats)
                .into_iter()
                .map(|(name, mut r)| {
                    r.queue_ns.sort_unstable();
                    r.run_ns.sort_unstable();
                    (name, r)
                })
                .collect(),
            other: std::mem::take(&mut self.other),
            vblanks: std::mem::take(&mut self.vblanks),
        }
    }
}

impl Interval {
    /// Whether nothing happened.
    pub fn is_empty(&self) -> bool {
        self.procs.is_empty()
            && self.rings.is_empty()
            && self.other.is_empty()
            && self.vblanks.is_empty()
    }
}

/// A line per process, ring, CRTC, and one for the driver's interrupts.
impl fmt::Display for Interval {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Rates of what happened: sampled counts scaled back up.
        let rate = |n: usize| n as f64 * f64::from(self.sample_every) / self.secs;
        if self.sample_every > 1 && !self.is_empty() {
            writeln!(
                f,
                "(sampled: 1 in {} of each kind, every Xid; rates scaled by {0}, counts as kept)",
                self.sample_every
            )?;
        }
        for (pid, p) in &self.procs {
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
                    rate(d.len()),
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
            writeln!(f, "pid {pid} ({}): {}", p.comm, parts.join("; "))?;
        }
        for (name, r) in &self.rings {
            writeln!(
                f,
                "ring {name}: {:.1} jobs/s queued, {} done, queue p50 {} p99 {}, run p50 {} p99 {}, {} dependency waits",
                rate(r.queued as usize),
                r.done,
                micros(pct(&r.queue_ns, 50)),
                micros(pct(&r.queue_ns, 99)),
                micros(pct(&r.run_ns, 50)),
                micros(pct(&r.run_ns, 99)),
                r.dep_waits
            )?;
        }
        for (crtc, n) in &self.vblanks {
            writeln!(f, "vblank {crtc}: {n} vblanks, {:.1}/s", rate(*n as usize))?;
        }
        if !self.other.is_empty() {
            writeln!(f, "driver: {}", totals(&self.other))?;
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

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(pct(&v, 50), Some(50));
        assert_eq!(pct(&v, 99), Some(99));
        assert_eq!(pct(&[7], 99), Some(7));
        assert_eq!(pct(&[], 50), None);
    }

    #[test]
    fn an_interval_says_what_it_saw_and_is_reset() {
        let mut s = Stats::default();
        let mut e = DriverEvent {
            ts_ns: 1_000,
            dur_ns: 2_000,
            id: 9,
            ret: 0,
            pid: 7,
            tid: 7,
            kind: DriverKind::Ioctl,
            arg: 0x46,
            comm: "app".into(),
            ring: String::new(),
            msg: String::new(),
        };
        s.record(&e);
        e.kind = DriverKind::Irq;
        s.record(&e);
        let text = s.take_interval(2.0).to_string();
        assert_eq!(
            text,
            "pid 7 (app): ioctl 0x46: 0.5/s, p50 2.0 µs p99 2.0 µs\ndriver: irq 1\n"
        );
        assert!(s.take_interval(1.0).is_empty());
        assert_eq!(totals(s.totals()), "ioctl 1, irq 1");
    }

    #[test]
    fn sampled_rates_are_scaled_and_say_so() {
        let mut s = Stats::default().sampled(4);
        let e = DriverEvent {
            ts_ns: 1_000,
            dur_ns: 2_000,
            id: 9,
            ret: 0,
            pid: 7,
            tid: 7,
            kind: DriverKind::Ioctl,
            arg: 0x46,
            comm: "app".into(),
            ring: String::new(),
            msg: String::new(),
        };
        s.record(&e);
        let text = s.take_interval(2.0).to_string();
        assert_eq!(
            text,
            "(sampled: 1 in 4 of each kind, every Xid; rates scaled by 4, counts as kept)\n\
             pid 7 (app): ioctl 0x46: 2.0/s, p50 2.0 µs p99 2.0 µs\n"
        );
    }
}
