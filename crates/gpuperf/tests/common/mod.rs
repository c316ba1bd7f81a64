//! Helpers shared by the end-to-end tests: privileges, NVIDIA's wheels, the
//! simulated CUDA runtime (`sim/`) and the programs built on it, running gpuperf,
//! and reading what it recorded.
#![allow(dead_code, unused_imports)]

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::io::BufReader;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;

use gpuperf_merge::model::{self, Activity, ActivityKind, ApiCall, StringTable};
use gpuperf_merge::read::cpu::CpuTrace;
use gpuperf_test_support::cc::Gcc;
pub use gpuperf_test_support::cuda::{cuda13, nvcc, sim};
use gpuperf_test_support::process::{as_user, run_ok};
pub use gpuperf_test_support::process::{show, text};
pub use gpuperf_test_support::require::is_root;
pub use gpuperf_test_support::scratch::{fresh_dir as work_dir, shared_dir};

/// The unprivileged user the tests switch to.
pub const NOBODY: u32 = 65534;

/// Whether eBPF can be loaded; without it a test skips, unless
/// `GPUPERF_REQUIRE_BPF=1` (CI) makes that a failure.
#[track_caller]
pub fn bpf_available() -> bool {
    gpuperf_test_support::require::bpf(gpuperf_profiler::preflight::check())
}

/// The gpuperf binary under test, copied where another user can run it.
pub fn gpuperf_for_anyone() -> PathBuf {
    gpuperf_test_support::scratch::copy_for_anyone(Path::new(env!("CARGO_BIN_EXE_gpuperf")))
}

/// The gpuperf binary under test, with no input, no sudo variables and no
/// injection inherited: every test's gpuperf command starts here.
pub fn gpuperf_cmd() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_gpuperf"));
    not_inherited(&mut c);
    c
}

/// No input, and none of the sudo or injection variables the test runner may have.
fn not_inherited(c: &mut Command) {
    c.stdin(Stdio::null());
    for v in ["SUDO_UID", "SUDO_GID", "SUDO_USER", "CUDA_INJECTION64_PATH"] {
        c.env_remove(v);
    }
}

/// [`gpuperf_cmd`] run in `dir`.
pub fn gpuperf(dir: &Path) -> Command {
    let mut c = gpuperf_cmd();
    c.current_dir(dir);
    c
}

/// No arguments after the program, for [`Record::program`].
pub const NO_ARGS: [&str; 0] = [];

/// One `gpuperf record` run, as every test builds it: who runs gpuperf, its
/// flags, the CUPTI to use, then `-- PROGRAM ARGS`.
///
/// ```ignore
/// let o = Record::new(&dir).flags(["--raw-dir", "raw"]).cupti(&cupti).program(&app, ["chevron", "3"]).output();
/// ```
pub struct Record {
    cmd: Command,
}

impl From<Command> for Record {
    /// Record with `cmd` (a [`gpuperf`] or [`gpuperf_as`] command, perhaps
    /// with its own environment); the flags follow what it already has.
    fn from(cmd: Command) -> Self {
        Self { cmd }
    }
}

impl Record {
    /// `gpuperf record` in `dir`, run by the test's user.
    pub fn new(dir: &Path) -> Self {
        let mut cmd = gpuperf(dir);
        cmd.arg("record");
        Self { cmd }
    }

    /// `gpuperf record` in `dir` under `timeout -k 5 SECS`, for a run that
    /// could hang: a hang ends with exit code 124 or a signal.
    pub fn time_limited(dir: &Path, secs: u32) -> Self {
        let mut cmd = Command::new("timeout");
        cmd.args(["-k", "5", &secs.to_string()])
            .arg(env!("CARGO_BIN_EXE_gpuperf"))
            .arg("record")
            .current_dir(dir);
        not_inherited(&mut cmd);
        Self { cmd }
    }

    /// `gpuperf` in `dir` with no command word (record is the default); the
    /// flags may start with one.
    pub fn bare(dir: &Path) -> Self {
        Self { cmd: gpuperf(dir) }
    }

