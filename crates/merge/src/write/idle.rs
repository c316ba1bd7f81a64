//! Why the GPU waits: each stream's idle time, charged to the CPU code that made
//! it wait, as folded stacks (`stack;api;[GPU_Idle: cause] weight`, µs).
//!
//! For every stream ([`StreamKey`]: process, device, stream), GPU work items (kernels, copies, memsets)
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
//! - then, from the later of the stream going idle and the call's start, to the
//!   work's start:
//!   - `[GPU_Idle: launch latency]` when that is under [`LAUNCH_LATENCY_MAX_NS`]
//!     (30 µs) with nothing in the way;
//!   - when it is longer and work on another stream of the device ended within
//!     30 µs before the start (the last such work: what a `cudaStreamWaitEvent`
//!     or a CUDA graph's dependency waits for), `[GPU_Idle: stream wait]` until
//!     that work's end, followed by a frame naming it, `[waited for stream N:
//!     kernel]` (`stream none` for work on no stream), and launch latency after
//!     it; `[GPU_Idle: collective wait]` instead when that work is an NCCL
//!     kernel: the collective was waiting for the other ranks;
//!   - otherwise `[GPU_Idle: collective wait]` for an NCCL kernel that started
//!     late, and `[GPU_Idle: other wait]` for the rest: the trace does not show
//!     what the work waited for.
//!
//! Gaps before a stream's first item and after its last are not idle time of the
//! stream (the trace's edges). Work with no API call in the trace has no CPU
//! part (`[no CPU stack]`). The per-stream totals are exact sums in ns
//! ([`IdleFolder::streams`]); the folded weights are rounded to µs so that their
//! total is the exact total, rounded.
//!
//! # Profiler steps
//!
//! Where a PyTorch profiler trace marks two or more `ProfilerStep#N` of a
//! process, the process's idle time ([`IdleFolder::streams`], the folded
//! stacks, `gpuperf report`) counts only the work launched before the last step
//! began, as HTA does by default: the complete steps (the last may be cut off).
//! [`IdleFolder::streams_whole`] counts the whole trace; the timeline shows
//! every gap.
//!
//! # Compared with Holistic Trace Analysis
//!
//! HTA's `get_idle_time_breakdown` (`hta/analyzers/breakdown_analysis.py`,
//! version 0.5.0) computes, per stream of one rank:
//!
//! | | HTA | gpuperf |
//! |---|---|---|
//! | work | kernels, copies, memsets launched by a CPU event of the trace; with two or more profiler steps, only those launched before the last step began | the same with steps; without, work with no launch in the trace counts too |
//! | streams | keyed by stream id only | keyed by (process, device, stream) |
//! | a gap | `start − end` of the previous item in start order; an overlap of consecutive items counts negative | `start −` the latest end of the items before it; time with any work on the stream is not idle |
//! | times | rounds fractional-µs timestamps: start up, end down to the µs (unless `HTA_DISABLE_NS_ROUNDING=1`), each gap grows by up to 2 µs | the trace's times, in ns |
//! | host wait | the whole gap, when the launch call started after the previous item's end | the same gaps' total: [`StreamIdle::host_wait_ns`]; within it, the CPU-late and host-sync parts, and what came after the call |
//! | kernel wait | the other gaps shorter than `consecutive_kernel_delay` (default 30, in the trace's µs) | launch latency |
//! | other | the remaining gaps | stream wait, collective wait, other wait (and the launch latency after a stream wait) |
//!
//! So, with HTA's rounding disabled and on a stream where every item has its
//! launch in the trace, gpuperf's idle time is HTA's total plus the overlaps of
//! consecutive items, and its host wait is HTA's. The tests check this on every
//! real PyTorch trace the repository has, and that each gap's causes agree with
//! HTA's category for it (`tests/integration/idle_hta.rs`).

use std::cmp::Ordering;
use std::io::Write;

use rustc_hash::FxHashMap;

use crate::error::{Error, Result};
use crate::join::{Context, Match, Sink, Summary};
use crate::model::{Activity, ActivityKind, Record, StringId};
use crate::read::cpu::StackId;
use crate::write::demangle::Demangler;
use crate::write::folded::{push_stack, round_per_group};

