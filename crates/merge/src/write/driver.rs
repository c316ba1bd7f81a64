//! GPU driver events (`gpuperf record --driver`) joined with the CUDA API
//! calls: each ioctl nested under the call running on its thread at the time,
//! each DRM scheduler job put together from its events, and the result laid
//! out as timeline tracks (for [`crate::write::chrome`] and
//! [`crate::write::perfetto`]) and as the report's driver section.
//!
//! Tracks:
//! - An `ioctl` is a slice on the calling thread's own track, inside the CUDA
//!   API call's slice, with that call's name in `args.api` (`none` outside
//!   every recorded call); `open` and `mmap` are instants there.
//! - A pseudo-process `GPU driver` ([`DRIVER_PID`]) holds, per ring, a `queue`
//!   track (a job's slice from queued to run, a `dependency wait` slice inside
//!   it from its wait to its run) and a `run` track (run to done). Driver
//!   tracks are async tracks, known by their names (derived from the events,
//!   never from numbers that could meet): slices that overlap on one stay on
//!   it, and the writers stack them (the timeline model puts them on lanes
//!   of the same name, which Perfetto shows as one track).
//!   Interrupts and bottom halves are instants on an `interrupts` track, Xid
//!   errors instants on a track per device, and `dma_fence`s slices from
//!   init to signal on a `fence context N` track per fence context (a fence
//!   with only one of the two in the recording is an instant).
//! - Vblanks are instants on a `vblank crtc N` track per CRTC of the driver
//!   pseudo-process (the tracepoints give a CRTC's index on its device, not
//!   the device). A vblank event a process asked for is a slice from its
//!   queueing to its delivery on a `vblank events crtc N` async track of that
//!   process ([`Lane::Process`]); one with only one of the two in the
//!   recording is an instant there.
//! - Drivers the recording saw as simulated (the test modules of
//!   `sim/kernel/`) name the pseudo-process `GPU driver (simulated: …)`.

use std::collections::{BTreeMap, VecDeque};
use std::io::Write;

use rustc_hash::FxHashMap;

use crate::error::{Error, Result};
use crate::ioctl::Ioctl;
use crate::join::{Context, Match, Sink, Summary};
use crate::model::{DriverEvent, DriverKind, Record};
use crate::read::driver::DriverTrace;
use crate::write::report::{dur, percentile};

/// The pid of the timeline's driver pseudo-process.
pub const DRIVER_PID: u64 = (1 << 30) - 1;

/// One CUDA API call, as the nesting needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Call {
    /// Process.
    pub pid: u32,
    /// Thread.
    pub tid: u32,
    /// Start.
    pub start_ns: u64,
    /// End.
    pub end_ns: u64,
    /// Its function.
    pub name: String,
    /// Its CPU stack's text, when the join has one.
    pub stack: Option<String>,
}

/// Collects the API calls the join streams; a [`Sink`].
#[derive(Default)]
pub struct Calls {
    calls: Vec<Call>,
}

impl Calls {
    /// Takes one record (the writers call it from their own [`Sink::record`]).
    pub fn take(&mut self, ctx: &Context<'_>, rec: &Record, m: &Match<'_>) {
        if let Record::Api(a) = rec {
            let stack = match (m.stack(), ctx.cpu) {
                (Some(s), Some(cpu)) => Some(cpu.stacks.text(s).to_owned()),
                _ => None,
            };
            self.calls.push(Call {
                pid: a.pid,
                tid: a.tid,
                start_ns: a.start_ns,
                end_ns: a.end_ns.max(a.start_ns),
                name: ctx.strings.get(a.name).to_owned(),
                stack,
            });
        }
    }

    /// The calls collected.
    pub fn into_calls(self) -> Vec<Call> {
        self.calls
    }
}

/// How far back on a thread the nesting looks for a call that encloses an
/// ioctl: calls nest (a runtime call around its driver call) but few deep.
const NEST_LOOKBACK: usize = 64;

