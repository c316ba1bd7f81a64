//! The report's driver section: ioctls by CUDA API function and CPU stack,
//! jobs by ring and by process, vblanks by CRTC, counts and losses.

use std::collections::BTreeMap;
use std::io::Write;

use crate::error::{Error, Result};
use crate::join::{Context, Match, Sink, Summary};
use crate::model::{DriverEvent, DriverKind, Record};
use crate::read::driver::DriverTrace;
use crate::write::report::{dur, percentile};

use super::jobs::{Job, jobs, vblank_events};
use super::timeline::process_name;
use super::{Call, Calls, Comms, nest, recorded_processes, xid_process_text};

/// The report's driver section; a [`Sink`] that collects the API calls.
pub struct Reporter {
    trace: DriverTrace,
    calls: Calls,
}

#[derive(Default)]
struct Tally {
    calls: std::collections::BTreeSet<usize>,
    ioctls: u64,
    ns: u64,
}

impl Reporter {
    /// A report of `trace`.
    pub fn new(trace: DriverTrace) -> Self {
        Self {
            trace,
            calls: Calls::default(),
        }
    }

    /// Writes the section.
    pub fn write(&self, mut out: impl Write, top: usize) -> Result<()> {
        let s = self.text(top);
        out.write_all(s.as_bytes()).map_err(|source| Error::Write {
            what: "report",
            source,
        })
    }

    /// The section's text.
    pub fn text(&self, top: usize) -> String {
        use std::fmt::Write as _;
        let t = &self.trace;
        let mut s = format!("\n{}\n", process_name(t));
        for a in &t.absent {
            let _ = writeln!(s, "  not present: {a}");
        }
        ioctl_section(&mut s, &t.events, &self.calls.calls, top);
        job_section(&mut s, &t.events);
        vblank_section(&mut s, &t.events);
        count_section(&mut s, t, &recorded_processes(&t.events, &self.calls.calls));
        s
    }
}

/// Ioctls by the CUDA API function and by the CPU stack they were made in.
fn ioctl_section(s: &mut String, events: &[DriverEvent], calls: &[Call], top: usize) {
    use std::fmt::Write as _;
    let nested = nest(events, calls);
    let mut by_api: BTreeMap<&str, Tally> = BTreeMap::new();
    let mut by_stack: BTreeMap<String, Tally> = BTreeMap::new();
    let mut outside = Tally::default();
    for (e, call) in events.iter().zip(&nested) {
        if e.kind != DriverKind::Ioctl {
            continue;
        }
        let tally = match call {
            Some(i) => {
                let c = &calls[*i];
                // In-process stacks end in the API function already.
                let key = match &c.stack {
                    Some(st) if st.ends_with(&format!(";{}", c.name)) => st.clone(),
                    Some(st) => format!("{st};{}", c.name),
                    None => format!("[no CPU stack];{}", c.name),
                };
                let st = by_stack.entry(key).or_default();
                st.calls.insert(*i);
                st.ioctls += 1;
                st.ns += e.dur_ns;
                by_api.entry(&c.name).or_default()
            }
            None => &mut outside,
        };
        if let Some(i) = call {
            tally.calls.insert(*i);
        }
        tally.ioctls += 1;
        tally.ns += e.dur_ns;
    }
    let _ = writeln!(s, "Driver ioctls by CUDA API function");
    let _ = writeln!(
        s,
        "  {:>8} {:>8} {:>11} {:>11}  function",
        "calls", "ioctls", "total", "per call"
    );
    let mut rows: Vec<(&str, &Tally)> = by_api.iter().map(|(k, v)| (*k, v)).collect();
    rows.sort_by(|a, b| b.1.ns.cmp(&a.1.ns).then(a.0.cmp(b.0)));
    for (name, v) in &rows {
        let n = v.calls.len() as u64;
        let _ = writeln!(
            s,
            "  {:>8} {:>8} {:>11} {:>11}  {name}",
            n,
            v.ioctls,
            dur(v.ns),
            dur(v.ns / n.max(1))
        );
    }
    if outside.ioctls > 0 {
        let _ = writeln!(
            s,
            "  {:>8} {:>8} {:>11} {:>11}  [outside any CUDA API call]",
            "-",
            outside.ioctls,
            dur(outside.ns),
            "-"
        );
    }
    if !by_stack.is_empty() {
        let _ = writeln!(s, "Driver ioctls by CPU stack (ioctls, total)");
        let mut rows: Vec<(&String, &Tally)> = by_stack.iter().collect();
        rows.sort_by(|a, b| b.1.ns.cmp(&a.1.ns).then(a.0.cmp(b.0)));
        for (stack, v) in rows.into_iter().take(top) {
            let _ = writeln!(s, "  {:>8} {:>11}  {stack}", v.ioctls, dur(v.ns));
        }
    }
}

