//! C builds with gcc.

use std::collections::HashSet;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use crate::process::run_ok;

/// One `gcc -o OUT ARGS…` command. Arguments keep their order: put libraries
/// after the sources that use them.
#[derive(Debug)]
#[must_use = "nothing is built until `build` or `build_once`"]
pub struct Gcc {
    out: PathBuf,
    args: Vec<OsString>,
}

impl Gcc {
    /// A build of `out`.
    pub fn new(out: impl Into<PathBuf>) -> Self {
        Gcc {
            out: out.into(),
            args: Vec::new(),
        }
    }

    /// Adds one argument (a flag, a source, a library).
    pub fn arg(mut self, a: impl AsRef<OsStr>) -> Self {
        self.args.push(a.as_ref().to_owned());
        self
    }

    /// Adds arguments.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    /// Adds `-L<dir>` and `-Wl,-rpath,<dir>`: link against, and find at run
    /// time, the libraries in `dir`.
    pub fn lib_dir(self, dir: &Path) -> Self {
        self.arg(format!("-L{}", dir.display()))
            .arg(format!("-Wl,-rpath,{}", dir.display()))
    }

    /// Runs gcc, creating the output's directory; panics with gcc's messages
    /// when it fails. Returns the output path.
    pub fn build(self) -> PathBuf {
        if let Some(dir) = self.out.parent() {
            std::fs::create_dir_all(dir)
                .unwrap_or_else(|e| panic!("failed to create `{}`: {e}", dir.display()));
        }
        let mut cmd = Command::new("gcc");
        cmd.arg("-o").arg(&self.out).args(&self.args);
        run_ok(
            &mut cmd,
            &format!("gcc -o {} {:?}", self.out.display(), self.args),
        );
        self.out
    }

    /// [`build`](Self::build), unless this process built the same output
    /// already. Builds run one at a time: tests run in parallel, and writing a
    /// file that another test is executing fails with "text file busy".
    pub fn build_once(self) -> PathBuf {
        static BUILT: Mutex<Option<HashSet<PathBuf>>> = Mutex::new(None);
        let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
        let built = built.get_or_insert_with(HashSet::new);
        if built.contains(&self.out) {
            return self.out;
        }
        let out = self.build();
        built.insert(out.clone());
        out
    }
}
