//! What is read: API calls, kernels, copies, memsets and synchronizations
//! become the [`model`](crate::model)'s records, each activity in the process of
//! its API call.

use rustc_hash::{FxHashMap, FxHashSet};

use crate::model::{
    Activity, ActivityKind, ApiCall, ApiDomain, Device, MemcpyKind, Origin, PeerDevices, Process,
    ProcessOrigin, Record, SyncWait, api_base_name, is_launch_api,
};

use super::event::{Args, frame_text, number_text, parse_int, parse_u32, sync_type};
use super::{ApiRef, Builder, Owners, Slice, What};

impl Builder<'_> {
    /// A runtime or driver API call.
    pub(super) fn api_event(&mut self, x: &Slice<'_, '_>, domain: ApiDomain) {
        let (args, name, at) = (x.args, x.name, x.at);
        let (Some(pid), Some(tid)) = (parse_u32(x.ev.pid), self.tid(x.ev.tid)) else {
            return self.bad(
                at,
                format!("`{}` event without a valid `pid` and `tid`", x.cat),
            );
        };
        let Some(correlation_id) = parse_u32(args.correlation) else {
            return self.bad(
                at,
                format!("`{name}` call without a valid `args.correlation`"),
            );
        };
        let (name_id, frame, launch) = match self.api_names.get(name) {
            Some(&known) => known,
            None => {
                let base = api_base_name(name);
                let known = (
                    self.strings.intern(base),
                    self.frames.intern(&frame_text(base)).0,
                    is_launch_api(base),
                );
                self.api_names.insert(name.into(), known);
                known
            }
        };
        self.apis.push(ApiRef {
            pid,
            tid,
            start: x.start,
            correlation_id,
            frame,
            launch,
        });
        self.records.push(Record::Api(ApiCall {
            pid,
            tid,
            start_ns: x.start,
            end_ns: x.end,
            correlation_id,
            cbid: parse_u32(args.cbid).unwrap_or(0),
            domain,
            name: name_id,
        }));
    }

    /// A kernel, copy, memset or synchronization on the GPU side.
    pub(super) fn activity_event(&mut self, x: &Slice<'_, '_>, what: What) {
        let (args, name, at) = (x.args, x.name, x.at);
        let Some(correlation_id) = parse_u32(args.correlation) else {
            return self.bad(
                at,
                format!("`{}` event without a valid `args.correlation`", x.cat),
            );
        };
        // All ones is CUPTI's "unknown" device and "no stream".
        let mut device = parse_u32(args.device).filter(|&d| d != u32::MAX);
        let mut context = parse_u32(args.context);
        let mut stream = Some(parse_u32(args.stream).unwrap_or(0)).filter(|&s| s != u32::MAX);
        let mut sync = false;
        let kind = match what {
            What::Kernel => ActivityKind::Kernel {
                name: self.strings.intern(name),
                grid: args.grid.unwrap_or_default(),
                block: args.block.unwrap_or_default(),
            },
            What::Memcpy => {
                device = device.or(parse_u32(args.in_device));
                context = context.or(parse_u32(args.in_context));
                self.memcpy_kind(x)
            }
            What::Memset => ActivityKind::Memset {
                bytes: parse_int(args.bytes).map_or(0, |b| b.max(0) as u64),
                value: 0,
            },
            _ => {
                // No stream (context and event syncs): `-1`, or CUPTI's
                // all-ones in older traces.
                stream = parse_int(args.stream)
                    .and_then(|s| u32::try_from(s).ok())
                    .filter(|&s| s != u32::MAX);
                if device.is_none() {
                    self.syncs_without_device += 1;
                }
                sync = true;
                self.sync_kind(x)
            }
        };
        let (graph_id, graph_node_id) = self.graph_ids(x);
        self.activities.push(self.records.len());
        self.records.push(Record::Activity(Activity {
            pid: 0,
            start_ns: x.start,
            end_ns: x.end,
            correlation_id,
            // GPU work without a device ran on the first; a sync's is unknown.
            device: if sync { device } else { device.or(Some(0)) },
            context: context.unwrap_or(0),
            stream,
            graph_id,
            graph_node_id,
            kind,
        }));
    }

    pub(super) fn memcpy_kind(&mut self, x: &Slice<'_, '_>) -> ActivityKind {
        let args = x.args;
        // A peer-to-peer copy names its devices `fromDevice` and `toDevice`, and
        // the one that ran it `inDevice`.
        let peer = match (parse_u32(args.from_device), parse_u32(args.to_device)) {
            (Some(src), Some(dst)) => Some(PeerDevices { src, dst }),
            (None, None) => None,
            _ => {
                self.bad(
                    x.at,
                    "peer-to-peer copy naming one device of two: read as a copy on one device"
                        .into(),
                );
                None
            }
        };
        ActivityKind::Memcpy {
            // "Memcpy HtoD (Pageable -> Device)"
            kind: x
                .name
                .split_whitespace()
                .nth(1)
                .and_then(MemcpyKind::from_name)
                .unwrap_or(MemcpyKind::Unknown),
            bytes: parse_int(args.bytes).map_or(0, |b| b.max(0) as u64),
            peer,
        }
    }

    /// A sync's kind and wait; the record about to be pushed is noted as a sync.
    pub(super) fn sync_kind(&mut self, x: &Slice<'_, '_>) -> ActivityKind {
        let kind = x.args.cuda_sync_kind.as_deref().unwrap_or(x.name);
        let sync_type = sync_type(kind).unwrap_or_else(|| {
            self.unknown_sync_kinds += 1;
            0
        });
        self.syncs.push(self.records.len());
        let wait = self.sync_wait(x.args, x.at);
        ActivityKind::Sync { sync_type, wait }
    }

    /// The CUDA graph and node an activity ran from, each `None` when none
    /// (0 is CUDA's "none" too).
    pub(super) fn graph_ids(&mut self, x: &Slice<'_, '_>) -> (Option<u32>, Option<u64>) {
        let (g, n) = (x.args.graph_id, x.args.graph_node_id);
        if g.is_none() && n.is_none() {
            return (None, None);
        }
        let id = g.map(|g| number_text(g).parse::<u32>().ok());
        let node = n.map(|n| number_text(n).parse::<u64>().ok());
        if matches!(id, Some(None)) || matches!(node, Some(None)) {
            self.bad(
                x.at,
                format!("`{}` event whose `graph id` or `graph node id` is not a number: read as not from a graph", x.cat),
            );
            return (None, None);
        }
        (
            id.flatten().filter(|&g| g != 0),
            node.flatten().filter(|&n| n != 0),
        )
    }

    /// The event a sync waited on (`args.wait_on_…`), when the event names any
    /// of it. `-1` is Kineto's "not known"; a value that is not an integer is
    /// reported and read as not known.
    pub(super) fn sync_wait(&mut self, args: &Args<'_>, at: u64) -> Option<SyncWait> {
        let fields = [
            ("wait_on_stream", args.wait_on_stream),
            (
                "wait_on_cuda_event_record_corr_id",
                args.wait_on_cuda_event_record_corr_id,
            ),
            ("wait_on_cuda_event_id", args.wait_on_cuda_event_id),
        ];
        if fields.iter().all(|(_, v)| v.is_none()) {
            return None;
        }
        let [stream, record, event] = fields.map(|(key, raw)| {
            let raw = raw?;
            match number_text(raw).parse::<i64>() {
                Ok(-1) => None,
                Ok(v) if (0..=i64::from(u32::MAX)).contains(&v) => Some(v as u32),
                _ => {
                    self.bad(
                        at,
                        format!(
                            "`cuda_sync` event whose `args.{key}` is not an id: read as not known"
                        ),
                    );
                    None
                }
            }
        });
        self.waits += 1;
        Some(SyncWait {
            stream,
            record_correlation_id: record,
            event_id: event,
        })
    }

    /// Activities take the process of their API call; those without one go to
    /// the process that made the most calls.
    pub(super) fn assign_pids(&mut self) -> Owners {
        let mut pid_of: FxHashMap<u32, u32> = FxHashMap::default();
        let mut calls: FxHashMap<u32, usize> = FxHashMap::default();
        for a in &self.apis {
            pid_of.entry(a.correlation_id).or_insert(a.pid);
            *calls.entry(a.pid).or_default() += 1;
        }
        let main_pid = calls
            .iter()
            .max_by_key(|(p, n)| (**n, std::cmp::Reverse(**p)))
            .map(|(p, _)| *p)
            .or_else(|| self.process_names.keys().min().copied())
            .unwrap_or(0);
        let mut with_work: FxHashSet<(u32, u32)> = FxHashSet::default();
        let mut kernels: FxHashMap<(u32, u32), u64> = FxHashMap::default();
        for &i in &self.activities {
            if let Record::Activity(a) = &mut self.records[i] {
                a.pid = pid_of.get(&a.correlation_id).copied().unwrap_or(main_pid);
                with_work.insert((a.pid, a.correlation_id));
                if let ActivityKind::Kernel { .. } = a.kind {
                    *kernels.entry((a.pid, a.correlation_id)).or_default() += 1;
                }
            }
        }
        Owners {
            pid_of,
            calls,
            main_pid,
            with_work,
            kernels,
        }
    }

    /// What the user should know about the trace's synchronizations.
    pub(super) fn sync_notes(&self, owners: &Owners) -> Vec<String> {
        let (pid_of, main_pid) = (&owners.pid_of, owners.main_pid);
        let mut notes = Vec::new();
        let orphan_syncs = self
            .syncs
            .iter()
            .filter(|&&i| {
                matches!(&self.records[i], Record::Activity(a) if !pid_of.contains_key(&a.correlation_id))
            })
            .count();
        if orphan_syncs > 0 {
            notes.push(format!(
                "{orphan_syncs} of {} synchronization events have no API call with their correlation id in the trace: shown in process {main_pid}, on their GPU track only",
                self.syncs.len()
            ));
        }
        if self.syncs_without_device > 0 {
            notes.push(format!(
                "{} of {} synchronization events name no device: shown on the timeline's `GPU ?` track",
                self.syncs_without_device,
                self.syncs.len()
            ));
        }
        if self.unknown_sync_kinds > 0 {
            notes.push(format!(
                "{} of {} synchronization events are of a kind gpuperf does not know: read as CUPTI's unknown type (0)",
                self.unknown_sync_kinds,
                self.syncs.len()
            ));
        }
        // An event wait's recording call is found by the join on the wait's
        // process and the call's correlation id.
        let (mut unknown_record, mut missing_record) = (0u64, 0u64);
        for &i in &self.syncs {
            if let Record::Activity(Activity {
                pid,
                kind: ActivityKind::Sync { wait: Some(w), .. },
                ..
            }) = &self.records[i]
            {
                match w.record_correlation_id {
                    None => unknown_record += 1,
                    Some(c) if pid_of.get(&c) != Some(pid) => missing_record += 1,
                    Some(_) => {}
                }
            }
        }
        if unknown_record > 0 {
            notes.push(format!(
                "{unknown_record} of {} waits on a CUDA event do not name the call that recorded the event (recorded before tracing began): shown without an arrow from it",
                self.waits
            ));
        }
        if missing_record > 0 {
            notes.push(format!(
                "{missing_record} of {} waits on a CUDA event name a recording call (`cudaEventRecord`) that is not in the trace's process: shown without an arrow from it",
                self.waits
            ));
        }
        notes
    }

    /// Moves every record to the trace's base time, and returns the processes and
    /// devices followed by the events in file order.
    pub(super) fn head_records(&mut self, base: u64, owners: &Owners) -> Vec<Record> {
        let main_pid = owners.main_pid;
        // Processes and devices first, then the events in file order.
        let mut first = u64::MAX;
        for r in &mut self.records {
            match r {
                Record::Api(a) => {
                    a.start_ns = a.start_ns.saturating_add(base);
                    a.end_ns = a.end_ns.saturating_add(base);
                    first = first.min(a.start_ns);
                }
                Record::Activity(a) => {
                    a.start_ns = a.start_ns.saturating_add(base);
                    a.end_ns = a.end_ns.saturating_add(base);
                    first = first.min(a.start_ns);
                }
                _ => {}
            }
        }
        let first = if first == u64::MAX { base } else { first };
        let mut pids: Vec<u32> = owners.calls.keys().copied().collect();
        if pids.is_empty() && !self.activities.is_empty() {
            pids.push(main_pid);
        }
        pids.sort_unstable();
        let mut head = Vec::new();
        for &pid in &pids {
            head.push(Record::Process(Process {
                pid,
                ppid: None,
                exe: self.process_names.get(&pid).cloned().unwrap_or_default(),
                start_ns: first,
                start_realtime_ns: Some(first),
            }));
            if let Some(d) = &self.distributed {
                head.push(Record::Origin(ProcessOrigin {
                    pid,
                    origin: Origin {
                        rank: d.rank,
                        world_size: d.world_size,
                        ..Origin::default()
                    },
                }));
            }
            for (i, d) in self.devices.iter().enumerate() {
                head.push(Record::Device(Device {
                    pid,
                    id: d.id.unwrap_or(i as u32),
                    name: d.name.clone().unwrap_or_default(),
                    compute_capability: (d.major.unwrap_or(0), d.minor.unwrap_or(0)),
                }));
            }
        }
        head.append(&mut self.records);

        head
    }
}
