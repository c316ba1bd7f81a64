//! Settings read from the environment of the profiled process. The names and
//! formats are [`gpuperf_merge::recording::env`]'s, which `gpuperf record` sets
//! them by.
//!
//! | variable | meaning | default |
//! |---|---|---|
//! | `GPUPERF_GPU_TRACE` | trace path; `%p` becomes the pid. A directory, or a value ending in `/`, gets `gpu-%p.gputrace` inside it. Without `%p` the pid is put before the extension, so that child processes never share a file. | `gpuperf-%p.gputrace` |
//! | `GPUPERF_CUPTI_PATH` | the libcupti to use; wins over the search in [`crate::locate`] | unset |
//! | `GPUPERF_INJECT_LOG` | `stderr`, or a file for diagnostics | the trace path plus `.log` |
//! | `GPUPERF_FLUSH_MS` | how often buffered records reach the file, 50 to 10000 | 500 |
//! | `GPUPERF_MARKER` | `auto`: call the launch marker while a profiler holds its semaphore; `always`; `off` | `auto` |
//! | `GPUPERF_STACKS` | `1`: take each launch's CPU stack in process ([`crate::stacks`]); `0`: don't | `1` |
//! | `GPUPERF_CAPTURE_RANGE` | `cudaProfilerApi`: record only between `cudaProfilerStart` and `cudaProfilerStop`; `nvtx:NAME`: only inside NVTX ranges NAME (needs `NVTX_INJECTION64_PATH` naming this library); see [`crate::capture`] | the whole run |
//! | `GPUPERF_NVTX` | `0`: record no NVTX ranges (a capture range's are still watched); else, with `NVTX_INJECTION64_PATH` naming this library, record every range (the `nvtx` module) | recorded |
//! | `GPUPERF_CAPTURE_DELAY_MS` | record nothing until this many milliseconds after the process started | 0 |
//! | `GPUPERF_AUTOGRAD` | `1`: with stacks, read PyTorch autograd's ids at each launch ([`crate::autograd`]); `0`: don't; `SEQ,TID`: the Node field offsets for a torch this build does not know | `1` |
//! | `GPUPERF_SYNC` | a Unix socket of the CPU profiler (`gpuperf record` sets it): before the first launch, wait there until the profiler has probed this process's CUDA libraries | unset |
//!
//! Files are created exclusively, never truncated: when the name is taken (a
//! process that execs itself keeps its pid, and so does one whose pid was
//! reused during a long recording), `.1`, `.2`, … goes before the extension
//! (`gpu-42.1.gputrace`), and the default log follows the trace's name. Readers
//! of a trace directory take every `*.gputrace` in it.

use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

use gpuperf_merge::recording::{self, env};

/// What opens and closes the window, besides the delay.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Range {
    /// No range: the window opens after the delay and stays open.
    None,
    /// Between `cudaProfilerStart` and `cudaProfilerStop` (or the driver's
    /// `cuProfilerStart`/`cuProfilerStop`).
    ProfilerApi,
    /// Inside NVTX ranges (push/pop or start/end) with this message.
    Nvtx(String),
}

/// The window asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Window {
    /// Nothing is recorded until this long after the process started.
    pub delay_ns: u64,
    /// What opens and closes the window after the delay.
    pub range: Range,
}

impl Window {
    /// Whether the whole run is recorded (no delay, no range).
    pub fn whole_run(&self) -> bool {
        self.delay_ns == 0 && self.range == Range::None
    }

    /// In words, for the trace's note.
    pub fn describe(&self) -> String {
        let range = match &self.range {
            Range::None => None,
            Range::ProfilerApi => Some("between cudaProfilerStart and cudaProfilerStop".into()),
            Range::Nvtx(n) => Some(format!("inside NVTX ranges `{n}`")),
        };
        match (self.delay_ns, range) {
            (0, Some(r)) => r,
            (d, Some(r)) => format!("{r}, after a delay of {}", secs(d)),
            (d, None) => format!("after a delay of {}", secs(d)),
        }
    }
}

/// Nanoseconds as seconds, for the notes.
pub(crate) fn secs(ns: u64) -> String {
    format!("{:.3} s", ns as f64 / 1e9)
}

/// Whether the launch marker is called.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum MarkerMode {
    /// While `gpuperf_marker_semaphore` is non-zero.
    Auto,
    /// On every recorded GPU-work call.
    Always,
    /// Never.
    Off,
}

