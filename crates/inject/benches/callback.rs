//! What gpuperf's injection library costs the application thread per launch, on a
//! machine without a GPU: `bench/stack_bench.c` makes 1 M launches on the
//! simulated CUDA runtime (sim/: API enter and exit callbacks plus one kernel
//! record each, from the simulated CUPTI), without the library, with it, and with
//! the launch marker forced on. Rounds alternate so that machine noise hits every
//! variant alike; medians are printed. The simulated CUPTI writes each record
//! into the library's activity buffer, as CUPTI does, and its worker thread hands
//! full buffers back; without the library no activity kind is enabled, so it
//! records nothing. Kernels take no simulated time (`GPUSIM_TIME_SCALE=0`).
//!
//! This isolates gpuperf's own work (callbacks, per-thread buffering, background
//! decoding and writing) beside the simulation's own cost per launch, which the
//! case without the library measures. CUPTI's cost inside a real driver is
//! measured on a GPU by `bench/launch-overhead.sh`.
//!
//! In-process stacks, in the same run: `bench/stack_bench.c` (built with `-O2
//! -fomit-frame-pointer`) makes the launches at the bottom of its own frames so
//! that each recorded stack holds 30 native frames, with `GPUPERF_STACKS=0` and
//! `=1`; and, when pyenv's CPython 3.12 is installed, from 30 nested Python
//! functions through ctypes (`bench/stack_bench.py`). Warm: each run repeats one
//! stack, as a training loop does.
//!
//! Also: the 30-frame stack case on 1, 8 and 32 threads launching at once (wall
//! time over all their launches), from 4 ucontext coroutines on stacks of their
//! own (one launch per switch, the switch included), and instantiating a
//! 1000-node graph (each instantiated graph destroyed after), with stacks off
//! and on: wall time, the instantiating thread's CPU time (the background
//! flush excluded), and the process's peak resident set.
//!
//! Run: `cargo bench -p gpuperf-inject --bench callback` (needs gcc and the CUDA
//! wheels listed in CONTRIBUTING.md).
//! `GPUPERF_BENCH_BASELINE=path/to/libgpuperf_inject.so` (another build, e.g.
//! of the previous commit) runs every case with that library too, in the same
//! rounds, and prints its medians beside this build's.
//! `GPUPERF_BENCH_ONLY=threads` runs only the 1-, 8- and 32-thread cases;
//! `GPUPERF_BENCH_ONLY=window` only the launches without injection, with it,
//! and outside a capture window (`GPUPERF_CAPTURE_RANGE=cudaProfilerApi`, never
//! opened), with the baseline's two cases beside them when one is given.

use std::path::{Path, PathBuf};
use std::process::Command;

use gpuperf_merge::gputrace;
use gpuperf_merge::model::{Record, StackFrame, StringTable};
use gpuperf_test_support::bench::median;
use gpuperf_test_support::cc::Gcc;
use gpuperf_test_support::cuda;
use gpuperf_test_support::python::pyenv;

const LAUNCHES: &str = "1000000";
const STACK_LAUNCHES: &str = "300000";
const ROUNDS: usize = 7;
/// Rounds of the window case (`GPUPERF_BENCH_ONLY=window`).
const WINDOW_ROUNDS: usize = 9;
/// Levels of `nest` in stack_bench.c: with loop, bench_run, main and glibc's three
/// start frames, the recorded stack holds 30 frames.
const DEPTH: &str = "23";
/// Threads of the multi-threaded cases, and launches per thread.
const THREADS: [&str; 2] = ["8", "32"];
const THREAD_LAUNCHES: &str = "50000";
/// Coroutines of the coroutine case.
const COROUTINES: &str = "4";
/// The graph of the instantiation case, and instantiations per run.
const GRAPH_NODES: &str = "1000";
const INSTANTIATIONS: &str = "200";

/// `bench/<src>` built with `-O2` and `args` into `out`, against the simulated
/// runtime in `sim` and the CUDA headers in `include`.
fn gcc(out: &Path, src: &str, sim: &Path, include: &Path, args: &[&str]) -> PathBuf {
    Gcc::new(out)
        .arg("-O2")
        .arg(format!("-I{}", include.display()))
        .arg(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("bench")
                .join(src),
        )
        .args(args)
        .lib_dir(sim)
        .args(["-lcudart", "-lpthread"])
        .build()
}

/// 1 M launches from the bottom of `stack_bench`'s own few frames.
fn ns_per_launch(bench: &Path, inject: &str, env: &[(&str, &str)]) -> f64 {
    figure(Command::new(bench).args([inject, "0", LAUNCHES]), env)
}

