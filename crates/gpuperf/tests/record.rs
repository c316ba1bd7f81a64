//! End-to-end tests of `gpuperf record`: the real binary, the real injection
//! library (driven by the MOCK libcupti, since there is no GPU), the real eBPF
//! profiler, the real `libcudart.so.13` of NVIDIA's wheel, privilege drop,
//! signals and exit codes.
//!
//! Tests that load BPF need root and skip without it, unless
//! `GPUPERF_REQUIRE_BPF=1` (CI) makes that a failure.
#![allow(non_snake_case)]

use std::ffi::OsStr;
use std::fs;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Mutex;

use gpuperf_merge::cpu::CpuTrace;

const NOBODY: u32 = 65534;
const STACK: &str = "main;run_layer;launch_kernel;cudaLaunchKernel";

fn bpf_available() -> bool {
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

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        eprintln!("skipped: needs root (to switch users)");
    }
    root
}

/// `site-packages/nvidia/cu13` of NVIDIA's CUDA 13 wheels, or `None` (skip)
/// unless CI requires them.
fn cuda13() -> Option<PathBuf> {
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

/// A directory every user can read, for programs the target user runs.
fn shared_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("gpuperf-record-tests-{}", std::process::id()));
    let d = dir.join(name);
    fs::create_dir_all(&d).unwrap();
    for p in [&dir, &d] {
        fs::set_permissions(p, fs::Permissions::from_mode(0o755)).unwrap();
    }
    d
}

/// A fresh working directory for one gpuperf run.
fn work_dir(name: &str) -> PathBuf {
    let d = shared_dir("runs").join(name);
    let _ = fs::remove_dir_all(&d);
    fs::create_dir_all(&d).unwrap();
    d
}