/// The longest time from the stream going idle (or from the launch call, when
/// it came later) to the work's start that counts as launch latency when
/// nothing is seen in the way: 30 µs, HTA's `consecutive_kernel_delay`. A
/// longer wait is a wait on something: another stream's work, the other ranks
/// of a collective, or something the trace does not show.
pub const LAUNCH_LATENCY_MAX_NS: u64 = 30_000;

/// Why a stream was idle before a piece of work.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Cause {
    /// The launching thread called the launch after the stream went idle.
    CpuLate,
    /// The launching thread was waiting in a synchronization call.
    HostSync,
    /// The call came in time, and the work started within
    /// [`LAUNCH_LATENCY_MAX_NS`] with nothing in the way (or, after a wait on
    /// another stream, the time from that work's end to this work's start).
    LaunchLatency,
    /// The call came in time; the work waited for work on another stream of
    /// the device (`cudaStreamWaitEvent`, a CUDA graph's dependency), named
    /// by [`WaitedFor`].
    StreamWait,
    /// The call came in time; the work waited for a collective (an NCCL
    /// kernel) on another stream, or is a collective that started late: a
    /// wait on the other ranks.
    Collective,
    /// The call came in time, and the work started more than
    /// [`LAUNCH_LATENCY_MAX_NS`] after it with nothing in the trace in the way
    /// (HTA's "other").
    Other,
}

impl Cause {
    /// Every cause, in the order of [`StreamIdle::by_cause_ns`].
    pub const ALL: [Cause; 6] = [
        Self::CpuLate,
        Self::HostSync,
        Self::LaunchLatency,
        Self::StreamWait,
        Self::Collective,
        Self::Other,
    ];

    /// The folded frame naming the cause.
    pub fn frame(self) -> &'static str {
        match self {
            Self::CpuLate => "[GPU_Idle: CPU late]",
            Self::HostSync => "[GPU_Idle: host sync]",
            Self::LaunchLatency => "[GPU_Idle: launch latency]",
            Self::StreamWait => "[GPU_Idle: stream wait]",
            Self::Collective => "[GPU_Idle: collective wait]",
            Self::Other => "[GPU_Idle: other wait]",
        }
    }

    /// The timeline's slice name.
    pub fn label(self) -> &'static str {
        match self {
            Self::CpuLate => "GPU idle: CPU late",
            Self::HostSync => "GPU idle: host sync",
            Self::LaunchLatency => "GPU idle: launch latency",
            Self::StreamWait => "GPU idle: stream wait",
            Self::Collective => "GPU idle: collective wait",
            Self::Other => "GPU idle: other wait",
        }
    }

    /// Its index in [`StreamIdle::by_cause_ns`].
    pub fn index(self) -> usize {
        self as usize
    }
}

/// A stream of GPU work: its process, device and stream. Keys sort by
/// process, then device, then stream, an unknown device after the known ones
/// and work on no stream after the streams.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct StreamKey {
    /// Process id.
    pub pid: u32,
    /// The device, when the trace says.
    pub device: Option<u32>,
    /// The stream; `None` for work on no stream.
    pub stream: Option<u32>,
}

impl StreamKey {
    /// The stream `a` ran on.
    fn of(a: &Activity) -> Self {
        Self {
            pid: a.pid,
            device: a.device,
            stream: a.stream,
        }
    }

    /// Its device's key.
    pub fn device_key(&self) -> DeviceKey {
        DeviceKey {
            pid: self.pid,
            device: self.device,
        }
    }

    /// The stream as the timeline numbers tracks (`u32::MAX`: none).
    pub(crate) fn stream_or_max(&self) -> u32 {
        self.stream.unwrap_or(u32::MAX)
    }
}

impl Ord for StreamKey {
    fn cmp(&self, other: &Self) -> Ordering {
        let order = |k: &Self| (k.device_key(), k.stream.is_none(), k.stream);
        order(self).cmp(&order(other))
    }
}

impl PartialOrd for StreamKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// A device of a process. Keys sort by process, then device, an unknown
/// device after the known ones.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct DeviceKey {
    /// Process id.
    pub pid: u32,
    /// The device, when the trace says.
    pub device: Option<u32>,
}

