//! `gpuperf monitor` on Debian's 6.1 and 6.12 kernels in the kernel VM of
//! `sim/kernel/`, with the simulated GPU driver modules (no GPU): the counts
//! it reports equal what a driving program did and what the modules counted.
//! On 6.1 also vblanks and vblank events of `vkms`, the kernel's virtual
//! display, and the fences of `sw_sync`, a software fence timeline (both
//! built from 6.1's sources, which do not build against 6.12).
//!
//! The `on_linux_*` tests boot a guest that runs this same binary's
//! `in_guest_*` tests; those do nothing outside a guest.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead as _, BufReader, Read as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;

use common::Record;
use gpuperf_merge::model::DriverKind;
use gpuperf_merge::read::driver::DriverTrace;
use gpuperf_test_support::cc::Gcc;
use gpuperf_test_support::process::{show, text};
use gpuperf_test_support::{repo, vm};

/// The driving program, built on the host where the guest can see it (what
/// the guest writes, in `/tmp` too, vanishes at its power-off).
fn drive() -> &'static Path {
    static DRIVE: OnceLock<PathBuf> = OnceLock::new();
    DRIVE.get_or_init(|| {
        let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("kernel-vm/drive");
        Gcc::new(out)
            .args(["-O2", "-Wall", "-pthread"])
            .arg(repo().join("sim/kernel/drive.c"))
            .build_once()
    })
}

/// Runs this binary's tests matching any of `filters` in a guest; `passed`
/// of them must pass.
fn on_guest(series: &str, filters: &[&str], passed: usize) {
    if vm::inside().is_some() {
        return;
    }
    let Some(guest) = vm::kernel(series) else {
        return;
    };
    let drive = drive().to_str().expect("a UTF-8 path").to_owned();
    let exe = std::env::current_exe().unwrap();
    let mut argv: Vec<&std::ffi::OsStr> = vec![exe.as_os_str()];
    argv.extend(filters.iter().map(std::ffi::OsStr::new));
    argv.extend(
        [
            "--test-threads=1",
            "--nocapture",
            // The guest's output is a serial port, a terminal: no colour codes.
            "--color=never",
        ]
        .map(std::ffi::OsStr::new),
    );
    let out = guest.run(&argv, &[("GPUPERF_DRIVE", &drive)]);
    let log = show(&out);
    assert!(
        out.status.success(),
        "in the {} guest:\n{log}",
        guest.release
    );
    // The guest's tests ran, and none of them skipped.
    assert!(
        log.contains(&format!("test result: ok. {passed} passed")),
        "{log}"
    );
    assert!(!log.contains("skipped:"), "{log}");
}

#[test]
fn on_linux_6_1_monitor_counts_equal_the_simulated_drivers() {
    on_guest("6.1", &["in_guest_", "in_61_guest_"], 11);
}

#[test]
fn on_linux_6_12_monitor_counts_equal_the_simulated_drivers() {
    on_guest("6.12", &["in_guest_"], 8);
}

/// Loads the simulated modules; `false` outside a guest.
fn guest_setup() -> bool {
    if vm::inside().is_none() {
        return false;
    }
    for m in ["nvidia_sim", "drm_sched_sim"] {
        let o = Command::new("modprobe").arg(m).output().unwrap();
        assert!(o.status.success(), "modprobe {m}: {}", show(&o));
    }
    true
}

/// A running `gpuperf monitor`, once it said it attached; its statistics
/// (stdout) read as they come.
struct Monitor {
    child: Child,
    early: String,
    stdout: std::thread::JoinHandle<String>,
}

