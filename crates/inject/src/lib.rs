//! CUPTI injection library for gpuperf.
//!
//! The CUDA driver loads this cdylib into the target process through
//! `CUDA_INJECTION64_PATH` during `cuInit` and calls [`InitializeInjection`]. From
//! then on the library records, in the GPU trace format of
//! [`gpuperf_merge::gputrace`]:
//!
//! - an API record (entry and exit time, Linux TID, correlation id) for every kernel
//!   launch (`cudaLaunchKernel`, `cudaLaunchKernelExC`, cooperative launches,
//!   CUDA 13's `__cudaLaunchKernel`, `cuLaunchKernel`/`cuLaunchKernelEx`,
//!   `cudaGraphLaunch`/`cuGraphLaunch`, all `_ptsz` variants), memory copy, memset
//!   and synchronization call. Only those callbacks are enabled, never a whole domain;
//! - `CONCURRENT_KERNEL` (never the serializing `KERNEL` kind), `MEMCPY`, `MEMCPY2`
//!   (peer-to-peer copies, with both devices), `MEMSET`,
//!   `SYNCHRONIZATION`, `OVERHEAD`, `DEVICE` and `CONTEXT` activity, with graph and
//!   graph-node ids, and CUPTI's dropped-record counts;
//! - the CPU stack of every launch, copy and memset call, taken on the calling
//!   thread in the API-enter callback ([`stacks`]): native frames unwound with
//!   `.eh_frame`, CPython 3.10–3.13 frames read without the GIL, each distinct
//!   stack written once, and the API record naming it. No eBPF and no root.
//!
//! ```text
//!  app thread ── API callback ──▶ per-thread shard ─┐
//!                 ├─▶ stack (in process, deduped)   │
//!                 └─▶ gpuperf_launch_marker(corr)   ├─▶ trace writer ─▶ gpu-PID.gputrace
//!  CUPTI ── activity buffer ──▶ decode ─────────────┘      ▲
//!  flush thread (every GPUPERF_FLUSH_MS), atexit, cudaDeviceReset, context destroy,
//!  and signals (SIGINT, SIGTERM, crashes, abort) with GPUPERF_FLUSH_ON_SIGNAL=1 (see `interrupt`)
//! ```
//!
//! Each thread's name (`PR_GET_NAME`) is recorded at its first recorded call and
//! again at thread exit; at the end the names of the threads still running are
//! read from `/proc/self/task`: a thread that renames itself after its first
//! call is named by its last name.
//!
//! # Clock and thread ids
//! A CUPTI timestamp callback makes every activity timestamp `CLOCK_MONOTONIC`, the
//! clock of `bpf_ktime_get_ns()`, and API records are stamped with the same clock.
//! Where CUPTI refuses that callback it keeps its default clock; one pair of
//! readings (`cuptiGetTimestamp` and CLOCK_MONOTONIC at one instant, in the log)
//! then converts every GPU time, so the recording goes on.
//! Thread ids are Linux TIDs (`CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM`).
//!
//! # The marker contract, for CPU profilers
//! At the entry of every launch, copy and memset call, before the call does its
//! work, the library calls [`gpuperf_launch_marker`] on the calling thread with:
//!
//! | register | value |
//! |---|---|
//! | `rdi` (arg 1) | the CUPTI correlation id, zero-extended; the API record and the GPU records of this call carry the same id |
//! | `rsi` (arg 2) | `domain << 32 \| cbid`: CUPTI callback domain (1 driver, 2 runtime) and callback id |
//!
//! The marker's first instruction is the 5-byte NOP `0f 1f 44 00 00`, which Linux
//! 6.17 and later turn into a fast uprobe path. The marker is only called while the
//! 16-bit [`gpuperf_marker_semaphore`] is non-zero: attach the uprobe with its file
//! offset as `ref_ctr_offset` (the USDT semaphore mechanism) and the kernel raises
//! it while the probe is attached. `GPUPERF_MARKER=always` calls the marker
//! regardless. A driver call made inside a recorded runtime call does not call the
//! marker again; its GPU work is written with the runtime call's correlation id.
//!
//! # Files
//! One trace per process, `gpuperf-PID.gputrace` by default, and a log of
//! diagnostics beside it; see [`config`] for the variables. Both are created
//! exclusively and never truncated: a name already taken gets `.1`, `.2`, …
//! before its extension. Every
//! `GPUPERF_FLUSH_MS` (500 ms) an unforced CUPTI flush hands over every buffer whose
//! records are complete, so a process killed by SIGKILL keeps everything older than
//! that, except records that share a 4 MiB CUPTI buffer with a kernel still
//! running: they wait for it. A forced flush comes at exit, before the activity
//! kinds are disabled, or earlier, while the last context is being destroyed (a
//! CUDA runtime may destroy its contexts at exit before gpuperf's handler runs,
//! and no flush is made once no context is left: CUPTI tools have hung there);
//! GPU work still running then comes back without an end and is counted as
//! dropped (`incomplete`), never written with a wrong end.
//! Child processes that inherit `CUDA_INJECTION64_PATH` write their own file; a
//! child forked without `exec` writes nothing. A second `InitializeInjection` in
//! one process is ignored.
//!
//! # Guarantees at signals, exit and exec
//! - **SIGINT and SIGTERM** (handled only under `GPUPERF_FLUSH_ON_SIGNAL=1`,
//!   and only where the program left the default): the handler is
//!   async-signal-safe on any thread, one that never made a CUDA call and is
//!   inside `malloc` included. It reads no thread-local storage (glibc
//!   allocates this library's on a thread's first access) and never waits:
//!   gpuperf's closing thread closes the trace, then the signal is sent again
//!   with its default action, and the program dies of it with the status it
//!   would have had. Meanwhile no CUDA call starts (a thread that tries waits
//!   for the close and dies of the signal, as does one that calls `exit`); a
//!   call the signal landed in is waited for, up to 1 s, and recorded.
//! - **Crashes and `abort`** (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT; same
//!   conditions): the thread the signal hit waits in its handler for the
//!   close, up to 5 s, then the signal takes its course on that thread (a
//!   fault happens again, a sent signal is sent again), so the program and a
//!   core dump end as without gpuperf. Inside a CUDA call, or on the thread
//!   closing the trace (gpuperf's closing thread, or one in `exit`'s
//!   handler), the handler does not wait (the close would need the locks
//!   held there): the trace stays unclosed. A close that crashes while a
//!   signal is ending the program ends it with that signal.
//! - **Exit.** The trace is closed once, by the first of `exit`'s handler and
//!   a signal's close; the other waits. Calls made after a thread's
//!   thread-local state was destroyed (atexit handlers registered after CUDA
//!   started, which `exit` runs after destroying the main thread's; destructors
//!   of thread-specific data at thread exit) are recorded, through a state kept
//!   by thread id, and counted in the log. Calls made after the final flush
//!   (other threads while `exit` runs, static destructors, atexit handlers
//!   registered before CUDA started) are counted, and a NOTE says how many.
//!   Nothing but notes follows the `CLOSED` record. The close waits for a
//!   flush in progress, and for its own CUPTI calls (the forced flush, the
//!   last PC samples, disabling the kinds: each made on a thread of its own),
//!   only until the call has been inside CUPTI for 10 s (a driver that
//!   stopped answering); time in gpuperf's own buffer callback does not
//!   count. It then writes what gpuperf holds, makes no further CUPTI call,
//!   and a NOTE says which GPU records are missing. The same holds for the
//!   close a signal asks for: the program still dies of the signal.
//! - **Exec.** An image that a process execs writes its own trace (its name
//!   numbered, as its pid is the same); what the old image recorded up to its
//!   last periodic flush stays in the first file, which is not closed. Readers
//!   of a directory read both, the later image as a process of its own.
//! - **`_exit`, SIGKILL:** no close; the file keeps what the last periodic
//!   flush wrote, and readers report it as not closed.
//! - **A file system that stops answering** (a hung NFS mount): the trace and
//!   the log are written by threads of their own (module `outfile`), and each
//!   write is waited for until it has been inside the kernel for 10 s; the
//!   file is then given up, and the trace ends there, not closed. No thread
//!   of the program, and not its exit, waits longer.
//!
//! # Failure contract
//! Nothing here prints to stdout, calls `exit`, or lets a panic cross into the
//! driver. When CUPTI is missing, too old or too new, or already held by another
//! tool (Nsight Systems, torch.profiler), the program runs exactly as without
//! injection and the trace holds a NOTE record saying why it is empty.
//!
//! - **Which libcupti.** The candidates of [`locate`] are tried in turn: one whose
//!   CUDA major is newer than the driver (`cuDriverGetVersion`) is skipped before
//!   it is loaded, and one that cannot be loaded, is of a release this build
//!   does not know, or whose `cuptiSubscribe` fails with any code but
//!   `CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED` (libcupti 12.9 and 13.0
//!   answer `CUPTI_ERROR_NOT_INITIALIZED` or `CUPTI_ERROR_UNKNOWN` without a
//!   driver they can use) gives way to the next. CUPTI's refusals of virtualized
//!   devices and of confidential computing are spelled out in plain words. The log names every
//!   candidate rejected and why; when all are, the NOTE does. `GPUPERF_CUPTI_PATH`
//!   is tried alone.
//! - **Another CUPTI client started later** (torch.profiler, Kineto) shares the
//!   process-wide activity state: its failed subscribe does not stop it from
//!   registering its own buffers and clock, and it disables the kinds when it
//!   stops. gpuperf does not fight it: the program and its profiler get what
//!   they would without gpuperf. Where that client calls CUPTI through its GOT
//!   (a library linked against the same libcupti, as Kineto is inside
//!   libtorch), gpuperf sees its `cuptiActivityRegisterCallbacks` and
//!   `cuptiFinalize` first (see `hook`): everything recorded until then is
//!   flushed to gpuperf (otherwise CUPTI would hand gpuperf's unflushed
//!   buffers to the other client), gpuperf no longer flushes or disables what
//!   is now that client's, and NOTEs say from when (seconds into the run, and
//!   after how many launches, copies and memsets) the GPU side, and after a
//!   `cuptiFinalize` the API side too, stopped, and how many calls after that
//!   have no GPU record. A client that calls CUPTI through `dlsym` is noticed
//!   later instead (GPU timestamps that are not CLOCK_MONOTONIC, dropped and
//!   counted; or, at exit, launches, copies or memsets with no GPU record
//!   after the forced flush), with the NOTE "GPU activity stopped after N
//!   launches, copies and memsets: another CUPTI client (e.g. torch.profiler)
//!   took over"; the records CUPTI handed to it are lost to gpuperf.
//! - **Set-up failing half-way.** When a step after `cuptiSubscribe` fails (CUPTI
//!   refuses a callback id or an activity kind), every step already taken is
//!   undone: the activity kinds gpuperf enabled are disabled and the subscription
//!   is dropped, with all its callbacks. The program carries no CUPTI overhead,
//!   another tool can still subscribe, and the NOTE names the failed call.
//! - **CUPTI stopping itself** (`CUPTI_CBID_STATE_FATAL_ERROR`) is noted with
//!   CUPTI's message. Activity buffers that cannot be allocated are replaced from
//!   a small reserve, never by a null buffer; any loss is counted and noted.
//!
//! # Contract: what the library guarantees inside the program it runs in
//! The library runs on the application's threads, inside every recorded CUDA
//! call. A program that runs correctly without it runs the same with it:
//!
//! - **Stack.** A callback uses about 2 KiB of the calling thread's stack in
//!   an unoptimized build (less optimized). The stack capture itself, and the
//!   work on the captured frames, run on a stack of the unwinder's own (one per
//!   unwind cache, 256 KiB, resident as used), so threads with 16 KiB stacks
//!   and signal handlers on an 8 KiB `sigaltstack` may make CUDA calls. The
//!   exception is the capture of a stack proven the same as one kept (most
//!   launches in a loop), which stays on the caller's stack only where it has
//!   `gpuperf_unwind::WHOLE_ON_CALLER_STACK` (64 KiB) left, and uses a few KiB
//!   of it. A caller with less than `gpuperf_unwind::MIN_STACK_LEFT` bytes left
//!   gets no stack ("skipped for lack of stack").
//! - **Cancellation.** No cancellation point acts inside a callback: each
//!   disables cancellation for its body (deferred cancellation then acts at the
//!   program's next cancellation point, as without gpuperf).
//! - **Memory.** The thread's own stack is the only memory read without a
//!   check; Python frames and code objects are read only in pages probed
//!   readable during the same capture (no page is trusted across captures).
//! - **Signals.** A signal handler may make CUDA calls while the thread is in
//!   `malloc` or inside gpuperf. The recording path takes no lock shared with
//!   other threads' callbacks, and allocates with `mmap` only (per-thread record
//!   chunks, a lock-free table of distinct stacks, activity buffers allocated
//!   ahead by the flush thread). A callback that re-enters gpuperf on the same
//!   thread returns at once; so do CUDA calls on the flush thread (made by an
//!   allocator that calls CUDA, when that thread allocates). The flush thread
//!   blocks all signals. Known
//!   exceptions, each once per thread or per `dlopen`: a thread's first
//!   callback allocates its state (and glibc allocates the library's TLS block
//!   on its first access), its first capture allocates its frame buffer, and a
//!   capture that meets a module loaded since the last refresh adds that
//!   module to the module table (reading only its headers; the whole table is
//!   rebuilt on the flush thread, or on the capturing thread only when modules
//!   were unloaded too). A stack taken in a signal handler continues through
//!   the signal frame into the interrupted code, up to its root. The module
//!   table is re-read after a `dlclose` before a stack is identified: a
//!   library loaded where an unloaded one was is a module of its own.
//! - **Memory short.** Where allocations fail (an address-space limit
//!   reached), what the library allocates inside the application's calls is
//!   allocated so that a failure is counted, never an abort of the program: a
//!   thread's capture state (its first capture is then skipped, "skipped for
//!   lack of memory", and the next one tries again), the buffers of its kept
//!   walks ("walks not kept for lack of memory"), the activity buffers (from
//!   a reserve, then a discard buffer whose loss is counted) and record chunks
//!   (`mmap`; records dropped and counted).
//! - **Graphs.** Graph-node callbacks take a lock shared between threads, and
//!   are outside the signal guarantee above. Nodes copied by instantiate,
//!   clone and exec-update take no stack (they carry their original's); node
//!   copies and teardowns reported inside those calls and the destroy calls
//!   are buffered on the thread and applied once when the call returns;
//!   destroyed nodes are forgotten. Memory stays flat however many graphs are
//!   instantiated: at most 2^20 nodes are remembered, and node records waiting
//!   for the trace are written early (see [`stacks`]); past those bounds nodes
//!   are counted, not kept.
//! - **No silent loss.** What is not recorded is counted, and the log's last
//!   lines say how many: API calls that re-entered gpuperf, calls nested more
//!   than 32 deep, calls whose thread could not allocate its list of open
//!   calls (also a NOTE), records past a thread's 4 Mi cap, calls after the trace
//!   closed (also a NOTE in the trace), calls recorded without their
//!   thread's state (at exit), stacks skipped for lack of stack or of
//!   memory or without an id (table full, contended), graph nodes not kept,
//!   and everything CUPTI dropped.
//!
//! What it costs (`cargo bench -p gpuperf-inject --bench callback`, measured
//! when the bench played launches through a mock libcupti, a shared 2-core VM
//! at load 4-8, medians; the bench now runs on the simulated runtime, whose
//! CUPTI does more per launch: +0.77 us without stacks in one run of
//! `GPUPERF_BENCH_ONLY=window` on such a VM): 0.25-0.4 us per launch
//! without stacks; a 30-frame native stack adds 0.4-0.7 us (8 threads
//! launching at once: 0.7-1.0 us per launch with stacks); a CPython 3.12 stack
//! of 31 Python frames adds 0.8-1.3 us; launches from 4 ucontext coroutines,
//! a switch each, 1.1-1.8 us with stacks against 0.7-1.2 us without.
//! Instantiating and destroying a 1000-node graph: 3.2 us without stacks, 56
//! us with them (two or three callbacks per copied node, and a `GRAPH_NODE`
//! record per copy, written by the flush thread). On the simulated runtime
//! (`sim/bench/graph_instantiate.sh`): 32 us without gpuperf, 50 us with
//! stacks off, 85 us with stacks on; peak memory 10 MB after 200 or 800
//! instantiations.
//! Memory: 256 KiB of address space per unwind cache for its stack, about 2
//! MiB per thread that launches for its last walk and the stacks it kept to
//! prove instead of walking (resident as used), 64 KiB
//! chunks per thread for records between flushes (unmapped after each), 96 MiB
//! of address space (resident as used) for distinct stacks, 4 activity buffers
//! of 4 MiB allocated ahead and 2 in reserve, and up to one 4 MiB buffer in
//! CUPTI per thread that launches (see `buffers::BUFFER_SIZE`).

