//! Safe wrappers over the CUPTI functions in [`crate::sys`].

use std::ffi::{CStr, c_char, c_void};
use std::path::{Path, PathBuf};
use std::ptr;

use crate::error::{CuptiError, Error, Result};
use crate::sys::{self, Functions, Status};

/// A loaded libcupti.
pub struct Cupti {
    f: Functions,
    path: PathBuf,
}

/// The handle `cuptiSubscribe` returns.
#[derive(Copy, Clone, Debug)]
pub struct Subscriber(*mut c_void);

// SAFETY: a subscriber handle is an opaque token CUPTI accepts from any thread.
unsafe impl Send for Subscriber {}
// SAFETY: as above; the handle is never dereferenced on our side.
unsafe impl Sync for Subscriber {}

impl Cupti {
    /// Loads the libcupti at `path`.
    pub fn load(path: &Path) -> Result<Self> {
        // SAFETY: `locate` only returns files named `libcupti.so*`, or the path the
        // user named in GPUPERF_CUPTI_PATH; either is NVIDIA's CUPTI, whose symbols
        // have the signatures `sys` declares.
        let f = unsafe { Functions::load(path) }.map_err(|reason| Error::CuptiLoad {
            path: path.to_owned(),
            reason,
        })?;
        Ok(Self {
            f,
            path: path.to_owned(),
        })
    }

    /// Whether this is gpuperf's simulated CUPTI (no GPU).
    pub fn simulated(&self) -> bool {
        self.f.simulated
    }

    /// The file this was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// CUPTI's name for a status, such as `CUPTI_ERROR_UNKNOWN`.
    pub fn status_text(&self, status: Status) -> String {
        match self.check("", status) {
            Ok(()) => "CUPTI_SUCCESS".to_owned(),
            Err(e) => e.message,
        }
    }

    fn check(&self, call: &'static str, status: Status) -> Result<(), CuptiError> {
        if status == sys::SUCCESS {
            return Ok(());
        }
        let mut s: *const c_char = ptr::null();
        // SAFETY: `s` is a valid out-pointer; CUPTI stores a pointer to a static string.
        let ok = unsafe { (self.f.get_result_string)(status, &mut s) } == sys::SUCCESS;
        let message = if ok && !s.is_null() {
            // SAFETY: CUPTI's result strings are static, NUL-terminated C strings.
            unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned()
        } else {
            format!("CUPTI error {status}")
        };
        Err(CuptiError {
            call,
            status,
            message,
        })
    }

    /// `cuptiGetVersion`: the CUPTI API version (28 for CUDA 12.9, 130001 for 13.0).
    pub fn version(&self) -> Result<u32, CuptiError> {
        let mut v = 0u32;
        // SAFETY: `v` is a valid out-pointer.
        let st = unsafe { (self.f.get_version)(&mut v) };
        self.check("cuptiGetVersion", st).map(|()| v)
    }

    /// `cuptiSubscribe` with `callback` and no user data.
    pub fn subscribe(&self, callback: sys::ApiCallback) -> Result<Subscriber, CuptiError> {
        let mut h = ptr::null_mut();
        // SAFETY: `h` is a valid out-pointer and `callback` has CUPTI's signature.
        let st = unsafe { (self.f.subscribe)(&mut h, callback, ptr::null_mut()) };
        self.check("cuptiSubscribe", st).map(|()| Subscriber(h))
    }

    /// `cuptiUnsubscribe`: also disables every callback of `sub`.
    pub fn unsubscribe(&self, sub: Subscriber) -> Result<(), CuptiError> {
        // SAFETY: `sub` came from `subscribe` and is not used afterwards.
        let st = unsafe { (self.f.unsubscribe)(sub.0) };
        self.check("cuptiUnsubscribe", st)
    }

    /// `cuptiEnableCallback(1, …)`.
    pub fn enable_callback(
        &self,
        sub: Subscriber,
        domain: u32,
        cbid: u32,
    ) -> Result<(), CuptiError> {
        // SAFETY: `sub` came from `subscribe`; invalid ids are reported, not UB.
        let st = unsafe { (self.f.enable_callback)(1, sub.0, domain, cbid) };
        self.check("cuptiEnableCallback", st)
    }

