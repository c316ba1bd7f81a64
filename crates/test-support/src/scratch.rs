//! Scratch space that other users can read, removed when the test process ends.
//!
//! A test that runs something as another user (uid 65534) runs it from here:
//! `target/` and the checkout may sit in a home directory that others cannot
//! enter. The directory is `$TMPDIR/gpuperf-tests-b<boot id>-<pid>-XXXXXX`,
//! mode 0755, one per test process; it is removed when the process exits,
//! whether its tests passed or failed. A process killed before that leaves it
//! behind, so the next test process removes the directories of processes that
//! no longer run. Only those of its own kernel's boot: a test run in a kernel
//! VM sees the host's `/tmp`, whose directories belong to the host's processes,
//! which the guest does not have, and which may be using them (the guest's
//! test runs programs from them).

use std::collections::HashMap;
use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

/// Name prefix of the per-process directories.
const PREFIX: &str = "gpuperf-tests-";
/// The prefix that earlier versions of the tests used; their directories are
/// removed the same way.
const OLD_PREFIX: &str = "gpuperf-record-tests-";

static ROOT: OnceLock<PathBuf> = OnceLock::new();

/// This process's world-readable scratch directory, made on first use.
pub fn root() -> &'static Path {
    ROOT.get_or_init(|| {
        let tmp = std::env::temp_dir();
        let boot = boot_id();
        remove_stale(&tmp, &boot);
        let dir = tempfile::Builder::new()
            .prefix(&format!("{PREFIX}b{boot}-{}-", std::process::id()))
            .tempdir_in(&tmp)
            .unwrap_or_else(|e| panic!("failed to create a directory in `{}`: {e}", tmp.display()))
            .keep();
        readable_by_all(&dir);
        // SAFETY: `remove_root` is a plain function that never unwinds; atexit
        // has no other precondition.
        let registered = unsafe { libc::atexit(remove_root) } == 0;
        assert!(registered, "atexit failed");
        dir
    })
}

extern "C" fn remove_root() {
    if let Some(dir) = ROOT.get() {
        let _ = fs::remove_dir_all(dir);
    }
}

/// This kernel's boot id, as hex digits without dashes (`0` if the kernel does
/// not say: every directory then counts as this boot's, as before boot ids).
fn boot_id() -> String {
    let id = fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    let hex: String = id.chars().filter(char::is_ascii_hexdigit).collect();
    if hex.is_empty() { "0".to_owned() } else { hex }
}

/// Removes the scratch directories in `tmp` of processes of the boot `boot`
/// that are gone. Those of another boot are left: their processes may run in
/// another kernel that shares `tmp` (a VM's host), and this one cannot tell.
/// Directories named without a boot id (made before boot ids were added) count
/// as this boot's.
fn remove_stale(tmp: &Path, boot: &str) {
    let Ok(entries) = fs::read_dir(tmp) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(rest) = name.to_str().and_then(|n| {
            n.strip_prefix(PREFIX)
                .or_else(|| n.strip_prefix(OLD_PREFIX))
        }) else {
            continue;
        };
        let mut fields = rest.split('-');
        let mut pid = fields.next().unwrap_or("");
        if let Some(dir_boot) = pid.strip_prefix('b') {
            if dir_boot != boot {
                continue;
            }
            pid = fields.next().unwrap_or("");
        }
        if pid.parse::<u32>().is_ok() && !Path::new("/proc").join(pid).exists() {
            // Another user's directory may not be ours to remove: leave it.
            let _ = fs::remove_dir_all(e.path());
        }
    }
}

fn readable_by_all(p: &Path) {
    fs::set_permissions(p, fs::Permissions::from_mode(0o755))
        .unwrap_or_else(|e| panic!("failed to chmod `{}`: {e}", p.display()));
}

/// `name` in this process's scratch directory, created, mode 0755.
pub fn shared_dir(name: &str) -> PathBuf {
    let d = root().join(name);
    fs::create_dir_all(&d).unwrap_or_else(|e| panic!("failed to create `{}`: {e}", d.display()));
    readable_by_all(&d);
    d
}

/// An empty directory `runs/<name>` in the scratch directory, for one run of a
/// program under test.
pub fn fresh_dir(name: &str) -> PathBuf {
    let d = shared_dir("runs").join(name);
    let _ = fs::remove_dir_all(&d);
    fs::create_dir_all(&d).unwrap_or_else(|e| panic!("failed to create `{}`: {e}", d.display()));
    d
}

