//! Idle time against Holistic Trace Analysis (HTA), on every real PyTorch trace
//! the repository has: the repo's own (`samples/recordings/real`) and HTA's
//! multi-stream, multi-rank test traces (`tests/data/hta`, see its README).
//!
//! For each trace, HTA runs with its defaults (`tests/data/idle/hta_idle.py`),
//! and the test asserts that
//! - gpuperf counts within profiler steps exactly when HTA does;
//! - each stream's idle time (gpuperf's default figure) is within 5 % of HTA's
//!   total (host wait + kernel wait + other);
//! - no gap's cause contradicts HTA's category for the same gap (HTA without
//!   its µs rounding, so that both see one gap): HTA's "host wait" is a gap
//!   whose launch call came after the stream went idle, which gpuperf charges
//!   in part as CPU late or host sync, and only those; HTA's "kernel wait" (a
//!   gap under 30 µs) is launch latency; HTA's "other" is not launch latency
//!   alone, but a wait on another stream, on a collective, or on something
//!   the trace does not show.
//!
//! The tests skip (visibly) when HTA is not installed, unless
//! `GPUPERF_REQUIRE_HTA=1`; `crates/test-support/hta/install.sh` installs it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use gpuperf_merge::join;
use gpuperf_merge::model::StringTable;
use gpuperf_merge::read::input::GpuInputs;
use gpuperf_merge::write::idle::{Cause, IdleFolder, LAUNCH_LATENCY_MAX_NS, StreamKey};
use gpuperf_test_support::require::Need;
use serde_json::Value;

use crate::data;
use crate::imported::real;

/// The pinned HTA version `crates/test-support/hta/install.sh` installs.
const HTA_VERSION: &str = "0.5.0";

