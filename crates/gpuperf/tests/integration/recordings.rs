//! `gpuperf merge` on every recording shipped in `samples/recordings`: what holds
//! for all of them (arrows forward in time, captured launches not pending).
// Test names are `<what>__<what is checked>`.
#![allow(non_snake_case)]

use crate::common;

use std::collections::{HashMap, HashSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use gpuperf_merge::model::{Record, StringTable, is_launch_api};
use gpuperf_merge::read::gputrace;
use serde_json::Value;

fn recordings() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../samples/recordings")
}

/// Every GPU input of `samples/recordings`: recording directories, trace files,
/// and the reference CUPTI log (with its CPU stacks).
fn inputs() -> Vec<Vec<PathBuf>> {
    let mut out = Vec::new();
    for kind in ["real", "simulated"] {
        let mut entries: Vec<PathBuf> = fs::read_dir(recordings().join(kind))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| {
                p.is_dir()
                    || [".json.gz", ".json", ".sqlite"]
                        .iter()
                        .any(|s| p.to_string_lossy().ends_with(s))
            })
            // A dated run of recordings (real/h200-20261130/): each of its
            // directories is one recording.
            .flat_map(|p| {
                let runs: Vec<PathBuf> = fs::read_dir(&p)
                    .into_iter()
                    .flatten()
                    .map(|e| e.unwrap().path())
                    .filter(|s| s.is_dir())
                    .collect();
                if runs.is_empty() { vec![p] } else { runs }
            })
            .collect();
        entries.sort();
        out.extend(entries.into_iter().map(|p| vec![p]));
    }
    let reference = recordings().join("reference");
    out.push(vec![reference.join("cupti.log"), reference.join("cpu.txt")]);
    out
}

/// Runs `gpuperf merge` on `input` and returns the timeline and folded stacks.
fn merge(input: &[PathBuf], dir: &Path) -> (Value, String, String) {
    let (timeline, folded) = (dir.join("t.json"), dir.join("m.folded"));
    let mut cmd = common::gpuperf_cmd();
    cmd.arg("merge").arg(&input[0]);
    if let Some(cpu) = input.get(1) {
        cmd.arg("--cpu").arg(cpu);
    }
    let o = cmd
        .arg("-c")
        .arg(&timeline)
        .arg("-m")
        .arg(&folded)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "{input:?}: {stderr}");
    let t = serde_json::from_slice(&fs::read(&timeline).unwrap()).unwrap();
    (t, fs::read_to_string(&folded).unwrap(), stderr)
}

fn micros(v: &Value) -> f64 {
    v.as_f64()
        .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
        .unwrap()
}

#[test]
fn every_recording__no_flow_arrow_runs_backwards_in_time() {
    let dir = tempfile::tempdir().unwrap();
    for input in inputs() {
        let (t, _, _) = merge(&input, dir.path());
        let mut starts: HashMap<u64, f64> = HashMap::new();
        let mut ends: Vec<(u64, f64)> = Vec::new();
        for e in t["traceEvents"].as_array().unwrap() {
            match e["ph"].as_str() {
                Some("s") => {
                    starts.insert(e["id"].as_u64().unwrap(), micros(&e["ts"]));
                }
                Some("f") => ends.push((e["id"].as_u64().unwrap(), micros(&e["ts"]))),
                _ => {}
            }
        }
        assert!(!ends.is_empty(), "{input:?}: no arrows");
        let backwards: Vec<_> = ends
            .iter()
            .filter(|(id, to)| starts[id] > *to)
            .map(|(id, to)| (id, starts[id], to))
            .collect();
        assert!(
            backwards.is_empty(),
            "{input:?}: {} of {} arrows run backwards, e.g. {:?}",
            backwards.len(),
            ends.len(),
            &backwards[..backwards.len().min(3)]
        );
    }
}

#[test]
fn cudarc_graph__captured_launches_counted_as_captured_never_pending() {
    let rec = recordings().join("simulated/cudarc_graph");
    // From the recording itself: launch calls whose correlation id no GPU
    // activity carries (the launches made while capturing the graph).
    let trace = fs::read_dir(&rec)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "gputrace"))
        .unwrap();
    let mut strings = StringTable::new();
    let (mut launches, mut with_work) = (HashSet::new(), HashSet::new());
    let file = fs::File::open(&trace).unwrap();
    gputrace::read(file, &trace, &mut strings, &mut |r, names| match r {
        Record::Api(a) if is_launch_api(names.get(a.name)) => {
            launches.insert(a.correlation_id);
        }
        Record::Activity(a) => {
            with_work.insert(a.correlation_id);
        }
        _ => {}
    })
    .unwrap();
    let without_work = launches.difference(&with_work).count();
    assert!(
        without_work > 0,
        "the sample captures launches into a graph"
    );

    let dir = tempfile::tempdir().unwrap();
    let (t, folded, stderr) = merge(&[rec], dir.path());
    assert!(
        stderr.contains(&format!(
            "  CPU launches captured into CUDA graphs: {without_work} "
        )),
        "{stderr}"
    );
    assert!(!stderr.contains("unmatched CPU launches"), "{stderr}");
    assert!(!folded.contains("[GPU_Launch_Pending]"), "{folded}");
    let markers = |name: &str| {
        t["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["name"] == name)
            .count()
    };
    assert_eq!(markers("launch captured into a CUDA graph"), without_work);
    assert_eq!(markers("launch without GPU activity"), 0);
}

