//! Running the profiled program: as the user who invoked `sudo`, never as
//! root, with its exit status turned into ours.

use std::ffi::{CStr, CString, OsStr, OsString};
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};

use anyhow::{Context as _, Result, bail};

/// Who the target runs as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    /// User id.
    pub uid: u32,
    /// Primary group id.
    pub gid: u32,
    /// Supplementary groups.
    pub groups: Vec<u32>,
    /// Login name, when the password database knows the uid.
    pub name: Option<String>,
    /// Home directory, likewise.
    pub home: Option<PathBuf>,
}

impl User {
    /// The user to run the target as: the one `sudo` names when we are root
    /// under sudo, else `None` (run as ourselves).
    pub fn from_sudo(var: impl Fn(&str) -> Option<OsString>, euid: u32) -> Result<Option<Self>> {
        if euid != 0 {
            return Ok(None);
        }
        let Some(uid) = var("SUDO_UID") else {
            return Ok(None);
        };
        let parse = |name: &str, v: &OsStr| -> Result<u32> {
            v.to_str()
                .and_then(|s| s.parse().ok())
                .with_context(|| format!("{name}={} is not a number", v.to_string_lossy()))
        };
        let uid = parse("SUDO_UID", &uid)?;
        if uid == 0 {
            return Ok(None);
        }
        let entry = passwd(uid);
        let gid = match var("SUDO_GID") {
            Some(g) => parse("SUDO_GID", &g)?,
            None => match &entry {
                Some(e) => e.gid,
                None => bail!("SUDO_UID is set but SUDO_GID is not, and uid {uid} is unknown"),
            },
        };
        let name = entry
            .as_ref()
            .map(|e| e.name.clone())
            .or_else(|| var("SUDO_USER").map(|s| s.to_string_lossy().into_owned()));
        let groups = name
            .as_deref()
            .map(|n| group_list(n, gid))
            .unwrap_or_else(|| vec![gid]);
        Ok(Some(Self {
            uid,
            gid,
            groups,
            name,
            home: entry.map(|e| e.home),
        }))
    }
}

struct PasswdEntry {
    name: String,
    gid: u32,
    home: PathBuf,
}

fn passwd(uid: u32) -> Option<PasswdEntry> {
    let mut buf = vec![0u8; 16 * 1024];
    // SAFETY: all-zero bytes are a valid `passwd` (null pointers, zero ids).
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut result = std::ptr::null_mut();
    // SAFETY: the buffer and its length match, and both out-pointers are valid
    // for writes; getpwuid_r is the thread-safe variant.
    let rc = unsafe {
        libc::getpwuid_r(
            uid,
            &mut pw,
            buf.as_mut_ptr().cast(),
            buf.len(),
            &mut result,
        )
    };
    if rc != 0 || result.is_null() {
        return None;
    }
    // SAFETY: on success the strings point into `buf`, NUL-terminated, and
    // `buf` outlives these borrows.
    let (name, home) = unsafe { (CStr::from_ptr(pw.pw_name), CStr::from_ptr(pw.pw_dir)) };
    Some(PasswdEntry {
        name: name.to_string_lossy().into_owned(),
        gid: pw.pw_gid,
        home: PathBuf::from(OsStr::from_bytes(home.to_bytes())),
    })
}

fn group_list(name: &str, gid: u32) -> Vec<u32> {
    let Ok(cname) = CString::new(name) else {
        return vec![gid];
    };
    let mut groups = vec![0 as libc::gid_t; 64];
    loop {
        let mut n = groups.len() as libc::c_int;
        // SAFETY: `groups` holds `n` writable entries and `cname` is a valid C string.
        let rc = unsafe { libc::getgrouplist(cname.as_ptr(), gid, groups.as_mut_ptr(), &mut n) };
        if rc >= 0 {
            groups.truncate(usize::try_from(n).unwrap_or(0));
            return groups;
        }
        // Too small: `n` now holds the size needed.
        let want = usize::try_from(n).unwrap_or(0).max(groups.len() * 2);
        if want > 65536 {
            return vec![gid];
        }
        groups.resize(want, 0);
    }
}

/// The program and its arguments, and the environment changes for it.
pub struct Spec {
    /// `argv[0]` as given, and the rest.
    pub argv: Vec<OsString>,
    /// Variables to set.
    pub env: Vec<(OsString, OsString)>,
    /// Run as this user instead of ourselves.
    pub user: Option<User>,
}

