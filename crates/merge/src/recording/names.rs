//! Output names that differ per rank, machine and run, spelled as Nsight
//! Systems spells them, so that `srun gpuperf record -o gpu.%q{SLURM_PROCID}.svg
//! -- python train.py` writes one flamegraph per rank:
//!
//! | pattern   | becomes                                                           |
//! |-----------|-------------------------------------------------------------------|
//! | `%p`      | the process id of `gpuperf` (each rank's own under srun or mpirun) |
//! | `%h`      | the host name                                                     |
//! | `%q{VAR}` | the environment variable `VAR`; an error when it is not set       |
//! | `%n`      | the first number from 1 for which no name holding `%n` exists yet |
//! | `%%`      | `%`                                                               |
//!
//! Every name given to one command takes the same `%n`, so a run's outputs
//! keep the same number. A name without `%` is left as it is.

use crate::model::Origin;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt as _, OsStringExt as _};
use std::path::{Path, PathBuf};

/// What the patterns become.
pub struct NameValues<'a> {
    /// `%p`.
    pub pid: u32,
    /// `%h`.
    pub host: &'a OsStr,
    /// `%q{VAR}`: the environment, as [`std::env::var_os`].
    pub env: &'a dyn Fn(&str) -> Option<OsString>,
}

/// A name that cannot be expanded. Displayed as one line naming the name.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum NameError {
    /// A `%` followed by anything else than a pattern.
    #[error("`{}`: `%{found}` at byte {at} is not a name pattern (%p, %h, %q{{VAR}}, %n, %%)", .name.display())]
    Unknown {
        /// The name as given.
        name: PathBuf,
        /// Byte offset of the `%`.
        at: usize,
        /// What followed it (empty at the end of the name).
        found: String,
    },
    /// `%q` without `{VAR}`.
    #[error("`{}`: `%q` at byte {at} needs a variable in braces, as `%q{{RANK}}`", .name.display())]
    NoVariable {
        /// The name as given.
        name: PathBuf,
        /// Byte offset of the `%`.
        at: usize,
    },
    /// `%q{VAR}` names a variable that is not set.
    #[error("`{}`: the environment variable {var} (%q{{{var}}}) is not set", .name.display())]
    Unset {
        /// The name as given.
        name: PathBuf,
        /// The variable.
        var: String,
    },
    /// Every number up to the limit is taken.
    #[error("`{}`: no free number for %n up to {limit}", .name.display())]
    NoFreeNumber {
        /// The first name holding `%n`.
        name: PathBuf,
        /// The highest number tried.
        limit: u32,
    },
}

/// Expands `names` as [`expand_names`] does, with this process's id, this
/// machine's host name and this process's environment; names without `%` are
/// left alone without looking anything up.
pub fn expand_names_here(mut names: Vec<&mut PathBuf>) -> Result<(), NameError> {
    if !names
        .iter()
        .any(|n| n.as_os_str().as_bytes().contains(&b'%'))
    {
        return Ok(());
    }
    let host = host_name();
    let values = NameValues {
        pid: std::process::id(),
        host: &host,
        env: &|v| std::env::var_os(v),
    };
    expand_names(&mut names, &values)
}

/// The machine's host name, as `hostname` prints it (`localhost` when the
/// kernel does not say).
pub fn host_name() -> OsString {
    std::fs::read("/proc/sys/kernel/hostname")
        .ok()
        .map(|mut b| {
            b.truncate(b.trim_ascii_end().len());
            b
        })
        .filter(|b| !b.is_empty())
        .map_or_else(|| "localhost".into(), OsString::from_vec)
}

/// The variables that launchers set to a process's distributed rank, in the
/// order they are believed: torchrun, Slurm, Open MPI, MPICH and PMIx.
pub(crate) const RANK_VARIABLES: [&str; 5] = [
    "RANK",
    "SLURM_PROCID",
    "OMPI_COMM_WORLD_RANK",
    "PMI_RANK",
    "PMIX_RANK",
];

/// The variables that launchers set to a process's rank on its host, in the
/// same order.
pub(crate) const LOCAL_RANK_VARIABLES: [&str; 5] = [
    "LOCAL_RANK",
    "SLURM_LOCALID",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "MPI_LOCALRANKID",
    "PMIX_LOCAL_RANK",
];

/// The variables that launchers set to the number of processes in the job, in
/// the same order.
pub(crate) const WORLD_SIZE_VARIABLES: [&str; 5] = [
    "WORLD_SIZE",
    "SLURM_NTASKS",
    "OMPI_COMM_WORLD_SIZE",
    "PMI_SIZE",
    "PMIX_SIZE",
];

/// The first of `vars` that the environment sets to a number.
fn number_from_env(vars: &[&str], env: &dyn Fn(&str) -> Option<OsString>) -> Option<u32> {
    vars.iter()
        .find_map(|v| env(v)?.to_str()?.trim().parse().ok())
}