/// Runs `gpuperf` with `args` and returns its stdout; fails on a non-zero exit.
fn gpuperf_stdout(args: &[&std::ffi::OsStr]) -> String {
    let o = common::gpuperf_cmd()
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", common::show(&o));
    String::from_utf8(o.stdout).unwrap()
}

#[test]
fn merge_parquet__duckdb_reads_the_per_kernel_totals_that_report_prints() {
    let rec = recordings().join("simulated/gpt2_small_eager");
    let dir = tempfile::tempdir().unwrap();
    let pq = dir.path().join("pq");
    gpuperf_stdout(&[
        "merge".as_ref(),
        rec.as_os_str(),
        "--parquet".as_ref(),
        pq.as_os_str(),
    ]);
    let report: Value = serde_json::from_str(&gpuperf_stdout(&[
        "report".as_ref(),
        rec.as_os_str(),
        "--format".as_ref(),
        "json".as_ref(),
        "--top".as_ref(),
        "100000".as_ref(),
    ]))
    .unwrap();
    let events = pq.join("events.parquet");
    let stacks = pq.join("stacks.parquet");
    let Some(rows) = gpuperf_test_support::duckdb::query(&format!(
        "select name, count(*), sum(duration_ns)::bigint from '{}' \
         where kind in ('kernel', 'memcpy', 'memset') group by name",
        events.display()
    )) else {
        return;
    };
    let from_duckdb: HashMap<String, (i64, i64)> = rows
        .iter()
        .map(|r| {
            let n = r[0].as_str().unwrap().to_owned();
            (n, (r[1].as_i64().unwrap(), r[2].as_i64().unwrap()))
        })
        .collect();
    let from_report: HashMap<String, (i64, i64)> = report["kernels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| {
            let n = k["name"].as_str().unwrap().to_owned();
            (
                n,
                (
                    k["count"].as_i64().unwrap(),
                    k["total_ns"].as_i64().unwrap(),
                ),
            )
        })
        .collect();
    assert!(from_report.len() >= 5, "{from_report:?}");
    assert_eq!(from_duckdb, from_report);

    // Every kernel's stack is in the stacks table, and reaches the script.
    let Some(rows) = gpuperf_test_support::duckdb::query(&format!(
        "select count(*) filter (where e.stack_id is not null and s.stack_id is null), \
                count(*) filter (where e.stack_id is null), \
                count(*) filter (where len(list_filter(s.frames, lambda f: f like 'gpt2_small.%')) = 0) \
         from '{}' e left join '{}' s using (stack_id) where e.kind = 'kernel'",
        events.display(),
        stacks.display()
    )) else {
        return;
    };
    assert_eq!(
        rows[0][0].as_i64(),
        Some(0),
        "stack ids missing from stacks.parquet"
    );
    assert_eq!(rows[0][1].as_i64(), Some(0), "kernels without a stack");
    assert_eq!(
        rows[0][2].as_i64(),
        Some(0),
        "kernels whose stack misses the script"
    );

    // The schema's version is in the file, and API calls are rows of their own.
    let Some(rows) = gpuperf_test_support::duckdb::query(&format!(
        "select (select value from parquet_kv_metadata('{0}') \
                 where decode(key) = 'gpuperf.schema_version')::varchar, \
                (select count(*) from '{0}' where kind = 'api' and name = 'cudaLaunchKernel')",
        events.display()
    )) else {
        return;
    };
    assert_eq!(rows[0][0].as_str(), Some("1"), "{rows:?}");
    assert!(rows[0][1].as_i64().unwrap() > 0, "{rows:?}");
}

#[test]
fn merge_kineto_rank_traces__their_distributed_info_names_the_rank_in_parquet_and_timeline() {
    // Ranks 0 and 1 of a 128-rank job (HTA's test traces): the rank is the
    // trace's own `distributedInfo`, which gpuperf's environment cannot know.
    for rank in [0i64, 1] {
        let trace = recordings().join(format!("ranks/sampled_rank-{rank}.json.gz"));
        let dir = tempfile::tempdir().unwrap();
        let (pq, timeline) = (dir.path().join("pq"), dir.path().join("t.json"));
        gpuperf_stdout(&[
            "merge".as_ref(),
            trace.as_os_str(),
            "--parquet".as_ref(),
            pq.as_os_str(),
            "-c".as_ref(),
            timeline.as_os_str(),
        ]);
        let Some(rows) = gpuperf_test_support::duckdb::query(&format!(
            "select rank, world_size, local_rank, count(*) from '{}' group by all",
            pq.join("events.parquet").display()
        )) else {
            return;
        };
        assert_eq!(rows.len(), 1, "{rows:?}");
        assert_eq!(rows[0][0].as_i64(), Some(rank), "{rows:?}");
        assert_eq!(rows[0][1].as_i64(), Some(128), "{rows:?}");
        assert!(rows[0][2].is_null(), "{rows:?}");
        assert!(rows[0][3].as_i64().unwrap() > 1000, "{rows:?}");
        let Some(tp) = gpuperf_test_support::perfetto::TraceProcessor::load(&timeline).unwrap()
        else {
            return;
        };
        let named = tp
            .query(&format!(
                "select count(*) as n from process where name like '%(pid %, rank {rank} of 128)'"
            ))
            .unwrap();
        // The CPU process and its GPU.
        assert_eq!(named.rows[0][0].as_i64(), Some(2), "{:?}", named.rows);
    }
}
