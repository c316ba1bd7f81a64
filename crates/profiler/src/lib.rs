//! eBPF launch-stack profiler for gpuperf.
//!
//! This crate will attach libbpf-rs uprobes to the marker exported by
//! `gpuperf-inject` (or, in compatibility mode, to a launch API symbol), capture
//! the user stack of every CUDA launch, symbolize it with blazesym and write the
//! CPU stack format defined by [`gpuperf_merge::cpu`].
//!
//! **Status: not implemented yet.** The crate has no attach code; nothing here
//! pretends to profile.

/// The header line that the profiler will write at the top of its CPU trace.
pub const CPU_TRACE_HEADER: &str = gpuperf_merge::cpu::HEADER;
