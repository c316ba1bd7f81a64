//! Raw CUPTI declarations: record layouts and constants from cudarc's bindings, and
//! the few functions this crate calls, resolved from one libcupti file.
//!
//! Enumerations cross this boundary as plain `u32`. cudarc models them as Rust
//! enums, and a value a newer CUPTI release adds would be undefined behaviour in one.

use std::ffi::{c_char, c_void};
use std::path::Path;

pub use cudarc::cupti::sys::{
    CUpti_ActivityContext2, CUpti_ActivityDevice5, CUpti_ActivityKernel10, CUpti_ActivityKind,
    CUpti_ActivityMemcpy6, CUpti_ActivityMemcpyPtoP4, CUpti_ActivityMemset4,
    CUpti_ActivityOverhead3, CUpti_ActivitySynchronization2, CUpti_ActivityThreadIdType,
    CUpti_ApiCallbackSite, CUpti_CallbackData, CUpti_CallbackDomain, CUpti_CallbackIdResource,
    CUpti_CallbackIdState, CUpti_StateData__bindgen_ty_1__bindgen_ty_1 as CUpti_StateNotification,
    CUptiResult,
};

/// A CUPTI status code (`CUptiResult`).
pub type Status = u32;
/// `CUPTI_SUCCESS`.
pub const SUCCESS: Status = CUptiResult::CUPTI_SUCCESS as Status;
/// Another subscriber (Nsight Systems, torch.profiler, ...) holds CUPTI.
pub const MULTIPLE_SUBSCRIBERS: Status =
    CUptiResult::CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED as Status;
/// `CUPTI_ERROR_VIRTUALIZED_DEVICE_NOT_SUPPORTED`.
pub const VIRTUALIZED_DEVICE: Status =
    CUptiResult::CUPTI_ERROR_VIRTUALIZED_DEVICE_NOT_SUPPORTED as Status;
/// `CUPTI_ERROR_CONFIDENTIAL_COMPUTING_NOT_SUPPORTED`.
pub const CONFIDENTIAL_COMPUTING: Status =
    CUptiResult::CUPTI_ERROR_CONFIDENTIAL_COMPUTING_NOT_SUPPORTED as Status;
/// `cuptiActivityGetNextRecord` reached the end of the buffer.
pub const MAX_LIMIT_REACHED: Status = CUptiResult::CUPTI_ERROR_MAX_LIMIT_REACHED as Status;

/// `CUpti_CallbackFunc`, with the domain and callback id as plain integers.
pub type ApiCallback = unsafe extern "C" fn(*mut c_void, u32, u32, *const c_void);
/// `CUpti_BuffersCallbackRequestFunc`.
pub type BufferRequested = unsafe extern "C" fn(*mut *mut u8, *mut usize, *mut usize);
/// `CUpti_BuffersCallbackCompleteFunc`; the first argument is a `CUcontext`.
pub type BufferCompleted = unsafe extern "C" fn(*mut c_void, u32, *mut u8, usize, usize);
/// `CUpti_TimestampCallbackFunc`.
pub type Timestamp = unsafe extern "C" fn() -> u64;

/// The CUPTI functions gpuperf calls, resolved from one loaded library.
pub struct Functions {
    /// `cuptiGetVersion`.
    pub get_version: unsafe extern "C" fn(*mut u32) -> Status,
    /// `cuptiGetResultString`.
    pub get_result_string: unsafe extern "C" fn(Status, *mut *const c_char) -> Status,
    /// `cuptiSubscribe`.
    pub subscribe: unsafe extern "C" fn(*mut *mut c_void, ApiCallback, *mut c_void) -> Status,
    /// `cuptiUnsubscribe`.
    pub unsubscribe: unsafe extern "C" fn(*mut c_void) -> Status,
    /// `cuptiEnableCallback`.
    pub enable_callback: unsafe extern "C" fn(u32, *mut c_void, u32, u32) -> Status,
    /// `cuptiGetCallbackName`.
    pub get_callback_name: unsafe extern "C" fn(u32, u32, *mut *const c_char) -> Status,
    /// `cuptiGetContextId`; the first argument is a `CUcontext`.
    pub get_context_id: unsafe extern "C" fn(*mut c_void, *mut u32) -> Status,
    /// `cuptiGetDeviceId`; the first argument is a `CUcontext`.
    pub get_device_id: unsafe extern "C" fn(*mut c_void, *mut u32) -> Status,
    /// `cuptiActivityEnable`.
    pub activity_enable: unsafe extern "C" fn(u32) -> Status,
    /// `cuptiActivityDisable`.
    pub activity_disable: unsafe extern "C" fn(u32) -> Status,
    /// `cuptiActivityRegisterCallbacks`.
    pub activity_register_callbacks:
        unsafe extern "C" fn(BufferRequested, BufferCompleted) -> Status,
    /// `cuptiActivityRegisterTimestampCallback`.
    pub activity_register_timestamp_callback: unsafe extern "C" fn(Timestamp) -> Status,
    /// `cuptiGetTimestamp`.
    pub get_timestamp: unsafe extern "C" fn(*mut u64) -> Status,
    /// `cuptiSetThreadIdType`.
    pub set_thread_id_type: unsafe extern "C" fn(u32) -> Status,
    /// `cuptiActivityFlushAll`.
    pub activity_flush_all: unsafe extern "C" fn(u32) -> Status,
    /// `cuptiActivityFlushPeriod`.
    pub activity_flush_period: unsafe extern "C" fn(u32) -> Status,
    /// `cuptiActivityGetNextRecord`.
    pub activity_get_next_record: unsafe extern "C" fn(*mut u8, usize, *mut *mut c_void) -> Status,
    /// `cuptiActivityGetNumDroppedRecords`.
    pub activity_get_num_dropped_records:
        unsafe extern "C" fn(*mut c_void, u32, *mut usize) -> Status,
    /// `cuptiFinalize`; only ever called on another client's behalf (see `hook`).
    pub finalize: unsafe extern "C" fn() -> Status,
    /// The library exports `gpusim_cupti`: it is gpuperf's simulated CUPTI, so
    /// no GPU ran what it records.
    pub simulated: bool,
    // Never unloaded: libcupti registers thread-specific-data destructors, and a
    // thread exiting after `dlclose` would jump into unmapped code.
    _lib: std::mem::ManuallyDrop<libloading::Library>,
}