fn figure(cmd: &mut Command, env: &[(&str, &str)]) -> f64 {
    figure_named(cmd, env, "ns_per_launch ")
}

fn figure_named(cmd: &mut Command, env: &[(&str, &str)], key: &str) -> f64 {
    figures_named(cmd, env, &[key])[0]
}

/// The numbers after each of `keys` in the output of one run.
fn figures_named(cmd: &mut Command, env: &[(&str, &str)], keys: &[&str]) -> Vec<f64> {
    let out = cmd
        .envs(env.iter().copied())
        .output()
        .expect("the benchmark program runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() || out.status.code() == Some(3),
        "{cmd:?} failed ({}): {text}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    keys.iter()
        .map(|key| {
            text.lines()
                .find_map(|l| l.split(key).nth(1))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
                .unwrap_or_else(|| panic!("no {key} in {text}"))
        })
        .collect()
}

/// Medians of this build and, when given, of the baseline library.
struct Case {
    name: String,
    unit: &'static str,
    ours: Vec<f64>,
    base: Vec<f64>,
}

impl Case {
    fn new(name: impl Into<String>, unit: &'static str) -> Case {
        Case {
            name: name.into(),
            unit,
            ours: Vec::new(),
            base: Vec::new(),
        }
    }

    fn print(self) {
        let ours = median(self.ours);
        if self.base.is_empty() {
            println!("  {:<34} {ours:10.1} {}", self.name, self.unit);
        } else {
            let base = median(self.base);
            println!(
                "  {:<34} {ours:10.1} {}  (baseline {base:.1}, ratio {:.2})",
                self.name,
                self.unit,
                ours / base
            );
        }
    }
}

/// (native, Python) frames of the longest stack in the traces of `dir`.
fn stack_shape(dir: &Path) -> (usize, usize) {
    let mut best = (0, 0);
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_none_or(|x| x != "gputrace") {
            continue;
        }
        let mut strings = StringTable::new();
        let f = std::fs::File::open(&p).unwrap();
        gputrace::read(f, &p, &mut strings, &mut |r, _| {
            if let Record::Stack(s) = r {
                let py = s
                    .frames
                    .iter()
                    .filter(|f| matches!(f, StackFrame::Python { .. }))
                    .count();
                if s.frames.len() > best.0 + best.1 {
                    best = (s.frames.len() - py, py);
                }
            }
        })
        .unwrap();
    }
    best
}

fn clear(dir: &Path) {
    for e in std::fs::read_dir(dir).unwrap() {
        std::fs::remove_file(e.unwrap().path()).unwrap();
    }
}

