//! The CPU↔GPU join.
//!
//! Every GPU activity carries the correlation id of the API call that caused it.
//! The join finds, for each activity, the CPU launch with the same
//! (pid, correlation id) and hands both to the [`Sink`]s.
//!
//! - **Exact**: gpuperf's CPU traces carry correlation ids, so the pairing is a
//!   table look-up.
//! - **Stacks carried by the GPU side**: some GPU-side inputs hold the CPU stack of
//!   each API call themselves (a PyTorch profiler trace's Python and operator
//!   stacks, an Nsight Systems export's call chains; later, stacks the injection
//!   library records in process). Their readers put them in
//!   [`GpuInputs::launch_stacks`], keyed by (pid, correlation id), and the join
//!   adds them to the CPU side's launches before pairing, so they are matched
//!   exactly, like a gpuperf CPU trace's lines. With a CPU trace given as well, a
//!   (pid, correlation id) that both hold keeps the CPU trace's stack.
//! - **Ordered**: reference CPU traces do not. Their launches are paired with the
//!   launch API records of the GPU trace per thread (or per process when the CPU
//!   side has no real TIDs), in time order, with a time check: a CPU event pairs
//!   with an API call only if its timestamp falls within the call (± `slack_ns`),
//!   and when it fits a neighbouring call better, the neighbour wins. A lost or
//!   extra event therefore leaves only itself unpaired instead of shifting every
//!   later pairing. When the two clocks differ (reference CPU traces against
//!   CUPTI's epoch clock), the offset is estimated per process first.
//!
//! Runs in two passes over the GPU inputs: the first indexes API calls by
//! correlation id, the second streams activities to the sinks. Memory is about
//! 28 bytes per CPU launch plus 44 per API call, whatever the number of kernels
//! (10 M launches peak at 678 MiB in the merge benchmark).

pub mod backward;
pub mod stacks;

use std::collections::hash_map::Entry;
use std::fmt;

use rustc_hash::FxHashMap;

use crate::error::Result;
use crate::model::{
    Activity, ActivityKind, Clock, DropSource, Record, StringId, StringTable, SyncWait, api_stem,
    is_launch_api,
};
use crate::read::cpu::{CpuLaunch, CpuTrace, StackId};
use crate::read::input::{GpuInputs, GpuReadSummary};
use crate::view::View;

/// Join options.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Options {
    /// How far outside an API call a CPU event may fall and still pair with it in
    /// ordered pairing. Default is 50 µs.
    pub slack_ns: u64,
    /// Offset added to CPU timestamps to put them on the GPU clock. Default is
    /// `None`: 0 when that pairs most events, otherwise estimated per process.
    pub cpu_clock_offset_ns: Option<i64>,
    /// No CPU stacks were taken (`gpuperf record --gpu-only`): kernels without
    /// one are said to be so for that reason. Default is `false`.
    pub stacks_off: bool,
    /// What the writers show of stacks and names ([`crate::view`]). The join
    /// itself passes it on in the [`Context`]; [`crate::recording::Recording`]
    /// applies it to the stacks. Default is [`View::complete`].
    pub view: View,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            slack_ns: 50_000,
            cpu_clock_offset_ns: None,
            stacks_off: false,
            view: View::complete(),
        }
    }
}

/// What the join knows of an API call: enough to name it and place it in time.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ApiInfo {
    /// Entry time.
    pub start_ns: u64,
    /// Exit time.
    pub end_ns: u64,
    /// Thread id from the GPU trace.
    pub tid: u32,
    /// API name.
    pub name: StringId,
    /// Whether it is a kernel or graph launch.
    pub is_launch: bool,
    /// Whether it was made on a thread between `cudaStreamBeginCapture` and
    /// `cudaStreamEndCapture` (or their driver forms): its work runs when the
    /// captured graph is launched, not now.
    pub in_capture: bool,
}

/// Why a kernel or activity has no CPU stack.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NoStack {
    /// Its launch API call was recorded, but no CPU event paired with it.
    NoCpuEvent,
    /// Its API call (a memcpy, say) is not one the CPU profiler probes.
    NotProbed,
    /// No API call with its correlation id was recorded.
    NoApiRecord,
}

impl NoStack {
    /// Short description for summaries.
    pub fn describe(self) -> &'static str {
        match self {
            Self::NoCpuEvent => "launch seen by CUPTI but not by the CPU profiler",
            Self::NotProbed => "API call not probed on the CPU side",
            Self::NoApiRecord => "no API record with its correlation id",
        }
    }
}

/// The join's answer for one record.
#[derive(Copy, Clone, Debug, Default)]
pub struct Match<'a> {
    /// The CPU launch with the record's (pid, correlation id).
    pub launch: Option<&'a CpuLaunch>,
    /// The API call with the record's (pid, correlation id).
    pub api: Option<&'a ApiInfo>,
    /// For GPU work of a replayed CUDA graph node whose origin is known, the
    /// launch stack followed by the stack that made the node
    /// ([`CpuTrace::graph_stack`]); it ends in the node's API frame already.
    pub graph_stack: Option<StackId>,
    /// For a wait on a CUDA event, the call that recorded the event
    /// (`cudaEventRecord`), found by the wait's pid and the call's correlation id.
    pub wait_record: Option<&'a ApiInfo>,
}

impl Match<'_> {
    /// The CPU stack the record is charged to.
    pub fn stack(&self) -> Option<StackId> {
        self.graph_stack.or(self.launch.map(|l| l.stack))
    }

    /// Where the record's GPU time is charged: the one rule every writer uses
    /// (folded, pprof, the flamegraph, the idle blame, both timelines). Work of
    /// a replayed CUDA graph node whose origin is known is charged to the stack
    /// that made the node, which ends in the node's own API frame; other work to
    /// its launch's stack and API call.
    pub fn charge(&self) -> Charge {
        match self.graph_stack {
            Some(s) => Charge {
                stack: Some(s),
                api: None,
            },
            None => Charge {
                stack: self.launch.map(|l| l.stack),
                api: self.api.map(|a| a.name),
            },
        }
    }

    /// Why an activity has no CPU stack, or `None` when it has one.
    pub fn no_stack(&self) -> Option<NoStack> {
        match (self.launch, self.api) {
            (Some(_), _) => None,
            (None, Some(a)) if a.is_launch => Some(NoStack::NoCpuEvent),
            (None, Some(_)) => Some(NoStack::NotProbed),
            (None, None) => Some(NoStack::NoApiRecord),
        }
    }
}