/// For each event of `events`, the index in `calls` of the innermost call on
/// its thread that encloses it (`None` for events outside every call and for
/// events that are not process calls into the driver).
pub fn nest(events: &[DriverEvent], calls: &[Call]) -> Vec<Option<usize>> {
    let mut by_thread: FxHashMap<(u32, u32), Vec<usize>> = FxHashMap::default();
    for (i, c) in calls.iter().enumerate() {
        by_thread.entry((c.pid, c.tid)).or_default().push(i);
    }
    for v in by_thread.values_mut() {
        v.sort_by_key(|&i| (calls[i].start_ns, std::cmp::Reverse(calls[i].end_ns)));
    }
    events
        .iter()
        .map(|e| {
            if !matches!(
                e.kind,
                DriverKind::Open | DriverKind::Ioctl | DriverKind::Mmap
            ) {
                return None;
            }
            let list = by_thread.get(&(e.pid, e.tid))?;
            let end = e.ts_ns.saturating_add(e.dur_ns);
            let upto = list.partition_point(|&i| calls[i].start_ns <= e.ts_ns);
            list[..upto]
                .iter()
                .rev()
                .take(NEST_LOOKBACK)
                .copied()
                .find(|&i| calls[i].end_ns >= end)
        })
        .collect()
}

/// A DRM scheduler job, put together from its events.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Job {
    /// Its ring.
    pub ring: String,
    /// Its id.
    pub id: u64,
    /// Its submitter.
    pub pid: u32,
    /// The submitting thread.
    pub tid: u32,
    /// The submitting thread's command name.
    pub comm: String,
    /// Queued.
    pub queued_ns: Option<u64>,
    /// Its first dependency wait.
    pub dep_wait_ns: Option<u64>,
    /// Handed to the hardware.
    pub run_ns: Option<u64>,
    /// Finished.
    pub done_ns: Option<u64>,
}

/// The jobs of `events`, in the order they were queued (or first seen).
pub fn jobs(events: &[DriverEvent]) -> Vec<Job> {
    let mut out: Vec<Job> = Vec::new();
    // A job's id (its fence's address) is reused once it is done.
    let mut open: FxHashMap<u64, usize> = FxHashMap::default();
    for e in events {
        let slot = match e.kind {
            DriverKind::JobQueued => {
                out.push(Job::default());
                open.insert(e.id, out.len() - 1);
                out.len() - 1
            }
            DriverKind::JobRun | DriverKind::JobDone | DriverKind::JobWaitDep => {
                match open.get(&e.id) {
                    Some(&i) => i,
                    None => {
                        out.push(Job::default());
                        open.insert(e.id, out.len() - 1);
                        out.len() - 1
                    }
                }
            }
            _ => continue,
        };
        let j = &mut out[slot];
        j.ring.clone_from(&e.ring);
        j.comm.clone_from(&e.comm);
        (j.id, j.pid, j.tid) = (e.id, e.pid, e.tid);
        match e.kind {
            DriverKind::JobQueued => j.queued_ns = Some(e.ts_ns),
            DriverKind::JobWaitDep => {
                j.dep_wait_ns.get_or_insert(e.ts_ns);
            }
            DriverKind::JobRun => j.run_ns = Some(e.ts_ns),
            _ => {
                j.done_ns = Some(e.ts_ns);
                open.remove(&e.id);
            }
        }
    }
    out
}

/// A vblank event a process asked for, from its queueing and its delivery.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VblankEvent {
    /// The asking process.
    pub pid: u32,
    /// The asking thread.
    pub tid: u32,
    /// Its command name.
    pub comm: String,
    /// The CRTC (`crtc N`).
    pub crtc: String,
    /// The DRM file it was asked on.
    pub file: u64,
    /// The vblank asked for.
    pub asked_seq: Option<u32>,
    /// The vblank it was delivered at.
    pub seq: Option<u32>,
    /// Queued.
    pub queued_ns: Option<u64>,
    /// Delivered.
    pub delivered_ns: Option<u64>,
}

/// How many undelivered vblank events [`VblankPairer`] keeps per DRM file
/// and CRTC: a file closed with events pending never delivers them.
const PENDING_PER_FILE: usize = 4096;