    /// As `sudo` run by uid 65534 would ([`as_sudo_from_nobody`]).
    pub fn sudo_from_nobody(mut self) -> Self {
        as_sudo_from_nobody(&mut self.cmd);
        self
    }

    /// `gpuperf record` in `dir`, gpuperf itself run as `uid` ([`gpuperf_as`]).
    pub fn as_user(dir: &Path, uid: u32) -> Self {
        let mut cmd = gpuperf_as(dir, uid);
        cmd.arg("record");
        Self { cmd }
    }

    /// Adds gpuperf's own flags.
    pub fn flags<I, S>(mut self, flags: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        self.cmd.args(flags);
        self
    }

    /// `--cupti CUPTI`: the CUPTI library the injection library loads.
    pub fn cupti(mut self, cupti: &Path) -> Self {
        self.cmd.arg("--cupti").arg(cupti);
        self
    }

    /// Sets a variable in gpuperf's environment (and so the program's).
    pub fn env(mut self, k: impl AsRef<std::ffi::OsStr>, v: impl AsRef<std::ffi::OsStr>) -> Self {
        self.cmd.env(k, v);
        self
    }

    /// Removes a variable from gpuperf's environment (and so the program's).
    pub fn env_remove(mut self, k: impl AsRef<std::ffi::OsStr>) -> Self {
        self.cmd.env_remove(k);
        self
    }

    /// Ends the command line with `-- PROGRAM ARGS`: the command to run.
    pub fn program<I, S>(mut self, program: impl AsRef<std::ffi::OsStr>, args: I) -> Command
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        self.cmd.arg("--").arg(program).args(args);
        self.cmd
    }
}

/// `gpuperf` itself run as `uid`, in `dir` (which that user must be able to
/// write): from a copy it can read, as target/ may sit in a checkout that
/// others cannot enter, and with `dir` as its scratch space, as the caller's
/// TMPDIR may be private.
pub fn gpuperf_as(dir: &Path, uid: u32) -> Command {
    let mut c = Command::new(gpuperf_for_anyone());
    c.current_dir(dir).env("TMPDIR", dir);
    not_inherited(&mut c);
    as_user(&mut c, uid);
    c
}

/// As `sudo` run by uid 65534 would: gpuperf stays root, the target drops to it.
pub fn as_sudo_from_nobody(c: &mut Command) -> &mut Command {
    c.env("SUDO_UID", NOBODY.to_string())
        .env("SUDO_GID", NOBODY.to_string())
        .env("SUDO_USER", "nobody")
}

// ------------------------------------------------------------------ the simulation

fn repo() -> PathBuf {
    gpuperf_test_support::repo()
}

/// `sim/tests/sim_app.cu`, built by nvcc against the simulated runtime.
pub fn sim_app(cuda: &Path, nvcc: &Path) -> PathBuf {
    static BUILT: Mutex<Option<PathBuf>> = Mutex::new(None);
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(p) = &*built {
        return p.clone();
    }
    let lib = sim(cuda);
    let exe = shared_dir("bin").join("sim_app");
    run_ok(
        Command::new(nvcc)
            .args(["-O2", "-g", "-arch=sm_90", "-cudart", "shared"])
            .arg(format!("-L{}", lib.display()))
            .arg(format!("-L{}", cuda.join("lib").display()))
            .args([
                "-Xcompiler",
                "-fno-omit-frame-pointer",
                "-Xlinker",
                "-rpath",
                "-Xlinker",
            ])
            .arg(&lib)
            .arg("-o")
            .arg(&exe)
            .arg(repo().join("sim/tests/sim_app.cu")),
        "nvcc sim_app.cu",
    );
    *built = Some(exe.clone());
    exe
}

/// A C program from `sim/tests`, built by gcc against the simulated libraries.
pub fn sim_c_program(cuda: &Path, name: &str, libs: &[&str]) -> PathBuf {
    sim_c_program_as(cuda, name, name, &[], libs)
}

