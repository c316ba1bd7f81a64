//! GPU PC sampling through CUPTI's PC Sampling API (`cupti_pcsampling.h`), on
//! when `GPUPERF_PC_SAMPLING` asks for it: which SASS instruction each kernel's
//! warps were at, and why they stalled.
//!
//! ```text
//! CONTEXT_CREATED   → stall-reason table, Enable, configure (kernel-serialized,
//!                     period, data buffer)
//! MODULE_LOADED     → the cubin kept by its CRC, for SASS-to-source lines
//! flush (periodic,  → GetData until nothing remains: one Sample per PC and
//!   final)            stall reason, with the launch's correlation id
//! CONTEXT_DESTROY   → GetData, Disable (the context is still alive)
//! exit              → GetData, Disable for every context left
//! ```
//!
//! Threads and locks: `inner` is held only to move contexts and samples in and
//! out, never across a CUPTI call, since CUPTI may hold its own lock while it
//! runs the resource callbacks that come here. Without admin rights CUPTI
//! refuses `Enable` (`CUPTI_ERROR_INSUFFICIENT_PRIVILEGES`): [`Sampler::take_notes`]
//! says so once, with what to do, and everything else is recorded as usual.

use std::collections::HashMap;
use std::ffi::{CStr, c_char, c_void};
use std::path::Path;
use std::ptr;
use std::sync::Mutex;

use crate::sys::{
    self, CUpti_GetCubinCrcParams, CUpti_GetSassToSourceCorrelationParams,
    CUpti_ModuleResourceData, CUpti_PCSamplingData, CUpti_PCSamplingDisableParams,
    CUpti_PCSamplingEnableParams, CUpti_PCSamplingGetDataParams,
    CUpti_PCSamplingGetNumStallReasonsParams, CUpti_PCSamplingGetStallReasonsParams,
    CUpti_PCSamplingPCData, CUpti_PCSamplingStallReason, PcSamplingConfigurationInfo,
    PcSamplingConfigurationInfoParams, PcSamplingFunctions, Status,
};

/// `GPUPERF_PC_SAMPLING`'s variable name.
pub const VAR: &str = gpuperf_merge::recording::env::PC_SAMPLING;

/// What `GPUPERF_PC_SAMPLING` asks for.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// The sampling period, 2^period cycles (5 to 31); `None`: CUPTI's default.
    pub period: Option<u32>,
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
        Some("1" | "on") => (Some(Settings { period: None }), None),
        Some(s) => match s.parse::<u32>() {
            Ok(p) if (5..=31).contains(&p) => (Some(Settings { period: Some(p) }), None),
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

/// PCs one `cuptiPCSamplingGetData` call can return.
const PCS_PER_CALL: usize = 1024;
/// `cuptiPCSamplingGetData` calls per context and flush, at most: a bound, so
/// that a CUPTI that keeps answering "more" cannot hold a flush forever.
const MAX_CALLS: usize = 4096;
/// `CUPTI_PC_SAMPLING_COLLECTION_MODE_KERNEL_SERIALIZED`.
const KERNEL_SERIALIZED: u64 = 2;
/// `CUPTI_PC_SAMPLING_OUTPUT_DATA_FORMAT_PARSED`.
const PARSED: u64 = 1;
/// `CUpti_PCSamplingConfigurationAttributeType` values.
const ATTR_SAMPLING_PERIOD: u32 = 1;
const ATTR_COLLECTION_MODE: u32 = 5;
const ATTR_START_STOP: u32 = 6;
const ATTR_OUTPUT_FORMAT: u32 = 7;
const ATTR_DATA_BUFFER: u32 = 8;
/// `CUPTI_STALL_REASON_STRING_SIZE`.
const REASON_NAME_SIZE: usize = 128;

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
    pub function: String,
    /// The instruction's offset in it.
    pub pc_offset: u64,
    /// The module's CRC.
    pub cubin_crc: u64,
    /// The stall reason's index in CUPTI's table.
    pub reason_index: u32,
    /// Its name.
    pub reason: String,
    /// How many samples.
    pub samples: u32,
    /// Source file and line, when the module has line information.
    pub source: Option<(String, u32)>,
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
    reasons: HashMap<u32, String>,
    buffer: Buffer,
}

