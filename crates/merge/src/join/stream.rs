//! Pass 2: the CPU launches indexed by correlation id, and every GPU record
//! streamed to the sinks with its match.

use rustc_hash::FxHashMap;

use super::index::{Corr, PidApis, Unwrap, WrapIndex, near};
use super::{ApiInfo, Context, Match, Sink, Summary, stacks};
use crate::error::Result;
use crate::model::{Activity, ActivityKind, Record, StringTable, SyncWait};
use crate::read::cpu::{CpuTrace, StackId};
use crate::read::input::GpuInputs;
use crate::view::View;

/// CPU-trace launches whose stack stops before a root frame. (Stacks the GPU
/// inputs carry are judged by their readers: an importer's Python or operator
/// stacks never start at `_start`, and the injection library records how each of
/// its stacks ended.)
pub(super) fn count_truncated(cpu: &CpuTrace) -> u64 {
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
pub(super) fn add_carried_stacks(cpu: &mut CpuTrace, stacks: &CpuTrace) {
    // Only calls the CPU trace has no stack for: the others would be counted as
    // duplicates, and as launches without GPU work.
    let have: rustc_hash::FxHashSet<(u32, u32)> = cpu
        .launches
        .iter()
        .filter_map(|l| l.correlation_id.map(|c| (l.pid, c.get())))
        .collect();
    if have.is_empty() {
        cpu.append(stacks);
    } else {
        let mut missing = stacks.clone();
        missing.launches.retain(|l| {
            l.correlation_id
                .is_none_or(|c| !have.contains(&(l.pid, c.get())))
        });
        cpu.append(&missing);
    }
}

/// CPU launches by (pid, correlation id), and each launch's unwrapped id.
#[derive(Default)]
pub(super) struct CpuIndex {
    by_pid: FxHashMap<u32, WrapIndex>,
    pub(super) corrs: Vec<Corr>,
}

/// Indexes the CPU launches; ids seen twice are counted.
pub(super) fn index_cpu(cpu: &CpuTrace, summary: &mut Summary) -> CpuIndex {
    let mut index = CpuIndex::default();
    let mut ids = Unwrap::default();
    for (i, l) in cpu.launches.iter().enumerate() {
        let corr = l.correlation_id.map_or(0, |c| ids.next(l.pid, c.get()));
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
pub(super) struct Index<'a> {
    pub(super) apis: &'a FxHashMap<u32, PidApis>,
    pub(super) cpu: &'a CpuIndex,
    /// Passed on to the sinks in each [`Context`].
    pub(super) view: View,
}

impl<'a> Index<'a> {
    /// (launch index, API call) of a (pid, correlation id).
    pub(super) fn lookup(&self, pid: u32, corr: Corr) -> (Option<usize>, Option<&'a ApiInfo>) {
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
pub(super) fn stream_records(
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
            summary.graph_kernels += u64::from(a.graph().is_some());
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
