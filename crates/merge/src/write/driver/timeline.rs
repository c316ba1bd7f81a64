//! The driver's timeline items: ioctls on their threads, jobs on their
//! rings' queue and run tracks, interrupts, Xid errors, fences and vblanks.

use std::collections::BTreeMap;

use rustc_hash::FxHashMap;

use crate::ioctl::Ioctl;
use crate::model::{DriverEvent, DriverKind};
use crate::read::driver::DriverTrace;

use super::jobs::{Job, fence_timelines, in_irq, job_fence, jobs, vblank_events};
use super::{Call, nest, recorded_processes, thread_text, xid_process_text};

/// Where a timeline item goes.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Lane {
    /// A CPU thread's own track.
    Thread {
        /// Process.
        pid: u32,
        /// Thread.
        tid: u32,
        /// Its command name.
        comm: String,
    },
    /// An async track of the driver pseudo-process: one per name, whatever
    /// the number of slices open at once (the timeline writers stack them).
    Driver {
        /// Which kind of track, for the order of the tracks.
        group: Group,
        /// Track name, derived from the events (its identity).
        name: String,
    },
    /// An async track of a process that is none of its threads (its vblank
    /// events).
    Process {
        /// Process.
        pid: u32,
        /// Track name, derived from the events (its identity in the process).
        name: String,
    },
}

/// The kinds of the driver pseudo-process's tracks, in their order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Group {
    /// Interrupts and bottom halves.
    Interrupts,
    /// Xid errors, a track per device.
    Xid,
    /// DRM scheduler jobs, a queue and a run track per ring.
    Ring,
    /// `dma_fence`s, a track per fence context.
    Fence,
    /// Vblanks, a track per CRTC.
    Vblank,
}

/// A flow between two items of the driver's timeline, by a key of its own.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Link {
    /// No flow.
    #[default]
    None,
    /// The flow of this key starts here.
    From(u64),
    /// The flow of this key ends here.
    To(u64),
}

/// One slice or instant of the driver's timeline.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Item {
    /// A flow it starts or ends: from a job's `submit` on its submitting
    /// thread to the job's queue slice.
    pub link: Link,
    /// Its track.
    pub lane: Lane,
    /// Its name.
    pub name: String,
    /// Start.
    pub start_ns: u64,
    /// Duration; `None` for an instant.
    pub dur_ns: Option<u64>,
    /// Arguments, in order.
    pub args: Vec<(&'static str, String)>,
}

/// The driver pseudo-process's name.
pub fn process_name(t: &DriverTrace) -> String {
    if t.simulated.is_empty() {
        "GPU driver".to_owned()
    } else {
        format!("GPU driver (simulated: {})", t.simulated.join(", "))
    }
}

/// Every timeline item of `t`, with ioctls nested under `calls`, sorted by
/// lane and time.
pub fn timeline(t: &DriverTrace, calls: &[Call]) -> Vec<Item> {
    let mut items = Vec::new();
    call_items(&t.events, calls, &mut items);
    job_items(&t.events, &mut items);
    fence_items(&t.events, &fence_timelines(&t.events), &mut items);
    vblank_items(&t.events, &mut items);
    items.sort_by(|a, b| {
        (&a.lane, a.start_ns, std::cmp::Reverse(a.dur_ns)).cmp(&(
            &b.lane,
            b.start_ns,
            std::cmp::Reverse(b.dur_ns),
        ))
    });
    items
}

