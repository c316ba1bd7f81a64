//! The environment contract between `gpuperf record` and the injection
//! library: each variable's name, and the format of its value, defined once.
//! `gpuperf record` builds the variables with [`Injection::vars`]; the
//! injection library reads them by the same names (its `config` module says
//! what each does and its default).

use std::ffi::{OsStr, OsString};
use std::path::PathBuf;

/// The CUDA driver loads the library this names into each process, during `cuInit`.
pub const INJECTION_PATH: &str = "CUDA_INJECTION64_PATH";
/// Where the GPU trace goes: a file pattern (`%p` is the pid), or a directory
/// (`trace_dir_value`) that gets [`super::GPU_TRACE_IN_DIR`] inside it.
pub const GPU_TRACE: &str = "GPUPERF_GPU_TRACE";
/// The libcupti to use instead of searching for one.
pub const CUPTI_PATH: &str = "GPUPERF_CUPTI_PATH";
/// `stderr`, or the file for the library's diagnostics.
pub const INJECT_LOG: &str = "GPUPERF_INJECT_LOG";
/// How often buffered records reach the file, in milliseconds.
pub const FLUSH_MS: &str = "GPUPERF_FLUSH_MS";
/// `auto`, `always` or `off`: when the launch marker is called.
pub const MARKER: &str = "GPUPERF_MARKER";
/// A [`flag`]: whether the library takes each launch's CPU stack in process.
pub const STACKS: &str = "GPUPERF_STACKS";
/// The CPU profiler's Unix socket to wait at before the first launch.
pub const SYNC: &str = "GPUPERF_SYNC";
/// A [`flag`]: close the trace on SIGINT and SIGTERM before the program dies of them.
pub const FLUSH_ON_SIGNAL: &str = "GPUPERF_FLUSH_ON_SIGNAL";
/// PyTorch autograd's ids at each launch, with stacks: `1` (the default) reads
/// them, `0` does not, `SEQ,TID` gives the byte offsets of `Node::sequence_nr_`
/// and `Node::thread_id_` for a torch whose layout the library does not know.
pub const AUTOGRAD: &str = "GPUPERF_AUTOGRAD";

/// GPU PC sampling (CUPTI's PC Sampling API, kernel-serialized): unset, `0` or
/// `off`: off; `1` or `on`: on at CUPTI's default period; a number from 5 to
/// 31: on, sampling every 2^N cycles.
pub const PC_SAMPLING: &str = "GPUPERF_PC_SAMPLING";
/// With [`PC_SAMPLING`] on: `serialized` (the default: each sample names its
/// launch) or `continuous` (kernels keep running concurrently; samples name
/// their kernel's function only). See [`PcMode`].
pub const PC_SAMPLING_MODE: &str = "GPUPERF_PC_SAMPLING_MODE";
/// With [`PC_SAMPLING`] on: which launches are sampled, `all` or `N/M` (see
/// [`PcWindow`]). Unset: [`PcWindow::DEFAULT`].
pub const PC_SAMPLING_WINDOW: &str = "GPUPERF_PC_SAMPLING_WINDOW";
/// With [`PC_SAMPLING`] on and windows: the share of the run's time the
/// windows may take, `off` or a percentage (see [`PcBudget`]). Unset:
/// [`PcBudget::DEFAULT`].
pub const PC_SAMPLING_BUDGET: &str = "GPUPERF_PC_SAMPLING_BUDGET";

/// CUPTI's PC sampling collection mode ([`PC_SAMPLING_MODE`]).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum PcMode {
    /// `CUPTI_PC_SAMPLING_COLLECTION_MODE_KERNEL_SERIALIZED`: sampled kernels
    /// run one at a time, and each sample carries its launch's correlation id.
    #[default]
    Serialized,
    /// `CUPTI_PC_SAMPLING_COLLECTION_MODE_CONTINUOUS`: kernels run as usual;
    /// samples carry no correlation id, so they are charged to their kernel's
    /// function only, under no CPU stack.
    Continuous,
}

impl PcMode {
    /// The variable's value.
    pub fn as_str(self) -> &'static str {
        match self {
            PcMode::Serialized => "serialized",
            PcMode::Continuous => "continuous",
        }
    }

    /// Reads the variable's value.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "serialized" => Some(PcMode::Serialized),
            "continuous" => Some(PcMode::Continuous),
            _ => None,
        }
    }
}

