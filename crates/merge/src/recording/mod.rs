//! A recording: the directory `gpuperf record` leaves, what the injection
//! library is told through its environment to write there, and (with the
//! `render` feature) reading it back and writing the outputs planned from it.
//!
//! ```text
//! RECORDING/
//!   gpu-PID.gputrace      one per CUDA process (gpu-PID.N.gputrace for a taken name),
//!   gpu-PID.gputrace.log  written by the injection library, told where by [`env`]
//!   cpu.txt               CPU launch stacks from the eBPF profiler ([`crate::cpu`])
//!   driver.tsv            GPU driver events (`record --driver`, [`crate::read::driver`])
//!   symbols.txt           names of the in-process stacks' frames, kept with the recording
//! ```
//!
//! - [`env`](mod@env): the environment contract between `gpuperf record` and the
//!   injection library; both sides take every variable's name and format from it.
//! - `load`: [`Recording`], the traces of a directory or of named files, read
//!   and ready to join.
//! - `plan`: [`Outputs`], which files to write, and [`Recording::write`], which
//!   joins once and writes them all.
//! - `stacks`: the CPU launch stacks taken in the program, found in the GPU
//!   traces, and written as a CPU trace.
//! - `report`: the text tables the CLI prints (top kernels, idle time).
//! - `diff`: [`Comparison`], two runs' folded stacks compared, as `gpuperf
//!   diff` prints and draws them.
//! - `names`: [`expand_names`], the `%p`, `%h`, `%q{VAR}` and `%n` patterns of
//!   output names, for one recording per rank.
//! - `finish`: [`Finish`], the end of `gpuperf record`: the recording read,
//!   joined and written out, and the summary it prints.

use std::path::{Path, PathBuf};

#[cfg(feature = "render")]
mod diff;
pub mod env;
#[cfg(feature = "render")]
mod finish;
#[cfg(feature = "render")]
mod load;
mod names;
#[cfg(feature = "render")]
mod plan;
#[cfg(feature = "render")]
pub mod report;
#[cfg(feature = "render")]
mod stacks;

#[cfg(feature = "render")]
pub use diff::{Comparison, Run, Table};
#[cfg(feature = "render")]
pub use finish::{Finish, Finished, command_line};
#[cfg(feature = "render")]
pub(crate) use load::read_driver;
#[cfg(feature = "render")]
pub use load::{Inputs, Recording};
pub use names::{
    NameError, NameValues, expand_names, expand_names_here, host_name, origin_from_env,
};
#[cfg(feature = "render")]
pub use plan::{DEFAULT_TITLE, Joined, Outputs, Written, driver_timeline, simulated};
#[cfg(feature = "render")]
pub(crate) use stacks::any_has_stacks;
#[cfg(feature = "render")]
pub use stacks::write_cpu_trace;

/// The CPU trace's name inside a recording directory.
pub const CPU_TRACE: &str = "cpu.txt";
/// The GPU driver event file's name inside a recording directory.
pub const DRIVER_EVENTS: &str = "driver.tsv";
/// The kept frame names' file inside a recording directory.
#[cfg(feature = "render")]
pub(crate) const SYMBOLS: &str = "symbols.txt";
/// What every GPU trace's name ends with.
pub(crate) const GPU_TRACE_SUFFIX: &str = ".gputrace";
/// The injection library's name for a process's GPU trace inside a recording
/// directory: `%p` becomes the pid.
pub const GPU_TRACE_IN_DIR: &str = "gpu-%p.gputrace";
/// What the names of [`GPU_TRACE_IN_DIR`] (and the logs beside them) start with.
const GPU_TRACE_PREFIX: &str = "gpu-";
/// What the injection library's default log adds to its trace's path.
pub const LOG_SUFFIX: &str = ".log";

/// Whether `name` is a GPU trace's file name.
pub(crate) fn is_gpu_trace_name(name: &str) -> bool {
    name.ends_with(GPU_TRACE_SUFFIX)
}