/// Ioctls (nested under `calls`), opens and mmaps on their threads' tracks;
/// interrupts and Xid errors on the driver pseudo-process's.
fn call_items(events: &[DriverEvent], calls: &[Call], items: &mut Vec<Item>) {
    let nested = nest(events, calls);
    let ours = recorded_processes(events, calls);
    for (e, call) in events.iter().zip(&nested) {
        let thread = || Lane::Thread {
            pid: e.pid,
            tid: e.tid,
            comm: e.comm.clone(),
        };
        let api = || call.map_or_else(|| "none".to_owned(), |i| calls[i].name.clone());
        match e.kind {
            DriverKind::Ioctl => items.push(Item {
                link: Link::None,
                lane: thread(),
                name: format!("ioctl {}", Ioctl::from_cmd(e.arg).name()),
                start_ns: e.ts_ns,
                dur_ns: Some(e.dur_ns),
                args: vec![
                    ("api", api()),
                    ("cmd", format!("{:#x}", e.arg)),
                    ("ret", e.ret.to_string()),
                ],
            }),
            DriverKind::Open | DriverKind::Mmap => items.push(Item {
                link: Link::None,
                lane: thread(),
                name: format!("driver {}", e.kind.name()),
                start_ns: e.ts_ns,
                dur_ns: None,
                args: vec![("api", api())],
            }),
            DriverKind::Irq | DriverKind::IrqBottomHalf => items.push(Item {
                link: Link::None,
                lane: Lane::Driver {
                    group: Group::Interrupts,
                    name: "interrupts".to_owned(),
                },
                name: if e.kind == DriverKind::Irq {
                    "irq".to_owned()
                } else {
                    "irq bottom half".to_owned()
                },
                start_ns: e.ts_ns,
                dur_ns: None,
                args: vec![("thread", format!("{} ({})", e.comm, e.tid))],
            }),
            DriverKind::Xid => {
                let name = if e.ring.is_empty() {
                    "Xid errors".to_owned()
                } else {
                    format!("Xid errors {}", e.ring)
                };
                items.push(Item {
                    link: Link::None,
                    lane: Lane::Driver {
                        group: Group::Xid,
                        name,
                    },
                    name: format!("Xid {}", e.arg),
                    start_ns: e.ts_ns,
                    dur_ns: None,
                    args: vec![
                        ("xid", e.arg.to_string()),
                        ("message", e.msg.clone()),
                        ("process", xid_process_text(e, &ours)),
                    ],
                });
            }
            _ => {}
        }
    }
}

/// DRM scheduler jobs, a queue and a run track per ring, each job's queueing
/// linked by a flow from its `submit job` on the submitting thread.
fn job_items(events: &[DriverEvent], items: &mut Vec<Item>) {
    let mut rings: BTreeMap<String, Vec<Job>> = BTreeMap::new();
    for j in jobs(events) {
        rings.entry(j.ring.clone()).or_default().push(j);
    }
    for (ring, jobs) in &rings {
        let ring = if ring.is_empty() { "ring ?" } else { ring };
        let lane = |what: &str| Lane::Driver {
            group: Group::Ring,
            name: format!("{ring} {what}"),
        };
        for j in jobs {
            let mut args = vec![("submitter", thread_text(&j.comm, j.pid, j.tid))];
            if let Some(f) = job_fence(j.id) {
                args.insert(0, ("job", f));
            }
            // The submitting thread's moment of queueing, linked to the
            // job's queue slice by a flow (none to a job never seen run).
            let key = items.len() as u64;
            let queue_slice = j.queued_ns.is_some() && j.run_ns.is_some();
            if let (Some(q), true) = (j.queued_ns, j.pid != 0) {
                let mut submit = vec![("ring", ring.to_owned())];
                if let Some(f) = job_fence(j.id) {
                    submit.insert(0, ("job", f));
                }
                items.push(Item {
                    link: if queue_slice {
                        Link::From(key)
                    } else {
                        Link::None
                    },
                    lane: Lane::Thread {
                        pid: j.pid,
                        tid: j.tid,
                        comm: j.comm.clone(),
                    },
                    name: "submit job".to_owned(),
                    start_ns: q,
                    dur_ns: Some(0),
                    args: submit,
                });
            }
            if let (Some(q), Some(x)) = (j.queued_ns, j.run_ns) {
                items.push(Item {
                    link: if j.pid != 0 {
                        Link::To(key)
                    } else {
                        Link::None
                    },
                    lane: lane("queue"),
                    name: "queued".to_owned(),
                    start_ns: q,
                    dur_ns: Some(x.saturating_sub(q)),
                    args: args.clone(),
                });
                if let Some(d) = j.dep_wait_ns.filter(|&d| d >= q && d <= x) {
                    items.push(Item {
                        link: Link::None,
                        lane: lane("queue"),
                        name: "dependency wait".to_owned(),
                        start_ns: d,
                        dur_ns: Some(x - d),
                        args: args.clone(),
                    });
                }
            }
            if let (Some(x), Some(d)) = (j.run_ns, j.done_ns) {
                items.push(Item {
                    link: Link::None,
                    lane: lane("run"),
                    name: "job".to_owned(),
                    start_ns: x,
                    dur_ns: Some(d.saturating_sub(x)),
                    args,
                });
            }
        }
    }
}

