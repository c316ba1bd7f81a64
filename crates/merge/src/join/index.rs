//! Pass 1: the API calls of the GPU inputs, by (pid, correlation id), with
//! 32-bit correlation ids unwrapped to 64 bits.

use std::collections::hash_map::Entry;

use rustc_hash::FxHashMap;

use super::{ApiInfo, Summary};
use crate::error::Result;
use crate::model::{Record, StringTable, api_stem, is_launch_api};
use crate::read::input::GpuInputs;

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
pub(super) type Corr = i64;

/// Unwraps each process's stream of correlation ids: every id is read as the
/// 64-bit id nearest the stream's previous one, as serial numbers are (RFC
/// 1982), so a stream may run out of order by up to 2^31 ids. Each stream (a
/// process's API calls, its GPU records, its CPU launches) has its own.
#[derive(Debug, Default)]
pub(super) struct Unwrap {
    last: FxHashMap<u32, Corr>,
}

impl Unwrap {
    pub(super) fn next(&mut self, pid: u32, id: u32) -> Corr {
        if id == 0 {
            return 0;
        }
        let last = self.last.entry(pid).or_insert(Corr::from(id));
        *last = near(*last, id);
        *last
    }
}

/// The 64-bit id with low half `id` nearest `anchor`.
pub(super) fn near(anchor: Corr, id: u32) -> Corr {
    anchor + Corr::from(id.wrapping_sub(anchor as u32) as i32)
}

/// A [`CorrIndex`] per wrap of the 32-bit counter (one, unless the recording
/// is a day long).
#[derive(Debug, Default)]
pub(super) struct WrapIndex {
    wraps: Vec<(i32, CorrIndex)>,
}

impl WrapIndex {
    pub(super) fn insert(&mut self, corr: Corr, idx: u32) -> bool {
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

    pub(super) fn get(&self, corr: Corr) -> Option<u32> {
        let wrap = (corr >> 32) as i32;
        self.wraps
            .iter()
            .find(|(w, _)| *w == wrap)
            .and_then(|(_, c)| c.get(corr as u32))
    }
}

#[derive(Default)]
pub(super) struct PidApis {
    pub(super) infos: Vec<ApiInfo>,
    pub(super) corrs: Vec<u32>,
    pub(super) by_corr: WrapIndex,
}

/// Pass 1: indexes API calls by (pid, correlation id), and counts launches,
/// drops and notes.
pub(super) fn index_apis(
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
        Record::Note(n) => notes.push(n.clone()),
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

#[cfg(test)]
mod tests {
    use super::*;

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
