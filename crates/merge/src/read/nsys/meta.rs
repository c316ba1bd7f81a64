//! Metadata: string ids, the session's start time, and the names of processes,
//! threads and GPUs.

use rustc_hash::FxHashMap;

use super::schema::Export;
use super::{pid_of, tid_of};
use crate::error::Result;
use crate::model::Clock;

/// `StringIds`: the text behind every `*Id` name column.
pub(super) struct Names(FxHashMap<i64, String>);

impl Names {
    /// Reads `StringIds`; without it every name is empty.
    pub(super) fn read(export: &Export) -> Result<Self> {
        if !export.has("StringIds") {
            return Ok(Self(FxHashMap::default()));
        }
        let ids = export.all("SELECT id, value FROM StringIds", |r| {
            Ok((r.get(0)?, r.get(1)?))
        })?;
        Ok(Self(ids.into_iter().collect()))
    }

    /// The text of `id`; empty when there is none.
    pub(super) fn get(&self, id: Option<i64>) -> &str {
        id.and_then(|i| self.0.get(&i)).map_or("", String::as_str)
    }
}

/// Turns the export's timestamps (ns since the session started) into the model's.
#[derive(Clone, Copy)]
pub(super) struct Time {
    /// The wall-clock time of timestamp 0, when the export has it.
    base: Option<u64>,
}

impl Time {
    /// Reads `TARGET_INFO_SESSION_START_TIME`.
    pub(super) fn read(export: &Export) -> Self {
        let base = if export.has("TARGET_INFO_SESSION_START_TIME") {
            export
                .first(
                    "SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME LIMIT 1",
                    |r| r.get::<_, i64>(0),
                )
                .and_then(|v| u64::try_from(v).ok())
        } else {
            None
        };
        Self { base }
    }

    /// Wall-clock time when the export says when it started, else the monotonic
    /// clock of the export's own timestamps.
    pub(super) fn clock(self) -> Clock {
        if self.base.is_some() {
            Clock::Realtime
        } else {
            Clock::Monotonic
        }
    }

    /// The start of the session in the model's time.
    pub(super) fn zero(self) -> u64 {
        self.base.unwrap_or(0)
    }

    /// A timestamp of the export in the model's time.
    pub(super) fn at(self, v: i64) -> u64 {
        u64::try_from(v).unwrap_or(0).saturating_add(self.zero())
    }
}

/// `PROCESSES`: the executable of each pid.
pub(super) fn process_names(export: &Export) -> Result<FxHashMap<u32, String>> {
    if !export.has("PROCESSES") {
        return Ok(FxHashMap::default());
    }
    let rows = export.all("SELECT globalPid, name FROM PROCESSES", |r| {
        Ok((pid_of(r.get::<_, i64>(0)?), r.get::<_, Option<String>>(1)?))
    })?;
    Ok(rows
        .into_iter()
        .filter_map(|(p, n)| Some((p, n?)))
        .collect())
}

/// `ThreadNames`: the name of each (pid, tid) that has one.
pub(super) fn thread_names(export: &Export, names: &Names) -> Result<Vec<((u32, u32), String)>> {
    if !export.has("ThreadNames") {
        return Ok(Vec::new());
    }
    let rows: Vec<(i64, Option<i64>)> = export
        .all("SELECT globalTid, nameId FROM ThreadNames", |r| {
            Ok((r.get(0)?, r.get(1)?))
        })?;
    Ok(rows
        .into_iter()
        .filter_map(|(gtid, id)| {
            let n = names.get(id);
            (!n.is_empty()).then(|| ((pid_of(gtid), tid_of(gtid)), n.to_owned()))
        })
        .collect())
}

/// A GPU: its CUDA device id, name and compute capability.
pub(super) type Gpu = (u32, String, (u16, u16));

/// `TARGET_INFO_GPU`: the GPUs.
pub(super) fn gpus(export: &Export) -> Result<Vec<Gpu>> {
    if !export.has("TARGET_INFO_GPU") {
        return Ok(Vec::new());
    }
    let cols = export.columns("TARGET_INFO_GPU")?;
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
    export.all(
        &format!("SELECT {id}, name, {cc} FROM TARGET_INFO_GPU"),
        |r| {
            Ok((
                u32::try_from(r.get::<_, i64>(0)?).unwrap_or(0),
                r.get::<_, Option<String>>(1)?.unwrap_or_default(),
                (
                    u16::try_from(r.get::<_, i64>(2)?).unwrap_or(0),
                    u16::try_from(r.get::<_, i64>(3)?).unwrap_or(0),
                ),
            ))
        },
    )
}
