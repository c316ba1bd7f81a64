//! The timeline's events from the records the join streams: API calls, GPU
//! work, NVTX ranges, markers, idle slices and driver items.

use std::rc::Rc;

use rustc_hash::FxHashMap;

use crate::error::Result;
use crate::join::{ApiInfo, Context, Match, Sink, Summary};
use crate::model::{
    Activity, ActivityKind, ApiCall, NvtxKind, NvtxRange, Origin, Record, StringId, SyncWait,
};
use crate::read::cpu::CpuLaunch;
use crate::read::driver::DriverTrace;
use crate::write::driver::{self, DRIVER_PID, Lane};
use crate::write::idle::{DEVICE_IDLE, IdleFolder};

use super::{
    Arg, Builder, Event, EventId, NVTX_START_END_TRACK, Packing, Track, TrackId, TrackKey,
    device_pid, sync_name,
};

impl Builder {
    pub(super) fn api(&mut self, ctx: &Context<'_>, a: &ApiCall, m: &Match<'_>) {
        let track = self.thread(ctx, a.pid, a.tid);
        let mut args = vec![("correlation_id", Arg::Uint(u64::from(a.correlation_id)))];
        // The launch's own stack: GPU work refers to it through the flow.
        if let Some(s) = m.launch.and_then(|l| self.stack(ctx, l.stack)) {
            args.push(("stack", Arg::Stack(s)));
        }
        let name = self.name(ctx.strings.get(a.name));
        let id = self.push(Event {
            track,
            start_ns: a.start_ns,
            dur_ns: Some(a.end_ns.saturating_sub(a.start_ns)),
            cat: "cuda_api",
            name,
            args,
        });
        self.api_events
            .entry((a.pid, a.tid, a.start_ns, a.end_ns, a.name))
            .or_insert(id);
    }

    pub(super) fn activity(&mut self, ctx: &Context<'_>, a: &Activity, m: &Match<'_>) {
        let is_sync = matches!(a.kind, ActivityKind::Sync { .. });
        let track = self.gpu_track(a.pid, a.device_key(), a.stream_key(), is_sync);
        let (cat, name) = match a.kind {
            ActivityKind::Kernel { name, .. } => {
                let n = match self.kernel_names.get(&name) {
                    Some(n) => n.clone(),
                    None => {
                        let n: Rc<str> = self.demangler.label(name, ctx.strings, ctx.view).into();
                        self.kernel_names.insert(name, n.clone());
                        n
                    }
                };
                ("kernel", n)
            }
            ActivityKind::Memcpy { kind, .. } => ("memcpy", self.name(&format!("Memcpy {kind}"))),
            ActivityKind::Memset { .. } => ("memset", self.name("Memset")),
            ActivityKind::Sync {
                sync_type,
                wait: Some(SyncWait {
                    stream: Some(s), ..
                }),
            } => (
                "sync",
                self.name(&format!("{} (stream {s})", sync_name(sync_type))),
            ),
            ActivityKind::Sync { sync_type, .. } => ("sync", self.name(sync_name(sync_type))),
        };
        let mut args = vec![("correlation_id", Arg::Uint(u64::from(a.correlation_id)))];
        // Work the input names no device for (some synchronizations) has no
        // device argument, rather than `device_key`'s stand-in.
        if let Some(d) = a.device {
            args.push(("device", Arg::Uint(u64::from(d))));
        }
        args.push(("context", Arg::Uint(u64::from(a.context))));
        match a.kind {
            ActivityKind::Kernel {
                grid, block, name, ..
            } => {
                args.push(("grid", Arg::Dim(grid)));
                args.push(("block", Arg::Dim(block)));
                // The slice shows the view's short name; the args keep the whole.
                let full = self.demangler.get(name, ctx.strings);
                if !ctx.view.is_complete() && *full != *self.kernel_names[&name] {
                    let full = full.to_owned();
                    args.push(("full_name", Arg::Str(self.name(&full))));
                }
            }
            ActivityKind::Memcpy {
                bytes,
                peer: Some(p),
                ..
            } => {
                args.push(("bytes", Arg::Uint(bytes)));
                args.push(("src_device", Arg::Uint(u64::from(p.src))));
                args.push(("dst_device", Arg::Uint(u64::from(p.dst))));
            }
            ActivityKind::Memcpy { bytes, .. } | ActivityKind::Memset { bytes, .. } => {
                args.push(("bytes", Arg::Uint(bytes)));
            }
            ActivityKind::Sync { sync_type, wait } => {
                args.push(("sync_type", Arg::Uint(u64::from(sync_type))));
                let w = wait.unwrap_or_default();
                for (key, v) in [
                    ("wait_on_stream", w.stream),
                    ("wait_on_event_id", w.event_id),
                    (
                        "wait_on_event_record_correlation_id",
                        w.record_correlation_id,
                    ),
                ] {
                    if let Some(v) = v {
                        args.push((key, Arg::Uint(u64::from(v))));
                    }
                }
            }
        }
        if let Some((graph, node)) = a.graph() {
            args.push(("graph_id", Arg::Uint(u64::from(graph))));
            args.push(("graph_node_id", Arg::Uint(node)));
        }
        // Written only where the work is charged to another stack than its
        // call's: the call's slice holds the call's stack.
        let charged = m.charge().stack;
        if charged != m.launch.map(|l| l.stack)
            && let Some(s) = charged.and_then(|s| self.stack(ctx, s))
        {
            args.push(("stack", Arg::Stack(s)));
        }
        let id = self.push(Event {
            track,
            start_ns: a.start_ns,
            dur_ns: Some(a.duration_ns()),
            cat,
            name,
            args,
        });
        if let Some(api) = m.api {
            self.pending_flows
                .push((id, "launch", call_key(a.pid, api)));
        }
        if let Some(record) = m.wait_record {
            self.pending_flows
                .push((id, "event_wait", call_key(a.pid, record)));
        }
    }

