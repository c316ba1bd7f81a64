//! The finished timeline: processes named, slices put on lanes, extra
//! tracks given tids, and the order in which the events are written.

use rustc_hash::FxHashMap;

use crate::join::{Context, Summary};
use crate::write::driver::{self, DRIVER_PID};

use super::{
    Builder, EventId, Flow, GPU_PID_BASE, Packing, SYNC_TID_BIT, Step, Timeline, Track, TrackId,
    TrackKey, device_pid,
};

impl Builder {
    /// Names every process, once all records are in.
    pub(super) fn name_processes(&mut self, ctx: &Context<'_>) {
        for p in &mut self.processes {
            if p.pid < GPU_PID_BASE && p.pid != DRIVER_PID {
                let pid = p.pid as u32;
                p.name = cpu_process_name(
                    ctx,
                    &self.exes,
                    &self.driver_comms,
                    pid,
                    self.origins.get(&pid),
                );
            }
        }
        for &(pid, device) in &self.gpus {
            let name = if device == u32::MAX {
                format!("GPU ? (device unknown, pid {pid})")
            } else {
                let dev = self.devices.get(&(pid, device)).map_or("", String::as_str);
                let place = match self.origins.get(&pid) {
                    Some(o) => format!("pid {pid}, {o}"),
                    None => format!("pid {pid}"),
                };
                format!("GPU {device} {dev} ({place})").replace("  ", " ")
            };
            let i = self.process_index[&device_pid(pid, device)];
            self.processes[i].name = name;
        }
    }

    /// Moves each slice that cannot share its track with the slices before it
    /// to a lane of its own; returns each track's events in begin order.
    pub(super) fn lanes(&mut self) -> Vec<Vec<EventId>> {
        let mut by_track: Vec<Vec<EventId>> = vec![Vec::new(); self.tracks.len()];
        for (i, e) in self.events.iter().enumerate() {
            by_track[e.track].push(i);
        }
        let mut out: Vec<Vec<EventId>> = Vec::new();
        for (track, mut ids) in by_track.into_iter().enumerate() {
            let packing = self.packing[track];
            let ev = &self.events;
            // Begin order: by start; of slices that start together the longer
            // first where they nest, the shorter first where they must not overlap.
            ids.sort_by_key(|&i| {
                let e = &ev[i];
                let end = e.end_ns();
                let tie = match packing {
                    Packing::Nest => u64::MAX - end,
                    Packing::Apart => end,
                };
                (e.start_ns, tie, i)
            });
            // Per lane: the ends of its open slices, innermost last.
            let mut open: Vec<Vec<u64>> = vec![Vec::new()];
            let mut placed: Vec<Vec<EventId>> = vec![Vec::new()];
            for i in ids {
                let (start, end, instant) = {
                    let e = &self.events[i];
                    (e.start_ns, e.end_ns(), e.dur_ns.is_none())
                };
                let mut lane = 0;
                if !instant {
                    loop {
                        if lane == open.len() {
                            open.push(Vec::new());
                            placed.push(Vec::new());
                        }
                        let stack = &mut open[lane];
                        while stack.last().is_some_and(|&e| e <= start) {
                            stack.pop();
                        }
                        let fits = match (stack.last(), packing) {
                            (None, _) => true,
                            (Some(&outer), Packing::Nest) => outer >= end,
                            (Some(_), Packing::Apart) => false,
                        };
                        if fits {
                            stack.push(end);
                            break;
                        }
                        lane += 1;
                    }
                }
                placed[lane].push(i);
            }
            for (lane, ids) in placed.into_iter().enumerate() {
                let t = if lane == 0 {
                    track
                } else {
                    let base = self.tracks[track].clone();
                    let p = self.packing[track];
                    let t = self.track(TrackKey::Lane(track, lane), || {
                        // An async track's lanes keep its name: readers
                        // stack them as one track.
                        let (name, rank) = if base.is_async {
                            (base.name.clone(), base.rank)
                        } else {
                            (
                                format!("{} (overlap {lane})", base.name),
                                base.rank.map(|r| r.saturating_add(lane.min(254) as i32)),
                            )
                        };
                        let t = Track {
                            pid: base.pid,
                            tid: 0,
                            name,
                            rank,
                            thread: false,
                            is_async: base.is_async,
                        };
                        (t, p)
                    });
                    self.extra.push(t);
                    for &i in &ids {
                        self.events[i].track = t;
                    }
                    t
                };
                if out.len() <= t {
                    out.resize(t + 1, Vec::new());
                }
                out[t] = ids;
            }
        }
        out.resize(self.tracks.len(), Vec::new());
        out
    }