    /// `cuptiGetCallbackName`; `None` for ids this CUPTI does not know.
    pub fn callback_name(&self, domain: u32, cbid: u32) -> Option<String> {
        let mut s: *const c_char = ptr::null();
        // SAFETY: `s` is a valid out-pointer; unknown ids return an error code.
        let st = unsafe { (self.f.get_callback_name)(domain, cbid, &mut s) };
        if st != sys::SUCCESS || s.is_null() {
            return None;
        }
        // SAFETY: CUPTI returns a pointer to a static, NUL-terminated name.
        Some(unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned())
    }

    /// The id and device ordinal of a context, from `cuptiGetContextId` and
    /// `cuptiGetDeviceId`.
    ///
    /// # Safety
    /// `context` must be a live `CUcontext`, as CUPTI passes to resource callbacks.
    pub unsafe fn context_device(&self, context: *mut c_void) -> Option<(u32, u32)> {
        let (mut id, mut dev) = (0u32, 0u32);
        // SAFETY: valid out-pointers; the caller vouches for `context`.
        let ok = unsafe {
            (self.f.get_context_id)(context, &mut id) == sys::SUCCESS
                && (self.f.get_device_id)(context, &mut dev) == sys::SUCCESS
        };
        ok.then_some((id, dev))
    }

    /// `cuptiActivityEnable`.
    pub fn activity_enable(&self, kind: u32) -> Result<(), CuptiError> {
        // SAFETY: plain value argument.
        let st = unsafe { (self.f.activity_enable)(kind) };
        self.check("cuptiActivityEnable", st)
    }

    /// `cuptiActivityDisable`.
    pub fn activity_disable(&self, kind: u32) -> Result<(), CuptiError> {
        // SAFETY: plain value argument.
        let st = unsafe { (self.f.activity_disable)(kind) };
        self.check("cuptiActivityDisable", st)
    }

    /// `cuptiActivityRegisterCallbacks`.
    pub fn register_buffers(
        &self,
        requested: sys::BufferRequested,
        completed: sys::BufferCompleted,
    ) -> Result<(), CuptiError> {
        // SAFETY: both functions have the signatures CUPTI calls them with.
        let st = unsafe { (self.f.activity_register_callbacks)(requested, completed) };
        self.check("cuptiActivityRegisterCallbacks", st)
    }

    /// `cuptiActivityRegisterCallbacks` on another client's behalf: its status
    /// goes back to that client as CUPTI gave it.
    pub fn register_buffers_for_another(
        &self,
        requested: sys::BufferRequested,
        completed: sys::BufferCompleted,
    ) -> Status {
        // SAFETY: the caller's functions, which it passed to CUPTI's signature.
        unsafe { (self.f.activity_register_callbacks)(requested, completed) }
    }

    /// `cuptiFinalize` on another client's behalf, with CUPTI's status.
    pub fn finalize_for_another(&self) -> Status {
        // SAFETY: no arguments; the other client asked for it.
        unsafe { (self.f.finalize)() }
    }

    /// `cuptiSubscribe` on another client's behalf, with CUPTI's status.
    ///
    /// # Safety
    /// The arguments are the other client's, as CUPTI's signature takes them:
    /// `handle` a valid out-pointer.
    pub unsafe fn subscribe_for_another(
        &self,
        handle: *mut *mut c_void,
        callback: sys::ApiCallback,
        userdata: *mut c_void,
    ) -> Status {
        // SAFETY: the caller vouches for the arguments (see above).
        unsafe { (self.f.subscribe)(handle, callback, userdata) }
    }

    /// The addresses of CUPTI's `cuptiSubscribe`,
    /// `cuptiActivityRegisterCallbacks` and `cuptiFinalize`, as other
    /// objects' GOT slots hold them.
    pub fn takeover_entry_points(&self) -> [usize; 3] {
        [
            self.f.subscribe as *const () as usize,
            self.f.activity_register_callbacks as *const () as usize,
            self.f.finalize as *const () as usize,
        ]
    }

    /// `cuptiActivityRegisterTimestampCallback`.
    pub fn register_timestamp(&self, clock: sys::Timestamp) -> Result<(), CuptiError> {
        // SAFETY: `clock` takes nothing and returns u64, as CUPTI expects.
        let st = unsafe { (self.f.activity_register_timestamp_callback)(clock) };
        self.check("cuptiActivityRegisterTimestampCallback", st)
    }

    /// `cuptiGetTimestamp`: now, on the clock CUPTI stamps records with.
    pub fn timestamp(&self) -> Result<u64, CuptiError> {
        let mut t = 0u64;
        // SAFETY: `t` is a valid out-pointer.
        let st = unsafe { (self.f.get_timestamp)(&mut t) };
        self.check("cuptiGetTimestamp", st).map(|()| t)
    }

