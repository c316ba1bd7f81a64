//! Cost in BPF of one driver event record (filter, sampling, ring buffer
//! reserve, fill, submit), measured with the kernel's BPF run-time statistics
//! on the Xid program run through `BPF_PROG_TEST_RUN`: it needs root, not a
//! GPU driver. Prints the median over rounds of the ns per run.
//!
//! `cargo bench -p gpuperf-profiler --bench driver_cost [-- --runs N --rounds N]`

use gpuperf_profiler::driver::record_cost;
use gpuperf_test_support::bench::{arg, median};

fn main() {
    let runs: u32 = arg("--runs", 100_000);
    let rounds: u32 = arg("--rounds", 5);
    let mut per_run = Vec::new();
    for _ in 0..rounds {
        match record_cost(runs) {
            Ok(c) => per_run.push(c.run_time_ns as f64 / c.runs.max(1) as f64),
            Err(e) => {
                eprintln!("driver_cost: skipped: {e}");
                return;
            }
        }
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "driver record cost: median {:.0} ns per event over {rounds} rounds of {runs} runs \
         (load average {})",
        median(per_run),
        load.split_whitespace().next().unwrap_or("?")
    );
}
