//! PyTorch profiler (Kineto) import at scale: read → join → folded on a trace of
//! 1 M kernels, made by repeating the real V100 trace of
//! `samples/recordings/real/` with shifted times and ids.
//!
//! `cargo bench -p gpuperf-merge --bench kineto [-- --kernels N --runs R --idle 1]`
//!
//! With `--idle 1`, each run is a pair of children, without and with the
//! idle-time analysis (`gpuperf merge --idle`), and the medians of both and
//! the share the analysis adds are printed.
//!
//! The first run writes the scaled trace (uncompressed JSON, about 4 KB per kernel,
//! as the original: 3.3 GB for 1 M kernels) under cargo's target directory
//! (`target/tmp/gpuperf-kineto-bench-N/`), and later runs reuse it; `cargo clean`
//! removes it. Each run is a fresh child process (pinned to
//! one core with `taskset` when present) that streams the JSON, builds the CPU
//! stacks, joins and writes the folded output to /dev/null; it reports its wall
//! time, its time on the CPU (in all, and for reading the trace: steadier figures on
//! a busy machine) and its peak RSS (VmHWM). Medians are printed.

use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::path::Path;
use std::time::Instant;

use gpuperf_merge::model::StringTable;
use gpuperf_merge::read::input::GpuInputs;
use gpuperf_test_support::bench::{
    arg, cached_input, child_figures, cpu_secs, median, peak_rss_kib,
};
use serde_json::Value;

mod common;

const CHILD_ENV: &str = "GPUPERF_KINETO_BENCH_CHILD";
/// A child that also runs the idle-time analysis.
const IDLE_CHILD_ENV: &str = "GPUPERF_KINETO_BENCH_IDLE_CHILD";
/// The scaled trace's file name in its directory.
const TRACE: &str = "scaled.pt.trace.json";

fn main() {
    if let Ok(file) = std::env::var(CHILD_ENV) {
        child(Path::new(&file), false);
        return;
    }
    if let Ok(file) = std::env::var(IDLE_CHILD_ENV) {
        child(Path::new(&file), true);
        return;
    }
    let kernels: u64 = arg("--kernels", 1_000_000);
    let runs: u64 = arg("--runs", 3);
    let idle = arg("--idle", 0u64) == 1;
    let t = Instant::now();
    let mut made = 0;
    let (dir, _) = cached_input(
        env!("CARGO_TARGET_TMPDIR"),
        &format!("gpuperf-kineto-bench-{kernels}"),
        |dir| {
            made = generate(&dir.join(TRACE), kernels)?;
            Ok(())
        },
    );
    let file = dir.join(TRACE);
    if made > 0 {
        eprintln!(
            "generated {made} kernels ({:.2} GB) in {:.1} s at {}",
            fs::metadata(&file).map_or(0, |m| m.len()) as f64 / 1e9,
            t.elapsed().as_secs_f64(),
            file.display()
        );
    }
    let size = fs::metadata(&file).map_or(0, |m| m.len());
    let exe = std::env::current_exe().expect("current exe");
    let mut results: Vec<Run> = Vec::new();
    let mut with_idle: Vec<Run> = Vec::new();
    for _ in 0..runs {
        if idle {
            let r = Run::from(child_figures(&exe, IDLE_CHILD_ENV, file.as_os_str()));
            eprintln!(
                "  run with idle analysis: {:.3} s wall, {:.3} s on the CPU ({:.3} s reading)",
                r.wall, r.cpu, r.read_cpu
            );
            with_idle.push(r);
        }
        let f = child_figures(&exe, CHILD_ENV, file.as_os_str());
        assert_eq!(
            f.len(),
            5,
            "seconds, peak kB, kernels, CPU and read CPU seconds"
        );
        let r = Run {
            wall: f[0],
            peak_kb: f[1] as u64,
            kernels: f[2] as u64,
            cpu: f[3],
            read_cpu: f[4],
        };
        eprintln!(
            "  run: {:.3} s wall, {:.3} s on the CPU ({:.3} s reading, {:.3} s joining and folding), peak RSS {:.0} MiB",
            r.wall,
            r.cpu,
            r.read_cpu,
            r.cpu - r.read_cpu,
            r.peak_kb as f64 / 1024.0
        );
        results.push(r);
    }
    let median = |f: &dyn Fn(&Run) -> f64| median(results.iter().map(f).collect());
    let secs = median(&|r| r.wall);
    let cpu = median(&|r| r.cpu);
    let read = median(&|r| r.read_cpu);
    let rest = median(&|r| r.cpu - r.read_cpu);
    let n = results[0].kernels;
    let peak = results.iter().map(|r| r.peak_kb).max().unwrap_or(0);
    println!(
        "kineto: {n} kernels ({:.2} GB of JSON) read+join+folded in {secs:.2} s wall, {cpu:.2} s on the CPU ({read:.2} s reading, {rest:.2} s joining and folding; medians of {runs}) = {:.0} MB/s on one core; peak RSS {:.0} MiB (max over runs)",
        size as f64 / 1e9,
        size as f64 / secs / 1e6,
        peak as f64 / 1024.0
    );
    if idle {
        let m = |v: &[Run], f: &dyn Fn(&Run) -> f64| {
            gpuperf_test_support::bench::median(v.iter().map(f).collect())
        };
        let (cpu_i, rest_i) = (
            m(&with_idle, &|r| r.cpu),
            m(&with_idle, &|r| r.cpu - r.read_cpu),
        );
        println!(
            "kineto --idle: {cpu_i:.2} s on the CPU with the idle analysis against {cpu:.2} s without ({:+.1} %); joining, folding and idle {rest_i:.2} s against joining and folding {rest:.2} s ({:+.1} %, {:+.1} % of the whole merge) (medians of {runs} pairs)",
            (cpu_i / cpu - 1.0) * 100.0,
            (rest_i / rest - 1.0) * 100.0,
            (rest_i - rest) / cpu * 100.0
        );
    }
}

