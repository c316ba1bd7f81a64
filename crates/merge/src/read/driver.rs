//! The driver event file of a recording (`driver.tsv`, written by
//! `gpuperf record --driver`): one tab-separated line per event, and comment
//! lines saying what was attached, what was not present, and what was lost.
//!
//! ```text
//! # ts_ns→kind→pid→tid→comm→ring→arg→dur_ns→ret→id→msg
//! # attached nvidia
//! # simulated nvidia_sim
//! # absent drm_sched: no DRM scheduler (gpu-sched) is loaded
//! # dropped ring_buffer 0
//! 1000→ioctl→7→7→app→→0xc0104601→2500→0→0x0→
//! ```
//!
//! (→ is a tab.) [`Writer`] writes it; [`DriverTrace`] reads it.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Write};
use std::path::Path;

use crate::diag::Diagnostics;
use crate::error::{Error, Result};
use crate::model::{DriverEvent, DriverKind};

/// The first line of the file: its columns.
pub const HEADER: &str = "# ts_ns\tkind\tpid\ttid\tcomm\tring\targ\tdur_ns\tret\tid\tmsg";

/// A driver event file, read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DriverTrace {
    /// The events, by time.
    pub events: Vec<DriverEvent>,
    /// The sources that were attached (`nvidia`, `irq`, `xid`, `drm_sched`, `dma_fence`).
    pub attached: Vec<String>,
    /// The sources that were not present, one line each.
    pub absent: Vec<String>,
    /// The simulated test modules that stood in for a driver (`nvidia_sim`, `drm_sched_sim`).
    pub simulated: Vec<String>,
    /// Events lost while recording, by cause.
    pub dropped: Vec<(String, u64)>,
    /// Malformed lines.
    pub diagnostics: Diagnostics,
}

impl DriverTrace {
    /// Reads `path`, plain or gzip-compressed (as `gpuperf monitor --output
    /// FILE.gz` writes it; with the `render` feature).
    pub fn open(path: &Path) -> Result<Self> {
        let io = |action: &'static str| {
            move |source| Error::Io {
                action,
                path: path.to_path_buf(),
                source,
            }
        };
        let r = BufReader::new(File::open(path).map_err(io("open"))?);
        let name = path.display().to_string();
        #[cfg(feature = "render")]
        let r = {
            let mut r = r;
            if r.fill_buf().map_err(io("read"))?.starts_with(&[0x1f, 0x8b]) {
                let gz = BufReader::new(flate2::bufread::MultiGzDecoder::new(r));
                return Self::parse(gz, &name).map_err(io("read"));
            }
            r
        };
        Self::parse(r, &name).map_err(io("read"))
    }

    /// Reads a driver event file from `r`; `name` places its diagnostics.
    pub fn parse(r: impl BufRead, name: &str) -> io::Result<Self> {
        let mut t = Self::default();
        for (i, line) in r.lines().enumerate() {
            let line = line?;
            let at = || format!("{name}:{}", i + 1);
            if let Some(c) = line.strip_prefix('#') {
                let c = c.trim_start();
                if let Some(s) = c.strip_prefix("attached ") {
                    t.attached.push(s.to_owned());
                } else if let Some(s) = c.strip_prefix("absent ") {
                    t.absent.push(s.to_owned());
                } else if let Some(s) = c.strip_prefix("simulated ") {
                    t.simulated.push(s.to_owned());
                } else if let Some(s) = c.strip_prefix("dropped ") {
                    match s.split_once(' ').map(|(k, n)| (k, n.parse::<u64>())) {
                        Some((k, Ok(n))) => t.dropped.push((k.to_owned(), n)),
                        _ => t.diagnostics.push(at, || format!("bad drop count `{s}`")),
                    }
                }
                continue;
            }
            if line.is_empty() {
                continue;
            }
            match parse_event(&line) {
                Ok(e) => t.events.push(e),
                Err(why) => t.diagnostics.push(at, || why),
            }
        }
        t.events.sort_by_key(|e| e.ts_ns);
        Ok(t)
    }

    /// Events lost while recording, all causes together.
    pub fn total_dropped(&self) -> u64 {
        self.dropped.iter().map(|(_, n)| n).sum()
    }
}

