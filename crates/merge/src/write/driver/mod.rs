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

mod jobs;
mod text;
mod timeline;

#[cfg(test)]
mod tests;

use rustc_hash::FxHashMap;

use crate::join::{Context, Match};
use crate::model::{DriverEvent, DriverKind, Record};

pub use jobs::{
    Job, VblankEvent, VblankPairer, in_irq, jobs, name_job_fence_contexts, vblank_events,
};
pub use text::Reporter;
pub use timeline::{Group, Item, Lane, Link, process_name, timeline};

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

/// Collects the API calls the join streams; a [`Sink`](crate::join::Sink).
#[derive(Default)]
pub struct Calls {
    calls: Vec<Call>,
}

impl Calls {
    /// Takes one record (the writers call it from their own [`Sink::record`](crate::join::Sink::record)).
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
    pub(crate) fn into_calls(self) -> Vec<Call> {
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
pub(crate) struct Comms {
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