fn monitor(args: &[&str]) -> Monitor {
    let mut child = common::gpuperf_cmd()
        .arg("monitor")
        .args(args)
        .stderr(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = child.stdout.take().unwrap();
    let stdout = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut early = String::new();
    loop {
        let mut line = String::new();
        assert!(
            err.read_line(&mut line).unwrap() > 0,
            "gpuperf monitor ended before attaching:\n{early}"
        );
        early.push_str(&line);
        if line.contains("attached; Ctrl-C stops") {
            break;
        }
    }
    child.stderr = Some(err.into_inner());
    Monitor {
        child,
        early,
        stdout,
    }
}

/// The monitor's final report, after Ctrl-C.
struct Report {
    text: String,
    totals: BTreeMap<String, u64>,
    kept: u64,
    sampled_out: u64,
    over_rate: u64,
}

impl Monitor {
    fn stop(mut self) -> Report {
        // SAFETY: kill has no memory-safety preconditions; the pid is our child's.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        let mut rest = String::new();
        self.child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut rest)
            .unwrap();
        let status = self.child.wait().unwrap();
        let text = self.early + &rest + &self.stdout.join().unwrap();
        assert!(status.success(), "gpuperf monitor failed:\n{text}");
        let line = |prefix: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(prefix))
                .unwrap_or_else(|| panic!("no `{prefix}` line in:\n{text}"))
                .to_owned()
        };
        let totals = line("totals: ")
            .split(", ")
            .filter_map(|kv| {
                let (k, v) = kv.rsplit_once(' ')?;
                Some((k.to_owned(), v.parse().ok()?))
            })
            .collect();
        let counts = text
            .lines()
            .find(|l| l.contains(" events kept, "))
            .unwrap_or_else(|| panic!("no ` events kept, ` line in:\n{text}"))
            .trim_start_matches("gpuperf monitor: ")
            .to_owned();
        let number_before = |what: &str| -> u64 {
            let head = counts
                .split(what)
                .next()
                .unwrap_or_else(|| panic!("no `{what}` in {counts}"));
            head.rsplit(' ')
                .find(|w| !w.is_empty())
                .and_then(|w| w.parse().ok())
                .unwrap_or_else(|| panic!("no count before `{what}` in {counts}"))
        };
        Report {
            kept: number_before(" events kept"),
            sampled_out: number_before(" sampled out"),
            over_rate: number_before(" over --max-rate"),
            totals,
            text,
        }
    }
}

fn run_drive(args: &[&str]) -> BTreeMap<String, u64> {
    let drive = std::env::var("GPUPERF_DRIVE").expect("the host passes GPUPERF_DRIVE");
    let o = Command::new(drive).args(args).output().unwrap();
    assert!(o.status.success(), "drive: {}", show(&o));
    text(&o.stdout)
        .lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(' ')?;
            Some((k.to_owned(), v.parse().ok()?))
        })
        .collect()
}

/// What a simulated module counted, from debugfs.
fn counter(module: &str, name: &str) -> u64 {
    let p = format!("/sys/kernel/debug/{module}/{name}");
    std::fs::read_to_string(&p)
        .unwrap_or_else(|e| panic!("{p}: {e}"))
        .trim()
        .parse()
        .unwrap()
}

/// The total of `kind` (as the event file names it), printed in words.
fn total(r: &Report, kind: &str) -> u64 {
    let label = DriverKind::from_name(kind).expect("a kind").label();
    r.totals.get(label).copied().unwrap_or(0)
}