/// Which launches PC sampling covers ([`PC_SAMPLING_WINDOW`]): windows of
/// `sampled` consecutive launches, one in each stretch of `every` launches
/// of the process. The first window opens at the first launch, so a short
/// run is sampled whole; the later ones start at a place in their stretch
/// that varies from stretch to stretch (a fixed hash of the stretch's
/// number), so a loop of `every` launches is not always sampled at the same
/// kernels, and a run is sampled the same way each time.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct PcWindow {
    /// Launches per window (1 or more).
    pub sampled: u32,
    /// Launches per stretch (`sampled` or more; equal: every launch).
    pub every: u32,
}

impl PcWindow {
    /// Every launch.
    pub const ALL: PcWindow = PcWindow {
        sampled: 1,
        every: 1,
    };
    /// The default: 100 launches in every 1000 (10 %). A run of up to 100
    /// launches is sampled whole; a long one pays for serialized kernels on
    /// a tenth of its launches, spread over the whole run.
    pub const DEFAULT: PcWindow = PcWindow {
        sampled: 100,
        every: 1000,
    };

    /// Reads `all` or `N/M` (1 <= N <= M).
    pub fn parse(s: &str) -> Result<Self, String> {
        if s == "all" {
            return Ok(Self::ALL);
        }
        let bad = || {
            format!(
                "`{s}` is not a sampling window: give `all`, or N/M to sample N consecutive \
                 launches in every M (1 <= N <= M)"
            )
        };
        let (n, m) = s.split_once('/').ok_or_else(bad)?;
        let (sampled, every) = (
            n.trim().parse::<u32>().map_err(|_| bad())?,
            m.trim().parse::<u32>().map_err(|_| bad())?,
        );
        if sampled == 0 || sampled > every {
            return Err(bad());
        }
        Ok(Self { sampled, every })
    }

    /// Whether every launch is sampled.
    pub fn is_all(self) -> bool {
        self.sampled >= self.every
    }

    /// The stretch of `every` launches that launch `i` (from 0) falls in.
    pub fn stretch(self, i: u64) -> u64 {
        i / u64::from(self.every.max(1))
    }

    /// Whether launch `i` is the first of its window: in one, and its
    /// predecessor in no window or in another stretch's.
    pub fn opens_at(self, i: u64) -> bool {
        self.contains(i)
            && (i == 0 || !self.contains(i - 1) || self.stretch(i - 1) != self.stretch(i))
    }

    /// Whether the process's launch number `i` (from 0) is in a window.
    pub fn contains(self, i: u64) -> bool {
        if self.is_all() {
            return true;
        }
        let (every, sampled) = (u64::from(self.every), u64::from(self.sampled));
        let stretch = self.stretch(i);
        let offset = if stretch == 0 {
            0
        } else {
            splitmix64(stretch) % (every - sampled + 1)
        };
        (offset..offset + sampled).contains(&(i % every))
    }
}

/// `all` or `N/M`, as [`PcWindow::parse`] reads it.
impl std::fmt::Display for PcWindow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.is_all() {
            f.write_str("all")
        } else {
            write!(f, "{}/{}", self.sampled, self.every)
        }
    }
}

/// How much of a run's time PC sampling's windows may take
/// ([`PC_SAMPLING_BUDGET`]). A sampled launch costs far more than another (on
/// an H200, kernel-serialized: about 0.8 ms, plus time in proportion to its
/// samples), so windows of a fixed share of the launches would slow a
/// launch-bound loop several times over. With a budget, a window opens only
/// while the time spent inside windows so far is at most that share of the
/// run's time; its launches are otherwise left unsampled, and counted.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum PcBudget {
    /// Every window opens.
    Off,
    /// A percentage, 1 to 100.
    Percent(u8),
}

impl PcBudget {
    /// The default: 10 % of the run's time.
    pub const DEFAULT: PcBudget = PcBudget::Percent(10);

    /// Reads `off` or a percentage from 1 to 100 (a trailing `%` allowed).
    pub fn parse(s: &str) -> Result<Self, String> {
        if s == "off" {
            return Ok(Self::Off);
        }
        match s.trim_end_matches('%').trim().parse::<u8>() {
            Ok(n) if (1..=100).contains(&n) => Ok(Self::Percent(n)),
            _ => Err(format!(
                "`{s}` is not a sampling budget: give `off`, or the percentage of the run's time \
                 the sampling windows may take, from 1 to 100"
            )),
        }
    }
}

