//! Chrome-trace JSON (the Trace Event Format) for Perfetto and chrome://tracing.
//!
//! - CPU API calls are `X` slices on their process and thread; launches carry the
//!   CPU stack in `args.stack`.
//! - GPU work is on one track per (device, stream): a pseudo-process per (process,
//!   device), numbered `GPU_PID_BASE + device × 2^22 + pid`, with one thread per
//!   stream (tid = stream id). Metadata events name every process and thread.
//! - Synchronizations are on a track of their own next to their stream's
//!   (`stream N sync`, tid = [`SYNC_TID_BIT`] | stream id): a sync spans the GPU
//!   work it waits for, and slices on one track must nest. Those without a
//!   stream (context and event syncs) are on the `no stream` track.
//! - With [`Writer::with_idle_slices`], each stream's gaps are slices on its
//!   track, one per cause (`GPU idle: CPU late`, …, see [`crate::write::idle`]),
//!   with the blamed CPU frame and API call in `args`; each device's gaps (no
//!   stream busy) are on a track of their own (tid = [`DEVICE_IDLE_TID`]).
//! - Each activity with a known API call gets a flow arrow from the call to it.
//! - A wait on a CUDA event (an event sync, a stream's wait on an event) is
//!   named with the stream the event was recorded on, when the input says
//!   (`Stream Wait Event (stream 7)`), and gets a second arrow, from the
//!   `cudaEventRecord` call that recorded the event, when that call is known.
//! - With [`Writer::with_driver`], a recording's GPU driver events: ioctls
//!   inside the CUDA API call that made them, and a `GPU driver` pseudo-process
//!   with its rings, interrupts and Xid errors ([`crate::write::driver`]).
//! - Timestamps are µs relative to the first record, written from integer ns with
//!   three decimals, so sub-µs precision survives (absolute epoch µs would not fit
//!   a double's precision). `otherData.time_base_ns` holds the base.

use std::io::Write;

use rustc_hash::{FxHashMap, FxHashSet};

use crate::error::{Error, Result};
use crate::join::{ApiInfo, Context, Match, Sink, Summary};
use crate::model::{Activity, ActivityKind, Clock, Record, SyncWait, UNKNOWN_DEVICE};
use crate::read::cpu::{CpuLaunch, CpuTrace, StackId};
use crate::read::driver::DriverTrace;
use crate::write::demangle::Demangler;
use crate::write::driver::{self, Call, Calls, DRIVER_PID, Lane, PROCESS_TRACK_TID};
use crate::write::idle::{DEVICE_IDLE, IdleFolder};

/// First pid of the pseudo-processes that hold GPU tracks.
pub const GPU_PID_BASE: u64 = 1 << 30;

/// The tid of a device's idle track.
pub const DEVICE_IDLE_TID: u64 = 1 << 32;

/// The pid of the pseudo-process holding the tracks of `device` of `pid`.
pub fn gpu_pid(pid: u32, device: u32) -> u64 {
    GPU_PID_BASE + (u64::from(device.min(127)) << 22) + u64::from(pid & ((1 << 22) - 1))
}

/// Set in the tid of a stream's synchronization track.
pub const SYNC_TID_BIT: u64 = 1 << 31;

/// Writes a Chrome trace as the join streams records; a [`Sink`].
pub struct Writer<W: Write> {
    out: W,
    first: bool,
    base_ns: Option<u64>,
    next_flow: u64,
    named_threads: FxHashSet<(u64, u64)>,
    named_processes: FxHashSet<u64>,
    devices: FxHashMap<(u32, u32), String>,
    exes: FxHashMap<u32, String>,
    demangler: Demangler,
    // JSON-escaped stack texts by StackId: a launch's stack is written on its API
    // slice and on every activity it caused, so escape each stack once.
    stack_json: Vec<Option<std::rc::Rc<str>>>,
    idle: Option<Box<IdleFolder>>,
    driver: Option<Box<(DriverTrace, Calls)>>,
    err: Option<std::io::Error>,
}

