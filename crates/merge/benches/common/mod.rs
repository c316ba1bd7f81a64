//! The measured work of the merge benchmarks' child runs.

use std::fs::File;
use std::io::BufWriter;

use gpuperf_merge::join;
use gpuperf_merge::model::StringTable;
use gpuperf_merge::read::cpu::CpuTrace;
use gpuperf_merge::read::input::GpuInputs;
use gpuperf_merge::write::folded::Folder;
use gpuperf_merge::write::idle::IdleFolder;

/// Joins `gpu` (and `cpu`, when given) and writes the folded stacks to
/// /dev/null, as `gpuperf merge -m` does, and with `idle` the idle-time stacks
/// too, as `--idle` does; asserts that every kernel was matched. Returns the
/// number of kernels.
pub fn join_and_fold(
    cpu: Option<&mut CpuTrace>,
    gpu: &GpuInputs,
    strings: &mut StringTable,
    idle: bool,
) -> u64 {
    let mut folder = Folder::new();
    let mut idler = IdleFolder::new();
    let mut sinks: Vec<&mut dyn join::Sink> = vec![&mut folder];
    if idle {
        sinks.push(&mut idler);
    }
    let summary =
        join::merge(cpu, gpu, strings, &join::Options::default(), &mut sinks).expect("merge");
    let null = || BufWriter::new(File::create("/dev/null").expect("/dev/null"));
    folder.write(null()).expect("write");
    if idle {
        idler.write(null()).expect("write");
    }
    assert_eq!(summary.kernels_matched, summary.kernels, "{summary}");
    summary.kernels
}