/// The CPU stack and API frame a record's GPU time is charged to ([`Match::charge`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Charge {
    /// The CPU stack, when one is known.
    pub stack: Option<StackId>,
    /// The API frame to add below the stack (unless the stack ends in it);
    /// `None` where the stack holds it already or no call is known.
    pub api: Option<StringId>,
}

/// Shared state the sinks read.
pub struct Context<'a> {
    /// Names of everything.
    pub strings: &'a StringTable,
    /// The CPU trace, when there is one.
    pub cpu: Option<&'a CpuTrace>,
    /// Clock of the GPU timestamps.
    pub clock: Clock,
    /// What the writers show of names ([`Options::view`]).
    pub view: View,
    offsets: &'a FxHashMap<u32, i64>,
}

impl<'a> Context<'a> {
    /// A context without a CPU trace, for writers' unit tests.
    #[cfg(test)]
    pub(crate) fn for_tests(strings: &'a StringTable, offsets: &'a FxHashMap<u32, i64>) -> Self {
        Self {
            strings,
            cpu: None,
            clock: Clock::Monotonic,
            view: View::complete(),
            offsets,
        }
    }
}

impl Context<'_> {
    /// A CPU launch's timestamp on the GPU trace's clock.
    pub fn launch_ts(&self, launch: &CpuLaunch) -> u64 {
        let off = self.offsets.get(&launch.pid).copied().unwrap_or(0);
        launch.ts_ns.saturating_add_signed(off)
    }
}

/// A consumer of joined records: the folded, Chrome-trace and report writers.
pub trait Sink {
    /// Called for every GPU-trace record, in file order. `m` is filled for API
    /// calls and activities.
    fn record(&mut self, ctx: &Context<'_>, rec: &Record, m: &Match<'_>) -> Result<()>;

    /// Called after all records for each CPU launch that no activity matched.
    fn pending(
        &mut self,
        _ctx: &Context<'_>,
        _launch: &CpuLaunch,
        _api: Option<&ApiInfo>,
    ) -> Result<()> {
        Ok(())
    }

    /// Called after all records for each CPU launch made during a stream
    /// capture: its work runs, and is charged, at each launch of the graph.
    fn captured(
        &mut self,
        _ctx: &Context<'_>,
        _launch: &CpuLaunch,
        _api: Option<&ApiInfo>,
    ) -> Result<()> {
        Ok(())
    }

    /// Called once at the end.
    fn finish(&mut self, _ctx: &Context<'_>, _summary: &Summary) -> Result<()> {
        Ok(())
    }
}

/// How one process's CPU launches were paired.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pairing {
    /// Process id.
    pub pid: u32,
    /// Exact by correlation id, or ordered by time.
    pub exact: bool,
    /// Ordered pairing was per thread (otherwise per process).
    pub per_thread: bool,
    /// Offset added to CPU timestamps, ns.
    pub offset_ns: i64,
    /// Whether the offset was estimated.
    pub offset_estimated: bool,
    /// CPU launches paired with an API call.
    pub paired: u64,
    /// CPU launches left unpaired.
    pub unpaired_cpu: u64,
    /// Launch API calls left unpaired.
    pub unpaired_api: u64,
}

/// Counts of everything the join saw; its `Display` is the match summary.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    /// CPU launch events.
    pub cpu_launches: u64,
    /// Launch API calls in the GPU trace.
    pub api_launches: u64,
    /// Kernels.
    pub kernels: u64,
    /// Kernels with a CPU stack.
    pub kernels_matched: u64,
    /// Kernels from CUDA graphs.
    pub graph_kernels: u64,
    /// Kernels without a CPU stack, by reason.
    pub kernels_unmatched: FxHashMap<NoStack, u64>,
    /// Memcpy, memset and synchronization records.
    pub other_activities: u64,
    /// Of those, with a CPU stack.
    pub other_matched: u64,
    /// CPU launches whose API call was recorded but caused no GPU activity
    /// (the launch failed, or the trace ends before it ran).
    pub launches_without_gpu: u64,
    /// CPU launches with no API call paired or recorded.
    pub launches_without_api: u64,
    /// CPU launches made during a stream capture, with no GPU activity of their
    /// own: the graph's launches account for their work.
    pub launches_captured: u64,
    /// CPU stacks were not taken ([`Options::stacks_off`]).
    pub stacks_off: bool,
    /// CPU lines whose correlation id repeats an earlier line's.
    pub duplicate_cpu_ids: u64,
    /// Launches the CPU profiler lost.
    pub cpu_dropped: u64,
    /// CPU launch stacks that came with the GPU inputs ([`GpuInputs::launch_stacks`]).
    pub gpu_launch_stacks: u64,
    /// CPU launches whose stack stops before a root frame (`_start`, a thread
    /// start): truncated stacks ([`stacks::is_complete`]).
    pub cpu_truncated: u64,
    /// GPU records lost, by where.
    pub gpu_dropped: FxHashMap<DropSource, u64>,
    /// Notes left by the recorder.
    pub notes: Vec<String>,
    /// Per-process pairing.
    pub pairings: Vec<Pairing>,
    /// What reading the GPU inputs saw.
    pub gpu_read: GpuReadSummary,
}

impl Summary {
    /// Share of kernels with a CPU stack, in percent (100 when there is none).
    pub fn kernel_match_percent(&self) -> f64 {
        if self.kernels == 0 {
            100.0
        } else {
            100.0 * self.kernels_matched as f64 / self.kernels as f64
        }
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.fmt_matches(f)?;
        self.fmt_launches(f)?;
        self.fmt_pairings(f)?;
        self.fmt_losses(f)?;
        for n in &self.gpu_read.notes {
            writeln!(f, "  note: {n}")?;
        }
        for n in &self.notes {
            writeln!(f, "  note from the recorder: {n}")?;
        }
        Ok(())
    }
}

