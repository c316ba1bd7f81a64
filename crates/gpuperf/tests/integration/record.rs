//! End-to-end tests of `gpuperf record`: the real binary, the real injection
//! library and the real eBPF profiler on programs built by nvcc against the
//! simulated CUDA runtime (`sim/`, no GPU), and on the real `libcudart.so.13` of
//! NVIDIA's wheel; privilege drop, signals and exit codes. `sim.rs` checks
//! each CUDA path on the simulation.
//!
//! Tests that load BPF need root and skip without it, unless
//! `GPUPERF_REQUIRE_BPF=1` (CI) makes that a failure. Programs that another user
//! runs are copied to a world-readable temporary directory first.
#![allow(non_snake_case)]

use crate::common;

use std::fs;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::{
    NO_ARGS, NOBODY, Record, bpf_available, cuda13, gpuperf, gpuperf_as, is_root, nvcc, shared_dir,
    show, sim, sim_app, text, work_dir,
};
use gpuperf_merge::read::cpu::CpuTrace;
use gpuperf_test_support::cc::Gcc;
use gpuperf_test_support::python::{marker_line, pythons};

/// The launch stack of `sim_app chevron`, from `main`.
const STACK: &str =
    "main;run_chevron(int);__device_stub__Z7k_scalePfi(float*, int);cudaLaunchKernel";

/// eBPF stacks into `cpu.txt`, the raw traces kept in `raw/`.
const EBPF_RAW: [&str; 6] = ["--stacks", "ebpf", "-p", "cpu.txt", "--raw-dir", "raw"];

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
    let o = Record::bare(&dir)
        .flags(EBPF_RAW)
        .cupti(&cupti)
        .program(&app, ["chevron", "3"])
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
    let o = Record::bare(&dir)
        .sudo_from_nobody()
        .flags([
            "--stacks",
            "ebpf",
            "-c",
            "gpu.json",
            "-p",
            "cpu.txt",
            "-m",
            "merged.folded",
        ])
        .flags(["-o", "flame.svg", "--full-names", "--raw-dir", "raw"])
        .cupti(&cupti)
        .program(&app, NO_ARGS)
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
        let mut ids: Vec<_> = cpu
            .launches
            .iter()
            .filter(|l| l.pid == *pid)
            .filter_map(|l| l.correlation_id)
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
        .args(["merge", "raw", "--full-names", "-m", "again.folded"])
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
    let mut child = Record::bare(&dir)
        .cupti(&cupti)
        .program(&app, NO_ARGS)
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
    let lib = shared_dir("cudart");
    let copy = lib.join("libcudart.so.13");
    if !copy.is_file() {
        fs::copy(cuda.join("lib/libcudart.so.13"), &copy).unwrap();
    }
    gpuperf_test_support::cuda::real_cudart_app(&lib, &shared_dir("bin").join("real_cudart_app"))
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
    let o = Record::new(&dir)
        .sudo_from_nobody()
        .flags([
            "--cpu-only",
            "--uprobe",
            &probe,
            "-p",
            "cpu.txt",
            "-m",
            "m.folded",
        ])
        .program(&app, NO_ARGS)
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
    let o = Record::bare(&dir).program(&app, ["3"]).output().unwrap();
    assert_eq!(o.status.code(), plain.status.code(), "{}", show(&o));
    assert_eq!(o.stdout, plain.stdout);
    assert!(
        text(&o.stderr).contains("no CUDA process was recorded"),
        "{}",
        show(&o)
    );
}

#[test]
fn record_ebpf_stacks_as_a_user_without_bpf__the_fix_named_and_stacks_taken_in_process() {
    if !is_root() {
        return;
    }
    let Some((cupti, app)) = sim_programs() else {
        return;
    };
    let dir = work_dir("unprivileged");
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o777)).unwrap();
    // gpuperf itself runs as the other user.
    let o = Record::from(gpuperf_as(&dir, NOBODY))
        .flags(["--stacks", "ebpf"])
        .cupti(&cupti)
        .program(&app, NO_ARGS)
        .args(["chevron", "10", "4"])
        .output()
        .unwrap();
    let all = show(&o);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(4), "{all}");
    assert!(err.contains("no CPU stacks from eBPF:"), "{all}");
    assert!(err.contains("sudo") || err.contains("CAP_BPF"), "{all}");
    assert!(err.contains("20 kernels"), "{all}");
    assert!(err.contains("simulated GPU"), "{all}");
    assert!(err.contains("taken in the program:"), "{all}");
    assert!(dir.join("flamegraph.svg").is_file(), "{all}");
}

