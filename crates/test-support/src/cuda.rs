//! NVIDIA's CUDA wheels from PyPI (real libcupti, libcudart, headers and nvcc;
//! no GPU needed), the simulated CUDA runtime built against their headers, the
//! injection library and the C programs that load them.
//!
//! A test that needs the wheels gets `None` when they are missing and returns;
//! see [`Need::CudaWheels`].

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use crate::cc::Gcc;
use crate::process::run_ok;
use crate::require::Need;
use crate::test_data;

/// The simulated CUDA runtime (`sim/build.sh`), built once per test process
/// into a directory every user can read: `libcuda.so.1`, `libcudart.so.13`,
/// `libcupti.so.13` and the rest `sim/build.sh` makes.
pub fn sim(cuda: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt as _;
    static BUILT: Mutex<Option<PathBuf>> = Mutex::new(None);
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(d) = &*built {
        return d.clone();
    }
    let dir = crate::scratch::shared_dir("sim");
    run_ok(
        Command::new("bash")
            .arg(crate::repo().join("sim/build.sh"))
            .arg(&dir)
            .env("CUDA_INCLUDE", cuda.join("include")),
        "sim/build.sh",
    );
    for f in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
        let _ = std::fs::set_permissions(f.path(), std::fs::Permissions::from_mode(0o755));
    }
    *built = Some(dir.clone());
    dir
}

/// Python's `site-packages` (sysconfig's `purelib`), where pip puts the wheels.
pub fn site_packages() -> Option<PathBuf> {
    let o = Command::new("python3")
        .args([
            "-c",
            "import sysconfig; print(sysconfig.get_paths()['purelib'])",
        ])
        .output()
        .ok()
        .filter(|o| o.status.success())?;
    Some(PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))
}

/// `site-packages/nvidia/cu13` of the CUDA 13 wheels (`lib/libcudart.so.13`,
/// the CUPTI headers), or `None` after [`Need::missing`].
#[track_caller]
pub fn cuda13() -> Option<PathBuf> {
    let dir = site_packages().map(|s| s.join("nvidia/cu13"));
    if let Some(dir) = dir
        && dir.join("lib/libcudart.so.13").is_file()
        && dir.join("include/cupti_callbacks.h").is_file()
    {
        return Some(dir);
    }
    Need::CudaWheels.missing(
        "NVIDIA CUDA wheels missing: pip install nvidia-cuda-cupti==13.0.85 nvidia-cuda-runtime==13.0.96",
    );
    None
}

/// The wheels' `nvcc` in `cuda` (from [`cuda13`]), or `None` after
/// [`Need::missing`].
#[track_caller]
pub fn nvcc(cuda: &Path) -> Option<PathBuf> {
    let nvcc = cuda.join("bin/nvcc");
    if nvcc.is_file() && cuda.join("include/cuda_runtime.h").is_file() {
        return Some(nvcc);
    }
    Need::CudaWheels.missing(
        "nvcc missing: pip install nvidia-cuda-nvcc==13.0.88 nvidia-nvvm==13.0.88 nvidia-cuda-cccl==13.0.85 nvidia-cuda-crt==13.0.88",
    );
    None
}

/// Header and library directories of the real libcupti 13 and 12.9
/// (`nvidia-cuda-cupti`, `nvidia-cuda-cupti-cu12`), plus the headers CUPTI's
/// headers include.
#[derive(Clone, Debug)]
pub struct Cupti {
    /// CUDA 13 headers, CUPTI's and `crt/`.
    pub include13: PathBuf,
    /// Holds `libcupti.so.13`.
    pub lib13: PathBuf,
    /// CUPTI 12.9's headers and the CUDA 12 runtime's.
    pub include12: Vec<PathBuf>,
    /// Holds `libcupti.so.12`.
    pub lib12: PathBuf,
}

