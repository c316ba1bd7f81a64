//! Finding the injection library that the CUDA driver loads into the target.

use std::fs;
use std::io::Write as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};

/// The library's file name, as cargo builds it.
pub const FILE_NAME: &str = "libgpuperf_inject.so";

#[cfg(gpuperf_embedded_inject)]
static EMBEDDED: Option<&[u8]> = Some(include_bytes!(concat!(
    env!("OUT_DIR"),
    "/libgpuperf_inject.so"
)));
#[cfg(not(gpuperf_embedded_inject))]
static EMBEDDED: Option<&[u8]> = None;

/// Where the library came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// `GPUPERF_INJECT_LIB`.
    Environment,
    /// Installed next to the `gpuperf` binary, or in `../lib/gpuperf/`.
    Installed,
    /// The copy built into the binary, written to the run's scratch directory.
    Embedded,
}

/// Finds the library: `GPUPERF_INJECT_LIB`, then the embedded copy written into
/// `scratch` (which the target's user can read wherever gpuperf is installed),
/// then next to the executable.
pub fn locate(env_override: Option<PathBuf>, scratch: &Path) -> Result<(PathBuf, Origin)> {
    if let Some(p) = env_override {
        if !p.is_file() {
            bail!(
                "GPUPERF_INJECT_LIB names `{}`, which is not a file",
                p.display()
            );
        }
        return Ok((absolute(&p)?, Origin::Environment));
    }
    if let Some(bytes) = EMBEDDED {
        return Ok((extract(bytes, scratch)?, Origin::Embedded));
    }
    match installed() {
        Some(p) => Ok((p, Origin::Installed)),
        None => bail!(
            "cannot find the injection library {FILE_NAME}: this gpuperf was built without \
             it embedded, and it is not next to the binary; build it with \
             `cargo build --release -p gpuperf-inject` and copy target/release/{FILE_NAME} \
             next to gpuperf, or set GPUPERF_INJECT_LIB"
        ),
    }
}

fn installed() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?;
    [
        dir.join(FILE_NAME),
        dir.join("../lib/gpuperf").join(FILE_NAME),
    ]
    .into_iter()
    .find(|p| p.is_file())
}

fn extract(bytes: &[u8], dir: &Path) -> Result<PathBuf> {
    let path = dir.join(FILE_NAME);
    let write = || -> std::io::Result<()> {
        let mut f = fs::File::create(&path)?;
        f.write_all(bytes)?;
        f.set_permissions(fs::Permissions::from_mode(0o755))?;
        f.sync_all()
    };
    write().with_context(|| {
        format!(
            "failed to write the injection library to `{}`",
            path.display()
        )
    })?;
    Ok(path)
}

fn absolute(p: &Path) -> Result<PathBuf> {
    std::path::absolute(p).with_context(|| format!("failed to resolve `{}`", p.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_override_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let e = locate(Some("/nonexistent/lib.so".into()), dir.path()).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/lib.so"), "{e}");
    }

    #[test]
    fn the_embedded_copy_is_an_elf_shared_object() {
        let Some(bytes) = EMBEDDED else {
            gpuperf_test_support::require::skipped("built without the embedded library");
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let p = extract(bytes, dir.path()).unwrap();
        let head = fs::read(&p).unwrap();
        assert_eq!(&head[..4], b"\x7fELF");
        assert_eq!(
            fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o755
        );
    }
}
