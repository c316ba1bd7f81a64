//! Merge throughput and peak memory: read → join → folded on a generated trace.
//!
//! `cargo bench -p gpuperf-merge --bench merge [-- --launches N --runs R]`
//!
//! Generates N launches (default 10 M): N CPU lines in gpuperf's format over 50
//! distinct stacks, and a GPU trace with N API records and N kernel records. Each
//! run is a fresh child process (pinned to one core with `taskset` when present)
//! that reads both files, joins them and writes the folded output to /dev/null; it
//! reports its time and its peak RSS (VmHWM). The median run is printed. The
//! generated files are kept under cargo's target directory
//! (`target/tmp/gpuperf-merge-bench-N/`) for later runs; `cargo clean` removes
//! them.

use std::fs::File;
use std::io::BufWriter;
use std::path::Path;
use std::time::Instant;

use gpuperf_merge::model::{
    Activity, ActivityKind, ApiCall, ApiDomain, Process, Record, StringTable,
};
use gpuperf_merge::read::cpu::{self, CpuTrace};
use gpuperf_merge::read::gputrace;
use gpuperf_merge::read::input::GpuInputs;
use gpuperf_test_support::bench::{arg, cached_input, child_figures, peak_rss_kib};

mod common;

const CHILD_ENV: &str = "GPUPERF_MERGE_BENCH_CHILD";

fn main() {
    if let Ok(dir) = std::env::var(CHILD_ENV) {
        child(Path::new(&dir));
        return;
    }
    let launches: u64 = arg("--launches", 10_000_000);
    let runs: u64 = arg("--runs", 5);
    let t = Instant::now();
    let (dir, made) = cached_input(
        env!("CARGO_TARGET_TMPDIR"),
        &format!("gpuperf-merge-bench-{launches}"),
        |dir| generate(dir, launches),
    );
    if made {
        eprintln!(
            "generated {launches} launches in {:.1} s under {}",
            t.elapsed().as_secs_f64(),
            dir.display()
        );
    }
    let exe = std::env::current_exe().expect("current exe");
    let mut results: Vec<(f64, u64)> = Vec::new();
    for _ in 0..runs {
        let f = child_figures(&exe, CHILD_ENV, dir.as_os_str());
        assert_eq!(f.len(), 2, "seconds and peak kB");
        let (secs, hwm) = (f[0], f[1] as u64);
        eprintln!(
            "  run: {secs:.3} s, peak RSS {:.0} MiB",
            hwm as f64 / 1024.0
        );
        results.push((secs, hwm));
    }
    results.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (secs, _) = results[results.len() / 2];
    let peak = results.iter().map(|r| r.1).max().unwrap_or(0);
    println!(
        "merge: {launches} launches read+join+folded in {secs:.2} s (median of {runs}) = {:.2} M launches/s on one core; peak RSS {:.0} MiB (max over runs)",
        launches as f64 / secs / 1e6,
        peak as f64 / 1024.0
    );
}

fn child(dir: &Path) {
    let t = Instant::now();
    let mut strings = StringTable::new();
    let mut cpu = CpuTrace::open(&dir.join("cpu.txt")).expect("cpu trace");
    let gpu = GpuInputs::open(&[dir.join("gpu.trace")], &mut strings).expect("gpu trace");
    common::join_and_fold(Some(&mut cpu), &gpu, &mut strings, false);
    let secs = t.elapsed().as_secs_f64();
    let hwm = peak_rss_kib();
    println!("{secs} {hwm}");
}

/// Writes `cpu.txt` and `gpu.trace` of `launches` launches into `dir`.
fn generate(dir: &Path, launches: u64) -> std::io::Result<()> {
    let pid = 4242;
    let mut strings = StringTable::new();
    let api = strings.intern("cudaLaunchKernel");
    let kernels: Vec<_> = (0..20)
        .map(|k| strings.intern(&format!("_Z8kernel_{k}PfS_i")))
        .collect();
    let stacks: Vec<Vec<String>> = (0..50)
        .map(|s| {
            let mut f: Vec<String> = ["_start", "__libc_start_main", "main", "Engine::run"]
                .map(String::from)
                .to_vec();
            for d in 0..(6 + s % 12) {
                f.push(format!("model::layer{s}::op{d}()"));
            }
            f.push("cudaLaunchKernel".into());
            f
        })
        .collect();
    let mut cpu_w = cpu::Writer::new(BufWriter::with_capacity(
        1 << 20,
        File::create(dir.join("cpu.txt"))?,
    ))?;
    let mut gpu_w = gputrace::Writer::new(BufWriter::with_capacity(
        1 << 20,
        File::create(dir.join("gpu.trace"))?,
    ))?;
    gpu_w.write(
        &Record::Process(Process {
            pid,
            ppid: Some(1),
            exe: "/usr/bin/bench".into(),
            start_ns: 1_000,
            start_realtime_ns: None,
        }),
        &strings,
    )?;
    let mut t = 1_000_000u64;
    for i in 0..launches {
        let corr = u32::try_from(i + 1).expect("fits");
        let s = (i.wrapping_mul(2654435761) % 50) as usize;
        let line = cpu::LaunchLine {
            ts_ns: t,
            comm: "bench",
            pid,
            tid: pid + 1 + (i % 4) as u32,
            cpu: 0,
            correlation_id: corr,
        };
        cpu_w.launch(&line, stacks[s].iter().map(String::as_str))?;
        let a = ApiCall {
            pid,
            tid: pid + 1 + (i % 4) as u32,
            start_ns: t + 300,
            end_ns: t + 3_000,
            correlation_id: corr,
            cbid: 211,
            domain: ApiDomain::Runtime,
            name: api,
        };
        gpu_w.write(&Record::Api(a), &strings)?;
        let k = Activity {
            pid,
            start_ns: t + 5_000,
            end_ns: t + 5_000 + 800 + (i % 7) * 311,
            correlation_id: corr,
            device: Some(0),
            context: 1,
            stream: Some(7 + (i % 3) as u32),
            graph_id: None,
            graph_node_id: None,
            kind: ActivityKind::Kernel {
                name: kernels[s % kernels.len()],
                grid: [128, 1, 1],
                block: [256, 1, 1],
            },
        };
        gpu_w.write(&Record::Activity(k), &strings)?;
        t += 4_000;
    }
    cpu_w.flush()?;
    gpu_w.flush()?;
    Ok(())
}