impl Summary {
    /// The headline and what kernels were matched or not, and why.
    fn fmt_matches(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.kernels == 0 {
            write!(f, "no kernels in the GPU trace")?;
        } else {
            write!(
                f,
                "matched {} of {} kernels ({:.1}%) to a CPU stack",
                self.kernels_matched,
                self.kernels,
                self.kernel_match_percent()
            )?;
        }
        writeln!(
            f,
            "; {} CPU launches, {} launch API calls",
            self.cpu_launches, self.api_launches
        )?;
        if self.gpu_launch_stacks > 0 {
            writeln!(
                f,
                "  CPU stacks from the GPU trace itself: {} API calls",
                self.gpu_launch_stacks
            )?;
        }
        if self.graph_kernels > 0 {
            writeln!(
                f,
                "  {} kernels came from CUDA graph launches",
                self.graph_kernels
            )?;
        }
        let mut reasons: Vec<_> = self
            .kernels_unmatched
            .iter()
            .filter(|(_, n)| **n > 0)
            .collect();
        reasons.sort();
        for (reason, n) in reasons {
            let why = match reason {
                NoStack::NoCpuEvent if self.stacks_off => "CPU stacks were off: --gpu-only",
                // Stacks taken in the program: the recorder knows why it took
                // none, and its note (below) says so.
                NoStack::NoCpuEvent if self.gpu_launch_stacks > 0 => {
                    "launch recorded in the program without its stack: see the recorder's note"
                }
                _ => reason.describe(),
            };
            writeln!(f, "  unmatched kernels: {n} ({why})")?;
        }
        Ok(())
    }

    /// CPU launches that matched nothing, or were cut or repeated.
    fn fmt_launches(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.launches_without_gpu > 0 {
            writeln!(
                f,
                "  unmatched CPU launches: {} with no GPU activity (launch failed, or the trace ends first)",
                self.launches_without_gpu
            )?;
        }
        if self.launches_captured > 0 {
            writeln!(
                f,
                "  CPU launches captured into CUDA graphs: {} (their work runs, and is charged, at each graph launch)",
                self.launches_captured
            )?;
        }
        if self.launches_without_api > 0 {
            writeln!(
                f,
                "  unmatched CPU launches: {} with no API call recorded or paired",
                self.launches_without_api
            )?;
        }
        if self.cpu_truncated > 0 {
            writeln!(
                f,
                "  truncated CPU stacks: {} of {} launches stop before a root frame (_start, a thread start)",
                self.cpu_truncated, self.cpu_launches
            )?;
        }
        if self.duplicate_cpu_ids > 0 {
            writeln!(
                f,
                "  CPU lines repeating a correlation id (first kept): {}",
                self.duplicate_cpu_ids
            )?;
        }
        if self.other_activities > 0 {
            writeln!(
                f,
                "  memcpy/memset/sync records: {} ({} with a CPU stack)",
                self.other_activities, self.other_matched
            )?;
        }
        Ok(())
    }

    /// How each process's launches were paired.
    fn fmt_pairings(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for p in &self.pairings {
            if p.exact {
                writeln!(f, "  pid {}: exact pairing by correlation id", p.pid)?;
            } else {
                writeln!(
                    f,
                    "  pid {}: paired by time per {} ({} paired, {} CPU events and {} launch calls unpaired), CPU clock offset {:+.6} s{}",
                    p.pid,
                    if p.per_thread { "thread" } else { "process" },
                    p.paired,
                    p.unpaired_cpu,
                    p.unpaired_api,
                    p.offset_ns as f64 / 1e9,
                    if p.offset_estimated {
                        " (estimated)"
                    } else {
                        ""
                    }
                )?;
            }
        }
        Ok(())
    }

    /// Everything dropped, cut off or skipped on the way in.
    fn fmt_losses(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.cpu_dropped > 0 {
            writeln!(
                f,
                "  dropped: {} CPU launch events (eBPF ring buffer full)",
                self.cpu_dropped
            )?;
        }
        let mut drops: Vec<_> = self.gpu_dropped.iter().filter(|(_, n)| **n > 0).collect();
        drops.sort_by_key(|(s, _)| s.name());
        for (source, n) in drops {
            writeln!(f, "  dropped: {n} GPU records ({})", source.name())?;
        }
        for (path, at) in &self.gpu_read.truncated {
            writeln!(
                f,
                "  truncated: `{}` ends inside a record at byte {at}",
                path.display()
            )?;
        }
        for path in &self.gpu_read.unclosed {
            writeln!(
                f,
                "  not closed: `{}`: the process ended without gpuperf's exit flush (killed, or \
                 ended by _exit); what it did after its last periodic flush is missing",
                path.display()
            )?;
        }
        if self.gpu_read.skipped > 0 {
            writeln!(
                f,
                "  skipped: {} GPU records of kinds not used",
                self.gpu_read.skipped
            )?;
        }
        if self.gpu_read.other_lines > 0 {
            writeln!(
                f,
                "  skipped: {} lines of the GPU log that are not records (the recording tool's own output)",
                self.gpu_read.other_lines
            )?;
        }
        Ok(())
    }
}

/// Maps correlation ids to indices: a dense table while ids are dense (CUPTI
/// numbers calls 1, 2, 3, …), a hash map otherwise.
#[derive(Debug, Default)]
struct CorrIndex {
    dense: Vec<u32>,
    sparse: FxHashMap<u32, u32>,
}

impl CorrIndex {
    const NONE: u32 = u32::MAX;

    /// Inserts unless present; returns false when `corr` was already there.
    fn insert(&mut self, corr: u32, idx: u32) -> bool {
        let c = corr as usize;
        if c < self.dense.len() || c <= 2 * self.dense.len() + 4096 {
            if c >= self.dense.len() {
                self.dense
                    .resize((c + 1).max(self.dense.len() * 3 / 2), Self::NONE);
            }
            if self.dense[c] != Self::NONE {
                return false;
            }
            self.dense[c] = idx;
            true
        } else {
            match self.sparse.entry(corr) {
                Entry::Occupied(_) => false,
                Entry::Vacant(e) => {
                    e.insert(idx);
                    true
                }
            }
        }
    }

