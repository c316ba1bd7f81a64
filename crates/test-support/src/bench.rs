//! What the benchmarks share: their arguments, medians, child runs pinned to
//! one core, the child's CPU time and peak RSS, and large inputs made once.

use std::ffi::OsStr;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::str::FromStr;

/// The value after `name` on the command line (`--runs 5`), or `default`.
pub fn arg<T: FromStr>(name: &str, default: T) -> T {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The median of `v` (the upper one of an even count); panics when empty.
pub fn median(mut v: Vec<f64>) -> f64 {
    assert!(!v.is_empty(), "no samples");
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// A command that runs `exe` pinned to CPU 0 with `taskset` when it is
/// installed, for steadier figures; plainly otherwise.
pub fn pinned(exe: &Path) -> Command {
    let taskset = Path::new("/usr/bin/taskset");
    if taskset.exists() {
        let mut c = Command::new(taskset);
        c.args(["-c", "0"]).arg(exe);
        c
    } else {
        Command::new(exe)
    }
}

/// Runs `exe` (pinned, see [`pinned`]) with the variable `var` set to `value`,
/// which makes it do one measured run as a child; panics when it fails. Returns
/// the numbers it printed on stdout, separated by white space.
pub fn child_figures(exe: &Path, var: &str, value: &OsStr) -> Vec<f64> {
    let out = pinned(exe)
        .env(var, value)
        .output()
        .unwrap_or_else(|e| panic!("failed to run `{}`: {e}", exe.display()));
    assert!(
        out.status.success(),
        "child failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    text.split_whitespace()
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("child printed `{v}`, not a number: {text}"))
        })
        .collect()
}

/// This process's peak resident set (VmHWM), in KiB; 0 when unknown.
pub fn peak_rss_kib() -> u64 {
    fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// This process's time on the CPU so far, in seconds (from the scheduler):
/// steadier than wall time on a busy machine. 0 when unknown.
pub fn cpu_secs() -> f64 {
    let ns: u64 = fs::read_to_string("/proc/self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0);
    ns as f64 / 1e9
}

/// The directory `name` under `target_tmp`, holding an input that `make`
/// writes there once and later runs reuse. Pass `env!("CARGO_TARGET_TMPDIR")`
/// so that `cargo clean` removes it. A run that stopped while making it leaves
/// no `done` marker, and the next run makes it again. Returns the directory and
/// whether it was made now.
pub fn cached_input(
    target_tmp: &str,
    name: &str,
    make: impl FnOnce(&Path) -> std::io::Result<()>,
) -> (PathBuf, bool) {
    let dir = Path::new(target_tmp).join(name);
    let done = dir.join("done");
    if done.exists() {
        return (dir, false);
    }
    let made = fs::create_dir_all(&dir)
        .and_then(|()| make(&dir))
        .and_then(|()| fs::write(&done, b""));
    if let Err(e) = made {
        panic!("failed to make the input in `{}`: {e}", dir.display());
    }
    (dir, true)
}
