//! DRM scheduler jobs, vblank events and fence contexts, put together from
//! the driver's events.

use std::collections::VecDeque;

use rustc_hash::FxHashMap;

use crate::model::{DriverEvent, DriverKind};

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
    pub(super) pending: FxHashMap<(u64, String), VecDeque<(u32, T)>>,
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
pub(crate) fn job_fence(id: u64) -> Option<String> {
    (id >> 47 != 0x1ffff).then(|| format!("{}:{}", id >> 32, id & 0xffff_ffff))
}

/// The fence contexts the DRM scheduler's jobs show, named as its
/// `dma_fence` tracepoints name them: [`name_job_fence_contexts`] of each job
/// event.
pub(super) fn fence_timelines(events: &[DriverEvent]) -> FxHashMap<u64, String> {
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
