//! CUPTI injection library for gpuperf.
//!
//! The CUDA driver loads this cdylib into the target process through
//! `CUDA_INJECTION64_PATH` and calls its `InitializeInjection` export. It will
//! record API calls and GPU activity with CUPTI correlation ids and write them in
//! the GPU trace format defined by [`gpuperf_merge::gputrace`].
//!
//! **Status: not implemented yet.** This crate exports nothing, so pointing
//! `CUDA_INJECTION64_PATH` at it makes the driver skip the injection and the
//! application runs unprofiled. No code path here pretends to record anything.

/// The GPU trace format version this library will write.
pub const TRACE_FORMAT_VERSION: u16 = gpuperf_merge::gputrace::FORMAT_VERSION;