/// `sim/tests/{source}.c` built as `bin/{out}`, with `flags` before the source.
pub fn sim_c_program_as(
    cuda: &Path,
    source: &str,
    out: &str,
    flags: &[&std::ffi::OsStr],
    libs: &[&str],
) -> PathBuf {
    let lib = sim(cuda);
    Gcc::new(shared_dir("bin").join(out))
        .args(["-O1", "-g", "-fno-omit-frame-pointer", "-Wall", "-Werror"])
        .arg(format!("-I{}", cuda.join("include").display()))
        .args(flags)
        .arg(repo().join(format!("sim/tests/{source}.c")))
        .lib_dir(&lib)
        .args(libs.iter().map(|l| format!("-l{l}")))
        .args(["-ldl", "-lpthread"])
        .build_once()
}

/// The directory holding NVTX v3's `nvtx3/` headers: in the CUDA wheels'
/// include directory, or in the nvidia-nvtx wheel of Debian's Python (PyTorch's).
pub fn nvtx_include(cuda: &Path) -> Option<PathBuf> {
    let mut dirs = vec![cuda.join("include")];
    if let Ok(o) = Command::new("/usr/bin/python3.11")
        .args([
            "-c",
            "import sysconfig; print(sysconfig.get_paths()['purelib'])",
        ])
        .output()
    {
        dirs.push(PathBuf::from(text(&o.stdout).trim()).join("nvidia/cu13/include"));
    }
    let found = dirs
        .into_iter()
        .find(|d| d.join("nvtx3/nvToolsExt.h").is_file());
    if found.is_none() {
        gpuperf_test_support::require::Need::CudaWheels
            .missing("no NVTX v3 headers (pip install nvidia-nvtx)");
    }
    found
}

/// The cudarc sample's PTX (nvcc output), for driver-API programs.
pub fn sample_ptx() -> PathBuf {
    repo().join("samples/cudarc_graph/kernels.ptx")
}

// ------------------------------------------------------------------ recordings

/// What one `gpuperf record --raw-dir` wrote: the GPU records, with names
/// resolved, and the CPU trace.
pub struct Recording {
    pub activities: Vec<Activity>,
    pub apis: Vec<(ApiCall, String)>,
    pub notes: Vec<String>,
    pub pc_samples: Vec<model::PcSample>,
    /// The recorders' `PC_LAUNCHES` records.
    pub pc_launches: Vec<model::ProcessPcLaunches>,
    pub strings: StringTable,
    pub cpu: Option<CpuTrace>,
}