/// Writes a driver event file: the head, one line per event, and the tail
/// that says what was lost.
pub struct Writer<W: Write> {
    out: W,
}

impl<W: Write> Writer<W> {
    /// Writes the head: [`HEADER`], the sources `attached`, those `absent`
    /// (why, a line each) and the `simulated` test modules loaded.
    pub fn new(
        mut out: W,
        attached: &[&str],
        absent: &[&str],
        simulated: &[&str],
    ) -> io::Result<Self> {
        let mut head = format!("{HEADER}\n");
        for (what, names) in [
            ("attached", attached),
            ("absent", absent),
            ("simulated", simulated),
        ] {
            for n in names {
                head += &format!("# {what} {n}\n");
            }
        }
        out.write_all(head.as_bytes())?;
        Ok(Self { out })
    }

    /// [`Writer::new`] for events recorded on this machine now: the simulated
    /// modules are those of [`SIMULATED_MODULES`] that `/proc/modules` lists.
    pub fn start(out: W, attached: &[&str], absent: &[&str]) -> io::Result<Self> {
        let modules = std::fs::read_to_string("/proc/modules").unwrap_or_default();
        Self::new(out, attached, absent, &simulated_modules(&modules))
    }

    /// Writes one event, a line. Tabs and newlines in names and messages
    /// become spaces, so each event is one line.
    pub fn event(&mut self, e: &DriverEvent) -> io::Result<()> {
        let clean = |s: &str| s.replace(['\t', '\n'], " ");
        writeln!(
            self.out,
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

    /// Ends the file with the events lost while recording, by cause
    /// (`ring_buffer`, `map_full`, `malformed`), and returns the writer.
    pub fn finish(mut self, dropped: &[(&str, u64)]) -> io::Result<W> {
        for (cause, n) in dropped {
            writeln!(self.out, "# dropped {cause} {n}")?;
        }
        Ok(self.out)
    }
}

/// The test modules of `sim/kernel/` that stand in for GPU drivers, `vkms`,
/// the kernel's virtual display (its vblanks come from a timer), and
/// `sw_sync`, its software fence timeline: a file's `# simulated` lines.
pub const SIMULATED_MODULES: [&str; 4] = ["nvidia_sim", "drm_sched_sim", "vkms", "sw_sync"];

/// The [`SIMULATED_MODULES`] loaded, read from `/proc/modules`' text.
pub(crate) fn simulated_modules(proc_modules: &str) -> Vec<&'static str> {
    SIMULATED_MODULES
        .into_iter()
        .filter(|m| {
            proc_modules
                .lines()
                .any(|l| l.split(' ').next() == Some(*m))
        })
        .collect()
}

/// Events written to a driver event file, counted by kind for its summary.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// Ioctls, jobs queued, interrupts, Xids and vblanks, in that order.
    counts: [u64; 5],
    /// Every event.
    total: u64,
    /// Events lost while recording, all causes together.
    pub lost: u64,
}

impl Tally {
    /// Counts one event of kind `k`.
    pub fn add(&mut self, k: DriverKind) {
        let slot = match k {
            DriverKind::Ioctl => Some(0),
            DriverKind::JobQueued => Some(1),
            DriverKind::Irq => Some(2),
            DriverKind::Xid => Some(3),
            DriverKind::Vblank => Some(4),
            _ => None,
        };
        if let Some(i) = slot {
            self.counts[i] += 1;
        }
        self.total += 1;
    }
}

impl std::fmt::Display for Tally {
    /// `N events (… ioctls, … jobs, … interrupts, … Xids, … vblanks), L lost`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let [ioctls, jobs, irqs, xids, vblanks] = self.counts;
        write!(
            f,
            "{} events ({ioctls} ioctls, {jobs} jobs, {irqs} interrupts, {xids} Xids, {vblanks} vblanks), {} lost",
            self.total, self.lost
        )
    }
}

