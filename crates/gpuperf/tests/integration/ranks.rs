//! The cross-rank report of `python/gpuperf/ranks.py`: one task per rank
//! trace, in one process and fanned out over a local two-worker Dask cluster,
//! against `gpuperf report` on each trace.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

use crate::common;

/// The per-rank PyTorch traces of one real 128-rank job (ranks 0 and 1).
fn rank_traces() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../samples/recordings/ranks");
    (0..2)
        .map(|r| dir.join(format!("sampled_rank-{r}.json.gz")))
        .collect()
}

/// `python -m gpuperf.ranks ARGS` with the module of this checkout and the
/// gpuperf under test, bounded in time: a cluster that does not stop fails
/// the test rather than hanging it.
fn ranks(python: &Path, args: &[&OsStr]) -> (Value, String) {
    let o = with_module("timeout")
        .args(["-k", "10", "300"])
        .arg(python)
        .args(["-m", "gpuperf.ranks", "--json"])
        .args(args)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", common::show(&o));
    let json =
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", common::show(&o)));
    (json, common::text(&o.stderr))
}

/// `program` (Python, or a command that runs it) with the `gpuperf` module
/// of this checkout and the gpuperf under test; stdin closed.
fn with_module(program: &str) -> Command {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut c = Command::new(program);
    c.env("PYTHONPATH", repo.join("python"))
        .env("GPUPERF_COMMAND", env!("CARGO_BIN_EXE_gpuperf"))
        .stdin(Stdio::null());
    c
}