    fn get(&self, corr: u32) -> Option<u32> {
        match self.dense.get(corr as usize) {
            Some(&i) if i != Self::NONE => Some(i),
            Some(_) => None,
            None => self.sparse.get(&corr).copied(),
        }
    }
}

/// A correlation id made 64-bit: CUPTI's counter is 32-bit and wraps after
/// 2^32 calls (a day of a busy process), after which the join would give new
/// GPU work an old call's stack. The high half counts wraps (and may go below
/// zero for records older than a stream's first); 0 stays "no id".
type Corr = i64;

/// Unwraps each process's stream of correlation ids: every id is read as the
/// 64-bit id nearest the stream's previous one, as serial numbers are (RFC
/// 1982), so a stream may run out of order by up to 2^31 ids. Each stream (a
/// process's API calls, its GPU records, its CPU launches) has its own.
#[derive(Debug, Default)]
struct Unwrap {
    last: FxHashMap<u32, Corr>,
}

impl Unwrap {
    fn next(&mut self, pid: u32, id: u32) -> Corr {
        if id == 0 {
            return 0;
        }
        let last = self.last.entry(pid).or_insert(Corr::from(id));
        *last = near(*last, id);
        *last
    }
}

/// The 64-bit id with low half `id` nearest `anchor`.
fn near(anchor: Corr, id: u32) -> Corr {
    anchor + Corr::from(id.wrapping_sub(anchor as u32) as i32)
}

/// A [`CorrIndex`] per wrap of the 32-bit counter (one, unless the recording
/// is a day long).
#[derive(Debug, Default)]
struct WrapIndex {
    wraps: Vec<(i32, CorrIndex)>,
}

impl WrapIndex {
    fn insert(&mut self, corr: Corr, idx: u32) -> bool {
        let wrap = (corr >> 32) as i32;
        let i = match self.wraps.iter().position(|(w, _)| *w == wrap) {
            Some(i) => i,
            None => {
                self.wraps.push((wrap, CorrIndex::default()));
                self.wraps.len() - 1
            }
        };
        self.wraps[i].1.insert(corr as u32, idx)
    }

    fn get(&self, corr: Corr) -> Option<u32> {
        let wrap = (corr >> 32) as i32;
        self.wraps
            .iter()
            .find(|(w, _)| *w == wrap)
            .and_then(|(_, c)| c.get(corr as u32))
    }
}

#[derive(Default)]
struct PidApis {
    infos: Vec<ApiInfo>,
    corrs: Vec<u32>,
    by_corr: WrapIndex,
}

/// Joins `cpu` (optional) with the GPU inputs and feeds every record to `sinks`.
///
/// Ordered pairing writes the correlation ids it finds into `cpu.launches`.
pub fn merge(
    mut cpu: Option<&mut CpuTrace>,
    gpu: &GpuInputs,
    strings: &mut StringTable,
    opts: &Options,
    sinks: &mut [&mut dyn Sink],
) -> Result<Summary> {
    let mut summary = Summary {
        stacks_off: opts.stacks_off,
        ..Summary::default()
    };
    let apis = index_apis(gpu, strings, &mut summary)?;
    if let Some(cpu) = cpu.as_deref() {
        summary.cpu_truncated = count_truncated(cpu);
    }
    let mut carried: Option<CpuTrace> = None;
    if let Some(stacks) = gpu.launch_stacks() {
        summary.gpu_launch_stacks = stacks.launches.len() as u64;
        match cpu.as_deref_mut() {
            Some(c) => add_carried_stacks(c, stacks),
            None => carried = Some(stacks.clone()),
        }
    }
    let mut cpu = cpu.or(carried.as_mut());

    // Pairing: exact where CPU lines carry ids, ordered by time elsewhere.
    let mut offsets: FxHashMap<u32, i64> = FxHashMap::default();
    let mut cpu_index = CpuIndex::default();
    if let Some(cpu) = cpu.as_deref_mut() {
        summary.cpu_launches = cpu.launch_count();
        summary.cpu_dropped = cpu.dropped;
        pair_by_time(cpu, &apis, opts, &mut offsets, &mut summary.pairings);
        cpu_index = index_cpu(cpu, &mut summary);
    }
    let index = Index {
        apis: &apis,
        cpu: &cpu_index,
        view: opts.view,
    };
    let cpu: Option<&CpuTrace> = cpu.map(|c| &*c);
    let clock = gpu.clock();
    let matched = stream_records(gpu, strings, cpu, &index, &offsets, &mut summary, sinks)?;
    let ctx = Context {
        strings,
        cpu,
        clock,
        view: opts.view,
        offsets: &offsets,
    };
    if let Some(c) = cpu {
        let unmatched = c.launches.iter().enumerate().zip(&matched);
        for ((i, l), _) in unmatched.filter(|(_, m)| !**m) {
            if c.is_wait(l) {
                // A wait with no synchronization record is no missing GPU work.
                continue;
            }
            let api = if l.correlation_id == 0 {
                None
            } else {
                index.lookup(l.pid, cpu_index.corrs[i]).1
            };
            let captured = api.is_some_and(|a| a.in_capture)
                || c.captured.contains(&(l.pid, l.correlation_id));
            if captured {
                summary.launches_captured += 1;
                for s in sinks.iter_mut() {
                    s.captured(&ctx, l, api)?;
                }
                continue;
            }
            if api.is_some() {
                summary.launches_without_gpu += 1;
            } else {
                summary.launches_without_api += 1;
            }
            for s in sinks.iter_mut() {
                s.pending(&ctx, l, api)?;
            }
        }
    }
    for s in sinks.iter_mut() {
        s.finish(&ctx, &summary)?;
    }
    Ok(summary)
}

