//! GPU PC sampling through CUPTI's PC Sampling API (`cupti_pcsampling.h`), on
//! when `GPUPERF_PC_SAMPLING` asks for it: which SASS instruction each kernel's
//! warps were at, and why they stalled.
//!
//! ```text
//! CONTEXT_CREATED   → Enable, stall-reason table, configure (mode, period,
//!                     16 MB scratch, data buffer; start/stop when windowed)
//! MODULE_LOADED     → the cubin copied, for SASS-to-source lines; the
//!                     configured buffer drained; continuous, then GetData
//! launch (API enter) → counted; at a window's edge, Start or Stop in its context;
//!                     kernel-serialized and sampled, or stopping: waits until
//!                     the context's previous sampled launch has returned (`gate`)
//! launch (API exit) → the configured buffer drained (a kernel-serialized
//!                     kernel's or a window's range ended), then GetData until
//!                     nothing remains (not in continuous mode without windows);
//!                     the gate freed
//! flush (periodic)  → continuous without windows: GetData until nothing
//!                     remains; the samples' modules hashed (cuptiGetCubinCrc)
//!                     and source lines found, outside any callback
//! CONTEXT_DESTROY   → Stop, drain, GetData, Disable (the context still lives)
//! exit              → the same for every context left
//! ```
//!
//! Two buffers per context: CUPTI writes the one given at configuration by
//! itself when a range ends (in kernel-serialized mode, every kernel: seen on
//! an H200 with libcupti 13.0, where records left there were overwritten or
//! cleared; with start/stop control, every Stop) and at Disable;
//! `cuptiPCSamplingGetData` fills the other. The configured one is read only
//! where CUPTI is known to be done writing it: on the launching thread once
//! the launch returns, in the module callback, and after Disable. Whether
//! GetData returns a range's records again after CUPTI wrote them there is
//! not documented: a repeat is counted once, and said (`Seen`).
//!
//! CUPTI's samples are one [`Sample`] per PC and stall reason, as CUPTI
//! gives them: the `*_not_issued` reasons (a subset of their base reason's
//! samples) too, which the reader keeps out of the totals. After a full
//! hardware buffer sampling is disabled and enabled again in the context
//! (CUPTI samples no more until then), and the drops are said.
//!
//! Windows ([`PcWindow`], `GPUPERF_PC_SAMPLING_WINDOW`): with start/stop
//! control, CUPTI samples (and, kernel-serialized, serializes) only between
//! `cuptiPCSamplingStart` and `cuptiPCSamplingStop`; the launch callback
//! opens and closes the windows by the process's launch count, and counts the
//! launches in and out of them for the trace's note.
//!
//! Threads and locks: `contexts` is held across every PC sampling call on a
//! context (GetData, Disable, Enable, Start, Stop), and by the context's destruction
//! callback while it takes the context out of the list: a flush thread's
//! GetData and a context's destruction never overlap, and no call is made on
//! a context after its destruction's callback returns. `inner` (modules,
//! notes, counts) is taken after `contexts`, never before, and never across
//! a CUPTI call. A launch takes `contexts` only where a range can end at it
//! (kernel-serialized, or windowed), where no flush reads: a flush's GetData
//! never holds up a launch. Without admin rights CUPTI refuses `Enable`
//! (`CUPTI_ERROR_INSUFFICIENT_PRIVILEGES`): [`Sampler::take_notes`] says so
//! once, with what to do, and everything else is recorded as usual.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::{CStr, c_char, c_void};
use std::path::Path;
use std::ptr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use gpuperf_merge::model::{
    PC_BUDGET_NOTE, PC_CONTINUOUS_NOTE, PC_SERIALIZED_NOTE, PcLaunches, not_issued_base,
};
pub use gpuperf_merge::recording::env::{PcBudget, PcMode, PcWindow};

use crate::clock::monotonic_ns;
use crate::guard::lock;
use crate::sys::{
    self, CUpti_GetCubinCrcParams, CUpti_GetSassToSourceCorrelationParams,
    CUpti_ModuleResourceData, CUpti_PCSamplingData, CUpti_PCSamplingDisableParams,
    CUpti_PCSamplingEnableParams, CUpti_PCSamplingGetDataParams,
    CUpti_PCSamplingGetNumStallReasonsParams, CUpti_PCSamplingGetStallReasonsParams,
    CUpti_PCSamplingPCData, CUpti_PCSamplingStallReason, PcSamplingConfigurationInfo,
    PcSamplingConfigurationInfoParams, PcSamplingFunctions, Status,
};
use gate::Gates;

mod gate;

/// `GPUPERF_PC_SAMPLING`'s variable name.
pub const VAR: &str = gpuperf_merge::recording::env::PC_SAMPLING;
/// `GPUPERF_PC_SAMPLING_MODE`'s variable name.
pub const MODE_VAR: &str = gpuperf_merge::recording::env::PC_SAMPLING_MODE;
/// `GPUPERF_PC_SAMPLING_WINDOW`'s variable name.
pub const WINDOW_VAR: &str = gpuperf_merge::recording::env::PC_SAMPLING_WINDOW;
/// `GPUPERF_PC_SAMPLING_BUDGET`'s variable name.
pub const BUDGET_VAR: &str = gpuperf_merge::recording::env::PC_SAMPLING_BUDGET;

/// What `GPUPERF_PC_SAMPLING` and its mode and window variables ask for.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// The sampling period, 2^period cycles (5 to 31); `None`: CUPTI's default.
    pub period: Option<u32>,
    /// The collection mode. Default is kernel-serialized.
    pub mode: PcMode,
    /// The launches sampled. Default is [`PcWindow::DEFAULT`].
    pub window: PcWindow,
    /// The windows' share of the run's time. Default is [`PcBudget::DEFAULT`].
    pub budget: PcBudget,
}

impl Settings {
    /// On at `period`, kernel-serialized, in the default windows.
    pub fn new(period: Option<u32>) -> Self {
        Self {
            period,
            mode: PcMode::Serialized,
            window: PcWindow::DEFAULT,
            budget: PcBudget::DEFAULT,
        }
    }

    /// Applies `GPUPERF_PC_SAMPLING_MODE`, `GPUPERF_PC_SAMPLING_WINDOW` and
    /// `GPUPERF_PC_SAMPLING_BUDGET`; a value not understood leaves the
    /// default, with a warning.
    pub fn with_env(
        mut self,
        mode: Option<&std::ffi::OsStr>,
        window: Option<&std::ffi::OsStr>,
        budget: Option<&std::ffi::OsStr>,
    ) -> (Self, Vec<String>) {
        let mut warnings = Vec::new();
        if let Some(v) = mode {
            match v.to_str().and_then(PcMode::parse) {
                Some(m) => self.mode = m,
                None => warnings.push(format!(
                    "{MODE_VAR}={}: expected serialized or continuous; kernel-serialized",
                    v.to_string_lossy()
                )),
            }
        }
        if let Some(w) = parsed(WINDOW_VAR, window, PcWindow::parse, &mut warnings, || {
            format!("sampling {}", PcWindow::DEFAULT)
        }) {
            self.window = w;
        }
        if let Some(b) = parsed(BUDGET_VAR, budget, PcBudget::parse, &mut warnings, || {
            format!("the windows may take {} % of the run", PcBudget::DEFAULT)
        }) {
            self.budget = b;
        }
        (self, warnings)
    }
}

