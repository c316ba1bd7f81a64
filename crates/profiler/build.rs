//! Compiles the BPF program and generates its libbpf-rs skeleton.

use std::env;
use std::path::PathBuf;

use libbpf_cargo::SkeletonBuilder;

const SRC: &str = "src/bpf/launch.bpf.c";

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    // UAPI headers such as <asm/ptrace.h> live in the multiarch directory.
    let multiarch = format!(
        "-I/usr/include/{}-linux-gnu",
        env::var("CARGO_CFG_TARGET_ARCH").unwrap()
    );
    SkeletonBuilder::new()
        .source(SRC)
        .clang_args(["-mcpu=v3", "-Wall", "-Werror", multiarch.as_str()])
        .build_and_generate(out.join("launch.skel.rs"))
        .unwrap_or_else(|e| {
            panic!(
                "building {SRC} failed: {e:#}\n\
                 It needs clang and the kernel UAPI headers: apt-get install clang libelf-dev linux-libc-dev"
            )
        });
    println!("cargo:rerun-if-changed=src/bpf");
}