/// The distributed rank the environment gives, if any.
pub(crate) fn rank_from_env(env: &dyn Fn(&str) -> Option<OsString>) -> Option<u32> {
    number_from_env(&RANK_VARIABLES, env)
}

/// This machine's name and the ranks the environment gives.
pub fn origin_from_env(env: &dyn Fn(&str) -> Option<OsString>) -> Origin {
    Origin {
        host: Some(host_name().to_string_lossy().into_owned()),
        rank: rank_from_env(env),
        local_rank: number_from_env(&LOCAL_RANK_VARIABLES, env),
        world_size: number_from_env(&WORLD_SIZE_VARIABLES, env),
    }
}

/// The highest `%n` tried before giving up.
const MAX_NUMBER: u32 = 100_000;

/// Expands the patterns of every name in `names` in place; all the names
/// holding `%n` take the same number, the first for which none of them exists.
pub fn expand_names(names: &mut [&mut PathBuf], values: &NameValues<'_>) -> Result<(), NameError> {
    let mut templates = Vec::with_capacity(names.len());
    for name in names.iter() {
        templates.push(Template::parse(name, values)?);
    }
    let numbered: Vec<&Template> = templates.iter().filter(|t| t.numbered()).collect();
    let number = match numbered.first() {
        None => 0,
        Some(first) => (1..=MAX_NUMBER)
            .find(|&n| numbered.iter().all(|t| !t.with_number(n).exists()))
            .ok_or_else(|| NameError::NoFreeNumber {
                name: first.given.clone(),
                limit: MAX_NUMBER,
            })?,
    };
    for (name, t) in names.iter_mut().zip(&templates) {
        **name = t.with_number(number);
    }
    Ok(())
}

/// A name with every pattern but `%n` expanded.
struct Template {
    given: PathBuf,
    /// The text between the `%n`s: one more part than there are `%n`s.
    parts: Vec<Vec<u8>>,
}

impl Template {
    fn parse(name: &Path, values: &NameValues<'_>) -> Result<Self, NameError> {
        let bytes = name.as_os_str().as_bytes();
        let mut parts = Vec::new();
        let mut out = Vec::new();
        let mut i = 0;
        while i < bytes.len() {
            let b = bytes[i];
            if b != b'%' {
                out.push(b);
                i += 1;
                continue;
            }
            let at = i;
            match bytes.get(i + 1) {
                Some(b'%') => out.push(b'%'),
                Some(b'p') => out.extend_from_slice(values.pid.to_string().as_bytes()),
                Some(b'h') => out.extend_from_slice(values.host.as_bytes()),
                Some(b'n') => parts.push(std::mem::take(&mut out)),
                Some(b'q') => {
                    let rest = &bytes[i + 2..];
                    let close = rest.iter().position(|&c| c == b'}');
                    let (Some(b'{'), Some(close)) = (rest.first(), close) else {
                        return Err(NameError::NoVariable {
                            name: name.to_owned(),
                            at,
                        });
                    };
                    let var = String::from_utf8_lossy(&rest[1..close]).into_owned();
                    let value = (values.env)(&var).ok_or_else(|| NameError::Unset {
                        name: name.to_owned(),
                        var,
                    })?;
                    out.extend_from_slice(value.as_bytes());
                    i += 2 + close + 1;
                    continue;
                }
                other => {
                    let found = other
                        .map(|_| {
                            let s = String::from_utf8_lossy(&bytes[i + 1..]);
                            s.chars().next().map(String::from).unwrap_or_default()
                        })
                        .unwrap_or_default();
                    return Err(NameError::Unknown {
                        name: name.to_owned(),
                        at,
                        found,
                    });
                }
            }
            i += 2;
        }
        parts.push(out);
        Ok(Self {
            given: name.to_owned(),
            parts,
        })
    }

    fn numbered(&self) -> bool {
        self.parts.len() > 1
    }