    /// An NVTX range: push/pop ranges on their thread's track, around the
    /// calls made inside them (as Nsight Systems and Kineto show them);
    /// start/end ranges, which may cross threads and overlap, on a track of
    /// their process.
    pub(super) fn nvtx(&mut self, ctx: &Context<'_>, r: &NvtxRange) {
        let track = match r.kind {
            NvtxKind::PushPop => self.thread(ctx, r.pid, r.tid),
            NvtxKind::StartEnd => {
                self.process(u64::from(r.pid), u64::from(r.pid));
                let t = self.track(TrackKey::NvtxStartEnd(r.pid), || {
                    let t = Track {
                        pid: u64::from(r.pid),
                        tid: 0,
                        name: NVTX_START_END_TRACK.to_owned(),
                        rank: None,
                        thread: false,
                        is_async: false,
                    };
                    (t, Packing::Nest)
                });
                if !self.extra.contains(&t) {
                    self.extra.push(t);
                }
                t
            }
        };
        let mut args = vec![("tid", Arg::Uint(u64::from(r.tid)))];
        if let Some(d) = r.domain {
            args.push(("domain", Arg::Str(self.name(ctx.strings.get(d)))));
        }
        if r.unclosed {
            args.push(("unclosed", Arg::Uint(1)));
        }
        let name = self.name(ctx.strings.get(r.name));
        self.push(Event {
            track,
            start_ns: r.start_ns,
            dur_ns: Some(r.end_ns.saturating_sub(r.start_ns)),
            cat: "nvtx",
            name,
            args,
        });
    }

    pub(super) fn marker(&mut self, ctx: &Context<'_>, l: &CpuLaunch, name: &str) {
        let track = self.thread(ctx, l.pid, l.tid);
        let args = match self.stack(ctx, l.stack) {
            Some(s) => vec![("stack", Arg::Stack(s))],
            None => Vec::new(),
        };
        let name = self.name(name);
        self.push(Event {
            track,
            start_ns: ctx.launch_ts(l),
            dur_ns: None,
            cat: "launch",
            name,
            args,
        });
    }

