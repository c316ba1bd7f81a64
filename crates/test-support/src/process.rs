//! Running commands and showing what they printed.

use std::os::unix::process::CommandExt as _;
use std::process::{Command, Output};

/// Lossy UTF-8 text of a program's output.
pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A program's exit status, stdout and stderr, for assertion messages.
pub fn show(o: &Output) -> String {
    format!(
        "status {:?}\n--- stdout\n{}--- stderr\n{}",
        o.status,
        text(&o.stdout),
        text(&o.stderr)
    )
}

/// Runs `cmd` to completion; panics, naming it `what` and showing its output,
/// when it cannot start or fails.
#[track_caller]
pub fn run_ok(cmd: &mut Command, what: &str) -> Output {
    let o = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: failed to start: {e}"));
    assert!(o.status.success(), "{what} failed:\n{}", show(&o));
    o
}

/// Makes `cmd` run as user and group `uid`, with no supplementary groups (the
/// test must run as root). What it runs must be readable by that user: see
/// [`crate::scratch`].
pub fn as_user(cmd: &mut Command, uid: u32) -> &mut Command {
    // SAFETY: the closure runs in the child between fork and exec; it only
    // calls setgroups, setgid and setuid, which are async-signal-safe, and
    // allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setgroups(0, std::ptr::null()) != 0
                || libc::setgid(uid) != 0
                || libc::setuid(uid) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    }
}
