//! Reader for Nsight Systems SQLite exports (`nsys export --type sqlite`), through
//! rusqlite and its bundled SQLite, so nothing needs installing.
//!
//! # What is read
//!
//! | table | becomes |
//! |---|---|
//! | `CUPTI_ACTIVITY_KIND_RUNTIME` | [`Record::Api`] (runtime `cuda*` or driver `cu*` by name) |
//! | `CUPTI_ACTIVITY_KIND_KERNEL` | [`ActivityKind::Kernel`], demangled name |
//! | `CUPTI_ACTIVITY_KIND_MEMCPY`, `_MEMSET` | [`ActivityKind::Memcpy`] (a peer-to-peer copy's `srcDeviceId` and `dstDeviceId` as its [`PeerDevices`]), [`ActivityKind::Memset`] |
//! | `CUPTI_ACTIVITY_KIND_SYNCHRONIZATION` | [`ActivityKind::Sync`] |
//! | `CUDA_CALLCHAINS` | the CPU stack of an API call (its `callchainId`) |
//! | `NVTX_EVENTS` (push/pop and start/end ranges) | frames above the API call, when they enclose it on its thread |
//! | `TARGET_INFO_GPU`, `TARGET_INFO_CUDA_GPU`, `TARGET_INFO_CUDA_DEVICE` | GPU names, by whichever of them the export has |
//! | `PROCESSES`, `ThreadNames` | process and thread names |
//! | `TARGET_INFO_SESSION_START_TIME` | the wall-clock time of timestamp 0 |
//!
//! Names are ids into `StringIds`. nsys encodes a process as `globalPid` and a
//! thread as `globalTid`, with the pid in bits 24..48 and the tid in bits 0..24.
//!
//! # Facts of the format this reader relies on
//!
//! - nsys lists a runtime call twice (`cudaLaunchKernel` and `cudaLaunchKernel_v7000`)
//!   with one `correlationId`; only one of the two rows has the `callchainId`. One
//!   API record is kept per (process, correlation id), the one with the call chain.
//! - A call chain's frames are ordered by `stackDepth`, innermost first. The first
//!   frames are NVIDIA's: libcupti, libcuda, and the libcudart frame next to the
//!   call, which may carry the wrong exported symbol name. These innermost NVIDIA
//!   frames are dropped and the API call's own name is the leaf.
//! - nsys records backtraces only for some calls (by default, the ones that take
//!   long enough). A call without one has the API call alone as its stack, and
//!   the summary says how many there are; an export made without
//!   `--cudabacktrace` has none.
//!
//! Stacks are built for launch calls and for every call that caused GPU work, and
//! handed to the join as [`Imported::launch_stacks`].

//! # Steps
//!
//! [`read`] opens the export and checks it (`schema`), reads the string ids and
//! the session's start (`meta`), the API calls (`runtime`), the GPU work table by
//! table (`gpu`), the call chains (`callchains`) and the NVTX ranges (`nvtx`); then
//! the names of processes and threads (`meta`) and of GPUs (`gpus`), and
//! builds the launch stacks. Every column is picked by name from the table's own
//! columns. The tables of metadata (string ids, session start, names, call chains,
//! NVTX) never make the reader refuse an export: one it cannot read is left out,
//! and the notes say which and what that costs.
//!
//! [`ActivityKind::Kernel`]: crate::model::ActivityKind::Kernel
//! [`ActivityKind::Memcpy`]: crate::model::ActivityKind::Memcpy
//! [`ActivityKind::Memset`]: crate::model::ActivityKind::Memset
//! [`ActivityKind::Sync`]: crate::model::ActivityKind::Sync
//! [`PeerDevices`]: crate::model::PeerDevices

mod callchains;
mod gpu;
mod gpus;
mod meta;
mod nvtx;
mod runtime;
mod schema;
#[cfg(test)]
mod tests;

use std::num::NonZeroU32;
use std::path::Path;

use rustc_hash::{FxHashMap, FxHashSet};

use crate::error::{Error, Result};
use crate::model::{
    Activity, ApiCall, ApiDomain, Device, Process, Record, StringTable, is_launch_api,
};
use crate::read::cpu::{CpuLaunch, CpuTrace};
use crate::read::imported::Imported;
use callchains::Chains;
use gpus::Gpus;
use meta::{Names, Time};
use nvtx::Ranges;
use runtime::Call;
use schema::{Export, Skipped};

/// Whether the start of a file is an SQLite database.
pub(crate) fn is_sqlite(head: &[u8]) -> bool {
    head.starts_with(b"SQLite format 3\0")
}

const KERNEL: &str = "CUPTI_ACTIVITY_KIND_KERNEL";
const MEMCPY: &str = "CUPTI_ACTIVITY_KIND_MEMCPY";
const MEMSET: &str = "CUPTI_ACTIVITY_KIND_MEMSET";
const SYNC: &str = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION";
const RUNTIME: &str = "CUPTI_ACTIVITY_KIND_RUNTIME";

