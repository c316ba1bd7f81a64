//! What gpuperf's injection library costs the application thread per launch, on a
//! machine without a GPU: the C host (tests/data/host.c) plays 1 M launches (API
//! enter and exit callbacks plus one kernel record each) through the MOCK libcupti,
//! without the library, with it, and with the launch marker forced on. Rounds
//! alternate so that machine noise hits every variant alike; medians are printed.
//! The MOCK writes each record into the library's activity buffer, as CUPTI does,
//! and its worker thread hands full buffers back; without the library no activity
//! kind is enabled, so it records nothing.
//!
//! This isolates gpuperf's own work (callbacks, per-thread buffering, background
//! decoding and writing). CUPTI's cost inside a real driver is measured on a GPU by
//! `bench/launch-overhead.sh`.
//!
//! Run: `cargo bench -p gpuperf-inject --bench callback` (needs gcc and the CUDA
//! wheels listed in the README's developer section).

use std::path::{Path, PathBuf};
use std::process::Command;

const LAUNCHES: &str = "1000000";
const ROUNDS: usize = 7;

fn nvidia() -> PathBuf {
    let o = Command::new("python3")
        .args([
            "-c",
            "import sysconfig; print(sysconfig.get_paths()['purelib'])",
        ])
        .output()
        .expect("python3 runs");
    PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()).join("nvidia")
}

fn gcc(out: &Path, src: &str, args: &[String]) {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    let st = Command::new("gcc")
        .args(["-O2", "-o"])
        .arg(out)
        .arg(data.join(src))
        .args(args)
        .status()
        .expect("gcc runs");
    assert!(st.success(), "gcc {src} failed");
}

fn ns_per_launch(host: &Path, inject: &str, env: &[(&str, &str)]) -> f64 {
    let out = Command::new(host)
        .args([inject, "mock-bench", LAUNCHES])
        .envs(env.iter().copied())
        .output()
        .expect("host runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "host failed: {text}");
    text.lines()
        .find_map(|l| l.split("ns_per_launch ").nth(1))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no figure in {text}"))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let include = nvidia().join("cu13/include");
    assert!(
        include.join("cupti.h").is_file(),
        "CUPTI headers missing: pip install nvidia-cuda-cupti==13.0.85 nvidia-cuda-crt==13.0.88"
    );
    let tmp = tempfile::tempdir().unwrap();
    let host = tmp.path().join("host");
    let mock = tmp.path().join("libcupti_mock.so");
    gcc(
        &host,
        "host.c",
        &["-ldl".into(), "-lpthread".into(), "-rdynamic".into()],
    );
    gcc(
        &mock,
        "mock_cupti.c",
        &[
            "-shared".into(),
            "-fPIC".into(),
            "-lpthread".into(),
            format!("-I{}", include.display()),
        ],
    );
    let exe = std::env::current_exe().unwrap();
    let inject = exe.parent().unwrap().join("libgpuperf_inject.so");
    assert!(inject.is_file(), "{} not built", inject.display());
    let inject = inject.to_str().unwrap();
    let trace = tmp.path().join("traces/");
    std::fs::create_dir_all(&trace).unwrap();
    // The MOCK's worker thread would hand buffers over under the MOCK's lock,
    // which its record writing on the launching thread also takes: the decoding
    // would then be charged to the launch. It is left idle; the periodic flush
    // hands the buffers over.
    let base_env = [
        ("GPUPERF_CUPTI_PATH", mock.to_str().unwrap()),
        ("GPUPERF_GPU_TRACE", trace.to_str().unwrap()),
        ("MOCK_WORKER_US", "100000000"),
    ];
    let mut marker_env = base_env.to_vec();
    marker_env.push(("GPUPERF_MARKER", "always"));
    let (mut none, mut with, mut marker) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        none.push(ns_per_launch(&host, "none", &base_env));
        with.push(ns_per_launch(&host, inject, &base_env));
        marker.push(ns_per_launch(&host, inject, &marker_env));
        for e in std::fs::read_dir(&trace).unwrap() {
            std::fs::remove_file(e.unwrap().path()).unwrap();
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
}