fn cc(args: &[&OsStr]) {
    let o = Command::new("gcc").args(args).output().expect("gcc runs");
    assert!(
        o.status.success(),
        "gcc {args:?} failed:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Builds the test programs once: the MOCK libcupti, and `cuda_app` with the
/// fake cudart linked in statically.
fn programs(cuda: &Path) -> (PathBuf, PathBuf) {
    static BUILT: Mutex<Option<(PathBuf, PathBuf)>> = Mutex::new(None);
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(b) = &*built {
        return b.clone();
    }
    let dir = shared_dir("bin");
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mock = dir.join("libcupti_mock.so");
    let include = format!("-I{}", cuda.join("include").display());
    cc(&[
        "-O1".as_ref(),
        "-shared".as_ref(),
        "-fPIC".as_ref(),
        "-o".as_ref(),
        mock.as_os_str(),
        manifest
            .join("../inject/tests/data/mock_cupti.c")
            .as_os_str(),
        include.as_ref(),
    ]);
    let app = dir.join("cuda_app");
    let fake = dir.join("fake_cudart.o");
    let archive = dir.join("libfakecudart.a");
    cc(&[
        "-O1".as_ref(),
        "-fno-omit-frame-pointer".as_ref(),
        "-c".as_ref(),
        "-o".as_ref(),
        fake.as_os_str(),
        manifest
            .join("../profiler/tests/data/fake_cudart.c")
            .as_os_str(),
    ]);
    let ar = Command::new("ar")
        .arg("rcs")
        .arg(&archive)
        .arg(&fake)
        .status()
        .unwrap();
    assert!(ar.success());
    cc(&[
        "-Wall".as_ref(),
        "-Werror".as_ref(),
        "-O1".as_ref(),
        "-g".as_ref(),
        "-fno-omit-frame-pointer".as_ref(),
        "-o".as_ref(),
        app.as_os_str(),
        manifest.join("tests/data/cuda_app.c").as_os_str(),
        archive.as_os_str(),
        "-ldl".as_ref(),
    ]);
    *built = Some((mock.clone(), app.clone()));
    (mock, app)
}

/// `cuda_app` with the fake cudart as a shared `libcudart.so.13`, found by
/// the profiler only in the running process, as a real libcudart is.
fn shared_cudart_app() -> PathBuf {
    static BUILT: Mutex<()> = Mutex::new(());
    let _once = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    let dir = shared_dir("shared");
    let app = dir.join("cuda_app");
    if app.is_file() {
        return app;
    }
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let lib = dir.join("libcudart.so.13");
    cc(&[
        "-O1".as_ref(),
        "-fno-omit-frame-pointer".as_ref(),
        "-shared".as_ref(),
        "-fPIC".as_ref(),
        "-o".as_ref(),
        lib.as_os_str(),
        manifest
            .join("../profiler/tests/data/fake_cudart.c")
            .as_os_str(),
    ]);
    cc(&[
        "-Wall".as_ref(),
        "-O1".as_ref(),
        "-g".as_ref(),
        "-fno-omit-frame-pointer".as_ref(),
        "-o".as_ref(),
        app.as_os_str(),
        manifest.join("tests/data/cuda_app.c").as_os_str(),
        lib.as_os_str(),
        format!("-Wl,-rpath,{}", dir.display()).as_ref(),
        "-ldl".as_ref(),
    ]);
    app
}

#[test]
fn record_shared_cudart__even_the_first_launch_has_its_stack_from_the_api_entry() {
    let Some(cuda) = cuda13() else { return };
    if !bpf_available() {
        return;
    }
    let (mock, _) = programs(&cuda);
    let app = shared_cudart_app();
    let dir = work_dir("shared-cudart");
    let o = gpuperf(&dir)
        .args(["-p", "cpu.txt", "--raw-dir", "raw", "--cupti"])
        .arg(&mock)
        .arg("--")
        .arg(&app)
        .args(["5", "0"])
        .output()
        .unwrap();
    let all = show(&o);
    assert_eq!(o.status.code(), Some(0), "{all}");
    assert!(
        text(&o.stderr)
            .contains("5 launch stacks (5 taken at the API entry, 0 inside NVIDIA code)"),
        "{all}"
    );
    let cpu = CpuTrace::open(&dir.join("cpu.txt")).unwrap();
    assert_eq!(cpu.launches.len(), 5, "{all}");
    for l in &cpu.launches {
        let s = cpu.stacks.text(l.stack);
        assert!(s.ends_with(STACK), "stack `{s}`");
    }
    let pid = cpu.launches[0].pid;
    let log = fs::read_to_string(dir.join(format!("raw/gpu-{pid}.gputrace.log"))).unwrap();
    assert!(log.contains("CPU profiler ready after"), "{log}");
}

fn gpuperf(dir: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_gpuperf"));
    c.current_dir(dir).stdin(Stdio::null());
    for v in ["SUDO_UID", "SUDO_GID", "SUDO_USER", "CUDA_INJECTION64_PATH"] {
        c.env_remove(v);
    }
    c
}

fn as_sudo_from_nobody(c: &mut Command) -> &mut Command {
    c.env("SUDO_UID", NOBODY.to_string())
        .env("SUDO_GID", NOBODY.to_string())
        .env("SUDO_USER", "nobody")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn show(o: &Output) -> String {
    format!(
        "status {:?}\n--- stdout\n{}--- stderr\n{}",
        o.status,
        text(&o.stdout),
        text(&o.stderr)
    )
}

#[test]
fn record_mock_cuda_app_with_a_child_process__every_output_as_the_sudo_user() {
    let Some(cuda) = cuda13() else { return };
    if !bpf_available() {
        return;
    }
    let (mock, app) = programs(&cuda);
    let dir = work_dir("full");
    let o = as_sudo_from_nobody(&mut gpuperf(&dir))
        .args(["-c", "gpu.json", "-p", "cpu.txt", "-m", "merged.folded"])
        .args(["-o", "flame.svg", "--raw-dir", "raw", "--cupti"])
        .arg(&mock)
        .arg("--")
        .arg(&app)
        .args(["200", "7", "fork"])
        .output()
        .unwrap();
    let all = show(&o);
    assert_eq!(o.status.code(), Some(7), "{all}");

    // The target ran as the sudo user, in two processes, output untouched.
    let out = text(&o.stdout);
    let pids: Vec<u32> = out
        .lines()
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(
                w[2..],
                ["uid", "65534", "gid", "65534", "launched", "200"],
                "{all}"
            );
            w[1].parse().unwrap()
        })
        .collect();
    assert_eq!(pids.len(), 2, "{all}");

    // The CPU trace: every launch of both processes, with its full stack and id.
    let cpu = CpuTrace::open(&dir.join("cpu.txt")).unwrap();
    assert_eq!(cpu.launches.len(), 400, "{all}");
    for pid in &pids {
        let mut ids: Vec<u32> = cpu
            .launches
            .iter()
            .filter(|l| l.pid == *pid)
            .map(|l| l.correlation_id)
            .collect();
        ids.sort_unstable();
        assert_eq!(ids, (1..=200).collect::<Vec<_>>(), "pid {pid}");
    }
    for l in &cpu.launches {
        let s = cpu.stacks.text(l.stack);
        assert!(s.ends_with(STACK), "stack `{s}`");
    }

    // Every kernel charged to its launch stack.
    let err = text(&o.stderr);
    assert!(err.contains("matched 400 of 400 kernels (100.0%)"), "{all}");
    assert!(err.contains("top kernels by GPU time"), "{all}");
    assert!(err.contains("gemv_f"), "{all}");
    let folded = fs::read_to_string(dir.join("merged.folded")).unwrap();
    assert!(!folded.is_empty());
    let mut roots: Vec<&str> = Vec::new();
    for line in folded.lines() {
        let (stack, weight) = line.rsplit_once(' ').unwrap();
        assert!(
            stack.contains(&format!("{STACK};[GPU_Kernel]")),
            "line `{line}`"
        );
        assert!(weight.parse::<u64>().unwrap() > 0, "line `{line}`");
        roots.push(stack.split(';').next().unwrap());
    }
    // The two processes stay apart, each under its own root frame.
    roots.sort_unstable();
    roots.dedup();
    let mut want: Vec<String> = pids.iter().map(|p| format!("cuda_app [pid {p}]")).collect();
    want.sort_unstable();
    assert_eq!(roots, want, "{folded}");

    // The timeline has both processes; the flamegraph has stacks and kernels.
    let timeline: serde_json::Value =
        serde_json::from_slice(&fs::read(dir.join("gpu.json")).unwrap()).unwrap();
    let events = timeline["traceEvents"].as_array().expect("traceEvents");
    for pid in &pids {
        assert!(
            events
                .iter()
                .any(|e| e["pid"].as_u64() == Some(u64::from(*pid))),
            "no event of pid {pid} in the timeline"
        );
    }
    let svg = fs::read_to_string(dir.join("flame.svg")).unwrap();
    assert!(svg.contains("launch_kernel") && svg.contains("rms_norm"));

    // Everything written belongs to the user, and the kept recording merges
    // to the same stacks.
    for f in [
        "gpu.json",
        "cpu.txt",
        "merged.folded",
        "flame.svg",
        "raw",
        "raw/cpu.txt",
    ] {
        let m = fs::metadata(dir.join(f)).unwrap();
        assert_eq!((m.uid(), m.gid()), (NOBODY, NOBODY), "{f}");
    }
    let again = gpuperf(&dir)
        .args(["merge", "raw", "-m", "again.folded"])
        .output()
        .unwrap();
    assert!(again.status.success(), "{}", show(&again));
    let mut a: Vec<&str> = folded.lines().collect();
    let again_text = fs::read_to_string(dir.join("again.folded")).unwrap();
    let mut b: Vec<&str> = again_text.lines().collect();
    a.sort_unstable();
    b.sort_unstable();
    assert_eq!(a, b);
    let report = gpuperf(&dir).args(["report", "raw"]).output().unwrap();
    assert!(report.status.success(), "{}", show(&report));
    assert!(text(&report.stdout).contains("gemv_f"));
}

#[test]
fn record_sigint_to_gpuperf__target_stops_gracefully_and_outputs_are_written() {
    let Some(cuda) = cuda13() else { return };
    if !bpf_available() {
        return;
    }
    let (mock, app) = programs(&cuda);
    let dir = work_dir("sigint");
    let mut child = gpuperf(&dir)
        .arg("--cupti")
        .arg(&mock)
        .arg("--")
        .arg(&app)
        .args(["50", "0", "wait-signal"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut seen = Vec::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        seen.push(line.clone());
        if line == "ready" {
            break;
        }
    }
    assert_eq!(seen.last().map(String::as_str), Some("ready"), "{seen:?}");
    // As `kill -INT <gpuperf>` does: gpuperf passes it on to the target.
    // SAFETY: kill has no memory preconditions; the pid is our live child.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
    let rest: Vec<String> = lines.map(Result::unwrap).collect();
    let o = child.wait_with_output().unwrap();
    let err = text(&o.stderr);
    assert_eq!(rest, ["interrupted"], "{err}");
    assert_eq!(o.status.code(), Some(130), "{err}");
    assert!(err.contains("stopping the target"), "{err}");
    assert!(err.contains("matched 50 of 50 kernels (100.0%)"), "{err}");
    assert!(
        fs::read_to_string(dir.join("flamegraph.svg"))
            .unwrap()
            .contains("launch_kernel")
    );
}

/// The real libcudart.so.13, linked into a C program. The library is copied
/// where the unprivileged target user can read it (pip may have installed it
/// under root's home).
fn real_cudart_app(cuda: &Path) -> PathBuf {
    static BUILT: Mutex<()> = Mutex::new(());
    let _once = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    let lib = shared_dir("cudart");
    let exe = shared_dir("bin").join("real_cudart_app");
    if exe.is_file() {
        return exe;
    }
    fs::copy(
        cuda.join("lib/libcudart.so.13"),
        lib.join("libcudart.so.13"),
    )
    .unwrap();
    cc(&[
        "-O1".as_ref(),
        "-g".as_ref(),
        "-fno-omit-frame-pointer".as_ref(),
        "-o".as_ref(),
        exe.as_os_str(),
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../profiler/tests/data/real_cudart.c")
            .as_os_str(),
        format!("-L{}", lib.display()).as_ref(),
        format!("-Wl,-rpath,{}", lib.display()).as_ref(),
        "-l:libcudart.so.13".as_ref(),
    ]);
    exe
}

#[test]
fn record_real_libcudart__cpu_only_uprobe_stacks_and_outputs() {
    let Some(cuda) = cuda13() else { return };
    if !bpf_available() {
        return;
    }
    let app = real_cudart_app(&cuda);
    let dir = work_dir("cpu-only");
    let probe = format!(
        "{}:cudaLaunchKernel",
        shared_dir("cudart").join("libcudart.so.13").display()
    );
    let o = as_sudo_from_nobody(&mut gpuperf(&dir))
        .args([
            "record",
            "--cpu-only",
            "--uprobe",
            &probe,
            "-p",
            "cpu.txt",
            "-m",
            "m.folded",
        ])
        .arg("--")
        .arg(&app)
        .arg("30")
        .output()
        .unwrap();
    let all = show(&o);
    assert_eq!(o.status.code(), Some(0), "{all}");
    assert!(text(&o.stdout).starts_with("last error "), "{all}");
    let cpu = CpuTrace::open(&dir.join("cpu.txt")).unwrap();
    assert_eq!(cpu.launches.len(), 30, "{all}");
    for l in &cpu.launches {
        assert!(
            cpu.stacks
                .text(l.stack)
                .ends_with("main;enqueue;cudaLaunchKernel")
        );
        // Unwound through glibc, which keeps no frame pointers.
        assert!(cpu.stacks.text(l.stack).starts_with("_start;"), "{all}");
    }
    assert_eq!(cpu.truncated, 0);
    assert!(
        text(&o.stderr).contains(", 0 truncated (stop before"),
        "{all}"
    );
    // Without GPU work the flamegraph counts launches.
    let folded = fs::read_to_string(dir.join("m.folded")).unwrap();
    let total: u64 = folded
        .lines()
        .map(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap())
        .sum();
    assert_eq!(total, 30, "{folded}");
    assert!(
        fs::read_to_string(dir.join("flamegraph.svg"))
            .unwrap()
            .contains("enqueue")
    );
    assert!(
        text(&o.stderr).contains("the flamegraph counts launches"),
        "{all}"
    );
}

#[test]
fn record_real_libcudart_without_a_driver__program_unchanged_and_the_reason_given() {
    let Some(cuda) = cuda13() else { return };
    if !bpf_available() {
        return;
    }
    let app = real_cudart_app(&cuda);
    let dir = work_dir("no-driver");
    let plain = Command::new(&app).arg("3").output().unwrap();
    let o = gpuperf(&dir).arg("--").arg(&app).arg("3").output().unwrap();
    assert_eq!(o.status.code(), plain.status.code(), "{}", show(&o));
    assert_eq!(o.stdout, plain.stdout);
    assert!(
        text(&o.stderr).contains("no CUDA process was recorded"),
        "{}",
        show(&o)
    );
}

#[test]
fn record_as_a_user_without_bpf__gpu_side_still_recorded_and_the_fix_named() {
    let Some(cuda) = cuda13() else { return };
    if !is_root() {
        return;
    }
    let (mock, app) = programs(&cuda);
    let dir = work_dir("unprivileged");
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o777)).unwrap();
    let mut cmd = gpuperf(&dir);
    cmd.arg("--cupti")
        .arg(&mock)
        .arg("--")
        .arg(&app)
        .args(["20", "4"]);
    // SAFETY: the closure runs in the child before exec and only calls setgid
    // and setuid.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setgid(NOBODY) != 0 || libc::setuid(NOBODY) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let o = cmd.output().unwrap();
    let all = show(&o);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(4), "{all}");
    assert!(err.contains("no CPU stacks:"), "{all}");
    assert!(err.contains("sudo") || err.contains("CAP_BPF"), "{all}");
    assert!(err.contains("20 kernels"), "{all}");
    assert!(dir.join("flamegraph.svg").is_file(), "{all}");
}