    fn with_number(&self, n: u32) -> PathBuf {
        let n = n.to_string();
        let mut out = Vec::new();
        for (i, part) in self.parts.iter().enumerate() {
            if i > 0 {
                out.extend_from_slice(n.as_bytes());
            }
            out.extend_from_slice(part);
        }
        PathBuf::from(OsString::from_vec(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(var: &str) -> Option<OsString> {
        match var {
            "RANK" => Some("3".into()),
            "SLURM_JOB_NAME" => Some("train run".into()),
            _ => None,
        }
    }

    fn values() -> NameValues<'static> {
        NameValues {
            pid: 4242,
            host: OsStr::new("node07"),
            env: &env,
        }
    }

    fn expand(names: &[&str]) -> Result<Vec<PathBuf>, NameError> {
        let mut paths: Vec<PathBuf> = names.iter().map(PathBuf::from).collect();
        let mut refs: Vec<&mut PathBuf> = paths.iter_mut().collect();
        expand_names(&mut refs, &values())?;
        Ok(paths)
    }

    #[test]
    fn the_host_name_is_the_kernels() {
        let uname = std::process::Command::new("uname")
            .arg("-n")
            .output()
            .unwrap();
        let want = String::from_utf8(uname.stdout).unwrap();
        assert_eq!(host_name(), OsStr::new(want.trim_end()));
    }

    #[test]
    fn the_rank_comes_from_the_first_launcher_variable_set() {
        assert_eq!(rank_from_env(&env), Some(3));
        let slurm = |v: &str| (v == "SLURM_PROCID").then(|| OsString::from("12"));
        assert_eq!(rank_from_env(&slurm), Some(12));
        let junk = |v: &str| (v == "RANK").then(|| OsString::from("x"));
        assert_eq!(rank_from_env(&junk), None);
    }

    #[test]
    fn the_origin_takes_each_number_from_its_own_launcher_family() {
        let torchrun = |v: &str| {
            let x = match v {
                "RANK" => "5",
                "LOCAL_RANK" => "1",
                "WORLD_SIZE" => "8",
                _ => return None,
            };
            Some(OsString::from(x))
        };
        let o = origin_from_env(&torchrun);
        assert_eq!(
            (o.rank, o.local_rank, o.world_size),
            (Some(5), Some(1), Some(8))
        );
        assert_eq!(
            o.host.as_deref().map(OsStr::new),
            Some(host_name().as_os_str())
        );
        let slurm = |v: &str| match v {
            "SLURM_PROCID" => Some(OsString::from("17")),
            "SLURM_LOCALID" => Some(OsString::from("3")),
            "SLURM_NTASKS" => Some(OsString::from(" 32 ")),
            _ => None,
        };
        let o = origin_from_env(&slurm);
        assert_eq!(
            (o.rank, o.local_rank, o.world_size),
            (Some(17), Some(3), Some(32))
        );
        let none = origin_from_env(&|_: &str| None);
        assert_eq!(
            (none.rank, none.local_rank, none.world_size),
            (None, None, None)
        );
    }

    #[test]
    fn each_pattern_becomes_its_value() {
        let got = expand(&[
            "gpu.%q{RANK}.svg",
            "%h/%p.json",
            "100%%.folded",
            "%q{SLURM_JOB_NAME}-%h-%q{RANK}",
            "plain.svg",
        ])
        .unwrap();
        let want = [
            "gpu.3.svg",
            "node07/4242.json",
            "100%.folded",
            "train run-node07-3",
            "plain.svg",
        ];
        assert_eq!(got, want.map(PathBuf::from));
    }

    #[test]
    fn names_that_cannot_be_expanded_are_refused_with_the_reason() {
        let err = |n: &str| expand(&[n]).unwrap_err().to_string();
        assert_eq!(
            err("gpu.%x.svg"),
            "`gpu.%x.svg`: `%x` at byte 4 is not a name pattern (%p, %h, %q{VAR}, %n, %%)"
        );
        assert_eq!(
            err("gpu.%"),
            "`gpu.%`: `%` at byte 4 is not a name pattern (%p, %h, %q{VAR}, %n, %%)"
        );
        assert_eq!(
            err("gpu.%qRANK.svg"),
            "`gpu.%qRANK.svg`: `%q` at byte 4 needs a variable in braces, as `%q{RANK}`"
        );
        assert_eq!(
            err("gpu.%q{RANK.svg"),
            "`gpu.%q{RANK.svg`: `%q` at byte 4 needs a variable in braces, as `%q{RANK}`"
        );
        assert_eq!(
            err("gpu.%q{SLURM_PROCID}.svg"),
            "`gpu.%q{SLURM_PROCID}.svg`: the environment variable SLURM_PROCID (%q{SLURM_PROCID}) is not set"
        );
    }

    #[test]
    fn every_numbered_name_takes_the_first_number_free_for_all_of_them() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().display();
        for taken in ["a.1.svg", "a.2.svg", "b.3.json"] {
            std::fs::write(dir.path().join(taken), "").unwrap();
        }
        let got = expand(&[
            &format!("{d}/a.%n.svg"),
            &format!("{d}/b.%n.json"),
            &format!("{d}/c.svg"),
        ])
        .unwrap();
        assert_eq!(got[0], dir.path().join("a.4.svg"));
        assert_eq!(got[1], dir.path().join("b.4.json"));
        assert_eq!(got[2], dir.path().join("c.svg"));
        // Two %n in one name take the same number.
        let got = expand(&[&format!("{d}/r%n/gpu.%n.svg")]).unwrap();
        assert_eq!(got[0], dir.path().join("r1/gpu.1.svg"));
    }
}