/// Starts the target. It stays in our process group, so a Ctrl-C at the
/// terminal reaches it directly.
pub fn spawn(spec: &Spec) -> Result<Child> {
    let (program, args) = spec
        .argv
        .split_first()
        .context("no program to run was given")?;
    let mut cmd = Command::new(program);
    cmd.args(args);
    for (k, v) in &spec.env {
        cmd.env(k, v);
    }
    if let Some(u) = &spec.user {
        if let Some(name) = &u.name {
            cmd.env("USER", name).env("LOGNAME", name);
        }
        if let Some(home) = &u.home {
            cmd.env("HOME", home);
        }
        let (uid, gid, groups) = (u.uid, u.gid, u.groups.clone());
        // SAFETY: the closure runs in the forked child before exec and only
        // makes async-signal-safe system calls on memory captured before fork.
        unsafe {
            cmd.pre_exec(move || drop_privileges(uid, gid, &groups));
        }
    }
    cmd.spawn()
        .with_context(|| format!("failed to start `{}`", program.to_string_lossy()))
}

/// Groups first, then the gid, then the uid: after `setuid` the others are
/// no longer allowed.
fn drop_privileges(uid: u32, gid: u32, groups: &[u32]) -> std::io::Result<()> {
    let check = |rc: libc::c_int| {
        if rc == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    };
    // SAFETY: `groups` is a live slice of gid_t-sized values.
    check(unsafe { libc::setgroups(groups.len(), groups.as_ptr()) })?;
    // SAFETY: plain system calls with integer arguments.
    check(unsafe { libc::setgid(gid) })?;
    // SAFETY: as above.
    check(unsafe { libc::setuid(uid) })?;
    Ok(())
}

/// The exit code a shell would report: the code, or 128 + the signal.
pub fn exit_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(c), _) => (c & 0xff) as u8,
        (None, Some(s)) => (128 + s).clamp(0, 255) as u8,
        _ => 1,
    }
}

/// Resolves `program` the way `execvp` will, for the profiler to probe the
/// executable itself (statically linked cudart). `None` when not found.
pub fn resolve(program: &OsStr, path_var: Option<&OsStr>) -> Option<PathBuf> {
    let p = Path::new(program);
    if program.as_bytes().contains(&b'/') {
        return std::path::absolute(p).ok().filter(|p| p.is_file());
    }
    std::env::split_paths(path_var?)
        .map(|d| d.join(p))
        .find(|c| is_executable(c))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    p.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Hands a file or directory we created to the target's user.
pub fn chown(path: &Path, user: Option<&User>) -> Result<()> {
    if let Some(u) = user {
        std::os::unix::fs::chown(path, Some(u.uid), Some(u.gid))
            .with_context(|| format!("failed to give `{}` to uid {}", path.display(), u.uid))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn vars(v: &[(&str, &str)]) -> impl Fn(&str) -> Option<OsString> {
        let m: HashMap<String, OsString> = v
            .iter()
            .map(|(k, v)| (k.to_string(), OsString::from(v)))
            .collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn sudo_user_is_used_only_when_root() {
        let v = vars(&[
            ("SUDO_UID", "1234"),
            ("SUDO_GID", "99"),
            ("SUDO_USER", "ann"),
        ]);
        assert_eq!(User::from_sudo(&v, 1000).unwrap(), None);
        let u = User::from_sudo(&v, 0).unwrap().unwrap();
        assert_eq!((u.uid, u.gid), (1234, 99));
        assert!(u.groups.contains(&99) || u.groups.is_empty());
        assert_eq!(User::from_sudo(vars(&[]), 0).unwrap(), None);
        assert_eq!(
            User::from_sudo(vars(&[("SUDO_UID", "0"), ("SUDO_GID", "0")]), 0).unwrap(),
            None
        );
    }

    #[test]
    fn bad_sudo_ids_are_errors_naming_the_variable() {
        let e = User::from_sudo(vars(&[("SUDO_UID", "x1")]), 0).unwrap_err();
        assert_eq!(e.to_string(), "SUDO_UID=x1 is not a number");
        let e = User::from_sudo(vars(&[("SUDO_UID", "5"), ("SUDO_GID", "")]), 0).unwrap_err();
        assert_eq!(e.to_string(), "SUDO_GID= is not a number");
    }

    #[test]
    fn root_in_the_password_database_resolves() {
        let e = passwd(0).expect("uid 0 is in /etc/passwd");
        assert_eq!(e.name, "root");
        assert_eq!(e.gid, 0);
    }

    #[test]
    fn exit_codes_follow_the_shell() {
        assert_eq!(exit_code(ExitStatus::from_raw(3 << 8)), 3);
        assert_eq!(exit_code(ExitStatus::from_raw(libc::SIGINT)), 130);
        assert_eq!(exit_code(ExitStatus::from_raw(libc::SIGKILL)), 137);
    }

    #[test]
    fn programs_resolve_like_execvp() {
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("app");
        std::fs::write(&exe, "#!/bin/sh\n").unwrap();
        let path = std::env::join_paths(["/nonexistent", dir.path().to_str().unwrap()]).unwrap();
        assert_eq!(resolve("app".as_ref(), Some(&path)), None, "not executable");
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(resolve("app".as_ref(), Some(&path)), Some(exe.clone()));
        assert_eq!(resolve(exe.as_os_str(), None), Some(exe));
        assert_eq!(resolve("missing".as_ref(), Some(&path)), None);
    }
}
