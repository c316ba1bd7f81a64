//! The CPython interpreters that the Python tests run on: pyenv's 3.10–3.13
//! (built without frame pointers) and Debian's 3.11.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The variable that requires interpreters: `1` requires all, or a
/// comma-separated list of names (`3.10,3.12,debian-3.11`) requires those.
pub const REQUIRE_VAR: &str = "GPUPERF_REQUIRE_PYTHONS";

/// Debian's CPython 3.11.
const DEBIAN_311: &str = "/usr/bin/python3.11";

/// `pyenv root`, when pyenv is installed.
fn pyenv_root() -> Option<PathBuf> {
    let o = Command::new("pyenv")
        .arg("root")
        .output()
        .ok()
        .filter(|o| o.status.success())?;
    Some(PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))
}

/// `bin/python3` of pyenv's newest installed `version` (`3.12` finds
/// `3.12.*`), if any.
pub fn pyenv(version: &str) -> Option<PathBuf> {
    let root = pyenv_root()?;
    let prefix = format!("{version}.");
    let mut v: Vec<PathBuf> = std::fs::read_dir(root.join("versions"))
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&prefix))
        })
        .map(|p| p.join("bin/python3"))
        .filter(|p| p.is_file())
        .collect();
    v.sort();
    v.pop()
}

/// The interpreters to test, as (name, path): `pyenv 3.10` … `pyenv 3.13`,
/// `debian 3.11`. A missing one is left out, and its tests skip, unless
/// [`REQUIRE_VAR`] requires it: then this panics.
#[track_caller]
pub fn pythons() -> Vec<(String, PathBuf)> {
    let mut found = Vec::new();
    let mut missing = Vec::new();
    for minor in 10..=13 {
        let name = format!("3.{minor}");
        match pyenv(&name) {
            Some(p) => found.push((format!("pyenv {name}"), p)),
            None => missing.push(name),
        }
    }
    let debian = PathBuf::from(DEBIAN_311);
    if debian.is_file() {
        found.push(("debian 3.11".into(), debian));
    } else {
        missing.push("debian-3.11".into());
    }
    if !missing.is_empty() {
        let required = std::env::var(REQUIRE_VAR).unwrap_or_default();
        let required: Vec<&str> = required.split(',').map(str::trim).collect();
        let fail: Vec<&String> = missing
            .iter()
            .filter(|m| required.contains(&"1") || required.contains(&m.as_str()))
            .collect();
        assert!(
            fail.is_empty(),
            "Python interpreters required by {REQUIRE_VAR} are missing: {fail:?} \
             (pyenv's under `pyenv root`/versions/3.1x.*, Debian's {DEBIAN_311})"
        );
        crate::require::skipped(format_args!(
            "for them: Python interpreters missing: {}",
            missing.join(", ")
        ));
    }
    found
}

/// The 1-based line of `script` that ends with the marker `# call:<name>`.
pub fn marker_line(script: &Path, name: &str) -> usize {
    let marker = format!("# call:{name}");
    std::fs::read_to_string(script)
        .unwrap_or_else(|e| panic!("failed to read `{}`: {e}", script.display()))
        .lines()
        .position(|l| l.trim_end().ends_with(&marker))
        .unwrap_or_else(|| panic!("no {marker} in `{}`", script.display()))
        + 1
}