/// `value` of variable `var` read by `parse`; where it is not understood, a
/// warning saying what is used instead (`fallback`), and `None`.
fn parsed<T>(
    var: &str,
    value: Option<&std::ffi::OsStr>,
    parse: impl FnOnce(&str) -> Result<T, String>,
    warnings: &mut Vec<String>,
    fallback: impl FnOnce() -> String,
) -> Option<T> {
    let v = value?;
    match v.to_str().map(parse) {
        Some(Ok(t)) => Some(t),
        Some(Err(e)) => {
            warnings.push(format!("{var}: {e}; {}", fallback()));
            None
        }
        None => {
            warnings.push(format!("{var} is not UTF-8; {}", fallback()));
            None
        }
    }
}

/// Reads `GPUPERF_PC_SAMPLING`: unset, `0` or `off`: off; `1` or `on`: on at
/// CUPTI's default period; a number from 5 to 31: on at that period. Anything
/// else is off, with a warning.
pub fn from_env(v: Option<&std::ffi::OsStr>) -> (Option<Settings>, Option<String>) {
    let Some(v) = v else {
        return (None, None);
    };
    match v.to_str() {
        Some("" | "0" | "off") => (None, None),
        Some("1" | "on") => (Some(Settings::new(None)), None),
        Some(s) => match s.parse::<u32>() {
            Ok(p) if (5..=31).contains(&p) => (Some(Settings::new(Some(p))), None),
            _ => (
                None,
                Some(format!(
                    "{VAR}={s}: expected on, off, or a sampling period from 5 to 31; PC sampling is off"
                )),
            ),
        },
        None => (
            None,
            Some(format!("{VAR} is not UTF-8; PC sampling is off")),
        ),
    }
}

thread_local! {
    /// Set by a windowed launch's entry on its thread: whether its return
    /// reads (the window was open at it).
    static READ_AT_EXIT: std::cell::Cell<bool> = const { std::cell::Cell::new(true) };
    /// Set by a windowed sampled launch's entry on its thread: when it began
    /// (0: not sampled), for the budget.
    static SAMPLED_AT: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// PCs one `cuptiPCSamplingGetData` call can return.
const PCS_PER_CALL: usize = 1024;
/// `cuptiPCSamplingGetData` calls per context and flush, at most: a bound, so
/// that a CUPTI that keeps answering "more" cannot hold a flush forever.
const MAX_CALLS: usize = 4096;
/// `CUPTI_PC_SAMPLING_COLLECTION_MODE_CONTINUOUS`.
const CONTINUOUS: u64 = 1;
/// `CUPTI_PC_SAMPLING_COLLECTION_MODE_KERNEL_SERIALIZED`.
const KERNEL_SERIALIZED: u64 = 2;
/// `CUPTI_PC_SAMPLING_OUTPUT_DATA_FORMAT_PARSED`.
const PARSED: u64 = 1;
/// `CUpti_PCSamplingConfigurationAttributeType` values.
const ATTR_SAMPLING_PERIOD: u32 = 1;
const ATTR_SCRATCH_BUFFER_SIZE: u32 = 3;
const ATTR_COLLECTION_MODE: u32 = 5;
const ATTR_START_STOP: u32 = 6;
const ATTR_OUTPUT_FORMAT: u32 = 7;
const ATTR_DATA_BUFFER: u32 = 8;
/// `CUPTI_STALL_REASON_STRING_SIZE`.
const REASON_NAME_SIZE: usize = 128;
/// CUPTI's buffer for decoded PCs: 16 MB, about 90,000 PCs with all stall
/// reasons, as NVIDIA's samples, Proton and parcagpu set it. CUPTI's default,
/// 1 MB (about 5,500), drops the samples of PCs beyond it between two reads.
const SCRATCH_BYTES: u64 = 16 << 20;
/// How long a sampled launch waits for another thread's in its context to
/// return ([`gate`]) before it goes on without.
const GATE_WAIT: std::time::Duration = std::time::Duration::from_secs(5);
/// The first CUPTI API version (CUDA 12.4) whose `CUpti_PCSamplingPCData`
/// ends with `correlationId`: older ones write records of another size into
/// the buffer.
const FIRST_API_WITH_CORRELATION: u32 = 22;

/// The one line the summary shows when CUPTI refuses PC sampling for want of rights.
pub const PRIVILEGE_NOTE: &str = "PC sampling refused (CUPTI_ERROR_INSUFFICIENT_PRIVILEGES): \
GPU profiling needs admin rights; run as root, or load the NVIDIA driver with \
NVreg_RestrictProfilingToAdminUsers=0. Everything else was recorded";

/// Samples of one instruction with one stall reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sample {
    /// The launch's correlation id (0 when not one launch's).
    pub correlation_id: u32,
    /// CUPTI's context id.
    pub context: u32,
    /// The kernel function.
    pub function: Arc<str>,
    /// The instruction's offset in it.
    pub pc_offset: u64,
    /// The module's CRC.
    pub cubin_crc: u64,
    /// The stall reason's index in CUPTI's table.
    pub reason_index: u32,
    /// Its name.
    pub reason: Arc<str>,
    /// How many samples.
    pub samples: u32,
    /// Source file and line, when the module has line information; found
    /// by [`Sampler::take`], outside CUPTI's callbacks.
    pub source: Option<(Arc<str>, u32)>,
}

/// The data buffer one context's samples are read into.
struct Buffer {
    data: Box<CUpti_PCSamplingData>,
    pcs: Vec<CUpti_PCSamplingPCData>,
    reasons: Vec<Vec<CUpti_PCSamplingStallReason>>,
}

impl Buffer {
    fn new(num_reasons: usize) -> Self {
        // SAFETY: CUpti_PCSamplingPCData and CUpti_PCSamplingData are plain C
        // structs of integers and pointers, for which all zeroes is valid.
        let zero_pc: CUpti_PCSamplingPCData = unsafe { std::mem::zeroed() };
        let mut reasons: Vec<Vec<CUpti_PCSamplingStallReason>> = (0..PCS_PER_CALL)
            .map(|_| {
                vec![
                    CUpti_PCSamplingStallReason {
                        pcSamplingStallReasonIndex: 0,
                        samples: 0,
                    };
                    num_reasons.max(1)
                ]
            })
            .collect();
        let mut pcs = vec![zero_pc; PCS_PER_CALL];
        for (pc, r) in pcs.iter_mut().zip(&mut reasons) {
            pc.size = size_of::<CUpti_PCSamplingPCData>();
            pc.stallReason = r.as_mut_ptr();
        }
        // SAFETY: as above.
        let mut data: Box<CUpti_PCSamplingData> = Box::new(unsafe { std::mem::zeroed() });
        data.size = size_of::<CUpti_PCSamplingData>();
        data.collectNumPcs = PCS_PER_CALL;
        data.pPcData = pcs.as_mut_ptr();
        Self { data, pcs, reasons }
    }
}

/// A context PC sampling is enabled in.
struct Context {
    /// The `CUcontext`.
    ctx: usize,
    id: u32,
    reasons: HashMap<u32, Arc<str>>,
    /// Given to CUPTI at configuration; CUPTI writes it at a range's end.
    config: Buffer,
    /// Filled by `cuptiPCSamplingGetData`.
    read: Buffer,
    /// Between `cuptiPCSamplingStart` and `cuptiPCSamplingStop` (windowed).
    started: bool,
    /// Sampling is enabled (false once a re-enable after a full hardware
    /// buffer failed: no call is made on it again).
    enabled: bool,
    /// CUPTI said its hardware buffer was full: sampling is re-enabled at the
    /// end of this read.
    full: bool,
    /// The PC records last taken from the configured buffer, to know them if
    /// `cuptiPCSamplingGetData` returns them again.
    config_seen: Seen,
}

// SAFETY: the buffer's raw pointers point into memory the Context owns (its
// boxes and vectors, which never move once made) and CUPTI writes them only
// during a call made with the Context in hand; `ctx` is an opaque handle.
unsafe impl Send for Context {}

/// A PC record as CUPTI keys it within a range: module, offset, launch.
type PcKey = (u64, u64, u32);