impl Cupti {
    /// Finds both versions, or `None` after [`Need::missing`].
    #[track_caller]
    pub fn find() -> Option<Cupti> {
        let c = site_packages().map(|s| {
            let nv = s.join("nvidia");
            Cupti {
                include13: nv.join("cu13/include"),
                lib13: nv.join("cu13/lib"),
                include12: vec![
                    nv.join("cuda_cupti/include"),
                    nv.join("cuda_runtime/include"),
                ],
                lib12: nv.join("cuda_cupti/lib"),
            }
        });
        let complete = c.as_ref().is_some_and(|c| {
            c.include13.join("cupti_activity.h").is_file()
                && c.include13.join("crt/host_defines.h").is_file()
                && c.lib13.join("libcupti.so.13").is_file()
                && c.include12[0].join("cupti_activity.h").is_file()
                && c.include12[1].join("cuda.h").is_file()
                && c.lib12.join("libcupti.so.12").is_file()
        });
        if complete {
            return c;
        }
        Need::CudaWheels.missing(
            "NVIDIA CUDA wheels missing: pip install nvidia-cuda-cupti==13.0.85 \
             nvidia-cuda-runtime==13.0.96 nvidia-cuda-crt==13.0.88 \
             nvidia-cuda-cupti-cu12==12.9.79 nvidia-cuda-runtime-cu12==12.9.79",
        );
        None
    }

    /// Include flags for the CUPTI 13 headers.
    pub fn includes13(&self) -> Vec<String> {
        vec![format!("-I{}", self.include13.display())]
    }

    /// Include flags for the CUPTI 12.9 headers. `crt/` only exists in the
    /// CUDA 13 wheel, so it is searched last.
    pub fn includes12(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .include12
            .iter()
            .map(|p| format!("-I{}", p.display()))
            .collect();
        v.push(format!("-idirafter{}", self.include13.display()));
        v
    }
}

/// The C host program that loads the injection library as the CUDA driver
/// does (the inject crate's `tests/data/host.c`; it exports
/// `cuDriverGetVersion`), built into `out` once per process; `flags` come last.
pub fn host(out: &Path, flags: &[&str]) -> PathBuf {
    Gcc::new(out)
        .args(["-Wall", "-Werror", "-O1"])
        .arg(test_data("inject", "host.c"))
        .args(["-ldl", "-lpthread", "-rdynamic"])
        .args(flags)
        .build_once()
}

/// The C host program that runs on the simulated CUDA runtime in `sim` (from
/// [`sim`]) and has the simulated driver load the injection library (the inject
/// crate's `tests/data/sim_host.c`), built with the CUDA headers in `include`
/// into `out` once per process, its functions exported.
pub fn sim_host(sim: &Path, include: &Path, out: &Path) -> PathBuf {
    Gcc::new(out)
        .args(["-Wall", "-Werror", "-O1"])
        .arg(test_data("inject", "sim_host.c"))
        .arg(format!("-I{}", include.display()))
        .lib_dir(sim)
        // -rdynamic: the simulated CUPTI's test hooks find its functions.
        .args(["-lcudart", "-ldl", "-rdynamic"])
        .build_once()
}

/// A C program (the profiler crate's `tests/data/real_cudart.c`) linked against
/// the `libcudart.so.13` in `lib_dir`, which it finds there at run time; built
/// into `out` once per process.
pub fn real_cudart_app(lib_dir: &Path, out: &Path) -> PathBuf {
    Gcc::new(out)
        .args(["-Wall", "-Werror", "-O1", "-g", "-fno-omit-frame-pointer"])
        .arg(test_data("profiler", "real_cudart.c"))
        .lib_dir(lib_dir)
        .arg("-l:libcudart.so.13")
        .build_once()
}

/// The injection library (`libgpuperf_inject.so`) that cargo built for this
/// run of tests or benchmarks, found from the running executable
/// (`target/<profile>/deps/…`); built with cargo when this run did not build
/// it.
pub fn inject_lib() -> PathBuf {
    static BUILT: Mutex<()> = Mutex::new(());
    let _once = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    let exe = std::env::current_exe().expect("the running executable");
    let deps = exe.parent().expect("the executable's directory");
    let profile = deps.parent().expect("the profile directory");
    let name = "libgpuperf_inject.so";
    let lib = [deps.join(name), profile.join(name)]
        .into_iter()
        .find(|p| p.is_file());
    if let Some(lib) = lib {
        return lib;
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    run_ok(
        Command::new(cargo).args(["build", "-p", "gpuperf-inject"]),
        "cargo build -p gpuperf-inject",
    );
    let lib = profile.join(name);
    assert!(lib.is_file(), "`{}` missing", lib.display());
    lib
}