/// Pass 1: indexes API calls by (pid, correlation id), and counts launches,
/// drops and notes.
fn index_apis(
    gpu: &GpuInputs,
    strings: &mut StringTable,
    summary: &mut Summary,
) -> Result<FxHashMap<u32, PidApis>> {
    let mut apis: FxHashMap<u32, PidApis> = FxHashMap::default();
    // Per StringId: 0 unknown, then one of the NAME_* classes.
    let mut launch_names: Vec<u8> = Vec::new();
    // (pid, tid, start, end, begins) of stream capture calls.
    let mut captures: Vec<(u32, u32, u64, u64, bool)> = Vec::new();
    let mut cur: Option<(u32, PidApis)> = None;
    let mut ids = Unwrap::default();
    let (mut api_launches, mut gpu_dropped, mut notes) = (0, FxHashMap::default(), Vec::new());
    summary.gpu_read = gpu.visit(strings, &mut |rec, names| match rec {
        Record::Api(a) => {
            let i = a.name.index();
            if launch_names.len() <= i {
                launch_names.resize(i + 1, 0);
            }
            if launch_names[i] == 0 {
                launch_names[i] = name_class(names.get(a.name));
            }
            let is_launch = launch_names[i] == NAME_LAUNCH;
            if matches!(launch_names[i], NAME_BEGIN_CAPTURE | NAME_END_CAPTURE) {
                let begins = launch_names[i] == NAME_BEGIN_CAPTURE;
                captures.push((a.pid, a.tid, a.start_ns, a.end_ns, begins));
            }
            api_launches += u64::from(is_launch);
            // Records come in long runs of one pid: keep its table out of the map.
            if cur.as_ref().is_none_or(|(p, _)| *p != a.pid) {
                if let Some((p, t)) = cur.take() {
                    apis.insert(p, t);
                }
                cur = Some((a.pid, apis.remove(&a.pid).unwrap_or_default()));
            }
            let (_, t) = cur.as_mut().expect("set above");
            let corr = ids.next(a.pid, a.correlation_id);
            if t.by_corr.insert(corr, t.infos.len() as u32) {
                t.infos.push(ApiInfo {
                    start_ns: a.start_ns,
                    end_ns: a.end_ns,
                    tid: a.tid,
                    name: a.name,
                    is_launch,
                    in_capture: false,
                });
                t.corrs.push(a.correlation_id);
            }
        }
        Record::Dropped(d) => {
            let n: &mut u64 = gpu_dropped.entry(d.source).or_default();
            *n = n.saturating_add(d.count);
        }
        Record::Note(n) => notes.push(format!("pid {}: {}", n.pid, n.text)),
        _ => {}
    })?;
    if let Some((p, t)) = cur {
        apis.insert(p, t);
    }
    summary.api_launches += api_launches;
    summary.gpu_dropped = gpu_dropped;
    summary.notes.extend(notes);
    mark_captured(&mut apis, captures);
    Ok(apis)
}

const NAME_LAUNCH: u8 = 1;
const NAME_OTHER: u8 = 2;
const NAME_BEGIN_CAPTURE: u8 = 3;
const NAME_END_CAPTURE: u8 = 4;

fn name_class(name: &str) -> u8 {
    if is_launch_api(name) {
        return NAME_LAUNCH;
    }
    match api_stem(name) {
        "cudaStreamBeginCapture"
        | "cuStreamBeginCapture"
        | "cudaStreamBeginCaptureToGraph"
        | "cuStreamBeginCaptureToGraph" => NAME_BEGIN_CAPTURE,
        "cudaStreamEndCapture" | "cuStreamEndCapture" => NAME_END_CAPTURE,
        _ => NAME_OTHER,
    }
}

/// Marks the launch calls each thread made between beginning and ending a stream
/// capture. (The trace does not say which stream a launch went to; a launch on
/// the capturing thread to another stream during a capture is rare, and CUDA's
/// default global capture mode forbids most other work then.)
fn mark_captured(
    apis: &mut FxHashMap<u32, PidApis>,
    mut captures: Vec<(u32, u32, u64, u64, bool)>,
) {
    if captures.is_empty() {
        return;
    }
    captures.sort_unstable_by_key(|&(pid, tid, start, _, _)| (pid, tid, start));
    // (pid, tid) → [begin call's start, end call's end] intervals, in time order.
    let mut windows: FxHashMap<(u32, u32), Vec<(u64, u64)>> = FxHashMap::default();
    let mut open: Option<(u32, u32, u64)> = None;
    for (pid, tid, start, end, begins) in captures {
        match (begins, open) {
            (true, _) => open = Some((pid, tid, start)),
            (false, Some((p, t, from))) if (p, t) == (pid, tid) => {
                windows.entry((pid, tid)).or_default().push((from, end));
                open = None;
            }
            _ => {}
        }
    }
    // A capture still open when the trace ends covers the rest of it.
    if let Some((pid, tid, from)) = open {
        windows
            .entry((pid, tid))
            .or_default()
            .push((from, u64::MAX));
    }
    for (&pid, t) in apis.iter_mut() {
        for info in t.infos.iter_mut().filter(|i| i.is_launch) {
            if let Some(w) = windows.get(&(pid, info.tid)) {
                let i = w.partition_point(|&(from, _)| from <= info.start_ns);
                info.in_capture = i > 0 && info.start_ns <= w[i - 1].1;
            }
        }
    }
}

/// CPU-trace launches whose stack stops before a root frame. (Stacks the GPU
/// inputs carry are judged by their readers: an importer's Python or operator
/// stacks never start at `_start`, and the injection library records how each of
/// its stacks ended.)
fn count_truncated(cpu: &CpuTrace) -> u64 {
    let complete: Vec<bool> = (0..cpu.stacks.len() as u32)
        .map(|i| stacks::is_complete(cpu.stacks.text(StackId(i))))
        .collect();
    cpu.launches
        .iter()
        .filter(|l| !complete[l.stack.index()] && !cpu.is_wait(l))
        .count() as u64
}

/// Stacks the GPU inputs carry join the CPU side's launches, after the CPU
/// trace's own, so that its stack wins a (pid, correlation id) both hold.
fn add_carried_stacks(cpu: &mut CpuTrace, stacks: &CpuTrace) {
    // Only calls the CPU trace has no stack for: the others would be counted as
    // duplicates, and as launches without GPU work.
    let have: rustc_hash::FxHashSet<(u32, u32)> = cpu
        .launches
        .iter()
        .filter(|l| l.correlation_id != 0)
        .map(|l| (l.pid, l.correlation_id))
        .collect();
    if have.is_empty() {
        cpu.append(stacks);
    } else {
        let mut missing = stacks.clone();
        missing
            .launches
            .retain(|l| !have.contains(&(l.pid, l.correlation_id)));
        cpu.append(&missing);
    }
}