/// An instruction: module CRC, function, offset.
type Instruction = (u64, Arc<str>, u64);

/// A source file and line.
type SourceLine = (Arc<str>, u32);

/// The records of one range read from the configured buffer, with their
/// sample counts, and the drops it reported. `cupti_pcsampling.h` does not
/// say whether `cuptiPCSamplingGetData` returns a range's records again after
/// CUPTI wrote them there: a record of the same range, PC, launch and count
/// read again is the same record, dropped and counted (`Inner::duplicates`).
#[derive(Default)]
struct Seen {
    range: Option<u64>,
    records: HashMap<PcKey, u64>,
    dropped: u64,
    full: bool,
}

/// Where a buffer's records came from.
#[derive(Copy, Clone, PartialEq, Eq)]
enum Whence {
    /// The configured buffer, written by CUPTI at a range's end or Disable.
    Config,
    /// `cuptiPCSamplingGetData`.
    GetData,
}

#[derive(Default)]
struct Inner {
    /// Whether sampling was ever enabled in a context.
    enabled_once: bool,
    /// Cubins loaded whose CRC is not yet asked (at the first sample that
    /// names a module not known, [`Sampler::add_lines`]).
    unhashed: Vec<Arc<[u8]>>,
    /// Cubins by CRC.
    modules: HashMap<u64, Arc<[u8]>>,
    lines: HashMap<Instruction, Option<SourceLine>>,
    /// Samples whose module (by CRC) no `MODULE_LOADED` cubin hashed to:
    /// CRC → samples. Their lines are unknown, whatever the module has.
    unknown_modules: BTreeMap<u64, u64>,
    /// Samples read, their source lines not yet found.
    pending: Vec<Sample>,
    /// Samples read, with their source lines.
    ready: Vec<Sample>,
    notes: Vec<String>,
    refused: bool,
    /// Start or Stop calls CUPTI refused, and the first one's call and status.
    window_errors: u64,
    first_window_error: Option<(&'static str, Status)>,
    /// GetData calls that failed for another reason than a full hardware
    /// buffer, and the first one's status.
    read_errors: u64,
    first_read_error: Option<Status>,
    dropped: u64,
    buffer_full: u64,
    /// Re-enables after a full hardware buffer, and those that failed (the
    /// first one's call and status): sampling then stays off in the context.
    resets: u64,
    failed_reset: Option<(&'static str, Status)>,
    /// PC records returned twice (see [`Seen`]), not counted again.
    duplicates: u64,
    /// PC records `cuptiPCSamplingDisable` discarded: more than the
    /// configured buffer holds.
    discarded: u64,
    /// Where the PC records came from, for the log: how CUPTI hands them
    /// over is what its header leaves open.
    reads: Reads,
}

/// PC records taken from each buffer, and the calls and ranges behind them.
#[derive(Default)]
struct Reads {
    config_records: u64,
    config_ranges: u64,
    get_data_calls: u64,
    get_data_records: u64,
}

/// PC sampling for every context of the process.
pub struct Sampler {
    f: PcSamplingFunctions,
    settings: Settings,
    /// The contexts sampling is enabled in; held across every call on one.
    contexts: Mutex<Vec<Context>>,
    inner: Mutex<Inner>,
    /// Launches seen (the window's clock), and those sampled.
    launches: AtomicU64,
    sampled: AtomicU64,
    /// Contexts sampling was enabled in and not yet disabled: without
    /// windows, a launch counts as sampled without taking `contexts`.
    enabled: AtomicU64,
    /// The function names CUPTI allocated for PC records. One may be shared
    /// by all the records of a function, in every read ("should not be
    /// modified or freed until post processing of all the records is done",
    /// `cupti_pcsampling.h`): each is freed once, after the last read.
    names: Mutex<HashSet<usize>>,
    /// Kernel-serialized: one sampled launch at a time in a context.
    gates: Gates,
    /// When sampling was set up, and the time spent since inside sampled
    /// launch calls (ns; serialized, such a call lasts until its kernel ended
    /// and its samples were read): the budget's clock.
    t0_ns: u64,
    sampled_ns: AtomicU64,
    /// Launches in the windows left unsampled to keep within the budget, and
    /// the stretch of the last window the budget closed (`u64::MAX`: none).
    over_budget: AtomicU64,
    skipped_stretch: AtomicU64,
}

impl Sampler {
    /// Resolves the PC Sampling API from the libcupti at `path`, whose
    /// `cuptiGetVersion` answered `api`. A CUPTI older than API 22 (CUDA
    /// 12.4) is refused: its PC records have another layout.
    pub fn new(path: &Path, settings: Settings, api: u32) -> Result<Self, String> {
        if crate::locate::cupti_major(api).is_none_or(|major| major == 12)
            && api < FIRST_API_WITH_CORRELATION
        {
            return Err(format!(
                "CUPTI API version {api} predates version {FIRST_API_WITH_CORRELATION} \
                 (CUDA 12.4), whose PC records name their launch; use the libcupti of CUDA \
                 12.4 or later (GPUPERF_CUPTI_PATH)"
            ));
        }
        // SAFETY: `path` is the libcupti `Cupti::load` already loaded.
        let f = unsafe { PcSamplingFunctions::load(path) }?;
        Ok(Self {
            f,
            settings,
            contexts: Mutex::new(Vec::new()),
            inner: Mutex::new(Inner::default()),
            launches: AtomicU64::new(0),
            sampled: AtomicU64::new(0),
            enabled: AtomicU64::new(0),
            names: Mutex::new(HashSet::new()),
            gates: Gates::new(GATE_WAIT),
            t0_ns: monotonic_ns(),
            sampled_ns: AtomicU64::new(0),
            over_budget: AtomicU64::new(0),
            skipped_stretch: AtomicU64::new(u64::MAX),
        })
    }

    /// Whether `GetData` is made at every flush: in continuous mode without
    /// windows, where no range ends at a launch. Otherwise each range is read
    /// on the launching thread as it ends, and a flush reads none: a flush's
    /// read would hold `contexts` while launches wait for it.
    fn reads_at_flush(&self) -> bool {
        self.settings.mode == PcMode::Continuous && self.settings.window.is_all()
    }

    /// `CONTEXT_CREATED`: reads the stall-reason table, enables and configures
    /// PC sampling in `ctx`. A refusal is kept as a note.
    ///
    /// # Safety
    /// `ctx` must be the live `CUcontext` of the callback.
    pub unsafe fn context_created(
        &self,
        ctx: *mut c_void,
        id: u32,
        status_text: &dyn Fn(Status) -> String,
    ) {
        if lock(&self.inner).refused {
            return;
        }
        // SAFETY: as this function's contract.
        match unsafe { self.enable(ctx, id) } {
            Ok(c) => {
                lock(&self.contexts).push(c);
                self.enabled.fetch_add(1, Relaxed);
                let mut inner = lock(&self.inner);
                if !std::mem::replace(&mut inner.enabled_once, true) {
                    let note = self.mode_note();
                    inner.notes.push(note);
                }
            }
            Err((call, st)) => {
                let mut inner = lock(&self.inner);
                if st == sys::INSUFFICIENT_PRIVILEGES {
                    inner.refused = true;
                    inner.notes.push(PRIVILEGE_NOTE.to_owned());
                } else {
                    inner.notes.push(format!(
                        "PC sampling not enabled in context {id}: {call} failed: {}",
                        status_text(st)
                    ));
                }
            }
        }
    }

    /// # Safety
    /// As [`Sampler::context_created`].
    unsafe fn enable(&self, ctx: *mut c_void, id: u32) -> Result<Context, (&'static str, Status)> {
        // Enable comes first: CUPTI answers the stall-reason queries of a
        // context only once sampling is enabled in it (INVALID_OPERATION
        // before, as NVIDIA's PC sampling samples order them).
        // SAFETY: the caller vouches for the context.
        check("cuptiPCSamplingEnable", unsafe { self.enable_in(ctx) })?;
        // SAFETY: as this function's contract.
        let configured = unsafe { self.configure(ctx, id) };
        if configured.is_err() {
            // SAFETY: sampling was enabled in this live context just above.
            unsafe { self.disable_in(ctx) };
        }
        configured
    }

    /// `cuptiPCSamplingEnable` in `ctx`.
    ///
    /// # Safety
    /// `ctx` must be live.
    unsafe fn enable_in(&self, ctx: *mut c_void) -> Status {
        let mut p = CUpti_PCSamplingEnableParams {
            size: size_of::<CUpti_PCSamplingEnableParams>(),
            pPriv: ptr::null_mut(),
            ctx: ctx.cast(),
        };
        // SAFETY: a valid params struct; the caller vouches for the context.
        unsafe { (self.f.enable)(&mut p) }
    }

    /// `cuptiPCSamplingDisable` in `ctx`.
    ///
    /// # Safety
    /// `ctx` must be live, with sampling enabled.
    unsafe fn disable_in(&self, ctx: *mut c_void) -> Status {
        let mut p = CUpti_PCSamplingDisableParams {
            size: size_of::<CUpti_PCSamplingDisableParams>(),
            pPriv: ptr::null_mut(),
            ctx: ctx.cast(),
        };
        // SAFETY: a valid params struct; the caller vouches for the context.
        unsafe { (self.f.disable)(&mut p) }
    }

    /// Reads the stall-reason table and configures sampling in `ctx`, where
    /// it is enabled.
    ///
    /// # Safety
    /// As [`Sampler::context_created`].
    unsafe fn configure(
        &self,
        ctx: *mut c_void,
        id: u32,
    ) -> Result<Context, (&'static str, Status)> {
        let mut n = 0usize;
        let mut p = CUpti_PCSamplingGetNumStallReasonsParams {
            size: size_of::<CUpti_PCSamplingGetNumStallReasonsParams>(),
            pPriv: ptr::null_mut(),
            ctx: ctx.cast(),
            numStallReasons: &mut n,
        };
        // SAFETY: `p` is a valid params struct with a valid out-pointer.
        check("cuptiPCSamplingGetNumStallReasons", unsafe {
            (self.f.get_num_stall_reasons)(&mut p)
        })?;
        let n = n.min(4096);
        let mut index = vec![0u32; n];
        let mut names: Vec<Vec<c_char>> = (0..n).map(|_| vec![0; REASON_NAME_SIZE]).collect();
        let mut name_ptrs: Vec<*mut c_char> = names.iter_mut().map(|v| v.as_mut_ptr()).collect();
        let mut p = CUpti_PCSamplingGetStallReasonsParams {
            size: size_of::<CUpti_PCSamplingGetStallReasonsParams>(),
            pPriv: ptr::null_mut(),
            ctx: ctx.cast(),
            numStallReasons: n,
            stallReasonIndex: index.as_mut_ptr(),
            stallReasons: name_ptrs.as_mut_ptr(),
        };
        // SAFETY: `n` indices and `n` name buffers of CUPTI_STALL_REASON_STRING_SIZE bytes.
        check("cuptiPCSamplingGetStallReasons", unsafe {
            (self.f.get_stall_reasons)(&mut p)
        })?;
        let reasons = index
            .iter()
            .zip(&mut names)
            .map(|(&i, name)| {
                *name.last_mut().expect("not empty") = 0;
                // SAFETY: NUL-terminated just above, within the buffer.
                let text = unsafe { CStr::from_ptr(name.as_ptr()) };
                (i, Arc::from(text.to_string_lossy()))
            })
            .collect();
        let mut c = Context {
            ctx: ctx as usize,
            id,
            reasons,
            config: Buffer::new(n),
            read: Buffer::new(n),
            started: false,
            enabled: true,
            full: false,
            config_seen: Seen::default(),
        };
        // SAFETY: as this function's contract.
        check("cuptiPCSamplingSetConfigurationAttribute", unsafe {
            self.apply(&mut c)
        })?;
        Ok(c)
    }

    /// Sets `c`'s configuration: mode, start/stop control, format, scratch
    /// buffer, the configured buffer, the period.
    ///
    /// # Safety
    /// `c.ctx` must be live, with sampling enabled.
    unsafe fn apply(&self, c: &mut Context) -> Status {
        let attr = |t, v: u64| PcSamplingConfigurationInfo {
            attribute_type: t,
            attribute_status: 0,
            data: [v, 0, 0],
        };
        let mode = match self.settings.mode {
            PcMode::Continuous => CONTINUOUS,
            _ => KERNEL_SERIALIZED,
        };
        let windowed = !self.settings.window.is_all();
        let mut attrs = vec![
            attr(ATTR_COLLECTION_MODE, mode),
            attr(ATTR_START_STOP, u64::from(windowed)),
            attr(ATTR_OUTPUT_FORMAT, PARSED),
            attr(ATTR_SCRATCH_BUFFER_SIZE, SCRATCH_BYTES),
            attr(
                ATTR_DATA_BUFFER,
                ptr::from_mut::<CUpti_PCSamplingData>(&mut c.config.data) as u64,
            ),
        ];
        if let Some(period) = self.settings.period {
            attrs.push(attr(ATTR_SAMPLING_PERIOD, u64::from(period)));
        }
        let mut p = PcSamplingConfigurationInfoParams {
            size: size_of::<PcSamplingConfigurationInfoParams>(),
            p_priv: ptr::null_mut(),
            ctx: c.ctx as *mut c_void,
            num_attributes: attrs.len(),
            info: attrs.as_mut_ptr(),
        };
        // SAFETY: `attrs` outlives the call; the data buffer lives in `c`,
        // which is kept until Disable; the caller vouches for the context.
        unsafe { (self.f.set_configuration_attribute)(&mut p) }
    }

    /// `MODULE_LOADED` in context `ctx`: keeps a copy of the cubin, for
    /// source lines, and reads the range the load ended (`cupti_pcsampling.h`:
    /// in continuous mode a flush is due at each module load). Its CRC is
    /// asked later, by [`Sampler::take`]: `cuptiGetCubinCrc` has been seen to
    /// deadlock inside a callback (gpufl), and hashing every module a program
    /// loads would slow each load down.
    ///
    /// # Safety
    /// `m` must be the callback's valid `CUpti_ModuleResourceData`, and
    /// `ctx` its live context.
    pub unsafe fn module_loaded(&self, ctx: *mut c_void, m: *const CUpti_ModuleResourceData) {
        // SAFETY: as this function's contract.
        let m = unsafe { m.read_unaligned() };
        if m.pCubin.is_null() || m.cubinSize == 0 {
            return;
        }
        // SAFETY: CUPTI passes the module's image and its size.
        let image = unsafe { std::slice::from_raw_parts(m.pCubin.cast::<u8>(), m.cubinSize) };
        lock(&self.inner).unhashed.push(Arc::from(image));
        // A module load ends a range: CUPTI may have written the configured
        // buffer, which the next range's records would replace.
        // SAFETY: the module's context is live during its callback.
        unsafe { self.range_ended(ctx, self.settings.mode == PcMode::Continuous) };
    }

    /// `CONTEXT_DESTROY_STARTING`: reads what is left and disables sampling,
    /// while the context still lives. Its samples wait for the next [`Sampler::take`].
    ///
    /// # Safety
    /// `ctx` must be the live `CUcontext` of the callback.
    pub unsafe fn context_destroyed(&self, ctx: *mut c_void) {
        // Waits for a flush reading this context to finish; once out of the
        // list, no other thread calls CUPTI on it.
        let mut contexts = lock(&self.contexts);
        let Some(i) = contexts.iter().position(|c| c.ctx == ctx as usize) else {
            return;
        };
        let mut c = contexts.swap_remove(i);
        // SAFETY: the context is alive during its destruction's callback.
        let got = unsafe { self.finish(&mut c) };
        drop(contexts);
        lock(&self.inner).pending.extend(got);
    }

    /// A launch's API-enter callback (the outermost call only): counts it,
    /// and with windows, starts or stops sampling in its context as the
    /// window it falls in says.
    ///
    /// # Safety
    /// `ctx` must be the launching call's live `CUcontext` (or null).
    pub unsafe fn launch(&self, ctx: *mut c_void) {
        let i = self.launches.fetch_add(1, Relaxed);
        let serialized = self.settings.mode != PcMode::Continuous;
        if self.settings.window.is_all() {
            // Nothing to start or stop: no lock, which a flush's read holds.
            if self.enabled.load(Relaxed) > 0 {
                self.sampled.fetch_add(1, Relaxed);
                if serialized {
                    self.gates.enter(ctx as usize);
                }
            }
            return;
        }
        let want = self.settings.window.contains(i);
        let mut contexts = lock(&self.contexts);
        let Some(mut c) = contexts
            .iter_mut()
            .find(|c| c.ctx == ctx as usize && c.enabled)
        else {
            return;
        };
        let mut gated = false;
        if serialized && c.started && !want {
            // A Stop ends the range: another thread's sampled kernel still in
            // flight would have its records cut there. The Stop waits, as a
            // sampled launch does, until that launch has returned and read
            // them; not under `contexts`, which that return takes.
            drop(contexts);
            self.gates.enter(ctx as usize);
            gated = true;
            contexts = lock(&self.contexts);
            let Some(again) = contexts
                .iter_mut()
                .find(|c| c.ctx == ctx as usize && c.enabled)
            else {
                self.gates.exit();
                return;
            };
            c = again;
        }
        // A window opens only while the sampled launches so far kept within
        // the budget: decided at its first launch, for the whole window (a
        // Start again inside it, after a re-enable, is not a new window). The
        // first window always opens. A launch outside the windows reads no clock.
        let now = if want { monotonic_ns() } else { 0 };
        let want = want && self.window_within_budget(i, now);
        let was_started = c.started;
        if c.started != want {
            // SAFETY: the caller vouches for the context.
            let st = unsafe { self.start_stop(c, want) };
            if st != sys::SUCCESS {
                // The window's launches go unsampled: said once, with the status.
                let call = if want {
                    "cuptiPCSamplingStart"
                } else {
                    "cuptiPCSamplingStop"
                };
                let mut inner = lock(&self.inner);
                inner.window_errors += 1;
                inner.first_window_error.get_or_insert((call, st));
            }
        }
        let sampled = want && c.started;
        if sampled {
            self.sampled.fetch_add(1, Relaxed);
            let _ = SAMPLED_AT.try_with(|t| t.set(now));
        }
        // A range can end at this launch's return only if the window was
        // open: a launch outside the windows reads nothing.
        let _ = READ_AT_EXIT.try_with(|r| r.set(was_started || c.started));
        drop(contexts);
        if sampled && serialized && !gated {
            self.gates.enter(ctx as usize);
        }
    }

    /// Whether launch `i`, in a window, is sampled as far as the budget goes:
    /// at a window's first launch the budget decides for the whole window; a
    /// window it closed has each of its launches counted.
    fn window_within_budget(&self, i: u64, now: u64) -> bool {
        let w = self.settings.window;
        let stretch = w.stretch(i);
        if stretch == 0 {
            return true;
        }
        if self.skipped_stretch.load(Relaxed) == stretch {
            self.over_budget.fetch_add(1, Relaxed);
            return false;
        }
        if w.opens_at(i) && !self.within_budget(now) {
            self.skipped_stretch.store(stretch, Relaxed);
            self.over_budget.fetch_add(1, Relaxed);
            return false;
        }
        true
    }

    /// Whether the sampled launches so far took at most the budget's share
    /// of the time since sampling was set up.
    fn within_budget(&self, now: u64) -> bool {
        match self.settings.budget {
            PcBudget::Off => true,
            PcBudget::Percent(p) => {
                let spent = u128::from(self.sampled_ns.load(Relaxed)) * 100;
                spent <= u128::from(p) * u128::from(now.saturating_sub(self.t0_ns))
            }
        }
    }

    /// `cuptiPCSamplingStart` (`start`) or `cuptiPCSamplingStop` in `c`.
    ///
    /// # Safety
    /// `c.ctx` must be live and enabled.
    unsafe fn start_stop(&self, c: &mut Context, start: bool) -> Status {
        let ctx = (c.ctx as *mut c_void).cast();
        let st = if start {
            let mut p = sys::CUpti_PCSamplingStartParams {
                size: size_of::<sys::CUpti_PCSamplingStartParams>(),
                pPriv: ptr::null_mut(),
                ctx,
            };
            // SAFETY: a valid params struct; the caller vouches for the context.
            unsafe { (self.f.start)(&mut p) }
        } else {
            let mut p = sys::CUpti_PCSamplingStopParams {
                size: size_of::<sys::CUpti_PCSamplingStopParams>(),
                pPriv: ptr::null_mut(),
                ctx,
            };
            // SAFETY: as above.
            unsafe { (self.f.stop)(&mut p) }
        };
        if st == sys::SUCCESS {
            c.started = start;
        }
        st
    }

    /// The note that says how the samples were taken.
    fn mode_note(&self) -> String {
        match self.settings.mode {
            PcMode::Continuous if self.settings.window.is_all() => format!(
                "{PC_CONTINUOUS_NOTE}: kernels ran concurrently, and the samples name no \
                 launch: they are charged to their kernel's function only, under no CPU stack"
            ),
            // The context is not synchronized at a window's edge (Proton
            // does): that would drain the GPU's queue at every edge and change
            // the overlap the rest of the recording measures.
            PcMode::Continuous => format!(
                "{PC_CONTINUOUS_NOTE}: kernels ran concurrently, and the samples name no \
                 launch: they are charged to their kernel's function only, under no CPU stack; \
                 the windows ({}) open and close at launch calls, not on the GPU, so kernels \
                 still queued at an edge are sampled as they run",
                self.settings.window
            ),
            _ => format!(
                "{PC_SERIALIZED_NOTE} (CUPTI's kernel-serialized mode, window {}): the sampled \
                 kernels ran one at a time, so kernel times and overlaps are those of a \
                 serialized run",
                self.settings.window
            ),
        }
    }

    /// The samples read so far (a flush; in continuous mode without windows,
    /// CUPTI's are read first); with `last`, each context's last range is
    /// read and sampling disabled (the exit path). With those of contexts
    /// destroyed since the last call.
    pub fn take(&self, last: bool) -> Vec<Sample> {
        // Lines first: where a read below never returns, those read before
        // have theirs ([`Sampler::take_read`]).
        self.add_pending_lines();
        let mut got = Vec::new();
        if last || self.reads_at_flush() {
            let mut contexts = lock(&self.contexts);
            for c in contexts.iter_mut() {
                // SAFETY: a context in the list is live: its destruction's
                // callback takes it out first, under this lock.
                got.append(&mut unsafe {
                    if last {
                        self.finish(c)
                    } else {
                        self.read_and_reset(c)
                    }
                });
            }
            if last {
                contexts.clear();
                for name in lock(&self.names).drain() {
                    // SAFETY: each a name CUPTI allocated for the caller, freed
                    // once, now that sampling is disabled everywhere.
                    unsafe { libc::free(name as *mut c_void) };
                }
            }
        }
        self.add_lines(&mut got);
        // Those read by launches meanwhile.
        self.add_pending_lines();
        let mut all = std::mem::take(&mut lock(&self.inner).ready);
        all.append(&mut got);
        all
    }

    /// Finds the lines of the samples read so far, and keeps them ready.
    fn add_pending_lines(&self) {
        let mut samples = std::mem::take(&mut lock(&self.inner).pending);
        if samples.is_empty() {
            return;
        }
        self.add_lines(&mut samples);
        lock(&self.inner).ready.append(&mut samples);
    }

    /// The samples read already (at the end of serialized launches, or from
    /// contexts destroyed since), without calling CUPTI: what the exit path
    /// has when [`Sampler::take`] is stuck inside CUPTI. Those read since
    /// its start are without source lines (finding them is a CUPTI call).
    pub fn take_read(&self) -> Vec<Sample> {
        let mut inner = lock(&self.inner);
        let mut all = std::mem::take(&mut inner.ready);
        all.append(&mut inner.pending);
        all
    }

    /// The launches inside and outside the sampling windows, for the trace's
    /// `PC_LAUNCHES` record at the close; `None` when sampling was never on.
    pub fn launches(&self) -> Option<PcLaunches> {
        self.launch_counts(&lock(&self.inner))
    }

    fn launch_counts(&self, inner: &Inner) -> Option<PcLaunches> {
        inner.enabled_once.then(|| {
            let launches = self.launches.load(Relaxed);
            let sampled = self.sampled.load(Relaxed).min(launches);
            PcLaunches {
                sampled,
                unsampled: launches - sampled,
            }
        })
    }

    /// The log's line on how CUPTI handed the records over, at the close;
    /// `None` when sampling was never on.
    pub fn reads_line(&self) -> Option<String> {
        let inner = lock(&self.inner);
        let r = &inner.reads;
        inner.enabled_once.then(|| {
            format!(
                "PC sampling reads: {} PC records from the configured buffer ({} ranges), {} \
                 from {} successful cuptiPCSamplingGetData calls; {} returned twice, {} re-enables, {} \
                 discarded by Disable; {} launches waited for another thread's sampled launch to return",
                r.config_records,
                r.config_ranges,
                r.get_data_records,
                r.get_data_calls,
                inner.duplicates,
                inner.resets,
                inner.discarded,
                self.gates.waited.load(Relaxed)
            )
        })
    }

    /// Notes for the trace (a refusal, drops), each once.
    pub fn take_notes(&self, closing: bool) -> Vec<String> {
        let mut inner = lock(&self.inner);
        let mut notes = std::mem::take(&mut inner.notes);
        if !closing {
            return notes;
        }
        if let Some(counts) = self.launch_counts(&inner) {
            notes.push(counts.note(&self.settings.window.to_string()));
        }
        let over = self.over_budget.load(Relaxed);
        if over > 0 {
            notes.push(format!(
                "{PC_BUDGET_NOTE} {over} launches in the windows were left unsampled to keep the \
                 sampled launches within {} % of the run's time (they took {:.2} s of {:.2} s; \
                 --pc-sampling-budget off samples every window)",
                self.settings.budget,
                self.sampled_ns.load(Relaxed) as f64 / 1e9,
                monotonic_ns().saturating_sub(self.t0_ns) as f64 / 1e9
            ));
        }
        if let Some((call, st)) = inner.first_window_error {
            notes.push(format!(
                "PC sampling: {} window starts or stops failed (first: {call}, CUPTI status {st}); \
                 the launches of those windows were not sampled",
                inner.window_errors
            ));
        }
        if let Some(st) = inner.first_read_error {
            notes.push(format!(
                "PC sampling: {} reads of CUPTI's samples failed (first: cuptiPCSamplingGetData, \
                 CUPTI status {st}); the samples they held are missing",
                inner.read_errors
            ));
        }
        if inner.dropped > 0 || inner.buffer_full > 0 {
            let mut text = format!(
                "PC sampling: {} samples dropped by CUPTI, its hardware buffer full {} times",
                inner.dropped, inner.buffer_full
            );
            if inner.resets > 0 {
                text.push_str(&format!(
                    "; sampling was disabled and enabled again {} times to go on (CUPTI samples \
                     no more in a context once its hardware buffer was full)",
                    inner.resets
                ));
            }
            if let Some((call, st)) = inner.failed_reset {
                text.push_str(&format!(
                    "; enabling it again failed ({call}, CUPTI status {st}): the context's later \
                     launches were not sampled"
                ));
            }
            notes.push(text);
        }
        if inner.discarded > 0 {
            notes.push(format!(
                "PC sampling: {} PC records discarded by cuptiPCSamplingDisable (more than its \
                 buffer of {PCS_PER_CALL} holds); their samples are missing",
                inner.discarded
            ));
        }
        if self.gates.timed_out() {
            notes.push(format!(
                "PC sampling: a launch waited {} s for another thread's sampled launch in its \
                 context to return, and went on; launches were no longer held for each other \
                 after that, so a kernel's PC records may have been replaced by a later kernel's \
                 before they were read",
                self.gates.wait().as_secs()
            ));
        }
        if !inner.unknown_modules.is_empty() {
            let samples: u64 = inner.unknown_modules.values().sum();
            let crcs: Vec<String> = inner
                .unknown_modules
                .keys()
                .take(3)
                .map(|crc| format!("{crc:#x}"))
                .collect();
            let more = inner.unknown_modules.len().saturating_sub(crcs.len());
            notes.push(format!(
                "PC sampling: {samples} samples name modules whose cubin CUPTI's MODULE_LOADED \
                 callbacks never gave (cubin CRC {}{}): their source lines are unknown",
                crcs.join(", "),
                if more > 0 {
                    format!(" and {more} more")
                } else {
                    String::new()
                }
            ));
        }
        if inner.duplicates > 0 {
            notes.push(format!(
                "PC sampling: {} PC records that CUPTI returned twice (from the configured buffer \
                 at a range's end, then from cuptiPCSamplingGetData) were counted once",
                inner.duplicates
            ));
        }
        notes
    }

    /// The end of sampling in `c`: its window stopped, what CUPTI holds
    /// read, and sampling disabled.
    ///
    /// # Safety
    /// `c.ctx` must be live.
    unsafe fn finish(&self, c: &mut Context) -> Vec<Sample> {
        if !c.enabled {
            return Vec::new();
        }
        if c.started {
            // Stop ends the window's range, whose records CUPTI then writes
            // into the configured buffer.
            // SAFETY: as this function's contract; enabled.
            unsafe { self.start_stop(c, false) };
        }
        let mut out = self.drain_config(c);
        // SAFETY: as above.
        out.append(&mut unsafe { self.read(c) });
        // SAFETY: as above.
        out.append(&mut unsafe { self.disable(c) });
        self.enabled.fetch_sub(1, Relaxed);
        out
    }

    /// Disables sampling in `c`, returning what the configured buffer held
    /// and the records Disable copies into it (what GetData had not returned;
    /// those beyond the buffer are discarded, and counted).
    ///
    /// # Safety
    /// `c.ctx` must be live and enabled.
    unsafe fn disable(&self, c: &mut Context) -> Vec<Sample> {
        let mut out = self.drain_config(c);
        c.enabled = false;
        c.started = false;
        // SAFETY: the caller vouches for the context.
        if unsafe { self.disable_in(c.ctx as *mut c_void) } == sys::SUCCESS {
            let discarded = c.config.data.remainingNumPcs;
            out.append(&mut self.drain_config(c));
            lock(&self.inner).discarded += discarded as u64;
        }
        out
    }

    /// After a full hardware buffer: disables and enables sampling again in
    /// `c` with its configuration (parcagpu saw CUPTI sample no more in the
    /// context until then; Stop and Start did not help). Returns what
    /// Disable wrote.
    ///
    /// # Safety
    /// `c.ctx` must be live and enabled.
    unsafe fn reset(&self, c: &mut Context) -> Vec<Sample> {
        c.full = false;
        // SAFETY: as this function's contract.
        let out = unsafe { self.disable(c) };
        // SAFETY: as above.
        let mut again = check("cuptiPCSamplingEnable", unsafe {
            self.enable_in(c.ctx as *mut c_void)
        });
        if again.is_ok() {
            // SAFETY: as above, and sampling is enabled in the context again.
            again = check("cuptiPCSamplingSetConfigurationAttribute", unsafe {
                self.apply(c)
            });
        }
        let mut inner = lock(&self.inner);
        match again {
            Ok(()) => {
                c.enabled = true;
                inner.resets += 1;
            }
            Err(e) => {
                self.enabled.fetch_sub(1, Relaxed);
                inner.failed_reset.get_or_insert(e);
            }
        }
        out
    }

    /// The records CUPTI wrote into `c`'s configured buffer, which is then
    /// marked empty for CUPTI to fill again; its drops are counted.
    fn drain_config(&self, c: &mut Context) -> Vec<Sample> {
        let d = &mut c.config.data;
        let (dropped, full) = (d.droppedSamples, d.hardwareBufferFull != 0);
        d.droppedSamples = 0;
        d.hardwareBufferFull = 0;
        c.config_seen = Seen {
            range: None,
            records: HashMap::new(),
            dropped,
            full,
        };
        self.count_drops(c, dropped, full);
        let out = self.parse(c, Whence::Config);
        c.config.data.totalNumPcs = 0;
        c.config.data.remainingNumPcs = 0;
        out
    }

    /// Counts a buffer's dropped samples and full hardware buffer; a full
    /// one has `c` enabled again at the end of the read.
    fn count_drops(&self, c: &mut Context, dropped: u64, full: bool) {
        if dropped == 0 && !full {
            return;
        }
        c.full |= full;
        let mut inner = lock(&self.inner);
        inner.dropped += dropped;
        inner.buffer_full += u64::from(full);
    }

    /// A launch's API-exit callback (the outermost call only). A range ended
    /// with it: in kernel-serialized mode the kernel's, and with windows the
    /// window's that its entry stopped. That range's records are in the
    /// configured buffer (and, serialized, with GetData), and are taken now,
    /// before the next range's replace them.
    ///
    /// # Safety
    /// `ctx` must be the launching call's live `CUcontext` (or null).
    pub unsafe fn launch_exit(&self, ctx: *mut c_void) {
        if self.reads_at_flush() {
            // Continuous and unwindowed: no range ends at a launch.
            return;
        }
        if self.settings.window.is_all() || READ_AT_EXIT.try_with(|r| r.take()).unwrap_or(true) {
            // SAFETY: the launching call's context is live during its callback.
            unsafe { self.range_ended(ctx, true) };
        }
        // What this sampled launch cost, its read included, against the budget.
        let at = SAMPLED_AT.try_with(|t| t.take()).unwrap_or(0);
        if at != 0 {
            let took = monotonic_ns().saturating_sub(at);
            self.sampled_ns.fetch_add(took, Relaxed);
        }
        // Its records read: the context's next sampled launch may go on.
        self.gates.exit();
    }

    /// A range of `ctx` ended: its configured buffer is drained and, with
    /// `get_data`, CUPTI's records read; the samples wait for the next
    /// [`Sampler::take`].
    ///
    /// # Safety
    /// `ctx` must be live (a context not in the list is left alone).
    unsafe fn range_ended(&self, ctx: *mut c_void, get_data: bool) {
        let mut contexts = lock(&self.contexts);
        let Some(c) = contexts
            .iter_mut()
            .find(|c| c.ctx == ctx as usize && c.enabled)
        else {
            return;
        };
        let mut got = self.drain_config(c);
        if get_data {
            // SAFETY: as this function's contract.
            got.append(&mut unsafe { self.read_and_reset(c) });
        } else if c.full {
            // SAFETY: as above.
            got.append(&mut unsafe { self.reset(c) });
        }
        drop(contexts);
        if !got.is_empty() {
            lock(&self.inner).pending.extend(got);
        }
    }

    /// [`Sampler::read`], then after a full hardware buffer, [`Sampler::reset`].
    ///
    /// # Safety
    /// `c.ctx` must be live and enabled.
    unsafe fn read_and_reset(&self, c: &mut Context) -> Vec<Sample> {
        // SAFETY: as this function's contract.
        let mut out = unsafe { self.read(c) };
        if c.full {
            // SAFETY: as above.
            out.append(&mut unsafe { self.reset(c) });
        }
        out
    }

    /// Reads one context's samples until CUPTI has none left.
    ///
    /// # Safety
    /// `c.ctx` must be live and enabled.
    unsafe fn read(&self, c: &mut Context) -> Vec<Sample> {
        let mut out = Vec::new();
        for _ in 0..MAX_CALLS {
            let d = &mut c.read.data;
            d.totalNumPcs = 0;
            d.remainingNumPcs = 0;
            d.droppedSamples = 0;
            d.hardwareBufferFull = 0;
            let mut p = CUpti_PCSamplingGetDataParams {
                size: size_of::<CUpti_PCSamplingGetDataParams>(),
                pPriv: ptr::null_mut(),
                ctx: (c.ctx as *mut c_void).cast(),
                pcSamplingData: ptr::from_mut::<CUpti_PCSamplingData>(d).cast(),
            };
            // SAFETY: a valid params struct naming our buffer of PCS_PER_CALL
            // records, each with room for every stall reason.
            let st = unsafe { (self.f.get_data)(&mut p) };
            let (mut dropped, mut full) = (d.droppedSamples, d.hardwareBufferFull != 0);
            let seen = &mut c.config_seen;
            if seen.range == Some(d.rangeId) {
                // The configured buffer's range again: its drops were counted.
                let same = dropped.min(seen.dropped);
                seen.dropped -= same;
                dropped -= same;
                full &= !std::mem::take(&mut seen.full);
            }
            self.count_drops(c, dropped, full);
            // A full hardware buffer is counted above, with its drops.
            if st != sys::SUCCESS && !full && !c.full {
                let mut inner = lock(&self.inner);
                inner.read_errors += 1;
                inner.first_read_error.get_or_insert(st);
            }
            if st != sys::SUCCESS {
                break;
            }
            let got = c.read.data.totalNumPcs;
            out.append(&mut self.parse(c, Whence::GetData));
            // One call returns one range's PCs (start/stop control makes a
            // range per window): the next range may follow.
            if got == 0 && c.read.data.remainingNumPcs == 0 {
                break;
            }
        }
        out
    }

    /// The samples in `c`'s buffer `from`; keeps the function names CUPTI
    /// allocated, to free. Records of the configured buffer are remembered,
    /// and GetData's that repeat them dropped ([`Seen`]).
    fn parse(&self, c: &mut Context, from: Whence) -> Vec<Sample> {
        let Context {
            id,
            reasons,
            config,
            read,
            config_seen: seen,
            ..
        } = c;
        let buf = match from {
            Whence::Config => config,
            Whence::GetData => read,
        };
        let n = buf.data.totalNumPcs.min(PCS_PER_CALL);
        let range = buf.data.rangeId;
        if from == Whence::Config && n > 0 {
            seen.range = Some(range);
        }
        let repeats = from == Whence::GetData && seen.range == Some(range);
        let mut out = Vec::new();
        let mut duplicates = 0;
        for i in 0..n {
            let pc = buf.pcs[i];
            if !pc.functionName.is_null() {
                lock(&self.names).insert(pc.functionName as usize);
            }
            buf.pcs[i].functionName = ptr::null_mut();
            let count = pc.stallReasonCount.min(buf.reasons[i].len());
            let records = &buf.reasons[i][..count];
            let key = (pc.cubinCrc, pc.pcOffset, pc.correlationId);
            let total: u64 = records.iter().map(|r| u64::from(r.samples)).sum();
            match from {
                Whence::Config => {
                    seen.records.insert(key, total);
                }
                Whence::GetData if repeats && seen.records.get(&key) == Some(&total) => {
                    seen.records.remove(&key);
                    duplicates += 1;
                    continue;
                }
                Whence::GetData => {}
            }
            // SAFETY: CUPTI wrote a NUL-terminated name, freed after the last read.
            let function: Arc<str> = unsafe { c_string(pc.functionName) }.into();
            for r in records {
                if r.samples == 0 {
                    continue;
                }
                out.push(Sample {
                    correlation_id: pc.correlationId,
                    context: *id,
                    function: Arc::clone(&function),
                    pc_offset: pc.pcOffset,
                    cubin_crc: pc.cubinCrc,
                    reason_index: r.pcSamplingStallReasonIndex,
                    reason: reasons
                        .get(&r.pcSamplingStallReasonIndex)
                        .cloned()
                        .unwrap_or_else(|| {
                            format!("stall reason {}", r.pcSamplingStallReasonIndex).into()
                        }),
                    samples: r.samples,
                    source: None,
                });
            }
        }
        if n > 0 || from == Whence::GetData {
            let mut inner = lock(&self.inner);
            inner.duplicates += duplicates;
            let reads = &mut inner.reads;
            match from {
                Whence::Config => {
                    reads.config_records += n as u64;
                    reads.config_ranges += 1;
                }
                Whence::GetData => {
                    reads.get_data_records += n as u64;
                    reads.get_data_calls += 1;
                }
            }
        }
        out
    }

    /// Each sample's source file and line, where its module has line
    /// information. Called outside CUPTI's callbacks: the modules loaded since
    /// the last call are hashed first, when a sample names a module not known.
    fn add_lines(&self, samples: &mut [Sample]) {
        let unknown = {
            let inner = lock(&self.inner);
            samples
                .iter()
                .any(|s| !inner.modules.contains_key(&s.cubin_crc))
        };
        if unknown {
            self.hash_modules();
            let mut inner = lock(&self.inner);
            let Inner {
                modules,
                unknown_modules,
                ..
            } = &mut *inner;
            // The `*_not_issued` records are a subset of their base reason's.
            for s in samples.iter().filter(|s| {
                !modules.contains_key(&s.cubin_crc) && not_issued_base(&s.reason).is_none()
            }) {
                *unknown_modules.entry(s.cubin_crc).or_default() += u64::from(s.samples);
            }
        }
        // A PC's records, one per stall reason, come one after another.
        let mut last: Option<(Instruction, Option<SourceLine>)> = None;
        for s in samples {
            let at = (s.cubin_crc, Arc::clone(&s.function), s.pc_offset);
            match &last {
                Some((seen, source)) if *seen == at => s.source.clone_from(source),
                _ => {
                    s.source = self.source(&at);
                    last = Some((at, s.source.clone()));
                }
            }
        }
    }

    /// Asks CUPTI the CRC of each module loaded since the last call, the key
    /// its PC records name their module by.
    fn hash_modules(&self) {
        let images = std::mem::take(&mut lock(&self.inner).unhashed);
        for image in images {
            let mut p = CUpti_GetCubinCrcParams {
                size: size_of::<CUpti_GetCubinCrcParams>(),
                cubinSize: image.len(),
                cubin: image.as_ptr().cast(),
                cubinCrc: 0,
            };
            // SAFETY: a valid params struct naming the image, which outlives the call.
            if unsafe { (self.f.get_cubin_crc)(&mut p) } == sys::SUCCESS {
                lock(&self.inner).modules.insert(p.cubinCrc, image);
            }
        }
    }

    /// The source file and line of the instruction `at`, when CUPTI has it
    /// (the module was built with line information).
    fn source(&self, at: &Instruction) -> Option<SourceLine> {
        let (crc, function, offset) = at;
        let image = {
            let inner = lock(&self.inner);
            if let Some(known) = inner.lines.get(at) {
                return known.clone();
            }
            Arc::clone(inner.modules.get(crc)?)
        };
        let name = std::ffi::CString::new(&**function).ok()?;
        // SAFETY: all zeroes is a valid value of this plain C struct.
        let mut p: CUpti_GetSassToSourceCorrelationParams = unsafe { std::mem::zeroed() };
        p.size = size_of::<CUpti_GetSassToSourceCorrelationParams>();
        p.cubin = image.as_ptr().cast();
        p.cubinSize = image.len();
        p.functionName = name.as_ptr();
        p.pcOffset = *offset;
        // SAFETY: a valid params struct; the image and name outlive the call.
        let st = unsafe { (self.f.get_sass_to_source)(&mut p) };
        let found = if st == sys::SUCCESS {
            // SAFETY: CUPTI allocated both strings (or left them null); ours to free.
            let (file, dir) = unsafe { (c_string(p.fileName), c_string(p.dirName)) };
            // SAFETY: as above.
            unsafe {
                libc::free(p.fileName.cast());
                libc::free(p.dirName.cast());
            }
            (p.lineNumber != 0 && !file.is_empty()).then(|| {
                let path = if dir.is_empty() {
                    file
                } else {
                    format!("{}/{file}", dir.trim_end_matches('/'))
                };
                (Arc::from(path), p.lineNumber)
            })
        } else {
            None
        };
        lock(&self.inner).lines.insert(at.clone(), found.clone());
        found
    }
}

/// `Ok` for CUPTI's success, else the call's name with its status.
fn check(call: &'static str, st: Status) -> Result<(), (&'static str, Status)> {
    if st == sys::SUCCESS {
        Ok(())
    } else {
        Err((call, st))
    }
}

/// # Safety
/// `p` must be null or a NUL-terminated string.
unsafe fn c_string(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: as this function's contract.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    #[test]
    fn the_setting_is_on_off_or_a_period_in_range() {
        assert_eq!(from_env(None), (None, None));
        assert_eq!(from_env(Some(OsStr::new("0"))), (None, None));
        assert_eq!(
            from_env(Some(OsStr::new("on"))).0,
            Some(Settings::new(None))
        );
        assert_eq!(
            from_env(Some(OsStr::new("12"))).0,
            Some(Settings::new(Some(12)))
        );
        let s = Settings::new(None);
        assert_eq!(s.window, PcWindow::DEFAULT);
        assert_eq!(s.budget, PcBudget::DEFAULT);
        let (s2, w) = s.with_env(
            Some(OsStr::new("continuous")),
            Some(OsStr::new("5/20")),
            Some(OsStr::new("off")),
        );
        assert!(w.is_empty(), "{w:?}");
        assert_eq!(s2.mode, PcMode::Continuous);
        assert_eq!(s2.window, PcWindow::parse("5/20").unwrap());
        assert_eq!(s2.budget, PcBudget::Off);
        let (s3, w) = s.with_env(
            Some(OsStr::new("fast")),
            Some(OsStr::new("0/3")),
            Some(OsStr::new("0")),
        );
        assert_eq!(s3, s);
        assert_eq!(w.len(), 3, "{w:?}");
        for bad in ["4", "32", "fast", "-1"] {
            let (s, w) = from_env(Some(OsStr::new(bad)));
            assert_eq!(s, None, "{bad}");
            assert!(w.unwrap().contains("from 5 to 31"), "{bad}");
        }
    }
}
