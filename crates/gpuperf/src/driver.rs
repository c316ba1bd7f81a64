//! Driver events in gpuperf's own words, shared by `gpuperf monitor` and
//! recordings: the line for a source that is not present, and the
//! tab-separated event file.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;

use anyhow::{Context as _, Result};
use gpuperf_profiler::driver::{DriverEvent, DriverKind, DriverOptions, Recorder, Source};

/// The first line of an event file: its columns (the file `gpuperf merge` reads).
pub const EVENT_HEADER: &str = gpuperf_merge::read::driver::HEADER;

/// The test modules of `sim/kernel/` that stand in for GPU drivers, `vkms`,
/// the kernel's virtual display (its vblanks come from a timer), and
/// `sw_sync`, its software fence timeline.
const SIMULATED_MODULES: [&str; 4] = ["nvidia_sim", "drm_sched_sim", "vkms", "sw_sync"];

/// The line that says a source is missing and skipped.
pub fn absent_line(tool: &str, why: &str) -> String {
    format!("gpuperf {tool}: not present, skipped: {why}")
}

/// Prints [`absent_line`] for each absent source on stderr.
pub fn say_absent(tool: &str, absent: &[(Source, String)]) {
    for (_, why) in absent {
        eprintln!("{}", absent_line(tool, why));
    }
}

/// One event as a line of the event file (without the newline). Tabs and
/// newlines in names and messages become spaces, so each event is one line.
pub fn event_line(e: &DriverEvent) -> String {
    let clean = |s: &str| s.replace(['\t', '\n'], " ");
    format!(
        "{}\t{}\t{}\t{}\t{}\t{}\t{:#x}\t{}\t{}\t{:#x}\t{}",
        e.ts_ns,
        e.kind.name(),
        e.pid,
        e.tid,
        clean(&e.comm),
        clean(&e.ring),
        e.arg,
        e.dur_ns,
        e.ret,
        e.id,
        clean(&e.msg)
    )
}

/// `gpuperf record --driver`: a driver trace for the recording, written to
/// its directory as the events come.
pub struct ForRecord {
    rec: Recorder,
    file: std::sync::Arc<std::sync::Mutex<EventFile>>,
}

struct EventFile {
    out: std::io::BufWriter<std::fs::File>,
    err: Option<std::io::Error>,
    counts: [u64; 5],
    total: u64,
}

impl EventFile {
    fn write(&mut self, text: &str) {
        if self.err.is_none()
            && let Err(e) = self.out.write_all(text.as_bytes())
        {
            self.err = Some(e);
        }
    }
}

/// The head of a driver event file: its columns, the sources attached, those
/// absent (why, a line each) and the simulated test modules loaded.
pub fn file_header(present: &[Source], absent: &[&str]) -> String {
    let mut head = format!("{EVENT_HEADER}\n");
    for s in present {
        let _ = writeln!(head, "# attached {}", s.name());
    }
    for a in absent {
        let _ = writeln!(head, "# absent {a}");
    }
    let modules = std::fs::read_to_string("/proc/modules").unwrap_or_default();
    for m in SIMULATED_MODULES {
        if modules.lines().any(|l| l.split(' ').next() == Some(m)) {
            let _ = writeln!(head, "# simulated {m}");
        }
    }
    head
}

/// The lines that end a driver event file: what was lost, by cause.
pub fn file_tail(stats: &gpuperf_profiler::driver::DriverStats, malformed: u64) -> String {
    let mut tail = String::new();
    for (k, n) in [
        ("ring_buffer", stats.ring_buffer_drops),
        ("map_full", stats.map_full),
        ("malformed", malformed),
    ] {
        let _ = writeln!(tail, "# dropped {k} {n}");
    }
    tail
}

