//! The kernel VM of `sim/kernel/`: runs a command under one of Debian's
//! kernels (6.1, 6.12) in QEMU's software emulation, on this machine's root
//! file system (read-only, under a throw-away overlay), with the simulated GPU
//! driver modules built for that kernel.
//!
//! `sim/kernel/ci.sh` prepares it; until then [`kernel`] says so and the test
//! skips, unless `GPUPERF_REQUIRE_KERNEL_VM=1` (CI sets it), which makes a
//! missing VM fail the test. One guest runs at a time (`sim/kernel/run.sh`
//! holds a lock): a test that boots one waits for the others.
//!
//! ```no_run
//! use gpuperf_test_support::vm;
//!
//! if vm::inside().is_some() {
//!     return; // Already in a guest: run the test itself instead.
//! }
//! let Some(guest) = vm::kernel("6.1") else { return };
//! let out = guest.run(&["uname", "-r"], &[]);
//! assert!(out.status.success(), "{}", gpuperf_test_support::process::show(&out));
//! ```

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The variable that makes a missing VM fail the test instead of skipping it.
pub const REQUIRE: &str = "GPUPERF_REQUIRE_KERNEL_VM";

/// The exit code `run.sh` gives when the guest itself failed (no boot, no
/// exit code from the command).
pub const VM_FAILED: i32 = 125;

/// A prepared guest kernel.
#[derive(Clone, Debug)]
pub struct Guest {
    /// Debian's kernel release, e.g. `6.1.0-56-amd64`.
    pub release: String,
    cache: PathBuf,
}

/// Where `sim/kernel/ci.sh` prepares the VM: `$GPUPERF_KERNEL_VM_DIR`, else
/// `target/kernel-vm` in the checkout.
pub fn cache_dir() -> PathBuf {
    std::env::var_os("GPUPERF_KERNEL_VM_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| crate::repo().join("target/kernel-vm"))
}

/// The kernel release this process runs under when it runs in the VM.
pub fn inside() -> Option<String> {
    std::env::var("GPUPERF_IN_KERNEL_VM").ok()
}

/// Every prepared kernel release, sorted.
pub fn prepared() -> Vec<String> {
    let dir = cache_dir();
    let mut found: Vec<String> = std::fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            e.path().join(".ready").is_file() && e.path().join("initramfs.cpio.gz").is_file()
        })
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    found.sort();
    found
}

/// The prepared kernel whose release starts with `series` and a dot or dash
/// (`"6.1"` finds `6.1.0-56-amd64`, not `6.12…`). When there is none, or QEMU
/// is missing, it says why on stderr and returns `None` (the caller returns),
/// or panics under `GPUPERF_REQUIRE_KERNEL_VM=1`.
#[track_caller]
pub fn kernel(series: &str) -> Option<Guest> {
    let cache = cache_dir();
    let release = prepared().into_iter().find(|r| in_series(r, series));
    let why = match (&release, which("qemu-system-x86_64")) {
        (None, _) => format!(
            "no Linux {series} kernel VM is prepared in {} (run sim/kernel/ci.sh)",
            cache.display()
        ),
        (Some(_), false) => "qemu-system-x86_64 is not installed (run sim/kernel/ci.sh)".into(),
        (Some(r), true) => {
            return Some(Guest {
                release: r.clone(),
                cache,
            });
        }
    };
    assert!(!required(), "{REQUIRE}=1 but {why}");
    crate::require::skipped(why);
    None
}

/// Whether kernel `release` belongs to `series` (whole version components).
fn in_series(release: &str, series: &str) -> bool {
    release
        .strip_prefix(series)
        .is_some_and(|rest| rest.starts_with('.') || rest.starts_with('-'))
}

/// Whether `GPUPERF_REQUIRE_KERNEL_VM=1`.
pub fn required() -> bool {
    std::env::var_os(REQUIRE).is_some_and(|v| v == "1")
}

fn which(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|d| d.join(program).is_file()))
}

impl Guest {
    /// Boots the guest, runs `argv` in this process's working directory with
    /// the variables `env` set (and this process's `PATH` and
    /// `GPUPERF_REQUIRE_*` but `GPUPERF_REQUIRE_KERNEL_VM`), and returns its
    /// exit status and output (stdout and stderr together, in stdout; the
    /// VM's own complaints in stderr). Exit code [`VM_FAILED`]: the VM failed.
    pub fn run<S: AsRef<OsStr>>(&self, argv: &[S], env: &[(&str, &str)]) -> Output {
        let cwd = std::env::current_dir().expect("the working directory exists");
        self.run_in(&cwd, argv, env)
    }