mod api;
pub mod autograd;
mod buffers;
pub mod capture;
mod clock;
pub mod config;
mod cupti;
pub mod decode;
mod driver;
mod error;
mod guard;
mod hook;
mod interrupt;
pub mod locate;
mod log;
mod nvtx;
mod outfile;
pub mod pcsampling;
mod recorder;
mod seen;
mod shard;
pub mod stacks;
mod sys;
mod threads;

use std::panic::catch_unwind;
use std::sync::atomic::{AtomicBool, AtomicU16};

pub use cupti::Cupti;
pub use error::{CuptiError, Error, Result};

/// The GPU trace format version this library writes.
pub const TRACE_FORMAT_VERSION: u16 = gpuperf_merge::gputrace::FORMAT_VERSION;

/// Called once by the CUDA driver through `CUDA_INJECTION64_PATH`.
///
/// Returns 1 whether or not recording could start: a failure is written to the
/// trace and the log, and the application must run on unchanged, which is the one
/// behaviour the driver guarantees for 1.
#[unsafe(no_mangle)]
pub extern "C" fn InitializeInjection() -> i32 {
    // Every thread started during set-up (the flush thread, CUPTI's workers)
    // inherits a full signal mask: the application's process-directed signals
    // must reach the application's threads only.
    let _ = threads::with_signals_blocked(|| catch_unwind(recorder::initialize));
    1
}

