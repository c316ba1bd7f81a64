//! Bytes per launch of the two timeline formats, Chrome JSON (`-c t.json`) and
//! Perfetto protobuf (`-c t.pftrace`), written by `gpuperf merge` from the
//! recordings under `samples/recordings/` (or the inputs given).
//!
//! ```sh
//! cargo bench -p gpuperf --bench timeline_size [-- INPUT...]
//! ```
//!
//! A launch is a launch API call, as the merge summary counts them.
#![allow(missing_docs)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// Runs `gpuperf merge INPUT -c out` in `dir`; returns the file's size and the
/// summary's launch API calls.
fn merge(input: &Path, dir: &Path, out: &str) -> (u64, u64) {
    let o = Command::new(env!("CARGO_BIN_EXE_gpuperf"))
        .current_dir(dir)
        .arg("merge")
        .arg(input)
        .args(["-c", out, "-o", "f.svg"])
        .output()
        .expect("gpuperf runs");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{}: {err}", input.display());
    // "…; 3175 CPU launches, 2745 launch API calls"
    let launches = err
        .split_once(" launch API calls")
        .and_then(|(head, _)| head.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0);
    let bytes = std::fs::metadata(dir.join(out)).map_or(0, |m| m.len());
    (bytes, launches)
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../samples/recordings");
    let mut inputs: Vec<PathBuf> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .map(PathBuf::from)
        .collect();
    if inputs.is_empty() {
        inputs.push(root.join("real/b200_vllm_gpt_oss.pt.trace.json.gz"));
        let mut sims: Vec<PathBuf> = std::fs::read_dir(root.join("simulated"))
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.is_dir())
            .collect();
        sims.sort();
        inputs.extend(sims);
    }
    let dir = tempfile::tempdir().unwrap();
    println!(
        "{:<36} {:>8} {:>12} {:>8} {:>12} {:>8} {:>6}",
        "input", "launches", "JSON bytes", "B/launch", "pftrace", "B/launch", "ratio"
    );
    for input in &inputs {
        let (json, launches) = merge(input, dir.path(), "t.json");
        let (pb, _) = merge(input, dir.path(), "t.pftrace");
        let per = |b: u64| b as f64 / launches.max(1) as f64;
        let name = input.file_name().unwrap_or_default().to_string_lossy();
        println!(
            "{name:<36} {launches:>8} {json:>12} {:>8.0} {pb:>12} {:>8.0} {:>6.1}",
            per(json),
            per(pb),
            json as f64 / pb.max(1) as f64
        );
    }
}
