//! Times [`gpuperf_merge::write::svg::render`] on 100,000 distinct merged stacks.
//!
//! ```text
//! cargo run --release -p gpuperf-merge --example svg_bench
//! ```
//!
//! Stacks are random walks, 10 to 30 CPU frames deep, over a fixed call graph of C++-like
//! functions, ending in a CUDA API call and a GPU frame (mostly kernels, some memcpy, memset
//! and pending launches), weighted 1 to 5,000 µs. The generator is seeded, so every run
//! renders the same input.

#[cfg(feature = "render")]
fn main() {
    use gpuperf_merge::write::svg;
    use std::time::{Duration, Instant};

    const STACKS: usize = 100_000;
    const RUNS: usize = 5;

    let lines = bench::stacks(STACKS);
    let bytes: usize = lines.iter().map(|l| l.len() + 1).sum();
    eprintln!(
        "input: {STACKS} stacks, {:.1} MiB of folded text",
        bytes as f64 / (1 << 20) as f64
    );
    let mut times: Vec<Duration> = Vec::with_capacity(RUNS);
    let mut size = 0;
    for _ in 0..RUNS {
        let mut out = Vec::with_capacity(16 << 20);
        let start = Instant::now();
        svg::render(
            &svg::Options::default(),
            lines.iter().map(String::as_str),
            &mut out,
        )
        .expect("render");
        times.push(start.elapsed());
        size = out.len();
    }
    times.sort();
    eprintln!(
        "runs: {:?}; SVG {:.1} MiB",
        times,
        size as f64 / (1 << 20) as f64
    );
    println!(
        "svg: {STACKS} stacks rendered in {:.3} s (median of {RUNS})",
        times[RUNS / 2].as_secs_f64()
    );
}

#[cfg(not(feature = "render"))]
fn main() {
    eprintln!("svg_bench needs the `render` feature");
}

#[cfg(feature = "render")]
mod bench {
    use std::collections::HashSet;

    /// xorshift64*: small, seeded, good enough for test data.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    const FUNCTIONS: usize = 3_000;
    const CALLEES: usize = 6;
    const KERNELS: usize = 400;

    /// `count` distinct merged folded lines.
    pub fn stacks(count: usize) -> Vec<String> {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let modules = [
            "nn", "ops", "runtime", "data", "optim", "comm", "tensor", "autograd",
        ];
        let names: Vec<String> = (0..FUNCTIONS)
            .map(|i| {
                let module = modules[i % modules.len()];
                format!(
                    "torch::{module}::Impl{}::step_{i}(at::Tensor const&, long)",
                    i / 37
                )
            })
            .collect();
        // Each function calls a few fixed others, so stacks share prefixes like real ones.
        let callees: Vec<Vec<usize>> = (0..FUNCTIONS)
            .map(|_| (0..CALLEES).map(|_| 1 + rng.below(FUNCTIONS - 1)).collect())
            .collect();
        let kernels: Vec<String> = (0..KERNELS)
            .map(|i| {
                format!(
                    "[GPU_Kernel]void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_{i}x128_32x3_nn_align4>(Params)"
                )
            })
            .collect();

        let mut seen = HashSet::with_capacity(count);
        let mut lines = Vec::with_capacity(count);
        let mut stack = String::new();
        while lines.len() < count {
            stack.clear();
            stack.push_str("main;");
            stack.push_str(&names[0]);
            let depth = 10 + rng.below(21);
            let mut f = 0;
            for _ in 1..depth {
                f = callees[f][rng.below(CALLEES)];
                stack.push(';');
                stack.push_str(&names[f]);
            }
            let leaf = match rng.below(100) {
                0..=79 => format!("cudaLaunchKernel;{}", kernels[rng.below(KERNELS)]),
                80..=91 => {
                    let dir = ["HtoD", "DtoH", "DtoD"][rng.below(3)];
                    format!("cudaMemcpyAsync;[GPU_Memcpy {dir}]")
                }
                92..=96 => "cudaMemsetAsync;[GPU_Memset]".to_owned(),
                _ => "cudaLaunchKernel;[GPU_Launch_Pending]".to_owned(),
            };
            stack.push(';');
            stack.push_str(&leaf);
            if seen.insert(stack.clone()) {
                lines.push(format!("{stack} {}", 1 + rng.below(5_000)));
            }
        }
        lines
    }
}