/// `off` or the percentage, as [`PcBudget::parse`] reads it.
impl std::fmt::Display for PcBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PcBudget::Off => f.write_str("off"),
            PcBudget::Percent(n) => write!(f, "{n}"),
        }
    }
}

/// A fixed 64-bit mix (SplitMix64's finalizer): where each window starts.
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// What opens the capture window: `cudaProfilerApi` (between
/// `cudaProfilerStart` and `cudaProfilerStop`) or `nvtx:NAME` (inside NVTX
/// ranges NAME). Unset: the whole run.
pub const CAPTURE_RANGE: &str = "GPUPERF_CAPTURE_RANGE";
/// `0`: the injection library records no NVTX ranges (it still watches a
/// capture range's); unset or anything else: it does, through
/// [`NVTX_INJECTION_PATH`].
pub const NVTX: &str = "GPUPERF_NVTX";
/// Nothing is recorded until this many milliseconds after the process started.
pub const CAPTURE_DELAY_MS: &str = "GPUPERF_CAPTURE_DELAY_MS";
/// NVTX v3 loads the library this names at its first call, and calls its
/// `InitializeInjectionNvtx2`.
pub const NVTX_INJECTION_PATH: &str = "NVTX_INJECTION64_PATH";
/// [`CAPTURE_RANGE`]'s value for the CUDA profiler API.
pub const CAPTURE_PROFILER_API: &str = "cudaProfilerApi";
/// [`CAPTURE_RANGE`]'s prefix for an NVTX range name.
pub const CAPTURE_NVTX_PREFIX: &str = "nvtx:";

/// The trace pattern when [`GPU_TRACE`] is not set.
pub const DEFAULT_GPU_TRACE: &str = "gpuperf-%p.gputrace";

/// The value of a yes/no variable.
pub fn flag(on: bool) -> &'static str {
    if on { "1" } else { "0" }
}

/// Reads a yes/no variable: `1` or `on`, `0` or `off`; `None` for anything else.
pub fn parse_flag(v: &OsStr) -> Option<bool> {
    match v.to_str() {
        Some("1" | "on") => Some(true),
        Some("0" | "off") => Some(false),
        _ => None,
    }
}

/// [`GPU_TRACE`]'s value for a directory: its path and a `/`, so that it is
/// taken for a directory even before it exists.
pub(crate) fn trace_dir_value(dir: &std::path::Path) -> OsString {
    let mut v = dir.as_os_str().to_owned();
    v.push("/");
    v
}

/// What `gpuperf record` asks of the injection library: plain data, turned
/// into the target's environment by [`Injection::vars`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Injection {
    /// The injection library.
    pub library: PathBuf,
    /// The recording directory its traces go to.
    pub trace_dir: PathBuf,
    /// Whether it takes launch stacks; `None` leaves the variable alone (the
    /// user's own setting).
    pub stacks: Option<bool>,
    /// Whether it closes the trace on a fatal signal. Default is `true`: a
    /// Ctrl-C reaches the program directly, and one without a handler dies of it.
    pub flush_on_signal: bool,
    /// The libcupti to use (an absolute path).
    pub cupti: Option<PathBuf>,
    /// The CPU profiler's socket to wait at.
    pub sync: Option<PathBuf>,
    /// [`CAPTURE_RANGE`]'s value: `cudaProfilerApi` or `nvtx:NAME`.
    pub capture_range: Option<String>,
    /// [`CAPTURE_DELAY_MS`]: recording starts this long after the process.
    pub delay_ms: Option<u64>,
    /// Whether NVTX ranges are recorded ([`NVTX`]). Default is `true`.
    pub nvtx: bool,
    /// GPU PC sampling ([`PC_SAMPLING`]): `Some(None)` on at CUPTI's default
    /// period, `Some(Some(n))` every 2^n cycles; `None` off.
    pub pc_sampling: Option<Option<u8>>,
    /// With PC sampling: the collection mode ([`PC_SAMPLING_MODE`]). Default
    /// is [`PcMode::Serialized`].
    pub pc_mode: PcMode,
    /// With PC sampling: the launches sampled ([`PC_SAMPLING_WINDOW`]);
    /// `None` leaves the library's default, [`PcWindow::DEFAULT`].
    pub pc_window: Option<PcWindow>,
    /// With PC sampling: the windows' share of the run's time
    /// ([`PC_SAMPLING_BUDGET`]); `None` leaves the library's default,
    /// [`PcBudget::DEFAULT`].
    pub pc_budget: Option<PcBudget>,
}