impl<W: Write> Writer<W> {
    /// Starts the JSON document.
    pub fn new(mut out: W) -> Result<Self> {
        out.write_all(b"{\"traceEvents\":[\n")
            .map_err(|source| Error::Write {
                what: "Chrome trace",
                source,
            })?;
        Ok(Self {
            out,
            first: true,
            base_ns: None,
            next_flow: 1,
            named_threads: FxHashSet::default(),
            named_processes: FxHashSet::default(),
            devices: FxHashMap::default(),
            exes: FxHashMap::default(),
            demangler: Demangler::default(),
            stack_json: Vec::new(),
            idle: None,
            driver: None,
            err: None,
        })
    }

    /// Also draws the streams' and devices' idle time (see the module docs).
    pub fn with_idle_slices(mut self) -> Self {
        self.idle = Some(Box::new(IdleFolder::new().with_slices()));
        self
    }

    /// Also draws a recording's GPU driver events (see [`crate::write::driver`]).
    pub fn with_driver(mut self, trace: DriverTrace) -> Self {
        self.driver = Some(Box::new((trace, Calls::default())));
        self
    }

    fn driver_items(
        &mut self,
        ctx: &Context<'_>,
        trace: &DriverTrace,
        calls: &[Call],
    ) -> std::io::Result<()> {
        let items = driver::timeline(trace, calls);
        for it in &items {
            let (pid, tid) = match &it.lane {
                Lane::Thread { pid, tid, .. } => {
                    // Named as the API calls' threads are.
                    self.cpu_process(*pid)?;
                    let comm = ctx.cpu.and_then(|c| c.comms.get(&(*pid, *tid)));
                    let tname =
                        comm.map_or_else(|| format!("thread {tid}"), |c| format!("{c} ({tid})"));
                    self.name_thread(u64::from(*pid), u64::from(*tid), &tname)?;
                    (u64::from(*pid), u64::from(*tid))
                }
                Lane::Driver { order, name } => {
                    self.name_process(DRIVER_PID, &driver::process_name(trace), DRIVER_PID)?;
                    self.sorted_thread(DRIVER_PID, u64::from(*order), name)?
                }
                Lane::Process { pid, order, name } => {
                    self.cpu_process(*pid)?;
                    let tid = PROCESS_TRACK_TID + u64::from(*order);
                    self.sorted_thread(u64::from(*pid), tid, name)?
                }
            };
            let name = json(&it.name);
            let ts = self.ts(it.start_ns);
            let mut args = String::new();
            for (i, (k, v)) in it.args.iter().enumerate() {
                let sep = if i == 0 { "" } else { "," };
                args += &format!("{sep}\"{k}\":{}", json(v));
            }
            let out = self.event();
            match it.dur_ns {
                Some(d) => write!(
                    out,
                    r#""ph":"X","cat":"driver","name":{name},"pid":{pid},"tid":{tid},"ts":{ts},"dur":{},"args":{{{args}}}}}"#,
                    Us(i128::from(d))
                )?,
                None => write!(
                    out,
                    r#""ph":"i","s":"t","cat":"driver","name":{name},"pid":{pid},"tid":{tid},"ts":{ts},"args":{{{args}}}}}"#
                )?,
            }
        }
        Ok(())
    }

    /// A driver track: a thread named once, sorted by its tid.
    fn sorted_thread(&mut self, pid: u64, tid: u64, name: &str) -> std::io::Result<(u64, u64)> {
        if !self.named_threads.contains(&(pid, tid)) {
            self.name_thread(pid, tid, name)?;
            write!(
                self.event(),
                r#""ph":"M","name":"thread_sort_index","pid":{pid},"tid":{tid},"args":{{"sort_index":{tid}}}}}"#
            )?;
        }
        Ok((pid, tid))
    }

