//! Building test programs and running them under the profiler.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;

use gpuperf_merge::cpu::CpuTrace;
use gpuperf_profiler::{Options, Profiler, Summary};

/// Whether this process may load BPF programs; tests skip otherwise.
pub fn privileged() -> bool {
    if gpuperf_profiler::preflight::check().is_ok() {
        return true;
    }
    assert!(
        std::env::var_os("GPUPERF_REQUIRE_BPF").is_none_or(|v| v != "1"),
        "GPUPERF_REQUIRE_BPF=1 but eBPF is unavailable: {:?}",
        gpuperf_profiler::preflight::check()
    );
    eprintln!("skipped: needs root (eBPF)");
    false
}

pub fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

pub fn tmp() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("profiler");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn run(cmd: &mut Command) {
    let o = cmd.output().expect("compiler runs");
    assert!(
        o.status.success(),
        "{cmd:?} failed:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Builds `app.c` with the fake cudart linked in statically, once per name.
/// `cflags` apply to the application code only; the fake cudart always keeps
/// frame pointers, as libcudart does.
pub fn app(name: &str, cflags: &[&str]) -> PathBuf {
    static BUILT: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tmp();
    let exe = dir.join(name);
    if built.contains(&exe) {
        return exe;
    }
    let obj = dir.join(format!("{name}-fake_cudart.o"));
    let lib = dir.join(format!("lib{name}-fakecudart.a"));
    run(Command::new("gcc")
        .args(["-O1", "-g", "-fno-omit-frame-pointer", "-c", "-o"])
        .arg(&obj)
        .arg(data("fake_cudart.c")));
    let _ = std::fs::remove_file(&lib);
    run(Command::new("ar").arg("rcs").arg(&lib).arg(&obj));
    run(Command::new("gcc")
        .args(["-Wall", "-Werror", "-O1", "-g"])
        .args(cflags)
        .arg("-o")
        .arg(&exe)
        .arg(data("app.c"))
        .arg(&lib)
        .args(["-ldl", "-lpthread"]));
    built.push(exe.clone());
    exe
}

/// Builds `app.c` against the fake cudart as a shared library, in a directory
/// of their own: `(dir, exe, lib)`. The executable finds the library beside it.
pub fn app_shared(name: &str) -> (PathBuf, PathBuf, PathBuf) {
    let dir = tmp().join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let lib = dir.join("libfakecudart.so");
    let exe = dir.join(name);
    run(Command::new("gcc")
        .args([
            "-O1",
            "-g",
            "-fno-omit-frame-pointer",
            "-shared",
            "-fPIC",
            "-o",
        ])
        .arg(&lib)
        .arg(data("fake_cudart.c")));
    run(Command::new("gcc")
        .args(["-Wall", "-Werror", "-O1", "-g", "-fno-omit-frame-pointer"])
        .arg("-o")
        .arg(&exe)
        .arg(data("app.c"))
        .arg(format!("-L{}", dir.display()))
        .args(["-lfakecudart", "-Wl,-rpath,$ORIGIN", "-ldl", "-lpthread"]));
    (dir, exe, lib)
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
    profile_in(options, Path::new("."), exe, args, env)
}

/// [`profile`] with `exe` run from the directory `cwd` (`exe` may be relative
/// to it).
pub fn profile_in(
    mut options: Options,
    cwd: &Path,
    exe: &Path,
    args: &[&str],
    env: &[(&str, &Path)],
) -> Run {
    let out = tmp().join(format!("cpu-{}.txt", std::process::id()));
    let out = out.with_extension(format!(
        "{}.txt",
        COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    let file = std::fs::File::create(&out).unwrap();
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
    child.stdin.take().unwrap().write_all(b"go\n").unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(
        o.status.success(),
        "{exe:?} failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let summary = profiler.stop().expect("profiler stops");
    let text = std::fs::read_to_string(&out).unwrap();
    let trace = CpuTrace::read(text.as_bytes(), &out).expect("the trace parses");
    Run {
        trace,
        text,
        summary,
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        pid,
    }
}

static COUNTER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// `site-packages/nvidia/cu13` of NVIDIA's CUDA 13 wheels, or `None` (the test
/// then skips) unless CI requires them.
pub fn cuda13() -> Option<PathBuf> {
    let out = Command::new("python3")
        .args([
            "-c",
            "import sysconfig; print(sysconfig.get_paths()['purelib'])",
        ])
        .output()
        .ok()
        .filter(|o| o.status.success())?;
    let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()).join("nvidia/cu13");
    if dir.join("lib/libcudart.so.13").is_file() && dir.join("include/cupti_callbacks.h").is_file()
    {
        return Some(dir);
    }
    let msg = "NVIDIA CUDA wheels missing: pip install nvidia-cuda-cupti==13.0.85 nvidia-cuda-runtime==13.0.96";
    assert!(
        std::env::var_os("GPUPERF_REQUIRE_CUDA_WHEELS").is_none_or(|v| v != "1"),
        "{msg}"
    );
    eprintln!("skipped: {msg}");
    None
}

/// The MOCK libcupti of the inject crate's tests, built against the real
/// CUPTI 13 headers.
pub fn mock_cupti(cuda: &Path) -> PathBuf {
    static BUILT: Mutex<Option<PathBuf>> = Mutex::new(None);
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(p) = &*built {
        return p.clone();
    }
    let out = tmp().join("libcupti_mock.so");
    run(Command::new("gcc")
        .args(["-O1", "-shared", "-fPIC", "-o"])
        .arg(&out)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../inject/tests/data/mock_cupti.c"))
        .arg(format!("-I{}", cuda.join("include").display())));
    *built = Some(out.clone());
    out
}

/// The injection library, built by cargo if this test run did not build it.
pub fn inject_lib() -> PathBuf {
    static BUILT: Mutex<()> = Mutex::new(());
    let _guard = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().unwrap().parent().unwrap();
    let lib = profile_dir.join("libgpuperf_inject.so");
    if !lib.is_file() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        run(Command::new(cargo).args(["build", "-p", "gpuperf-inject"]));
    }
    assert!(lib.is_file(), "{} missing", lib.display());
    lib
}

/// A C program linked against the real libcudart.so.13 of the wheel.
pub fn real_cudart_app(cuda: &Path) -> PathBuf {
    let lib = cuda.join("lib");
    let exe = tmp().join("real_cudart_app");
    run(Command::new("gcc")
        .args([
            "-Wall",
            "-Werror",
            "-O1",
            "-g",
            "-fno-omit-frame-pointer",
            "-o",
        ])
        .arg(&exe)
        .arg(data("real_cudart.c"))
        .arg(format!("-L{}", lib.display()))
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .arg("-l:libcudart.so.13"));
    exe
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
    std::fs::create_dir_all(&dir).unwrap();
    let cudart = dir.join("libfakecudart.so");
    let lib = dir.join("liblevels.so");
    let exe = dir.join("levels");
    run(Command::new("gcc")
        .args([
            "-O1",
            "-g",
            "-fno-omit-frame-pointer",
            "-shared",
            "-fPIC",
            "-o",
        ])
        .arg(&cudart)
        .arg(data("fake_cudart.c")));
    run(Command::new("gcc")
        .args(["-O2", "-g", "-shared", "-fPIC", "-o"])
        .arg(&lib)
        .arg(data("liblevels.c"))
        .arg(format!("-L{}", dir.display()))
        .args(["-lfakecudart", "-Wl,-rpath,$ORIGIN"]));
    run(Command::new("gcc")
        .args(["-Wall", "-Werror", "-O2", "-g", "-o"])
        .arg(&exe)
        .arg(data("levels.c"))
        .arg(format!("-L{}", dir.display()))
        .args([
            "-llevels",
            "-lfakecudart",
            "-Wl,-rpath,$ORIGIN",
            "-lpthread",
        ]));
    *built = Some((exe.clone(), cudart.clone()));
    (exe, cudart)
}
