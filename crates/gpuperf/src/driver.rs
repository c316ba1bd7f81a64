//! Driver events in gpuperf's own words, shared by `gpuperf monitor` and
//! recordings: the line for a source that is not present, and the event
//! file's head and tail (the file is written by [`driver::Writer`]).

use std::io::Write;
use std::path::Path;

use anyhow::{Context as _, Result};
use gpuperf_merge::read::driver;
use gpuperf_merge::recording;
use gpuperf_profiler::driver::{DriverEvent, DriverOptions, DriverStats, Recorder, Source};

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

/// Starts a driver event file in `out`: the sources attached, those absent
/// (why, a line each) and the simulated test modules loaded.
pub fn start_file<W: Write>(
    out: W,
    present: &[Source],
    absent: &[&str],
) -> Result<driver::Writer<W>> {
    let attached: Vec<&str> = present.iter().map(|s| s.name()).collect();
    driver::Writer::start(out, &attached, absent).context("failed to write the driver events")
}

/// Ends a driver event file with what was lost, by cause.
pub fn finish_file<W: Write>(
    w: driver::Writer<W>,
    stats: &DriverStats,
    malformed: u64,
) -> std::io::Result<W> {
    w.finish_lost(stats.ring_buffer_drops, stats.map_full, malformed)
}

/// `gpuperf record --driver`: a driver trace for the recording, written to
/// its directory as the events come.
pub struct ForRecord {
    rec: Recorder,
    file: std::sync::Arc<std::sync::Mutex<EventFile>>,
}

struct EventFile {
    out: Option<driver::Writer<std::io::BufWriter<std::fs::File>>>,
    err: Option<std::io::Error>,
    tally: driver::Tally,
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
    let path = raw.join(recording::DRIVER_EVENTS);
    let f = std::fs::File::create(&path)
        .with_context(|| format!("failed to create `{}`", path.display()))?;
    let out = start_file(
        std::io::BufWriter::with_capacity(1 << 16, f),
        &present,
        &why,
    )?;
    let file = std::sync::Arc::new(std::sync::Mutex::new(EventFile {
        out: Some(out),
        err: None,
        tally: driver::Tally::default(),
    }));
    let options = DriverOptions {
        pids: vec![std::process::id()],
        filter_pids: true,
        sources: present,
        ..DriverOptions::default()
    };
    let sink = file.clone();
    let on_event = Box::new(move |e: DriverEvent| {
        let mut f = sink.lock().unwrap_or_else(|p| p.into_inner());
        f.tally.add(e.kind);
        let f = &mut *f;
        if f.err.is_none()
            && let Some(Err(e)) = f.out.as_mut().map(|w| w.event(&e))
        {
            f.err = Some(e);
        }
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
        let out = f.out.take().map(|w| finish_file(w, st, summary.malformed));
        if let Some(e) = f.err.take() {
            return Err(e).context("failed to write the driver events");
        }
        if let Some(out) = out {
            out.and_then(|mut o| o.flush())
                .context("failed to write the driver events")?;
        }
        f.tally.lost = st.ring_buffer_drops + st.map_full + summary.malformed;
        Ok(format!("gpuperf: driver: {}\n", f.tally))
    }
}