/// Where diagnostics go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LogTarget {
    /// The process's stderr.
    Stderr,
    /// A file.
    File(PathBuf),
}

/// Settings of one process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// The trace file.
    pub trace: PathBuf,
    /// Explicit libcupti.
    pub cupti: Option<PathBuf>,
    /// Diagnostics.
    pub log: LogTarget,
    /// Flush period in milliseconds.
    pub flush_ms: u32,
    /// Marker mode.
    pub marker: MarkerMode,
    /// The CPU profiler's socket to wait at before the first launch.
    pub sync: Option<PathBuf>,
    /// Close the trace on SIGINT and SIGTERM before the program dies of them
    /// (`GPUPERF_FLUSH_ON_SIGNAL=1`, set by `gpuperf record`). Default is `false`.
    pub flush_on_signal: bool,
    /// The capture window. Default: the whole run.
    pub window: Window,
    /// Settings that were malformed and replaced by defaults, as messages.
    pub warnings: Vec<String>,
}

/// Reads [`env::CAPTURE_RANGE`]'s value.
pub fn parse_range(v: &str) -> Option<Range> {
    if v == env::CAPTURE_PROFILER_API {
        return Some(Range::ProfilerApi);
    }
    v.strip_prefix(env::CAPTURE_NVTX_PREFIX)
        .filter(|n| !n.is_empty())
        .map(|n| Range::Nvtx(n.to_owned()))
}

/// Default trace file name pattern.
pub const DEFAULT_TRACE: &str = env::DEFAULT_GPU_TRACE;
/// File name pattern inside a trace directory.
pub const DIR_TRACE: &str = recording::GPU_TRACE_IN_DIR;

impl Config {
    /// Reads the settings through `var` (normally `std::env::var_os`) for process `pid`.
    pub fn from_env(var: impl Fn(&str) -> Option<OsString>, pid: u32) -> Self {
        let mut warnings = Vec::new();
        let trace = trace_path(var(env::GPU_TRACE).as_deref(), pid);
        let log = match var(env::INJECT_LOG) {
            Some(v) if v == "stderr" => LogTarget::Stderr,
            Some(v) if !v.is_empty() => LogTarget::File(expand(Path::new(&v), pid)),
            _ => LogTarget::File(log_beside(&trace)),
        };
        let flush_ms = match var(env::FLUSH_MS) {
            None => 500,
            Some(v) => match v.to_str().and_then(|s| s.parse::<u32>().ok()) {
                Some(ms) if (50..=10_000).contains(&ms) => ms,
                _ => {
                    warnings.push(format!(
                        "{}={}: expected milliseconds from 50 to 10000; using 500",
                        env::FLUSH_MS,
                        v.to_string_lossy()
                    ));
                    500
                }
            },
        };
        let marker = match var(env::MARKER) {
            None => MarkerMode::Auto,
            Some(v) => match v.to_str() {
                Some("auto") => MarkerMode::Auto,
                Some("always") => MarkerMode::Always,
                Some("off") => MarkerMode::Off,
                _ => {
                    warnings.push(format!(
                        "{}={}: expected auto, always or off; using auto",
                        env::MARKER,
                        v.to_string_lossy()
                    ));
                    MarkerMode::Auto
                }
            },
        };
        let cupti = var(env::CUPTI_PATH)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from);
        let sync = var(env::SYNC).filter(|v| !v.is_empty()).map(PathBuf::from);
        let flush_on_signal =
            var(env::FLUSH_ON_SIGNAL).is_some_and(|v| env::parse_flag(&v) == Some(true));
        let range = match var(env::CAPTURE_RANGE).filter(|v| !v.is_empty()) {
            None => Range::None,
            Some(v) => v.to_str().and_then(parse_range).unwrap_or_else(|| {
                warnings.push(format!(
                    "{}={}: expected {} or {}NAME; recording the whole run",
                    env::CAPTURE_RANGE,
                    v.to_string_lossy(),
                    env::CAPTURE_PROFILER_API,
                    env::CAPTURE_NVTX_PREFIX,
                ));
                Range::None
            }),
        };
        let delay_ns = match var(env::CAPTURE_DELAY_MS) {
            None => 0,
            Some(v) => match v.to_str().and_then(|s| s.parse::<u64>().ok()) {
                Some(ms) => ms.saturating_mul(1_000_000),
                None => {
                    warnings.push(format!(
                        "{}={}: expected milliseconds; no delay",
                        env::CAPTURE_DELAY_MS,
                        v.to_string_lossy()
                    ));
                    0
                }
            },
        };
        let window = Window { delay_ns, range };
        Self {
            trace,
            cupti,
            log,
            flush_ms,
            marker,
            sync,
            flush_on_signal,
            window,
            warnings,
        }
    }
}

