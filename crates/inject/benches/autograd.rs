//! What reading PyTorch's autograd ids costs a launch (`autograd::Autograd::tag`,
//! called in the API-enter callback), and what finding them costs the flush
//! thread once (`discover`: torch's version, two `dlsym`s, the local symbol in
//! libtorch_cpu's `.symtab`). No GPU and no CUDA: the bench loads torch's
//! `libtorch_cpu.so` itself and times 1 M calls per path on one thread:
//!
//! - a thread that made no autograd node (two calls into libtorch);
//! - forward work (three calls, and the forward-thread table);
//! - backward work: a node written into the thread's evaluated-node slot, as
//!   autograd's engine does, and its two fields read and checked.
//!
//! Run: `cargo bench -p gpuperf-inject --bench autograd`. torch is found
//! through `GPUPERF_TORCH_PYTHON` (default `/usr/bin/python3.11`); without it
//! the bench says so and exits.

use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use gpuperf_inject::autograd::Autograd;
use gpuperf_test_support::bench::median;

const CALLS: u32 = 1_000_000;
const ROUNDS: usize = 7;

fn libtorch() -> Option<PathBuf> {
    let python =
        std::env::var_os("GPUPERF_TORCH_PYTHON").unwrap_or_else(|| "/usr/bin/python3.11".into());
    let o = Command::new(python)
        .args([
            "-c",
            "import importlib.util as u, os; \
             print(os.path.dirname(u.find_spec('torch').origin))",
        ])
        .output()
        .ok()
        .filter(|o| o.status.success())?;
    let dir = PathBuf::from(String::from_utf8_lossy(&o.stdout).trim());
    Some(dir.join("lib/libtorch_cpu.so")).filter(|p| p.is_file())
}

/// Median ns per call of `tag()` over [`ROUNDS`] rounds.
fn per_call(a: &Autograd, expect: u8) -> f64 {
    let mut ns = Vec::new();
    for _ in 0..ROUNDS {
        let t0 = Instant::now();
        for _ in 0..CALLS {
            let t = std::hint::black_box(a.tag());
            assert_eq!(t.kind, expect);
        }
        ns.push(t0.elapsed().as_nanos() as f64 / f64::from(CALLS));
    }
    median(ns)
}

fn main() {
    let Some(path) = libtorch() else {
        eprintln!("no torch found (GPUPERF_TORCH_PYTHON): nothing measured");
        return;
    };
    let t0 = Instant::now();
    // SAFETY: loading torch's CPU library runs its static initializers, as
    // `import torch` does; nothing else runs in this process meanwhile.
    let lib = unsafe {
        libloading::os::unix::Library::open(Some(&path), libc::RTLD_NOW | libc::RTLD_GLOBAL)
    }
    .expect("libtorch_cpu.so loads");
    println!("loaded `{}` in {:?}", path.display(), t0.elapsed());
    let a = Autograd::new(None);
    for (line, off) in a.discover() {
        println!("{line}");
        assert!(!off);
    }
    std::thread::spawn(move || {
        println!(
            "no node made on this thread: {:.1} ns per launch",
            per_call(&a, 0)
        );
        // SAFETY: `uint64_t at::sequence_number::get_and_increment()`: this
        // thread's counter, as a node's constructor takes it.
        let next: libloading::os::unix::Symbol<unsafe extern "C" fn() -> u64> =
            unsafe { lib.get(b"_ZN2at15sequence_number17get_and_incrementEv\0") }.unwrap();
        // SAFETY: see above.
        let seq = unsafe { next() };
        println!("forward work: {:.1} ns per launch", per_call(&a, 1));
        let thread = {
            // SAFETY: `uint64_t at::RecordFunction::currentThreadId()`.
            let id: libloading::os::unix::Symbol<unsafe extern "C" fn() -> u64> =
                unsafe { lib.get(b"_ZN2at14RecordFunction15currentThreadIdEv\0") }.unwrap();
            // SAFETY: see above.
            unsafe { id() }
        };
        // A node as torch 2.14 lays it out: number at 16, thread at 40.
        let mut node = [0u64; 16];
        node[2] = seq;
        node[5] = thread;
        let slot = a.evaluating_node_slot().unwrap();
        // SAFETY: this thread's slot; set back to null before the thread
        // ends, so its destructor releases nothing.
        unsafe { *slot = node.as_ptr().cast() };
        println!("backward work: {:.1} ns per launch", per_call(&a, 2));
        // SAFETY: see above.
        unsafe { *slot = std::ptr::null() };
        println!("{}", a.summary());
    })
    .join()
    .unwrap();
}
