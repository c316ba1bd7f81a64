//! Ordered pairing: CPU launches without correlation ids paired with launch API
//! calls by time, with the clock offset estimated per process.

use std::num::NonZeroU32;

use rustc_hash::FxHashMap;

use super::index::PidApis;
use super::{Options, Pairing};
use crate::read::cpu::CpuTrace;

/// Pairs CPU launches without correlation ids with launch API calls by time, and
/// writes the ids it finds into the launches.
pub(super) fn pair_by_time(
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
        if l.correlation_id.is_none() {
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
        let calls = launch_calls(cpu, pa, pid, *has_exact);
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
            let ev_by_tid = by_tid(events.iter().map(|&i| cpu.launches[i as usize].tid));
            let calls_by_tid = by_tid(calls.iter().map(|&i| pa.infos[i as usize].tid));
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
            cpu.launches[events[e] as usize].correlation_id =
                NonZeroU32::new(pa.corrs[calls[c] as usize]);
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

/// A process's launch calls not already claimed by an exact CPU line, in start
/// order.
fn launch_calls(cpu: &CpuTrace, pa: &PidApis, pid: u32, has_exact: bool) -> Vec<u32> {
    let claimed: rustc_hash::FxHashSet<u32> = if has_exact {
        cpu.launches
            .iter()
            .filter(|l| l.pid == pid)
            .filter_map(|l| l.correlation_id.map(NonZeroU32::get))
            .collect()
    } else {
        Default::default()
    };
    let mut calls: Vec<u32> = (0..pa.infos.len() as u32)
        .filter(|&i| pa.infos[i as usize].is_launch && !claimed.contains(&pa.corrs[i as usize]))
        .collect();
    calls.sort_by_key(|&i| pa.infos[i as usize].start_ns);
    calls
}

/// The positions of each thread's items, by thread id.
fn by_tid(tids: impl Iterator<Item = u32>) -> FxHashMap<u32, Vec<usize>> {
    let mut by_tid: FxHashMap<u32, Vec<usize>> = FxHashMap::default();
    for (k, tid) in tids.enumerate() {
        by_tid.entry(tid).or_default().push(k);
    }
    by_tid
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
}
