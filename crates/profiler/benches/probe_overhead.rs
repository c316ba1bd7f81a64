//! Per-call cost of the launch probes, on a C program that calls a cudart-like
//! function N times (benches/probe_loop.c), built with and without frame
//! pointers. Needs root; prints why otherwise.
//!
//! `cargo bench -p gpuperf-profiler --bench probe_overhead [-- CALLS ROUNDS FRAMES]`
//!
//! FRAMES (default 30) is the depth of the stack at the probe, `_start` to
//! `cudaLaunchKernel`. Configurations alternate within each round, so all see
//! the same machine state; medians over rounds are reported, with the ns added
//! per call over the unprobed program of the same build: wall time, and the
//! calling thread's CPU time (probe handling runs in that thread, so it counts;
//! other processes on a busy machine do not). "walk only" is the profiler with
//! unwinding off (frame-pointer walks, as before stack copies existed).

use std::path::{Path, PathBuf};
use std::process::Command;

use gpuperf_profiler::{Options, ProbeSpec, Profiler, Summary};
use gpuperf_test_support::bench::median;
use gpuperf_test_support::cc::Gcc;

/// Frames of the probe loop's stack besides its recursion: `_start`,
/// `__libc_start_main_impl`, `__libc_start_call_main`, `main`, `loop`,
/// `cudaLaunchKernel`, and `nest(0)`.
const FIXED_FRAMES: u32 = 7;

fn build(dir: &Path, name: &str, flags: &[&str]) -> PathBuf {
    let exe = dir.join(name);
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/probe_loop.c");
    Gcc::new(exe).arg("-O2").args(flags).arg(src).build()
}

/// Wall and CPU ns per call, and the profiler's summary.
fn run(
    exe: &Path,
    calls: u64,
    depth: u32,
    options: Option<&Options>,
) -> (f64, f64, Option<Summary>) {
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
    let summary = profiler.map(|p| {
        let s = p.stop().expect("profiler stops");
        assert_eq!(s.launches + s.dropped_launches, calls, "{s:?}");
        s
    });
    (ns.0, ns.1, summary)
}

struct Config {
    name: &'static str,
    exe: PathBuf,
    options: Option<Options>,
    /// Index of the unprobed configuration of the same build.
    base: usize,
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
    let frames: u32 = args.get(2).and_then(|v| v.parse().ok()).unwrap_or(30);
    let depth = frames.saturating_sub(FIXED_FRAMES);
    if let Err(e) = gpuperf_profiler::preflight::check() {
        println!("probe_overhead skipped: {e}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let fp = build(
        dir.path(),
        "probe_loop_fp",
        &["-fno-omit-frame-pointer", "-fno-optimize-sibling-calls"],
    );
    // Plain -O2: no frame pointers (cudaLaunchKernel keeps its own).
    let nofp = build(dir.path(), "probe_loop_nofp", &[]);
    let compat = |exe: &Path, unwind: bool| {
        Some(Options {
            uprobes: vec![ProbeSpec {
                path: exe.to_owned(),
                symbol: "cudaLaunchKernel".into(),
            }],
            unwind,
            ..Options::default()
        })
    };
    let configs = [
        Config {
            name: "frame pointers: unprobed",
            exe: fp.clone(),
            options: None,
            base: 0,
        },
        Config {
            name: "frame pointers: compat, walk only",
            exe: fp.clone(),
            options: compat(&fp, false),
            base: 0,
        },
        Config {
            name: "frame pointers: compat",
            exe: fp.clone(),
            options: compat(&fp, true),
            base: 0,
        },
        Config {
            name: "frame pointers: injection (entry + marker)",
            exe: fp.clone(),
            options: Some(Options {
                marker_libraries: vec![fp.clone()],
                api_files: vec![fp.clone()],
                discover: false,
                ..Options::default()
            }),
            base: 0,
        },
        Config {
            name: "frame pointers: marker only",
            exe: fp.clone(),
            options: Some(Options {
                marker_libraries: vec![fp.clone()],
                discover: false,
                ..Options::default()
            }),
            base: 0,
        },
        Config {
            name: "no frame pointers: unprobed",
            exe: nofp.clone(),
            options: None,
            base: 5,
        },
        Config {
            name: "no frame pointers: compat, walk only",
            exe: nofp.clone(),
            options: compat(&nofp, false),
            base: 5,
        },
        Config {
            name: "no frame pointers: compat",
            exe: nofp.clone(),
            options: compat(&nofp, true),
            base: 5,
        },
    ];
    println!("probe_overhead: {calls} calls, {frames} frames deep, {rounds} rounds");
    let mut wall = vec![Vec::new(); configs.len()];
    let mut cpu = vec![Vec::new(); configs.len()];
    let mut last: Vec<Option<Summary>> = vec![None; configs.len()];
    for _ in 0..rounds {
        for (i, c) in configs.iter().enumerate() {
            let (w, cp, s) = run(&c.exe, calls, depth, c.options.as_ref());
            wall[i].push(w);
            cpu[i].push(cp);
            last[i] = s;
        }
    }
    let wall: Vec<f64> = wall.into_iter().map(median).collect();
    let cpu: Vec<f64> = cpu.into_iter().map(median).collect();
    println!(
        "{:<44} {:>13} {:>13}   added: wall, CPU   copies, recipe hits, truncated (last round)",
        "", "wall", "thread CPU"
    );
    for (i, c) in configs.iter().enumerate() {
        let stacks = last[i].as_ref().map_or(String::new(), |s| {
            format!(
                "   {} copies, {} hits, {} truncated",
                s.stack_copies, s.recipe_hits, s.truncated_stacks
            )
        });
        println!(
            "{:<44} {:>8.1} ns/call {:>8.1} ns/call  (+{:.1} ns, +{:.1} ns){stacks}",
            c.name,
            wall[i],
            cpu[i],
            wall[i] - wall[c.base],
            cpu[i] - cpu[c.base]
        );
    }
}
