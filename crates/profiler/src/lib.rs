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
//! So an **entry probe** walks the user stack and parks its id in a
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
//! The BPF program walks the frame-pointer chain itself and deduplicates
//! stacks in its own hash map, keyed by a 64-bit hash of the process and the
//! frames; the map keeps the frames, so a hash collision is detected (and the
//! stack sent with its launch) rather than merged. A launch costs one fixed
//! 64-byte record, and each distinct stack is sent once, as (build id, file
//! offset) frames from the kernel's `bpf_get_stack`, which stay valid after
//! the process exits. The walk follows the kernel's rules (the return address
//! at `[sp]` on `push %rbp` and `endbr64` entries, then the `%rbp` chain), so
//! those frames are the ones that were hashed. [`Symbolizer`] resolves them
//! with blazesym (C++ and Rust names demangled, inlined functions as frames of
//! their own) and prints unknown frames as `file+0xoffset`.
//!
//! # Stacks without frame pointers
//! A frame-pointer walk stops at the first caller that keeps no frame pointer:
//! right after the launch in code built with plain `-O2`, and in
//! `__libc_start_call_main` on distributions whose glibc keeps none (Debian 12).
//! So, unless a *recipe* matches, the probe also sends the top of the stack,
//! from `sp` to the thread's stack top (its mm's `start_stack` for a main thread,
//! the stack pointer a thread started with otherwise) and at most 16 KiB, with
//! ip, sp and bp. User space unwinds the copy with `.eh_frame` through
//! `gpuperf-unwind` (the unwinder the injection library uses in process) over
//! the process's module table, which comes from the exec and mmap events (so a
//! process that has exited is unwound as well) or `/proc/PID/maps`.
//!
//! ```text
//!  probe: frame-pointer walk ─▶ recipe for (pid, ip, sp)? ──holds──▶ record names its stack
//!                                   │ none, or a word changed
//!                                   ▼
//!         copy (≤ 16 KiB) + ip, sp, bp ──▶ user space: unwind, answer with a recipe
//! ```
//!
//! A recipe lists the stack words the unwound stack depended on (its return
//! addresses, and the saved frame pointers it used: a word the unwind provably
//! ignores, such as a saved loop counter, is left out) with their values, and
//! whether bp mattered. The probe checks them in the page copy its walk already
//! holds and, if every word is unchanged, names the unwound stack without a
//! copy: the unwind would read the same words and give the same stack. So a hot
//! call site costs one copy, not one per launch (plus the launches made while
//! its first copy is on its way, a few hundred at most). A recipe can be wrong
//! only if a library is replaced at the same address and a launch passes
//! through it before the mapping event drops the process's recipes.
//!
//! 16 KiB hold 127 frames (the depth kept) of up to 128 bytes each; a stack
//! whose frames hold more ends where the copy does. Copies lost to a full ring
//! buffer leave the launch its frame-pointer stack.
//!
//! Every stack that stops before a root frame (`_start`, `clone`, `clone3`,
//! `start_thread`) is written behind the frame `[truncated]` and counted in
//! [`Summary::truncated_stacks`]: for an unwound stack, where the unwinder did
//! not end at a frame that `.eh_frame` marks as the outermost; for a
//! frame-pointer walk, where its outermost frame is none of those.
//! [`Options::unwind`] turns copies off.
//!
//! A process may be gone, and its `/proc/PID/maps` with it, before its stacks
//! are symbolized (a program that launches for a few milliseconds). So the BPF
//! program sends the full path of every file a traced process execs (at the
//! `sched_process_exec` tracepoint) or maps as code (at the mmap syscall's
//! tracepoints), with where it went, and the symbolizer finds a frame's file
//! among those by build id, or a raw-address frame's file and offset by those
//! places (the kernel gives raw addresses when it cannot read a build id, for
//! example while the process's memory map lock is taken). The path is put
//! together from the file's dentries and mounts, as `d_path` does, because
//! `bpf_d_path` is not allowed in tracepoint programs and fentry probes may be
//! refused (they are on the test VM).
//!
//! Why not `bpf_get_stackid`: on the test VM (Linux 6.18, 2 vCPUs) it cost
//! about 0.75 µs for a 4-frame stack plus 30 ns a frame. Most of that was one
//! page fault per walk: frame-pointer chains end in a zero, and the kernel
//! reads address 0 before it stops (a sampled profile showed the fault's
//! fix-up path as the top symbol). Reading frame by frame with
//! `bpf_probe_read_user` avoids the fault but was no faster: each call pays
//! ~40 ns in hardened-usercopy checks. So the walk copies the stack a page at
//! a time (one read from a frame to its page's end, one or two reads a
//! launch) and follows the chain in the copy. The frames' hash map is as fast
//! as an open-addressing array index here, and simpler.
//!
//! Probe overhead when the walk was chosen (`benches/probe_overhead.rs` at the
//! time), ns per launch, medians of 5 rounds of 10⁶ calls, 12 frames below
//! `main` (16 frames), before stack copies existed:
//!
//! | configuration | `bpf_get_stackid` | page-copy walk |
//! |---|---|---|
//! | compatibility mode (entry probe writes the record) | 1882 | 1039 |
//! | injection mode (entry stack + marker join) | 2529 | 1484 |
//! | marker only (stack at the marker) | 1718 | 757 |
//!
//! With stack copies and recipes (`cargo bench -p gpuperf-profiler --bench
//! probe_overhead`), ns added per launch on the calling thread's CPU (wall time
//! in parentheses), medians of 5 rounds of 10⁶ calls in one run, 30-frame
//! stacks, on a 2-core VM shared with other work (so wall times are noisy):
//!
//! | configuration | frame pointers | no frame pointers (`gcc -O2`) |
//! |---|---|---|
//! | compatibility mode, walk only (`unwind: false`) | 1433 (2215) | 1214 (1318) |
//! | compatibility mode, copies + recipes | 1480 (1961) | 1390 (2325) |
//! | injection mode (entry stack + marker join) | 1982 (3024) | |
//! | marker only | 1411 (1549) | |
//!
//! Frame-pointer code pays 50 to 90 ns of CPU more for complete stacks (a
//! recipe lookup; the words its walk read are not checked again), code without
//! frame pointers 180 to 220 ns (two runs): complete 30-frame stacks for under
//! 1.5 µs of CPU per launch (1.8 to 2.3 µs of wall time). Each configuration
//! sent 30 to 360 copies in 10⁶ launches, all while its call site's first
//! recipe was on its way.
//!
//! What remains is mostly the two uprobe hits themselves (about 0.6 µs for the
//! emulated `push %rbp`, 0.42 µs for the marker's NOP5).
//!
//! # Output and loss
//! Lines go to a [`gpuperf_merge::read::cpu::Writer`] as they arrive. Launches lost
//! to a full ring buffer are written as a `# dropped N` line and counted in the
//! [`Summary`], as are lost stacks and unsymbolized frames.
//!
//! # Privileges
//! Root, or CAP_BPF with CAP_PERFMON, on Linux 5.15+ with BTF. [`Profiler::start`]
//! checks each first and names the fix.

pub mod driver;
mod elf;
mod error;
mod event;
pub mod monitor_filter;
pub mod monitor_stats;
pub mod preflight;
mod report;
mod session;
mod symbolize;
mod unwinding;

mod skel {
    // Generated by libbpf-cargo from src/bpf/launch.bpf.c.
    #![allow(
        missing_docs,
        clippy::all,
        clippy::undocumented_unsafe_blocks,
        unused_qualifications,
        unused_imports
    )]
    include!(concat!(env!("OUT_DIR"), "/launch.skel.rs"));
}

mod driver_skel {
    // Generated by libbpf-cargo from src/bpf/driver.bpf.c.
    #![allow(
        missing_docs,
        clippy::all,
        clippy::undocumented_unsafe_blocks,
        unused_qualifications,
        unused_imports
    )]
    include!(concat!(env!("OUT_DIR"), "/driver.skel.rs"));
}

pub use elf::{
    FirstInsn, ProbePoint, api_functions, function, is_marked_api, segments_mapping, symbol_offset,
};
pub use error::{Error, Result};
pub use session::{
    Discoverer, MARKER_SYMBOL, Options, ProbeSpec, Profiler, Progress, SEMAPHORE_SYMBOL, Summary,
};
pub use symbolize::Symbolizer;