/// Attaches before the target starts, following gpuperf's own process tree
/// (the target and its children), and starts `driver.tsv` in `raw`. `None`,
/// after one line saying why, when nothing can be recorded; the recording
/// goes on without driver events.
pub fn start_for_record(raw: &Path) -> Result<Option<ForRecord>> {
    let kallsyms = std::fs::read_to_string("/proc/kallsyms").unwrap_or_default();
    let (present, absent) = gpuperf_profiler::driver::available(&kallsyms, &Source::ALL);
    let why: Vec<&str> = absent.iter().map(|(_, w)| w.as_str()).collect();
    if present.is_empty() {
        eprintln!(
            "gpuperf record: --driver: no GPU driver events on this machine, skipped: {}",
            why.join("; ")
        );
        return Ok(None);
    }
    let path = raw.join(gpuperf_merge::read::driver::FILE_NAME);
    let f = std::fs::File::create(&path)
        .with_context(|| format!("failed to create `{}`", path.display()))?;
    let head = file_header(&present, &why);
    let file = std::sync::Arc::new(std::sync::Mutex::new(EventFile {
        out: std::io::BufWriter::with_capacity(1 << 16, f),
        err: None,
        counts: [0; 5],
        total: 0,
    }));
    file.lock().expect("not poisoned").write(&head);
    let options = DriverOptions {
        pids: vec![std::process::id()],
        filter_pids: true,
        sources: present,
        ..DriverOptions::default()
    };
    let sink = file.clone();
    let on_event = Box::new(move |e: DriverEvent| {
        let mut f = sink.lock().unwrap_or_else(|p| p.into_inner());
        let slot = match e.kind {
            DriverKind::Ioctl => Some(0),
            DriverKind::JobQueued => Some(1),
            DriverKind::Irq => Some(2),
            DriverKind::Xid => Some(3),
            DriverKind::Vblank => Some(4),
            _ => None,
        };
        if let Some(i) = slot {
            f.counts[i] += 1;
        }
        f.total += 1;
        let line = event_line(&e) + "\n";
        f.write(&line);
    });
    match Recorder::start_streaming(options, on_event) {
        Ok(rec) => {
            if !why.is_empty() {
                eprintln!("{}", absent_line("record --driver", &why.join("; ")));
            }
            Ok(Some(ForRecord { rec, file }))
        }
        Err(e) => {
            let _ = std::fs::remove_file(&path);
            eprintln!("gpuperf record: --driver: no GPU driver events, skipped: {e}");
            Ok(None)
        }
    }
}

impl ForRecord {
    /// Stops the trace and finishes the file with what was lost. Returns the
    /// summary line.
    pub fn finish(self) -> Result<String> {
        let (_, summary) = self.rec.finish().context("the driver trace failed")?;
        let mut f = self.file.lock().unwrap_or_else(|p| p.into_inner());
        let st = &summary.stats;
        f.write(&file_tail(st, summary.malformed));
        if let Some(e) = f.err.take() {
            return Err(e).context("failed to write the driver events");
        }
        f.out.flush().context("failed to write the driver events")?;
        let lost = st.ring_buffer_drops + st.map_full + summary.malformed;
        let [ioctls, jobs, irqs, xids, vblanks] = f.counts;
        Ok(format!(
            "gpuperf: driver: {} events ({ioctls} ioctls, {jobs} jobs, {irqs} interrupts, {xids} Xids, {vblanks} vblanks), {lost} lost\n",
            f.total
        ))
    }
}

#[cfg(test)]
mod tests {
    use gpuperf_profiler::driver::DriverKind;

    use super::*;

    #[test]
    fn an_event_is_one_line_with_every_column() {
        let e = DriverEvent {
            ts_ns: 5,
            dur_ns: 7,
            id: 0x10,
            ret: -22,
            pid: 1,
            tid: 2,
            kind: DriverKind::Xid,
            arg: 79,
            comm: "a\tb".into(),
            ring: String::new(),
            msg: "bad\nthing".into(),
        };
        let line = event_line(&e);
        assert_eq!(line, "5\txid\t1\t2\ta b\t\t0x4f\t7\t-22\t0x10\tbad thing");
        assert_eq!(line.split('\t').count(), EVENT_HEADER.split('\t').count());
    }

    #[test]
    fn merge_reads_what_the_recording_writes() {
        let e = DriverEvent {
            ts_ns: 1000,
            dur_ns: 250,
            id: 0,
            ret: -1,
            pid: 7,
            tid: 8,
            kind: DriverKind::Ioctl,
            arg: 0xc020_462a,
            comm: "app".into(),
            ring: String::new(),
            msg: String::new(),
        };
        let text = format!("{EVENT_HEADER}\n{}\n", event_line(&e));
        let t = gpuperf_merge::read::driver::DriverTrace::parse(text.as_bytes(), "t").unwrap();
        assert!(t.diagnostics.is_empty(), "{:?}", t.diagnostics);
        let r = &t.events[0];
        assert_eq!(
            (r.ts_ns, r.dur_ns, r.ret, r.pid, r.tid, r.arg, r.kind.name()),
            (1000, 250, -1, 7, 8, 0xc020_462a, e.kind.name())
        );
    }
}