    /// `cuptiSetThreadIdType`.
    pub fn set_thread_id_type(&self, kind: u32) -> Result<(), CuptiError> {
        // SAFETY: plain value argument.
        let st = unsafe { (self.f.set_thread_id_type)(kind) };
        self.check("cuptiSetThreadIdType", st)
    }

    /// `cuptiActivityFlushAll`.
    pub fn flush_all(&self, flag: u32) -> Result<(), CuptiError> {
        // SAFETY: plain value argument; callers serialize flushes (see `recorder`).
        let st = unsafe { (self.f.activity_flush_all)(flag) };
        self.check("cuptiActivityFlushAll", st)
    }

    /// `cuptiActivityFlushAll`'s status alone, for a flush inside a callback
    /// on the application's thread, where an error's message must not be
    /// allocated; [`Cupti::error`] makes the error later.
    pub fn flush_all_status(&self, flag: u32) -> Status {
        // SAFETY: as `flush_all`.
        unsafe { (self.f.activity_flush_all)(flag) }
    }

    /// The error of `call`'s `status`, kept from a call made earlier; `Ok`
    /// for success.
    pub fn error(&self, call: &'static str, status: Status) -> Result<(), CuptiError> {
        self.check(call, status)
    }

    /// `cuptiActivityFlushPeriod`, in milliseconds.
    pub fn flush_period(&self, ms: u32) -> Result<(), CuptiError> {
        // SAFETY: plain value argument.
        let st = unsafe { (self.f.activity_flush_period)(ms) };
        self.check("cuptiActivityFlushPeriod", st)
    }

    /// `cuptiActivityGetNumDroppedRecords` for one buffer's context and stream.
    ///
    /// # Safety
    /// `context` must be the context pointer CUPTI passed to the buffer callback.
    pub unsafe fn dropped_records(&self, context: *mut c_void, stream: u32) -> usize {
        let mut n = 0usize;
        // SAFETY: `n` is a valid out-pointer; the caller vouches for `context`.
        let st = unsafe { (self.f.activity_get_num_dropped_records)(context, stream, &mut n) };
        if st == sys::SUCCESS { n } else { 0 }
    }

    /// Walks the records of an activity buffer with CUPTI's own parser, yielding each
    /// record as the bytes from its start to the end of the valid data.
    pub fn records<'a>(&'a self, buf: &'a mut [u8], valid: usize) -> Records<'a> {
        let valid = valid.min(buf.len());
        Records {
            cupti: self,
            buf,
            valid,
            cur: ptr::null_mut(),
            done: false,
            end: sys::SUCCESS,
        }
    }
}

/// Iterator returned by [`Cupti::records`].
pub struct Records<'a> {
    cupti: &'a Cupti,
    buf: &'a mut [u8],
    valid: usize,
    cur: *mut c_void,
    done: bool,
    end: Status,
}

impl Records<'_> {
    /// Why the walk stopped before the end of the valid data: the status of
    /// `cuptiActivityGetNextRecord` when it was neither success nor
    /// `CUPTI_ERROR_MAX_LIMIT_REACHED`. The records after it are lost.
    pub fn error(&self) -> Option<CuptiError> {
        match self.end {
            sys::SUCCESS | sys::MAX_LIMIT_REACHED => None,
            st => self.cupti.check("cuptiActivityGetNextRecord", st).err(),
        }
    }
}

impl<'a> Iterator for Records<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        if self.done {
            return None;
        }
        let base = self.buf.as_mut_ptr();
        // SAFETY: `base..base+valid` is our buffer; CUPTI only reads inside it and
        // stores in `cur` a pointer into it (or leaves it when done).
        let st =
            unsafe { (self.cupti.f.activity_get_next_record)(base, self.valid, &mut self.cur) };
        if st != sys::SUCCESS || self.cur.is_null() {
            self.done = true;
            self.end = st;
            return None;
        }
        let off = (self.cur as usize).wrapping_sub(base as usize);
        if off >= self.valid {
            self.done = true;
            return None;
        }
        // SAFETY: `off < valid <= buf.len()`, so the range is inside the buffer,
        // which is borrowed for 'a and not written while records are alive.
        Some(unsafe { std::slice::from_raw_parts(base.add(off), self.valid - off) })
    }
}