/// Pairs each delivered vblank event with its queueing, as the events come:
/// the oldest event queued on the same DRM file and CRTC for a vblank at or
/// before the delivered one (the kernel delivers every event whose vblank
/// has passed).
#[derive(Debug, Default)]
pub struct VblankPairer<T> {
    pending: FxHashMap<(u64, String), VecDeque<(u32, T)>>,
}

impl<T> VblankPairer<T> {
    /// A queued event (`VblankQueued`), with what to give back at its delivery.
    pub fn queued(&mut self, e: &DriverEvent, what: T) {
        let q = self.pending.entry((e.id, e.ring.clone())).or_default();
        if q.len() == PENDING_PER_FILE {
            q.pop_front();
        }
        q.push_back((e.arg, what));
    }

    /// For a delivered event (`VblankDelivered`), what its queueing gave.
    pub fn delivered(&mut self, e: &DriverEvent) -> Option<T> {
        let q = self.pending.get_mut(&(e.id, e.ring.clone()))?;
        // Sequence numbers wrap: `asked` is at or before `e.arg`.
        let i = q
            .iter()
            .position(|(asked, _)| e.arg.wrapping_sub(*asked) as i32 >= 0)?;
        let (_, what) = q.remove(i)?;
        if q.is_empty() {
            self.pending.remove(&(e.id, e.ring.clone()));
        }
        Some(what)
    }
}

/// The vblank events of `events`, in the order they were queued (or
/// delivered, for those queued before the recording).
pub fn vblank_events(events: &[DriverEvent]) -> Vec<VblankEvent> {
    let mut out: Vec<VblankEvent> = Vec::new();
    let mut pairer = VblankPairer::default();
    for e in events {
        let v = VblankEvent {
            pid: e.pid,
            tid: e.tid,
            comm: e.comm.clone(),
            crtc: e.ring.clone(),
            file: e.id,
            ..VblankEvent::default()
        };
        match e.kind {
            DriverKind::VblankQueued => {
                pairer.queued(e, out.len());
                out.push(VblankEvent {
                    asked_seq: Some(e.arg),
                    queued_ns: Some(e.ts_ns),
                    ..v
                });
            }
            DriverKind::VblankDelivered => {
                let i = pairer.delivered(e).unwrap_or_else(|| {
                    out.push(v);
                    out.len() - 1
                });
                out[i].seq = Some(e.arg);
                out[i].delivered_ns = Some(e.ts_ns);
            }
            _ => {}
        }
    }
    out
}

/// A job's id as users see it: its finished fence, `context:seqno`, which
/// names the fence on its context's track. `None` for the scheduler fence's
/// kernel address that older recordings hold (not to be spread further).
pub fn job_fence(id: u64) -> Option<String> {
    (id >> 47 != 0x1ffff).then(|| format!("{}:{}", id >> 32, id & 0xffff_ffff))
}

/// The fence contexts the DRM scheduler's jobs show, named as its
/// `dma_fence` tracepoints name them: [`name_job_fence_contexts`] of each job
/// event.
fn fence_timelines(events: &[DriverEvent]) -> FxHashMap<u64, String> {
    let mut out = FxHashMap::default();
    for e in events {
        name_job_fence_contexts(e, &mut out);
    }
    out
}

/// Names in `names` the fence contexts a DRM scheduler job's event shows and
/// `names` does not hold yet, as its `dma_fence` tracepoints name them
/// (driver `drm_sched`, timeline the ring): a job's finished fence (its id)
/// is on its entity's second context, the scheduled fence on the first. Any
/// other event names none. A name is made only for a context not yet named,
/// so each job event of a known ring costs one lookup.
pub fn name_job_fence_contexts<S: std::hash::BuildHasher>(
    e: &DriverEvent,
    names: &mut std::collections::HashMap<u64, String, S>,
) {
    let job = matches!(
        e.kind,
        DriverKind::JobQueued | DriverKind::JobRun | DriverKind::JobDone
    );
    if !job || job_fence(e.id).is_none() || e.ring.is_empty() {
        return;
    }
    let finished = e.id >> 32;
    if names.contains_key(&finished) {
        return;
    }
    names.insert(finished, format!("drm_sched {} finished", e.ring));
    if let Some(scheduled) = finished.checked_sub(1) {
        names
            .entry(scheduled)
            .or_insert_with(|| format!("drm_sched {} scheduled", e.ring));
    }
}

