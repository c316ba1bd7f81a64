//! GPU work, by table: kernels, copies, memsets and synchronizations.

use rusqlite::Row;

use super::meta::{Names, Time};
use super::schema::{Export, Skipped};
use super::{KERNEL, MEMCPY, MEMSET, SYNC, pid_of};
use crate::error::Result;
use crate::model::{Activity, ActivityKind, MemcpyKind, PeerDevices, StringTable};

/// The columns every activity table has, in the order [`activity`] takes them.
const COMMON: &str = "start, end, globalPid, correlationId, deviceId, contextId, streamId";

/// An activity from the [`COMMON`] columns; out-of-range values read as 0 (the
/// stream as none).
fn activity(time: Time, c: [i64; 7], kind: ActivityKind) -> Activity {
    let [start, end, gpid, corr, dev, ctx, stream] = c;
    Activity {
        pid: pid_of(gpid),
        start_ns: time.at(start),
        end_ns: time.at(end),
        correlation_id: u32::try_from(corr).unwrap_or(0),
        device: Some(u32::try_from(dev).unwrap_or(0)).filter(|&d| d != u32::MAX),
        context: u32::try_from(ctx).unwrap_or(0),
        stream: u32::try_from(stream).ok().filter(|&s| s != u32::MAX),
        graph_id: None,
        graph_node_id: None,
        kind,
    }
}

/// Cell `i` as an integer, NULL read as 0.
fn int(r: &Row<'_>, i: usize) -> rusqlite::Result<i64> {
    r.get::<_, Option<i64>>(i).map(|v| v.unwrap_or(0))
}

/// Cells `from..from + N` as integers, NULL read as 0.
fn ints<const N: usize>(r: &Row<'_>, from: usize) -> rusqlite::Result<[i64; N]> {
    let mut out = [0; N];
    for (i, v) in out.iter_mut().enumerate() {
        *v = int(r, from + i)?;
    }
    Ok(out)
}

/// Reads `CUPTI_ACTIVITY_KIND_KERNEL`, by start.
pub(super) fn kernels(
    export: &Export,
    names: &Names,
    time: Time,
    strings: &mut StringTable,
    skipped: &mut Skipped,
    out: &mut Vec<Activity>,
) -> Result<()> {
    if !export.has(KERNEL) {
        return Ok(());
    }
    let cols = export.columns(KERNEL)?;
    let name = ["demangledName", "shortName", "mangledName"]
        .into_iter()
        .find(|c| cols.contains(*c))
        .unwrap_or("NULL");
    let graph = if cols.contains("graphNodeId") {
        "graphNodeId"
    } else {
        "NULL"
    };
    let q = format!(
        "SELECT {COMMON}, {name}, gridX, gridY, gridZ, blockX, blockY, blockZ, {graph} FROM {KERNEL} ORDER BY start"
    );
    let dims = |d: [i64; 3]| d.map(|v| u32::try_from(v).unwrap_or(0));
    let parse = |r: &Row<'_>| {
        Ok((
            ints::<7>(r, 0)?,
            r.get::<_, Option<i64>>(7)?,
            dims(ints::<3>(r, 8)?),
            dims(ints::<3>(r, 11)?),
            int(r, 14)?,
        ))
    };
    export.rows(&q, KERNEL, skipped, parse, |row| {
        let (c, name_id, grid, block, node) = row;
        let kind = ActivityKind::Kernel {
            name: strings.intern(names.get(name_id)),
            grid,
            block,
        };
        let mut a = activity(time, c, kind);
        a.graph_node_id = u64::try_from(node).ok().filter(|&n| n != 0);
        out.push(a);
    })
}

/// The activity tables besides kernels, which share one shape: the [`COMMON`]
/// columns, two of their own, and a peer copy's two devices.
#[derive(Clone, Copy)]
enum Other {
    Memcpy,
    Memset,
    Sync,
}

impl Other {
    fn table(self) -> &'static str {
        match self {
            Self::Memcpy => MEMCPY,
            Self::Memset => MEMSET,
            Self::Sync => SYNC,
        }
    }

    /// The query, given the table's columns.
    fn query(self, cols: &rustc_hash::FxHashSet<String>) -> String {
        // A peer-to-peer copy names both devices (NULL in other copies' rows).
        let peer = if matches!(self, Self::Memcpy)
            && cols.contains("srcDeviceId")
            && cols.contains("dstDeviceId")
        {
            "srcDeviceId, dstDeviceId"
        } else {
            "NULL, NULL"
        };
        let own = match self {
            Self::Memcpy => "bytes, copyKind",
            Self::Memset => "bytes, value",
            Self::Sync => "0, syncType",
        };
        let common = if matches!(self, Self::Sync) && !cols.contains("deviceId") {
            "start, end, globalPid, correlationId, 0, contextId, streamId"
        } else {
            COMMON
        };
        format!(
            "SELECT {common}, {own}, {peer} FROM {} ORDER BY start",
            self.table()
        )
    }

    /// The activity's kind from its own two columns.
    fn kind(self, bytes: i64, v: i64, peer: Option<PeerDevices>) -> ActivityKind {
        let bytes = u64::try_from(bytes).unwrap_or(0);
        match self {
            Self::Memcpy => ActivityKind::Memcpy {
                kind: MemcpyKind::from_u8(u8::try_from(v).unwrap_or(0)),
                bytes,
                peer,
            },
            Self::Memset => ActivityKind::Memset {
                bytes,
                value: u32::try_from(v).unwrap_or(0),
            },
            Self::Sync => ActivityKind::Sync {
                sync_type: u8::try_from(v).unwrap_or(0),
                wait: None,
            },
        }
    }
}

/// A copy's two devices, when it names both; one named alone is counted in
/// `half_peer`.
fn peer(src: Option<i64>, dst: Option<i64>, half_peer: &mut u64) -> Option<PeerDevices> {
    let device = |d: Option<i64>| d.and_then(|d| u32::try_from(d).ok());
    match (device(src), device(dst)) {
        _ if src.is_none() && dst.is_none() => None,
        (Some(src), Some(dst)) => Some(PeerDevices { src, dst }),
        _ => {
            *half_peer += 1;
            None
        }
    }
}

/// Reads the copies, memsets and synchronizations, table by table, each by start.
pub(super) fn others(
    export: &Export,
    time: Time,
    skipped: &mut Skipped,
    out: &mut Vec<Activity>,
) -> Result<()> {
    for other in [Other::Memcpy, Other::Memset, Other::Sync] {
        let table = other.table();
        if !export.has(table) {
            continue;
        }
        let q = other.query(&export.columns(table)?);
        let parse = |r: &Row<'_>| {
            Ok((
                ints::<9>(r, 0)?,
                r.get::<_, Option<i64>>(9)?,
                r.get::<_, Option<i64>>(10)?,
            ))
        };
        let mut half_peer = 0;
        export.rows(&q, table, skipped, parse, |(c, src, dst)| {
            let peer = peer(src, dst, &mut half_peer);
            let [start, end, gpid, corr, dev, ctx, stream, bytes, v] = c;
            let kind = other.kind(bytes, v, peer);
            out.push(activity(
                time,
                [start, end, gpid, corr, dev, ctx, stream],
                kind,
            ));
        })?;
        skipped.half_peer += half_peer;
    }
    Ok(())
}