/// `dma_fence`s, one async track per fence context: a slice from a fence's init to its signal, an instant for a fence
/// with only one of them in the recording.
pub(super) fn fence_items(
    events: &[DriverEvent],
    timelines: &FxHashMap<u64, String>,
    items: &mut Vec<Item>,
) {
    /// One fence's events.
    struct Fence {
        id: u64,
        init: Option<u64>,
        signal: Option<u64>,
        signal_irq: bool,
        maker: (u32, u32),
        comm: String,
    }
    let mut fences: BTreeMap<u64, Fence> = BTreeMap::new();
    let fence_events = events
        .iter()
        .filter(|e| matches!(e.kind, DriverKind::FenceInit | DriverKind::FenceSignaled));
    for e in fence_events {
        let f = fences.entry(e.id).or_insert(Fence {
            id: e.id,
            init: None,
            signal: None,
            signal_irq: false,
            maker: (e.pid, e.tid),
            comm: e.comm.clone(),
        });
        if e.kind == DriverKind::FenceInit {
            f.init.get_or_insert(e.ts_ns);
            f.maker = (e.pid, e.tid);
            f.comm.clone_from(&e.comm);
        } else if f.signal.is_none() {
            f.signal = Some(e.ts_ns);
            f.signal_irq = in_irq(e);
        }
    }
    let start = |f: &Fence| f.init.or(f.signal).unwrap_or(0);
    let mut by_start: Vec<Fence> = fences.into_values().collect();
    by_start.sort_unstable_by_key(|f| (start(f), f.id));
    for f in by_start {
        let context = (f.id >> 32) as u32;
        let seqno = f.id & 0xffff_ffff;
        let start = start(&f);
        let (name, dur_ns) = match (f.init, f.signal) {
            (Some(i), Some(s)) if s >= i => (format!("fence {seqno}"), Some(s - i)),
            (Some(_), _) => (format!("fence {seqno} made"), None),
            _ => (format!("fence {seqno} signalled"), None),
        };
        let mut args = vec![
            ("context", context.to_string()),
            ("seqno", seqno.to_string()),
        ];
        if f.init.is_some() || f.maker.0 != 0 {
            args.push(("made by", thread_text(&f.comm, f.maker.0, f.maker.1)));
        }
        if f.signal.is_some() {
            let ctx = if f.signal_irq { "interrupt" } else { "process" };
            args.push(("signalled in", ctx.to_owned()));
        }
        items.push(Item {
            link: Link::None,
            lane: Lane::Driver {
                group: Group::Fence,
                name: match timelines.get(&u64::from(context)) {
                    Some(t) => format!("fence context {context}: {t}"),
                    None => format!("fence context {context}"),
                },
            },
            name,
            start_ns: start,
            dur_ns,
            args,
        });
    }
}

/// Vblanks, one track per CRTC in the driver pseudo-process, and vblank
/// events, slices from queued to delivered on their process's async track
/// per CRTC.
fn vblank_items(events: &[DriverEvent], items: &mut Vec<Item>) {
    let crtc_name = |c: &str| if c.is_empty() { "crtc ?" } else { c }.to_owned();
    for e in events.iter().filter(|e| e.kind == DriverKind::Vblank) {
        let mut args = vec![
            ("seq", e.arg.to_string()),
            ("timestamp", e.ret.to_string()),
            ("thread", format!("{} ({})", e.comm, e.tid)),
        ];
        if e.msg == "high_prec" {
            args.push(("high precision", "yes".to_owned()));
        }
        items.push(Item {
            link: Link::None,
            lane: Lane::Driver {
                group: Group::Vblank,
                name: format!("vblank {}", crtc_name(&e.ring)),
            },
            name: "vblank".to_owned(),
            start_ns: e.ts_ns,
            dur_ns: None,
            args,
        });
    }
    for v in vblank_events(events) {
        let seq = |s: Option<u32>| s.map_or_else(|| "-".to_owned(), |s| s.to_string());
        let args = vec![
            ("asked for vblank", seq(v.asked_seq)),
            ("delivered at vblank", seq(v.seq)),
            ("thread", format!("{} ({})", v.comm, v.tid)),
        ];
        let (name, start_ns, dur_ns) = match (v.queued_ns, v.delivered_ns) {
            (Some(q), Some(d)) if d >= q => ("vblank event", q, Some(d - q)),
            (Some(q), _) => ("vblank event queued", q, None),
            (None, d) => ("vblank event delivered", d.unwrap_or(0), None),
        };
        items.push(Item {
            link: Link::None,
            lane: Lane::Process {
                pid: v.pid,
                name: format!("vblank events {}", crtc_name(&v.crtc)),
            },
            name: name.to_owned(),
            start_ns,
            dur_ns,
            args,
        });
    }
}