    /// As [`Guest::run`], in directory `cwd`.
    pub fn run_in<S: AsRef<OsStr>>(&self, cwd: &Path, argv: &[S], env: &[(&str, &str)]) -> Output {
        let script = crate::repo().join("sim/kernel/run.sh");
        let mut cmd = Command::new(script);
        cmd.env("GPUPERF_KERNEL_VM_DIR", &self.cache)
            .arg("-k")
            .arg(&self.release)
            .arg("-C")
            .arg(cwd);
        // The guest's tests require what the host's do.
        let required = std::env::vars()
            .filter(|(k, _)| k.starts_with("GPUPERF_REQUIRE_") && k != REQUIRE)
            .collect::<Vec<_>>();
        let required = required.iter().map(|(k, v)| (k.as_str(), v.as_str()));
        for (k, v) in required.chain(env.iter().copied()) {
            cmd.arg("-e").arg(format!("{k}={v}"));
        }
        cmd.arg("--").args(argv);
        cmd.output()
            .unwrap_or_else(|e| panic!("starting sim/kernel/run.sh: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `run.sh` with a MOCK `qemu-system-x86_64` first on PATH: each boot
    /// appends a line to `boots` in the run directory's parent and writes
    /// the console and output that `script` (sh, with `$console`, `$out` and
    /// `$boot`, the boot's number) gives it.
    fn run_with_mock_qemu(script: &str) -> (Output, usize) {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("vm");
        let kver = "6.1.0-mock";
        std::fs::create_dir_all(cache.join(kver)).unwrap();
        std::fs::write(cache.join(kver).join(".ready"), "").unwrap();
        std::fs::write(cache.join(kver).join("initramfs.cpio.gz"), "").unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        let qemu = bin.join("qemu-system-x86_64");
        let boots = dir.path().join("boots");
        std::fs::write(
            &qemu,
            format!(
                "#!/bin/sh\n\
                 for a; do case $a in file:*/console) console=${{a#file:}};; file:*/out) out=${{a#file:}};; esac; done\n\
                 echo boot >>'{}'\n\
                 boot=$(wc -l <'{}')\n\
                 {script}\n",
                boots.display(),
                boots.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&qemu, std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = format!(
            "{}:{}",
            bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let out = Command::new(crate::repo().join("sim/kernel/run.sh"))
            .env("GPUPERF_KERNEL_VM_DIR", &cache)
            .env("PATH", path)
            .args(["-k", kver, "-t", "60", "--", "true"])
            .output()
            .unwrap();
        let n = std::fs::read_to_string(&boots)
            .unwrap_or_default()
            .lines()
            .count();
        (out, n)
    }

    /// A guest whose first boot writes `console` and part of the command's
    /// output, then ends with `qemu_status`: booted once more (the second
    /// boot runs the command to its end), and each of `said` on stderr.
    fn booted_once_more(console: &str, qemu_status: u8, said: &[&str]) {
        let (out, boots) = run_with_mock_qemu(&format!(
            r#"if [ "$boot" = 1 ]; then
                 printf '{console}' >"$console"
                 printf 'test a ... ok\n' >"$out"
                 exit {qemu_status}
               fi
               printf 'done\nGPUPERF-VM-EXIT 0\n' >"$out""#
        ));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(boots, 2, "{err}");
        assert!(out.status.success(), "{err}");
        for s in said {
            assert!(err.contains(s), "{s}: {err}");
        }
        assert_eq!(String::from_utf8_lossy(&out.stdout), "done\n");
    }

    #[test]
    fn a_guest_kernel_that_locks_up_is_booted_once_more_and_said_so() {
        booted_once_more(
            r"watchdog: BUG: soft lockup - CPU#0 stuck for 26s! [bash:293]\nRIP: here\n",
            1,
            &["locked up (soft lockup)", "[bash:293]"],
        );
    }

    #[test]
    fn a_guest_kernel_that_panics_while_the_command_runs_is_booted_once_more_and_said_so() {
        booted_once_more(
            r"Oops: invalid opcode: 0000 [#1] PREEMPT SMP NOPTI\nRIP: 0010:syscall_trace_enter+0xd6/0x190\nModules linked in: overlay 9p\nKernel panic - not syncing: Fatal exception in interrupt\n",
            0,
            &["panicked while running the command", "syscall_trace_enter"],
        );
    }

    #[test]
    fn a_guest_that_locks_up_twice_fails_and_one_that_fails_otherwise_is_not_repeated() {
        let (out, boots) = run_with_mock_qemu(
            r#"printf 'watchdog: BUG: soft lockup - CPU#1 stuck for 26s!\n' >"$console"; exit 1"#,
        );
        assert_eq!(boots, 2);
        assert_eq!(out.status.code(), Some(VM_FAILED));
        let (out, boots) = run_with_mock_qemu(r#"printf 'it failed\nGPUPERF-VM-EXIT 3\n' >"$out""#);
        assert_eq!(boots, 1);
        assert_eq!(out.status.code(), Some(3));
        assert_eq!(String::from_utf8_lossy(&out.stdout), "it failed\n");
    }

    #[test]
    fn kernel_series_matches_whole_components() {
        assert!(in_series("6.1.0-56-amd64", "6.1"));
        assert!(!in_series("6.12.117+deb12-amd64", "6.1"));
        assert!(in_series("6.12.117+deb12-amd64", "6.12"));
        assert!(!in_series("6.1", "6.1"));
    }
}