impl Functions {
    /// Loads `path` and resolves every function, or names the first one missing.
    ///
    /// # Safety
    /// `path` must be a CUPTI library: its initializers run, and the resolved symbols
    /// are trusted to have the C signatures declared above.
    pub unsafe fn load(path: &Path) -> Result<Self, String> {
        // SAFETY: the caller vouches that this is libcupti, whose initializers are
        // safe to run in a CUDA process.
        let lib = unsafe { libloading::Library::new(path) }.map_err(|e| e.to_string())?;
        macro_rules! sym {
            ($name:literal) => {
                // SAFETY: the caller vouches for the symbol's signature; the library
                // outlives the pointer because both live in the returned struct.
                *unsafe { lib.get(concat!($name, "\0").as_bytes()) }
                    .map_err(|_| format!("{} does not export {}", path.display(), $name))?
            };
        }
        Ok(Self {
            get_version: sym!("cuptiGetVersion"),
            get_result_string: sym!("cuptiGetResultString"),
            subscribe: sym!("cuptiSubscribe"),
            unsubscribe: sym!("cuptiUnsubscribe"),
            enable_callback: sym!("cuptiEnableCallback"),
            get_callback_name: sym!("cuptiGetCallbackName"),
            get_context_id: sym!("cuptiGetContextId"),
            get_device_id: sym!("cuptiGetDeviceId"),
            activity_enable: sym!("cuptiActivityEnable"),
            activity_disable: sym!("cuptiActivityDisable"),
            activity_register_callbacks: sym!("cuptiActivityRegisterCallbacks"),
            activity_register_timestamp_callback: sym!("cuptiActivityRegisterTimestampCallback"),
            get_timestamp: sym!("cuptiGetTimestamp"),
            set_thread_id_type: sym!("cuptiSetThreadIdType"),
            activity_flush_all: sym!("cuptiActivityFlushAll"),
            activity_flush_period: sym!("cuptiActivityFlushPeriod"),
            activity_get_next_record: sym!("cuptiActivityGetNextRecord"),
            activity_get_num_dropped_records: sym!("cuptiActivityGetNumDroppedRecords"),
            finalize: sym!("cuptiFinalize"),
            // SAFETY: only the symbol's presence is used, never its value.
            simulated: unsafe { lib.get::<*const u8>(b"gpusim_cupti\0") }.is_ok(),
            _lib: std::mem::ManuallyDrop::new(lib),
        })
    }
}

/// `CUpti_PCSamplingConfigurationInfo`, with the attribute type and status as
/// plain integers (cudarc's are Rust enums, and CUPTI writes the status).
#[repr(C)]
#[derive(Copy, Clone)]
pub struct PcSamplingConfigurationInfo {
    /// `CUpti_PCSamplingConfigurationAttributeType`.
    pub attribute_type: u32,
    /// The `CUptiResult` CUPTI writes for this attribute.
    pub attribute_status: Status,
    /// The attribute's value: the union's largest member is three u64s.
    pub data: [u64; 3],
}

const _: () = assert!(
    size_of::<PcSamplingConfigurationInfo>()
        == size_of::<cudarc::cupti::sys::CUpti_PCSamplingConfigurationInfo>()
);