impl DeviceKey {
    /// The device as the timeline numbers tracks (`u32::MAX`: unknown).
    pub(crate) fn device_or_max(&self) -> u32 {
        self.device.unwrap_or(u32::MAX)
    }
}

impl Ord for DeviceKey {
    fn cmp(&self, other: &Self) -> Ordering {
        let order = |k: &Self| (k.pid, k.device.is_none(), k.device);
        order(self).cmp(&order(other))
    }
}

impl PartialOrd for DeviceKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// The timelines' name of a device's gaps, and of their track.
pub(crate) const DEVICE_IDLE: &str = "GPU idle (no stream busy)";

/// The work on another stream that a stream waited for.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WaitedFor {
    /// Its stream; `None` for work on no stream.
    pub stream: Option<u32>,
    /// The kernel's name as the input spells it; `None` for a copy or memset.
    pub kernel: Option<StringId>,
    /// Its end, ns: where the wait ended.
    pub end_ns: u64,
}

/// One piece of GPU work and the call that launched it.
#[derive(Copy, Clone, Debug)]
struct Work {
    start: u64,
    end: u64,
    /// (start, thread) of the launching call.
    call: Option<(u64, u32)>,
    stack: Option<StackId>,
    api: Option<StringId>,
    kernel: Option<StringId>,
    collective: bool,
}

/// Work of a device by end, for finding what a stream waited for:
/// (end, stream, kernel, collective).
type Ends = Vec<(u64, Option<u32>, Option<StringId>, bool)>;

/// A device's gap: (device, start, end).
type DeviceGap = (DeviceKey, u64, u64);

/// A device's work: (start, end, its launch call's start).
type DeviceWork = (u64, u64, Option<u64>);

/// What a piece of idle time is charged to: (stack, API, cause, the stream
/// and kernel waited for).
type Charge = (
    Option<StackId>,
    Option<StringId>,
    Cause,
    Option<(Option<u32>, Option<StringId>)>,
);

/// A synchronization call on a thread: (start, end, stack, API).
type SyncCall = (u64, u64, Option<StackId>, Option<StringId>);

/// Idle time of one stream.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct StreamIdle {
    /// From the first work's start to the last work's end, ns.
    pub span_ns: u64,
    /// Time with no work on the stream within the span, ns.
    pub idle_ns: u64,
    /// `idle_ns` by cause, in the order of [`Cause::ALL`]: CPU late, host
    /// sync, launch latency, stream wait, collective wait, other wait.
    pub by_cause_ns: [u64; 6],
    /// Number of gaps.
    pub gaps: u64,
    /// The whole of the gaps whose launch call started after the stream went
    /// idle (their CPU-late and host-sync parts and the time after the call):
    /// HTA's "host wait". The rest of `idle_ns` is HTA's "kernel wait"
    /// (gaps under [`LAUNCH_LATENCY_MAX_NS`]) and "other".
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

/// The profiler steps a process's idle time is counted within.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct StepWindow {
    /// The complete steps: all the process's `ProfilerStep#N` but the last.
    pub complete: u64,
    /// The first step's number.
    pub first: u64,
    /// The last step's number: work launched from its start on is not counted.
    pub last: u64,
    /// The last step's start, ns.
    pub until_ns: u64,
}

/// One piece of a stream's gap with one cause, for the timeline.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct IdleSlice {
    /// The stream.
    pub stream: StreamKey,
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
    /// For a stream or collective wait, the work waited for.
    pub waited_for: Option<WaitedFor>,
}

/// What a stream's computation is for: the folded stacks, the timeline, or both.
#[derive(Copy, Clone)]
struct Out {
    charge: bool,
    slices: bool,
}