impl Recording {
    pub fn open(raw: &Path) -> Self {
        let mut strings = StringTable::new();
        let mut records = Vec::new();
        let mut files: Vec<PathBuf> = fs::read_dir(raw)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "gputrace"))
            .collect();
        files.sort();
        for f in &files {
            let file = BufReader::new(fs::File::open(f).unwrap());
            gpuperf_merge::read::gputrace::read(file, f, &mut strings, &mut |r, _| {
                records.push(r.clone())
            })
            .unwrap();
        }
        let mut r = Self {
            activities: Vec::new(),
            apis: Vec::new(),
            notes: Vec::new(),
            pc_samples: Vec::new(),
            pc_launches: Vec::new(),
            strings,
            cpu: CpuTrace::open(&raw.join("cpu.txt")).ok(),
        };
        for rec in records {
            match rec {
                model::Record::Activity(a) => r.activities.push(a),
                model::Record::Api(a) => {
                    let name = r.strings.get(a.name).to_owned();
                    r.apis.push((a, name));
                }
                model::Record::Note(n) => r.notes.push(n.text),
                model::Record::PcSample(p) => r.pc_samples.push(p),
                model::Record::PcLaunches(p) => r.pc_launches.push(p),
                _ => {}
            }
        }
        r
    }

    /// A short label: the kernel name, `Memcpy HtoD 8192`, `Memset 4096`, `Sync`.
    pub fn label(&self, a: &Activity) -> String {
        match &a.kind {
            ActivityKind::Kernel { name, .. } => self.strings.get(*name).to_owned(),
            ActivityKind::Memcpy { kind, bytes, .. } => format!("Memcpy {} {bytes}", kind.name()),
            ActivityKind::Memset { bytes, .. } => format!("Memset {bytes}"),
            ActivityKind::Sync { .. } => "Sync".to_owned(),
            other => format!("{other:?}"),
        }
    }

    /// The CPU stack of each (pid, correlation id), from the frame named `main`
    /// or `thread_body(void*)` on.
    pub fn stacks(&self) -> HashMap<(u32, u32), String> {
        let cpu = self.cpu.as_ref().expect("a CPU trace");
        cpu.launches
            .iter()
            .map(|l| {
                let frames: Vec<&str> = cpu.stacks.text(l.stack).split(';').collect();
                let from = frames
                    .iter()
                    .position(|f| *f == "main" || *f == "thread_body(void*)")
                    .unwrap_or(0);
                (
                    (l.pid, l.correlation_id.map_or(0, |c| c.get())),
                    frames[from..].join(";"),
                )
            })
            .collect()
    }

    /// GPU work (not syncs) counted by (label, CPU stack); work without a stack
    /// is under "(none)".
    pub fn work_by_stack(&self) -> BTreeMap<(String, String), usize> {
        let stacks = self.stacks();
        let mut m = BTreeMap::new();
        for a in &self.activities {
            if matches!(a.kind, ActivityKind::Sync { .. }) {
                continue;
            }
            let stack = stacks
                .get(&(a.pid, a.correlation_id))
                .cloned()
                .unwrap_or_else(|| "(none)".into());
            *m.entry((self.label(a), stack)).or_default() += 1;
        }
        m
    }

    /// Kernels only.
    pub fn kernels(&self) -> Vec<&Activity> {
        self.activities
            .iter()
            .filter(|a| matches!(a.kind, ActivityKind::Kernel { .. }))
            .collect()
    }

    /// The API call of every correlation id, by (pid, id).
    pub fn api_by_corr(&self) -> HashMap<(u32, u32), &(ApiCall, String)> {
        self.apis
            .iter()
            .map(|x| ((x.0.pid, x.0.correlation_id), x))
            .collect()
    }

    /// Checks what holds for every recording on the simulation: it says it is
    /// simulated; GPU work ends after it starts, starts after its API call did,
    /// and never overlaps other work of its stream.
    pub fn check_invariants(&self) {
        // Besides the simulation's, only PC sampling's notes (how it sampled).
        assert!(
            !self.notes.is_empty()
                && self.notes.iter().all(|n| {
                    n.starts_with("simulated GPU")
                        || n.starts_with(model::PC_SERIALIZED_NOTE)
                        || n.starts_with(model::PC_LAUNCHES_NOTE)
                        || n.starts_with(model::PC_BUDGET_NOTE)
                }),
            "notes: {:?}",
            self.notes
        );
        let apis = self.api_by_corr();
        // (pid, device, stream): `None` for an unknown device or no stream.
        type Place = (u32, Option<u32>, Option<u32>);
        let mut by_stream: BTreeMap<Place, Vec<(u64, u64)>> = BTreeMap::new();
        for a in &self.activities {
            assert!(a.end_ns >= a.start_ns, "{a:?}");
            if matches!(a.kind, ActivityKind::Sync { .. }) {
                continue;
            }
            assert!(a.end_ns > a.start_ns, "no duration: {a:?}");
            let api = apis.get(&(a.pid, a.correlation_id)).expect("an API call");
            assert!(
                a.start_ns > api.0.start_ns,
                "starts before its call: {a:?} {api:?}"
            );
            by_stream
                .entry((a.pid, a.device, a.stream))
                .or_default()
                .push((a.start_ns, a.end_ns));
        }
        for (k, mut v) in by_stream {
            v.sort_unstable();
            for w in v.windows(2) {
                assert!(w[1].0 >= w[0].1, "overlap on stream {k:?}: {w:?}");
            }
        }
    }
}