#[test]
fn in_guest_every_event_of_the_driving_program_is_counted_once() {
    if !guard() {
        return;
    }
    let before = |n: &str| counter("nvidia_sim", n);
    let (opens0, ioctls0, isrs0, xids0) = (
        before("opens"),
        before("ioctls"),
        before("isrs"),
        before("xids"),
    );
    let jobs0 = counter("drm_sched_sim", "done");
    let events = "/tmp/driver-events.tsv";
    let m = monitor(&[
        "-v",
        "--comm",
        "drive",
        "--interval",
        "0.5",
        "--output",
        events,
    ]);
    let did = run_drive(&[
        "--threads",
        "2",
        "--ioctls",
        "50",
        "--ioctl-us",
        "20",
        "--mmaps",
        "3",
        "--irqs",
        "5",
        "--xids",
        "2",
        "--jobs",
        "20",
        "--run-us",
        "50",
        "--deps",
        "4",
        "--dep-us",
        "50000",
    ]);
    let r = m.stop();
    let t = &r.text;
    // The driving program's own account, the modules' and the monitor's agree.
    assert_eq!(
        did["ioctls"],
        counter("nvidia_sim", "ioctls") - ioctls0,
        "{t}"
    );
    assert_eq!(did["irqs"], counter("nvidia_sim", "isrs") - isrs0, "{t}");
    assert_eq!(did["jobs"], counter("drm_sched_sim", "done") - jobs0, "{t}");
    assert_eq!(total(&r, "open"), did["opens"], "{t}");
    assert_eq!(
        total(&r, "open"),
        counter("nvidia_sim", "opens") - opens0,
        "{t}"
    );
    assert_eq!(total(&r, "ioctl"), did["ioctls"], "{t}");
    assert_eq!(total(&r, "mmap"), did["mmaps"], "{t}");
    assert_eq!(total(&r, "irq"), did["irqs"], "{t}");
    assert_eq!(total(&r, "irq_bh"), did["irqs"], "{t}");
    assert_eq!(total(&r, "xid"), did["xids"], "{t}");
    assert_eq!(
        total(&r, "xid"),
        counter("nvidia_sim", "xids") - xids0,
        "{t}"
    );
    for kind in ["job_queue", "job_run", "job_done"] {
        assert_eq!(total(&r, kind), did["jobs"], "{kind}: {t}");
    }
    assert_eq!(total(&r, "job_wait_dep"), did["deps"], "{t}");
    // Each job's two scheduler fences and each dependency's fence start in the
    // submitting thread; each is signalled elsewhere (the scheduler's thread,
    // a timer) and kept as the submitter's.
    assert_eq!(
        total(&r, "fence_init"),
        2 * did["jobs"] + did["deps"],
        "{t}"
    );
    // None of its fences' signals is missing. A signal in the program's own
    // thread is kept by the pid filter whoever made that fence, so there can
    // be more (seen once in a CI run: 89 signals for 88 fences).
    assert!(
        total(&r, "fence_signaled") >= total(&r, "fence_init"),
        "{t}"
    );
    // Named as NVIDIA's tracepoint names the device: pci_name() of its pci_dev.
    assert!(
        t.contains("Xid 79 on 0000:00:00.0, drive (pid "),
        "Xids are printed as they happen, with their device and process: {t}"
    );
    assert!(t.contains("ring sim-ring0: "), "{t}");
    // The submitter's own job statistics, and the whole run's at the end.
    let run = t
        .split("=== whole run, ")
        .nth(1)
        .unwrap_or_else(|| panic!("no whole-run summary: {t}"));
    let own = run
        .lines()
        .find(|l| l.starts_with("drive (pid "))
        .unwrap_or_else(|| panic!("no line of drive's own: {run}"));
    assert!(
        own.contains(&format!("jobs {} queued (", did["jobs"])),
        "{run}"
    );
    assert!(run.contains("  run time:\n    ["), "{run}");
    // How long jobs waited on their dependencies, and each fence context's
    // made-to-signalled latency, the scheduler's named by their ring.
    assert!(
        own.contains(&format!("{} dependency waits, waited p50 ", did["deps"])),
        "{run}"
    );
    assert!(run.contains("  dependency wait:\n    ["), "{run}");
    assert!(
        run.lines().any(|l| l.starts_with("fence context ")
            && l.contains(" (drm_sched sim-ring")
            && l.contains(" finished): ")
            && l.contains("; made to signalled p50 ")),
        "{run}"
    );
    assert!(run.contains("  made to signalled:\n    ["), "{run}");
    // The queue depth the tracepoints give: a job runs with itself at least
    // on the hardware.
    let hw: u64 = run
        .lines()
        .find(|l| l.starts_with("ring sim-ring0: "))
        .and_then(|l| l.split("queued (job_count), ").nth(1))
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no queue depth: {run}"));
    assert!(hw >= 1, "{run}");
    assert_eq!(r.sampled_out + r.over_rate, 0, "{t}");
    assert!(t.contains("BPF cost: nv_ioctl ran "), "{t}");
    // The event file has a header (columns, sources, simulated modules), every
    // kept event, one line each, and what was lost.
    let file = std::fs::read_to_string(events).unwrap();
    assert!(file.starts_with("# ts_ns\t"), "{file}");
    assert!(file.contains("\n# attached nvidia\n"), "{file}");
    assert!(file.contains("\n# simulated nvidia_sim\n"), "{file}");
    assert!(file.ends_with("# dropped malformed 0\n"), "{file}");
    let lines = file.lines().filter(|l| !l.starts_with('#')).count();
    assert_eq!(lines as u64, r.kept, "{t}");
    let ioctl_lines = file
        .lines()
        .filter(|l| l.split('\t').nth(1) == Some("ioctl"));
    assert_eq!(ioctl_lines.count() as u64, did["ioctls"], "{t}");
    let xid_devices: Vec<&str> = file
        .lines()
        .filter(|l| l.split('\t').nth(1) == Some("xid"))
        .filter_map(|l| l.split('\t').nth(5))
        .collect();
    assert_eq!(xid_devices.len() as u64, did["xids"], "{file}");
    assert!(xid_devices.iter().all(|d| *d == "0000:00:00.0"), "{file}");
}