impl Injection {
    /// The library `library`, writing its traces into `trace_dir`; nothing else set.
    pub fn new(library: PathBuf, trace_dir: PathBuf) -> Self {
        Self {
            library,
            trace_dir,
            stacks: None,
            flush_on_signal: true,
            cupti: None,
            sync: None,
            capture_range: None,
            delay_ms: None,
            nvtx: true,
            pc_sampling: None,
            pc_mode: PcMode::Serialized,
            pc_window: None,
            pc_budget: None,
        }
    }

    /// Whether the library is NVTX's injection too ([`NVTX_INJECTION_PATH`]):
    /// to record ranges, or for an NVTX capture range.
    pub fn nvtx_hook(&self) -> bool {
        self.nvtx
            || self
                .capture_range
                .as_deref()
                .is_some_and(|r| r.starts_with(CAPTURE_NVTX_PREFIX))
    }

    /// The variables to set in the target's environment.
    pub fn vars(&self) -> Vec<(OsString, OsString)> {
        let mut env: Vec<(OsString, OsString)> =
            vec![(INJECTION_PATH.into(), self.library.clone().into())];
        if let Some(on) = self.stacks {
            env.push((STACKS.into(), flag(on).into()));
        }
        env.push((GPU_TRACE.into(), trace_dir_value(&self.trace_dir)));
        if self.flush_on_signal {
            env.push((FLUSH_ON_SIGNAL.into(), flag(true).into()));
        }
        if let Some(c) = &self.cupti {
            env.push((CUPTI_PATH.into(), c.clone().into()));
        }
        if let Some(s) = &self.sync {
            env.push((SYNC.into(), s.clone().into()));
        }
        if let Some(r) = &self.capture_range {
            env.push((CAPTURE_RANGE.into(), r.into()));
        }
        if self.nvtx_hook() {
            // NVTX calls reach the library only through its own hook.
            env.push((NVTX_INJECTION_PATH.into(), self.library.clone().into()));
        }
        if !self.nvtx {
            env.push((NVTX.into(), flag(false).into()));
        }
        if let Some(ms) = self.delay_ms {
            env.push((CAPTURE_DELAY_MS.into(), ms.to_string().into()));
        }
        match self.pc_sampling {
            Some(Some(period)) => env.push((PC_SAMPLING.into(), period.to_string().into())),
            Some(None) => env.push((PC_SAMPLING.into(), "on".into())),
            None => {}
        }
        if self.pc_sampling.is_some() {
            if self.pc_mode != PcMode::Serialized {
                env.push((PC_SAMPLING_MODE.into(), self.pc_mode.as_str().into()));
            }
            if let Some(w) = self.pc_window {
                env.push((PC_SAMPLING_WINDOW.into(), w.to_string().into()));
            }
            if let Some(b) = self.pc_budget {
                env.push((PC_SAMPLING_BUDGET.into(), b.to_string().into()));
            }
        }
        env
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The value `i` gives variable `k`, if it sets it.
    fn var(i: &Injection, k: &str) -> Option<String> {
        i.vars()
            .into_iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.to_string_lossy().into_owned())
    }

    #[test]
    fn the_variables_say_what_was_asked() {
        let mut i = Injection::new("/l/inject.so".into(), "/r/raw".into());
        i.stacks = Some(false);
        i.sync = Some("/s/sync.sock".into());
        assert_eq!(var(&i, INJECTION_PATH).as_deref(), Some("/l/inject.so"));
        assert_eq!(var(&i, GPU_TRACE).as_deref(), Some("/r/raw/"));
        assert_eq!(var(&i, STACKS).as_deref(), Some("0"));
        assert_eq!(var(&i, FLUSH_ON_SIGNAL).as_deref(), Some("1"));
        assert_eq!(var(&i, SYNC).as_deref(), Some("/s/sync.sock"));
        assert_eq!(var(&i, CUPTI_PATH), None);
        assert_eq!(var(&i, CAPTURE_RANGE), None);
        // NVTX ranges are recorded unless turned off.
        assert_eq!(
            var(&i, NVTX_INJECTION_PATH).as_deref(),
            Some("/l/inject.so")
        );
        assert_eq!(var(&i, NVTX), None);
        i.nvtx = false;
        assert_eq!(var(&i, NVTX_INJECTION_PATH), None);
        assert_eq!(var(&i, NVTX).as_deref(), Some("0"));
        i.capture_range = Some("nvtx:step".into());
        i.delay_ms = Some(1500);
        assert_eq!(var(&i, CAPTURE_RANGE).as_deref(), Some("nvtx:step"));
        assert_eq!(
            var(&i, NVTX_INJECTION_PATH).as_deref(),
            Some("/l/inject.so")
        );
        assert_eq!(var(&i, CAPTURE_DELAY_MS).as_deref(), Some("1500"));
        assert_eq!(parse_flag(OsStr::new(flag(true))), Some(true));
        assert_eq!(parse_flag(OsStr::new(flag(false))), Some(false));
        assert_eq!(parse_flag(OsStr::new("yes")), None);
    }

