//! The committed BPF objects are the ones their sources compile to.

use std::env;
use std::fs;
use std::path::Path;

#[path = "../../src/bpf/object.rs"]
#[allow(dead_code)] // build.rs uses the rest.
mod object;

use gpuperf_test_support::require::Need;
use object::Stamp;

fn flag(name: &str) -> bool {
    env::var_os(name).is_some_and(|v| v == "1")
}

/// Without clang, checks that the sources are the ones the object was built
/// from. With the clang that built it, also rebuilds the object and compares
/// it byte for byte. `GPUPERF_BLESS=1` rewrites the object and its stamp;
/// `GPUPERF_REQUIRE_CLANG=1` (CI) fails instead of skipping the rebuild.
#[test]
fn committed_bpf_object_is_built_from_its_sources() {
    for prog in object::PROGRAMS {
        check(prog);
    }
}

fn check(prog: object::Program) {
    let arch = env::consts::ARCH;
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let committed = object::object_path(dir, prog, arch);
    let stamp_path = object::stamp_path(dir, prog, arch);
    let digest = object::digest(dir, prog, arch).unwrap();
    let clang = object::clang_version();

    if flag("GPUPERF_BLESS") {
        let clang = clang.expect("GPUPERF_BLESS=1 rebuilds the BPF object, which needs clang");
        let tmp = tempfile::tempdir().unwrap();
        let built = tmp.path().join(format!("{}.bpf.o", prog.name));
        object::compile(dir, prog, arch, &built).unwrap_or_else(|e| panic!("{e}"));
        fs::copy(&built, &committed).unwrap();
        Stamp { digest, clang }.write(&stamp_path).unwrap();
        eprintln!("rewrote {} and its stamp", committed.display());
        return;
    }

    if !committed.is_file() {
        assert!(
            arch != "x86_64",
            "{} is missing; build it with `{}`",
            committed.display(),
            object::REGENERATE
        );
        gpuperf_test_support::require::skipped(format_args!(
            "no committed BPF object for {arch} (the build compiles it with clang)"
        ));
        return;
    }
    let stamp = Stamp::read(&stamp_path)
        .unwrap_or_else(|| panic!("{} is missing or malformed", stamp_path.display()));
    assert_eq!(
        stamp.digest,
        digest,
        "the BPF sources changed since {} was built; rebuild it with `{}` and commit it",
        committed.display(),
        object::REGENERATE
    );

    let Some(clang) = clang else {
        Need::Clang.missing("the byte-for-byte rebuild needs clang, which does not run");
        return;
    };
    if clang != stamp.clang {
        // Other clang versions generate other (equally valid) code.
        Need::Clang.missing(format_args!(
            "the byte-for-byte rebuild needs `{}`, the clang that built {}; this is `{clang}`",
            stamp.clang,
            committed.display()
        ));
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let built = tmp.path().join(format!("{}.bpf.o", prog.name));
    object::compile(dir, prog, arch, &built).unwrap_or_else(|e| panic!("{e}"));
    let (want, got) = (fs::read(&committed).unwrap(), fs::read(&built).unwrap());
    if want != got {
        let keep = env::temp_dir().join(format!("{}.bpf.{arch}.rebuilt.o", prog.name));
        fs::copy(&built, &keep).unwrap();
        panic!(
            "{} differs from what its sources compile to (kept in {}); rebuild it with `{}`",
            committed.display(),
            keep.display(),
            object::REGENERATE
        );
    }
}