fn pid_of(global: i64) -> u32 {
    ((global >> 24) & 0xff_ffff) as u32
}

fn tid_of(global: i64) -> u32 {
    (global & 0xff_ffff) as u32
}

/// A frame's text in a folded stack: no `;`, which separates frames, and no line
/// breaks.
fn frame_text(text: &str) -> String {
    text.replace(';', ":").replace(['\n', '\r'], " ")
}

/// Reads an export. Fails when the file is not an SQLite database or has none of
/// the CUPTI tables, or when a table of GPU work or API calls cannot be read. A
/// table of metadata (names, NVTX ranges, call chains) that cannot be read is
/// left out, and a note says so.
pub fn read(path: &Path, strings: &mut StringTable) -> Result<Imported> {
    let export = Export::open(path)?;
    let mut skipped = Skipped::default();
    let mut missing = Vec::new();
    let names = Names::read(&export, &mut skipped);
    let names = or_note(&mut missing, "StringIds", "names are empty", names);
    let time = or_note(
        &mut missing,
        "TARGET_INFO_SESSION_START_TIME",
        "times are from the start of the session",
        Time::read(&export),
    );
    let mut imp = Imported::new(path, "Nsight Systems export", time.clock());

    let calls = runtime::calls(&export, &names, time, &mut skipped)?;
    let mut activities = Vec::new();
    gpu::kernels(
        &export,
        &names,
        time,
        strings,
        &mut skipped,
        &mut activities,
    )?;
    gpu::others(&export, time, &mut skipped, &mut activities)?;
    let meta = Metadata::read(&export, &names, time, &mut skipped, &mut missing);

    let (mut stacks, without_chain) =
        launch_stacks(&calls, &activities, &meta.chains, &meta.ranges);
    if meta.chains_read {
        let stacked = stacks.launches.len() as u64;
        imp.notes.extend(backtrace_note(stacked, without_chain));
    }
    imp.notes.extend(skipped.notes());
    imp.notes.extend(missing);
    imp.notes.extend(meta.gpus.notes());
    imp.notes.extend(unnamed_gpus_note(&activities, &meta.gpus));

    stacks.comms.extend(meta.threads.iter().cloned());
    for l in &stacks.launches {
        let name = meta
            .process_names
            .get(&l.pid)
            .map(|n| n.rsplit('/').next().unwrap_or(n).to_owned())
            .unwrap_or_else(|| "process".to_owned());
        stacks.comms.entry((l.pid, l.tid)).or_insert(name);
    }
    push_processes(&mut imp, &calls, &activities, &meta, time);
    push_calls(&mut imp, &calls, strings);
    imp.records
        .extend(activities.into_iter().map(Record::Activity));
    imp.launch_stacks = (!stacks.launches.is_empty()).then_some(stacks);
    Ok(imp)
}

/// The tables that only add to the GPU work and API calls. Each one that cannot
/// be read is left out, with a note in `missing`.
struct Metadata {
    chains: Chains,
    /// Whether `CUDA_CALLCHAINS` was read (or is absent), so that calls without a
    /// chain are calls nsys took none for.
    chains_read: bool,
    ranges: Ranges,
    process_names: FxHashMap<u32, String>,
    threads: Vec<((u32, u32), String)>,
    gpus: Gpus,
}

impl Metadata {
    fn read(
        export: &Export,
        names: &Names,
        time: Time,
        skipped: &mut Skipped,
        missing: &mut Vec<String>,
    ) -> Self {
        let chains = callchains::read(export, names, skipped);
        let chains_read = chains.is_ok();
        let chains = or_note(
            missing,
            "CUDA_CALLCHAINS",
            "each stack is the API call alone",
            chains,
        );
        let ranges = nvtx::ranges(export, names, time, skipped);
        let ranges = or_note(missing, "NVTX_EVENTS", "stacks have no NVTX ranges", ranges);
        let process_names = meta::process_names(export, skipped);
        let process_names = or_note(missing, "PROCESSES", "processes are unnamed", process_names);
        let threads = meta::thread_names(export, names, skipped);
        let threads = or_note(
            missing,
            "ThreadNames",
            "threads are named after their process",
            threads,
        );
        let gpus = gpus::read(export, skipped);
        let gpus = or_note(missing, "TARGET_INFO_GPU", "GPUs are named by number", gpus);
        Self {
            chains,
            chains_read,
            ranges,
            process_names,
            threads,
            gpus,
        }
    }
}

/// The value of a metadata step, or its default and a note saying which `table`
/// could not be read and what the trace is `without` it.
fn or_note<T: Default>(notes: &mut Vec<String>, table: &str, without: &str, r: Result<T>) -> T {
    r.unwrap_or_else(|e| {
        let cause = match &e {
            Error::NotATrace { found, .. } => found.clone(),
            e => e.to_string(),
        };
        // SQLite's message quotes the whole query; the table is named already.
        let cause = cause.split(" in SELECT ").next().unwrap_or_default();
        notes.push(format!("`{table}` could not be read ({cause}): {without}"));
        T::default()
    })
}

