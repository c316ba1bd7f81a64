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
//! | `TARGET_INFO_GPU`, `PROCESSES`, `ThreadNames` | device, process and thread names |
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

use std::path::Path;

use rusqlite::{Connection, OpenFlags};
use rustc_hash::{FxHashMap, FxHashSet};

use crate::error::{Error, Result};
use crate::model::{
    Activity, ActivityKind, ApiCall, ApiDomain, Clock, Device, MemcpyKind, PeerDevices, Process,
    Record, StringTable, api_base_name, is_launch_api,
};
use crate::read::cpu::{CpuLaunch, CpuTrace};
use crate::read::imported::Imported;

/// Whether the start of a file is an SQLite database.
pub fn is_sqlite(head: &[u8]) -> bool {
    head.starts_with(b"SQLite format 3\0")
}

const KERNEL: &str = "CUPTI_ACTIVITY_KIND_KERNEL";
const MEMCPY: &str = "CUPTI_ACTIVITY_KIND_MEMCPY";
const MEMSET: &str = "CUPTI_ACTIVITY_KIND_MEMSET";
const SYNC: &str = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION";
const RUNTIME: &str = "CUPTI_ACTIVITY_KIND_RUNTIME";

/// NVTX event types of ranges: push/pop and start/end.
const NVTX_RANGES: [i64; 2] = [59, 60];

/// Libraries whose frames next to the API call are CUDA's own machinery.
fn is_cuda_internal(module: &str) -> bool {
    let base = module.rsplit('/').next().unwrap_or(module);
    base.starts_with("libcupti") || base.starts_with("libcuda.so") || base.starts_with("libcudart")
}

/// An NVTX range: start, end, text.
type Range = (u64, u64, String);

fn pid_of(global: i64) -> u32 {
    ((global >> 24) & 0xff_ffff) as u32
}

fn tid_of(global: i64) -> u32 {
    (global & 0xff_ffff) as u32
}

