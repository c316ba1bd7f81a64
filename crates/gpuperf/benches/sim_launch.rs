//! Launch overhead on the simulated CUDA runtime (`sim/`, no GPU): a launch-bound
//! loop of 1 M kernel launches (`sim/tests/sim_app.cu loop`), on 1 and on 4
//! threads, without gpuperf, under `gpuperf record --gpu-only` (injection only),
//! under `gpuperf record` (injection with in-process stacks, no root) and under
//! `gpuperf record --stacks ebpf` (the eBPF profiler's stacks; needs root).
//! Simulated GPU time is switched off (`GPUSIM_TIME_SCALE=0`), so the loop is
//! bound by the CPU cost of a launch alone. Prints the median ns per launch of
//! each and what gpuperf adds.
//!
//! ```sh
//! sudo -E cargo bench -p gpuperf --bench sim_launch [-- --launches N --rounds R]
//! cargo bench -p gpuperf --bench sim_launch       # without root: no eBPF row
//! ```
#![allow(missing_docs)]

#[path = "../tests/common/mod.rs"]
mod common;

use std::path::Path;
use std::process::Command;

use gpuperf_test_support::bench::{arg, median};

/// One run of the loop; the program prints "... X ns/launch".
fn run(mut cmd: Command) -> f64 {
    let o = cmd.output().expect("the loop runs");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{}{}",
        out,
        String::from_utf8_lossy(&o.stderr)
    );
    let line = out
        .lines()
        .find(|l| l.starts_with("loop "))
        .expect("a loop line");
    line.split_whitespace()
        .rev()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .expect("ns/launch")
}

/// Makes the command of one configuration.
type Make<'a> = Box<dyn Fn() -> Command + 'a>;

fn main() {
    let launches: usize = arg("--launches", 1_000_000);
    let rounds: usize = arg("--rounds", 5).max(1);
    let Some(cuda) = common::cuda13() else { return };
    let Some(nvcc) = common::nvcc(&cuda) else {
        return;
    };
    let app = common::sim_app(&cuda, &nvcc);
    let cupti = common::sim(&cuda).join("libcupti.so.13");
    let ebpf = gpuperf_profiler::preflight::check().is_ok();
    let work = common::work_dir("bench");
    let gpuperf = |extra: &[&str], threads: usize| {
        let mut c = common::gpuperf(&work);
        c.args(["record", "-q", "-o", "flamegraph.svg"])
            .args(extra)
            .arg("--cupti")
            .arg(&cupti)
            .arg("--")
            .arg(&app)
            .args(["loop", &launches.to_string(), &threads.to_string()]);
        c
    };
    println!(
        "sim_launch: {launches} launches of an empty kernel, median of {rounds} rounds, \
         simulated GPU time off (GPUSIM_TIME_SCALE=0)"
    );
    println!(
        "{:<34} {:>8} {:>14} {:>14}",
        "configuration", "threads", "ns/launch", "added ns"
    );
    for threads in [1, 4] {
        let mut configs: Vec<(&str, Make<'_>)> = vec![
            (
                "without gpuperf",
                Box::new(|| {
                    let mut c = Command::new(&app);
                    c.args(["loop", &launches.to_string(), &threads.to_string()]);
                    c
                }),
            ),
            (
                "gpuperf record --gpu-only",
                Box::new(|| gpuperf(&["--gpu-only"], threads)),
            ),
            (
                "gpuperf record (in-process stacks)",
                Box::new(|| gpuperf(&[], threads)),
            ),
        ];
        if ebpf {
            configs.push((
                "gpuperf record --stacks ebpf",
                Box::new(|| gpuperf(&["--stacks", "ebpf"], threads)),
            ));
        }
        let mut base = None;
        for (name, make) in &configs {
            let mut samples = Vec::new();
            for _ in 0..rounds {
                let mut c = make();
                c.env("GPUSIM_TIME_SCALE", "0").current_dir(&work);
                samples.push(run(c));
            }
            let m = median(samples);
            let added = base.map_or("".to_owned(), |b: f64| format!("{:+.1}", m - b));
            base.get_or_insert(m);
            println!("{name:<34} {threads:>8} {m:>14.1} {added:>14}");
        }
        if !ebpf {
            println!(
                "{:<34} {threads:>8} {:>14}",
                "gpuperf record --stacks ebpf", "skipped: needs root (eBPF)"
            );
        }
    }
    let _ = std::fs::remove_dir_all(Path::new(&work));
}