/// `--output FILE.gz` writes the kept events gzip-compressed, every one of
/// them; `--timeline` draws them at the end: each of drive's jobs queued and
/// run on its ring, each ioctl, in the driver's (simulated) tracks.
#[test]
fn in_guest_monitor_writes_a_compressed_event_file_and_a_timeline() {
    if !guard() {
        return;
    }
    let (events, timeline) = ("/tmp/driver-events.tsv.gz", "/tmp/driver-timeline.json");
    let m = monitor(&[
        "--comm",
        "drive",
        "--output",
        events,
        "--timeline",
        timeline,
    ]);
    let did = run_drive(&["--ioctls", "12", "--jobs", "7", "--run-us", "50"]);
    let r = m.stop();
    let t = &r.text;
    assert!(t.contains(&format!("wrote `{timeline}`")), "{t}");
    let raw = std::fs::read(events).unwrap();
    assert_eq!(raw[..2], [0x1f, 0x8b], "not gzip: {t}");
    let trace = DriverTrace::open(Path::new(events)).unwrap();
    assert_eq!(trace.events.len() as u64, r.kept, "{t}");
    assert!(
        trace.simulated.iter().any(|m| m == "nvidia_sim"),
        "{trace:?}"
    );
    assert!(trace.dropped.iter().all(|(_, n)| *n == 0), "{trace:?}");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(timeline).unwrap()).unwrap();
    let evs = json["traceEvents"].as_array().unwrap();
    // A slice on a thread's track (`X`), or on an async track (`b`, its own
    // name in `args.event`).
    let slices = |name: &str| {
        evs.iter()
            .filter(|e| {
                let own = if e["ph"] == "b" {
                    &e["args"]["event"]
                } else {
                    &e["name"]
                };
                e["cat"] == "driver"
                    && (e["ph"] == "X" || e["ph"] == "b")
                    && own.as_str().is_some_and(|n| n.starts_with(name))
            })
            .count() as u64
    };
    assert!(
        evs.iter().any(|e| e["name"] == "process_name"
            && e["args"]["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("GPU driver (simulated"))),
        "{json}"
    );
    assert_eq!(slices("ioctl"), did["ioctls"], "{json}");
    assert!(did["jobs"] == 7 && slices("job") >= did["jobs"], "{json}");
}

#[test]
fn in_guest_sampling_keeps_one_in_n_and_counts_the_rest() {
    if !guard() {
        return;
    }
    let m = monitor(&["--comm", "drive", "--event", "nvidia", "--sample", "7"]);
    let did = run_drive(&["--threads", "2", "--ioctls", "100", "--mmaps", "5"]);
    let r = m.stop();
    let matched = did["opens"] + did["ioctls"] + did["mmaps"];
    // One in 7 of each kind, the first of each kept.
    let kept = did["opens"].div_ceil(7) + did["ioctls"].div_ceil(7) + did["mmaps"].div_ceil(7);
    assert_eq!(r.kept, kept, "{}", r.text);
    assert_eq!(r.kept + r.sampled_out, matched, "{}", r.text);
    // --event nvidia attaches nothing else.
    assert_eq!(total(&r, "irq") + total(&r, "job_queue"), 0, "{}", r.text);
}

/// `--sample 3` with jobs and their fences: one in three jobs, each whole
/// (a sequence shared by every kind kept 59 of 60 jobs, or 11), a third of
/// the fences, and every Xid.
#[test]
fn in_guest_sampling_keeps_whole_jobs_per_kind_and_every_xid() {
    if !guard() {
        return;
    }
    let m = monitor(&[
        "--comm",
        "drive",
        "--event",
        "drm_sched",
        "--event",
        "dma_fence",
        "--event",
        "xid",
        "--sample",
        "3",
    ]);
    let did = run_drive(&["--xids", "2", "--jobs", "60", "--run-us", "100"]);
    let r = m.stop();
    assert_eq!(did["jobs"], 60, "{}", r.text);
    let jobs = [
        total(&r, "job_queue"),
        total(&r, "job_run"),
        total(&r, "job_done"),
    ];
    assert_eq!(jobs, [20, 20, 20], "{}", r.text);
    assert_eq!(total(&r, "xid"), 2, "{}", r.text);
    assert!(
        r.text.contains("(sampled: 1 in 3 of each kind"),
        "{}",
        r.text
    );
}

/// `--max-rate` keeps whole jobs and every Xid.
#[test]
fn in_guest_the_rate_limit_keeps_whole_jobs_and_every_xid() {
    if !guard() {
        return;
    }
    let m = monitor(&[
        "--comm",
        "drive",
        "--event",
        "drm_sched",
        "--event",
        "xid",
        "--max-rate",
        "10",
    ]);
    let did = run_drive(&["--xids", "3", "--jobs", "60", "--run-us", "100"]);
    let r = m.stop();
    assert_eq!(did["jobs"], 60, "{}", r.text);
    let queued = total(&r, "job_queue");
    assert!(queued > 0 && queued < 60, "{}", r.text);
    assert_eq!(total(&r, "job_done"), queued, "{}", r.text);
    assert_eq!(total(&r, "job_run"), queued, "{}", r.text);
    assert_eq!(total(&r, "xid"), 3, "{}", r.text);
}

#[test]
fn in_guest_the_rate_limit_counts_what_it_drops() {
    if !guard() {
        return;
    }
    let m = monitor(&["--comm", "drive", "--event", "nvidia", "--max-rate", "40"]);
    let did = run_drive(&["--ioctls", "300"]);
    let r = m.stop();
    let matched = did["opens"] + did["ioctls"];
    assert_eq!(r.kept + r.over_rate, matched, "{}", r.text);
    assert!(r.over_rate > 0, "300 ioctls exceed 40/s: {}", r.text);
}

#[test]
fn in_guest_record_keeps_the_fences_it_made_signalled_in_a_timer() {
    if !guard() {
        return;
    }
    let o = Command::new("modprobe").arg("vgem").output().unwrap();
    assert!(o.status.success(), "modprobe vgem: {}", show(&o));
    let dir = Path::new("/tmp/record-vgem");
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    let drive = std::env::var("GPUPERF_DRIVE").expect("the host passes GPUPERF_DRIVE");
    // Three fences signalled by the program's ioctls, one by vgem's timer
    // (10 s later, in a timer interrupt, while the program sleeps in poll).
    let o = Record::new(dir)
        .flags(["--driver", "--raw-dir", "raw"])
        .program(&drive, ["--vgem-fences", "3", "--vgem-timeouts", "1"])
        .output()
        .unwrap();
    let all = show(&o);
    assert!(o.status.success(), "{all}");
    let pid: u32 = text(&o.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("pid "))
        .unwrap_or_else(|| panic!("no pid in {all}"))
        .parse()
        .unwrap();
    let t = DriverTrace::open(&dir.join("raw/driver.tsv")).unwrap();
    assert!(t.diagnostics.is_empty(), "{:?}", t.diagnostics);
    assert_eq!(t.total_dropped(), 0, "{all}");
    let fences = |k: DriverKind| {
        let ids: Vec<u64> = t
            .events
            .iter()
            .filter(|e| e.kind == k)
            .inspect(|e| assert_eq!(e.pid, pid, "{e:?} not in the program's name"))
            .map(|e| e.id)
            .collect();
        ids
    };
    let made = fences(DriverKind::FenceInit);
    let mut signalled = fences(DriverKind::FenceSignaled);
    assert_eq!(made.len(), 4, "{all}\n{:?}", t.events);
    signalled.sort_unstable();
    let mut want = made.clone();
    want.sort_unstable();
    assert_eq!(signalled, want, "each fence signalled once: {:?}", t.events);
    // The timer's signal is marked as made in interrupt context (its task
    // was merely the one interrupted); the ioctls' are not.
    let in_irq = t
        .events
        .iter()
        .filter(|e| e.kind == DriverKind::FenceSignaled)
        .filter(|e| gpuperf_merge::write::driver::in_irq(e))
        .count();
    assert_eq!(in_irq, 1, "{:?}", t.events);
}

/// A recording of driver events alone (`drive` never loads CUDA) past a
/// handful of jobs: `gpuperf merge` writes its timeline, where the ring's run
/// track holds every job (not scattered over other tracks' names), and
/// `gpuperf report` reports its jobs, ioctls and Xids.
#[test]
fn in_guest_a_driver_only_recording_is_merged_and_reported() {
    if !guard() {
        return;
    }
    let dir = Path::new("/tmp/record-driver-only");
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    let drive = std::env::var("GPUPERF_DRIVE").expect("the host passes GPUPERF_DRIVE");
    let o = Record::new(dir)
        .flags(["--driver", "--raw-dir", "raw"])
        .program(
            &drive,
            [
                "--ioctls", "7", "--xids", "1", "--jobs", "120", "--run-us", "300",
            ],
        )
        .output()
        .unwrap();
    let all = show(&o);
    assert!(o.status.success(), "{all}");
    let o = common::gpuperf(dir)
        .args(["merge", "raw", "-c", "t.json"])
        .output()
        .unwrap();
    assert!(o.status.success(), "merge: {}", show(&o));
    let doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("t.json")).unwrap()).unwrap();
    let on = |track: &str| {
        doc["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["ph"] == "b" && e["name"] == track)
            .count()
    };
    assert_eq!(
        (on("sim-ring0 queue"), on("sim-ring0 run")),
        (120, 120),
        "{all}"
    );
    // drive made no CUDA call: it is named by its command; its jobs are
    // known by their finished fence (context:seqno), whose context's track
    // the scheduler's names name; no kernel address is written.
    let events = doc["traceEvents"].as_array().unwrap();
    assert!(
        events.iter().any(|e| e["name"] == "process_name"
            && e["args"]["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("drive (pid "))),
        "{all}"
    );
    let job_ids: Vec<&str> = events
        .iter()
        .filter(|e| e["name"] == "sim-ring0 run" && e["ph"] == "b")
        .filter_map(|e| e["args"]["job"].as_str())
        .collect();
    assert_eq!(job_ids.len(), 120, "{all}");
    assert!(
        job_ids.iter().all(|j| j
            .split_once(':')
            .is_some_and(|(c, s)| { c.parse::<u64>().is_ok() && s.parse::<u64>().is_ok() })),
        "{job_ids:?}"
    );
    let finished = events.iter().any(|e| {
        e["ph"] == "b"
            && e["name"].as_str().is_some_and(|n| {
                n.starts_with("fence context ") && n.ends_with(": drm_sched sim-ring0 finished")
            })
    });
    assert!(finished, "{all}");
    let json = std::fs::read_to_string(dir.join("t.json")).unwrap();
    assert!(!json.contains("0xffff"), "a kernel address in the timeline");
    let o = common::gpuperf(dir)
        .args(["report", "raw"])
        .output()
        .unwrap();
    let report = show(&o);
    assert!(o.status.success(), "report: {report}");
    let jobs = text(&o.stdout)
        .lines()
        .find(|l| l.trim_end().ends_with("sim-ring0"))
        .unwrap_or_else(|| panic!("no ring in {report}"))
        .split_whitespace()
        .next()
        .unwrap()
        .parse::<u64>()
        .unwrap();
    assert_eq!(jobs, 120, "{report}");
    assert!(text(&o.stdout).contains("Xid errors: 1"), "{report}");
    assert!(
        text(&o.stdout).contains(", process drive (pid "),
        "{report}"
    );
    assert!(
        text(&o.stdout)
            .lines()
            .any(|l| l.trim_start().starts_with("120 ") && l.contains("drive (pid ")),
        "jobs by submitting process: {report}"
    );
    // The 7 ioctls of `drive`'s first phase, and one per job and per Xid.
    assert!(text(&o.stdout).contains(" ioctls, "), "{report}");
}

fn guard() -> bool {
    static SETUP: OnceLock<bool> = OnceLock::new();
    *SETUP.get_or_init(guest_setup)
}

/// Loads `module` (built by `sim/kernel/ci.sh` for 6.1 only).
fn modprobe(module: &str) {
    let o = Command::new("modprobe").arg(module).output().unwrap();
    assert!(o.status.success(), "modprobe {module}: {}", show(&o));
}

fn vkms() {
    static VKMS: OnceLock<()> = OnceLock::new();
    VKMS.get_or_init(|| modprobe("vkms"));
}

/// An event file's lines of `kind`, split into their columns.
fn lines_of<'a>(file: &'a str, kind: &str) -> Vec<Vec<&'a str>> {
    file.lines()
        .map(|l| l.split('\t').collect::<Vec<_>>())
        .filter(|c| c.get(1) == Some(&kind))
        .collect()
}

/// Every vblank event `drive` asked for is counted once, queued and
/// delivered, in its name though delivered in the vblank's timer interrupt,
/// inside `drive`'s run on its own clock; each was delivered at a vblank
/// that the monitor saw.
#[test]
fn in_61_guest_monitor_counts_each_vblank_event_of_the_driving_program() {
    if !guard() {
        return;
    }
    vkms();
    let events = "/tmp/vblank-events.tsv";
    let m = monitor(&["--comm", "drive", "--interval", "0.5", "--output", events]);
    let did = run_drive(&["--vblank-events", "30"]);
    let r = m.stop();
    let t = &r.text;
    assert_eq!(did["vblank_delivered"], 30, "{t}");
    assert_eq!(total(&r, "vblank_queued"), 30, "{t}");
    assert_eq!(total(&r, "vblank_delivered"), 30, "{t}");
    assert!(total(&r, "vblank") >= 30, "{t}");
    assert!(t.contains("vblank crtc 0: "), "{t}");
    assert!(t.contains("vblank event latency p50 "), "{t}");
    let file = std::fs::read_to_string(events).unwrap();
    let (start, end) = (did["vblank_start_ns"], did["vblank_end_ns"]);
    let ts = |c: &[&str]| c[0].parse::<u64>().unwrap();
    let seq = |c: &[&str]| u64::from_str_radix(c[6].trim_start_matches("0x"), 16).unwrap();
    let mut delivered = Vec::new();
    for kind in ["vblank_queued", "vblank_delivered"] {
        let lines = lines_of(&file, kind);
        assert_eq!(lines.len(), 30, "{kind}: {file}");
        for c in &lines {
            assert_eq!(c[2], did["pid"].to_string(), "{kind} not drive's: {c:?}");
            assert_eq!((c[4], c[5]), ("drive", "crtc 0"), "{c:?}");
            assert!(
                (start..=end).contains(&ts(c)),
                "{kind} outside drive's run: {c:?}"
            );
        }
        if kind == "vblank_delivered" {
            delivered = lines.iter().map(|c| seq(c)).collect();
        }
    }
    assert_eq!(
        (delivered[0], delivered[29]),
        (did["vblank_first_seq"], did["vblank_last_seq"]),
        "{file}"
    );
    // The vblank each event was delivered at, with its own timestamp inside
    // the run too (the DRM core's clock is CLOCK_MONOTONIC).
    let vblanks: BTreeMap<u64, Vec<&str>> = lines_of(&file, "vblank")
        .into_iter()
        .filter(|c| c[5] == "crtc 0")
        .map(|c| (seq(&c), c))
        .collect();
    for s in &delivered {
        let v = vblanks
            .get(s)
            .unwrap_or_else(|| panic!("no vblank {s}: {file}"));
        let own: u64 = v[8].parse().unwrap();
        assert!((start..=end).contains(&own), "{v:?}");
        assert!((start..=end).contains(&ts(v)), "{v:?}");
    }
}

/// `record --driver` of `drive`: its vblank events in its name, exactly as
/// many as it asked for, vblanks present, the recording labelled simulated.
#[test]
fn in_61_guest_record_driver_keeps_the_vblank_events_it_asked_for() {
    if !guard() {
        return;
    }
    vkms();
    let dir = Path::new("/tmp/record-vkms");
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    let drive = std::env::var("GPUPERF_DRIVE").expect("the host passes GPUPERF_DRIVE");
    let o = Record::new(dir)
        .flags(["--driver", "--raw-dir", "raw", "-c", "t.json"])
        .program(&drive, ["--vblank-events", "12"])
        .output()
        .unwrap();
    let all = show(&o);
    assert!(o.status.success(), "{all}");
    let did: BTreeMap<String, u64> = text(&o.stdout)
        .lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(' ')?;
            Some((k.to_owned(), v.parse().ok()?))
        })
        .collect();
    let t = DriverTrace::open(&dir.join("raw/driver.tsv")).unwrap();
    assert!(t.diagnostics.is_empty(), "{:?}", t.diagnostics);
    assert_eq!(t.total_dropped(), 0, "{all}");
    assert!(t.attached.iter().any(|a| a == "vblank"), "{:?}", t.attached);
    assert!(t.simulated.iter().any(|a| a == "vkms"), "{:?}", t.simulated);
    let (start, end) = (did["vblank_start_ns"], did["vblank_end_ns"]);
    for k in [DriverKind::VblankQueued, DriverKind::VblankDelivered] {
        let es: Vec<_> = t.events.iter().filter(|e| e.kind == k).collect();
        assert_eq!(es.len(), 12, "{k:?}: {all}\n{:?}", t.events);
        for e in es {
            assert_eq!(e.pid as u64, did["pid"], "{e:?}");
            assert!((start..=end).contains(&e.ts_ns), "{e:?}");
        }
    }
    let vblanks = t.events.iter().filter(|e| e.kind == DriverKind::Vblank);
    assert!(vblanks.count() >= 12, "{:?}", t.events);
    // Each event delivered after it was queued, at or after the vblank asked for.
    let pairs = gpuperf_merge::write::driver::vblank_events(&t.events);
    assert_eq!(pairs.len(), 12, "{pairs:?}");
    // No CUDA call, so no GPU trace: the timeline is the driver events' alone,
    // each event a slice from queued to delivered under drive's process.
    assert!(text(&o.stderr).contains("wrote `t.json`"), "{all}");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("t.json")).unwrap()).unwrap();
    let slices: Vec<&serde_json::Value> = json["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        // Each an async slice (`b`) on its process's vblank-events track, its own
        // name in `args.event`.
        .filter(|e| e["args"]["event"] == "vblank event" && e["ph"] == "b")
        .collect();
    assert_eq!(slices.len(), 12, "{json}");
    assert!(slices.iter().all(|e| e["pid"] == did["pid"]), "{json}");
    for v in &pairs {
        let (q, d) = (v.queued_ns.unwrap(), v.delivered_ns.unwrap());
        assert!(q <= d && v.asked_seq <= v.seq, "{v:?}");
    }
}

