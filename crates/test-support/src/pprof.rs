//! `go tool pprof`, the reader the pprof profiles are checked with.

use std::process::Command;

use crate::require::Need;

/// `go tool pprof`, or `None` after [`Need::missing`] when Go is not on PATH
/// (CI installs it and sets `GPUPERF_REQUIRE_GO_PPROF=1`, so that there a
/// missing Go fails instead of skipping).
pub fn go_pprof() -> Option<Command> {
    let found = Command::new("go")
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        Need::GoPprof.missing(
            "`go` is not on PATH, so `go tool pprof` cannot read the profile \
             (Debian: apt-get install golang-go)",
        );
        return None;
    }
    let mut c = Command::new("go");
    c.args(["tool", "pprof"]);
    Some(c)
}
