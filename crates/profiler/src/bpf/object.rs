//! The committed BPF object and how it is rebuilt: shared by `build.rs` and the
//! `bpf_object` test, and not part of the library.
//!
//! Each program (`launch.bpf.c`, `driver.bpf.c`) is compiled to a CO-RE
//! object that is committed for x86-64 (`launch.bpf.x86_64.o`, …), so building
//! the crate needs no clang. Its stamp
//! file records a SHA-256 digest of the BPF sources and the clang arguments it
//! was built from, and the clang that built it. `build.rs` uses the object
//! while the digest matches, and compiles the sources with clang otherwise.

use std::fmt::Write as _;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;

use libbpf_cargo::SkeletonBuilder;
use sha2::{Digest, Sha256};

/// One BPF program: its source and the headers it includes, relative to the
/// crate.
#[derive(Clone, Copy, Debug)]
pub struct Program {
    /// The name of its skeleton and object files (`launch` → `launch.skel.rs`).
    pub name: &'static str,
    /// The `.bpf.c` file.
    pub source: &'static str,
    /// Every file the object is built from.
    pub inputs: &'static [&'static str],
}

/// The launch-stack probes.
pub const LAUNCH: Program = Program {
    name: "launch",
    source: "src/bpf/launch.bpf.c",
    inputs: &["src/bpf/launch.bpf.c", "src/bpf/launch.h"],
};

/// The GPU driver events.
pub const DRIVER: Program = Program {
    name: "driver",
    source: "src/bpf/driver.bpf.c",
    inputs: &["src/bpf/driver.bpf.c", "src/bpf/driver.h"],
};

/// Every program the crate builds.
pub const PROGRAMS: [Program; 2] = [LAUNCH, DRIVER];

/// Rewrites the committed objects and their stamps from the sources.
pub const REGENERATE: &str =
    "GPUPERF_BLESS=1 cargo test -p gpuperf-profiler --test integration bpf_object";

/// The committed object of `prog` for `arch` (a `CARGO_CFG_TARGET_ARCH` value).
pub fn object_path(crate_dir: &Path, prog: Program, arch: &str) -> PathBuf {
    crate_dir.join(format!("src/bpf/{}.bpf.{arch}.o", prog.name))
}

/// The stamp beside the object.
pub fn stamp_path(crate_dir: &Path, prog: Program, arch: &str) -> PathBuf {
    crate_dir.join(format!("src/bpf/{}.bpf.{arch}.stamp", prog.name))
}

/// Arguments given to clang besides the ones libbpf-cargo adds (`-g -O2
/// -target bpf -D__TARGET_ARCH_…` and libbpf's headers).
pub fn clang_args(arch: &str) -> Vec<String> {
    // UAPI headers such as <asm/ptrace.h> live in the multiarch directory.
    vec![
        "-mcpu=v3".into(),
        "-Wall".into(),
        "-Werror".into(),
        format!("-I/usr/include/{arch}-linux-gnu"),
        // The object's BTF line info names the source file by this directory
        // and the relative path clang is given: the same from every checkout.
        "-fdebug-compilation-dir=.".into(),
    ]
}

/// SHA-256 over the inputs' names and contents and the clang arguments, in hex.
pub fn digest(crate_dir: &Path, prog: Program, arch: &str) -> io::Result<String> {
    let mut h = Sha256::new();
    for &input in prog.inputs {
        let text = fs::read(crate_dir.join(input))?;
        h.update(input.as_bytes());
        h.update((text.len() as u64).to_le_bytes());
        h.update(&text);
    }
    for arg in clang_args(arch) {
        h.update(arg.as_bytes());
        h.update([0]);
    }
    let mut hex = String::with_capacity(64);
    for b in h.finalize() {
        let _ = write!(hex, "{b:02x}");
    }
    Ok(hex)
}

/// What a stamp file says.
#[derive(Debug, PartialEq, Eq)]
pub struct Stamp {
    /// [`digest`] of the sources the object was built from.
    pub digest: String,
    /// The first line of `clang --version` of the clang that built it.
    pub clang: String,
}

impl Stamp {
    /// Reads a stamp; `None` when it is missing or malformed.
    pub fn read(path: &Path) -> Option<Self> {
        let text = fs::read_to_string(path).ok()?;
        let field = |key: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(key)?.strip_prefix(' '))
                .map(str::to_owned)
        };
        Some(Self {
            digest: field("sources-sha256")?,
            clang: field("clang")?,
        })
    }

    /// Writes the stamp.
    pub fn write(&self, path: &Path) -> io::Result<()> {
        fs::write(
            path,
            format!(
                "# The BPF object beside this file was built from these sources by this clang.\n\
                 # Rewritten by `{REGENERATE}`.\n\
                 sources-sha256 {}\nclang {}\n",
                self.digest, self.clang
            ),
        )
    }
}

/// The first line of `clang --version`, if clang runs.
pub fn clang_version() -> Option<String> {
    let out = Command::new("clang").arg("--version").output().ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines().next().map(|l| l.trim().to_owned())
}

/// Compiles the sources with clang into `object`. Runs in the crate's
/// directory, as build scripts and tests do, and names the source relative to
/// it (see [`clang_args`]).
pub fn compile(crate_dir: &Path, prog: Program, arch: &str, object: &Path) -> Result<(), String> {
    let cwd = std::env::current_dir().map_err(|e| e.to_string())?;
    if fs::canonicalize(&cwd).ok() != fs::canonicalize(crate_dir).ok() {
        return Err(format!(
            "compile the BPF object from {}, not {}",
            crate_dir.display(),
            cwd.display()
        ));
    }
    SkeletonBuilder::new()
        .source(prog.source)
        .obj(object)
        .clang_args(clang_args(arch))
        .build()
        .map_err(|e| format!("{e:#}"))
}