/// Where `gpuperf monitor --output` keeps events: a file as written, or
/// gzip-compressed when its name ends in `.gz` ([`DriverTrace::open`] reads both).
#[cfg(feature = "render")]
pub enum EventFile {
    /// Plain text.
    Plain(io::BufWriter<File>),
    /// gzip-compressed.
    Gz(Box<flate2::write::GzEncoder<io::BufWriter<File>>>),
}

#[cfg(feature = "render")]
impl EventFile {
    /// Creates `p`, compressed when its extension is `gz`.
    pub fn create(p: &Path) -> io::Result<Self> {
        let f = io::BufWriter::with_capacity(1 << 16, File::create(p)?);
        Ok(if p.extension().is_some_and(|e| e == "gz") {
            Self::Gz(Box::new(flate2::write::GzEncoder::new(
                f,
                flate2::Compression::fast(),
            )))
        } else {
            Self::Plain(f)
        })
    }

    /// Flushes, and ends a gzip stream.
    pub fn finish(self) -> io::Result<()> {
        match self {
            Self::Plain(mut f) => f.flush(),
            Self::Gz(g) => g.finish()?.flush(),
        }
    }
}

#[cfg(feature = "render")]
impl Write for EventFile {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        match self {
            Self::Plain(f) => f.write(b),
            Self::Gz(g) => g.write(b),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Self::Plain(f) => f.flush(),
            Self::Gz(g) => g.flush(),
        }
    }
}

impl<W: Write> Writer<W> {
    /// [`Writer::finish`] with the eBPF recorder's causes of loss: its ring
    /// buffer full, its map of started events full, and malformed events.
    pub fn finish_lost(self, ring_buffer: u64, map_full: u64, malformed: u64) -> io::Result<W> {
        self.finish(&[
            ("ring_buffer", ring_buffer),
            ("map_full", map_full),
            ("malformed", malformed),
        ])
    }
}