/// Reads an export. Fails when the file is not an SQLite database or has none of
/// the CUPTI tables.
pub fn read(path: &Path, strings: &mut StringTable) -> Result<Imported> {
    let not_export = |found: String| Error::NotATrace {
        path: path.to_owned(),
        expected: "Nsight Systems SQLite export",
        found,
    };
    // One line: SQLite may quote a damaged schema, line breaks and all.
    let sql = |e: rusqlite::Error| {
        let text = e.to_string();
        let mut line = text.split_whitespace().collect::<Vec<_>>().join(" ");
        if line.len() > 300 {
            let cut = (0..=300)
                .rev()
                .find(|&i| line.is_char_boundary(i))
                .unwrap_or(0);
            line.truncate(cut);
            line.push('…');
        }
        not_export(format!("SQLite: {line}"))
    };
    let db = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(sql)?;
    let tables: FxHashSet<String> = db
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table'")
        .and_then(|mut s| {
            s.query_map([], |r| r.get::<_, String>(0))?
                .collect::<rusqlite::Result<_>>()
        })
        .map_err(sql)?;
    if ![KERNEL, MEMCPY, MEMSET, RUNTIME]
        .iter()
        .any(|t| tables.contains(*t))
    {
        return Err(not_export(format!(
            "an SQLite database without the CUPTI tables ({KERNEL}, {RUNTIME}, …): export an nsys report recorded with CUDA tracing"
        )));
    }
    let has = |t: &str| tables.contains(t);
    let columns = |t: &str| -> Result<FxHashSet<String>> {
        db.prepare(&format!("SELECT name FROM pragma_table_info('{t}')"))
            .and_then(|mut s| {
                s.query_map([], |r| r.get::<_, String>(0))?
                    .collect::<rusqlite::Result<_>>()
            })
            .map_err(sql)
    };
    let names: FxHashMap<i64, String> = if has("StringIds") {
        db.prepare("SELECT id, value FROM StringIds")
            .and_then(|mut s| {
                s.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                    .collect::<rusqlite::Result<_>>()
            })
            .map_err(sql)?
    } else {
        FxHashMap::default()
    };
    let name =
        |id: Option<i64>| -> &str { id.and_then(|i| names.get(&i)).map_or("", String::as_str) };

    let base = if has("TARGET_INFO_SESSION_START_TIME") {
        db.query_row(
            "SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME LIMIT 1",
            [],
            |r| r.get::<_, i64>(0),
        )
        .ok()
        .and_then(|v| u64::try_from(v).ok())
    } else {
        None
    };
    let mut imp = Imported::new(
        path,
        "Nsight Systems export",
        if base.is_some() {
            Clock::Realtime
        } else {
            Clock::Monotonic
        },
    );
    let base = base.unwrap_or(0);
    let ts = |v: i64| u64::try_from(v).unwrap_or(0).saturating_add(base);

    // API calls: one per (process, correlation id), preferring the row with a call chain.
    struct Call {
        pid: u32,
        tid: u32,
        start: u64,
        end: u64,
        corr: u32,
        name: String,
        callchain: Option<i64>,
    }
    let mut calls: Vec<Call> = Vec::new();
    // Rows skipped for a missing or malformed column, by table.
    let mut bad_rows: std::collections::BTreeMap<&str, u64> = Default::default();
    // Copies whose source or destination device is missing or not a device.
    let mut half_peer = 0u64;
    if has(RUNTIME) {
        let chain_col = columns(RUNTIME)?.contains("callchainId");
        let q = format!(
            "SELECT start, end, globalTid, correlationId, nameId, {} FROM {RUNTIME} \
             ORDER BY globalTid >> 24, correlationId, {} , start",
            if chain_col { "callchainId" } else { "NULL" },
            if chain_col {
                "callchainId IS NULL"
            } else {
                "1"
            },
        );
        let mut stmt = db.prepare(&q).map_err(sql)?;
        let mut rows = stmt.query([]).map_err(sql)?;
        let mut last: Option<(u32, u32)> = None;
        while let Some(r) = rows.next().map_err(sql)? {
            let row = (|| -> rusqlite::Result<_> {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, i64>(2)?,
                    r.get::<_, i64>(3)?,
                    r.get::<_, Option<i64>>(4)?,
                    r.get::<_, Option<i64>>(5)?,
                ))
            })();
            let Ok((start, end, gtid, corr, name_id, chain)) = row else {
                *bad_rows.entry(RUNTIME).or_default() += 1;
                continue;
            };
            let (pid, corr) = (pid_of(gtid), u32::try_from(corr).unwrap_or(0));
            if last == Some((pid, corr)) {
                continue;
            }
            last = Some((pid, corr));
            calls.push(Call {
                pid,
                tid: tid_of(gtid),
                start: ts(start),
                end: ts(end),
                corr,
                name: api_base_name(name(name_id)).to_owned(),
                callchain: chain,
            });
        }
    }

    // GPU activities.
    let mut activities: Vec<Activity> = Vec::new();
    let activity =
        |start: i64, end: i64, gpid: i64, corr: i64, dev: i64, ctx: i64, stream: i64, kind| {
            Activity {
                pid: pid_of(gpid),
                start_ns: ts(start),
                end_ns: ts(end),
                correlation_id: u32::try_from(corr).unwrap_or(0),
                device: u32::try_from(dev).unwrap_or(0),
                context: u32::try_from(ctx).unwrap_or(0),
                stream: u32::try_from(stream).unwrap_or(u32::MAX),
                graph_id: 0,
                graph_node_id: 0,
                kind,
            }
        };
    let common = "start, end, globalPid, correlationId, deviceId, contextId, streamId";
    if has(KERNEL) {
        let cols = columns(KERNEL)?;
        let kname = ["demangledName", "shortName", "mangledName"]
            .into_iter()
            .find(|c| cols.contains(*c))
            .unwrap_or("NULL");
        let graph = if cols.contains("graphNodeId") {
            "graphNodeId"
        } else {
            "NULL"
        };
        let q = format!(
            "SELECT {common}, {kname}, gridX, gridY, gridZ, blockX, blockY, blockZ, {graph} FROM {KERNEL} ORDER BY start"
        );
        let mut stmt = db.prepare(&q).map_err(sql)?;
        let mut rows = stmt.query([]).map_err(sql)?;
        while let Some(r) = rows.next().map_err(sql)? {
            let row = (|| -> rusqlite::Result<_> {
                let g = |i| r.get::<_, Option<i64>>(i).map(|v| v.unwrap_or(0));
                let dim = |i| g(i).map(|v| u32::try_from(v).unwrap_or(0));
                Ok((
                    [g(0)?, g(1)?, g(2)?, g(3)?, g(4)?, g(5)?, g(6)?],
                    r.get::<_, Option<i64>>(7)?,
                    [dim(8)?, dim(9)?, dim(10)?],
                    [dim(11)?, dim(12)?, dim(13)?],
                    g(14)?,
                ))
            })();
            let Ok((c, name_id, grid, block, node)) = row else {
                *bad_rows.entry(KERNEL).or_default() += 1;
                continue;
            };
            let kind = ActivityKind::Kernel {
                name: strings.intern(name(name_id)),
                grid,
                block,
            };
            let mut a = activity(c[0], c[1], c[2], c[3], c[4], c[5], c[6], kind);
            a.graph_node_id = u64::try_from(node).unwrap_or(0);
            activities.push(a);
        }
    }
    for (table, what) in [(MEMCPY, 0), (MEMSET, 1), (SYNC, 2)] {
        if !has(table) {
            continue;
        }
        let cols = columns(table)?;
        // A peer-to-peer copy names both devices (NULL in other copies' rows).
        let peer = if what == 0 && cols.contains("srcDeviceId") && cols.contains("dstDeviceId") {
            "srcDeviceId, dstDeviceId"
        } else {
            "NULL, NULL"
        };
        let extra = match what {
            0 => "bytes, copyKind",
            1 => "bytes, value",
            _ => "0, syncType",
        };
        let common = if what == 2 && !cols.contains("deviceId") {
            "start, end, globalPid, correlationId, 0, contextId, streamId"
        } else {
            common
        };
        let q = format!("SELECT {common}, {extra}, {peer} FROM {table} ORDER BY start");
        let mut stmt = db.prepare(&q).map_err(sql)?;
        let mut rows = stmt.query([]).map_err(sql)?;
        while let Some(r) = rows.next().map_err(sql)? {
            let row = (|| -> rusqlite::Result<_> {
                let g = |i| r.get::<_, Option<i64>>(i).map(|v| v.unwrap_or(0));
                let c = [
                    g(0)?,
                    g(1)?,
                    g(2)?,
                    g(3)?,
                    g(4)?,
                    g(5)?,
                    g(6)?,
                    g(7)?,
                    g(8)?,
                ];
                Ok((c, r.get::<_, Option<i64>>(9)?, r.get::<_, Option<i64>>(10)?))
            })();
            let Ok((c, src, dst)) = row else {
                *bad_rows.entry(table).or_default() += 1;
                continue;
            };
            let bytes = u64::try_from(c[7]).unwrap_or(0);
            let device = |d: Option<i64>| d.and_then(|d| u32::try_from(d).ok());
            let peer = match (device(src), device(dst)) {
                _ if src.is_none() && dst.is_none() => None,
                (Some(src), Some(dst)) => Some(PeerDevices { src, dst }),
                _ => {
                    half_peer += 1;
                    None
                }
            };
            let kind = match what {
                0 => ActivityKind::Memcpy {
                    kind: MemcpyKind::from_u8(u8::try_from(c[8]).unwrap_or(0)),
                    bytes,
                    peer,
                },
                1 => ActivityKind::Memset {
                    bytes,
                    value: u32::try_from(c[8]).unwrap_or(0),
                },
                _ => ActivityKind::Sync {
                    sync_type: u8::try_from(c[8]).unwrap_or(0),
                    wait: None,
                },
            };
            activities.push(activity(c[0], c[1], c[2], c[3], c[4], c[5], c[6], kind));
        }
    }

    // Stacks: call chains, NVTX ranges, and the API call as the leaf.
    let with_work: FxHashSet<(u32, u32)> = activities
        .iter()
        .map(|a| (a.pid, a.correlation_id))
        .collect();
    let mut chains: FxHashMap<i64, Vec<String>> = FxHashMap::default();
    if has("CUDA_CALLCHAINS") {
        let cols = columns("CUDA_CALLCHAINS")?;
        let unresolved = if cols.contains("unresolved") {
            "unresolved"
        } else {
            "NULL"
        };
        let q = format!(
            "SELECT id, symbol, module, {unresolved} FROM CUDA_CALLCHAINS ORDER BY id, stackDepth"
        );
        let mut stmt = db.prepare(&q).map_err(sql)?;
        let mut rows = stmt.query([]).map_err(sql)?;
        // Rows of one chain, innermost first, until its NVIDIA frames are passed.
        let mut cur: Option<(i64, bool)> = None;
        while let Some(r) = rows.next().map_err(sql)? {
            let row = (|| -> rusqlite::Result<_> {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, Option<i64>>(1)?,
                    r.get::<_, Option<i64>>(2)?,
                    r.get::<_, Option<i64>>(3)?,
                ))
            })();
            let Ok((id, symbol, module, unresolved)) = row else {
                *bad_rows.entry("CUDA_CALLCHAINS").or_default() += 1;
                continue;
            };
            let module = name(module);
            if cur.is_none_or(|(c, _)| c != id) {
                cur = Some((id, true));
            }
            let inner = &mut cur.as_mut().expect("set above").1;
            if *inner && is_cuda_internal(module) {
                continue;
            }
            *inner = false;
            let symbol = name(symbol);
            let frame = if unresolved.unwrap_or(0) != 0 || symbol.is_empty() {
                let base = module.rsplit('/').next().unwrap_or(module);
                format!("[{base}]+{symbol}")
            } else {
                symbol.to_owned()
            };
            chains
                .entry(id)
                .or_default()
                .push(frame.replace(';', ":").replace(['\n', '\r'], " "));
        }
        for c in chains.values_mut() {
            c.reverse();
        }
    }
    // NVTX ranges per (pid, tid), sorted by start.
    let mut ranges: FxHashMap<(u32, u32), Vec<Range>> = FxHashMap::default();
    if has("NVTX_EVENTS") {
        let cols = columns("NVTX_EVENTS")?;
        let text_id = if cols.contains("textId") {
            "textId"
        } else {
            "NULL"
        };
        let q = format!(
            "SELECT start, end, globalTid, text, {text_id} FROM NVTX_EVENTS \
             WHERE eventType IN ({}, {}) AND end IS NOT NULL ORDER BY start",
            NVTX_RANGES[0], NVTX_RANGES[1]
        );
        let mut stmt = db.prepare(&q).map_err(sql)?;
        let mut rows = stmt.query([]).map_err(sql)?;
        while let Some(r) = rows.next().map_err(sql)? {
            let row = (|| -> rusqlite::Result<_> {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, Option<i64>>(2)?,
                    r.get::<_, Option<String>>(3)?,
                    r.get::<_, Option<i64>>(4)?,
                ))
            })();
            let Ok((start, end, gtid, text, text_id)) = row else {
                *bad_rows.entry("NVTX_EVENTS").or_default() += 1;
                continue;
            };
            let Some(gtid) = gtid else { continue };
            let text = text.unwrap_or_else(|| name(text_id).to_owned());
            if text.is_empty() {
                continue;
            }
            ranges
                .entry((pid_of(gtid), tid_of(gtid)))
                .or_default()
                .push((
                    ts(start),
                    ts(end),
                    text.replace(';', ":").replace(['\n', '\r'], " "),
                ));
        }
    }

    let mut stacks = CpuTrace::with_correlation_ids();
    let mut without_chain = 0u64;
    let mut frames: Vec<&str> = Vec::new();
    let mut text = String::new();
    for c in &calls {
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
        text.clear();
        text.push_str(&frames.join(";"));
        let stack = stacks.stacks.intern(text.as_bytes());
        stacks.launches.push(CpuLaunch {
            ts_ns: c.start,
            pid: c.pid,
            tid: c.tid,
            correlation_id: c.corr,
            stack,
        });
    }
    let stacked = stacks.launches.len() as u64;
    if stacked > 0 && without_chain == stacked {
        imp.notes.push(
            "the export has no CUDA API backtraces (record with `nsys profile --cudabacktrace`): each stack is the API call alone".to_owned(),
        );
    } else if without_chain > 0 {
        imp.notes.push(format!(
            "{without_chain} of {stacked} API calls have no backtrace in the export (nsys records them only for some calls): their stack is the API call alone"
        ));
    }
    if half_peer > 0 {
        imp.notes.push(format!(
            "{half_peer} copies name only one of their source and destination devices (`srcDeviceId`, `dstDeviceId`), or one that is not a device: read as copies on one device"
        ));
    }
    for (table, n) in bad_rows {
        imp.notes.push(format!(
            "{n} rows of `{table}` with missing or malformed columns were skipped"
        ));
    }

    // Names of processes, threads and devices.
    let mut pids: Vec<u32> = calls
        .iter()
        .map(|c| c.pid)
        .chain(activities.iter().map(|a| a.pid))
        .collect();
    pids.sort_unstable();
    pids.dedup();
    let process_names: FxHashMap<u32, String> = if has("PROCESSES") {
        db.prepare("SELECT globalPid, name FROM PROCESSES")
            .and_then(|mut s| {
                s.query_map([], |r| {
                    Ok((pid_of(r.get::<_, i64>(0)?), r.get::<_, Option<String>>(1)?))
                })?
                .collect::<rusqlite::Result<Vec<_>>>()
            })
            .map_err(sql)?
            .into_iter()
            .filter_map(|(p, n)| Some((p, n?)))
            .collect()
    } else {
        FxHashMap::default()
    };
    if has("ThreadNames") {
        let named: Vec<(i64, Option<i64>)> = db
            .prepare("SELECT globalTid, nameId FROM ThreadNames")
            .and_then(|mut s| {
                s.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                    .collect::<rusqlite::Result<_>>()
            })
            .map_err(sql)?;
        for (gtid, id) in named {
            let n = name(id);
            if !n.is_empty() {
                stacks
                    .comms
                    .insert((pid_of(gtid), tid_of(gtid)), n.to_owned());
            }
        }
    }
    for l in &stacks.launches {
        let name = process_names
            .get(&l.pid)
            .map(|n| n.rsplit('/').next().unwrap_or(n).to_owned())
            .unwrap_or_else(|| "process".to_owned());
        stacks.comms.entry((l.pid, l.tid)).or_insert(name);
    }
    let mut devices: Vec<(u32, String, (u16, u16))> = Vec::new();
    if has("TARGET_INFO_GPU") {
        let cols = columns("TARGET_INFO_GPU")?;
        let id = if cols.contains("cuDevice") {
            "cuDevice"
        } else {
            "id"
        };
        let cc = if cols.contains("computeMajor") {
            "computeMajor, computeMinor"
        } else {
            "0, 0"
        };
        devices = db
            .prepare(&format!("SELECT {id}, name, {cc} FROM TARGET_INFO_GPU"))
            .and_then(|mut s| {
                s.query_map([], |r| {
                    Ok((
                        u32::try_from(r.get::<_, i64>(0)?).unwrap_or(0),
                        r.get::<_, Option<String>>(1)?.unwrap_or_default(),
                        (
                            u16::try_from(r.get::<_, i64>(2)?).unwrap_or(0),
                            u16::try_from(r.get::<_, i64>(3)?).unwrap_or(0),
                        ),
                    ))
                })?
                .collect::<rusqlite::Result<_>>()
            })
            .map_err(sql)?;
    }
    let first = calls
        .iter()
        .map(|c| c.start)
        .chain(activities.iter().map(|a| a.start_ns))
        .min()
        .unwrap_or(base);
    for &pid in &pids {
        imp.records.push(Record::Process(Process {
            pid,
            ppid: 0,
            exe: process_names.get(&pid).cloned().unwrap_or_default(),
            start_ns: first,
            start_realtime_ns: if imp.clock == Clock::Realtime {
                first
            } else {
                0
            },
        }));
        for (id, name, cc) in &devices {
            imp.records.push(Record::Device(Device {
                pid,
                id: *id,
                name: name.clone(),
                compute_capability: *cc,
            }));
        }
    }
    for c in &calls {
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
    imp.records
        .extend(activities.into_iter().map(Record::Activity));
    imp.launch_stacks = (!stacks.launches.is_empty()).then_some(stacks);
    Ok(imp)
}