/// A Python that imports HTA: `GPUPERF_HTA_PYTHON`, or the install script's
/// venv. `None` (the test then skips, or fails under `GPUPERF_REQUIRE_HTA=1`)
/// when there is none.
pub fn hta_python() -> Option<PathBuf> {
    let python = match std::env::var_os("GPUPERF_HTA_PYTHON") {
        Some(p) => PathBuf::from(p),
        None => {
            let cache = std::env::var_os("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache")))
                .unwrap_or_default();
            cache.join(format!("gpuperf/hta-{HTA_VERSION}/bin/python"))
        }
    };
    let have = Command::new(&python)
        .args(["-c", "import hta.trace_analysis"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !have {
        Need::Hta.missing(format_args!(
            "HolisticTraceAnalysis is not importable by `{}` (run crates/test-support/hta/install.sh)",
            python.display()
        ));
        return None;
    }
    Some(python)
}

/// HTA's idle time breakdown of `trace`, by `tests/data/idle/hta_idle.py`
/// with `flags`.
pub fn run_hta(python: &Path, trace: &Path, flags: &[&str]) -> Value {
    let out = Command::new(python)
        .arg(data("idle/hta_idle.py"))
        .arg(trace)
        .args(flags)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "HTA failed on {}: {}",
        trace.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// One gap of gpuperf's timeline: its end (the next work's start), its length,
/// and the causes of its pieces.
#[derive(Debug)]
struct Gap {
    len: u64,
    causes: Vec<Cause>,
}

/// A gap being gathered from its pieces: (pid, device, stream), start, end,
/// causes.
type OpenGap = (StreamKey, u64, u64, Vec<Cause>);

/// Whether `a` is within 5 % of `b`, or both under a µs apart.
fn within_5pct(a: u64, b: u64) -> bool {
    a.abs_diff(b) * 100 <= 5 * a.max(b) || a.abs_diff(b) < 1_000
}

/// The trace's `baseTimeNanoseconds` (0 without): Kineto's timestamps count
/// from it, and gpuperf adds it; HTA does not.
fn base_ns(trace: &Path) -> u64 {
    let bytes = std::fs::read(trace).unwrap();
    let v: Value = serde_json::from_reader(flate2::read::GzDecoder::new(&bytes[..])).unwrap();
    v["baseTimeNanoseconds"].as_u64().unwrap_or(0)
}

fn check(trace: &Path) {
    let name = trace.file_name().unwrap().to_string_lossy().into_owned();
    let Some(python) = hta_python() else {
        return;
    };
    let hta = run_hta(&python, trace, &[]);
    // Every step, to the ns: the same work as gpuperf's whole-trace timeline.
    let hta_exact = run_hta(&python, trace, &["--exact", "--all-steps"]);
    let base = base_ns(trace);

    let idle = idle_of(trace);

    // HTA filters by steps when the trace has two or more.
    let hta_steps = hta["steps"].as_u64().unwrap();
    assert_eq!(
        !idle.step_windows().is_empty(),
        hta_steps >= 2,
        "{name}: gpuperf's step windows {:?}, HTA's steps {hta_steps}",
        idle.step_windows()
    );

    // Per stream id (one rank per trace, as HTA keys streams): counted and
    // whole-trace idle, and the split by cause.
    let mut ours: BTreeMap<u64, (u64, u64, [u64; 6])> = BTreeMap::new();
    for ((key, s), (_, whole)) in idle.streams().iter().zip(idle.streams_whole()) {
        let e = ours.entry(u64::from(key.stream.unwrap())).or_default();
        e.0 += s.idle_ns;
        e.1 += whole.idle_ns;
        for (t, c) in e.2.iter_mut().zip(s.by_cause_ns) {
            *t += c;
        }
    }
    let cats = ["host_wait", "kernel_wait", "other"];
    let hta_streams = hta["streams"].as_object().unwrap();
    for (stream, per) in hta_streams {
        let by: Vec<u64> = cats
            .iter()
            .map(|c| per.get(*c).and_then(Value::as_u64).unwrap_or(0))
            .collect();
        let total: u64 = by.iter().sum();
        let stream: u64 = stream.parse().unwrap();
        let (counted, whole, causes) = ours.get(&stream).copied().unwrap_or_default();
        eprintln!(
            "{name} stream {stream}: gpuperf {:.1} µs ({:.1} whole; CPU late/host sync/latency/stream wait/collective/other {:?} µs), HTA {:.1} µs (host wait/kernel wait/other {:?} µs)",
            counted as f64 / 1e3,
            whole as f64 / 1e3,
            causes.map(|c| (c as f64 / 1e3).round() as u64),
            total as f64 / 1e3,
            by.iter()
                .map(|c| (*c as f64 / 1e3).round() as u64)
                .collect::<Vec<_>>(),
        );
        assert!(
            within_5pct(counted, total),
            "{name} stream {stream}: gpuperf idle {counted} ns, HTA {total} ns"
        );
    }
    for (stream, (counted, _, _)) in &ours {
        assert!(
            *counted == 0 || hta_streams.contains_key(&stream.to_string()),
            "{name} stream {stream}: gpuperf finds {counted} ns idle, HTA no such stream"
        );
    }

    // gpuperf's gaps over the whole trace, by (stream, end): consecutive pieces
    // of one gap touch.
    let mut gaps: BTreeMap<(u64, u64), Gap> = BTreeMap::new();
    let mut slices = idle.slices().to_vec();
    slices.sort_by_key(|s| (s.stream, s.start_ns));
    let mut open: Option<OpenGap> = None;
    let mut close = |g: Option<OpenGap>| {
        if let Some((key, start, end, causes)) = g {
            let len = end - start;
            gaps.insert((u64::from(key.stream.unwrap()), end), Gap { len, causes });
        }
    };
    for s in &slices {
        match &mut open {
            Some((key, _, end, causes)) if *key == s.stream && *end == s.start_ns => {
                *end = s.end_ns;
                causes.push(s.cause);
            }
            _ => close(open.replace((s.stream, s.start_ns, s.end_ns, vec![s.cause]))),
        }
    }
    close(open);

    let (mut checked, mut unmatched) = (0u64, 0u64);
    for (stream, rows) in hta_exact["gaps"].as_object().unwrap() {
        let stream: u64 = stream.parse().unwrap();
        for row in rows.as_array().unwrap() {
            let (start, len, cat) = (
                row[0].as_u64().unwrap() + base,
                row[1].as_i64().unwrap(),
                row[2].as_str().unwrap(),
            );
            if len <= 0 {
                continue;
            }
            // HTA's µs floats give a few ns of error.
            let Some((_, gap)) = gaps
                .range((stream, start.saturating_sub(8))..=(stream, start + 8))
                .next()
            else {
                if unmatched < 3 {
                    eprintln!(
                        "{name} stream {stream}: HTA's gap of {len} ns before {start} is none of gpuperf's"
                    );
                }
                unmatched += 1;
                continue;
            };
            if gap.len.abs_diff(len as u64) > 8 {
                // Not the same gap: the item before overlapped an earlier one
                // (HTA's gap starts at the previous item's end, gpuperf's at
                // the latest end), or HTA left out work without a launch.
                if unmatched < 3 {
                    eprintln!(
                        "{name} stream {stream}: HTA's gap of {len} ns before {start} is gpuperf's {gap:?}"
                    );
                }
                unmatched += 1;
                continue;
            }
            checked += 1;
            let host = gap
                .causes
                .iter()
                .any(|c| matches!(c, Cause::CpuLate | Cause::HostSync));
            let latency_only = gap.causes.iter().all(|c| *c == Cause::LaunchLatency);
            let ok = match cat {
                "host_wait" => host,
                "kernel_wait" => latency_only,
                "other" => !host && !latency_only,
                c => panic!("HTA category {c} unknown"),
            };
            assert!(
                ok,
                "{name} stream {stream}: the gap of {len} ns before the work at {start} ns is HTA's {cat}, gpuperf's {:?}",
                gap.causes
            );
            if cat == "kernel_wait" {
                assert!(gap.len < LAUNCH_LATENCY_MAX_NS);
            }
        }
    }
    eprintln!(
        "{name}: {checked} gaps agree with HTA's category; {unmatched} of HTA's are not gaps of gpuperf's (overlaps, or work outside HTA's steps)"
    );
    // On the V100 trace HTA leaves out 10 % of the gaps: work with no launch
    // in the trace splits them in gpuperf's timeline.
    assert!(
        unmatched * 5 <= checked,
        "{name}: {checked} gaps matched, {unmatched} not"
    );
}

#[test]
fn hta_a100_16_ranks_nccl_and_cuda_graphs__idle_per_stream_and_causes_agree_with_hta() {
    check(&data("hta/a100_16rank_nccl_graphs_rank0.json.gz"));
}

#[test]
fn hta_a100_2_ranks_nccl__idle_per_stream_and_causes_agree_with_hta() {
    check(&data("hta/a100_2rank_nccl_rank0.json.gz"));
}

#[test]
fn hta_128_ranks_sampled__idle_per_stream_and_causes_agree_with_hta() {
    check(&data("hta/128rank_sampled_rank0.json.gz"));
}

#[test]
fn hta_a100_event_sync_three_streams__idle_per_stream_and_causes_agree_with_hta() {
    check(&data("hta/a100_event_sync_multi_stream.json.gz"));
}

#[test]
fn real_a100_alexnet__idle_per_stream_and_causes_agree_with_hta() {
    check(&real("a100_alexnet_kineto_syncs.pt.trace.json.gz"));
}

#[test]
fn real_a100_event_sync__idle_per_stream_and_causes_agree_with_hta() {
    check(&real("a100_event_sync_kineto.pt.trace.json.gz"));
}

#[test]
fn real_b200_vllm__idle_per_stream_and_causes_agree_with_hta() {
    check(&real("b200_vllm_gpt_oss.pt.trace.json.gz"));
}

#[test]
fn real_v100_resnet50_with_profiler_steps__idle_per_stream_and_causes_agree_with_hta() {
    check(&real("v100_resnet50_kineto2021.pt.trace.json.gz"));
}

/// gpuperf's idle analysis of `trace`, with its slices.
pub fn idle_of(trace: &Path) -> IdleFolder {
    let mut strings = StringTable::new();
    let inputs = GpuInputs::open(&[trace.to_path_buf()], &mut strings).unwrap();
    let mut idle = IdleFolder::new().with_slices();
    join::merge(
        None,
        &inputs,
        &mut strings,
        &join::Options::default(),
        &mut [&mut idle],
    )
    .unwrap();
    idle
}
