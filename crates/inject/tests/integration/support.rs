//! Building the C helpers and finding NVIDIA's CUDA wheels.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use gpuperf_merge::gputrace;
use gpuperf_merge::model::{Record, StringTable};

/// Header and library directories of the `nvidia-cuda-cupti` (13) and
/// `nvidia-cuda-cupti-cu12` wheels, plus the headers CUPTI's headers include.
pub struct Wheels {
    pub include13: PathBuf,
    pub lib13: PathBuf,
    pub include12: Vec<PathBuf>,
    pub lib12: PathBuf,
}

/// The wheels, or `None` (the test then skips) unless CI requires them.
pub fn wheels() -> Option<Wheels> {
    let out = Command::new("python3")
        .args([
            "-c",
            "import sysconfig; print(sysconfig.get_paths()['purelib'])",
        ])
        .output()
        .ok();
    let nv = out
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()).join("nvidia"));
    let w = nv.map(|nv| Wheels {
        include13: nv.join("cu13/include"),
        lib13: nv.join("cu13/lib"),
        include12: vec![
            nv.join("cuda_cupti/include"),
            nv.join("cuda_runtime/include"),
        ],
        lib12: nv.join("cuda_cupti/lib"),
    });
    let complete = w.as_ref().is_some_and(|w| {
        w.include13.join("cupti_activity.h").is_file()
            && w.include13.join("crt/host_defines.h").is_file()
            && w.lib13.join("libcupti.so.13").is_file()
            && w.include12[0].join("cupti_activity.h").is_file()
            && w.include12[1].join("cuda.h").is_file()
            && w.lib12.join("libcupti.so.12").is_file()
    });
    if complete {
        return w;
    }
    let msg = "NVIDIA CUDA wheels missing: pip install nvidia-cuda-cupti==13.0.85 \
               nvidia-cuda-runtime==13.0.96 nvidia-cuda-crt==13.0.88 \
               nvidia-cuda-cupti-cu12==12.9.79 nvidia-cuda-runtime-cu12==12.9.79";
    if std::env::var_os("GPUPERF_REQUIRE_CUDA_WHEELS").is_some_and(|v| v == "1") {
        panic!("{msg}");
    }
    eprintln!("skipped: {msg}");
    None
}

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

/// Compiles `src` (in tests/data) with gcc into `out` under the test's temp dir,
/// once per test process.
pub fn gcc(src: &str, out: &str, args: &[&str]) -> PathBuf {
    static BUILT: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("inject");
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join(out);
    std::fs::create_dir_all(out.parent().unwrap()).unwrap();
    // Tests run in parallel; a second build of a file another test is executing
    // would fail with "text file busy".
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if built.contains(&out) {
        return out;
    }
    let o = Command::new("gcc")
        .args(["-Wall", "-Werror", "-O1", "-o"])
        .arg(&out)
        .arg(data(src))
        .args(args)
        .output()
        .expect("gcc runs");
    assert!(
        o.status.success(),
        "gcc {src} failed:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    built.push(out.clone());
    out
}

/// Include flags for the CUPTI 13 headers.
pub fn includes13(w: &Wheels) -> Vec<String> {
    vec![format!("-I{}", w.include13.display())]
}

/// Include flags for the CUPTI 12.9 headers. `crt/` only exists in the CUDA 13
/// wheel, so it is searched last.
pub fn includes12(w: &Wheels) -> Vec<String> {
    let mut v: Vec<String> = w
        .include12
        .iter()
        .map(|p| format!("-I{}", p.display()))
        .collect();
    v.push(format!("-idirafter{}", w.include13.display()));
    v
}

/// The injection cdylib cargo built for this test run.
pub fn inject_lib() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    [
        deps.join("libgpuperf_inject.so"),
        deps.parent().unwrap().join("libgpuperf_inject.so"),
    ]
    .into_iter()
    .find(|p| p.is_file())
    .expect("libgpuperf_inject.so built next to the test binary")
}

/// The host program (tests/data/host.c). It exports `cuDriverGetVersion`.
pub fn host() -> PathBuf {
    gcc("host.c", "host", &["-ldl", "-lpthread", "-rdynamic"])
}

/// The MOCK libcupti built with the CUPTI 13 headers, under the file name `out`,
/// with extra compiler flags (`-D…` switches, a soname).
pub fn mock_lib(w: &Wheels, out: &str, flags: &[&str]) -> PathBuf {
    let mut args = vec!["-shared", "-fPIC", "-lpthread"];
    let incs = includes13(w);
    args.extend(incs.iter().map(String::as_str));
    args.extend_from_slice(flags);
    gcc("mock_cupti.c", out, &args)
}

/// The default MOCK libcupti (CUPTI 13.0).
pub fn mock(w: &Wheels) -> PathBuf {
    mock_lib(w, "libcupti_mock.so", &[])
}

/// Runs the host; `inject` None runs it without the library.
pub fn run_host(inject: Option<&Path>, mode: &str, env: &[(&str, &Path)]) -> Output {
    run_host_with(inject, mode, &[], env, Duration::from_secs(120))
}

/// Runs the host with extra arguments, killing it and failing the test when it
/// does not finish within `limit` (a deadlock must fail, not hang the run).
pub fn run_host_with(
    inject: Option<&Path>,
    mode: &str,
    args: &[&str],
    env: &[(&str, &Path)],
    limit: Duration,
) -> Output {
    let mut c = Command::new(host());
    c.arg(inject.map_or(Path::new("none"), |p| p))
        .arg(mode)
        .args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    c.env_remove("GPUPERF_INJECT_LOG");
    c.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = c.spawn().expect("host runs");
    let pipe = |r: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            if let Some(mut r) = r {
                let _ = r.read_to_end(&mut v);
            }
            v
        })
    };
    let out = pipe(child.stdout.take().map(|p| Box::new(p) as _));
    let err = pipe(child.stderr.take().map(|p| Box::new(p) as _));
    let started = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait for host") {
            break st;
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            let stdout = out.join().unwrap_or_default();
            panic!(
                "host {mode} did not finish within {limit:?} (deadlock?); stdout so far:\n{}",
                String::from_utf8_lossy(&stdout)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output {
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    }
}

/// Every record of every `.gputrace` file in `dir`.
pub fn read_traces(dir: &Path) -> (Vec<Record>, StringTable, usize) {
    let mut strings = StringTable::new();
    let mut records = Vec::new();
    let mut files = 0;
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "gputrace") {
            files += 1;
            let f = std::fs::File::open(&p).unwrap();
            let stats =
                gputrace::read(f, &p, &mut strings, &mut |r, _| records.push(r.clone())).unwrap();
            assert_eq!(stats.truncated_at, None, "{}", p.display());
            assert!(
                stats.diagnostics.is_empty() && stats.unknown_kinds == 0,
                "{}: {stats:?}",
                p.display()
            );
        }
    }
    (records, strings, files)
}

/// The text of the `.log` files in `dir`.
pub fn read_logs(dir: &Path) -> String {
    let mut s = String::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "log") {
            s += &std::fs::read_to_string(p).unwrap();
        }
    }
    s
}