// SAFETY: the buffer's raw pointers point into memory the Context owns (its
// boxes and vectors, which never move once made) and CUPTI writes them only
// during a call made with the Context in hand; `ctx` is an opaque handle.
unsafe impl Send for Context {}

#[derive(Default)]
struct Inner {
    contexts: Vec<Context>,
    /// Contexts destroyed while a flush had them out.
    gone: Vec<usize>,
    modules: HashMap<u64, Vec<u8>>,
    lines: HashMap<(u64, String, u64), Option<(String, u32)>>,
    pending: Vec<Sample>,
    notes: Vec<String>,
    refused: bool,
    dropped: u64,
    buffer_full: u64,
}

/// PC sampling for every context of the process.
pub struct Sampler {
    f: PcSamplingFunctions,
    settings: Settings,
    inner: Mutex<Inner>,
}

fn lock(m: &Mutex<Inner>) -> std::sync::MutexGuard<'_, Inner> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Sampler {
    /// Resolves the PC Sampling API from the libcupti at `path`.
    pub fn new(path: &Path, settings: Settings) -> Result<Self, String> {
        // SAFETY: `path` is the libcupti `Cupti::load` already loaded.
        let f = unsafe { PcSamplingFunctions::load(path) }?;
        Ok(Self {
            f,
            settings,
            inner: Mutex::new(Inner::default()),
        })
    }

    /// `CONTEXT_CREATED`: reads the stall-reason table, enables and configures
    /// PC sampling in `ctx` (kernel-serialized). A refusal is kept as a note.
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
            Ok(c) => lock(&self.inner).contexts.push(c),
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
        let check = |call, st| {
            if st == sys::SUCCESS {
                Ok(())
            } else {
                Err((call, st))
            }
        };
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
                (i, text.to_string_lossy().into_owned())
            })
            .collect();
        let mut p = CUpti_PCSamplingEnableParams {
            size: size_of::<CUpti_PCSamplingEnableParams>(),
            pPriv: ptr::null_mut(),
            ctx: ctx.cast(),
        };
        // SAFETY: a valid params struct; the caller vouches for the context.
        check("cuptiPCSamplingEnable", unsafe { (self.f.enable)(&mut p) })?;
        let mut c = Context {
            ctx: ctx as usize,
            id,
            reasons,
            buffer: Buffer::new(n),
        };
        let attr = |t, v: u64| PcSamplingConfigurationInfo {
            attribute_type: t,
            attribute_status: 0,
            data: [v, 0, 0],
        };
        let mut attrs = vec![
            attr(ATTR_COLLECTION_MODE, KERNEL_SERIALIZED),
            attr(ATTR_START_STOP, 0),
            attr(ATTR_OUTPUT_FORMAT, PARSED),
            attr(
                ATTR_DATA_BUFFER,
                ptr::from_mut::<CUpti_PCSamplingData>(&mut c.buffer.data) as u64,
            ),
        ];
        if let Some(period) = self.settings.period {
            attrs.push(attr(ATTR_SAMPLING_PERIOD, u64::from(period)));
        }
        let mut p = PcSamplingConfigurationInfoParams {
            size: size_of::<PcSamplingConfigurationInfoParams>(),
            p_priv: ptr::null_mut(),
            ctx,
            num_attributes: attrs.len(),
            info: attrs.as_mut_ptr(),
        };
        // SAFETY: `attrs` outlives the call; the data buffer lives in `c`,
        // which is kept until Disable.
        let st = unsafe { (self.f.set_configuration_attribute)(&mut p) };
        if st != sys::SUCCESS {
            // SAFETY: sampling was enabled in this context just above.
            unsafe { self.disable(&mut c) };
            return Err(("cuptiPCSamplingSetConfigurationAttribute", st));
        }
        Ok(c)
    }

    /// `MODULE_LOADED`: keeps the cubin, by CRC, for source lines.
    ///
    /// # Safety
    /// `m` must be the callback's valid `CUpti_ModuleResourceData`.
    pub unsafe fn module_loaded(&self, m: *const CUpti_ModuleResourceData) {
        // SAFETY: as this function's contract.
        let m = unsafe { m.read_unaligned() };
        if m.pCubin.is_null() || m.cubinSize == 0 {
            return;
        }
        // SAFETY: CUPTI passes the module's image and its size.
        let image = unsafe { std::slice::from_raw_parts(m.pCubin.cast::<u8>(), m.cubinSize) };
        let mut p = CUpti_GetCubinCrcParams {
            size: size_of::<CUpti_GetCubinCrcParams>(),
            cubinSize: image.len(),
            cubin: image.as_ptr().cast(),
            cubinCrc: 0,
        };
        // SAFETY: a valid params struct naming the image.
        if unsafe { (self.f.get_cubin_crc)(&mut p) } == sys::SUCCESS {
            lock(&self.inner).modules.insert(p.cubinCrc, image.to_vec());
        }
    }

    /// `CONTEXT_DESTROY_STARTING`: reads what is left and disables sampling,
    /// while the context still lives. Its samples wait for the next [`Sampler::take`].
    ///
    /// # Safety
    /// `ctx` must be the live `CUcontext` of the callback.
    pub unsafe fn context_destroyed(&self, ctx: *mut c_void) {
        let c = {
            let mut inner = lock(&self.inner);
            match inner.contexts.iter().position(|c| c.ctx == ctx as usize) {
                Some(i) => inner.contexts.swap_remove(i),
                None => {
                    inner.gone.push(ctx as usize);
                    return;
                }
            }
        };
        let mut c = c;
        // SAFETY: the context is alive during its destruction's callback.
        let mut got = unsafe { self.read(&mut c) };
        // SAFETY: as above.
        got.append(&mut unsafe { self.disable(&mut c) });
        lock(&self.inner).pending.extend(got);
    }

    /// Reads every enabled context's samples (a flush); with `last`, disables
    /// sampling in each afterwards (the exit path). Returns them, with those
    /// of contexts destroyed since the last call.
    pub fn take(&self, last: bool) -> Vec<Sample> {
        let mut contexts = std::mem::take(&mut lock(&self.inner).contexts);
        let mut got = Vec::new();
        for c in &mut contexts {
            // SAFETY: a context in the list is live: its destruction's callback
            // takes it out first (or, while it is out here, marks it gone).
            got.extend(unsafe { self.read(c) });
            if last {
                // SAFETY: as above.
                got.append(&mut unsafe { self.disable(c) });
            }
        }
        let mut inner = lock(&self.inner);
        let gone = std::mem::take(&mut inner.gone);
        if !last {
            inner
                .contexts
                .extend(contexts.into_iter().filter(|c| !gone.contains(&c.ctx)));
        }
        let mut all = std::mem::take(&mut inner.pending);
        all.append(&mut got);
        all
    }

    /// Notes for the trace (a refusal, drops), each once.
    pub fn take_notes(&self, closing: bool) -> Vec<String> {
        let mut inner = lock(&self.inner);
        let mut notes = std::mem::take(&mut inner.notes);
        if closing && (inner.dropped > 0 || inner.buffer_full > 0) {
            notes.push(format!(
                "PC sampling: {} samples dropped by CUPTI, its hardware buffer full {} times",
                inner.dropped, inner.buffer_full
            ));
        }
        notes
    }

    /// Disables sampling in `c`, returning the records Disable copies into
    /// the configured buffer (what GetData had not returned yet).
    ///
    /// # Safety
    /// `c.ctx` must be live and enabled.
    unsafe fn disable(&self, c: &mut Context) -> Vec<Sample> {
        c.buffer.data.totalNumPcs = 0;
        let mut p = CUpti_PCSamplingDisableParams {
            size: size_of::<CUpti_PCSamplingDisableParams>(),
            pPriv: ptr::null_mut(),
            ctx: (c.ctx as *mut c_void).cast(),
        };
        // SAFETY: a valid params struct; the caller vouches for the context.
        if unsafe { (self.f.disable)(&mut p) } == sys::SUCCESS {
            self.parse(c)
        } else {
            Vec::new()
        }
    }

    /// Reads one context's samples until CUPTI has none left.
    ///
    /// # Safety
    /// `c.ctx` must be live and enabled.
    unsafe fn read(&self, c: &mut Context) -> Vec<Sample> {
        let mut out = Vec::new();
        for _ in 0..MAX_CALLS {
            let d = &mut c.buffer.data;
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
            let (dropped, full) = (d.droppedSamples, d.hardwareBufferFull);
            {
                let mut inner = lock(&self.inner);
                inner.dropped += dropped;
                inner.buffer_full += u64::from(full != 0);
            }
            if st != sys::SUCCESS {
                break;
            }
            out.append(&mut self.parse(c));
            if c.buffer.data.remainingNumPcs == 0 {
                break;
            }
        }
        out
    }

    /// The samples in `c`'s buffer; frees the function names CUPTI allocated.
    fn parse(&self, c: &mut Context) -> Vec<Sample> {
        let mut out = Vec::new();
        let n = c.buffer.data.totalNumPcs.min(PCS_PER_CALL);
        for i in 0..n {
            let pc = c.buffer.pcs[i];
            // SAFETY: CUPTI wrote a NUL-terminated name that the caller frees.
            let function = unsafe { c_string(pc.functionName) };
            // SAFETY: as above: ours to free, once.
            unsafe { libc::free(pc.functionName.cast()) };
            c.buffer.pcs[i].functionName = ptr::null_mut();
            let source = self.source(pc.cubinCrc, &function, pc.pcOffset);
            let count = pc.stallReasonCount.min(c.buffer.reasons[i].len());
            for r in &c.buffer.reasons[i][..count] {
                if r.samples == 0 {
                    continue;
                }
                out.push(Sample {
                    correlation_id: pc.correlationId,
                    context: c.id,
                    function: function.clone(),
                    pc_offset: pc.pcOffset,
                    cubin_crc: pc.cubinCrc,
                    reason_index: r.pcSamplingStallReasonIndex,
                    reason: c
                        .reasons
                        .get(&r.pcSamplingStallReasonIndex)
                        .cloned()
                        .unwrap_or_else(|| {
                            format!("stall reason {}", r.pcSamplingStallReasonIndex)
                        }),
                    samples: r.samples,
                    source: source.clone(),
                });
            }
        }
        out
    }

    /// The source file and line of `function+offset` in the module `crc`, when
    /// CUPTI has it (the module was built with line information).
    fn source(&self, crc: u64, function: &str, offset: u64) -> Option<(String, u32)> {
        let key = (crc, function.to_owned(), offset);
        let image = {
            let inner = lock(&self.inner);
            if let Some(known) = inner.lines.get(&key) {
                return known.clone();
            }
            inner.modules.get(&crc)?.clone()
        };
        let name = std::ffi::CString::new(function).ok()?;
        // SAFETY: all zeroes is a valid value of this plain C struct.
        let mut p: CUpti_GetSassToSourceCorrelationParams = unsafe { std::mem::zeroed() };
        p.size = size_of::<CUpti_GetSassToSourceCorrelationParams>();
        p.cubin = image.as_ptr().cast();
        p.cubinSize = image.len();
        p.functionName = name.as_ptr();
        p.pcOffset = offset;
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
                (path, p.lineNumber)
            })
        } else {
            None
        };
        lock(&self.inner).lines.insert(key, found.clone());
        found
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
            Some(Settings { period: None })
        );
        assert_eq!(
            from_env(Some(OsStr::new("12"))).0,
            Some(Settings { period: Some(12) })
        );
        for bad in ["4", "32", "fast", "-1"] {
            let (s, w) = from_env(Some(OsStr::new(bad)));
            assert_eq!(s, None, "{bad}");
            assert!(w.unwrap().contains("from 5 to 31"), "{bad}");
        }
    }
}