    fn idle_slices(&mut self, ctx: &Context<'_>, idle: &IdleFolder) -> std::io::Result<()> {
        for s in idle.slices() {
            let (pid, device, stream) = s.stream;
            let gpid = gpu_pid(pid, device);
            let (ts, dur) = (self.ts(s.start_ns), Us(i128::from(s.end_ns - s.start_ns)));
            let name = s.cause.label();
            let leaf = json(IdleFolder::leaf(ctx, s.stack, s.api).unwrap_or(""));
            let api = json(s.api.map_or("", |a| ctx.strings.get(a)));
            write!(
                self.event(),
                r#""ph":"X","cat":"idle","name":"{name}","pid":{gpid},"tid":{stream},"ts":{ts},"dur":{dur},"args":{{"blamed_frame":{leaf},"api":{api}}}}}"#
            )?;
        }
        for &((pid, device), start, end) in idle.device_gaps() {
            let gpid = gpu_pid(pid, device);
            self.name_thread(gpid, DEVICE_IDLE_TID, DEVICE_IDLE)?;
            let (ts, dur) = (self.ts(start), Us(i128::from(end - start)));
            write!(
                self.event(),
                r#""ph":"X","cat":"idle","name":"{DEVICE_IDLE}","pid":{gpid},"tid":{DEVICE_IDLE_TID},"ts":{ts},"dur":{dur},"args":{{}}}}"#
            )?;
        }
        Ok(())
    }

    /// Returns the underlying stream (after the join has finished the document).
    pub fn into_inner(self) -> W {
        self.out
    }

    fn ts(&mut self, ns: u64) -> Us {
        let base = *self.base_ns.get_or_insert(ns);
        Us(i128::from(ns) - i128::from(base))
    }

    /// Starts one event object: writes the separator and `{`.
    fn event(&mut self) -> &mut W {
        let sep: &[u8] = if self.first { b"{" } else { b",\n{" };
        self.first = false;
        if let Err(e) = self.out.write_all(sep) {
            self.err.get_or_insert(e);
        }
        &mut self.out
    }

    fn check(&mut self, r: std::io::Result<()>) -> Result<()> {
        if let Some(e) = self.err.take() {
            return Err(Error::Write {
                what: "Chrome trace",
                source: e,
            });
        }
        r.map_err(|source| Error::Write {
            what: "Chrome trace",
            source,
        })
    }

    fn name_process(&mut self, pid: u64, name: &str, sort: u64) -> std::io::Result<()> {
        if !self.named_processes.insert(pid) {
            return Ok(());
        }
        let name = json(name);
        write!(
            self.event(),
            r#""ph":"M","name":"process_name","pid":{pid},"tid":0,"args":{{"name":{name}}}}}"#
        )?;
        write!(
            self.event(),
            r#""ph":"M","name":"process_sort_index","pid":{pid},"tid":0,"args":{{"sort_index":{sort}}}}}"#
        )
    }

    fn name_thread(&mut self, pid: u64, tid: u64, name: &str) -> std::io::Result<()> {
        if !self.named_threads.insert((pid, tid)) {
            return Ok(());
        }
        let name = json(name);
        write!(
            self.event(),
            r#""ph":"M","name":"thread_name","pid":{pid},"tid":{tid},"args":{{"name":{name}}}}}"#
        )
    }

    /// A recorder's note ("simulated GPU: …", "not recorded: …") labels its process.
    fn note(&mut self, n: &crate::model::Note) -> std::io::Result<()> {
        self.cpu_process(n.pid)?;
        let (pid, label) = (n.pid, json(&n.text));
        write!(
            self.event(),
            r#""ph":"M","name":"process_labels","pid":{pid},"tid":0,"args":{{"labels":{label}}}}}"#
        )
    }

    fn cpu_process(&mut self, pid: u32) -> std::io::Result<()> {
        let name = match self.exes.get(&pid) {
            Some(exe) => format!("{exe} (pid {pid})"),
            None => format!("pid {pid}"),
        };
        self.name_process(u64::from(pid), &name, u64::from(pid))
    }