#[cfg(test)]
mod tests {
    use std::sync::OnceLock;

    use proptest::prelude::*;

    use super::*;

    /// Tables the reader reads.
    const READ: [&str; 12] = [
        "StringIds",
        "ThreadNames",
        "PROCESSES",
        "TARGET_INFO_GPU",
        "TARGET_INFO_SESSION_START_TIME",
        RUNTIME,
        KERNEL,
        MEMCPY,
        MEMSET,
        SYNC,
        "CUDA_CALLCHAINS",
        "NVTX_EVENTS",
    ];

    /// The real A100 export with only the tables the reader reads (300 KB): each
    /// case mutates a copy of it.
    fn export() -> &'static [u8] {
        static BYTES: OnceLock<Vec<u8>> = OnceLock::new();
        BYTES.get_or_init(|| {
            let dir = tempfile::tempdir().unwrap();
            let p = dir.path().join("a100.sqlite");
            std::fs::copy(
                Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("../../samples/recordings/real/a100_saxpy_mpi_nsys.sqlite"),
                &p,
            )
            .unwrap();
            let db = Connection::open(&p).unwrap();
            db.execute_batch("PRAGMA foreign_keys = OFF").unwrap();
            let tables: Vec<String> = db
                .prepare("SELECT name FROM sqlite_master WHERE type = 'table'")
                .unwrap()
                .query_map([], |r| r.get(0))
                .unwrap()
                .collect::<rusqlite::Result<_>>()
                .unwrap();
            for t in tables.iter().filter(|t| !READ.contains(&t.as_str())) {
                db.execute_batch(&format!("DROP TABLE \"{t}\"")).unwrap();
            }
            db.execute_batch("VACUUM").unwrap();
            drop(db);
            std::fs::read(&p).unwrap()
        })
    }

    /// Reads `bytes` as an export: it may fail, with one line naming the file, but
    /// never panics, and what it reads holds together.
    fn read_never_panics(bytes: &[u8], edit: impl FnOnce(&Path)) -> Result<(), TestCaseError> {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("fuzz.sqlite");
        std::fs::write(&p, bytes).unwrap();
        edit(&p);
        match read(&p, &mut StringTable::new()) {
            Ok(imp) => {
                if let Some(stacks) = &imp.launch_stacks {
                    for l in &stacks.launches {
                        prop_assert!(l.stack.index() < stacks.stacks.len());
                    }
                }
                for n in &imp.notes {
                    prop_assert!(!n.contains('\n'), "{n}");
                }
            }
            Err(e) => {
                let msg = e.to_string();
                prop_assert!(msg.contains("fuzz.sqlite") && !msg.contains('\n'), "{msg}");
            }
        }
        Ok(())
    }

    /// Values a column may hold in a damaged or foreign export.
    const VALUES: [&str; 12] = [
        "NULL",
        "-1",
        "0",
        "4294967296",
        "9223372036854775807",
        "-9223372036854775808",
        "1.5",
        "'x'",
        "'a;b\nc'",
        "x'00ff'",
        "''",
        "10",
    ];

    #[test]
    fn the_export_without_other_tables_reads_as_the_whole_one() {
        let whole = read(
            &Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../samples/recordings/real/a100_saxpy_mpi_nsys.sqlite"),
            &mut StringTable::new(),
        )
        .unwrap();
        read_never_panics(export(), |p| {
            let small = read(p, &mut StringTable::new()).unwrap();
            assert_eq!(small.records.len(), whole.records.len());
            assert_eq!(small.notes, whole.notes);
        })
        .unwrap();
    }

    #[test]
    fn malformed_cells_are_counted_by_table_and_named() {
        read_never_panics(export(), |p| {
            let db = Connection::open(p).unwrap();
            db.execute_batch(
                "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = 'x' WHERE rowid = 1;
                 UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET srcDeviceId = -1, dstDeviceId = 1 WHERE rowid = 1;
                 UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET srcDeviceId = 2, dstDeviceId = 3 WHERE rowid = 2;",
            )
            .unwrap();
            drop(db);
            let imp = read(p, &mut StringTable::new()).unwrap();
            assert_eq!(
                imp.notes,
                [
                    "1 copies name only one of their source and destination devices (`srcDeviceId`, `dstDeviceId`), or one that is not a device: read as copies on one device",
                    "1 rows of `CUPTI_ACTIVITY_KIND_KERNEL` with missing or malformed columns were skipped",
                ]
            );
            let peers: Vec<PeerDevices> = imp
                .records
                .iter()
                .filter_map(|r| match r {
                    Record::Activity(Activity {
                        kind: ActivityKind::Memcpy { peer: Some(p), .. },
                        ..
                    }) => Some(*p),
                    _ => None,
                })
                .collect();
            assert_eq!(peers, [PeerDevices { src: 2, dst: 3 }]);
        })
        .unwrap();
    }

    proptest! {
        #[test]
        fn mutated_cells_never_panic(
            edits in proptest::collection::vec(
                (any::<prop::sample::Index>(), any::<prop::sample::Index>(),
                 any::<prop::sample::Index>(), 0..VALUES.len(), 0u8..8),
                1..8,
            )
        ) {
            read_never_panics(export(), |p| {
                let db = Connection::open(p).unwrap();
                db.execute_batch("PRAGMA foreign_keys = OFF").unwrap();
                for (table, column, row, value, op) in edits {
                    let t = READ[table.index(READ.len())];
                    let cols: Vec<String> = db
                        .prepare(&format!("SELECT name FROM pragma_table_info('{t}')"))
                        .unwrap()
                        .query_map([], |r| r.get(0))
                        .unwrap()
                        .collect::<rusqlite::Result<_>>()
                        .unwrap();
                    if cols.is_empty() {
                        continue; // dropped by an earlier edit
                    }
                    let rows: i64 = db
                        .query_row(&format!("SELECT count(*) FROM \"{t}\""), [], |r| r.get(0))
                        .unwrap();
                    let rows = rows as usize;
                    let c = &cols[column.index(cols.len())];
                    let v = VALUES[value];
                    let sql = match op {
                        // A row of NULLs, or one row twice.
                        0 => format!("INSERT INTO \"{t}\" DEFAULT VALUES"),
                        1 => format!("INSERT INTO \"{t}\" SELECT * FROM \"{t}\" LIMIT 1"),
                        2 => format!("DROP TABLE \"{t}\""),
                        _ if rows == 0 => continue,
                        _ => format!(
                            "UPDATE \"{t}\" SET \"{c}\" = {v} WHERE rowid = \
                             (SELECT rowid FROM \"{t}\" LIMIT 1 OFFSET {})",
                            row.index(rows)
                        ),
                    };
                    // Constraints may refuse an edit; the others still apply.
                    let _ = db.execute_batch(&sql);
                }
            })?;
        }

        #[test]
        fn damaged_files_never_panic(
            edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..16)
        ) {
            let mut bytes = export().to_vec();
            for (at, b) in edits {
                // Past the 100-byte header, which SQLite checks itself.
                let i = 100 + at.index(bytes.len() - 100);
                bytes[i] = b;
            }
            read_never_panics(&bytes, |_| {})?;
        }
    }
}