/// Set, no launch takes a CPU stack until it is cleared; the launches in
/// between are recorded as usual, and counted among those without a stack
/// (with their reason, at exit). Nothing in gpuperf sets it: a benchmark does,
/// so that one process times the same loop with stacks and without, in
/// alternate blocks of steps (`sim/bench/hf_interleaved.sh`), where runs of two
/// processes would see a shared machine's speed move between them.
#[unsafe(no_mangle)]
#[allow(non_upper_case_globals)]
pub static gpuperf_bench_stacks_off: AtomicBool = AtomicBool::new(false);

/// Nonzero while a CPU profiler is attached to [`gpuperf_launch_marker`]; the
/// kernel maintains it through the uprobe's `ref_ctr_offset`. It lives in the
/// `.probes` section, as USDT semaphores do, so that it is file-backed.
///
/// It is page-aligned so that its file page is mapped once. Otherwise the
/// linker may put it in the file page that ends the RELRO segment, which the
/// loader maps twice; the kernel then counts in the copy that becomes
/// read-only and the marker never fires (seen in release builds).
#[unsafe(no_mangle)]
#[unsafe(link_section = ".probes")]
#[allow(non_upper_case_globals)]
pub static gpuperf_marker_semaphore: Semaphore = Semaphore(AtomicU16::new(0));

/// The semaphore's page-aligned storage; the counter is its first two bytes.
#[repr(C, align(4096))]
pub struct Semaphore(pub AtomicU16);

/// The probe point for CPU profilers; see the crate docs for its contract. Its first
/// instruction is a 5-byte NOP and it does nothing else.
#[cfg(target_arch = "x86_64")]
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub extern "C" fn gpuperf_launch_marker(correlation_id: u64, callback: u64) {
    core::arch::naked_asm!(".byte 0x0f, 0x1f, 0x44, 0x00, 0x00", "ret")
}

/// The probe point for CPU profilers; see the crate docs for its contract.
#[cfg(not(target_arch = "x86_64"))]
#[unsafe(no_mangle)]
#[inline(never)]
pub extern "C" fn gpuperf_launch_marker(correlation_id: u64, callback: u64) {
    std::hint::black_box((correlation_id, callback));
}

/// Test and benchmark access to the recorder's internals.
#[doc(hidden)]
pub mod testing {
    pub use crate::api::{Class, classify};
    pub use crate::clock::monotonic_ns;
}
