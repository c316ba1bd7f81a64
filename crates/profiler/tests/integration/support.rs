//! Building test programs and running them under the profiler.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use gpuperf_merge::read::cpu::{CpuLaunch, CpuTrace};
use gpuperf_profiler::{Options, ProbeSpec, Profiler, Summary};
use gpuperf_test_support::cc::Gcc;
use gpuperf_test_support::process::run_ok;
use gpuperf_test_support::test_data;

pub use gpuperf_test_support::cuda::{cuda13, inject_lib};

/// Whether this process may load BPF programs; tests skip otherwise, unless
/// `GPUPERF_REQUIRE_BPF=1` (CI) makes that a failure.
#[track_caller]
pub fn privileged() -> bool {
    gpuperf_test_support::require::bpf(gpuperf_profiler::preflight::check())
}

pub fn data(name: &str) -> PathBuf {
    test_data("profiler", name)
}

pub fn tmp() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("profiler");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Builds `app.c` with the fake cudart linked in statically, once per name.
/// `cflags` apply to the application code only; the fake cudart always keeps
/// frame pointers, as libcudart does.
pub fn app(name: &str, cflags: &[&str]) -> PathBuf {
    // Tests build the same program in parallel: one at a time, once.
    static BUILT: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tmp();
    let exe = dir.join(name);
    if built.contains(&exe) {
        return exe;
    }
    let obj = fake_cudart(&dir.join(format!("{name}-fake_cudart.o")), &["-c"]);
    let lib = dir.join(format!("lib{name}-fakecudart.a"));
    let _ = std::fs::remove_file(&lib);
    run_ok(Command::new("ar").arg("rcs").arg(&lib).arg(&obj), "ar");
    Gcc::new(&exe)
        .args(["-Wall", "-Werror", "-O1", "-g"])
        .args(cflags)
        .arg(data("app.c"))
        .arg(&lib)
        .args(["-ldl", "-lpthread"])
        .build();
    built.push(exe.clone());
    exe
}

/// The fake cudart built into `out`: always with frame pointers, as libcudart
/// has them; `how` is `-c` or `-shared -fPIC`.
fn fake_cudart(out: &Path, how: &[&str]) -> PathBuf {
    Gcc::new(out)
        .args(["-O1", "-g", "-fno-omit-frame-pointer"])
        .args(how)
        .arg(data("fake_cudart.c"))
        .build()
}

/// Builds `app.c` against the fake cudart as a shared library, in a directory
/// of their own: `(dir, exe, lib)`. The executable finds the library beside it.
pub fn app_shared(name: &str) -> (PathBuf, PathBuf, PathBuf) {
    let dir = tmp().join(name);
    let lib = fake_cudart(&dir.join("libfakecudart.so"), &["-shared", "-fPIC"]);
    let exe = Gcc::new(dir.join(name))
        .args(["-Wall", "-Werror", "-O1", "-g", "-fno-omit-frame-pointer"])
        .arg(data("app.c"))
        .arg(format!("-L{}", dir.display()))
        .args(["-lfakecudart", "-Wl,-rpath,$ORIGIN", "-ldl", "-lpthread"])
        .build();
    (dir, exe, lib)
}

/// Options that probe `cudaLaunchKernel` in `path` (an executable or a
/// library), as the compatibility mode does.
pub fn launch_probe(path: &Path) -> Options {
    Options {
        uprobes: vec![ProbeSpec {
            path: path.to_owned(),
            symbol: "cudaLaunchKernel".into(),
        }],
        ..Options::default()
    }
}

/// The frames of one launch's stack, outermost first.
pub fn frames<'a>(run: &'a Run, l: &CpuLaunch) -> Vec<&'a str> {
    run.trace.stacks.text(l.stack).split(';').collect()
}

/// What a profiled run produced.
pub struct Run {
    pub trace: CpuTrace,
    pub text: String,
    pub summary: Summary,
    pub stdout: String,
    pub pid: u32,
}

impl Run {
    /// The TIDs the program printed.
    pub fn tids(&self) -> Vec<u32> {
        self.stdout
            .lines()
            .filter_map(|l| l.strip_prefix("tid ")?.parse().ok())
            .collect()
    }
}

/// Starts the profiler, then runs `exe args` gated: it is added to the traced
/// set before it execs, so nothing it does is missed. Waits for it to exit
/// and for the profiler to drain.
pub fn profile(options: Options, exe: &Path, args: &[&str], env: &[(&str, &Path)]) -> Run {
    run_profiled(options, Path::new("."), exe, args, env, None)
}

/// [`profile`] with `exe` run from the directory `cwd` (`exe` may be relative
/// to it).
pub fn profile_in(
    options: Options,
    cwd: &Path,
    exe: &Path,
    args: &[&str],
    env: &[(&str, &Path)],
) -> Run {
    run_profiled(options, cwd, exe, args, env, None)
}

