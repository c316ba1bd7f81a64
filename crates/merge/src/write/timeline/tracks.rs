//! Where the timeline's events go: processes, thread and GPU stream tracks,
//! interned names and stacks.

use std::rc::Rc;

use crate::join::Context;
use crate::read::cpu::StackId;

use super::{
    Builder, Event, EventId, GPU_PID_BASE, Packing, Process, SYNC_TID_BIT, Track, TrackId,
    TrackKey, device_pid,
};

impl Builder {
    pub(super) fn seen(&mut self, ns: u64) {
        self.first_ns = Some(self.first_ns.map_or(ns, |f| f.min(ns)));
    }

    pub(super) fn name(&mut self, s: &str) -> Rc<str> {
        if let Some(n) = self.names.get(s) {
            return n.clone();
        }
        let n: Rc<str> = s.into();
        self.names.insert(s.to_owned(), n.clone());
        n
    }

    pub(super) fn process(&mut self, pid: u64, sort: u64) -> usize {
        *self.process_index.entry(pid).or_insert_with(|| {
            self.processes.push(Process {
                pid,
                name: String::new(),
                sort,
                labels: Vec::new(),
            });
            self.processes.len() - 1
        })
    }

    pub(super) fn track(
        &mut self,
        key: TrackKey,
        make: impl FnOnce() -> (Track, Packing),
    ) -> TrackId {
        if let Some(&t) = self.track_index.get(&key) {
            return t;
        }
        let (t, p) = make();
        self.tracks.push(t);
        self.packing.push(p);
        let id = self.tracks.len() - 1;
        self.track_index.insert(key, id);
        id
    }

    pub(super) fn thread(&mut self, ctx: &Context<'_>, pid: u32, tid: u32) -> TrackId {
        self.process(u64::from(pid), u64::from(pid));
        let comm = ctx
            .cpu
            .and_then(|c| c.comms.get(&(pid, tid)))
            .or_else(|| self.driver_comms.threads.get(&(pid, tid)));
        let name = comm.map_or_else(|| format!("thread {tid}"), |c| format!("{c} ({tid})"));
        self.track(TrackKey::Thread(pid, tid), || {
            let t = Track {
                pid: u64::from(pid),
                tid: u64::from(tid),
                name,
                rank: None,
                thread: true,
                is_async: false,
            };
            (t, Packing::Nest)
        })
    }

    pub(super) fn gpu_track(&mut self, pid: u32, device: u32, stream: u32, sync: bool) -> TrackId {
        let gpid = device_pid(pid, device);
        if !self.process_index.contains_key(&gpid) {
            self.gpus.push((pid, device));
        }
        self.process(gpid, GPU_PID_BASE + u64::from(device));
        let (tid, name, rank, packing) = match (stream, sync) {
            (u32::MAX, _) => (
                u64::from(stream),
                "no stream".to_owned(),
                i32::MAX,
                Packing::Nest,
            ),
            (s, false) => (
                u64::from(s),
                format!("stream {s}"),
                stream_rank(s, 0),
                Packing::Apart,
            ),
            (s, true) => (
                SYNC_TID_BIT | u64::from(s),
                format!("stream {s} sync"),
                stream_rank(s, 255),
                Packing::Nest,
            ),
        };
        self.track(TrackKey::Gpu(gpid, tid), || {
            let t = Track {
                pid: gpid,
                tid,
                name,
                rank: Some(rank),
                thread: false,
                is_async: false,
            };
            (t, packing)
        })
    }

    /// The index of a stack's text, interned once.
    pub(super) fn stack(&mut self, ctx: &Context<'_>, id: StackId) -> Option<u32> {
        let cpu = ctx.cpu?;
        let i = id.index();
        if self.stack_index.len() <= i {
            self.stack_index.resize(i + 1, None);
        }
        Some(*self.stack_index[i].get_or_insert_with(|| {
            self.stacks.push(cpu.stacks.text(id).to_owned());
            (self.stacks.len() - 1) as u32
        }))
    }

    pub(super) fn push(&mut self, e: Event) -> EventId {
        self.seen(e.start_ns);
        self.events.push(e);
        self.events.len() - 1
    }
}

/// A stream's rank among its GPU's tracks: its lanes and its sync track right
/// after it.
pub(super) fn stream_rank(stream: u32, sub: i32) -> i32 {
    (stream.min((1 << 22) - 1) as i32) * 256 + sub
}
