//! The probe and unwinding tests, run again under Debian's 6.1 and 6.12
//! kernels in the kernel VM of `sim/kernel/` (the verifier of each kernel
//! must accept the BPF programs, and the probes must behave the same).
//!
//! The guest runs its command chrooted into an overlay of the host's root, so
//! these runs also check that the files a target maps are named from its
//! chroot (the path /proc/PID/maps shows), not from the mount namespace's
//! root: under that old naming no module file was found, and every copied
//! stack stopped where the frame-pointer walk did (after
//! `__libc_start_call_main`). `unwind::in_a_chroot__...` checks the same on
//! any kernel.

use gpuperf_test_support::process::show;
use gpuperf_test_support::vm;

fn in_guest(series: &str) {
    if vm::inside().is_some() {
        return;
    }
    let Some(guest) = vm::kernel(series) else {
        return;
    };
    let exe = std::env::current_exe().unwrap();
    let argv = vec![
        exe.into_os_string(),
        "probes::".into(),
        "unwind::".into(),
        "--test-threads=2".into(),
        // The guest's output is a serial port, a terminal: no colour codes.
        "--color=never".into(),
    ];
    let out = guest.run_in(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")),
        &argv,
        &[("GPUPERF_REQUIRE_BPF", "1")],
    );
    let log = show(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if stderr.contains("locked up (soft lockup)")
        || stderr.contains("panicked while running the command")
    {
        // Straight to the test command's output, not captured with the
        // test's: a retried guest must be seen even when the retry passes.
        use std::io::Write as _;
        let _ = writeln!(
            std::io::stderr(),
            "kernel_vm: the {} guest's kernel locked up or panicked and the run was repeated:\n{log}",
            guest.release
        );
    }
    assert!(
        out.status.success(),
        "in the {} guest:\n{log}",
        guest.release
    );
    assert!(log.contains("test result: ok."), "{log}");
    assert!(
        !log.contains(" 0 passed"),
        "no test ran in the guest:\n{log}"
    );
}

#[test]
fn probes_load_and_pass_in_a_linux_6_1_guest() {
    in_guest("6.1");
}

#[test]
fn probes_load_and_pass_in_a_linux_6_12_guest() {
    in_guest("6.12");
}
