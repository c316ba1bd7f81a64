//! Building the C helpers and running the host program; finding NVIDIA's CUDA
//! wheels is `gpuperf_test_support::cuda`'s.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use gpuperf_merge::gputrace;
use gpuperf_merge::model::{Record, SIMULATED_GPU_NOTE, StringTable};
use gpuperf_test_support::cc::Gcc;
pub use gpuperf_test_support::cuda::{Cupti as Wheels, inject_lib};
use gpuperf_test_support::{cuda, test_data};
use tempfile::TempDir;

/// The real libcupti 13 and 12.9 of the wheels, or `None` (the test then
/// skips) unless CI requires them.
pub fn wheels() -> Option<Wheels> {
    Wheels::find()
}

/// Where the helpers are built: this crate's part of cargo's target tmp.
fn tmp() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("inject")
}

/// Compiles `src` (in tests/data) with gcc into `out` under the test's temp dir,
/// once per test process.
pub fn gcc(src: &str, out: &str, args: &[&str]) -> PathBuf {
    Gcc::new(tmp().join(out))
        .args(["-Wall", "-Werror", "-O1"])
        .arg(test_data("inject", src))
        .args(args)
        .build_once()
}

/// The host program without a driver (tests/data/host.c). It exports
/// `cuDriverGetVersion`.
pub fn host() -> PathBuf {
    cuda::host(&tmp().join("host"), &[])
}

/// The simulated CUDA runtime (`sim/build.sh`, built once) and its host
/// program, or `None` (the test then skips) unless CI requires the wheels.
#[derive(Clone)]
pub struct Sim {
    /// The directory holding `libcupti.so.13` and the rest.
    pub dir: PathBuf,
    /// `tests/data/sim_host.c`, built against it.
    pub host: PathBuf,
    /// The CUDA 13 headers (CUPTI's among them).
    pub include: PathBuf,
    /// Whether runs name the simulated libcupti in `GPUPERF_CUPTI_PATH`
    /// (otherwise gpuperf searches for one).
    pin_cupti: bool,
}

impl Sim {
    /// Builds (once) the simulation and its host program.
    pub fn find() -> Option<Sim> {
        let cuda = cuda::cuda13()?;
        let dir = cuda::sim(&cuda);
        let include = cuda.join("include");
        let host = cuda::sim_host(&dir, &include, &tmp().join("sim_host"));
        Some(Sim {
            dir,
            host,
            include,
            pin_cupti: true,
        })
    }

    /// Runs that leave gpuperf to find a libcupti (`CUDA_HOME`, ...).
    pub fn unpinned(&self) -> Sim {
        Sim {
            pin_cupti: false,
            ..self.clone()
        }
    }

    /// A CUDA install under `root` whose `lib64` holds a copy of the simulated
    /// libcupti under each of `names`; returns `root`.
    pub fn cuda_home(&self, root: &Path, names: &[&str]) -> PathBuf {
        let lib = root.join("lib64");
        std::fs::create_dir_all(&lib).unwrap();
        for n in names {
            std::fs::copy(self.cupti(), lib.join(n)).unwrap();
        }
        root.to_owned()
    }

    /// Compiler flags that build a C program (in tests/data) against the
    /// simulated runtime: its headers, its `libcudart.so.13`, found at run time.
    pub fn cflags(&self) -> Vec<String> {
        vec![
            format!("-I{}", self.include.display()),
            format!("-L{}", self.dir.display()),
            format!("-Wl,-rpath,{}", self.dir.display()),
            "-lcudart".to_owned(),
        ]
    }

    /// The simulated libcupti.
    pub fn cupti(&self) -> PathBuf {
        self.dir.join("libcupti.so.13")
    }

    /// Runs the sim host's `mode` with the injection library (`inject` None:
    /// without it) on the simulated CUPTI, with `env` set too.
    pub fn run_host(&self, inject: Option<&Path>, mode: &str, env: &[(&str, &Path)]) -> Output {
        self.run_host_with(inject, mode, &[], env, Duration::from_secs(120))
    }

    /// [`Sim::run_host`] with extra arguments, killed (and the test failed)
    /// when it does not finish within `limit`.
    pub fn run_host_with(
        &self,
        inject: Option<&Path>,
        mode: &str,
        args: &[&str],
        env: &[(&str, &Path)],
        limit: Duration,
    ) -> Output {
        let mut c = Command::new(&self.host);
        c.arg(inject.map_or(Path::new("none"), |p| p))
            .arg(mode)
            .args(args);
        if self.pin_cupti {
            c.env("GPUPERF_CUPTI_PATH", self.cupti());
        } else {
            c.env_remove("GPUPERF_CUPTI_PATH");
        }
        for (k, v) in env {
            c.env(k, v);
        }
        run_within(c, &format!("sim host {mode}"), limit)
    }

    /// Runs the sim host's `mode` with the injection library, recording into a
    /// fresh directory, with `env` set too. Returns the output and the directory.
    pub fn run(&self, mode: &str, env: &[(&str, &Path)]) -> (Output, TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let mut env = env.to_vec();
        env.push(("GPUPERF_GPU_TRACE", dir.path()));
        (self.run_host(Some(&inject_lib()), mode, &env), dir)
    }
}

/// Runs a host program with (`Some(library)`) and without (`None`) the
/// injection library, with the environment given.
pub type HostRun<'a> = dyn Fn(Option<&Path>, &[(&str, &Path)]) -> Output + 'a;

/// The notes of `records` other than the one every trace made on the
/// simulation carries.
pub fn notes_beside_simulated(records: &[Record]) -> Vec<String> {
    records
        .iter()
        .filter_map(|r| match r {
            Record::Note(n) if !n.text.starts_with(SIMULATED_GPU_NOTE) => Some(n.text.clone()),
            _ => None,
        })
        .collect()
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
    run_within(c, &format!("host {mode}"), limit)
}

/// Runs `c` (`what` in messages), killing it and failing the test when it does
/// not finish within `limit`. The injection library logs to its trace directory.
pub fn run_within(mut c: Command, what: &str, limit: Duration) -> Output {
    c.env_remove("GPUPERF_INJECT_LOG");
    c.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = c.spawn().unwrap_or_else(|e| panic!("{what} runs: {e}"));
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
        if let Some(st) = child.try_wait().expect("wait for the child") {
            break st;
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            let stdout = out.join().unwrap_or_default();
            panic!(
                "{what} did not finish within {limit:?} (deadlock?); stdout so far:\n{}",
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

/// The program's standard output, once it exited with 3 (as the host test
/// programs do without gpuperf); `log`, the library's, shown otherwise.
pub fn stdout_of(out: &Output, log: &str) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(
        out.status.code(),
        Some(3),
        "{stdout}{}\n{log}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The number just before `what` in `text` (a count in the library's log).
pub fn log_count(text: &str, what: &str) -> u64 {
    text.split(what)
        .next()
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count before {what:?}: {text}"))
}