impl Config {
    /// The trace was created as `actual` (its name was taken): the default
    /// log goes beside it.
    pub fn trace_created_as(&mut self, actual: PathBuf) {
        if self.log == LogTarget::File(log_beside(&self.trace)) {
            self.log = LogTarget::File(log_beside(&actual));
        }
        self.trace = actual;
    }
}

/// The default log of a trace: its path plus `.log`.
fn log_beside(trace: &Path) -> PathBuf {
    let mut p = trace.to_owned().into_os_string();
    p.push(recording::LOG_SUFFIX);
    p.into()
}

/// `path` with `.n` before its extension (`gpu-42.gputrace` → `gpu-42.1.gputrace`).
fn numbered(path: &Path, n: u32) -> PathBuf {
    let stem = path.file_stem().unwrap_or_default().to_string_lossy();
    let name = match path.extension() {
        Some(ext) => format!("{stem}.{n}.{}", ext.to_string_lossy()),
        None => format!("{stem}.{n}"),
    };
    path.with_file_name(name)
}

/// Creates a new file at `path`, or at the first free numbered name beside it
/// (`.1`, `.2`, … before the extension) when that is taken; never opens an
/// existing file. Returns the file and the path it was created at.
pub fn create_new(path: &Path) -> io::Result<(File, PathBuf)> {
    let mut last = None;
    for n in 0..1000 {
        let p = if n == 0 {
            path.to_owned()
        } else {
            numbered(path, n)
        };
        match File::options().write(true).create_new(true).open(&p) {
            Ok(f) => return Ok((f, p)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::from(io::ErrorKind::AlreadyExists)))
}

fn expand(pattern: &Path, pid: u32) -> PathBuf {
    let s = pattern.to_string_lossy();
    PathBuf::from(s.replace("%p", &pid.to_string()))
}

fn trace_path(value: Option<&std::ffi::OsStr>, pid: u32) -> PathBuf {
    let Some(v) = value.filter(|v| !v.is_empty()) else {
        return expand(Path::new(DEFAULT_TRACE), pid);
    };
    let p = Path::new(v);
    if p.is_dir() || v.to_string_lossy().ends_with('/') {
        return expand(&p.join(DIR_TRACE), pid);
    }
    if v.to_string_lossy().contains("%p") {
        return expand(p, pid);
    }
    // No %p: keep processes apart by putting the pid before the extension.
    let stem = p.file_stem().unwrap_or_default().to_string_lossy();
    let name = match p.extension() {
        Some(ext) => format!("{stem}.{pid}.{}", ext.to_string_lossy()),
        None => format!("{stem}.{pid}"),
    };
    p.with_file_name(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn cfg(vars: &[(&str, &str)]) -> Config {
        let m: HashMap<String, OsString> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), OsString::from(v)))
            .collect();
        Config::from_env(|k| m.get(k).cloned(), 42)
    }

    #[test]
    fn defaults() {
        let c = cfg(&[]);
        assert_eq!(c.trace, PathBuf::from("gpuperf-42.gputrace"));
        assert_eq!(c.log, LogTarget::File("gpuperf-42.gputrace.log".into()));
        assert_eq!(
            (c.flush_ms, c.marker, c.cupti),
            (500, MarkerMode::Auto, None)
        );
        assert!(c.warnings.is_empty());
    }

    #[test]
    fn trace_patterns() {
        assert_eq!(
            cfg(&[("GPUPERF_GPU_TRACE", "/t/x-%p.bin")]).trace,
            PathBuf::from("/t/x-42.bin")
        );
        assert_eq!(
            cfg(&[("GPUPERF_GPU_TRACE", "/t/out.gputrace")]).trace,
            PathBuf::from("/t/out.42.gputrace")
        );
        assert_eq!(
            cfg(&[("GPUPERF_GPU_TRACE", "/t/out")]).trace,
            PathBuf::from("/t/out.42")
        );
        assert_eq!(
            cfg(&[("GPUPERF_GPU_TRACE", "/t/raw/")]).trace,
            PathBuf::from("/t/raw/gpu-42.gputrace")
        );
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().to_str().unwrap();
        assert_eq!(
            cfg(&[("GPUPERF_GPU_TRACE", d)]).trace,
            dir.path().join("gpu-42.gputrace")
        );
    }

    #[test]
    fn files_are_created_new_and_a_taken_name_gets_a_number_with_the_log_beside() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().to_str().unwrap();
        let mut c = cfg(&[("GPUPERF_GPU_TRACE", d)]);
        let (_, first) = create_new(&c.trace).unwrap();
        assert_eq!(first, dir.path().join("gpu-42.gputrace"));
        std::fs::write(&first, b"kept").unwrap();
        let (_, second) = create_new(&c.trace).unwrap();
        assert_eq!(second, dir.path().join("gpu-42.1.gputrace"));
        assert_eq!(std::fs::read(&first).unwrap(), b"kept");
        assert_eq!(
            create_new(&c.trace).unwrap().1,
            dir.path().join("gpu-42.2.gputrace")
        );
        c.trace_created_as(second);
        assert_eq!(
            c.log,
            LogTarget::File(dir.path().join("gpu-42.1.gputrace.log"))
        );
        // A log named by the user stays where it was asked for.
        let mut c = cfg(&[("GPUPERF_GPU_TRACE", d), ("GPUPERF_INJECT_LOG", "/l/x.log")]);
        c.trace_created_as(dir.path().join("gpu-42.1.gputrace"));
        assert_eq!(c.log, LogTarget::File("/l/x.log".into()));
    }

    #[test]
    fn log_and_marker_and_cupti() {
        let c = cfg(&[
            ("GPUPERF_INJECT_LOG", "stderr"),
            ("GPUPERF_MARKER", "always"),
            ("GPUPERF_CUPTI_PATH", "/opt/libcupti.so.13"),
            ("GPUPERF_FLUSH_MS", "100"),
        ]);
        assert_eq!(c.log, LogTarget::Stderr);
        assert_eq!(c.marker, MarkerMode::Always);
        assert_eq!(c.cupti, Some("/opt/libcupti.so.13".into()));
        assert_eq!(c.flush_ms, 100);
        assert_eq!(
            cfg(&[("GPUPERF_INJECT_LOG", "/l/%p.log")]).log,
            LogTarget::File("/l/42.log".into())
        );
    }

    #[test]
    fn what_gpuperf_record_sets_is_read_back_as_it_meant() {
        let dir = tempfile::tempdir().unwrap();
        let raw = dir.path().join("raw");
        let mut asked = env::Injection::new("/l/libgpuperf_inject.so".into(), raw.clone());
        asked.stacks = Some(false);
        asked.cupti = Some("/c/libcupti.so.13".into());
        asked.sync = Some("/s/sync.sock".into());
        let vars: HashMap<String, OsString> = asked
            .vars()
            .into_iter()
            .map(|(k, v)| (k.to_string_lossy().into_owned(), v))
            .collect();
        let c = Config::from_env(|k| vars.get(k).cloned(), 42);
        // A directory not made yet is still taken for one.
        assert_eq!(c.trace, raw.join("gpu-42.gputrace"));
        assert_eq!(c.cupti, asked.cupti);
        assert_eq!(c.sync, asked.sync);
        assert!(c.flush_on_signal);
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
        assert_eq!(
            crate::stacks::enabled(|k| vars.get(k).cloned()),
            (false, None)
        );
    }

    #[test]
    fn malformed_values_fall_back_with_a_warning() {
        let c = cfg(&[("GPUPERF_FLUSH_MS", "5"), ("GPUPERF_MARKER", "sometimes")]);
        assert_eq!((c.flush_ms, c.marker), (500, MarkerMode::Auto));
        assert_eq!(c.warnings.len(), 2);
        assert!(
            c.warnings[0].contains("GPUPERF_FLUSH_MS=5"),
            "{:?}",
            c.warnings
        );
        assert!(
            c.warnings[1].contains("GPUPERF_MARKER=sometimes"),
            "{:?}",
            c.warnings
        );
    }
}
