//! The measured work of the merge benchmarks' child runs.

use std::fs::File;
use std::io::BufWriter;

use gpuperf_merge::join;
use gpuperf_merge::model::StringTable;
use gpuperf_merge::read::cpu::CpuTrace;
use gpuperf_merge::read::input::GpuInputs;
use gpuperf_merge::write::folded::Folder;

/// Joins `gpu` (and `cpu`, when given) and writes the folded stacks to
/// /dev/null, as `gpuperf merge -m` does; asserts that every kernel was
/// matched. Returns the number of kernels.
pub fn join_and_fold(
    cpu: Option<&mut CpuTrace>,
    gpu: &GpuInputs,
    strings: &mut StringTable,
) -> u64 {
    let mut folder = Folder::new();
    let summary = join::merge(
        cpu,
        gpu,
        strings,
        &join::Options::default(),
        &mut [&mut folder],
    )
    .expect("merge");
    folder
        .write(BufWriter::new(
            File::create("/dev/null").expect("/dev/null"),
        ))
        .expect("write");
    assert_eq!(summary.kernels_matched, summary.kernels, "{summary}");
    summary.kernels
}