    #[test]
    fn pc_windows_read_back_and_sample_their_share_of_launches() {
        for s in ["all", "1/1", "5/20", "100/1000"] {
            let w = PcWindow::parse(s).unwrap();
            assert_eq!(PcWindow::parse(&w.to_string()), Ok(w), "{s}");
        }
        assert_eq!(PcWindow::parse("1/1").unwrap().to_string(), "all");
        for bad in ["0/10", "11/10", "10", "a/b", "-1/3", ""] {
            assert!(PcWindow::parse(bad).is_err(), "{bad}");
        }
        let w = PcWindow::parse("5/20").unwrap();
        // The first window opens at the first launch.
        assert!((0..5).all(|i| w.contains(i)));
        assert!((5..20).all(|i| !w.contains(i)));
        // Exactly 5 in each stretch of 20, not always at the same place.
        let starts: std::collections::BTreeSet<u64> = (1..50u64)
            .map(|k| {
                let n = (k * 20..k * 20 + 20).filter(|&i| w.contains(i)).count();
                assert_eq!(n, 5, "stretch {k}");
                (k * 20..).find(|&i| w.contains(i)).unwrap() % 20
            })
            .collect();
        assert!(starts.len() > 3, "{starts:?}");
        // Each stretch's window opens once, at its first launch.
        let opens: Vec<u64> = (0..120).filter(|&i| w.opens_at(i)).collect();
        assert_eq!(opens.len(), 6, "{opens:?}");
        let stretches: Vec<u64> = opens.iter().map(|&i| w.stretch(i)).collect();
        assert_eq!(stretches, [0, 1, 2, 3, 4, 5]);
        assert!(opens.iter().all(|&i| i == 0 || !w.contains(i - 1)));
        assert_eq!(opens[0], 0);
        assert!((0..1000).all(|i| PcWindow::ALL.contains(i)));
        assert_eq!(PcMode::parse("continuous"), Some(PcMode::Continuous));
        assert_eq!(
            PcMode::parse(PcMode::Serialized.as_str()),
            Some(PcMode::Serialized)
        );
        assert_eq!(PcMode::parse("fast"), None);
        let mut i = Injection::new("/l/inject.so".into(), "/r/raw".into());
        i.pc_mode = PcMode::Continuous;
        i.pc_window = Some(w);
        // Without PC sampling, its mode and window are not passed.
        assert!(!i.vars().iter().any(|(k, _)| k == PC_SAMPLING_WINDOW));
        i.pc_sampling = Some(None);
        assert_eq!(var(&i, PC_SAMPLING).as_deref(), Some("on"));
        assert_eq!(var(&i, PC_SAMPLING_MODE).as_deref(), Some("continuous"));
        assert_eq!(var(&i, PC_SAMPLING_WINDOW).as_deref(), Some("5/20"));
        // The budget is passed only when asked for, as the library reads it.
        assert_eq!(var(&i, PC_SAMPLING_BUDGET), None);
        i.pc_budget = Some(PcBudget::Percent(3));
        assert_eq!(var(&i, PC_SAMPLING_BUDGET).as_deref(), Some("3"));
    }

    /// `off` or 1 to 100 (with or without `%`); it reads back what it writes.
    #[test]
    fn a_pc_sampling_budget_is_off_or_a_percentage() {
        assert_eq!(PcBudget::parse("off"), Ok(PcBudget::Off));
        assert_eq!(PcBudget::parse("10%"), Ok(PcBudget::Percent(10)));
        assert_eq!(PcBudget::parse("100"), Ok(PcBudget::Percent(100)));
        for b in [PcBudget::Off, PcBudget::DEFAULT, PcBudget::Percent(1)] {
            assert_eq!(PcBudget::parse(&b.to_string()), Ok(b));
        }
        for bad in ["0", "101", "-5", "ten", "", "5.5"] {
            assert!(PcBudget::parse(bad).is_err(), "{bad}");
        }
    }
}