/// DRM scheduler jobs per ring: how many, queue and run latencies.
fn job_section(s: &mut String, events: &[DriverEvent]) {
    use std::fmt::Write as _;
    let jobs = jobs(events);
    if jobs.is_empty() {
        return;
    }
    let _ = writeln!(s, "DRM scheduler jobs by ring");
    let _ = writeln!(
        s,
        "  {:>8} {:>11} {:>11} {:>11} {:>11} {:>9} {:>10}  ring",
        "jobs", "queue p50", "queue p99", "run p50", "run p99", "dep waits", "unfinished"
    );
    let mut rings: BTreeMap<&str, Vec<&Job>> = BTreeMap::new();
    for j in &jobs {
        rings.entry(&j.ring).or_default().push(j);
    }
    for (ring, js) in rings {
        let (queue, run) = latencies(&js);
        let p = |v: &[u64], q| percentile(v, q).map_or_else(|| "-".to_owned(), dur);
        let deps = js.iter().filter(|j| j.dep_wait_ns.is_some()).count();
        let unfinished = js.iter().filter(|j| j.done_ns.is_none()).count();
        let _ = writeln!(
            s,
            "  {:>8} {:>11} {:>11} {:>11} {:>11} {:>9} {:>10}  {ring}",
            js.len(),
            p(&queue, 50),
            p(&queue, 99),
            p(&run, 50),
            p(&run, 99),
            deps,
            unfinished
        );
    }
    let mut procs: BTreeMap<u32, Vec<&Job>> = BTreeMap::new();
    for j in &jobs {
        procs.entry(j.pid).or_default().push(j);
    }
    let comms = Comms::of(events);
    let _ = writeln!(s, "DRM scheduler jobs by submitting process");
    let _ = writeln!(
        s,
        "  {:>8} {:>11} {:>11} {:>11} {:>11}  process",
        "jobs", "queue p50", "queue p99", "run p50", "run p99"
    );
    for (pid, js) in procs {
        let (queue, run) = latencies(&js);
        let p = |v: &[u64], q| percentile(v, q).map_or_else(|| "-".to_owned(), dur);
        let name = comms
            .processes
            .get(&pid)
            .map_or_else(|| format!("pid {pid}"), |c| format!("{c} (pid {pid})"));
        let _ = writeln!(
            s,
            "  {:>8} {:>11} {:>11} {:>11} {:>11}  {name}",
            js.len(),
            p(&queue, 50),
            p(&queue, 99),
            p(&run, 50),
            p(&run, 99),
        );
    }
}

/// The queue (queued to run) and run (run to done) latencies of `jobs`, sorted.
fn latencies(jobs: &[&Job]) -> (Vec<u64>, Vec<u64>) {
    let mut queue: Vec<u64> = jobs
        .iter()
        .filter_map(|j| Some(j.run_ns?.saturating_sub(j.queued_ns?)))
        .collect();
    let mut run: Vec<u64> = jobs
        .iter()
        .filter_map(|j| Some(j.done_ns?.saturating_sub(j.run_ns?)))
        .collect();
    queue.sort_unstable();
    run.sort_unstable();
    (queue, run)
}

