//! What a stack costs, on the calling thread, warm caches, medians of rounds:
//!
//! 1. capture of a 30-frame native stack without frame pointers (this bench's own
//!    frames, built with the bench profile: Rust omits frame pointers on x86-64),
//!    with this crate (framehop), with libunwind (`unw_backtrace`, and the
//!    `unw_init_local`/`unw_step` loop; loaded with dlopen, skipped if absent) and
//!    with glibc's `backtrace` (libgcc's unwinder), in one run;
//! 2. module-table set-up and a `dlopen` refresh with 50 modules loaded;
//! 3. the unwinder's resident memory with those modules;
//! 4. a capture from CPython 3.12 (pyenv) through ctypes under 30 Python frames,
//!    with the release build of the test probe (`examples/unwind_probe.rs`):
//!    wall and thread CPU time per capture (on a busy machine the wall time
//!    also counts waiting for a CPU), and the memory probes (system calls) per
//!    capture.
//!
//! Run: `cargo build --release -p gpuperf-unwind --example unwind_probe &&
//! cargo bench -p gpuperf-unwind --bench capture` (needs gcc; part 4 needs the
//! probe and pyenv's 3.12, and is skipped without them).
//!
//! `cargo bench -p gpuperf-unwind --bench capture -- capture-only` runs only
//! this crate's line of part 1: for a count of instructions per capture that
//! does not depend on the machine's load, run that binary under
//! `valgrind --tool=callgrind --toggle-collect='gpuperf_unwind::local::LocalUnwinder::capture'`
//! and divide by the captures it prints.

use std::ffi::{c_int, c_void};
use std::hint::black_box;
use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use gpuperf_test_support::bench::median;
use gpuperf_test_support::cc::Gcc;
use gpuperf_test_support::python::pyenv;
use gpuperf_unwind::{Frame, LocalUnwinder, MAX_FRAMES, Options};

const DEPTH: u32 = 30;
const ITERS: u32 = 20_000;
const ROUNDS: usize = 9;

/// Calls `f` at the bottom of `depth` frames of its own.
#[inline(never)]
fn recurse(depth: u32, f: &mut dyn FnMut() -> usize) -> usize {
    if depth == 0 {
        return f();
    }
    let r = recurse(black_box(depth - 1), f);
    black_box(r) + 1
}

struct LibUnwind {
    backtrace: unsafe extern "C" fn(*mut *mut c_void, c_int) -> c_int,
    getcontext: unsafe extern "C" fn(*mut c_void) -> c_int,
    init_local: unsafe extern "C" fn(*mut c_void, *mut c_void) -> c_int,
    step: unsafe extern "C" fn(*mut c_void) -> c_int,
    _lib: libloading::Library,
}

fn libunwind() -> Option<LibUnwind> {
    // SAFETY: loading the system libunwind runs no code of ours; the symbols have
    // the C signatures of libunwind's x86-64 API.
    unsafe {
        let lib = libloading::Library::new("libunwind.so.8").ok()?;
        Some(LibUnwind {
            backtrace: *lib.get(b"unw_backtrace\0").ok()?,
            getcontext: *lib.get(b"_Ux86_64_getcontext\0").ok()?,
            init_local: *lib.get(b"_ULx86_64_init_local\0").ok()?,
            step: *lib.get(b"_ULx86_64_step\0").ok()?,
            _lib: lib,
        })
    }
}

unsafe extern "C" {
    /// glibc's, through libgcc's `_Unwind_Backtrace`.
    fn backtrace(buffer: *mut *mut c_void, size: c_int) -> c_int;
}

/// ns per call of `f` at the bottom of a DEPTH-frame stack, and the frames it saw.
fn time(f: &mut dyn FnMut() -> usize) -> (f64, usize) {
    let mut frames = 0;
    let mut rounds = Vec::new();
    for _ in 0..ROUNDS {
        let mut ns = 0.0;
        recurse(DEPTH, &mut || {
            frames = f(); // warm
            let t = Instant::now();
            for _ in 0..ITERS {
                black_box(f());
            }
            ns = t.elapsed().as_nanos() as f64 / f64::from(ITERS);
            0
        });
        rounds.push(ns);
    }
    (median(rounds), frames)
}

fn rss_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/smaps_rollup").unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix("Rss:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

fn build_libs(n: usize) -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("unwind-bench");
    std::fs::create_dir_all(&dir).unwrap();
    (0..=n)
        .map(|i| {
            let so = dir.join(format!("libbench{i}.so"));
            if !so.exists() {
                let c = dir.join(format!("bench{i}.c"));
                std::fs::write(
                    &c,
                    format!("int bench_fn{i}(int x) {{ return x * {i} + 1; }}\n"),
                )
                .unwrap();
                Gcc::new(&so)
                    .args(["-O2", "-shared", "-fPIC"])
                    .arg(&c)
                    .build();
            }
            so
        })
        .collect()
}

