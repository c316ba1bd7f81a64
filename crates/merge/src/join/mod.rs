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
mod index;
mod ordered;
pub mod stacks;
mod stream;
mod summary;

pub use summary::{Pairing, Summary};

use index::index_apis;
use ordered::pair_by_time;
use stream::{CpuIndex, Index, add_carried_stacks, count_truncated, index_cpu, stream_records};

use rustc_hash::FxHashMap;

use crate::error::Result;
use crate::model::{Clock, Record, StringId, StringTable};
use crate::read::cpu::{CpuLaunch, CpuTrace, StackId};
use crate::read::input::GpuInputs;
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
#[non_exhaustive]
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
    pub(crate) fn launch_ts(&self, launch: &CpuLaunch) -> u64 {
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
            let api = l
                .correlation_id
                .and_then(|_| index.lookup(l.pid, cpu_index.corrs[i]).1);
            let captured = api.is_some_and(|a| a.in_capture)
                || l.correlation_id
                    .is_some_and(|corr| c.captured.contains(&(l.pid, corr.get())));
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