/// CPU launches by (pid, correlation id), and each launch's unwrapped id.
#[derive(Default)]
struct CpuIndex {
    by_pid: FxHashMap<u32, WrapIndex>,
    corrs: Vec<Corr>,
}

/// Indexes the CPU launches; ids seen twice are counted.
fn index_cpu(cpu: &CpuTrace, summary: &mut Summary) -> CpuIndex {
    let mut index = CpuIndex::default();
    let mut ids = Unwrap::default();
    for (i, l) in cpu.launches.iter().enumerate() {
        let corr = ids.next(l.pid, l.correlation_id);
        index.corrs.push(corr);
        if corr != 0
            && !index
                .by_pid
                .entry(l.pid)
                .or_default()
                .insert(corr, i as u32)
        {
            summary.duplicate_cpu_ids += 1;
        }
    }
    index
}

/// The API calls and CPU launches of every process, by correlation id.
struct Index<'a> {
    apis: &'a FxHashMap<u32, PidApis>,
    cpu: &'a CpuIndex,
    /// Passed on to the sinks in each [`Context`].
    view: View,
}

impl<'a> Index<'a> {
    /// (launch index, API call) of a (pid, correlation id).
    fn lookup(&self, pid: u32, corr: Corr) -> (Option<usize>, Option<&'a ApiInfo>) {
        let api = self
            .apis
            .get(&pid)
            .and_then(|a| a.by_corr.get(corr).map(|i| &a.infos[i as usize]));
        let launch = self
            .cpu
            .by_pid
            .get(&pid)
            .and_then(|x| x.get(corr))
            .map(|i| i as usize);
        (launch, api)
    }
}

/// Pass 2: streams records to the sinks with their matches. Returns which CPU
/// launches some activity matched.
fn stream_records(
    gpu: &GpuInputs,
    strings: &mut StringTable,
    cpu: Option<&CpuTrace>,
    index: &Index<'_>,
    offsets: &FxHashMap<u32, i64>,
    summary: &mut Summary,
    sinks: &mut [&mut dyn Sink],
) -> Result<Vec<bool>> {
    let clock = gpu.clock();
    let mut matched = vec![false; cpu.map_or(0, |c| c.launches.len())];
    let mut sink_err = None;
    // The same unwrapping of API ids as in pass 1, and one for GPU records.
    let (mut api_ids, mut gpu_ids) = (Unwrap::default(), Unwrap::default());
    gpu.visit(strings, &mut |rec, names| {
        if sink_err.is_some() {
            return;
        }
        let ctx = Context {
            strings: names,
            cpu,
            clock,
            view: index.view,
            offsets,
        };
        let m = match rec {
            Record::Api(a) => to_match(
                cpu,
                index.lookup(a.pid, api_ids.next(a.pid, a.correlation_id)),
            ),
            Record::Activity(a) => {
                let corr = gpu_ids.next(a.pid, a.correlation_id);
                let found = index.lookup(a.pid, corr);
                if let Some(i) = found.0 {
                    matched[i] = true;
                }
                let mut m = to_match(cpu, found);
                if let (Some(l), Some(c)) = (m.launch, cpu) {
                    m.graph_stack = c.graph_stack(l, a.graph_node_id);
                }
                if let ActivityKind::Sync {
                    wait:
                        Some(SyncWait {
                            record_correlation_id: Some(wait_corr),
                            ..
                        }),
                    ..
                } = a.kind
                {
                    // The event's record is the call nearest this one's id.
                    let record = if corr == 0 {
                        Corr::from(wait_corr)
                    } else {
                        near(corr, wait_corr)
                    };
                    m.wait_record = index.lookup(a.pid, record).1;
                }
                count_activity(summary, a, &m);
                m
            }
            _ => Match::default(),
        };
        for s in sinks.iter_mut() {
            if let Err(e) = s.record(&ctx, rec, &m) {
                sink_err = Some(e);
                return;
            }
        }
    })?;
    match sink_err {
        Some(e) => Err(e),
        None => Ok(matched),
    }
}

fn to_match<'a>(
    cpu: Option<&'a CpuTrace>,
    (launch, api): (Option<usize>, Option<&'a ApiInfo>),
) -> Match<'a> {
    Match {
        launch: launch.and_then(|i| cpu.map(|c| &c.launches[i])),
        api,
        graph_stack: None,
        wait_record: None,
    }
}

fn count_activity(summary: &mut Summary, a: &Activity, m: &Match<'_>) {
    match a.kind {
        ActivityKind::Kernel { .. } => {
            summary.kernels += 1;
            summary.graph_kernels += u64::from(a.graph_id != 0);
            match m.no_stack() {
                None => summary.kernels_matched += 1,
                Some(r) => *summary.kernels_unmatched.entry(r).or_default() += 1,
            }
        }
        _ => {
            summary.other_activities += 1;
            summary.other_matched += u64::from(m.launch.is_some());
        }
    }
}

