//! eBPF launch-stack profiler for gpuperf: the full CPU stack of every CUDA
//! launch, joined exactly to its GPU work by CUPTI correlation id.
//!
//! # How a launch is recorded
//!
//! ```text
//!  app ──call──▶ cudaLaunchKernel ──▶ (libcuda, libcupti: no frame pointers)
//!                 ▲ entry probe              └─▶ CUPTI callback ─▶ gpuperf_launch_marker(corr)
//!                 │ take the user stack (stack map id),               ▲ marker probe
//!                 │ remember it for this thread               join by thread, emit one
//!                 │                                           64-byte record with corr
//! ```
//!
//! Two uprobes cooperate, and the reason is stack quality:
//!
//! - A frame-pointer walk started inside the CUPTI callback stops in libcupti or
//!   libcuda, which keep no frame pointers. Unwinding those with `.eh_frame`
//!   in BPF means shipping unwind tables to the kernel per library, and each
//!   hit walks through a dozen NVIDIA frames before it reaches user code.
//! - At the entry of the launch API function (`cudaLaunchKernel` starts with
//!   `push %rbp` in libcudart and in statically linked executables), the user's
//!   frame-pointer chain is intact and the kernel includes the immediate caller.
//!
//! So an **entry probe** takes the stack with `bpf_get_stackid` and parks it in a
//! per-thread map, and the **marker probe** (on the NOP-prefixed function that
//! `gpuperf-inject` calls from its CUPTI callback with the correlation id) joins
//! it. The join checks that the entry's call is still live on the thread's stack
//! (its return-address slot is unchanged and lies above the marker's frame), so
//! a stale entry from an API call without a marker is never used. When no entry
//! probe fired, the marker takes its own stack and the line is counted as a
//! marker stack: it stops in NVIDIA frames.
//!
//! Entry probes go on the files the caller names and, while running, on
//! `libcudart*`, `libcuda.so*` and the executable of each traced process the
//! first time it hits the marker. A function whose first instruction would make
//! the uprobe single-step (about 10 µs a hit) is not probed; it is listed in
//! [`Summary::slow_functions_skipped`].
//!
//! **Compatibility mode** ([`Options::uprobes`], `LIB:SYMBOL`) needs no
//! injection: the entry probe writes the record itself, with correlation id 0,
//! and merge pairs it by time. It works on executables with cudart linked in.
//!
//! # Stacks and symbols
//! Stacks are deduplicated by the kernel's stack map: a launch costs one fixed
//! 64-byte record, and each distinct stack is sent once, as (build id, file
//! offset) frames, which stay valid after the process exits. [`Symbolizer`]
//! resolves them with blazesym (C++ and Rust names demangled, inlined functions
//! as frames of their own) and prints unknown frames as `file+0xoffset`.
//!
//! # Output and loss
//! Lines go to a [`gpuperf_merge::cpu::Writer`] as they arrive. Launches lost
//! to a full ring buffer are written as a `# dropped N` line and counted in the
//! [`Summary`], as are lost stacks and unsymbolized frames.
//!
//! # Privileges
//! Root, or CAP_BPF with CAP_PERFMON, on Linux 5.15+ with BTF. [`Profiler::start`]
//! checks each first and names the fix.

mod elf;
mod error;
mod event;
pub mod preflight;
mod session;
mod symbolize;

mod skel {
    #![allow(missing_docs, clippy::all, unused_qualifications, unused_imports)]
    include!(concat!(env!("OUT_DIR"), "/launch.skel.rs"));
}

pub use elf::{FirstInsn, ProbePoint, api_functions, function, is_marked_api, symbol_offset};
pub use error::{Error, Result};
pub use session::{
    MARKER_SYMBOL, Options, ProbeSpec, Profiler, Progress, SEMAPHORE_SYMBOL, Summary,
};
pub use symbolize::Symbolizer;