/// Whether `name` is a file a recording writes into its directory, which an
/// earlier run left and a new run into the same directory must remove (its
/// traces would be merged into the new ones). Kept frame names are not.
pub(crate) fn is_recorded_file(name: &str) -> bool {
    name == CPU_TRACE
        || name == DRIVER_EVENTS
        || (name.starts_with(GPU_TRACE_PREFIX) && name.contains(GPU_TRACE_SUFFIX))
}

/// The GPU traces inside directory `dir`, in no order; none when it cannot
/// be listed.
pub(crate) fn gpu_traces(dir: &Path) -> impl Iterator<Item = PathBuf> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| is_gpu_trace_name(&e.file_name().to_string_lossy()))
        .map(|e| e.path())
}

/// The bytes of the GPU traces inside directory `dir`, so far.
pub fn gpu_trace_bytes(dir: &Path) -> u64 {
    gpu_traces(dir)
        .filter_map(|p| p.metadata().ok())
        .map(|m| m.len())
        .sum()
}

/// Removes the files an earlier run left in the kept directory `dir`
/// (`is_recorded_file`); their traces would be merged into this one's.
pub fn clear_old_files(dir: &Path) -> crate::Result<()> {
    let list = std::fs::read_dir(dir).map_err(crate::Error::io("list", dir))?;
    for entry in list.flatten() {
        if is_recorded_file(&entry.file_name().to_string_lossy()) {
            std::fs::remove_file(entry.path())
                .map_err(crate::Error::io("remove the old", &entry.path()))?;
        }
    }
    Ok(())
}

/// Whether `path` can be written, found before a run rather than after it:
/// an existing file is opened for appending (its contents kept), a new one
/// is created and removed again.
pub fn check_writable(path: &Path) -> std::io::Result<()> {
    let existed = path.exists();
    std::fs::OpenOptions::new()
        .append(true)
        .create(!existed)
        .open(path)?;
    if !existed {
        let _ = std::fs::remove_file(path);
    }
    Ok(())
}

/// gpuperf GPU traces at `path`: 1 for a file, those inside a directory.
#[cfg(feature = "render")]
pub(crate) fn gpu_trace_count(path: &Path) -> usize {
    if path.is_dir() {
        gpu_traces(path).count()
    } else {
        1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_directory_names_agree() {
        assert!(GPU_TRACE_IN_DIR.starts_with(GPU_TRACE_PREFIX));
        assert!(is_gpu_trace_name(GPU_TRACE_IN_DIR));
        assert!(is_recorded_file(&GPU_TRACE_IN_DIR.replace("%p", "7")));
        assert!(is_recorded_file("gpu-7.1.gputrace.log"));
        assert!(is_recorded_file(CPU_TRACE) && is_recorded_file(DRIVER_EVENTS));
        assert!(!is_recorded_file(SYMBOLS) && !is_recorded_file("notes.md"));
    }

    #[test]
    fn traces_in_a_directory_are_found_by_name() {
        let d = tempfile::tempdir().unwrap();
        for f in [
            "gpu-1.gputrace",
            "gpu-1.gputrace.log",
            "x.gputrace",
            "cpu.txt",
        ] {
            std::fs::write(d.path().join(f), "x").unwrap();
        }
        assert_eq!(gpu_trace_count(d.path()), 2);
        assert_eq!(gpu_trace_count(&d.path().join("cpu.txt")), 1);
        assert_eq!(gpu_trace_bytes(d.path()), 2);
    }

    #[test]
    fn old_traces_in_a_kept_directory_are_removed_and_others_kept() {
        let d = tempfile::tempdir().unwrap();
        for f in [
            "gpu-1.gputrace",
            "gpu-1.gputrace.log",
            "cpu.txt",
            "driver.tsv",
            "notes.md",
        ] {
            std::fs::write(d.path().join(f), "x").unwrap();
        }
        clear_old_files(d.path()).unwrap();
        let mut left: Vec<String> = std::fs::read_dir(d.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["notes.md"]);
    }
}
