//! End-to-end tests of `gpuperf record`: the real binary, the real injection
//! library and the real eBPF profiler on programs built by nvcc against the
//! simulated CUDA runtime (`sim/`, no GPU), and on the real `libcudart.so.13` of
//! NVIDIA's wheel; privilege drop, signals and exit codes. `tests/sim.rs` checks
//! each CUDA path on the simulation.
//!
//! Tests that load BPF need root and skip without it, unless
//! `GPUPERF_REQUIRE_BPF=1` (CI) makes that a failure. Programs that another user
//! runs are copied to a world-readable temporary directory first.
#![allow(non_snake_case)]

mod common;

use std::fs;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;

use common::{
    NOBODY, as_sudo_from_nobody, bpf_available, cc, cuda13, gpuperf, gpuperf_for_anyone, is_root,
    nvcc, shared_dir, show, sim, sim_app, text, work_dir,
};
use gpuperf_merge::cpu::CpuTrace;

/// The launch stack of `sim_app chevron`, from `main`.
const STACK: &str =
    "main;run_chevron(int);__device_stub__Z7k_scalePfi(float*, int);cudaLaunchKernel";

/// The simulated runtime's libcupti and `sim_app` (nvcc), or `None` to skip.
fn sim_programs() -> Option<(PathBuf, PathBuf)> {
    let cuda = cuda13()?;
    let nvcc = nvcc(&cuda)?;
    let app = sim_app(&cuda, &nvcc);
    Some((sim(&cuda).join("libcupti.so.13"), app))
}

#[test]
fn record_sim_app__even_the_first_launch_has_its_stack_from_the_api_entry() {
    if !bpf_available() {
        return;
    }
    let Some((cupti, app)) = sim_programs() else {
        return;
    };
    let dir = work_dir("first-launch");
    let o = gpuperf(&dir)
        .args(["-p", "cpu.txt", "--raw-dir", "raw", "--cupti"])
        .arg(&cupti)
        .arg("--")
        .arg(&app)
        .args(["chevron", "3"])
        .output()
        .unwrap();
    let all = show(&o);
    assert_eq!(o.status.code(), Some(0), "{all}");
    assert!(
        text(&o.stderr)
            .contains("6 launch stacks (6 taken at the API entry, 0 inside NVIDIA code)"),
        "{all}"
    );
    let cpu = CpuTrace::open(&dir.join("cpu.txt")).unwrap();
    assert_eq!(cpu.launches.len(), 6, "{all}");
    assert!(cpu.stacks.text(cpu.launches[0].stack).ends_with(STACK));
    let pid = cpu.launches[0].pid;
    let log = fs::read_to_string(dir.join(format!("raw/gpu-{pid}.gputrace.log"))).unwrap();
    assert!(log.contains("CPU profiler ready after"), "{log}");
}