    /// Gives the tracks made at the end (device idle, lanes) small tids, above
    /// every stream and thread of their process.
    pub(super) fn extra_tids(&mut self) {
        let mut next: FxHashMap<u64, u64> = FxHashMap::default();
        let mut used: rustc_hash::FxHashSet<(u64, u64)> = Default::default();
        for (i, t) in self.tracks.iter().enumerate() {
            if self.extra.contains(&i) {
                continue;
            }
            used.insert((t.pid, t.tid));
            if t.tid < SYNC_TID_BIT {
                let n = next.entry(t.pid).or_insert(1);
                *n = (*n).max(t.tid + 1);
            }
        }
        for &i in &self.extra {
            let pid = self.tracks[i].pid;
            let n = next.entry(pid).or_insert(1);
            while used.contains(&(pid, *n)) {
                *n += 1;
            }
            self.tracks[i].tid = *n;
            used.insert((pid, *n));
        }
    }

    /// The written order: each track's slices begin in order and end innermost
    /// first, ends before begins at one instant; the tracks merged by time, CPU
    /// tracks first at one instant (a flow's start before its end).
    pub(super) fn steps(&self, per_track: &[Vec<EventId>]) -> Vec<Step> {
        let mut all: Vec<(u64, bool, TrackId, usize, Step)> =
            Vec::with_capacity(self.events.len() * 2);
        for (track, ids) in per_track.iter().enumerate() {
            let gpu = !self.tracks[track].thread;
            let mut seq = 0usize;
            let mut put = |ts: u64, s: Step, all: &mut Vec<_>| {
                all.push((ts, gpu, track, seq, s));
                seq += 1;
            };
            let mut open: Vec<EventId> = Vec::new();
            for &i in ids {
                let e = &self.events[i];
                while let Some(&o) = open
                    .last()
                    .filter(|&&o| self.events[o].end_ns() <= e.start_ns)
                {
                    open.pop();
                    put(self.events[o].end_ns(), Step::End(o), &mut all);
                }
                match e.dur_ns {
                    Some(_) => {
                        put(e.start_ns, Step::Begin(i), &mut all);
                        open.push(i);
                    }
                    None => put(e.start_ns, Step::Instant(i), &mut all),
                }
            }
            while let Some(o) = open.pop() {
                put(self.events[o].end_ns(), Step::End(o), &mut all);
            }
        }
        all.sort_unstable_by_key(|s| (s.0, s.1, s.2, s.3));
        all.into_iter().map(|s| s.4).collect()
    }

    pub(super) fn build(&mut self, ctx: &Context<'_>, summary: &Summary) -> Timeline {
        self.name_processes(ctx);
        let per_track = self.lanes();
        self.extra_tids();
        let steps = self.steps(&per_track);
        let mut flows = Vec::new();
        let mut flows_out: FxHashMap<EventId, Vec<usize>> = FxHashMap::default();
        let mut flows_in: FxHashMap<EventId, Vec<usize>> = FxHashMap::default();
        for &(to, cat, key) in &self.pending_flows {
            let Some(&from) = self.api_events.get(&key) else {
                continue;
            };
            flows_out.entry(from).or_default().push(flows.len());
            flows_in.entry(to).or_default().push(flows.len());
            flows.push(Flow {
                id: flows.len() as u64 + 1,
                cat,
                from,
                to,
            });
        }
        for &(from, to) in &self.driver_flows {
            flows_out.entry(from).or_default().push(flows.len());
            flows_in.entry(to).or_default().push(flows.len());
            flows.push(Flow {
                id: flows.len() as u64 + 1,
                cat: "submit",
                from,
                to,
            });
        }
        Timeline {
            processes: std::mem::take(&mut self.processes),
            tracks: std::mem::take(&mut self.tracks),
            events: std::mem::take(&mut self.events),
            flows,
            flows_out,
            flows_in,
            stacks: std::mem::take(&mut self.stacks),
            steps,
            base_ns: self.first_ns.unwrap_or(0),
            clock: ctx.clock,
            kernels: summary.kernels,
            kernels_matched: summary.kernels_matched,
            notes: summary.notes.iter().map(ToString::to_string).collect(),
        }
    }
}

/// A CPU process's name: its executable, else its main thread's command name
/// (from the CPU trace, else from the driver events), with its pid (and its
/// rank); or its pid alone.
fn cpu_process_name(
    ctx: &Context<'_>,
    exes: &FxHashMap<u32, String>,
    driver_comms: &driver::Comms,
    pid: u32,
    origin: Option<&String>,
) -> String {
    let exe = exes.get(&pid).map(|e| e.trim()).filter(|e| !e.is_empty());
    let comm = || {
        ctx.cpu
            .and_then(|c| c.comms.get(&(pid, pid)))
            .or_else(|| driver_comms.processes.get(&pid))
            .map(|c| c.trim())
            .filter(|c| !c.is_empty())
    };
    let place = match origin {
        Some(o) => format!("pid {pid}, {o}"),
        None => format!("pid {pid}"),
    };
    match exe.or_else(comm) {
        Some(name) => format!("{name} ({place})"),
        None => place,
    }
}