pub use cudarc::cupti::sys::{
    CUpti_GetCubinCrcParams, CUpti_GetSassToSourceCorrelationParams, CUpti_ModuleResourceData,
    CUpti_PCSamplingData, CUpti_PCSamplingDisableParams, CUpti_PCSamplingEnableParams,
    CUpti_PCSamplingGetDataParams, CUpti_PCSamplingGetNumStallReasonsParams,
    CUpti_PCSamplingGetStallReasonsParams, CUpti_PCSamplingPCData, CUpti_PCSamplingStallReason,
    CUpti_PCSamplingStartParams, CUpti_PCSamplingStopParams,
};

/// `CUPTI_ERROR_INSUFFICIENT_PRIVILEGES`.
pub const INSUFFICIENT_PRIVILEGES: Status =
    CUptiResult::CUPTI_ERROR_INSUFFICIENT_PRIVILEGES as Status;
/// `CUpti_PCSamplingConfigurationInfoParams`'s fields after `size`: `pPriv`,
/// `ctx`, `numAttributes`, `pPCSamplingConfigurationInfo`.
#[repr(C)]
pub struct PcSamplingConfigurationInfoParams {
    /// The struct's size.
    pub size: usize,
    /// Null.
    pub p_priv: *mut c_void,
    /// The `CUcontext`.
    pub ctx: *mut c_void,
    /// Entries in `info`.
    pub num_attributes: usize,
    /// The attributes.
    pub info: *mut PcSamplingConfigurationInfo,
}

/// The PC Sampling API (`cupti_pcsampling.h`), resolved from the same libcupti;
/// every function takes a pointer to its params struct.
pub struct PcSamplingFunctions {
    /// `cuptiPCSamplingGetNumStallReasons`.
    pub get_num_stall_reasons:
        unsafe extern "C" fn(*mut CUpti_PCSamplingGetNumStallReasonsParams) -> Status,
    /// `cuptiPCSamplingGetStallReasons`.
    pub get_stall_reasons:
        unsafe extern "C" fn(*mut CUpti_PCSamplingGetStallReasonsParams) -> Status,
    /// `cuptiPCSamplingSetConfigurationAttribute`.
    pub set_configuration_attribute:
        unsafe extern "C" fn(*mut PcSamplingConfigurationInfoParams) -> Status,
    /// `cuptiPCSamplingEnable`.
    pub enable: unsafe extern "C" fn(*mut CUpti_PCSamplingEnableParams) -> Status,
    /// `cuptiPCSamplingDisable`.
    pub disable: unsafe extern "C" fn(*mut CUpti_PCSamplingDisableParams) -> Status,
    /// `cuptiPCSamplingGetData`.
    pub get_data: unsafe extern "C" fn(*mut CUpti_PCSamplingGetDataParams) -> Status,
    /// `cuptiPCSamplingStart`.
    pub start: unsafe extern "C" fn(*mut CUpti_PCSamplingStartParams) -> Status,
    /// `cuptiPCSamplingStop`.
    pub stop: unsafe extern "C" fn(*mut CUpti_PCSamplingStopParams) -> Status,
    /// `cuptiGetCubinCrc`.
    pub get_cubin_crc: unsafe extern "C" fn(*mut CUpti_GetCubinCrcParams) -> Status,
    /// `cuptiGetSassToSourceCorrelation`.
    pub get_sass_to_source:
        unsafe extern "C" fn(*mut CUpti_GetSassToSourceCorrelationParams) -> Status,
    _lib: std::mem::ManuallyDrop<libloading::Library>,
}

impl PcSamplingFunctions {
    /// Resolves the PC Sampling API from `path`, or names the first function missing.
    ///
    /// # Safety
    /// As [`Functions::load`].
    pub unsafe fn load(path: &Path) -> Result<Self, String> {
        // SAFETY: the caller vouches that this is libcupti (already loaded:
        // this only takes another reference to it).
        let lib = unsafe { libloading::Library::new(path) }.map_err(|e| e.to_string())?;
        macro_rules! sym {
            ($name:literal) => {
                // SAFETY: the caller vouches for the symbol's signature; the library
                // outlives the pointer because both live in the returned struct.
                *unsafe { lib.get(concat!($name, "\0").as_bytes()) }
                    .map_err(|_| format!("{} does not export {}", path.display(), $name))?
            };
        }
        Ok(Self {
            get_num_stall_reasons: sym!("cuptiPCSamplingGetNumStallReasons"),
            get_stall_reasons: sym!("cuptiPCSamplingGetStallReasons"),
            set_configuration_attribute: sym!("cuptiPCSamplingSetConfigurationAttribute"),
            enable: sym!("cuptiPCSamplingEnable"),
            disable: sym!("cuptiPCSamplingDisable"),
            get_data: sym!("cuptiPCSamplingGetData"),
            start: sym!("cuptiPCSamplingStart"),
            stop: sym!("cuptiPCSamplingStop"),
            get_cubin_crc: sym!("cuptiGetCubinCrc"),
            get_sass_to_source: sym!("cuptiGetSassToSourceCorrelation"),
            _lib: std::mem::ManuallyDrop::new(lib),
        })
    }
}