    fn api(
        &mut self,
        ctx: &Context<'_>,
        a: &crate::model::ApiCall,
        m: &Match<'_>,
    ) -> std::io::Result<()> {
        self.cpu_process(a.pid)?;
        let comm = ctx.cpu.and_then(|c| c.comms.get(&(a.pid, a.tid)));
        let tname = comm.map_or_else(
            || format!("thread {}", a.tid),
            |c| format!("{c} ({})", a.tid),
        );
        self.name_thread(u64::from(a.pid), u64::from(a.tid), &tname)?;
        let (ts, dur) = (
            self.ts(a.start_ns),
            Us(i128::from(a.end_ns.saturating_sub(a.start_ns))),
        );
        let name = json(ctx.strings.get(a.name));
        let (pid, tid, corr) = (a.pid, a.tid, a.correlation_id);
        let stack = self.launch_stack(ctx, m);
        let out = self.event();
        write!(
            out,
            r#""ph":"X","cat":"cuda_api","name":{name},"pid":{pid},"tid":{tid},"ts":{ts},"dur":{dur},"args":{{"correlation_id":{corr}"#
        )?;
        if let Some(stack) = stack {
            write!(out, r#","stack":{stack}"#)?;
        }
        out.write_all(b"}}")
    }

    fn activity(&mut self, ctx: &Context<'_>, a: &Activity, m: &Match<'_>) -> std::io::Result<()> {
        let gpid = gpu_pid(a.pid, a.device);
        let dev_name = self
            .devices
            .get(&(a.pid, a.device))
            .cloned()
            .unwrap_or_default();
        let pname = if a.device == UNKNOWN_DEVICE {
            format!("GPU ? (device unknown, pid {})", a.pid)
        } else {
            format!("GPU {} {dev_name} (pid {})", a.device, a.pid).replace("  ", " ")
        };
        self.name_process(gpid, &pname, GPU_PID_BASE + u64::from(a.device))?;
        let is_sync = matches!(a.kind, ActivityKind::Sync { .. });
        let (stream, tname) = match (a.stream, is_sync) {
            (u32::MAX, _) => (u64::from(a.stream), "no stream".to_owned()),
            (s, false) => (u64::from(s), format!("stream {s}")),
            (s, true) => (SYNC_TID_BIT | u64::from(s), format!("stream {s} sync")),
        };
        self.name_thread(gpid, stream, &tname)?;
        let (cat, name) = match a.kind {
            ActivityKind::Kernel { name, .. } => {
                ("kernel", self.demangler.get(name, ctx.strings).to_owned())
            }
            ActivityKind::Memcpy { kind, .. } => ("memcpy", format!("Memcpy {kind}")),
            ActivityKind::Memset { .. } => ("memset", "Memset".to_owned()),
            ActivityKind::Sync {
                sync_type,
                wait: Some(SyncWait {
                    stream: Some(s), ..
                }),
            } => ("sync", format!("{} (stream {s})", sync_name(sync_type))),
            ActivityKind::Sync { sync_type, .. } => ("sync", sync_name(sync_type).to_owned()),
        };
        let (ts, dur) = (self.ts(a.start_ns), Us(i128::from(a.duration_ns())));
        let name = json(&name);
        let corr = a.correlation_id;
        let stack = self.launch_stack(ctx, m);
        let out = self.event();
        write!(
            out,
            r#""ph":"X","cat":"{cat}","name":{name},"pid":{gpid},"tid":{stream},"ts":{ts},"dur":{dur},"args":{{"correlation_id":{corr},"device":{},"context":{}"#,
            a.device, a.context
        )?;
        match a.kind {
            ActivityKind::Kernel { grid, block, .. } => write!(
                out,
                r#","grid":[{},{},{}],"block":[{},{},{}]"#,
                grid[0], grid[1], grid[2], block[0], block[1], block[2]
            )?,
            ActivityKind::Memcpy {
                bytes,
                peer: Some(p),
                ..
            } => write!(
                out,
                r#","bytes":{bytes},"src_device":{},"dst_device":{}"#,
                p.src, p.dst
            )?,
            ActivityKind::Memcpy { bytes, .. } | ActivityKind::Memset { bytes, .. } => {
                write!(out, r#","bytes":{bytes}"#)?
            }
            ActivityKind::Sync { sync_type, wait } => {
                write!(out, r#","sync_type":{sync_type}"#)?;
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
                        write!(out, r#","{key}":{v}"#)?;
                    }
                }
            }
        }
        if a.graph_id != 0 {
            write!(
                out,
                r#","graph_id":{},"graph_node_id":{}"#,
                a.graph_id, a.graph_node_id
            )?;
        }
        if let Some(stack) = stack {
            write!(out, r#","stack":{stack}"#)?;
        }
        out.write_all(b"}}")?;
        if let Some(api) = m.api {
            self.flow("launch", a, api, gpid, stream)?;
        }
        if let Some(record) = m.wait_record {
            self.flow("event_wait", a, record, gpid, stream)?;
        }
        Ok(())
    }

    /// An arrow from the start of the API call to the start of the activity. (From
    /// the call's middle, the arrow of a synchronous copy, or of any launch whose
    /// work starts before the call returns, would run backwards in time.)
    /// Flow ids are unique across kinds: Perfetto joins the ends of a flow by id.
    fn flow(
        &mut self,
        kind: &str,
        a: &Activity,
        api: &ApiInfo,
        gpid: u64,
        stream: u64,
    ) -> std::io::Result<()> {
        let id = self.next_flow;
        self.next_flow += 1;
        let from = self.ts(api.start_ns);
        let to = self.ts(a.start_ns);
        let (pid, tid) = (a.pid, api.tid);
        write!(
            self.event(),
            r#""ph":"s","cat":"{kind}","name":"{kind}","id":{id},"pid":{pid},"tid":{tid},"ts":{from}}}"#
        )?;
        write!(
            self.event(),
            r#""ph":"f","bp":"e","cat":"{kind}","name":"{kind}","id":{id},"pid":{gpid},"tid":{stream},"ts":{to}}}"#
        )
    }

    /// The JSON text of the matched launch's CPU stack, when there is one.
    fn launch_stack(&mut self, ctx: &Context<'_>, m: &Match<'_>) -> Option<std::rc::Rc<str>> {
        m.stack().zip(ctx.cpu).map(|(s, c)| self.stack_json(c, s))
    }

    fn stack_json(&mut self, cpu: &CpuTrace, id: StackId) -> std::rc::Rc<str> {
        let i = id.index();
        if self.stack_json.len() <= i {
            self.stack_json.resize(i + 1, None);
        }
        self.stack_json[i]
            .get_or_insert_with(|| json(cpu.stacks.text(id)).into())
            .clone()
    }

    fn pending_launch(
        &mut self,
        ctx: &Context<'_>,
        l: &CpuLaunch,
        name: &str,
    ) -> std::io::Result<()> {
        self.cpu_process(l.pid)?;
        let ts = self.ts(ctx.launch_ts(l));
        let stack = ctx
            .cpu
            .map_or_else(|| "null".into(), |c| self.stack_json(c, l.stack));
        let (pid, tid) = (l.pid, l.tid);
        write!(
            self.event(),
            r#""ph":"i","s":"t","cat":"launch","name":"{name}","pid":{pid},"tid":{tid},"ts":{ts},"args":{{"stack":{stack}}}}}"#
        )
    }
}

impl<W: Write> Sink for Writer<W> {
    fn record(&mut self, ctx: &Context<'_>, rec: &Record, m: &Match<'_>) -> Result<()> {
        if let Some(idle) = self.idle.as_mut() {
            idle.record(ctx, rec, m)?;
        }
        if let Some(d) = self.driver.as_mut() {
            d.1.take(ctx, rec, m);
        }
        let r = match rec {
            Record::Process(p) => {
                self.exes.insert(p.pid, p.exe.clone());
                let _ = self.ts(p.start_ns);
                self.named_processes.remove(&u64::from(p.pid));
                self.cpu_process(p.pid)
            }
            Record::Device(d) => {
                self.devices.insert((d.pid, d.id), d.name.clone());
                Ok(())
            }
            Record::Api(a) => self.api(ctx, a, m),
            Record::Activity(a) => self.activity(ctx, a, m),
            Record::Note(n) => self.note(n),
            Record::Dropped(_)
            | Record::Overhead(_)
            | Record::Module(_)
            | Record::Stack(_)
            | Record::CallStack(_)
            | Record::GraphNode(_)
            | Record::Thread(_) => Ok(()),
        };
        self.check(r)
    }

    fn pending(
        &mut self,
        ctx: &Context<'_>,
        launch: &CpuLaunch,
        _api: Option<&ApiInfo>,
    ) -> Result<()> {
        let r = self.pending_launch(ctx, launch, crate::write::PENDING_MARKER);
        self.check(r)
    }

    fn captured(
        &mut self,
        ctx: &Context<'_>,
        launch: &CpuLaunch,
        _api: Option<&ApiInfo>,
    ) -> Result<()> {
        let r = self.pending_launch(ctx, launch, crate::write::CAPTURED_MARKER);
        self.check(r)
    }

    fn finish(&mut self, ctx: &Context<'_>, summary: &Summary) -> Result<()> {
        if let Some(mut idle) = self.idle.take() {
            idle.finish(ctx, summary)?;
            let r = self.idle_slices(ctx, &idle);
            self.check(r)?;
        }
        if let Some(d) = self.driver.take() {
            let (trace, calls) = *d;
            let r = self.driver_items(ctx, &trace, &calls.into_calls());
            self.check(r)?;
        }
        let clock = match ctx.clock {
            Clock::Monotonic => "CLOCK_MONOTONIC",
            Clock::Realtime => "CLOCK_REALTIME",
        };
        let base = self.base_ns.unwrap_or(0);
        let notes = json_list(&summary.notes);
        let r = write!(
            self.out,
            "\n],\"displayTimeUnit\":\"ns\",\"otherData\":{{\"generator\":\"gpuperf\",\"clock\":\"{clock}\",\"time_base_ns\":{base},\"kernels\":{},\"kernels_matched\":{},\"notes\":{notes}}}}}\n",
            summary.kernels, summary.kernels_matched
        )
        .and_then(|()| self.out.flush());
        self.check(r)
    }
}

/// A synchronization's slice name, by CUPTI's `CUpti_ActivitySynchronizationType`.
pub(crate) fn sync_name(sync_type: u8) -> &'static str {
    match sync_type {
        1 => "Event Synchronize",
        2 => "Stream Wait Event",
        3 => "Stream Synchronize",
        4 => "Context Synchronize",
        _ => "Synchronize",
    }
}

/// A signed ns count printed as µs with three decimals.
#[derive(Copy, Clone)]
struct Us(i128);

impl std::fmt::Display for Us {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let sign = if self.0 < 0 { "-" } else { "" };
        let v = self.0.unsigned_abs();
        write!(f, "{sign}{}.{:03}", v / 1000, v % 1000)
    }
}

fn json(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

fn json_list(v: &[String]) -> String {
    serde_json::to_string(v).unwrap_or_else(|_| "[]".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn microseconds_keep_nanoseconds() {
        assert_eq!(Us(1_234_567).to_string(), "1234.567");
        assert_eq!(Us(-5).to_string(), "-0.005");
        assert_eq!(Us(0).to_string(), "0.000");
    }
}
