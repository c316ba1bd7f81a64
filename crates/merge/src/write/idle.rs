//! Why the GPU waits: each stream's idle time, charged to the CPU code that made
//! it wait, as folded stacks (`stack;api;[GPU_Idle: cause] weight`, µs).
//!
//! For every (process, device, stream), GPU work items (kernels, copies, memsets)
//! are taken in start order; a gap is the time between the end of the work done
//! so far and the start of the next item, within the stream's active span. Each
//! gap is charged to the stack of the API call that launched the item ending it,
//! split by cause:
//!
//! - `[GPU_Idle: CPU late]`: from the stream going idle to the launch call's
//!   start, the launching thread was doing something else;
//! - `[GPU_Idle: host sync]`: the part of that time the launching thread spent in
//!   a synchronization call (`cudaStreamSynchronize`, `cudaDeviceSynchronize`, …)
//!   that ended after the stream went idle; charged to the sync call's stack;
//! - `[GPU_Idle: launch latency]`: from the later of the stream going idle and
//!   the call's start, to the work's start (launch overhead, or a dependency on
//!   other work).
//!
//! Gaps before a stream's first item and after its last are not idle time of the
//! stream (the trace's edges). Work with no API call in the trace charges its
//! whole gap to `[no CPU stack]` as launch latency. The per-stream totals are
//! exact sums in ns ([`IdleFolder::streams`]); the folded weights are rounded to
//! µs so that their total is the exact total, rounded.
//!
//! # Compared with Holistic Trace Analysis
//!
//! HTA's `get_idle_time_breakdown` (`hta/analyzers/breakdown_analysis.py`,
//! version 0.5.0) computes, per stream of one rank:
//!
//! | | HTA | gpuperf |
//! |---|---|---|
//! | work | kernels, copies, memsets launched by a CPU event of the trace | kernels, copies, memsets; work with no launch in the trace counts too (its gap is charged to `[no CPU stack]`) |
//! | streams | keyed by stream id only | keyed by (process, device, stream) |
//! | a gap | `start − end` of the previous item in start order; an overlap of consecutive items counts negative | `start −` the latest end of the items before it; time with any work on the stream is not idle |
//! | times | rounds fractional-µs timestamps: start up, end down to the µs (unless `HTA_DISABLE_NS_ROUNDING=1`), each gap grows by up to 2 µs | the trace's times, in ns |
//! | host wait | the whole gap, when the launch call started after the previous item's end | the same gaps' total: [`StreamIdle::host_wait_ns`]; within it, the CPU-late and host-sync parts, and the launch latency after the call |
//! | kernel wait | the other gaps shorter than `consecutive_kernel_delay` (default 30, in the trace's µs) | launch latency |
//! | other | the remaining gaps | launch latency |
//!
//! So, with HTA's rounding disabled and on a stream where every item has its
//! launch in the trace, gpuperf's idle time is HTA's total plus the overlaps of
//! consecutive items, and its host wait is HTA's. The tests check this on every
//! real PyTorch trace the repository ships (consecutive items of the vLLM B200
//! trace overlap by 69 µs in all; the others not at all), and check the Nsight
//! Systems trace against a SQL computation of the same definition.

use std::io::Write;

use rustc_hash::FxHashMap;

use crate::error::{Error, Result};
use crate::join::{Context, Match, Sink, Summary};
use crate::model::{ActivityKind, Record, StringId};
use crate::read::cpu::StackId;
use crate::write::folded::{push_stack, round_per_group};

/// Why a stream was idle before a piece of work.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Cause {
    /// The launching thread called the launch after the stream went idle.
    CpuLate,
    /// The launching thread was waiting in a synchronization call.
    HostSync,
    /// The call came in time; the work started late.
    LaunchLatency,
}

impl Cause {
    /// The folded frame naming the cause.
    pub fn frame(self) -> &'static str {
        match self {
            Self::CpuLate => "[GPU_Idle: CPU late]",
            Self::HostSync => "[GPU_Idle: host sync]",
            Self::LaunchLatency => "[GPU_Idle: launch latency]",
        }
    }

    /// The timeline's slice name.
    pub fn label(self) -> &'static str {
        match self {
            Self::CpuLate => "GPU idle: CPU late",
            Self::HostSync => "GPU idle: host sync",
            Self::LaunchLatency => "GPU idle: launch latency",
        }
    }
}