/// Per kernel name, (launches, ns) as `gpuperf report --format json` gives them.
fn report_kernels(path: &Path) -> BTreeMap<String, (u64, u64)> {
    let o = common::gpuperf_cmd()
        .arg("report")
        .arg(path)
        .args(["--format", "json", "--top", "100000"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", common::show(&o));
    let doc: Value = serde_json::from_slice(&o.stdout).unwrap();
    doc["kernels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| {
            let name = k["name"].as_str().unwrap().to_owned();
            (
                name,
                (
                    k["count"].as_u64().unwrap(),
                    k["total_ns"].as_u64().unwrap(),
                ),
            )
        })
        .collect()
}

#[test]
fn dask_two_workers__cross_rank_report_equals_the_single_process_one_and_report_s_totals() {
    let Some(python) = gpuperf_test_support::dask::python() else {
        return;
    };
    let traces = rank_traces();
    let args: Vec<&OsStr> = traces.iter().map(|p| p.as_os_str()).collect();
    let (alone, _) = ranks(&python, &args);
    let mut with_dask = args.clone();
    with_dask.extend([OsStr::new("--workers"), OsStr::new("2")]);
    let (fanned, stderr) = ranks(&python, &with_dask);

    // Both tasks ran on the cluster, and gave what one process gives.
    assert!(
        stderr.contains("2 tasks ran on ") && stderr.contains("tcp://127.0.0.1:"),
        "{stderr}"
    );
    assert_eq!(fanned, alone);
    // The cluster stopped with the command: its workers no longer listen.
    let workers: Vec<&str> = stderr
        .split_whitespace()
        .filter_map(|w| w.strip_prefix("tcp://"))
        .collect();
    assert!(!workers.is_empty(), "{stderr}");
    for w in workers {
        assert!(
            std::net::TcpStream::connect(w).is_err(),
            "worker {w} still listens"
        );
    }

    let rows = alone["ranks"].as_array().unwrap();
    assert_eq!(rows.len(), traces.len());
    for (i, (row, path)) in rows.iter().zip(&traces).enumerate() {
        // The rank is the trace's own (distributedInfo.rank), rows in rank order.
        assert_eq!(row["rank"], i as u64, "{row}");
        assert_eq!(Path::new(row["path"].as_str().unwrap()), path);
        // Kernel time, launches and NCCL time are report's, summed independently.
        let kernels = report_kernels(path);
        let is_kernel = |n: &String| !n.starts_with('[');
        let sum = |f: &dyn Fn(&String) -> bool, pick: fn(&(u64, u64)) -> u64| -> u64 {
            kernels
                .iter()
                .filter(|(n, _)| f(n))
                .map(|(_, v)| pick(v))
                .sum()
        };
        assert_eq!(row["kernel_ns"], sum(&is_kernel, |v| v.1), "{row}");
        assert_eq!(row["kernels"], sum(&is_kernel, |v| v.0), "{row}");
        let nccl = |n: &String| is_kernel(n) && n.to_lowercase().contains("nccl");
        let nccl_ns = sum(&nccl, |v| v.1);
        assert!(nccl_ns > 0, "rank {i} has NCCL kernels");
        assert_eq!(row["collective_ns"], nccl_ns, "{row}");
        assert!(row["kernel_ns"].as_u64() > Some(nccl_ns), "{row}");
        // These traces carry ProfilerStep# annotations.
        assert_eq!(row["step_from"], "ProfilerStep", "{row}");
        assert!(row["steps"].as_u64() > Some(0), "{row}");
        assert!(row["step_ns"].as_u64() > Some(0), "{row}");
        assert!(row["idle_ns"].as_u64() > Some(0), "{row}");
    }
}

#[test]
fn outliers__a_rank_beyond_median_plus_k_mads_stands_out_and_the_others_do_not() {
    // Eight ranks, one with a slow step and long NCCL wait; the rule needs no
    // Dask, only the module.
    let rows: Vec<Value> = (0..8)
        .map(|r| {
            let slow = r == 5;
            serde_json::json!({
                "rank": r,
                "kernel_ns": 1_000_000 + r * 1_000,
                "collective_ns": if slow { 900_000 } else { 200_000 + r * 2_000 },
                "idle_ns": 50_000 + r * 500,
                "step_ns": if slow { 3_000_000 } else { 2_000_000 + r * 3_000 },
            })
        })
        .collect();
    let o = with_module("python3")
        .args([
            "-c",
            "import json, sys, gpuperf.ranks as r\n\
             print(json.dumps(r.outliers(json.loads(sys.argv[1]))))",
            &Value::from(rows).to_string(),
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", common::show(&o));
    let found: Value = serde_json::from_slice(&o.stdout).unwrap();
    let found: Vec<(u64, &str)> = found
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["rank"].as_u64().unwrap(), f["metric"].as_str().unwrap()))
        .collect();
    assert_eq!(found, [(5, "collective_ns"), (5, "step_ns")]);
}

/// `gpuperf.ranks.summarize(path, rank)` in Python, with the module of this
/// checkout and the gpuperf under test; `rank` "" passes none.
fn summarize(path: &Path, rank: &str) -> Value {
    let o = with_module("python3")
        .args([
            "-c",
            "import json, sys, gpuperf.ranks as r\n\
             rank = int(sys.argv[2]) if sys.argv[2] else None\n\
             print(json.dumps(r.summarize(sys.argv[1], rank)))",
        ])
        .arg(path)
        .arg(rank)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", common::show(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}

#[test]
fn summarize__rank_is_the_trace_s_own_and_step_time_the_median_profiler_step() {
    let dir = tempfile::tempdir().unwrap();
    // A name that says another rank: the trace's distributedInfo wins.
    let trace = dir.path().join("job.rank-7.json.gz");
    std::fs::copy(&rank_traces()[1], &trace).unwrap();
    let row = summarize(&trace, "");
    assert_eq!(row["rank"], 1, "{row}");
    assert_eq!(summarize(&trace, "3")["rank"], 3);

    // The ProfilerStep# spans, read from the JSON here.
    let o = Command::new("gzip")
        .arg("-dc")
        .arg(&trace)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", common::show(&o));
    let doc: Value = serde_json::from_slice(&o.stdout).unwrap();
    let mut steps: Vec<u64> = doc["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| {
            e["ph"] == "X"
                && e["name"]
                    .as_str()
                    .is_some_and(|n| n.starts_with("ProfilerStep#"))
        })
        .map(|e| (e["dur"].as_f64().unwrap() * 1000.0).round() as u64)
        .collect();
    steps.sort_unstable();
    assert_eq!(steps.len(), 2);
    assert_eq!(row["steps"], 2);
    assert_eq!(row["step_ns"], (steps[0] + steps[1]) / 2, "{row}");
}

/// A gpuperf raw recording of one process that ran as `rank` of `world`, with
/// one launch of a 5 µs kernel.
fn raw_recording(dir: &Path, rank: u32, world: u32) {
    use gpuperf_merge::model::{Origin, ProcessOrigin, Record};
    std::fs::create_dir_all(dir).unwrap();
    let pid = 100 + rank;
    let mut t = gpuperf_test_support::traces::Trace::new();
    t.process(pid, "/usr/bin/python3", 1_000)
        .push(Record::Origin(ProcessOrigin {
            pid,
            origin: Origin {
                host: Some("node-a".into()),
                rank: Some(rank),
                local_rank: Some(rank % 8),
                world_size: Some(world),
            },
        }))
        .api(pid, pid, 1, (10_000, 12_000), "cudaLaunchKernel", 0)
        .kernel(pid, 1, (20_000, 25_000), 7, "step");
    std::fs::write(dir.join(format!("gpu-{pid}.gputrace")), t.gputrace()).unwrap();
}

#[test]
fn summarize__a_gpuperf_recording_s_rank_is_the_one_its_process_recorded() {
    // Names that say nothing of the rank (srun's `run.%h.%p`): the ranks are
    // those the processes recorded from their launcher's variables.
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (
        dir.path().join("run.node-a.100"),
        dir.path().join("run.node-a.9"),
    );
    raw_recording(&a, 12, 16);
    raw_recording(&b, 3, 16);
    for (path, rank) in [(&a, 12), (&b, 3)] {
        let row = summarize(path, "");
        assert_eq!(row["rank"], rank, "{row}");
        assert_eq!(row["kernel_ns"], 5_000, "{row}");
    }
}