fn main() {
    println!(
        "native capture, {DEPTH} frames below the timing loop, no frame pointers, warm caches"
    );
    let u = LocalUnwinder::new(Options::default());
    let mut frames = [Frame::default(); MAX_FRAMES];
    let (ns, n) = time(&mut || u.capture(0, &mut frames).len);
    println!("  gpuperf-unwind                 {ns:7.0} ns  ({n} frames)");
    if std::env::args().any(|a| a == "capture-only") {
        // `time` captures once more per round, to warm up.
        let captures = ROUNDS as u64 * (u64::from(ITERS) + 1);
        println!("  ({captures} captures)");
        return;
    }
    match libunwind() {
        Some(lu) => {
            let mut buf = [std::ptr::null_mut::<c_void>(); MAX_FRAMES];
            // SAFETY: buf holds MAX_FRAMES pointers.
            let (ns, n) =
                time(
                    &mut || unsafe { (lu.backtrace)(buf.as_mut_ptr(), MAX_FRAMES as c_int) }
                        as usize,
                );
            println!("  libunwind unw_backtrace        {ns:7.0} ns  ({n} frames)");
            let mut ctx = vec![0u64; 512];
            let mut cursor = vec![0u64; 256];
            let (ns, n) = time(&mut || {
                // SAFETY: ctx and cursor are larger than unw_context_t (968 B) and
                // unw_cursor_t (1016 B) of libunwind 1.6 on x86-64.
                unsafe {
                    (lu.getcontext)(ctx.as_mut_ptr().cast());
                    (lu.init_local)(cursor.as_mut_ptr().cast(), ctx.as_mut_ptr().cast());
                    let mut n = 1;
                    while (lu.step)(cursor.as_mut_ptr().cast()) > 0 && n < MAX_FRAMES {
                        n += 1;
                    }
                    n
                }
            });
            println!("  libunwind init_local+step      {ns:7.0} ns  ({n} frames)");
        }
        None => {
            println!("  libunwind: libunwind.so.8 not found (apt-get install libunwind8), skipped")
        }
    }
    let mut buf = [std::ptr::null_mut::<c_void>(); MAX_FRAMES];
    // SAFETY: buf holds MAX_FRAMES pointers.
    let (ns, n) =
        time(&mut || unsafe { backtrace(buf.as_mut_ptr(), MAX_FRAMES as c_int) } as usize);
    println!("  glibc backtrace (libgcc)       {ns:7.0} ns  ({n} frames)");

    let libs = build_libs(50);
    let rss0 = rss_kib();
    let handles: Vec<_> = libs[..50]
        .iter()
        // SAFETY: our own tiny libraries without constructors.
        .map(|p| unsafe { libloading::Library::new(p).unwrap() })
        .collect();
    let rss1 = rss_kib();
    let mut setup = Vec::new();
    for _ in 0..ROUNDS {
        let t = Instant::now();
        let u = LocalUnwinder::new(Options::default());
        setup.push(t.elapsed().as_secs_f64() * 1e6);
        black_box(&u);
    }
    let u = LocalUnwinder::new(Options::default());
    let modules = u.modules().len();
    let mut refresh = Vec::new();
    for _ in 0..ROUNDS {
        // SAFETY: as above.
        let extra = unsafe { libloading::Library::new(&libs[50]).unwrap() };
        let t = Instant::now();
        assert!(u.refresh());
        refresh.push(t.elapsed().as_secs_f64() * 1e6);
        drop(extra);
        assert!(u.refresh());
    }
    println!(
        "module table with {modules} modules ({} dlopened)",
        handles.len()
    );
    println!("  set-up (LocalUnwinder::new)    {:7.0} µs", median(setup));
    println!(
        "  refresh after one dlopen       {:7.0} µs",
        median(refresh)
    );
    drop(u);
    let before = rss_kib();
    let u = LocalUnwinder::new(Options::default());
    let mut frames = [Frame::default(); MAX_FRAMES];
    std::thread::scope(|s| {
        // Warm one cache and this thread's stack entry from a second thread too.
        s.spawn(|| u.capture(0, &mut [Frame::default(); MAX_FRAMES]).len)
            .join()
            .unwrap()
    });
    recurse(DEPTH, &mut || u.capture(0, &mut frames).len);
    let after = rss_kib();
    println!(
        "  resident memory of the unwinder {:6} KiB (RSS growth after captures on 2 threads; the 50 libraries themselves: {} KiB)",
        after.saturating_sub(before),
        rss1.saturating_sub(rss0)
    );
    drop(handles);
    python();
}

fn python() {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let probe = manifest.join("../../target/release/examples/libunwind_probe.so");
    let (Some(py), true) = (pyenv("3.12"), probe.is_file()) else {
        println!("python: skipped (needs pyenv's 3.12 and the release probe, see the header)");
        return;
    };
    let out = Command::new(&py)
        .arg(manifest.join("tests/data/py_stacks.py"))
        .arg(&probe)
        .arg("bench")
        .output()
        .expect("python runs");
    let text = String::from_utf8_lossy(&out.stdout);
    println!("CPython 3.12 via ctypes, warm caches");
    println!("  {}", text.trim());
}