/// The timelines' name of a device's gaps, and of their track.
pub const DEVICE_IDLE: &str = "GPU idle (no stream busy)";

/// One piece of GPU work and the call that launched it.
#[derive(Copy, Clone, Debug)]
struct Work {
    start: u64,
    end: u64,
    /// (start, thread) of the launching call.
    call: Option<(u64, u32)>,
    stack: Option<StackId>,
    api: Option<StringId>,
}

/// A synchronization call on a thread: (start, end, stack, API).
type SyncCall = (u64, u64, Option<StackId>, Option<StringId>);

/// Idle time of one stream.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct StreamIdle {
    /// From the first work's start to the last work's end, ns.
    pub span_ns: u64,
    /// Time with no work on the stream within the span, ns.
    pub idle_ns: u64,
    /// `idle_ns` by cause: CPU late, host sync, launch latency.
    pub by_cause_ns: [u64; 3],
    /// Number of gaps.
    pub gaps: u64,
    /// The whole of the gaps whose launch call started after the stream went
    /// idle (their CPU-late and host-sync parts and the latency after the
    /// call): HTA's "host wait". The rest of `idle_ns` is HTA's "kernel wait"
    /// and "other".
    pub host_wait_ns: u64,
}

/// Idle time of one device: no stream of the device busy (what users mean by
/// "the GPU is idle").
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceIdle {
    /// From the device's first work's start to its last work's end, ns.
    pub span_ns: u64,
    /// Time within the span with no work on any of its streams, ns.
    pub idle_ns: u64,
    /// Number of gaps.
    pub gaps: u64,
}

/// One piece of a stream's gap with one cause, for the timeline.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct IdleSlice {
    /// (pid, device, stream).
    pub stream: (u32, u32, u32),
    /// Start, ns.
    pub start_ns: u64,
    /// End, ns.
    pub end_ns: u64,
    /// Why.
    pub cause: Cause,
    /// The blamed CPU stack: the launch's, or the sync call's.
    pub stack: Option<StackId>,
    /// The blamed API call's name.
    pub api: Option<StringId>,
}

/// Collects GPU work per stream and charges its gaps; a [`Sink`].
#[derive(Default)]
pub struct IdleFolder {
    work: FxHashMap<(u32, u32, u32), Vec<Work>>,
    syncs: FxHashMap<(u32, u32), Vec<SyncCall>>,
    acc: FxHashMap<(Option<StackId>, Option<StringId>, Cause), u64>,
    streams: Vec<((u32, u32, u32), StreamIdle)>,
    devices: Vec<((u32, u32), DeviceIdle)>,
    lines: Vec<(String, u64)>,
    keep_slices: bool,
    slices: Vec<IdleSlice>,
    device_gaps: Vec<((u32, u32), u64, u64)>,
}

impl IdleFolder {
    /// An empty idle folder.
    pub fn new() -> Self {
        Self::default()
    }

    /// Also keeps each gap's pieces ([`IdleFolder::slices`]) and each device's
    /// gaps ([`IdleFolder::device_gaps`]), for a timeline.
    pub fn with_slices(mut self) -> Self {
        self.keep_slices = true;
        self
    }

    /// The pieces of every stream's gaps, by stream and time, when
    /// [`IdleFolder::with_slices`] asked for them. Valid after the join.
    pub fn slices(&self) -> &[IdleSlice] {
        &self.slices
    }

    /// Every device's gaps: ((pid, device), start, end), by device and time,
    /// when [`IdleFolder::with_slices`] asked for them. Valid after the join.
    pub fn device_gaps(&self) -> &[((u32, u32), u64, u64)] {
        &self.device_gaps
    }

    /// Idle time per (pid, device), sorted. Valid after the join.
    pub fn devices(&self) -> &[((u32, u32), DeviceIdle)] {
        &self.devices
    }

