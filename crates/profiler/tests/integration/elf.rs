//! Probe-point discovery on real NVIDIA binaries (no root needed).

use gpuperf_profiler::{FirstInsn, api_functions, function, symbol_offset};

use crate::support::{cuda13, inject_lib};

#[test]
fn libcudart_api_functions_are_fast_to_probe_and_wrappers_are_skipped() {
    let Some(cuda) = cuda13() else { return };
    let lib = cuda.join("lib/libcudart.so.13");
    let points = api_functions(&lib).unwrap();
    let names: Vec<&str> = points.iter().map(|p| p.symbol.as_str()).collect();
    for n in [
        "cudaLaunchKernel",
        "cudaLaunchKernel_ptsz",
        "cudaGraphLaunch",
        "cudaMemcpyAsync",
        "cudaMemsetAsync",
    ] {
        assert!(names.contains(&n), "{n} missing from {names:?}");
    }
    // __cudaLaunchKernel only tail-jumps to cudaLaunchKernel: one call, one probe.
    assert!(!names.contains(&"__cudaLaunchKernel"), "{names:?}");
    assert!(!names.contains(&"cudaLaunchHostFunc"));
    let launch = function(&lib, "cudaLaunchKernel").unwrap();
    assert_eq!(launch.first, FirstInsn::PushRbp);
    assert!(points.iter().all(|p| p.file_offset > 0));
}

#[test]
fn the_marker_starts_with_a_nop5_and_its_semaphore_is_file_backed() {
    let lib = inject_lib();
    let marker = function(&lib, gpuperf_profiler::MARKER_SYMBOL).unwrap();
    assert_eq!(marker.first, FirstInsn::Nop5);
    let sem = symbol_offset(&lib, gpuperf_profiler::SEMAPHORE_SYMBOL).unwrap();
    assert!(sem > 0);
    assert_eq!(gpuperf_profiler::segments_mapping(&lib, sem).unwrap(), 1);
}

#[test]
fn bad_probe_targets_are_errors_that_name_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("notes.txt");
    std::fs::write(&text, "not an ELF").unwrap();
    let e = function(&text, "cudaLaunchKernel").unwrap_err().to_string();
    assert!(e.contains("notes.txt") && e.contains("not an ELF"), "{e}");
    let missing = dir.path().join("missing.so");
    let e = function(&missing, "f").unwrap_err().to_string();
    assert!(e.contains("missing.so"), "{e}");
    let e = function(&inject_lib(), "noSuchFunction")
        .unwrap_err()
        .to_string();
    assert!(e.contains("no function `noSuchFunction`"), "{e}");
    for bad in ["", "lib.so", ":sym", "lib.so:", "lib.so:two words"] {
        assert!(
            bad.parse::<gpuperf_profiler::ProbeSpec>().is_err(),
            "{bad:?}"
        );
    }
    let ok: gpuperf_profiler::ProbeSpec =
        "/opt/a:b/libcudart.so.13:cudaLaunchKernel".parse().unwrap();
    assert_eq!(ok.path, std::path::Path::new("/opt/a:b/libcudart.so.13"));
}
