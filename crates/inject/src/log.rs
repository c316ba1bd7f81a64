//! Diagnostics of the injection library. The profiled program owns the terminal,
//! so messages go to a file unless `GPUPERF_INJECT_LOG=stderr` asks otherwise.

use std::io::{self, Write};
use std::sync::Mutex;

use crate::config::{LogTarget, create_new};
use crate::outfile::OutFile;

/// A diagnostics sink; writing never fails loudly.
pub struct Log {
    out: Mutex<Option<Box<dyn Write + Send>>>,
    pid: u32,
}

impl Log {
    /// Opens the target, a new file (never truncating one: see
    /// [`crate::config::create_new`]); a file that cannot be created leaves
    /// the log silent.
    pub fn open(target: &LogTarget, pid: u32) -> Self {
        let out: Option<Box<dyn Write + Send>> = match target {
            LogTarget::Stderr => Some(Box::new(io::stderr())),
            LogTarget::File(p) => create_new(p)
                .ok()
                .map(|(f, path)| Box::new(OutFile::new(f, &path, 64 << 10)) as _),
        };
        Self {
            out: Mutex::new(out),
            pid,
        }
    }

    /// Writes one line.
    pub fn line(&self, msg: &str) {
        // A write is a cancellation point; lines are written from callbacks too.
        let _no_cancel = crate::guard::NoCancel::new();
        let mut g = self.out.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(w) = g.as_mut() {
            let _ = writeln!(w, "gpuperf-inject[{}]: {msg}", self.pid);
            let _ = w.flush();
        }
    }
}

/// "HEAD: N WHAT" for each of `parts` whose count is not 0, joined by `sep`;
/// `None` where every count is 0. The counted sentences of the log and the
/// trace's notes.
pub(crate) fn counted(head: &str, sep: &str, parts: &[(u64, &str)]) -> Option<String> {
    let said: Vec<String> = parts
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, what)| format!("{n} {what}"))
        .collect();
    (!said.is_empty()).then(|| format!("{head}: {}", said.join(sep)))
}
