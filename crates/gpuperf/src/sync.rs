//! The socket at which each CUDA process of the target waits, during `cuInit`,
//! until the profiler has given its CUDA libraries entry probes. Without it the
//! libraries are found at the process's first launch, and the launches of the
//! next few milliseconds get stacks that stop in NVIDIA code.

use std::io::{Read as _, Write as _};
use std::os::fd::AsRawFd as _;
use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::thread;
use std::time::Duration;

use anyhow::{Context as _, Result};
use gpuperf_profiler::Discoverer;
use tracing::{debug, warn};

/// Listens at `dir/sync.sock` on a thread of its own; returns the path for
/// `GPUPERF_SYNC`. The thread ends with the process.
pub fn serve(dir: &Path, discoverer: Discoverer) -> Result<PathBuf> {
    let path = dir.join("sync.sock");
    let listener = UnixListener::bind(&path)
        .with_context(|| format!("failed to listen at `{}`", path.display()))?;
    // The target runs as the invoking user. Connecting only asks us to probe
    // the connecting process itself, named by the kernel, not by the peer.
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777))
        .with_context(|| format!("failed to open up `{}`", path.display()))?;
    thread::Builder::new()
        .name("gpuperf-sync".into())
        .spawn(move || {
            for conn in listener.incoming().flatten() {
                let d = discoverer.clone();
                // One thread per process: a slow peer holds up nobody else.
                let _ = thread::Builder::new()
                    .name("gpuperf-sync-conn".into())
                    .spawn(move || answer(conn, &d));
            }
        })
        .context("failed to start the sync thread")?;
    Ok(path)
}

fn answer(mut conn: UnixStream, d: &Discoverer) {
    let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
    let mut hello = [0u8; 1];
    if conn.read_exact(&mut hello).is_err() {
        return;
    }
    match peer_pid(&conn) {
        Some(pid) => match d.discover(pid) {
            Ok(()) => debug!("probed the CUDA libraries of pid {pid} before its first launch"),
            Err(e) => warn!("pid {pid}: {e}"),
        },
        None => warn!("a process reached the sync socket without credentials"),
    }
    // Answer even on failure: the process must go on either way.
    let _ = conn.write_all(b"!");
}

fn peer_pid(conn: &UnixStream) -> Option<u32> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` is a writable ucred and `len` holds its size, as
    // SO_PEERCRED requires; the fd is open for the duration of the call.
    let rc = unsafe {
        libc::getsockopt(
            conn.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&raw mut cred).cast(),
            &mut len,
        )
    };
    (rc == 0 && cred.pid > 0).then_some(cred.pid as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peer_credentials_name_the_connecting_process() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s");
        let listener = UnixListener::bind(&path).unwrap();
        let _client = UnixStream::connect(&path).unwrap();
        let (server, _) = listener.accept().unwrap();
        assert_eq!(peer_pid(&server), Some(std::process::id()));
    }
}