fn main() {
    let cuda = cuda::cuda13().expect(
        "CUDA wheels missing: pip install nvidia-cuda-cupti==13.0.85 nvidia-cuda-runtime==13.0.96",
    );
    let include = cuda.join("include");
    let sim = cuda::sim(&cuda);
    let tmp = tempfile::tempdir().unwrap();
    let deep = gcc(
        &tmp.path().join("stack_bench"),
        "stack_bench.c",
        &sim,
        &include,
        &["-fomit-frame-pointer", "-ldl"],
    );
    let deep_lib = gcc(
        &tmp.path().join("libstack_bench.so"),
        "stack_bench.c",
        &sim,
        &include,
        &[
            "-fomit-frame-pointer",
            "-shared",
            "-fPIC",
            "-DBENCH_LIB",
            "-ldl",
        ],
    );
    let py_script = Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/stack_bench.py");
    let python = pyenv("3.12");
    let inject = cuda::inject_lib();
    let inject = inject.to_str().unwrap();
    let trace = tmp.path().join("traces/");
    std::fs::create_dir_all(&trace).unwrap();
    let cupti = sim.join("libcupti.so.13");
    let base_env = [
        ("GPUPERF_CUPTI_PATH", cupti.to_str().unwrap()),
        ("GPUPERF_GPU_TRACE", trace.to_str().unwrap()),
        ("GPUPERF_STACKS", "0"),
        ("GPUSIM_TIME_SCALE", "0"),
    ];
    let mut marker_env = base_env.to_vec();
    marker_env.push(("GPUPERF_MARKER", "always"));
    let mut stacks_env = base_env.to_vec();
    stacks_env[2] = ("GPUPERF_STACKS", "1");
    let deep_run = |inject: &str, env: &[(&str, &str)]| {
        figure(
            Command::new(&deep).args([inject, DEPTH, STACK_LAUNCHES]),
            env,
        )
    };
    let py_run = |py: &Path, env: &[(&str, &str)]| {
        figure(
            Command::new(py)
                .arg(&py_script)
                .arg(&deep_lib)
                .args([inject, STACK_LAUNCHES]),
            env,
        )
    };
    // Outside a capture window (one that never opens): stacks would be taken
    // inside it, so all that is left is the gate.
    let mut outside_env = stacks_env.clone();
    outside_env.push(("GPUPERF_CAPTURE_RANGE", "cudaProfilerApi"));
    if std::env::var("GPUPERF_BENCH_ONLY").is_ok_and(|v| v == "window") {
        // With a baseline library, its two cases run in the same rounds.
        let baseline = std::env::var("GPUPERF_BENCH_BASELINE").ok();
        let (mut none, mut with, mut outside) = (Vec::new(), Vec::new(), Vec::new());
        let (mut base_with, mut base_outside) = (Vec::new(), Vec::new());
        for _ in 0..WINDOW_ROUNDS {
            none.push(ns_per_launch(&deep, "none", &base_env));
            with.push(ns_per_launch(&deep, inject, &base_env));
            outside.push(ns_per_launch(&deep, inject, &outside_env));
            if let Some(b) = &baseline {
                base_with.push(ns_per_launch(&deep, b, &base_env));
                base_outside.push(ns_per_launch(&deep, b, &outside_env));
            }
            clear(&trace);
        }
        let (n, w, o) = (median(none), median(with), median(outside));
        println!("launches per run: {LAUNCHES}, rounds: {WINDOW_ROUNDS}, medians:");
        println!("  without injection         {n:8.1} ns/launch");
        println!(
            "  with injection            {w:8.1} ns/launch  (+{:.1} ns)",
            w - n
        );
        println!(
            "  outside a capture window  {o:8.1} ns/launch  (+{:.1} ns)",
            o - n
        );
        if let Some(b) = &baseline {
            let (bw, bo) = (median(base_with), median(base_outside));
            println!("  baseline: {b}");
            println!(
                "  with injection            {bw:8.1} ns/launch  (+{:.1} ns)",
                bw - n
            );
            println!(
                "  outside a capture window  {bo:8.1} ns/launch  (+{:.1} ns)",
                bo - n
            );
        }
        return;
    }
    if std::env::var("GPUPERF_BENCH_ONLY").is_ok_and(|v| v == "threads") {
        more_cases(&deep, inject, &base_env, &stacks_env, &trace, false);
        return;
    }
    let (mut none, mut with, mut marker) = (Vec::new(), Vec::new(), Vec::new());
    let (mut deep_none, mut deep_off, mut deep_on) = (Vec::new(), Vec::new(), Vec::new());
    let (mut py_off, mut py_on) = (Vec::new(), Vec::new());
    let (mut native_shape, mut py_shape) = ((0, 0), (0, 0));
    for _ in 0..ROUNDS {
        none.push(ns_per_launch(&deep, "none", &base_env));
        with.push(ns_per_launch(&deep, inject, &base_env));
        marker.push(ns_per_launch(&deep, inject, &marker_env));
        clear(&trace);
        deep_none.push(deep_run("none", &base_env));
        deep_off.push(deep_run(inject, &base_env));
        deep_on.push(deep_run(inject, &stacks_env));
        native_shape = stack_shape(&trace);
        clear(&trace);
        if let Some(py) = &python {
            py_off.push(py_run(py, &base_env));
            py_on.push(py_run(py, &stacks_env));
            py_shape = stack_shape(&trace);
            clear(&trace);
        }
    }
    let (n, w, m) = (median(none), median(with), median(marker));
    println!("launches per run: {LAUNCHES}, rounds: {ROUNDS}, medians:");
    println!("  without injection      {n:8.1} ns/launch");
    println!(
        "  with injection         {w:8.1} ns/launch  (+{:.1} ns)",
        w - n
    );
    println!(
        "  with marker forced on  {m:8.1} ns/launch  (+{:.1} ns)",
        m - n
    );
    let (dn, doff, don) = (median(deep_none), median(deep_off), median(deep_on));
    println!(
        "in-process stacks, {STACK_LAUNCHES} launches per run, stack of {} native frames \
         (-O2 -fomit-frame-pointer), warm:",
        native_shape.0
    );
    println!("  without injection      {dn:8.1} ns/launch");
    println!("  injection, no stacks   {doff:8.1} ns/launch");
    println!(
        "  injection with stacks  {don:8.1} ns/launch  (stacks add {:.1} ns)",
        don - doff
    );
    if python.is_some() {
        let (off, on) = (median(py_off), median(py_on));
        println!(
            "  CPython 3.12, stack of {} Python + {} native frames:",
            py_shape.1, py_shape.0
        );
        println!("  injection, no stacks   {off:8.1} ns/launch");
        println!(
            "  injection with stacks  {on:8.1} ns/launch  (stacks add {:.1} ns)",
            on - off
        );
    } else {
        println!("  (pyenv's CPython 3.12 not found: the Python case was skipped)");
    }
    more_cases(&deep, inject, &base_env, &stacks_env, &trace, true);
}