/// A copy of the file `src` that every user can read and run: `bin/<file name>`
/// in the scratch directory, made once per process.
pub fn copy_for_anyone(src: &Path) -> PathBuf {
    static COPIES: Mutex<Option<HashMap<PathBuf, PathBuf>>> = Mutex::new(None);
    let mut copies = COPIES.lock().unwrap_or_else(|e| e.into_inner());
    let copies = copies.get_or_insert_with(HashMap::new);
    if let Some(p) = copies.get(src) {
        return p.clone();
    }
    let name = src
        .file_name()
        .unwrap_or_else(|| panic!("`{}` names no file", src.display()));
    let p = shared_dir("bin").join(name);
    fs::copy(src, &p).unwrap_or_else(|e| panic!("failed to copy `{}`: {e}", src.display()));
    readable_by_all(&p);
    copies.insert(src.to_owned(), p.clone());
    p
}

#[cfg(test)]
mod tests {
    use std::process::Command;

    use super::*;

    /// Set in the child process of the exit test: `pass` or `fail`.
    const CHILD: &str = "GPUPERF_TEST_SUPPORT_SCRATCH_CHILD";

    /// Only does something as the child of the next test: makes the scratch
    /// directory, prints it, and passes or fails.
    #[test]
    fn scratch_child() {
        let Some(mode) = std::env::var_os(CHILD) else {
            return;
        };
        fs::write(shared_dir("bin").join("file"), "x").unwrap();
        println!("root {}", root().display());
        assert_eq!(mode, "pass", "failing on purpose");
    }

    #[test]
    fn the_directory_is_removed_when_the_process_ends_passing_or_failing() {
        for mode in ["pass", "fail"] {
            let o = Command::new(std::env::current_exe().unwrap())
                .args(["--exact", "scratch::tests::scratch_child", "--nocapture"])
                .env(CHILD, mode)
                .output()
                .unwrap();
            let out = String::from_utf8_lossy(&o.stdout);
            assert_eq!(o.status.success(), mode == "pass", "{out}");
            let dir = out
                .lines()
                .find_map(|l| l.strip_prefix("root "))
                .unwrap_or_else(|| panic!("no root in {out}"));
            assert!(dir.contains(PREFIX), "{dir}");
            assert!(!Path::new(dir).exists(), "{mode}: `{dir}` left behind");
        }
    }

    #[test]
    fn stale_directories_of_dead_processes_of_this_boot_are_removed_others_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let boot = boot_id();
        let other_boot = if boot == "1" { "2" } else { "1" };
        // A pid above the kernel's maximum (4194304) never runs.
        let dead = tmp.path().join(format!("{PREFIX}b{boot}-4294967290-abc"));
        let unnamed_boot = tmp.path().join(format!("{PREFIX}4294967290-abc"));
        let old = tmp.path().join(format!("{OLD_PREFIX}4294967291"));
        let live = tmp
            .path()
            .join(format!("{PREFIX}b{boot}-{}-abc", std::process::id()));
        // A process of another kernel (the host of this VM, or a guest of
        // this host) that this kernel does not run: not this one's to judge.
        let elsewhere = tmp
            .path()
            .join(format!("{PREFIX}b{other_boot}-4294967290-abc"));
        let other = tmp.path().join("gpuperf-tests-notapid");
        for d in [&dead, &unnamed_boot, &old, &live, &elsewhere, &other] {
            fs::create_dir_all(d.join("bin")).unwrap();
        }
        remove_stale(tmp.path(), &boot);
        assert!(!dead.exists() && !unnamed_boot.exists() && !old.exists());
        assert!(live.exists() && other.exists());
        assert!(elsewhere.exists(), "another boot's directory was removed");
    }

    #[test]
    fn the_directory_is_named_by_this_boot_and_process() {
        let boot = boot_id();
        assert!(boot.bytes().all(|b| b.is_ascii_hexdigit()), "{boot}");
        let name = root().file_name().unwrap().to_str().unwrap().to_owned();
        let want = format!("{PREFIX}b{boot}-{}-", std::process::id());
        assert!(name.starts_with(&want), "{name}");
    }

    #[test]
    fn shared_dirs_and_copies_are_readable_by_all() {
        let d = shared_dir("unit");
        assert!(d.starts_with(root()));
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(root()), 0o755);
        assert_eq!(mode(&d), 0o755);
        let src = tempfile::NamedTempFile::new().unwrap();
        fs::set_permissions(src.path(), fs::Permissions::from_mode(0o600)).unwrap();
        let copy = copy_for_anyone(src.path());
        assert_eq!(mode(&copy), 0o755);
        assert_eq!(copy_for_anyone(src.path()), copy);
    }
}