/// Whether an Xid or a fence signal was made in interrupt context (BPF sets
/// `ret` so), where its task is merely the one interrupted.
pub fn in_irq(e: &DriverEvent) -> bool {
    matches!(e.kind, DriverKind::Xid | DriverKind::FenceSignaled) && e.ret & 1 == 1
}

/// A thread as the timeline's arguments name it: `drive (pid 131, tid 132)`.
fn thread_text(comm: &str, pid: u32, tid: u32) -> String {
    if comm.is_empty() {
        format!("pid {pid}, tid {tid}")
    } else {
        format!("{comm} (pid {pid}, tid {tid})")
    }
}

/// The kinds whose pid is the process the event is about, made in its own
/// context (a job's later events and a fence's signal carry their maker's,
/// as BPF keeps it); interrupts, vblanks and Xids happen in whatever task
/// was running.
fn names_its_process(k: DriverKind) -> bool {
    matches!(
        k,
        DriverKind::Open
            | DriverKind::Ioctl
            | DriverKind::Mmap
            | DriverKind::JobQueued
            | DriverKind::FenceInit
            | DriverKind::VblankQueued
    )
}

/// The command name of each process and thread that the events name in
/// their own context (`names_its_process`): a process's is its main
/// thread's, else its first-seen thread's. For processes that made no CUDA
/// call, whose names the GPU trace does not give.
#[derive(Clone, Debug, Default)]
pub struct Comms {
    /// By (pid, tid).
    pub threads: FxHashMap<(u32, u32), String>,
    /// By pid.
    pub processes: FxHashMap<u32, String>,
}

impl Comms {
    /// The names in `events`.
    pub fn of(events: &[DriverEvent]) -> Self {
        let mut c = Self::default();
        for e in events {
            if !names_its_process(e.kind) || e.pid == 0 || e.comm.is_empty() {
                continue;
            }
            c.threads
                .entry((e.pid, e.tid))
                .or_insert_with(|| e.comm.clone());
            if e.pid == e.tid {
                c.processes.insert(e.pid, e.comm.clone());
            } else {
                c.processes.entry(e.pid).or_insert_with(|| e.comm.clone());
            }
        }
        c
    }
}

/// The processes a recording followed: those with CUDA calls and those
/// named by events made in their own context.
fn recorded_processes(events: &[DriverEvent], calls: &[Call]) -> std::collections::BTreeSet<u32> {
    let mut out: std::collections::BTreeSet<u32> = calls.iter().map(|c| c.pid).collect();
    out.extend(
        events
            .iter()
            .filter(|e| names_its_process(e.kind) && e.pid != 0)
            .map(|e| e.pid),
    );
    out
}

/// The process an Xid is about: the one its message names (NVIDIA's Xid
/// messages say `pid=1234, name=python3`), else the task it was raised in,
/// unless that was none (pid 0: an interrupt on an idle CPU).
pub fn xid_process(e: &DriverEvent) -> Option<(u32, String)> {
    let field = |key: &str| {
        let at = e.msg.find(key)? + key.len();
        let v = e.msg[at..].split([',', ' ', ';']).next()?;
        Some(v.trim_matches(['\'', '"']).to_owned())
    };
    if let Some(pid) = field("pid=").and_then(|p| p.parse::<u32>().ok()) {
        return Some((pid, field("name=").unwrap_or_default()));
    }
    (e.pid != 0 && !in_irq(e)).then(|| (e.pid, e.comm.clone()))
}