fn parse_event(line: &str) -> std::result::Result<DriverEvent, String> {
    let cols: Vec<&str> = line.split('\t').collect();
    if cols.len() != 11 {
        return Err(format!("{} columns, expected 11", cols.len()));
    }
    let dec = |i: usize, what: &str| {
        cols[i]
            .parse::<u64>()
            .map_err(|_| format!("bad {what} `{}`", cols[i]))
    };
    let hex = |i: usize, what: &str| {
        cols[i]
            .strip_prefix("0x")
            .and_then(|h| u64::from_str_radix(h, 16).ok())
            .ok_or_else(|| format!("bad {what} `{}`", cols[i]))
    };
    let small = |v: u64, what: &str| u32::try_from(v).map_err(|_| format!("{what} {v} too large"));
    Ok(DriverEvent {
        ts_ns: dec(0, "timestamp")?,
        kind: DriverKind::from_name(cols[1])
            .ok_or_else(|| format!("unknown kind `{}`", cols[1]))?,
        pid: small(dec(2, "pid")?, "pid")?,
        tid: small(dec(3, "tid")?, "tid")?,
        comm: cols[4].to_owned(),
        ring: cols[5].to_owned(),
        arg: small(hex(6, "argument")?, "argument")?,
        dur_ns: dec(7, "duration")?,
        ret: cols[8]
            .parse()
            .map_err(|_| format!("bad return value `{}`", cols[8]))?,
        id: hex(9, "id")?,
        msg: cols[10].to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simulated_modules_are_found_by_name_and_counts_said() {
        let modules =
            "vkms 16384 0 - Live 0x0\nnvidia_simx 1 0 - Live 0x0\nsw_sync 1 0 - Live 0x0\n";
        assert_eq!(simulated_modules(modules), ["vkms", "sw_sync"]);
        let mut t = Tally::default();
        for k in [
            DriverKind::Ioctl,
            DriverKind::Ioctl,
            DriverKind::Xid,
            DriverKind::JobRun,
        ] {
            t.add(k);
        }
        t.lost = 3;
        assert_eq!(
            t.to_string(),
            "4 events (2 ioctls, 0 jobs, 0 interrupts, 1 Xids, 0 vblanks), 3 lost"
        );
    }

    #[test]
    fn what_the_writer_writes_reads_back_the_same() {
        let events = [
            DriverEvent {
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
            },
            DriverEvent {
                ts_ns: 5000,
                dur_ns: 0,
                id: 0x10,
                ret: 0,
                pid: 1,
                tid: 2,
                kind: DriverKind::Xid,
                arg: 79,
                comm: "irq/5".into(),
                ring: "0000:01:00.0".into(),
                msg: "fell off the bus".into(),
            },
        ];
        let mut w = Writer::new(
            Vec::new(),
            &["nvidia", "xid"],
            &["drm_sched: no DRM scheduler (gpu-sched) is loaded"],
            &["nvidia_sim"],
        )
        .unwrap();
        for e in &events {
            w.event(e).unwrap();
        }
        let bytes = w.finish(&[("ring_buffer", 3), ("map_full", 0)]).unwrap();
        let t = DriverTrace::parse(bytes.as_slice(), "t").unwrap();
        assert!(t.diagnostics.is_empty(), "{:?}", t.diagnostics);
        assert_eq!(t.events, events);
        assert_eq!(t.attached, ["nvidia", "xid"]);
        assert_eq!(
            t.absent,
            ["drm_sched: no DRM scheduler (gpu-sched) is loaded"]
        );
        assert_eq!(t.simulated, ["nvidia_sim"]);
        assert_eq!(
            t.dropped,
            [("ring_buffer".to_owned(), 3), ("map_full".to_owned(), 0)]
        );
    }

    #[test]
    fn tabs_and_newlines_in_names_do_not_split_an_event() {
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
        let mut w = Writer::new(Vec::new(), &[], &[], &[]).unwrap();
        w.event(&e).unwrap();
        let text = String::from_utf8(w.finish(&[]).unwrap()).unwrap();
        assert_eq!(
            text,
            format!("{HEADER}\n5\txid\t1\t2\ta b\t\t0x4f\t7\t-22\t0x10\tbad thing\n")
        );
    }

    #[test]
    fn reads_events_sources_and_drops_and_counts_bad_lines() {
        let text = format!(
            "{HEADER}\n# attached nvidia\n# absent drm_sched: no DRM scheduler (gpu-sched) is loaded\n\
             # dropped ring_buffer 3\n\
             2000\tirq\t0\t0\tirq/5\t\t0x0\t0\t0\t0x0\t\n\
             1000\tioctl\t7\t8\tapp\t\t0xc0104601\t2500\t-22\t0x0\t\n\
             1\tbogus\t0\t0\t\t\t0x0\t0\t0\t0x0\t\n\
             1\tioctl\t0\n"
        );
        let t = DriverTrace::parse(text.as_bytes(), "d.tsv").unwrap();
        assert_eq!(t.events.len(), 2);
        let e = &t.events[0];
        assert_eq!(
            (e.kind, e.ts_ns, e.arg, e.dur_ns, e.ret),
            (DriverKind::Ioctl, 1000, 0xc010_4601, 2500, -22)
        );
        assert_eq!(t.attached, ["nvidia"]);
        assert_eq!(t.absent.len(), 1);
        assert_eq!(t.total_dropped(), 3);
        assert_eq!(t.diagnostics.count, 2);
        assert_eq!(
            t.diagnostics.first[0].to_string(),
            "d.tsv:7: unknown kind `bogus`"
        );
        assert_eq!(
            t.diagnostics.first[1].to_string(),
            "d.tsv:8: 3 columns, expected 11"
        );
    }
}