    pub(super) fn idle_slices(&mut self, ctx: &Context<'_>, idle: &IdleFolder) {
        for s in idle.slices() {
            let k = s.stream;
            let (device, stream) = (k.device_key().device_or_max(), k.stream_or_max());
            let track = self.gpu_track(k.pid, device, stream, false);
            let leaf = IdleFolder::leaf(ctx, s.stack, s.api).unwrap_or("");
            let api = s.api.map_or("", |a| ctx.strings.get(a));
            let args = vec![
                ("blamed_frame", Arg::Str(self.name(leaf))),
                ("api", Arg::Str(self.name(api))),
            ];
            let name = self.name(s.cause.label());
            self.push(Event {
                track,
                start_ns: s.start_ns,
                dur_ns: Some(s.end_ns.saturating_sub(s.start_ns)),
                cat: "idle",
                name,
                args,
            });
        }
        for &(key, start, end) in idle.device_gaps() {
            let (pid, device) = (key.pid, key.device_or_max());
            let gpid = device_pid(pid, device);
            self.gpu_track(pid, device, u32::MAX, false);
            let track = self.track(TrackKey::DeviceIdle(gpid), || {
                let t = Track {
                    pid: gpid,
                    tid: 0,
                    name: DEVICE_IDLE.to_owned(),
                    rank: Some(-1),
                    thread: false,
                    is_async: false,
                };
                (t, Packing::Nest)
            });
            if !self.extra.contains(&track) {
                self.extra.push(track);
            }
            let name = self.name(DEVICE_IDLE);
            self.push(Event {
                track,
                start_ns: start,
                dur_ns: Some(end.saturating_sub(start)),
                cat: "idle",
                name,
                args: Vec::new(),
            });
        }
    }

    pub(super) fn driver_items(
        &mut self,
        ctx: &Context<'_>,
        trace: &DriverTrace,
        calls: &[driver::Call],
    ) {
        // Async tracks by process and name, in the items' order (by lane).
        let mut named: FxHashMap<(u64, String), usize> = FxHashMap::default();
        // Each flow's two ends, by its key.
        let mut links: FxHashMap<u64, (Option<EventId>, Option<EventId>)> = FxHashMap::default();
        let mut link = |it: &driver::Item, id: EventId| match it.link {
            driver::Link::From(k) => links.entry(k).or_default().0 = Some(id),
            driver::Link::To(k) => links.entry(k).or_default().1 = Some(id),
            driver::Link::None => {}
        };
        for it in driver::timeline(trace, calls) {
            let (pid, name) = match &it.lane {
                Lane::Thread { pid, tid, .. } => {
                    let track = self.thread(ctx, *pid, *tid);
                    let id = self.driver_event(track, &it);
                    link(&it, id);
                    continue;
                }
                Lane::Driver { name, .. } => {
                    let p = self.process(DRIVER_PID, DRIVER_PID);
                    self.processes[p].name = driver::process_name(trace);
                    (DRIVER_PID, name)
                }
                Lane::Process { pid, name } => {
                    let pid = u64::from(*pid);
                    self.process(pid, pid);
                    (pid, name)
                }
            };
            let n = named.len();
            let i = *named.entry((pid, name.clone())).or_insert(n);
            let track = self.track(TrackKey::Async(pid, i), || {
                let t = Track {
                    pid,
                    tid: 0,
                    name: name.clone(),
                    rank: Some(i32::try_from(i).unwrap_or(i32::MAX)),
                    thread: false,
                    is_async: true,
                };
                (t, Packing::Nest)
            });
            if i == n {
                // Its tid, unused by the JSON's async events, is given last.
                self.extra.push(track);
            }
            let id = self.driver_event(track, &it);
            link(&it, id);
        }
        let mut flows: Vec<(EventId, EventId)> = links
            .into_values()
            .filter_map(|(from, to)| Some((from?, to?)))
            .collect();
        flows.sort_unstable();
        self.driver_flows = flows;
    }