    /// The blamed frame of a stack: its last frame other than the API call's.
    pub fn leaf<'a>(
        ctx: &Context<'a>,
        stack: Option<StackId>,
        api: Option<StringId>,
    ) -> Option<&'a str> {
        let text = ctx.cpu?.stacks.text(stack?);
        let api = api.map(|a| ctx.strings.get(a));
        let mut frames = text.rsplit(';');
        let last = frames.next()?;
        if Some(last) == api {
            frames.next()
        } else {
            Some(last)
        }
    }

    /// Idle time per (pid, device, stream), sorted. Valid after the join.
    pub fn streams(&self) -> &[((u32, u32, u32), StreamIdle)] {
        &self.streams
    }

    /// The folded lines, sorted, with µs weights. Valid after the join.
    pub fn lines(&self) -> &[(String, u64)] {
        &self.lines
    }

    /// Writes `stack weight` lines.
    pub fn write<W: Write>(&self, mut out: W) -> Result<()> {
        let err = |source| Error::Write {
            what: "idle folded stacks",
            source,
        };
        for (stack, w) in &self.lines {
            writeln!(out, "{stack} {w}").map_err(err)?;
        }
        out.flush().map_err(err)
    }

    fn charge(&mut self, stack: Option<StackId>, api: Option<StringId>, cause: Cause, ns: u64) {
        if ns > 0 {
            *self.acc.entry((stack, api, cause)).or_default() += ns;
        }
    }

    /// Charges `ns` to `cause`, and keeps the piece `[from, to)` for the
    /// timeline when asked to.
    fn piece(
        &mut self,
        key: (u32, u32, u32),
        (from, to): (u64, u64),
        stack: Option<StackId>,
        api: Option<StringId>,
        cause: Cause,
    ) {
        self.charge(stack, api, cause, to - from);
        if self.keep_slices && to > from {
            self.slices.push(IdleSlice {
                stream: key,
                start_ns: from,
                end_ns: to,
                cause,
                stack,
                api,
            });
        }
    }

    /// Charges the gap before `w`, which starts `gap` ns after the stream went
    /// idle at `idle_from`; returns the split by cause.
    fn gap(
        &mut self,
        key: (u32, u32, u32),
        w: &Work,
        idle_from: u64,
        thread_syncs: Option<&[SyncCall]>,
    ) -> [u64; 3] {
        let gap = w.start - idle_from;
        let Some((call_start, _)) = w.call else {
            self.piece(key, (idle_from, w.start), None, None, Cause::LaunchLatency);
            return [0, 0, gap];
        };
        // The call's start, within the gap.
        let late_until = call_start.clamp(idle_from, w.start);
        // The last sync call on the thread that ended in the late part: the
        // thread waited there until it ended.
        let sync = thread_syncs.and_then(|s| {
            let i = s.partition_point(|c| c.1 <= late_until);
            i.checked_sub(1).map(|i| s[i]).filter(|c| c.1 > idle_from)
        });
        let (sync_from, sync_to) = sync.map_or((late_until, late_until), |c| {
            (c.0.max(idle_from), c.1.min(late_until))
        });
        self.piece(key, (idle_from, sync_from), w.stack, w.api, Cause::CpuLate);
        if let Some((_, _, s_stack, s_api)) = sync {
            self.piece(key, (sync_from, sync_to), s_stack, s_api, Cause::HostSync);
        }
        self.piece(key, (sync_to, late_until), w.stack, w.api, Cause::CpuLate);
        self.piece(
            key,
            (late_until, w.start),
            w.stack,
            w.api,
            Cause::LaunchLatency,
        );
        let sync = sync_to - sync_from;
        [late_until - idle_from - sync, sync, w.start - late_until]
    }

    /// Each device's gaps: time with no work on any of its streams.
    fn device_idle(&mut self) {
        let mut by_device: FxHashMap<(u32, u32), Vec<(u64, u64)>> = FxHashMap::default();
        for (&(pid, device, _), work) in &self.work {
            by_device
                .entry((pid, device))
                .or_default()
                .extend(work.iter().map(|w| (w.start, w.end)));
        }
        let mut devices: Vec<_> = by_device.into_iter().collect();
        devices.sort_unstable_by_key(|d| d.0);
        for (key, mut items) in devices {
            items.sort_unstable();
            let mut idle = DeviceIdle::default();
            let mut busy_until = items[0].1;
            for &(start, end) in &items[1..] {
                if start > busy_until {
                    idle.idle_ns += start - busy_until;
                    idle.gaps += 1;
                    if self.keep_slices {
                        self.device_gaps.push((key, busy_until, start));
                    }
                }
                busy_until = busy_until.max(end);
            }
            idle.span_ns = busy_until - items[0].0;
            self.devices.push((key, idle));
        }
    }
}