#[test]
fn record_sim_app_with_a_child_process__every_output_as_the_sudo_user() {
    if !bpf_available() {
        return;
    }
    let Some((cupti, app)) = sim_programs() else {
        return;
    };
    let dir = work_dir("full");
    let o = as_sudo_from_nobody(&mut gpuperf(&dir))
        .args(["-c", "gpu.json", "-p", "cpu.txt", "-m", "merged.folded"])
        .args(["-o", "flame.svg", "--raw-dir", "raw", "--cupti"])
        .arg(&cupti)
        .arg("--")
        .arg(&app)
        .args(["fork", "100", "7"])
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

    // The CPU trace: every launch of both processes, with its full stack and a
    // distinct correlation id.
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
        ids.dedup();
        assert_eq!(ids.len(), 200, "pid {pid}");
    }
    for l in &cpu.launches {
        let s = cpu.stacks.text(l.stack);
        assert!(
            s.ends_with(STACK) || s.ends_with(&STACK.replace("Z7k_scale", "Z6k_bias")),
            "stack `{s}`"
        );
    }

    // Every kernel charged to its launch stack.
    let err = text(&o.stderr);
    assert!(err.contains("matched 400 of 400 kernels (100.0%)"), "{all}");
    assert!(err.contains("top kernels by GPU time"), "{all}");
    assert!(err.contains("k_bias"), "{all}");
    assert!(err.contains("simulated GPU"), "{all}");
    let folded = fs::read_to_string(dir.join("merged.folded")).unwrap();
    assert!(!folded.is_empty());
    let mut roots: Vec<&str> = Vec::new();
    for line in folded.lines() {
        let (stack, weight) = line.rsplit_once(' ').unwrap();
        assert!(
            stack.contains("main;run_chevron(int);__device_stub__")
                && stack.contains("cudaLaunchKernel;[GPU_Kernel]"),
            "line `{line}`"
        );
        assert!(weight.parse::<u64>().unwrap() > 0, "line `{line}`");
        roots.push(stack.split(';').next().unwrap());
    }
    // The two processes stay apart, each under its own root frame.
    roots.sort_unstable();
    roots.dedup();
    let mut want: Vec<String> = pids.iter().map(|p| format!("sim_app [pid {p}]")).collect();
    want.sort_unstable();
    assert_eq!(roots, want, "{folded}");

    // The timeline has both processes, labelled simulated; the flamegraph has
    // stacks and kernels, and says "simulated GPU" in its title.
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
        assert!(
            events
                .iter()
                .any(|e| e["pid"].as_u64() == Some(u64::from(*pid))
                    && e["name"] == "process_labels"
                    && e["args"]["labels"]
                        .as_str()
                        .is_some_and(|l| l.starts_with("simulated GPU"))),
            "pid {pid} is not labelled simulated"
        );
    }
    let notes = timeline["otherData"]["notes"].as_array().expect("notes");
    assert_eq!(notes.len(), 2, "{notes:?}");
    let svg = fs::read_to_string(dir.join("flame.svg")).unwrap();
    assert!(svg.contains("run_chevron") && svg.contains("k_scale"));
    assert!(svg.contains("GPU time by CPU stack (simulated GPU)</text>"));

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
    assert!(text(&report.stdout).contains("k_scale"));
    assert!(
        text(&report.stderr).contains("simulated GPU"),
        "{}",
        show(&report)
    );
}

#[test]
fn record_sigint_to_gpuperf__target_stops_gracefully_and_outputs_are_written() {
    if !bpf_available() {
        return;
    }
    let Some((cupti, app)) = sim_programs() else {
        return;
    };
    let dir = work_dir("sigint");
    let mut child = gpuperf(&dir)
        .arg("--cupti")
        .arg(&cupti)
        .arg("--")
        .arg(&app)
        .args(["wait-signal", "25"])
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
            .contains("run_chevron")
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
    }
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
    if !is_root() {
        return;
    }
    let Some((cupti, app)) = sim_programs() else {
        return;
    };
    let dir = work_dir("unprivileged");
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o777)).unwrap();
    // gpuperf itself runs as the other user: from a copy it can read, as
    // target/ may sit in a checkout that others cannot enter.
    let mut cmd = Command::new(gpuperf_for_anyone());
    cmd.current_dir(&dir)
        .stdin(Stdio::null())
        .env_remove("SUDO_UID")
        .env_remove("CUDA_INJECTION64_PATH")
        // Its scratch space too: the caller's TMPDIR may be private.
        .env("TMPDIR", &dir)
        .arg("--cupti")
        .arg(&cupti)
        .arg("--")
        .arg(&app)
        .args(["chevron", "10", "4"]);
    // SAFETY: the closure runs in the child before exec and only calls setgroups,
    // setgid and setuid.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setgroups(0, std::ptr::null()) != 0
                || libc::setgid(NOBODY) != 0
                || libc::setuid(NOBODY) != 0
            {
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
    assert!(err.contains("simulated GPU"), "{all}");
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