    pub(super) fn driver_event(&mut self, track: TrackId, it: &driver::Item) -> EventId {
        let args = it
            .args
            .iter()
            .map(|(k, v)| (*k, Arg::Str(self.name(v))))
            .collect();
        let name = self.name(&it.name);
        self.push(Event {
            track,
            start_ns: it.start_ns,
            dur_ns: it.dur_ns,
            cat: "driver",
            name,
            args,
        })
    }
}

impl Sink for Builder {
    fn record(&mut self, ctx: &Context<'_>, rec: &Record, m: &Match<'_>) -> Result<()> {
        if let Some(idle) = self.idle.as_mut() {
            idle.record(ctx, rec, m)?;
        }
        if let Some(d) = self.driver.as_mut() {
            d.1.take(ctx, rec, m);
        }
        match rec {
            Record::Process(p) => {
                self.exes.insert(p.pid, p.exe.clone());
                self.seen(p.start_ns);
                self.process(u64::from(p.pid), u64::from(p.pid));
            }
            Record::Device(d) => {
                self.devices.insert((d.pid, d.id), d.name.clone());
            }
            Record::Api(a) => self.api(ctx, a, m),
            Record::Activity(a) => self.activity(ctx, a, m),
            Record::Note(n) => {
                let p = self.process(u64::from(n.pid), u64::from(n.pid));
                if !self.processes[p].labels.contains(&n.text) {
                    self.processes[p].labels.push(n.text.clone());
                }
            }
            Record::Nvtx(r) => self.nvtx(ctx, r),
            Record::Origin(o) => {
                if let Some(t) = origin_text(&o.origin) {
                    self.origins.insert(o.pid, t);
                }
            }
            Record::Dropped(_)
            | Record::Overhead(_)
            | Record::Module(_)
            | Record::Stack(_)
            | Record::CallStack(_)
            | Record::GraphNode(_)
            | Record::Thread(_)
            | Record::Autograd(_)
            | Record::PcSample(_)
            | Record::PcLaunches(_) => {}
        }
        Ok(())
    }

    fn pending(
        &mut self,
        ctx: &Context<'_>,
        launch: &CpuLaunch,
        _api: Option<&ApiInfo>,
    ) -> Result<()> {
        self.marker(ctx, launch, crate::write::PENDING_MARKER);
        Ok(())
    }

    fn captured(
        &mut self,
        ctx: &Context<'_>,
        launch: &CpuLaunch,
        _api: Option<&ApiInfo>,
    ) -> Result<()> {
        self.marker(ctx, launch, crate::write::CAPTURED_MARKER);
        Ok(())
    }

    fn finish(&mut self, ctx: &Context<'_>, summary: &Summary) -> Result<()> {
        if let Some(mut idle) = self.idle.take() {
            idle.finish(ctx, summary)?;
            self.idle_slices(ctx, &idle);
        }
        if let Some(d) = self.driver.take() {
            let (trace, calls) = *d;
            self.driver_items(ctx, &trace, &calls.into_calls());
        }
        self.done = Some(self.build(ctx, summary));
        Ok(())
    }
}

/// An API call as both its record and the work's match know it: (pid, tid,
/// start, end, name). Calls of one thread can share a start.
pub(super) type CallKey = (u32, u32, u64, u64, StringId);

pub(super) fn call_key(pid: u32, api: &ApiInfo) -> CallKey {
    (pid, api.tid, api.start_ns, api.end_ns, api.name)
}

/// A process's place in a distributed job, for its name: `rank 3 of 8 on n1`;
/// none for a process outside one: alone in its job, or rank 0 of a job of
/// unknown size (PyTorch's profiler writes a `distributedInfo` for any process
/// that set up torch.distributed).
fn origin_text(o: &Origin) -> Option<String> {
    let distributed = match o.world_size {
        Some(w) => w > 1,
        None => o.rank.is_some_and(|r| r > 0),
    };
    if !distributed {
        return None;
    }
    let rank = match (o.rank, o.world_size) {
        (Some(r), Some(w)) => format!("rank {r} of {w}"),
        (Some(r), None) => format!("rank {r}"),
        _ => return None,
    };
    Some(match &o.host {
        Some(h) => format!("{rank} on {h}"),
        None => rank,
    })
}