impl From<Vec<f64>> for Run {
    fn from(f: Vec<f64>) -> Self {
        assert_eq!(
            f.len(),
            5,
            "seconds, peak kB, kernels, CPU and read CPU seconds"
        );
        Self {
            wall: f[0],
            peak_kb: f[1] as u64,
            kernels: f[2] as u64,
            cpu: f[3],
            read_cpu: f[4],
        }
    }
}

/// What one child run reports.
struct Run {
    wall: f64,
    peak_kb: u64,
    kernels: u64,
    /// Seconds on the CPU, in all and for reading the trace.
    cpu: f64,
    read_cpu: f64,
}

fn child(file: &Path, idle: bool) {
    let t = Instant::now();
    let mut strings = StringTable::new();
    let gpu = GpuInputs::open(&[file.to_path_buf()], &mut strings).expect("Kineto trace");
    let read_cpu = cpu_secs();
    let kernels = common::join_and_fold(None, &gpu, &mut strings, idle);
    let secs = t.elapsed().as_secs_f64();
    let hwm = peak_rss_kib();
    println!("{secs} {hwm} {kernels} {} {read_cpu}", cpu_secs());
}

/// Repeats the V100 trace's events until `kernels` kernels: copy k shifts every
/// timestamp by k × the trace's span and every correlation, flow and external id by
/// k × its largest, into `file`. Returns the number of kernels written.
fn generate(file: &Path, kernels: u64) -> std::io::Result<u64> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../samples/recordings/real/v100_resnet50_kineto2021.pt.trace.json.gz");
    let trace: Value = serde_json::from_reader(flate2::read::GzDecoder::new(File::open(src)?))?;
    let events = trace["traceEvents"].as_array().expect("traceEvents");
    let per_copy = events.iter().filter(|e| e["cat"] == "Kernel").count() as u64;
    let copies = kernels.div_ceil(per_copy);
    let max =
        |f: &dyn Fn(&Value) -> Option<u64>| events.iter().filter_map(f).max().unwrap_or(0) + 1;
    let t0 = max(&|e| Some(u64::MAX - e["ts"].as_u64()?)); // u64::MAX - min ts + 1
    let t0 = u64::MAX - t0 + 1;
    let span = max(&|e| Some(e["ts"].as_u64()? + e["dur"].as_u64().unwrap_or(0) - t0));
    let corr = max(&|e| {
        e["args"]["correlation"]
            .as_u64()
            .or_else(|| e["id"].as_u64())
    });
    let ext = max(&|e| {
        e["args"]["External id"]
            .as_u64()
            .or_else(|| e["args"]["external id"].as_u64())
    });
    let mut out = BufWriter::with_capacity(1 << 22, File::create(file)?);
    write!(out, "{{\"schemaVersion\": 1, \"deviceProperties\": ")?;
    serde_json::to_writer(&mut out, &trace["deviceProperties"])?;
    write!(out, ",\n\"traceEvents\": [\n")?;
    let mut first = true;
    for k in 0..copies {
        for e in events {
            let mut e = e.clone();
            if let Some(ts) = e["ts"].as_u64() {
                e["ts"] = (ts + k * span).into();
            }
            if let Some(id) = e["id"].as_u64() {
                e["id"] = (id + k * corr).into();
            }
            for key in ["correlation", "External id", "external id"] {
                let step = if key == "correlation" { corr } else { ext };
                if let Some(v) = e["args"].get(key).and_then(Value::as_u64) {
                    e["args"][key] = (v + k * step).into();
                }
            }
            if !first {
                out.write_all(b",\n")?;
            }
            first = false;
            serde_json::to_writer(&mut out, &e)?;
        }
    }
    write!(out, "\n]}}\n")?;
    out.flush()?;
    Ok(copies * per_copy)
}
