//! Per-call cost of the launch probes, on a C program that calls a cudart-like
//! function N times (benches/probe_loop.c). Needs root; prints why otherwise.
//!
//! `cargo bench -p gpuperf-profiler --bench probe_overhead [-- CALLS ROUNDS DEPTH]`
//!
//! Configurations alternate within each round, so all see the same machine
//! state; medians over rounds are reported, with the ns added per call: wall
//! time, and the calling thread's CPU time (probe handling runs in that
//! thread, so it counts; other processes on a busy machine do not).

use std::path::{Path, PathBuf};
use std::process::Command;

use gpuperf_profiler::{Options, ProbeSpec, Profiler};

fn build(dir: &Path) -> PathBuf {
    let exe = dir.join("probe_loop");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/probe_loop.c");
    let o = Command::new("gcc")
        .args([
            "-O2",
            "-fno-omit-frame-pointer",
            "-fno-optimize-sibling-calls",
            "-o",
        ])
        .arg(&exe)
        .arg(src)
        .output()
        .expect("gcc runs");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    exe
}

/// Wall and CPU ns per call.
fn run(exe: &Path, calls: u64, depth: u32, options: Option<&Options>) -> (f64, f64) {
    let profiler = options.map(|o| {
        let mut o = o.clone();
        o.all_processes = true;
        Profiler::start(o, std::io::sink()).expect("profiler starts")
    });
    let out = Command::new(exe)
        .arg(calls.to_string())
        .arg(depth.to_string())
        .output()
        .expect("probe_loop runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let field = |i: usize| -> f64 {
        text.split_whitespace()
            .nth(i)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("unexpected output: {text}"))
    };
    let ns = (field(1), field(3));
    if let Some(p) = profiler {
        let s = p.stop().expect("profiler stops");
        assert_eq!(s.launches + s.dropped_launches, calls, "{s:?}");
    }
    ns
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let calls: u64 = args
        .first()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let rounds: usize = args.get(1).and_then(|v| v.parse().ok()).unwrap_or(5);
    let depth: u32 = args.get(2).and_then(|v| v.parse().ok()).unwrap_or(12);
    if let Err(e) = gpuperf_profiler::preflight::check() {
        println!("probe_overhead skipped: {e}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path());
    let entry = ProbeSpec {
        path: exe.clone(),
        symbol: "cudaLaunchKernel".into(),
    };
    let configs: Vec<(&str, Option<Options>)> = vec![
        ("unprobed", None),
        (
            "compat: entry probe writes the record",
            Some(Options {
                uprobes: vec![entry],
                ..Options::default()
            }),
        ),
        (
            "injection: entry stack + marker join",
            Some(Options {
                marker_libraries: vec![exe.clone()],
                api_files: vec![exe.clone()],
                discover: false,
                ..Options::default()
            }),
        ),
        (
            "marker only: stack at the marker",
            Some(Options {
                marker_libraries: vec![exe.clone()],
                discover: false,
                ..Options::default()
            }),
        ),
    ];
    println!("probe_overhead: {calls} calls, {depth} frames deep, {rounds} rounds");
    let mut wall = vec![Vec::new(); configs.len()];
    let mut cpu = vec![Vec::new(); configs.len()];
    for _ in 0..rounds {
        for (i, (_, options)) in configs.iter().enumerate() {
            let (w, c) = run(&exe, calls, depth, options.as_ref());
            wall[i].push(w);
            cpu[i].push(c);
        }
    }
    let base = median(&mut wall[0].clone());
    let cpu_base = median(&mut cpu[0].clone());
    println!("{:<40} {:>13} {:>13}", "", "wall", "thread CPU");
    for (((name, _), w), c) in configs.iter().zip(&mut wall).zip(&mut cpu) {
        let (w, c) = (median(w), median(c));
        println!(
            "{name:<40} {w:>8.1} ns/call {c:>8.1} ns/call  (+{:.1} ns wall, +{:.1} ns CPU)",
            w - base,
            c - cpu_base
        );
    }
}