/// [`profile`] of a program that waits for a line on stdin after its first
/// launches (`levels`' gate): the line is written once the profiler has
/// written `firsts` launch lines, that is, unwound their stack copies and
/// stored the recipes. What comes after then finds a recipe however slow
/// the machine is.
pub fn profile_gated(options: Options, exe: &Path, args: &[&str], firsts: u64) -> Run {
    run_profiled(options, Path::new("."), exe, args, &[], Some(firsts))
}

/// [`profile_gated`] with more variables in the program's environment.
pub fn profile_gated_env(
    options: Options,
    exe: &Path,
    args: &[&str],
    env: &[(&str, &Path)],
    firsts: u64,
) -> Run {
    run_profiled(options, Path::new("."), exe, args, env, Some(firsts))
}

fn run_profiled(
    mut options: Options,
    cwd: &Path,
    exe: &Path,
    args: &[&str],
    env: &[(&str, &Path)],
    firsts: Option<u64>,
) -> Run {
    // Removed when dropped, at the end of this function or of a failed test.
    let out = tempfile::Builder::new()
        .prefix("cpu-")
        .suffix(".txt")
        .tempfile_in(tmp())
        .unwrap();
    let file = out.reopen().unwrap();
    options.pids.clear();
    let profiler =
        Profiler::start(options, std::io::BufWriter::new(file)).expect("profiler starts");
    let mut child = Command::new("sh")
        .arg("-c")
        .arg("read go && exec \"$0\" \"$@\"")
        .arg(exe)
        .args(args)
        .envs(env.iter().map(|(k, v)| (*k, *v)))
        .current_dir(cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    profiler.add_pid(pid).unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"go\n").unwrap();
    if let Some(n) = firsts {
        // Not a time limit on the profiler: a guard against a hang.
        let start = Instant::now();
        while profiler.progress().launches.load(Ordering::Relaxed) < n {
            if start.elapsed() > Duration::from_secs(600) || child.try_wait().unwrap().is_some() {
                let _ = child.kill();
                panic!("{exe:?}: the profiler did not write {n} launch lines");
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        stdin.write_all(b"\n").unwrap();
    }
    drop(stdin);
    let o = child.wait_with_output().unwrap();
    assert!(
        o.status.success(),
        "{exe:?} failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let summary = profiler.stop().expect("profiler stops");
    let text = std::fs::read_to_string(out.path()).unwrap();
    let trace = CpuTrace::read(text.as_bytes(), out.path()).expect("the trace parses");
    Run {
        trace,
        text,
        summary,
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        pid,
    }
}

/// The environment that has `app` (with an injection library) launch on the
/// simulated CUDA runtime, built against the CUDA 13 headers of `cuda`, and
/// the library record through its CUPTI: `APP_SIM_CUDART` and
/// `GPUPERF_CUPTI_PATH`.
pub fn sim_env(cuda: &Path) -> [(&'static str, PathBuf); 2] {
    let sim = gpuperf_test_support::cuda::sim(cuda);
    [
        ("APP_SIM_CUDART", sim.join("libcudart.so.13")),
        ("GPUPERF_CUPTI_PATH", sim.join("libcupti.so.13")),
    ]
}

/// A C program linked against the real libcudart.so.13 of the wheel.
pub fn real_cudart_app(cuda: &Path) -> PathBuf {
    gpuperf_test_support::cuda::real_cudart_app(&cuda.join("lib"), &tmp().join("real_cudart_app"))
}

/// Builds `levels.c` and `liblevels.c` with plain `gcc -O2` (no frame
/// pointers) against the fake cudart as a shared library with frame pointers,
/// once: `(exe, libfakecudart.so)`. The executable finds its libraries beside
/// it.
pub fn levels() -> (PathBuf, PathBuf) {
    static BUILT: Mutex<Option<(PathBuf, PathBuf)>> = Mutex::new(None);
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(b) = &*built {
        return b.clone();
    }
    let dir = tmp().join("levels");
    let cudart = fake_cudart(&dir.join("libfakecudart.so"), &["-shared", "-fPIC"]);
    let local_libs = [format!("-L{}", dir.display()), "-Wl,-rpath,$ORIGIN".into()];
    Gcc::new(dir.join("liblevels.so"))
        .args(["-O2", "-g", "-shared", "-fPIC"])
        .arg(data("liblevels.c"))
        .args(&local_libs)
        .arg("-lfakecudart")
        .build();
    let exe = Gcc::new(dir.join("levels"))
        .args(["-Wall", "-Werror", "-O2", "-g"])
        .arg(data("levels.c"))
        .args(&local_libs)
        .args(["-llevels", "-lfakecudart", "-lpthread"])
        .build();
    *built = Some((exe.clone(), cudart.clone()));
    (exe, cudart)
}
