//! Builds the injection library and embeds it, so that an installed `gpuperf`
//! (`cargo install --path crates/gpuperf`) is one self-contained file.
//!
//! Cargo cannot depend on another crate's cdylib, so this runs a nested
//! `cargo build -p gpuperf-inject --release` in a target directory of its own,
//! shared by every profile so that `build`, `test`, `clippy` and `doc` build it
//! once. Without the workspace around (a packaged crate), nothing is embedded
//! and `gpuperf` looks for the library next to itself at run time.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

const LIB: &str = "libgpuperf_inject.so";

fn main() {
    println!("cargo:rustc-check-cfg=cfg(gpuperf_embedded_inject)");
    println!("cargo:rerun-if-env-changed=GPUPERF_NO_EMBED");
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let root = manifest.join("../..");
    let inject = manifest.join("../inject");
    if !inject.join("Cargo.toml").is_file() || env::var_os("GPUPERF_NO_EMBED").is_some() {
        println!(
            "cargo:warning=gpuperf-inject is not embedded; install {LIB} next to the gpuperf binary"
        );
        return;
    }
    // Before the first build, the injection library's own crate; after it,
    // every source file the nested build read (below).
    for p in ["../inject", "../../Cargo.toml", "../../Cargo.lock"] {
        println!("cargo:rerun-if-changed={p}");
    }

    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let target_dir = shared_target_dir(&out).join("gpuperf-embedded-inject");
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(&root)
        .args([
            "build",
            "--release",
            "--quiet",
            "-p",
            "gpuperf-inject",
            "--lib",
        ])
        .arg("--target-dir")
        .arg(&target_dir)
        // A clippy or coverage wrapper of the outer build is not wanted here.
        .env_remove("RUSTC_WRAPPER")
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .env_remove("CARGO_TARGET_DIR");
    if Path::new(&root).join("Cargo.lock").is_file() {
        cmd.arg("--locked");
    }
    let status = cmd
        .status()
        .unwrap_or_else(|e| panic!("failed to run cargo to build gpuperf-inject: {e}"));
    assert!(
        status.success(),
        "building gpuperf-inject for embedding failed ({status}); set GPUPERF_NO_EMBED=1 to skip"
    );
    watch_sources(&target_dir.join("release/libgpuperf_inject.d"), &root);
    let built = target_dir.join("release").join(LIB);
    let embedded = out.join(LIB);
    std::fs::copy(&built, &embedded)
        .unwrap_or_else(|e| panic!("failed to copy `{}`: {e}", built.display()));
    println!("cargo:rustc-cfg=gpuperf_embedded_inject");
}

/// Reruns this script when a file of the workspace that the nested build read
/// changes (its sources and those of every workspace crate it links, as the
/// dep-info file `d` lists them), or the manifest of one of those crates.
fn watch_sources(d: &Path, root: &Path) {
    let text = std::fs::read_to_string(d)
        .unwrap_or_else(|e| panic!("failed to read `{}`: {e}", d.display()));
    let root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    let crates = root.join("crates");
    let mut manifests = std::collections::BTreeSet::new();
    for line in text.lines() {
        let Some((_, deps)) = line.split_once(": ") else {
            continue;
        };
        // Make escapes a space in a path as `\ `.
        let deps = deps.replace("\\ ", "\0");
        for dep in deps.split(' ').filter(|p| !p.is_empty()) {
            let path = PathBuf::from(dep.replace('\0', " "));
            if let Ok(rel) = path.strip_prefix(&crates) {
                if let Some(name) = rel.components().next() {
                    manifests.insert(crates.join(name).join("Cargo.toml"));
                }
                println!("cargo:rerun-if-changed={}", path.display());
            }
        }
    }
    for m in manifests {
        println!("cargo:rerun-if-changed={}", m.display());
    }
}

/// The outer build's target directory: `OUT_DIR` is `<target>/[<triple>/]<profile>/build/<pkg>/out`.
fn shared_target_dir(out: &Path) -> PathBuf {
    if let Some(d) = env::var_os("CARGO_TARGET_DIR") {
        return PathBuf::from(d);
    }
    out.ancestors()
        .nth(4)
        .filter(|p| p.join("CACHEDIR.TAG").is_file() || p.file_name() == Some("target".as_ref()))
        .map(Path::to_path_buf)
        .unwrap_or_else(|| out.join("inject-build"))
}
