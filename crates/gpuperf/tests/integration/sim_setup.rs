//! Setting up the simulated CUDA runtime for a given Python: `sim/build.sh
//! --python PYTHON OUTDIR` takes the headers from that Python's NVIDIA wheels,
//! checks every header it includes before compiling, and names exactly the
//! wheels that are missing (PyTorch's wheels lack nvidia-cuda-crt and
//! nvidia-cuda-cccl) instead of failing with a compiler error.
//!
//! The Pythons here are stand-ins: a script that answers `sysconfig`'s purelib
//! with a directory whose `nvidia/cu13/include` holds some of the real headers
//! (from the CUDA 13 wheels; skips without them unless
//! `GPUPERF_REQUIRE_CUDA_WHEELS=1`).
#![allow(non_snake_case)]

use crate::common;

use std::fs;
use std::os::unix::fs::{PermissionsExt as _, symlink};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{cuda13, show, text, work_dir};

/// A "Python" in `dir` whose purelib holds `nvidia/cu13/include` with the
/// entries of `real` (the wheels' include directory) that `keep` accepts.
fn fake_python(dir: &Path, real: &Path, keep: impl Fn(&str) -> bool) -> PathBuf {
    let include = dir.join("site/nvidia/cu13/include");
    fs::create_dir_all(&include).unwrap();
    for e in fs::read_dir(real).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if keep(&name) {
            symlink(e.path(), include.join(&name)).unwrap();
        }
    }
    let py = dir.join("python");
    fs::write(
        &py,
        format!("#!/bin/sh\necho '{}'\n", dir.join("site").display()),
    )
    .unwrap();
    fs::set_permissions(&py, fs::Permissions::from_mode(0o755)).unwrap();
    py
}

fn build(py: &Path, out: &Path) -> Output {
    Command::new("bash")
        .arg(gpuperf_test_support::repo().join("sim/build.sh"))
        .arg("--python")
        .arg(py)
        .arg(out)
        .env_remove("CUDA_INCLUDE")
        .env_remove("CUBLAS_INCLUDE")
        .output()
        .unwrap()
}

/// The wheels `build.sh` says are missing, from its stderr.
fn named(o: &Output) -> Vec<String> {
    let err = text(&o.stderr);
    let line = err
        .lines()
        .find_map(|l| l.split("they come with the wheels: ").nth(1))
        .unwrap_or_else(|| panic!("no wheels named: {}", show(o)));
    line.split_whitespace().map(str::to_owned).collect()
}

fn assert_refused_before_compiling(o: &Output, out: &Path) {
    assert_eq!(o.status.code(), Some(2), "{}", show(o));
    let err = text(&o.stderr);
    // Named by the script, not found by gcc halfway through.
    assert!(
        !err.contains("fatal error") && !err.contains("No such file"),
        "{err}"
    );
    assert!(!out.join("libcuda.so.1").exists(), "something was built");
}

#[test]
fn sim_build_for_a_python_with_pytorchs_wheels_only__names_crt_and_cccl_and_builds_nothing() {
    let Some(cuda) = cuda13() else { return };
    let dir = work_dir("sim_setup_torch_wheels");
    // PyTorch's wheels: the runtime's and CUPTI's headers (and cuBLAS's, which
    // the CUDA wheels here may lack), not crt/ (nvidia-cuda-crt) nor nv/
    // (nvidia-cuda-cccl).
    let py = fake_python(&dir, &cuda.join("include"), |n| n != "crt" && n != "nv");
    let out = dir.join("out");
    let o = build(&py, &out);
    assert_refused_before_compiling(&o, &out);
    let mut want = vec!["nvidia-cuda-crt==13.0.88", "nvidia-cuda-cccl==13.0.85"];
    if !cuda.join("include/cublas_api.h").exists() {
        want.push("nvidia-cublas");
    }
    assert_eq!(named(&o), want, "{}", show(&o));
    assert!(
        text(&o.stderr).contains(&format!(
            "install them with: {} -m pip install {}",
            py.display(),
            want.join(" ")
        )),
        "{}",
        show(&o)
    );
}

#[test]
fn sim_build_for_a_python_without_wheels__names_every_wheel_once() {
    let Some(cuda) = cuda13() else { return };
    let dir = work_dir("sim_setup_no_wheels");
    let py = fake_python(&dir, &cuda.join("include"), |_| false);
    let out = dir.join("out");
    let o = build(&py, &out);
    assert_refused_before_compiling(&o, &out);
    assert_eq!(
        named(&o),
        [
            "nvidia-cuda-runtime==13.0.96",
            "nvidia-cuda-crt==13.0.88",
            "nvidia-cuda-cccl==13.0.85",
            "nvidia-cuda-cupti==13.0.85",
            "nvidia-cublas",
        ],
        "{}",
        show(&o)
    );
}

#[test]
fn sim_build_unknown_option__usage_and_nothing_built() {
    let dir = work_dir("sim_setup_bad_option");
    let o = Command::new("bash")
        .arg(gpuperf_test_support::repo().join("sim/build.sh"))
        .args(["--pyhton", "python3"])
        .arg(dir.join("out"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", show(&o));
    assert!(
        text(&o.stderr).contains("unknown option --pyhton"),
        "{}",
        show(&o)
    );
    assert!(!dir.join("out").exists());
}