impl Sink for IdleFolder {
    fn record(&mut self, _ctx: &Context<'_>, rec: &Record, m: &Match<'_>) -> Result<()> {
        let Record::Activity(a) = rec else {
            return Ok(());
        };
        if let ActivityKind::Sync { .. } = a.kind {
            if let Some(api) = m.api {
                self.syncs.entry((a.pid, api.tid)).or_default().push((
                    api.start_ns,
                    api.end_ns,
                    m.stack(),
                    Some(api.name),
                ));
            }
            return Ok(());
        }
        let c = m.charge();
        self.work
            .entry((a.pid, a.device, a.stream))
            .or_default()
            .push(Work {
                start: a.start_ns,
                end: a.end_ns.max(a.start_ns),
                call: m.api.map(|c| (c.start_ns, c.tid)),
                stack: c.stack,
                api: c.api,
            });
        Ok(())
    }

    fn finish(&mut self, ctx: &Context<'_>, _summary: &Summary) -> Result<()> {
        for s in self.syncs.values_mut() {
            // By end, for the search of the last one to end before a launch.
            s.sort_unstable_by_key(|c| (c.1, c.0));
        }
        let syncs = std::mem::take(&mut self.syncs);
        self.device_idle();
        let mut keys: Vec<(u32, u32, u32)> = self.work.keys().copied().collect();
        keys.sort_unstable();
        for key in keys {
            let mut work = self.work.remove(&key).unwrap_or_default();
            work.sort_unstable_by_key(|w| (w.start, w.end));
            let mut idle = StreamIdle::default();
            let mut busy_until = work[0].end;
            for w in &work[1..] {
                if w.start > busy_until {
                    let thread_syncs = w
                        .call
                        .and_then(|(_, tid)| syncs.get(&(key.0, tid)))
                        .map(Vec::as_slice);
                    let split = self.gap(key, w, busy_until, thread_syncs);
                    for (t, s) in idle.by_cause_ns.iter_mut().zip(split) {
                        *t += s;
                    }
                    idle.idle_ns += w.start - busy_until;
                    idle.gaps += 1;
                    if split[0] + split[1] > 0 {
                        idle.host_wait_ns += w.start - busy_until;
                    }
                }
                busy_until = busy_until.max(w.end);
            }
            idle.span_ns = busy_until - work[0].start;
            self.streams.push((key, idle));
        }
        let mut lines: Vec<(String, u64)> = self
            .acc
            .iter()
            .map(|(&(stack, api, cause), &ns)| {
                let mut text = String::new();
                push_stack(&mut text, ctx, stack, api);
                text.push(';');
                text.push_str(cause.frame());
                (text, ns)
            })
            .collect();
        lines.sort_unstable();
        // Equal texts (two API ids spelling one name) merge.
        lines.dedup_by(|b, a| {
            let same = a.0 == b.0;
            if same {
                a.1 += b.1;
            }
            same
        });
        // Rounded so that the total is the exact total rounded to the µs.
        let grouped: Vec<(String, u64, usize)> =
            lines.into_iter().map(|(t, ns)| (t, ns, 0)).collect();
        let weights = round_per_group(&grouped, 1);
        self.lines = grouped
            .into_iter()
            .zip(weights)
            .map(|((t, _, _), w)| (t, w))
            .filter(|l| l.1 > 0)
            .collect();
        self.acc = FxHashMap::default();
        Ok(())
    }
}