/// What the summary says about CUDA devices with GPU work that the export names
/// no GPU for: the timeline calls them `GPU N`.
fn unnamed_gpus_note(activities: &[Activity], gpus: &Gpus) -> Option<String> {
    let mut unnamed: Vec<u32> = activities
        .iter()
        .filter(|a| !gpus.of(a.pid).any(|g| Some(g.id) == a.device))
        .map(|a| a.device_key())
        .collect();
    unnamed.sort_unstable();
    unnamed.dedup();
    match unnamed.as_slice() {
        [] => None,
        [id] => Some(format!(
            "the export names no GPU for CUDA device {id}: its tracks are named `GPU {id}`"
        )),
        ids => Some(format!(
            "the export names no GPU for CUDA devices {}: their tracks are named `GPU N`",
            gpus::join(ids)
        )),
    }
}

/// The stack of each launch call and of each call that caused GPU work: its call
/// chain, the NVTX ranges that enclose it on its thread, and the call as the leaf.
/// Also returns how many of them have no call chain.
fn launch_stacks(
    calls: &[Call],
    activities: &[Activity],
    chains: &Chains,
    ranges: &Ranges,
) -> (CpuTrace, u64) {
    let with_work: FxHashSet<(u32, u32)> = activities
        .iter()
        .map(|a| (a.pid, a.correlation_id))
        .collect();
    let mut stacks = CpuTrace::with_correlation_ids();
    let mut without_chain = 0u64;
    let mut frames: Vec<&str> = Vec::new();
    for c in calls {
        if !(is_launch_api(&c.name) || with_work.contains(&(c.pid, c.corr))) {
            continue;
        }
        frames.clear();
        match c.callchain.and_then(|id| chains.get(&id)) {
            Some(chain) => frames.extend(chain.iter().map(String::as_str)),
            None => without_chain += 1,
        }
        if let Some(rs) = ranges.get(&(c.pid, c.tid)) {
            // Ranges are sorted by start: the enclosing ones, outermost first.
            frames.extend(
                rs.iter()
                    .take_while(|r| r.0 <= c.start)
                    .filter(|r| r.1 >= c.start)
                    .map(|r| r.2.as_str()),
            );
        }
        frames.push(&c.name);
        let stack = stacks.stacks.intern(frames.join(";").as_bytes());
        stacks.launches.push(CpuLaunch {
            ts_ns: c.start,
            pid: c.pid,
            tid: c.tid,
            correlation_id: NonZeroU32::new(c.corr),
            stack,
        });
    }
    (stacks, without_chain)
}

/// What the summary says when some stacks (of `stacked`) have no backtrace.
fn backtrace_note(stacked: u64, without_chain: u64) -> Option<String> {
    if stacked > 0 && without_chain == stacked {
        Some("the export has no CUDA API backtraces (record with `nsys profile --cudabacktrace`): each stack is the API call alone".to_owned())
    } else if without_chain > 0 {
        Some(format!(
            "{without_chain} of {stacked} API calls have no backtrace in the export (nsys records them only for some calls): their stack is the API call alone"
        ))
    } else {
        None
    }
}

/// A process record for each process with calls or GPU work, each with the GPUs
/// it sees.
fn push_processes(
    imp: &mut Imported,
    calls: &[Call],
    activities: &[Activity],
    meta: &Metadata,
    time: Time,
) {
    let mut pids: Vec<u32> = calls
        .iter()
        .map(|c| c.pid)
        .chain(activities.iter().map(|a| a.pid))
        .collect();
    pids.sort_unstable();
    pids.dedup();
    let first = calls
        .iter()
        .map(|c| c.start)
        .chain(activities.iter().map(|a| a.start_ns))
        .min()
        .unwrap_or(time.zero());
    for pid in pids {
        imp.records.push(Record::Process(Process {
            pid,
            ppid: None,
            exe: meta.process_names.get(&pid).cloned().unwrap_or_default(),
            start_ns: first,
            start_realtime_ns: (imp.clock == crate::model::Clock::Realtime).then_some(first),
        }));
        for g in meta.gpus.of(pid) {
            imp.records.push(Record::Device(Device {
                pid,
                id: g.id,
                name: g.name.clone(),
                compute_capability: g.compute_capability,
            }));
        }
    }
}

/// An API record for each call: runtime (`cuda*`) or driver by its name.
fn push_calls(imp: &mut Imported, calls: &[Call], strings: &mut StringTable) {
    for c in calls {
        let domain = if c.name.starts_with("cuda") {
            ApiDomain::Runtime
        } else {
            ApiDomain::Driver
        };
        imp.records.push(Record::Api(ApiCall {
            pid: c.pid,
            tid: c.tid,
            start_ns: c.start,
            end_ns: c.end,
            correlation_id: c.corr,
            cbid: 0,
            domain,
            name: strings.intern(&c.name),
        }));
    }
}