/// An Xid's process in words, said to be another process than those
/// recorded when it is.
fn xid_process_text(e: &DriverEvent, ours: &std::collections::BTreeSet<u32>) -> String {
    match xid_process(e) {
        None => "unknown (raised in interrupt context)".to_owned(),
        Some((pid, comm)) => {
            let who = if comm.is_empty() {
                format!("pid {pid}")
            } else {
                format!("{comm} (pid {pid})")
            };
            if ours.contains(&pid) {
                who
            } else {
                format!("{who}, another process than those recorded")
            }
        }
    }
}

/// Where a timeline item goes.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
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
    let nested = nest(&t.events, calls);
    let ours = recorded_processes(&t.events, calls);
    let mut items = Vec::new();
    for (e, call) in t.events.iter().zip(&nested) {
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
    let mut rings: BTreeMap<String, Vec<Job>> = BTreeMap::new();
    for j in jobs(&t.events) {
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

/// `dma_fence`s, one async track per fence context: a slice from a fence's init to its signal, an instant for a fence
/// with only one of them in the recording.
fn fence_items(events: &[DriverEvent], timelines: &FxHashMap<u64, String>, items: &mut Vec<Item>) {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn fence(kind: DriverKind, ts_ns: u64, context: u64, seqno: u64, pid: u32) -> DriverEvent {
        DriverEvent {
            ts_ns,
            dur_ns: 0,
            id: context << 32 | seqno,
            ret: 0,
            pid,
            tid: pid + 1,
            kind,
            arg: 0,
            comm: "app".to_owned(),
            ring: String::new(),
            msg: String::new(),
        }
    }

    fn vblank_event(kind: DriverKind, ts_ns: u64, file: u64, seq: u32) -> DriverEvent {
        DriverEvent {
            arg: seq,
            ring: "crtc 0".to_owned(),
            ..fence(kind, ts_ns, 0, file, 7)
        }
    }

    #[test]
    fn a_delivery_ends_the_oldest_event_asked_for_at_or_before_its_vblank() {
        use DriverKind::{VblankDelivered as D, VblankQueued as Q};
        let mut p = VblankPairer::default();
        p.queued(&vblank_event(Q, 1, 5, 10), "a");
        p.queued(&vblank_event(Q, 2, 5, 8), "b");
        // Another file's event is another's.
        p.queued(&vblank_event(Q, 3, 6, 8), "c");
        assert_eq!(p.delivered(&vblank_event(D, 4, 5, 8)), Some("b"));
        assert_eq!(p.delivered(&vblank_event(D, 5, 5, 9)), None);
        assert_eq!(p.delivered(&vblank_event(D, 6, 5, 11)), Some("a"));
        // Sequence numbers wrap: 8 is after 1, u32::MAX before it.
        p.queued(&vblank_event(Q, 7, 6, u32::MAX), "d");
        assert_eq!(p.delivered(&vblank_event(D, 8, 6, 1)), Some("d"));
        assert_eq!(p.delivered(&vblank_event(D, 9, 6, 1)), None);
        assert_eq!(p.delivered(&vblank_event(D, 10, 6, 8)), Some("c"));
        assert!(p.pending.is_empty());
    }

    #[test]
    fn jobs_are_named_by_their_finished_fence_whose_context_names_its_ring() {
        use DriverKind::{
            FenceInit as I, FenceSignaled as S, JobDone as D, JobQueued as Q, JobRun as R,
        };
        let job = |kind, ts_ns, id| DriverEvent {
            id,
            ring: "sim-ring0".to_owned(),
            ..fence(kind, ts_ns, 0, 0, 10)
        };
        let id = 7 << 32 | 3;
        // Signalled in an interrupt, in nobody's name (as BPF sends it).
        let mut signal = fence(S, 300, 7, 3, 0);
        (signal.ret, signal.tid, signal.comm) = (1, 0, "[interrupt]".to_owned());
        // An older recording's job, known by a kernel address.
        let old = 0xffff_8880_0000_0040;
        let t = DriverTrace {
            events: vec![
                job(Q, 100, id),
                fence(I, 100, 7, 3, 10),
                job(R, 150, id),
                job(D, 250, id),
                signal,
                job(Q, 400, old),
                job(R, 410, old),
                job(D, 420, old),
            ],
            ..DriverTrace::default()
        };
        let items = timeline(&t, &[]);
        let jobs: Vec<&Vec<(&str, String)>> = items
            .iter()
            .filter(|i| i.name == "job")
            .map(|i| &i.args)
            .collect();
        assert_eq!(jobs[0][0], ("job", "7:3".to_owned()));
        assert!(jobs[1].iter().all(|(k, _)| *k != "job"), "{:?}", jobs[1]);
        let fence = items.iter().find(|i| i.name == "fence 3").unwrap();
        assert_eq!(
            fence.lane,
            Lane::Driver {
                group: Group::Fence,
                name: "fence context 7: drm_sched sim-ring0 finished".to_owned()
            }
        );
        assert!(
            fence
                .args
                .contains(&("signalled in", "interrupt".to_owned())),
            "{fence:?}"
        );
        assert!(
            fence
                .args
                .contains(&("made by", "app (pid 10, tid 11)".to_owned())),
            "{fence:?}"
        );
        assert!(
            items
                .iter()
                .all(|i| i.args.iter().all(|(_, v)| !v.contains("ffff")))
        );
    }

    #[test]
    fn an_xid_in_interrupt_context_names_no_task_unless_its_message_does() {
        let mut e = fence(DriverKind::Xid, 1, 0, 0, 777);
        e.comm = "sim_app".to_owned();
        assert_eq!(xid_process(&e), Some((777, "sim_app".to_owned())));
        e.ret = 1;
        assert_eq!(xid_process(&e), None);
        e.msg = "pid=555, name=other_app, Ch 00000010".to_owned();
        assert_eq!(xid_process(&e), Some((555, "other_app".to_owned())));
    }

    /// Track, name, start, duration, maker.
    type Row<'a> = (&'a str, &'a str, u64, Option<u64>, &'a str);

    #[test]
    fn fences_are_slices_on_one_track_per_context_halves_instants() {
        use DriverKind::{FenceInit as I, FenceSignaled as S, Ioctl};
        let mut ioctl = fence(Ioctl, 5, 0, 0, 7);
        ioctl.id = 3 << 32 | 1; // Not a fence, though its id looks like one.
        let events = vec![
            fence(I, 100, 3, 1, 10),
            fence(I, 150, 3, 2, 10),
            // Signalled in an interrupt, in its maker's name (as BPF sends it).
            fence(S, 200, 3, 1, 10),
            fence(S, 300, 3, 2, 10),
            fence(I, 400, 3, 3, 10),
            fence(I, 120, 9, 1, 11),
            fence(S, 180, 9, 1, 11),
            fence(S, 500, 9, 2, 11),
            ioctl,
        ];
        let mut items = Vec::new();
        fence_items(&events, &FxHashMap::default(), &mut items);
        let got: Vec<Row> = items
            .iter()
            .map(|i| {
                let Lane::Driver {
                    group: Group::Fence,
                    name,
                } = &i.lane
                else {
                    panic!("{i:?}")
                };
                (
                    name.as_str(),
                    i.name.as_str(),
                    i.start_ns,
                    i.dur_ns,
                    i.args[2].1.as_str(),
                )
            })
            .collect();
        // Overlapping fences share their context's track (the writers stack
        // them), however many contexts there are.
        assert_eq!(
            got,
            [
                (
                    "fence context 3",
                    "fence 1",
                    100,
                    Some(100),
                    "app (pid 10, tid 11)"
                ),
                (
                    "fence context 9",
                    "fence 1",
                    120,
                    Some(60),
                    "app (pid 11, tid 12)"
                ),
                (
                    "fence context 3",
                    "fence 2",
                    150,
                    Some(150),
                    "app (pid 10, tid 11)"
                ),
                (
                    "fence context 3",
                    "fence 3 made",
                    400,
                    None,
                    "app (pid 10, tid 11)"
                ),
                (
                    "fence context 9",
                    "fence 2 signalled",
                    500,
                    None,
                    "app (pid 11, tid 12)"
                ),
            ]
        );
    }
}