/// Driver calls and interrupts counted, each Xid, and what was lost.
fn count_section(s: &mut String, t: &DriverTrace, ours: &std::collections::BTreeSet<u32>) {
    use std::fmt::Write as _;
    let count = |k: DriverKind| t.events.iter().filter(|e| e.kind == k).count();
    let _ = writeln!(
        s,
        "Driver calls: {} opens, {} ioctls, {} mmaps; interrupts: {}, bottom halves: {}",
        count(DriverKind::Open),
        count(DriverKind::Ioctl),
        count(DriverKind::Mmap),
        count(DriverKind::Irq),
        count(DriverKind::IrqBottomHalf)
    );
    let xids: Vec<&DriverEvent> = t
        .events
        .iter()
        .filter(|e| e.kind == DriverKind::Xid)
        .collect();
    let _ = writeln!(s, "Xid errors: {}", xids.len());
    let first = t.events.first().map_or(0, |e| e.ts_ns);
    for e in xids {
        let dev = if e.ring.is_empty() { "?" } else { &e.ring };
        let _ = writeln!(
            s,
            "  +{} Xid {} on {dev}, process {}: {}",
            dur(e.ts_ns - first),
            e.arg,
            xid_process_text(e, ours),
            e.msg
        );
    }
    let dropped = t.total_dropped();
    if dropped > 0 {
        let parts: Vec<String> = t
            .dropped
            .iter()
            .filter(|(_, n)| *n > 0)
            .map(|(k, n)| format!("{n} {k}"))
            .collect();
        let _ = writeln!(s, "Driver events lost: {dropped} ({})", parts.join(", "));
    }
}

/// Vblanks and vblank events per CRTC: how many, and the latency from an
/// event's queueing to its delivery.
fn vblank_section(s: &mut String, events: &[DriverEvent]) {
    use std::fmt::Write as _;
    #[derive(Default)]
    struct Crtc {
        vblanks: u64,
        queued: u64,
        delivered: u64,
        latency: Vec<u64>,
    }
    let mut crtcs: BTreeMap<&str, Crtc> = BTreeMap::new();
    for e in events.iter().filter(|e| e.kind == DriverKind::Vblank) {
        crtcs.entry(&e.ring).or_default().vblanks += 1;
    }
    let vs = vblank_events(events);
    for v in &vs {
        let c = crtcs.entry(&v.crtc).or_default();
        c.queued += u64::from(v.queued_ns.is_some());
        c.delivered += u64::from(v.delivered_ns.is_some());
        if let (Some(q), Some(d)) = (v.queued_ns, v.delivered_ns) {
            c.latency.push(d.saturating_sub(q));
        }
    }
    if crtcs.is_empty() {
        return;
    }
    let _ = writeln!(s, "Display vblanks and vblank events by CRTC");
    let _ = writeln!(
        s,
        "  {:>8} {:>8} {:>9} {:>11} {:>11}  crtc",
        "vblanks", "queued", "delivered", "latency p50", "latency p99"
    );
    for (crtc, mut c) in crtcs {
        c.latency.sort_unstable();
        let p = |q| percentile(&c.latency, q).map_or_else(|| "-".to_owned(), dur);
        let crtc = if crtc.is_empty() { "?" } else { crtc };
        let _ = writeln!(
            s,
            "  {:>8} {:>8} {:>9} {:>11} {:>11}  {crtc}",
            c.vblanks,
            c.queued,
            c.delivered,
            p(50),
            p(99)
        );
    }
}

impl Sink for Reporter {
    fn record(&mut self, ctx: &Context<'_>, rec: &Record, m: &Match<'_>) -> Result<()> {
        self.calls.take(ctx, rec, m);
        Ok(())
    }

    fn finish(&mut self, _ctx: &Context<'_>, _summary: &Summary) -> Result<()> {
        Ok(())
    }
}
