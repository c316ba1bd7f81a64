//! Checks made before loading anything, so that a missing privilege or kernel
//! feature is reported as what to do rather than as a libbpf errno.

use std::fs;
use std::path::Path;

use crate::error::{Error, Result};

const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

/// The oldest kernel with everything the probes use: ring buffers (5.8), BTF
/// tracepoints (5.5) and BPF cookies on uprobes (5.15).
pub const MIN_KERNEL: (u32, u32) = (5, 15);

/// Runs every check; the first failure names its fix.
pub fn check() -> Result<()> {
    check_privileges(&read("/proc/self/status"))?;
    check_kernel(&read("/proc/sys/kernel/osrelease"))?;
    check_btf(Path::new("/sys/kernel/btf/vmlinux"))?;
    check_uprobe_pmu(
        Path::new("/sys/bus/event_source/devices/uprobe"),
        Path::new("/sys/kernel/tracing/uprobe_events"),
        Path::new("/sys/kernel/debug/tracing/uprobe_events"),
    )
}

fn read(path: &str) -> String {
    fs::read_to_string(path).unwrap_or_default()
}

/// Root or CAP_BPF + CAP_PERFMON (or CAP_SYS_ADMIN), from `/proc/self/status`.
pub(crate) fn check_privileges(status: &str) -> Result<()> {
    let cap_eff = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or(0);
    let has = |cap: u32| cap_eff & (1 << cap) != 0;
    if has(CAP_SYS_ADMIN) || (has(CAP_BPF) && has(CAP_PERFMON)) {
        return Ok(());
    }
    Err(Error::Privilege(
        "loading eBPF probes needs root or CAP_BPF and CAP_PERFMON: run with sudo \
         (or `setcap cap_bpf,cap_perfmon+ep` on the binary)"
            .into(),
    ))
}

pub(crate) fn check_kernel(release: &str) -> Result<()> {
    let mut parts = release.trim().split(|c: char| !c.is_ascii_digit());
    let major = parts.next().and_then(|p| p.parse::<u32>().ok());
    let minor = parts.next().and_then(|p| p.parse::<u32>().ok());
    match (major, minor) {
        (Some(ma), Some(mi)) if (ma, mi) >= MIN_KERNEL => Ok(()),
        (Some(_), Some(_)) => Err(Error::Kernel(format!(
            "kernel {} is too old: the launch probes need Linux {}.{} or newer",
            release.trim(),
            MIN_KERNEL.0,
            MIN_KERNEL.1
        ))),
        _ => Ok(()), // unknown format: let libbpf decide
    }
}

pub(crate) fn check_btf(vmlinux: &Path) -> Result<()> {
    if vmlinux.exists() {
        return Ok(());
    }
    Err(Error::Kernel(format!(
        "{} is missing: the kernel was built without BTF (CONFIG_DEBUG_INFO_BTF=y is needed)",
        vmlinux.display()
    )))
}

/// uprobes attach through the `uprobe` PMU; kernels without it fall back to
/// tracefs, which must then be mounted.
pub(crate) fn check_uprobe_pmu(pmu: &Path, tracefs: &Path, debugfs: &Path) -> Result<()> {
    if pmu.exists() || tracefs.exists() || debugfs.exists() {
        return Ok(());
    }
    Err(Error::Kernel(
        "no uprobe PMU and tracefs is not mounted: run `mount -t tracefs tracefs /sys/kernel/tracing` \
         (the kernel also needs CONFIG_UPROBE_EVENTS=y)"
            .into(),
    ))
}

/// Where the syscall tracepoints' ids are read (libbpf looks here, then under debugfs).
pub const TRACEFS: &str = "/sys/kernel/tracing";

/// Mounts tracefs at `dir` when nothing is mounted there yet, as root may:
/// without it the mmap syscall tracepoints cannot attach, and the libraries a
/// short-lived program maps are never read (its stacks then stop at the first
/// frame without a frame pointer). Minimal VMs and containers often boot
/// without it. Returns whether it mounted it; a mount that fails is left to the
/// attach, which says what is missing.
pub(crate) fn mount_tracefs(dir: &Path) -> bool {
    if dir.join("events").exists() || !dir.is_dir() {
        return false;
    }
    let Ok(target) = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()) else {
        return false;
    };
    // SAFETY: every pointer is a NUL-terminated string that outlives the call;
    // a null `data` is allowed for tracefs, which takes no options.
    let r = unsafe {
        libc::mount(
            c"tracefs".as_ptr(),
            target.as_ptr(),
            c"tracefs".as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    r == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(cap_eff: &str) -> String {
        format!("Name:\tx\nCapInh:\t0000000000000000\nCapEff:\t{cap_eff}\n")
    }

    #[test]
    fn privileges_need_bpf_and_perfmon_or_sys_admin() {
        assert!(check_privileges(&status("000001ffffffffff")).is_ok());
        assert!(check_privileges(&status("0000000000200000")).is_ok()); // SYS_ADMIN
        assert!(check_privileges(&status("000000c000000000")).is_ok()); // BPF+PERFMON
        let e = check_privileges(&status("0000008000000000")).unwrap_err(); // BPF only
        assert!(e.to_string().contains("sudo"), "{e}");
        assert!(check_privileges(&status("0000000000000000")).is_err());
        assert!(check_privileges("garbage").is_err());
    }

    #[test]
    fn kernel_versions() {
        assert!(check_kernel("6.18.44-fc-v657\n").is_ok());
        assert!(check_kernel("5.15.0").is_ok());
        let e = check_kernel("5.10.0-21-amd64").unwrap_err();
        assert!(e.to_string().contains("5.15"), "{e}");
        assert!(check_kernel("").is_ok());
    }

    #[test]
    fn tracefs_is_mounted_where_none_is_and_left_alone_where_one_is() {
        let dir = tempfile::tempdir().unwrap();
        if !mount_tracefs(dir.path()) {
            // Only root may mount; nothing may have been mounted then.
            assert!(!dir.path().join("events").exists());
            gpuperf_test_support::require::skipped("not root (only root may mount tracefs)");
            return;
        }
        assert!(dir.path().join("events/syscalls").exists());
        assert!(!mount_tracefs(dir.path()), "mounted twice");
        // SAFETY: a NUL-terminated path that outlives the call.
        let r = unsafe {
            libc::umount2(
                std::ffi::CString::new(dir.path().as_os_str().as_encoded_bytes())
                    .unwrap()
                    .as_ptr(),
                0,
            )
        };
        assert_eq!(r, 0);
        assert!(!mount_tracefs(&dir.path().join("absent")));
    }

    #[test]
    fn missing_btf_and_tracefs_name_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing");
        let e = check_btf(&missing).unwrap_err();
        assert!(e.to_string().contains("CONFIG_DEBUG_INFO_BTF"), "{e}");
        assert!(check_btf(dir.path()).is_ok());
        let e = check_uprobe_pmu(&missing, &missing, &missing).unwrap_err();
        assert!(e.to_string().contains("mount -t tracefs"), "{e}");
        assert!(check_uprobe_pmu(&missing, dir.path(), &missing).is_ok());
    }
}
