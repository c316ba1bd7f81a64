//! Driver events in gpuperf's own words, shared by `gpuperf monitor` and
//! recordings: the line for a source that is not present, and the
//! tab-separated event file.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context as _, Result};
use gpuperf_profiler::driver::{DriverEvent, DriverKind, DriverOptions, Recorder, Source};

/// The first line of an event file: its columns (the file `gpuperf merge` reads).
pub const EVENT_HEADER: &str = gpuperf_merge::read::driver::HEADER;

/// The test modules of `sim/kernel/` that stand in for GPU drivers.
const SIMULATED_MODULES: [&str; 2] = ["nvidia_sim", "drm_sched_sim"];

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

/// `gpuperf record --driver`: attaches before the target starts, following
/// gpuperf's own process tree (the target and its children). `None`, after
/// one line saying why, when nothing can be recorded; the recording goes on
/// without driver events.
pub fn start_for_record() -> Option<Recorder> {
    let kallsyms = std::fs::read_to_string("/proc/kallsyms").unwrap_or_default();
    let (present, absent) = gpuperf_profiler::driver::available(&kallsyms, &Source::ALL);
    let why: Vec<&str> = absent.iter().map(|(_, w)| w.as_str()).collect();
    if present.is_empty() {
        eprintln!(
            "gpuperf record: --driver: no GPU driver events on this machine, skipped: {}",
            why.join("; ")
        );
        return None;
    }
    let options = DriverOptions {
        pids: vec![std::process::id()],
        filter_pids: true,
        sources: present,
        ..DriverOptions::default()
    };
    match Recorder::start(options) {
        Ok(r) => {
            if !why.is_empty() {
                eprintln!("{}", absent_line("record --driver", &why.join("; ")));
            }
            Some(r)
        }
        Err(e) => {
            eprintln!("gpuperf record: --driver: no GPU driver events, skipped: {e}");
            None
        }
    }
}

/// Stops the trace and writes the recording's driver event file into `raw`.
/// Returns the summary line.
pub fn finish_for_record(rec: Recorder, raw: &Path) -> Result<String> {
    let absent: Vec<String> = rec.absent().iter().map(|(_, w)| w.clone()).collect();
    let (events, summary) = rec.finish().context("the driver trace failed")?;
    let modules = std::fs::read_to_string("/proc/modules").unwrap_or_default();
    let mut text = format!("{EVENT_HEADER}\n");
    for s in &summary.attached {
        let _ = writeln!(text, "# attached {}", s.name());
    }
    for a in &absent {
        let _ = writeln!(text, "# absent {a}");
    }
    for m in SIMULATED_MODULES {
        if modules.lines().any(|l| l.split(' ').next() == Some(m)) {
            let _ = writeln!(text, "# simulated {m}");
        }
    }
    let st = &summary.stats;
    for (k, n) in [
        ("ring_buffer", st.ring_buffer_drops),
        ("map_full", st.map_full),
        ("malformed", summary.malformed),
    ] {
        let _ = writeln!(text, "# dropped {k} {n}");
    }
    for e in &events {
        text += &event_line(e);
        text.push('\n');
    }
    let path = raw.join(gpuperf_merge::read::driver::FILE_NAME);
    std::fs::write(&path, text).with_context(|| format!("failed to write `{}`", path.display()))?;
    let n = |k: DriverKind| events.iter().filter(|e| e.kind == k).count();
    let lost = st.ring_buffer_drops + st.map_full + summary.malformed;
    Ok(format!(
        "gpuperf: driver: {} events ({} ioctls, {} jobs, {} interrupts, {} Xids), {lost} lost\n",
        events.len(),
        n(DriverKind::Ioctl),
        n(DriverKind::JobQueued),
        n(DriverKind::Isr),
        n(DriverKind::Xid)
    ))
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