/// sw_sync: each of the fences `drive` made on a software timeline is made
/// and signalled once, by `drive`'s own ioctls, all on one fence context with
/// sequence numbers 1..N, inside its run.
#[test]
fn in_61_guest_sw_sync_fences_are_made_and_signalled_once_each() {
    if !guard() {
        return;
    }
    modprobe("sw_sync");
    let events = "/tmp/sw-sync-events.tsv";
    let m = monitor(&[
        "--comm",
        "drive",
        "--event",
        "dma_fence",
        "--output",
        events,
    ]);
    let did = run_drive(&["--sw-sync-fences", "25"]);
    let r = m.stop();
    let t = &r.text;
    assert_eq!(did["sw_sync_signalled"], 25, "{t}");
    assert_eq!(total(&r, "fence_init"), 25, "{t}");
    assert_eq!(total(&r, "fence_signaled"), 25, "{t}");
    // One software timeline: its 25 fences, each made to signalled.
    let run = t.split("=== whole run, ").nth(1).unwrap_or_default();
    let fences: Vec<&str> = run
        .lines()
        .filter(|l| l.starts_with("fence context "))
        .collect();
    assert_eq!(fences.len(), 1, "{t}");
    assert!(
        fences[0].contains(": 25 made, 25 signalled; made to signalled p50 "),
        "{t}"
    );
    let file = std::fs::read_to_string(events).unwrap();
    let (start, end) = (did["sw_sync_start_ns"], did["sw_sync_end_ns"]);
    for kind in ["fence_init", "fence_signaled"] {
        let lines = lines_of(&file, kind);
        let ids: Vec<u64> = lines
            .iter()
            .map(|c| {
                assert_eq!(c[2], did["pid"].to_string(), "{c:?}");
                let ts: u64 = c[0].parse().unwrap();
                assert!(
                    (start..=end).contains(&ts),
                    "{kind} outside drive's run: {c:?}"
                );
                u64::from_str_radix(c[9].trim_start_matches("0x"), 16).unwrap()
            })
            .collect();
        let context = ids[0] >> 32;
        let seqnos: Vec<u64> = ids
            .iter()
            .inspect(|id| assert_eq!(*id >> 32, context, "{kind}: {file}"))
            .map(|id| id & 0xffff_ffff)
            .collect();
        assert_eq!(seqnos, (1..=25).collect::<Vec<u64>>(), "{kind}: {file}");
    }
}