#[test]
fn record_gpu_only__output_and_exit_code_are_the_programs() {
    let dir = work_dir("gpu-only");
    let o = Record::bare(&dir)
        .flags(["--gpu-only"])
        .program("sh", ["-c", "echo out; echo err >&2; exit 5"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(5), "{}", show(&o));
    assert_eq!(text(&o.stdout), "out\n");
    assert!(text(&o.stderr).starts_with("err\n"), "{}", show(&o));
}

#[test]
fn record_missing_program__exit_127_and_one_line_naming_it() {
    let dir = work_dir("missing");
    let o = Record::bare(&dir)
        .flags(["--gpu-only"])
        .program("/nonexistent/app", NO_ARGS)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(127), "{}", show(&o));
    let err = text(&o.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("/nonexistent/app"), "{err}");
    let o = gpuperf(&dir).arg("flamegraph").output().unwrap();
    assert_eq!(o.status.code(), Some(127), "{}", show(&o));
    assert!(
        text(&o.stderr).contains("commands are record, merge, report, diff and monitor"),
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
    let o = Record::bare(&dir)
        .flags(["--cpu-only"])
        .program("/bin/true", NO_ARGS)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    let err = text(&o.stderr);
    assert!(err.contains("--uprobe LIB:SYMBOL"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}

// ---- Stacks taken in process by the injection library (no eBPF) ----

/// The in-process test programs on the simulated CUDA runtime, built with
/// `flags` (`-O2`, plus `-fomit-frame-pointer` or not): `liblauncher.so`
/// (linked against the simulation's `libcudart.so.13`) and `levels_app`, in a
/// directory every user can read. Returns (dir, app, the simulated libcupti),
/// or `None` to skip without the wheels.
fn inproc_programs(tag: &str, flags: &[&str]) -> Option<(PathBuf, PathBuf, PathBuf)> {
    let cuda = cuda13()?;
    let sim = sim(&cuda);
    let dir = shared_dir(&format!("inproc-{tag}"));
    let data = |name: &str| gpuperf_test_support::test_data("gpuperf", name);
    let rpath = format!("-Wl,-rpath,{}", dir.display());
    let gcc = |out: &str, src: PathBuf| Gcc::new(dir.join(out)).args(flags).arg("-g").arg(src);
    let launcher = gcc("liblauncher.so", data("launcher.c"))
        .args(["-shared", "-fPIC"])
        .arg(format!("-I{}", cuda.join("include").display()))
        .lib_dir(&sim)
        .arg("-lcudart")
        .build_once();
    let app = gcc("levels_app", data("levels_app.c"))
        .arg(&launcher)
        .args([&rpath, "-pthread"])
        .build_once();
    Some((dir, app, sim.join("libcupti.so.13")))
}

const LEVELS: &str =
    "level1;level2;level3;level4;level5;launcher_launch;lib_enter;lib_inner;cudaLaunchKernel";

/// Checks every launch of a `levels_app` run: main-thread stacks from `_start`
/// through main and the levels, thread stacks from clone through the thread's
/// start; returns the stacks, sorted.
fn check_levels(cpu: &CpuTrace, launches: usize, all: &str) -> Vec<String> {
    assert_eq!(cpu.launches.len(), launches, "{all}");
    let mut texts: Vec<String> = Vec::new();
    for l in &cpu.launches {
        let s = cpu.stacks.text(l.stack);
        if l.tid == l.pid {
            assert!(s.starts_with("_start;"), "main thread stack `{s}`\n{all}");
            assert!(
                s.ends_with(&format!(";main;{LEVELS}")),
                "stack `{s}`\n{all}"
            );
        } else {
            assert!(s.starts_with("clone"), "thread stack `{s}`\n{all}");
            assert!(
                s.ends_with(&format!(";start_thread;thread_main;{LEVELS}")),
                "stack `{s}`\n{all}"
            );
        }
        texts.push(s.to_owned());
    }
    texts.sort_unstable();
    texts
}

/// Runs `gpuperf record` on `levels_app` (no eBPF: stacks in process), as
/// `uid` when given.
fn record_levels(
    test: &str,
    tag: &str,
    flags: &[&str],
    uid: Option<u32>,
    mode: &str,
) -> Option<(Output, PathBuf)> {
    let (_, app, cupti) = inproc_programs(tag, flags)?;
    let dir = work_dir(&format!("{test}-{tag}-{}", uid.unwrap_or(0)));
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o777)).unwrap();
    // gpuperf itself runs as the other user when one is given.
    let rec = match uid {
        Some(uid) => Record::from(gpuperf_as(&dir, uid)),
        None => Record::bare(&dir),
    };
    // The tests read the stacks as c++filt spells them.
    let mut cmd = rec
        .flags(["-p", "cpu.txt", "-m", "m.folded", "--full-names"])
        .cupti(&cupti)
        .program(&app, ["10", mode]);
    Some((cmd.output().unwrap(), dir))
}

#[test]
fn record_O2_program_without_frame_pointers__every_stack_reaches_main_in_process() {
    for (tag, flags) in [
        ("O2", &["-O2"][..]),
        ("O2-nofp", &["-O2", "-fomit-frame-pointer"][..]),
    ] {
        let Some((o, dir)) = record_levels("levels", tag, flags, None, "deep") else {
            return;
        };
        let all = show(&o);
        assert_eq!(o.status.code(), Some(0), "{all}");
        let err = text(&o.stderr);
        // 10 launches on each thread, and one under a 300-deep recursion.
        assert!(err.contains("matched 21 of 21 kernels (100.0%)"), "{all}");
        let cpu = CpuTrace::open(&dir.join("cpu.txt")).unwrap();
        let deep: Vec<_> = cpu
            .launches
            .iter()
            .filter(|l| cpu.stacks.text(l.stack).contains("recurse;recurse"))
            .copied()
            .collect();
        assert_eq!(deep.len(), 1, "{all}");
        // The deep one is cut at the depth cap, and counted as truncated.
        assert!(!cpu.stacks.text(deep[0].stack).starts_with("_start"));
        assert!(
            err.contains(
                "taken in the program: 21 API calls with in-process stacks (3 distinct), \
                 20 complete, 1 truncated (1 deeper than the depth cap)"
            ),
            "{all}"
        );
        let mut rest = cpu;
        rest.launches
            .retain(|l| l.correlation_id != deep[0].correlation_id);
        check_levels(&rest, 20, &all);
        let folded = fs::read_to_string(dir.join("m.folded")).unwrap();
        assert!(
            folded.contains(&format!("{LEVELS};[GPU_Kernel]layers(float*)")),
            "{folded}"
        );
    }
}

#[test]
fn record_as_an_unprivileged_user__the_same_complete_stacks_as_root() {
    if !is_root() {
        return;
    }
    let flags = ["-O2", "-fomit-frame-pointer"];
    let Some((root, root_dir)) = record_levels("as-user", "O2-nofp", &flags, None, "deep") else {
        return;
    };
    let (nobody, nobody_dir) =
        record_levels("as-user", "O2-nofp", &flags, Some(NOBODY), "deep").unwrap();
    let all = format!("{}\n{}", show(&root), show(&nobody));
    assert_eq!(nobody.status.code(), Some(0), "{all}");
    assert!(
        text(&nobody.stdout).contains(&format!("uid {NOBODY} ")),
        "{all}"
    );
    assert!(
        !text(&nobody.stderr).contains("eBPF"),
        "no eBPF is tried by default: {all}"
    );
    let stacks = |dir: &Path| {
        let cpu = CpuTrace::open(&dir.join("cpu.txt")).unwrap();
        let mut v: Vec<String> = cpu
            .launches
            .iter()
            .map(|l| cpu.stacks.text(l.stack).to_owned())
            .collect();
        v.sort_unstable();
        v
    };
    let (a, b) = (stacks(&root_dir), stacks(&nobody_dir));
    assert_eq!(a.len(), 21, "{all}");
    // The stack under the 300-deep recursion is cut at the depth cap, which
    // counts the hidden frames inside the simulated CUDA libraries too: how
    // many of its own frames it keeps depends on what the stack scan across
    // their code without unwind info made of the stale words there, which
    // differ from run to run. Its innermost frames are the same; the
    // complete stacks are the same to the last frame.
    let cut = |v: &[String]| -> (Vec<String>, Vec<String>) {
        v.iter()
            .cloned()
            .partition(|s| s.starts_with("[truncated]"))
    };
    let ((a_cut, a_whole), (b_cut, b_whole)) = (cut(&a), cut(&b));
    assert_eq!(a_whole, b_whole, "{all}");
    assert_eq!((a_cut.len(), b_cut.len()), (1, 1), "{all}");
    let inner = |s: &str| -> Vec<String> { s.rsplit(';').take(200).map(str::to_owned).collect() };
    assert_eq!(inner(&a_cut[0]), inner(&b_cut[0]), "{all}");
    assert_eq!(
        fs::metadata(nobody_dir.join("cpu.txt")).unwrap().uid(),
        NOBODY
    );
}

#[test]
fn record_frame_pointer_program__inprocess_and_ebpf_stacks_agree_frame_for_frame() {
    if !bpf_available() {
        return;
    }
    let Some((cupti, app)) = sim_programs() else {
        return;
    };
    let dir = work_dir("agree");
    // Both unwinders in one run: eBPF writes cpu.txt, the injection library
    // (GPUPERF_STACKS=1 wins over --stacks ebpf) keeps its stacks in the trace.
    let o = Record::bare(&dir)
        .flags(EBPF_RAW)
        .cupti(&cupti)
        .program(&app, ["chevron", "10"])
        .env("GPUPERF_STACKS", "1")
        .output()
        .unwrap();
    let all = show(&o);
    assert_eq!(o.status.code(), Some(0), "{all}");
    let ebpf = CpuTrace::open(&dir.join("cpu.txt")).unwrap();
    let trace = fs::read_dir(dir.join("raw"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "gputrace"))
        .unwrap();
    let m = gpuperf(&dir)
        .args(["merge", "--gpu"])
        .arg(&trace)
        .args(["-p", "inproc.txt", "-m", "inproc.folded"])
        .output()
        .unwrap();
    assert!(m.status.success(), "{}", show(&m));
    let inproc = CpuTrace::open(&dir.join("inproc.txt")).unwrap();
    assert_eq!(ebpf.launches.len(), 20, "{all}");
    assert_eq!(inproc.launches.len(), 20, "{}", show(&m));
    let by_corr: std::collections::HashMap<_, &str> = inproc
        .launches
        .iter()
        .map(|l| (l.correlation_id, inproc.stacks.text(l.stack)))
        .collect();
    for l in &ebpf.launches {
        let e = ebpf.stacks.text(l.stack);
        let i = by_corr[&l.correlation_id];
        // The frame-pointer walk covers the program's frames; the eBPF
        // profiler unwinds glibc's start code (no frame pointers) from a copy
        // of the stack, as the in-process unwinder does: whole stacks agree.
        assert!(
            e.contains(";main;run_chevron(int);__device_stub__"),
            "eBPF `{e}`"
        );
        assert!(i.starts_with("_start;"), "in process `{i}`");
        assert_eq!(i, e, "corr {:?}", l.correlation_id);
    }
    // Complete on both sides: nothing is truncated.
    assert!(!text(&o.stderr).contains("truncated CPU stacks"), "{all}");
    assert_eq!(ebpf.truncated, 0);
}

#[test]
fn record_cuda_graph__replayed_kernels_charged_to_the_launch_then_the_node_origin() {
    let Some((o, dir)) = record_levels("graph", "O2", &["-O2"], None, "graph") else {
        return;
    };
    let all = show(&o);
    assert_eq!(o.status.code(), Some(0), "{all}");
    let err = text(&o.stderr);
    // 20 plain launches and the graph's two kernels; the captured launch
    // itself runs nothing, and is counted as captured, not as pending.
    assert!(err.contains("matched 22 of 22 kernels (100.0%)"), "{all}");
    assert!(
        err.contains("  CPU launches captured into CUDA graphs: 1 "),
        "{all}"
    );
    assert!(!err.contains("with no GPU activity"), "{all}");
    let folded = fs::read_to_string(dir.join("m.folded")).unwrap();
    let line = |kernel: &str| {
        folded
            .lines()
            .find(|l| l.contains(&format!("[GPU_Kernel]{kernel}")))
            .unwrap_or_else(|| panic!("no {kernel} in\n{folded}"))
            .to_owned()
    };
    let launch = ";main;graph_site;launcher_graph;replay;cudaGraphLaunch;";
    let captured = line("captured(float*)");
    let (above, below) = captured
        .split_once(&format!("{launch}[graph node captured at];"))
        .unwrap_or_else(|| panic!("`{captured}`"));
    assert!(above.starts_with("_start;"), "`{captured}`");
    assert!(below.starts_with("_start;"), "`{captured}`");
    assert!(
        below.ends_with(
            ";main;graph_site;launcher_graph;capture_step;lib_enter;lib_inner;cudaLaunchKernel;\
             [GPU_Kernel]captured(float*) 4"
        ),
        "`{captured}`"
    );
    let added = line("added(float*)");
    assert!(
        added.contains(&format!("{launch}[graph node added at];_start;")),
        "`{added}`"
    );
    assert!(
        added.ends_with(";main;graph_site;launcher_graph;add_node;[GPU_Kernel]added(float*) 1"),
        "`{added}`"
    );
}

/// The line of the `# call:NAME` marker in py_launch.py.
fn py_line(name: &str) -> usize {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/py_launch.py");
    marker_line(&script, name)
}

#[test]
fn record_python_through_ctypes__python_frames_outermost_first_with_lines() {
    let Some((bin, _, cupti)) = inproc_programs("O2", &["-O2"]) else {
        return;
    };
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/py_launch.py");
    let frame = |f: &str, call: &str| format!("py_launch.{f} (py_launch.py:{})", py_line(call));
    // 3.10's eval loop recurses in C, so native frames may come between.
    let nested = [
        frame("outer", "outer"),
        frame("middle", "middle"),
        frame("inner", "inner"),
    ];
    let positions = |frames: &[&str], want: &[String]| -> Option<Vec<usize>> {
        let mut at = Vec::new();
        let mut from = 0;
        for w in want {
            let i = from + frames[from..].iter().position(|f| f == w)?;
            at.push(i);
            from = i + 1;
        }
        Some(at)
    };
    for (name, py) in pythons() {
        let dir = work_dir(&format!("python-{}", name.replace(' ', "-")));
        let o = Record::bare(&dir)
            .flags(["-p", "cpu.txt", "-m", "m.folded"])
            .cupti(&cupti)
            .program(&py, NO_ARGS)
            .arg(&script)
            .arg(bin.join("liblauncher.so"))
            .output()
            .unwrap();
        let all = format!("{name}: {}", show(&o));
        assert_eq!(o.status.code(), Some(0), "{all}");
        assert!(text(&o.stderr).contains("matched 2 of 2 kernels"), "{all}");
        let cpu = CpuTrace::open(&dir.join("cpu.txt")).unwrap();
        assert_eq!(cpu.launches.len(), 2, "{all}");
        for l in &cpu.launches {
            let s = cpu.stacks.text(l.stack);
            let frames: Vec<&str> = s.split(';').collect();
            // Outermost first, each with its line; then ctypes and the C levels.
            let at = positions(&frames, &nested)
                .unwrap_or_else(|| panic!("{name}: not {nested:?} in order in `{s}`"));
            assert!(
                s.ends_with(";lib_enter;lib_inner;cudaLaunchKernel"),
                "{name}: `{s}`"
            );
            assert!(
                !s.contains("_PyEval_EvalFrameDefault"),
                "{name}: an eval loop frame was not replaced: `{s}`"
            );
            if l.tid == l.pid {
                assert!(s.starts_with("_start;"), "{name}: `{s}`");
                let module = frame("<module>", "module");
                assert!(
                    frames[..at[0]].contains(&module.as_str()),
                    "{name}: `{module}` above outer: `{s}`"
                );
            } else {
                assert!(s.starts_with("clone"), "{name}: `{s}`");
                assert!(
                    s.contains("threading.Thread.run (threading.py:")
                        || s.contains("threading.run (threading.py:"),
                    "{name}: `{s}`"
                );
            }
        }
    }
}

#[test]
fn record_python_with_a_corrupted_frame_link__no_crash_that_stack_native_only_the_next_with_python_frames()
 {
    let Some((bin, _, cupti)) = inproc_programs("O2", &["-O2"]) else {
        return;
    };
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/py_launch.py");
    for (name, py) in pythons() {
        let dir = work_dir(&format!("python-corrupt-{}", name.replace(' ', "-")));
        let o = Record::bare(&dir)
            .flags(["-p", "cpu.txt"])
            .cupti(&cupti)
            .program(&py, NO_ARGS)
            .arg(&script)
            .arg(bin.join("liblauncher.so"))
            .arg("corrupt")
            .output()
            .unwrap();
        let all = format!("{name}: {}", show(&o));
        assert_eq!(o.status.code(), Some(0), "{all}");
        assert_eq!(text(&o.stdout), "launched 2\n", "{all}");
        let err = text(&o.stderr);
        // One bad chain costs its own stack's Python frames, not the process's.
        assert!(!err.contains("Python frames turned off"), "{all}");
        assert!(err.contains("matched 2 of 2 kernels"), "{all}");
        let cpu = CpuTrace::open(&dir.join("cpu.txt")).unwrap();
        let mut with_python = Vec::new();
        for l in &cpu.launches {
            let s = cpu.stacks.text(l.stack);
            assert!(
                s.starts_with("_start;") && s.ends_with(";lib_inner;cudaLaunchKernel"),
                "{name}: native stack still complete: `{s}`"
            );
            with_python.push(s.contains("py_launch.py:"));
        }
        // The launch under the broken link keeps its native frames only; the
        // next one, from the same function, has its Python frames again.
        assert_eq!(with_python, [false, true], "{all}");
    }
}

#[test]
fn record_sigint_to_the_process_group__a_program_without_a_handler_dies_of_it_with_every_launch_recorded()
 {
    use std::os::unix::process::CommandExt as _;
    let Some((cupti, app)) = sim_programs() else {
        return;
    };
    let dir = work_dir("sigint-no-handler");
    let mut child = Record::new(&dir)
        .flags(["--stacks", "inject", "--raw-dir", "raw"])
        .cupti(&cupti)
        .program(&app, ["until-signal"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // A group of its own, as a shell gives a foreground job: the signal
        // below reaches gpuperf and the program, as a Ctrl-C at a terminal does.
        .process_group(0)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut printed = 0u64;
    for line in lines.by_ref() {
        printed = line.unwrap().parse().unwrap();
        if printed == 300 {
            break;
        }
    }
    assert_eq!(printed, 300);
    // SAFETY: kill has no memory preconditions; the group is our live child's.
    assert_eq!(unsafe { libc::kill(-(child.id() as i32), libc::SIGINT) }, 0);
    // The program's own count of the launches that returned before it died.
    for line in lines {
        let Ok(line) = line else { break };
        printed = line.parse().unwrap_or(printed);
    }
    let o = child.wait_with_output().unwrap();
    let err = text(&o.stderr);
    // Killed by the signal, and reported so, as without gpuperf.
    assert_eq!(o.status.code(), Some(130), "{err}");
    assert!(err.contains("was killed by signal 2"), "{err}");
    let rec = common::Recording::open(&dir.join("raw"));
    let launches = rec
        .apis
        .iter()
        .filter(|(_, name)| name.contains("LaunchKernel"))
        .count() as u64;
    let kernels = rec.kernels().len() as u64;
    assert!(
        launches >= printed,
        "{launches} launches recorded, {printed} printed\n{err}"
    );
    // Each recorded launch has its GPU record: CUPTI's buffers were flushed.
    assert_eq!(kernels, launches, "{err}");
}

/// A program that ends with `_exit` runs no exit handler, so the injection
/// library's exit flush never runs: the recording is reported as not closed
/// (what came after the last periodic flush is missing), and the program's exit
/// code and output are its own. The same launches ending with a return from
/// `main` are closed, and not reported.
#[test]
fn record_program_ending_with__exit__reported_not_closed_with_its_exit_code() {
    let Some((cupti, app)) = sim_programs() else {
        return;
    };
    for (mode, closed) in [("exit-early", false), ("chevron", true)] {
        let dir = work_dir(&format!("unclosed-{mode}"));
        let flags = ["--stacks", "inject", "--raw-dir", "raw"];
        let o = Record::new(&dir)
            .flags(flags)
            .cupti(&cupti)
            .program(&app, [mode, "5", "3"])
            .output()
            .unwrap();
        let (all, err) = (show(&o), text(&o.stderr));
        assert_eq!(o.status.code(), Some(3), "{all}");
        let reported = err
            .lines()
            .filter(|l| l.contains("not closed:") && l.contains("_exit"))
            .count();
        assert_eq!(reported, usize::from(!closed), "{mode}: {all}");
        if !closed {
            assert!(text(&o.stdout).contains("synced 10"), "{all}");
        }
    }
}

/// `--driver` on a machine without GPU driver events (this one: no kprobes,
/// no DRM scheduler, no NVIDIA driver): one line says what is missing, and
/// everything else — exit code, the program's output, the merged stacks, the
/// raw files — is what the same recording without `--driver` gives, with eBPF
/// stacks, with stacks taken in the program and with `--gpu-only`.
#[test]
fn record_driver_without_driver_events__one_line_and_the_recording_unchanged() {
    if !bpf_available() {
        return;
    }
    let kallsyms = fs::read_to_string("/proc/kallsyms").unwrap();
    let (present, absent) =
        gpuperf_profiler::driver::available(&kallsyms, &gpuperf_profiler::driver::Source::ALL);
    if !present.is_empty() {
        gpuperf_test_support::require::skipped(format_args!(
            "this machine has GPU driver events: {present:?}"
        ));
        return;
    }
    let Some((cupti, app)) = sim_programs() else {
        return;
    };
    for (tag, flags) in [
        ("ebpf", &["--stacks", "ebpf"][..]),
        ("inject", &["--stacks", "inject"][..]),
        ("gpu-only", &["--gpu-only"][..]),
    ] {
        let mut runs = Vec::new();
        for driver in [false, true] {
            let dir = work_dir(&format!("driver-absent-{tag}-{driver}"));
            let mut args = flags.to_vec();
            args.extend(["-m", "merged.folded", "--raw-dir", "raw"]);
            if driver {
                args.push("--driver");
            }
            let o = Record::bare(&dir)
                .flags(&args)
                .cupti(&cupti)
                .program(&app, ["chevron", "3"])
                .output()
                .unwrap();
            let all = show(&o);
            assert_eq!(o.status.code(), Some(0), "{tag}: {all}");
            let err = text(&o.stderr);
            let lines: Vec<&str> = err.lines().filter(|l| l.contains("--driver")).collect();
            if driver {
                assert_eq!(lines.len(), 1, "{tag}: {all}");
                assert!(
                    lines[0].starts_with(
                        "gpuperf record: --driver: no GPU driver events on this machine, skipped: "
                    ),
                    "{tag}: {all}"
                );
                for (_, why) in &absent {
                    assert!(lines[0].contains(why.as_str()), "{tag}: {all}");
                }
            } else {
                assert!(lines.is_empty(), "{tag}: {all}");
            }
            let mut raw: Vec<String> = fs::read_dir(dir.join("raw"))
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .map(|n| {
                    // The trace files are named by the target's pid.
                    n.split('-').next().unwrap_or_default().to_owned() + "…"
                })
                .collect();
            raw.sort();
            let folded = fs::read_to_string(dir.join("merged.folded")).unwrap();
            // The stacks, not their weights: GPU time is measured, and varies.
            let mut stacks: Vec<String> = folded
                .lines()
                .map(|l| l.rsplit_once(' ').unwrap().0.to_owned())
                .collect();
            stacks.sort();
            // The program prints its pid first.
            let out: Vec<String> = text(&o.stdout)
                .lines()
                .map(|l| l.split_whitespace().skip(2).collect::<Vec<_>>().join(" "))
                .collect();
            runs.push((out, raw, stacks));
        }
        assert_eq!(runs[0], runs[1], "{tag}: with and without --driver");
        assert!(!runs[1].2.is_empty(), "{tag}: no stacks merged");
    }
}
