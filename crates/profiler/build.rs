//! Generates the libbpf-rs skeleton of the BPF program from its committed
//! object, so the build needs no clang; compiles the BPF sources with clang
//! only when they differ from those the object was built from.

use std::env;
use std::path::{Path, PathBuf};

#[path = "src/bpf/object.rs"]
#[allow(dead_code)] // The test uses the rest.
mod object;

use libbpf_cargo::SkeletonBuilder;

fn main() {
    let crate_dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let arch = env::var("CARGO_CFG_TARGET_ARCH").expect("cargo sets it");
    println!("cargo:rerun-if-changed=src/bpf");

    for prog in object::PROGRAMS {
        let committed = object::object_path(&crate_dir, prog, &arch);
        let digest = object::digest(&crate_dir, prog, &arch)
            .unwrap_or_else(|e| panic!("reading the BPF sources in src/bpf: {e}"));
        let current = committed.is_file()
            && object::Stamp::read(&object::stamp_path(&crate_dir, prog, &arch))
                .is_some_and(|s| s.digest == digest);
        let obj = if current {
            committed
        } else {
            compile(&crate_dir, prog, &arch, &out, &committed)
        };
        SkeletonBuilder::new()
            .obj(&obj)
            .reference_obj(true)
            .generate(out.join(format!("{}.skel.rs", prog.name)))
            .unwrap_or_else(|e| panic!("generating the skeleton of {}: {e:#}", obj.display()));
    }
}

/// Compiles the sources into `OUT_DIR`, for sources newer than the committed
/// object or an architecture without one.
fn compile(
    crate_dir: &Path,
    prog: object::Program,
    arch: &str,
    out: &Path,
    committed: &Path,
) -> PathBuf {
    let obj = out.join(format!("{}.bpf.o", prog.name));
    let why = if committed.is_file() {
        format!(
            "{} was built from other BPF sources than those in src/bpf",
            committed.display()
        )
    } else {
        format!("there is no committed BPF object for {arch}")
    };
    if let Err(e) = object::compile(crate_dir, prog, arch, &obj) {
        panic!(
            "{why}, and compiling {} failed; it needs clang and the kernel UAPI headers \
             (Debian: apt-get install clang linux-libc-dev): {e}",
            prog.source
        );
    }
    if committed.is_file() {
        println!(
            "cargo:warning={why}: this build compiled them with clang. \
             Commit the new object with `{}`",
            object::REGENERATE
        );
    }
    obj
}