#[test]
fn record_gpu_only__output_and_exit_code_are_the_programs() {
    let dir = work_dir("gpu-only");
    let o = gpuperf(&dir)
        .args([
            "--gpu-only",
            "--",
            "sh",
            "-c",
            "echo out; echo err >&2; exit 5",
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(5), "{}", show(&o));
    assert_eq!(text(&o.stdout), "out\n");
    assert!(text(&o.stderr).starts_with("err\n"), "{}", show(&o));
}

#[test]
fn record_missing_program__exit_127_and_one_line_naming_it() {
    let dir = work_dir("missing");
    let o = gpuperf(&dir)
        .args(["--gpu-only", "--", "/nonexistent/app"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(127), "{}", show(&o));
    let err = text(&o.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("/nonexistent/app"), "{err}");
    let o = gpuperf(&dir).arg("flamegraph").output().unwrap();
    assert_eq!(o.status.code(), Some(127), "{}", show(&o));
    assert!(
        text(&o.stderr).contains("commands are record, merge and report"),
        "{}",
        show(&o)
    );
}

#[test]
fn record_cpu_only_without_cudart_or_uprobe__error_says_what_to_add() {
    if !bpf_available() {
        return;
    }
    let dir = work_dir("cpu-only-bad");
    let o = gpuperf(&dir)
        .args(["--cpu-only", "--", "/bin/true"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    let err = text(&o.stderr);
    assert!(err.contains("--uprobe LIB:SYMBOL"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}