/// Pairs CPU launches without correlation ids with launch API calls by time, and
/// writes the ids it finds into the launches.
fn pair_by_time(
    cpu: &mut CpuTrace,
    apis: &FxHashMap<u32, PidApis>,
    opts: &Options,
    offsets: &mut FxHashMap<u32, i64>,
    pairings: &mut Vec<Pairing>,
) {
    // Group launch indices by pid, keeping exact ones aside.
    let mut by_pid: FxHashMap<u32, (Vec<u32>, bool)> = FxHashMap::default();
    for (i, l) in cpu.launches.iter().enumerate() {
        let e = by_pid.entry(l.pid).or_default();
        if l.correlation_id == 0 {
            e.0.push(i as u32);
        } else {
            e.1 = true;
        }
    }
    let mut pids: Vec<u32> = by_pid.keys().copied().collect();
    pids.sort_unstable();
    for pid in pids {
        let (todo, has_exact) = &by_pid[&pid];
        if todo.is_empty() {
            pairings.push(Pairing {
                pid,
                exact: true,
                per_thread: true,
                offset_ns: 0,
                offset_estimated: false,
                paired: 0,
                unpaired_cpu: 0,
                unpaired_api: 0,
            });
            continue;
        }
        let empty = PidApis::default();
        let pa = apis.get(&pid).unwrap_or(&empty);
        // Launch calls not already claimed by an exact CPU line.
        let claimed: rustc_hash::FxHashSet<u32> = if *has_exact {
            cpu.launches
                .iter()
                .filter(|l| l.pid == pid && l.correlation_id != 0)
                .map(|l| l.correlation_id)
                .collect()
        } else {
            Default::default()
        };
        let mut calls: Vec<u32> = (0..pa.infos.len() as u32)
            .filter(|&i| pa.infos[i as usize].is_launch && !claimed.contains(&pa.corrs[i as usize]))
            .collect();
        calls.sort_by_key(|&i| pa.infos[i as usize].start_ns);
        let mut events: Vec<u32> = todo.clone();
        events.sort_by_key(|&i| cpu.launches[i as usize].ts_ns);

        // Per thread when the CPU side's tids are ones the API records know.
        let api_tids: rustc_hash::FxHashSet<u32> =
            calls.iter().map(|&i| pa.infos[i as usize].tid).collect();
        let known = events
            .iter()
            .filter(|&&i| api_tids.contains(&cpu.launches[i as usize].tid))
            .count();
        let per_thread = known * 2 > events.len();

        let ts: Vec<u64> = events
            .iter()
            .map(|&i| cpu.launches[i as usize].ts_ns)
            .collect();
        let spans: Vec<(u64, u64)> = calls
            .iter()
            .map(|&i| (pa.infos[i as usize].start_ns, pa.infos[i as usize].end_ns))
            .collect();
        let (offset, estimated) = match opts.cpu_clock_offset_ns {
            Some(o) => (o, false),
            None => estimate_offset(&ts, &spans, opts.slack_ns),
        };
        offsets.insert(pid, offset);

        let mut pairs: Vec<(usize, usize)> = Vec::new();
        if per_thread {
            let mut ev_by_tid: FxHashMap<u32, Vec<usize>> = FxHashMap::default();
            for (k, &i) in events.iter().enumerate() {
                ev_by_tid
                    .entry(cpu.launches[i as usize].tid)
                    .or_default()
                    .push(k);
            }
            let mut calls_by_tid: FxHashMap<u32, Vec<usize>> = FxHashMap::default();
            for (k, &i) in calls.iter().enumerate() {
                calls_by_tid
                    .entry(pa.infos[i as usize].tid)
                    .or_default()
                    .push(k);
            }
            for (tid, evs) in &ev_by_tid {
                let Some(cs) = calls_by_tid.get(tid) else {
                    continue;
                };
                let t: Vec<u64> = evs.iter().map(|&k| ts[k]).collect();
                let s: Vec<(u64, u64)> = cs.iter().map(|&k| spans[k]).collect();
                pairs.extend(
                    align(&t, &s, offset, opts.slack_ns)
                        .into_iter()
                        .map(|(a, b)| (evs[a], cs[b])),
                );
            }
        } else {
            pairs = align(&ts, &spans, offset, opts.slack_ns);
        }
        for &(e, c) in &pairs {
            cpu.launches[events[e] as usize].correlation_id = pa.corrs[calls[c] as usize];
        }
        pairings.push(Pairing {
            pid,
            exact: false,
            per_thread,
            offset_ns: offset,
            offset_estimated: estimated,
            paired: pairs.len() as u64,
            unpaired_cpu: (events.len() - pairs.len()) as u64,
            unpaired_api: (calls.len() - pairs.len()) as u64,
        });
    }
}

fn shifted(t: u64, offset: i64) -> i128 {
    i128::from(t) + i128::from(offset)
}

fn fits(t: i128, span: (u64, u64), slack: u64) -> bool {
    t >= i128::from(span.0) - i128::from(slack) && t <= i128::from(span.1) + i128::from(slack)
}

fn dist(t: i128, span: (u64, u64)) -> i128 {
    (t - i128::from(span.0)).abs()
}

/// Pairs event times `ts` with call spans (sorted by start). Each event's
/// candidates are the calls around it that it fits (± `slack`); candidate pairs are
/// accepted closest first (|event − call start|), each event and call at most once.
/// A lost or extra event thus only loses its own pair: there is no running cursor
/// that one miss can shift. Returns (event index, span index) pairs in event order.
fn align(ts: &[u64], spans: &[(u64, u64)], offset: i64, slack: u64) -> Vec<(usize, usize)> {
    let mut cands: Vec<(u64, u32, u32)> = Vec::with_capacity(ts.len() * 2);
    for (i, &t) in ts.iter().enumerate() {
        let t = shifted(t, offset);
        let k = spans.partition_point(|s| i128::from(s.0) <= t);
        let lo = k.saturating_sub(2);
        for (j, &span) in spans.iter().enumerate().take(k + 2).skip(lo) {
            if fits(t, span, slack) {
                let d = u64::try_from(dist(t, span)).unwrap_or(u64::MAX);
                cands.push((d, i as u32, j as u32));
            }
        }
    }
    cands.sort_unstable();
    let mut event_used = vec![false; ts.len()];
    let mut span_used = vec![false; spans.len()];
    let mut out = Vec::with_capacity(ts.len().min(spans.len()));
    for (_, i, j) in cands {
        let (i, j) = (i as usize, j as usize);
        if !event_used[i] && !span_used[j] {
            event_used[i] = true;
            span_used[j] = true;
            out.push((i, j));
        }
    }
    out.sort_unstable();
    out
}