/// Collects GPU work per stream and charges its gaps; a [`Sink`].
///
/// Where a process's trace marks two or more PyTorch profiler steps
/// (`ProfilerStep#N`), its idle time ([`IdleFolder::streams`], the folded
/// stacks) counts, as HTA does by default, only work launched before the last
/// step began: the last step may be incomplete. [`IdleFolder::streams_whole`]
/// counts all of it, and the timeline shows every gap.
#[derive(Default)]
pub struct IdleFolder {
    work: FxHashMap<StreamKey, Vec<Work>>,
    syncs: FxHashMap<(u32, u32), Vec<SyncCall>>,
    acc: FxHashMap<Charge, u64>,
    streams: Vec<(StreamKey, StreamIdle)>,
    whole: Vec<(StreamKey, StreamIdle)>,
    windows: Vec<(u32, StepWindow)>,
    devices: Vec<(DeviceKey, DeviceIdle)>,
    devices_whole: Vec<(DeviceKey, DeviceIdle)>,
    lines: Vec<(String, u64)>,
    keep_slices: bool,
    slices: Vec<IdleSlice>,
    device_gaps: Vec<DeviceGap>,
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

    /// The pieces of every stream's gaps over the whole trace, by stream and
    /// time, when [`IdleFolder::with_slices`] asked for them. Valid after the
    /// join.
    pub fn slices(&self) -> &[IdleSlice] {
        &self.slices
    }

    /// Every device's gaps: (device, start, end), by device and time, when
    /// [`IdleFolder::with_slices`] asked for them. Valid after the join.
    pub fn device_gaps(&self) -> &[(DeviceKey, u64, u64)] {
        &self.device_gaps
    }

    /// Idle time per device, sorted: within the complete profiler
    /// steps of the processes that mark steps, as [`IdleFolder::streams`],
    /// over the whole trace otherwise. Valid after the join.
    pub fn devices(&self) -> &[(DeviceKey, DeviceIdle)] {
        &self.devices
    }