/// The multi-threaded cases, and the graph-instantiation ones when `graphs`,
/// beside a baseline build when `GPUPERF_BENCH_BASELINE` names one.
fn more_cases(
    deep: &Path,
    inject: &str,
    off: &[(&str, &str)],
    on: &[(&str, &str)],
    trace: &Path,
    graphs: bool,
) {
    let baseline = std::env::var("GPUPERF_BENCH_BASELINE").ok();
    let libs: Vec<&str> = std::iter::once(inject).chain(baseline.as_deref()).collect();
    let threads: Vec<&str> = std::iter::once("1").chain(THREADS).collect();
    let mut cases = Vec::new();
    for t in &threads {
        let s = if *t == "1" { "" } else { "s" };
        cases.push(Case::new(format!("{t} thread{s}, no stacks"), "ns/launch"));
        cases.push(Case::new(
            format!("{t} thread{s}, with stacks"),
            "ns/launch",
        ));
    }
    cases.push(Case::new(
        format!("{COROUTINES} coroutines, no stacks"),
        "ns/launch",
    ));
    cases.push(Case::new(
        format!("{COROUTINES} coroutines, with stacks"),
        "ns/launch",
    ));
    if graphs {
        for stacks in ["no stacks", "with stacks"] {
            cases.push(Case::new(
                format!("{GRAPH_NODES}-node graph, {stacks}"),
                "ns/instantiation",
            ));
            cases.push(Case::new("  its thread's CPU time", "ns/instantiation"));
            cases.push(Case::new("  peak RSS", "KiB"));
        }
    }
    let mut coff: Vec<(&str, &str)> = off.to_vec();
    coff.push(("BENCH_COROUTINES", COROUTINES));
    let mut con: Vec<(&str, &str)> = on.to_vec();
    con.push(("BENCH_COROUTINES", COROUTINES));
    let mut goff: Vec<(&str, &str)> = off.to_vec();
    goff.push(("BENCH_GRAPH_NODES", GRAPH_NODES));
    let mut gon: Vec<(&str, &str)> = on.to_vec();
    gon.push(("BENCH_GRAPH_NODES", GRAPH_NODES));
    for _ in 0..ROUNDS {
        for (i, lib) in libs.iter().enumerate() {
            let mut figures = Vec::new();
            for t in &threads {
                for env in [off, on] {
                    figures.push(figure(
                        Command::new(deep).args([lib, DEPTH, THREAD_LAUNCHES, t]),
                        env,
                    ));
                    clear(trace);
                }
            }
            for env in [&coff[..], &con[..]] {
                figures.push(figure(
                    Command::new(deep).args([lib, DEPTH, THREAD_LAUNCHES]),
                    env,
                ));
                clear(trace);
            }
            for env in [&goff[..], &gon[..]].into_iter().filter(|_| graphs) {
                figures.extend(figures_named(
                    Command::new(deep).args([lib, DEPTH, INSTANTIATIONS]),
                    env,
                    &[
                        "ns_per_instantiation ",
                        "cpu_ns_per_instantiation ",
                        "maxrss_kb ",
                    ],
                ));
                clear(trace);
            }
            for (case, f) in cases.iter_mut().zip(figures) {
                if i == 0 {
                    case.ours.push(f);
                } else {
                    case.base.push(f);
                }
            }
        }
    }
    let graph_part = if graphs {
        format!(", and {INSTANTIATIONS} instantiations of a {GRAPH_NODES}-node graph")
    } else {
        String::new()
    };
    println!(
        "{} threads, and {COROUTINES} coroutines, x {THREAD_LAUNCHES} launches (30-frame \
         stacks){graph_part}, medians:",
        threads.join(", ")
    );
    if let Some(b) = &baseline {
        println!("  baseline: {b}");
    }
    for c in cases {
        c.print();
    }
}