/// Picks the CPU→GPU clock offset that puts the most CPU events inside launch
/// calls. Tries 0 first; otherwise candidates come from pairing each of the first
/// few events with every early call, scored on a sample of events, and the winner
/// is re-centred on the median residual of the events it pairs.
fn estimate_offset(ts: &[u64], spans: &[(u64, u64)], slack: u64) -> (i64, bool) {
    if ts.is_empty() || spans.is_empty() {
        return (0, false);
    }
    let step = (ts.len() / 512).max(1);
    let sample: Vec<u64> = ts.iter().step_by(step).copied().collect();
    let starts: Vec<u64> = spans.iter().map(|s| s.0).collect();
    let score = |off: i64| -> usize {
        sample
            .iter()
            .filter(|&&t| {
                let t = shifted(t, off);
                let k = starts.partition_point(|&s| i128::from(s) <= t + i128::from(slack));
                k > 0 && fits(t, spans[k - 1], slack)
                    || spans.get(k).is_some_and(|&s| fits(t, s, slack))
            })
            .count()
    };
    let zero = score(0);
    if zero * 10 >= sample.len() * 9 {
        return (0, false);
    }
    let mut best = (zero, 0i64);
    let first_calls = spans.len().min(2048);
    for &t in ts.iter().take(8) {
        for s in &spans[..first_calls] {
            let Ok(off) = i64::try_from(i128::from(s.0) - i128::from(t)) else {
                continue;
            };
            let sc = score(off);
            if sc > best.0 {
                best = (sc, off);
            }
        }
        if best.0 == sample.len() {
            break;
        }
    }
    // Re-centre: median of (call start - event time) over the paired events.
    let mut residuals: Vec<i128> = align(ts, spans, best.1, slack)
        .into_iter()
        .map(|(e, c)| i128::from(spans[c].0) - shifted(ts[e], best.1))
        .collect();
    if residuals.is_empty() {
        return (best.1, true);
    }
    let mid = residuals.len() / 2;
    residuals.select_nth_unstable(mid);
    let off = i128::from(best.1) + residuals[mid];
    (i64::try_from(off).unwrap_or(best.1), true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_with_stacks_off_says_so_instead_of_blaming_the_profiler() {
        let mut s = Summary {
            kernels: 3,
            ..Summary::default()
        };
        s.kernels_unmatched.insert(NoStack::NoCpuEvent, 3);
        assert!(s.to_string().contains(
            "  unmatched kernels: 3 (launch seen by CUPTI but not by the CPU profiler)\n"
        ));
        s.stacks_off = true;
        let text = s.to_string();
        assert!(
            text.contains("  unmatched kernels: 3 (CPU stacks were off: --gpu-only)\n"),
            "{text}"
        );
        assert!(!text.contains("CPU profiler"), "{text}");
    }

    #[test]
    fn summary_with_stacks_taken_in_the_program_points_at_the_recorders_reason() {
        let mut s = Summary {
            kernels: 5,
            gpu_launch_stacks: 40,
            ..Summary::default()
        };
        s.kernels_unmatched.insert(NoStack::NoCpuEvent, 5);
        s.notes
            .push("pid 7: 5 calls that take a CPU stack have none; stacks: …".into());
        let text = s.to_string();
        assert!(
            text.contains(
                "  unmatched kernels: 5 (launch recorded in the program without its stack: \
                 see the recorder's note)\n"
            ),
            "{text}"
        );
        assert!(!text.contains("CPU profiler"), "{text}");
        assert!(
            text.contains("note from the recorder: pid 7: 5 calls"),
            "{text}"
        );
    }

    #[test]
    fn align_pairs_in_order() {
        let spans: Vec<(u64, u64)> = (0..10).map(|k| (k * 100, k * 100 + 20)).collect();
        let ts: Vec<u64> = (0..10).map(|k| k * 100 + 5).collect();
        let pairs = align(&ts, &spans, 0, 50);
        assert_eq!(pairs, (0..10).map(|k| (k, k)).collect::<Vec<_>>());
    }

    #[test]
    fn one_lost_event_leaves_only_that_call_unpaired() {
        // Calls 10 µs apart, slack wider than the gap: the nearest-start rule must
        // keep later pairs aligned.
        let spans: Vec<(u64, u64)> = (0..100).map(|k| (k * 10_000, k * 10_000 + 4_000)).collect();
        let mut ts: Vec<u64> = (0..100).map(|k| k * 10_000 + 1_000).collect();
        ts.remove(40);
        let pairs = align(&ts, &spans, 0, 50_000);
        assert_eq!(pairs.len(), 99);
        for (e, c) in pairs {
            assert_eq!(c, if e < 40 { e } else { e + 1 });
        }
    }

    #[test]
    fn one_extra_event_leaves_only_itself_unpaired() {
        let spans: Vec<(u64, u64)> = (0..50).map(|k| (k * 10_000, k * 10_000 + 4_000)).collect();
        let mut ts: Vec<u64> = (0..50).map(|k| k * 10_000 + 1_000).collect();
        ts.insert(20, 20 * 10_000 - 3_000);
        let pairs = align(&ts, &spans, 0, 50_000);
        assert_eq!(pairs.len(), 50);
        assert!(
            pairs
                .iter()
                .all(|&(e, c)| c == if e < 20 { e } else { e - 1 })
        );
    }

    #[test]
    fn offset_is_estimated_from_irregular_gaps() {
        let mut start = 1_761_183_645_000_000_000u64;
        let mut spans = Vec::new();
        for k in 0..300u64 {
            start += 7_000 + (k * 7919 % 50) * 1_000;
            spans.push((start, start + 3_000));
        }
        let true_off: i64 = 1_761_000_000_123_456_789;
        let ts: Vec<u64> = spans
            .iter()
            .map(|s| (s.0 as i64 - true_off) as u64 + 500)
            .collect();
        let (off, est) = estimate_offset(&ts, &spans, 50_000);
        assert!(est);
        assert!((off - true_off + 500).abs() < 1_000, "{off} vs {true_off}");
        assert_eq!(align(&ts, &spans, off, 50_000).len(), 300);
        assert_eq!(estimate_offset(&ts[..0], &spans, 1), (0, false));
    }

    #[test]
    fn corr_index_dense_and_sparse() {
        let mut c = CorrIndex::default();
        assert!(c.insert(1, 10));
        assert!(c.insert(3_000_000_000, 11));
        assert!(!c.insert(1, 12));
        assert!(!c.insert(3_000_000_000, 13));
        assert_eq!(c.get(1), Some(10));
        assert_eq!(c.get(2), None);
        assert_eq!(c.get(3_000_000_000), Some(11));
        assert!(c.dense.len() < 10_000);
    }
}