    /// Idle time per device over the whole trace, steps or not, sorted
    /// like [`IdleFolder::devices`]. Valid after the join.
    pub fn devices_whole(&self) -> &[(DeviceKey, DeviceIdle)] {
        &self.devices_whole
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

    /// Idle time per stream, sorted: within the complete
    /// profiler steps of the processes that mark steps
    /// ([`IdleFolder::step_windows`]), over the whole trace otherwise. Valid
    /// after the join.
    pub fn streams(&self) -> &[(StreamKey, StreamIdle)] {
        &self.streams
    }

    /// Idle time per stream over the whole trace, steps or not,
    /// sorted like [`IdleFolder::streams`]. Valid after the join.
    pub fn streams_whole(&self) -> &[(StreamKey, StreamIdle)] {
        &self.whole
    }

    /// The processes whose idle time is counted within profiler steps, and
    /// those steps, by pid. Valid after the join.
    pub fn step_windows(&self) -> &[(u32, StepWindow)] {
        &self.windows
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

    /// Charges `[from, to)` to `cause` (for the folded stacks) and keeps it as
    /// a slice (for the timeline), as `out` asks.
    #[allow(clippy::too_many_arguments)]
    fn piece(
        &mut self,
        out: Out,
        key: StreamKey,
        (from, to): (u64, u64),
        stack: Option<StackId>,
        api: Option<StringId>,
        cause: Cause,
        waited_for: Option<WaitedFor>,
    ) {
        if to <= from {
            return;
        }
        if out.charge {
            let detail = waited_for.map(|w| (w.stream, w.kernel));
            *self.acc.entry((stack, api, cause, detail)).or_default() += to - from;
        }
        if out.slices && self.keep_slices {
            self.slices.push(IdleSlice {
                stream: key,
                start_ns: from,
                end_ns: to,
                cause,
                stack,
                api,
                waited_for,
            });
        }
    }

    /// Charges the gap before `w`, which starts `gap` ns after the stream went
    /// idle at `idle_from`; returns the split by cause.
    fn gap(
        &mut self,
        out: Out,
        key: StreamKey,
        w: &Work,
        idle_from: u64,
        thread_syncs: Option<&[SyncCall]>,
        ends: &Ends,
    ) -> [u64; 6] {
        let mut split = [0; 6];
        // The call's start, within the gap; the gap's start without a call.
        let late_until = w.call.map_or(idle_from, |c| c.0.clamp(idle_from, w.start));
        if w.call.is_some() {
            // The last sync call on the thread that ended in the late part: the
            // thread waited there until it ended.
            let sync = thread_syncs.and_then(|s| {
                let i = s.partition_point(|c| c.1 <= late_until);
                i.checked_sub(1).map(|i| s[i]).filter(|c| c.1 > idle_from)
            });
            let (sync_from, sync_to) = sync.map_or((late_until, late_until), |c| {
                (c.0.max(idle_from), c.1.min(late_until))
            });
            let (stack, api) = (w.stack, w.api);
            self.piece(
                out,
                key,
                (idle_from, sync_from),
                stack,
                api,
                Cause::CpuLate,
                None,
            );
            if let Some((_, _, s_stack, s_api)) = sync {
                let span = (sync_from, sync_to);
                self.piece(out, key, span, s_stack, s_api, Cause::HostSync, None);
            }
            self.piece(
                out,
                key,
                (sync_to, late_until),
                stack,
                api,
                Cause::CpuLate,
                None,
            );
            split[Cause::HostSync.index()] = sync_to - sync_from;
            split[Cause::CpuLate.index()] = late_until - idle_from - (sync_to - sync_from);
        }
        // From the call (or the stream going idle) to the work's start. Only a
        // wait too long for launch latency looks for what was in the way, so
        // that another stream's work ending by chance within a short gap is
        // not taken for a dependency.
        let waited = w.start - late_until;
        let (stack, api) = (w.stack, w.api);
        if waited < LAUNCH_LATENCY_MAX_NS {
            self.piece(
                out,
                key,
                (late_until, w.start),
                stack,
                api,
                Cause::LaunchLatency,
                None,
            );
            split[Cause::LaunchLatency.index()] += waited;
        } else if let Some(&(end, stream, kernel, collective)) =
            depends_on(ends, key.stream, late_until, w.start)
        {
            let cause = if collective {
                Cause::Collective
            } else {
                Cause::StreamWait
            };
            let waited_for = WaitedFor {
                stream,
                kernel,
                end_ns: end,
            };
            self.piece(
                out,
                key,
                (late_until, end),
                stack,
                api,
                cause,
                Some(waited_for),
            );
            self.piece(
                out,
                key,
                (end, w.start),
                stack,
                api,
                Cause::LaunchLatency,
                None,
            );
            split[cause.index()] += end - late_until;
            split[Cause::LaunchLatency.index()] += w.start - end;
        } else {
            let cause = if w.collective {
                Cause::Collective
            } else {
                Cause::Other
            };
            self.piece(out, key, (late_until, w.start), stack, api, cause, None);
            split[cause.index()] += waited;
        }
        split
    }

    /// The idle time of one stream's `work` (sorted by start).
    fn stream(
        &mut self,
        out: Out,
        key: StreamKey,
        work: &[Work],
        syncs: &FxHashMap<(u32, u32), Vec<SyncCall>>,
        ends: &Ends,
    ) -> StreamIdle {
        let mut idle = StreamIdle::default();
        let Some(first) = work.first() else {
            return idle;
        };
        let mut busy_until = first.end;
        for w in &work[1..] {
            if w.start > busy_until {
                let thread_syncs = w
                    .call
                    .and_then(|(_, tid)| syncs.get(&(key.pid, tid)))
                    .map(Vec::as_slice);
                let split = self.gap(out, key, w, busy_until, thread_syncs, ends);
                for (t, s) in idle.by_cause_ns.iter_mut().zip(split) {
                    *t += s;
                }
                idle.idle_ns += w.start - busy_until;
                idle.gaps += 1;
                if split[Cause::CpuLate.index()] + split[Cause::HostSync.index()] > 0 {
                    idle.host_wait_ns += w.start - busy_until;
                }
            }
            busy_until = busy_until.max(w.end);
        }
        idle.span_ns = busy_until - first.start;
        idle
    }

    /// Each device's gaps: time with no work on any of its streams, over the
    /// whole trace and, for a process that marks profiler steps, within them
    /// (the work whose launch call started before the last step did, as for
    /// streams). Needs `windows`.
    fn device_idle(&mut self) {
        let mut by_device: FxHashMap<DeviceKey, Vec<DeviceWork>> = FxHashMap::default();
        for (key, work) in &self.work {
            by_device
                .entry(key.device_key())
                .or_default()
                .extend(work.iter().map(|w| (w.start, w.end, w.call.map(|c| c.0))));
        }
        let mut devices: Vec<_> = by_device.into_iter().collect();
        devices.sort_unstable_by_key(|d| d.0);
        for (key, mut items) in devices {
            items.sort_unstable();
            let all: Vec<(u64, u64)> = items.iter().map(|&(s, e, _)| (s, e)).collect();
            let gaps = self.keep_slices.then_some(&mut self.device_gaps);
            let whole = device_gaps(key, &all, gaps);
            let window = self
                .windows
                .binary_search_by_key(&key.pid, |w| w.0)
                .ok()
                .map(|i| self.windows[i].1.until_ns);
            let counted = match window {
                None => whole,
                Some(until) => {
                    let kept: Vec<(u64, u64)> = items
                        .iter()
                        .filter(|&&(_, _, call)| call.is_some_and(|c| c < until))
                        .map(|&(s, e, _)| (s, e))
                        .collect();
                    device_gaps(key, &kept, None)
                }
            };
            self.devices.push((key, counted));
            self.devices_whole.push((key, whole));
        }
    }

    /// The steps each process's idle time is counted within: where it marks
    /// two or more, all but the last (HTA's default).
    fn step_windows_of(ctx: &Context<'_>) -> Vec<(u32, StepWindow)> {
        let mut by_pid: FxHashMap<u32, Vec<(u64, u64)>> = FxHashMap::default();
        for s in ctx.cpu.map_or(&[][..], |c| &c.steps) {
            by_pid
                .entry(s.pid)
                .or_default()
                .push((s.start_ns, s.number));
        }
        let mut windows: Vec<(u32, StepWindow)> = by_pid
            .into_iter()
            .filter(|(_, s)| s.len() >= 2)
            .map(|(pid, mut s)| {
                s.sort_unstable();
                let last = s[s.len() - 1];
                let window = StepWindow {
                    complete: s.len() as u64 - 1,
                    first: s[0].1,
                    last: last.1,
                    until_ns: last.0,
                };
                (pid, window)
            })
            .collect();
        windows.sort_unstable_by_key(|w| w.0);
        windows
    }
}

/// The idle time of a device whose work is `items` (start, end; sorted), and
/// its gaps pushed to `gaps` when given (for the timeline).
fn device_gaps(
    key: DeviceKey,
    items: &[(u64, u64)],
    mut gaps: Option<&mut Vec<DeviceGap>>,
) -> DeviceIdle {
    let mut idle = DeviceIdle::default();
    let Some(&(first, mut busy_until)) = items.first() else {
        return idle;
    };
    for &(start, end) in &items[1..] {
        if start > busy_until {
            idle.idle_ns += start - busy_until;
            idle.gaps += 1;
            if let Some(g) = gaps.as_deref_mut() {
                g.push((key, busy_until, start));
            }
        }
        busy_until = busy_until.max(end);
    }
    idle.span_ns = busy_until - first;
    idle
}

/// The work on another stream than `stream` that the work starting at `start`
/// waited for: the one that ended last in `(from, start]`, when it ended within
/// [`LAUNCH_LATENCY_MAX_NS`] of `start`.
fn depends_on(
    ends: &Ends,
    stream: Option<u32>,
    from: u64,
    start: u64,
) -> Option<&(u64, Option<u32>, Option<StringId>, bool)> {
    let i = ends.partition_point(|e| e.0 <= start);
    ends[..i]
        .iter()
        .rev()
        .take_while(|e| e.0 > from && start - e.0 <= LAUNCH_LATENCY_MAX_NS)
        .find(|e| e.1 != stream)
}

impl Sink for IdleFolder {
    fn record(&mut self, ctx: &Context<'_>, rec: &Record, m: &Match<'_>) -> Result<()> {
        let Record::Activity(a) = rec else {
            return Ok(());
        };
        let kernel = match a.kind {
            ActivityKind::Sync { .. } => {
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
            ActivityKind::Kernel { name, .. } => Some(name),
            _ => None,
        };
        let c = m.charge();
        self.work.entry(StreamKey::of(a)).or_default().push(Work {
            start: a.start_ns,
            end: a.end_ns.max(a.start_ns),
            call: m.api.map(|c| (c.start_ns, c.tid)),
            stack: c.stack,
            api: c.api,
            kernel,
            // NCCL's (and RCCL's) kernels: `ncclKernel_…`, `ncclDevKernel_…`.
            collective: kernel.is_some_and(|k| ctx.strings.get(k).contains("nccl")),
        });
        Ok(())
    }

    fn finish(&mut self, ctx: &Context<'_>, _summary: &Summary) -> Result<()> {
        for s in self.syncs.values_mut() {
            // By end, for the search of the last one to end before a launch.
            s.sort_unstable_by_key(|c| (c.1, c.0));
        }
        let syncs = std::mem::take(&mut self.syncs);
        self.windows = Self::step_windows_of(ctx);
        self.device_idle();
        let mut ends: FxHashMap<DeviceKey, Ends> = FxHashMap::default();
        for (key, work) in &self.work {
            let stream = key.stream;
            ends.entry(key.device_key())
                .or_default()
                .extend(work.iter().map(|w| (w.end, stream, w.kernel, w.collective)));
        }
        for e in ends.values_mut() {
            // No stream after the streams, as keys sort.
            e.sort_unstable_by_key(|e| (e.0, e.1.is_none(), e.1));
        }
        let mut keys: Vec<StreamKey> = self.work.keys().copied().collect();
        keys.sort_unstable();
        let no_ends = Ends::new();
        for key in keys {
            let mut work = self.work.remove(&key).unwrap_or_default();
            work.sort_unstable_by_key(|w| (w.start, w.end));
            let ends = ends.get(&key.device_key()).unwrap_or(&no_ends);
            let window = self
                .windows
                .binary_search_by_key(&key.pid, |w| w.0)
                .ok()
                .map(|i| self.windows[i].1.until_ns);
            let out = Out {
                charge: window.is_none(),
                slices: true,
            };
            let whole = self.stream(out, key, &work, &syncs, ends);
            let counted = match window {
                None => whole,
                Some(until) => {
                    // As HTA: the work whose launch call started before the
                    // last step did; work with no call in the trace is not counted.
                    let kept: Vec<Work> = work
                        .iter()
                        .filter(|w| w.call.is_some_and(|c| c.0 < until))
                        .copied()
                        .collect();
                    let out = Out {
                        charge: true,
                        slices: false,
                    };
                    self.stream(out, key, &kept, &syncs, ends)
                }
            };
            self.streams.push((key, counted));
            self.whole.push((key, whole));
        }
        let mut demangler = Demangler::default();
        let mut lines: Vec<(String, u64)> = self
            .acc
            .iter()
            .map(|(&(stack, api, cause, detail), &ns)| {
                let mut text = String::new();
                push_stack(&mut text, ctx, stack, api);
                text.push(';');
                text.push_str(cause.frame());
                if let Some((stream, kernel)) = detail {
                    let what = kernel.map_or("copy or memset", |k| {
                        demangler.label(k, ctx.strings, ctx.view)
                    });
                    let stream = stream.map_or_else(|| "none".to_owned(), |s| s.to_string());
                    text.push_str(&format!(";[waited for stream {stream}: {what}]"));
                }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_sort_by_process_device_stream_with_unknowns_last() {
        let k = |pid, device, stream| StreamKey {
            pid,
            device,
            stream,
        };
        let mut keys = vec![
            k(2, Some(0), Some(1)),
            k(1, None, Some(0)),
            k(1, Some(1), None),
            k(1, Some(1), Some(u32::MAX - 1)),
            k(1, Some(0), Some(7)),
            k(1, Some(1), Some(3)),
        ];
        keys.sort();
        assert_eq!(
            keys,
            [
                k(1, Some(0), Some(7)),
                k(1, Some(1), Some(3)),
                k(1, Some(1), Some(u32::MAX - 1)),
                k(1, Some(1), None),
                k(1, None, Some(0)),
                k(2, Some(0), Some(1)),
            ]
        );
        assert!(k(1, None, None).device_key() > k(1, Some(9), None).device_key());
        assert_eq!(k(1, Some(2), None).stream_or_max(), u32::MAX);
    }
}
