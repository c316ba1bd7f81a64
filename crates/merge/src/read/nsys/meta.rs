//! Metadata: string ids, the session's start time, and the names of processes
//! and threads (GPUs are in `gpus`). A row that cannot be read is counted and
//! left out.

use rusqlite::Row;
use rustc_hash::FxHashMap;

use super::schema::{Export, Skipped};
use super::{pid_of, tid_of};
use crate::error::Result;
use crate::model::Clock;

/// `StringIds`: the text behind every `*Id` name column.
#[derive(Default)]
pub(super) struct Names(FxHashMap<i64, String>);

impl Names {
    /// Reads `StringIds`; without it every name is empty.
    pub(super) fn read(export: &Export, skipped: &mut Skipped) -> Result<Self> {
        let mut ids = FxHashMap::default();
        if export.has("StringIds") {
            let parse = |r: &Row<'_>| Ok((r.get(0)?, r.get(1)?));
            export.rows(
                "SELECT id, value FROM StringIds",
                "StringIds",
                skipped,
                parse,
                |(id, v)| {
                    ids.insert(id, v);
                },
            )?;
        }
        Ok(Self(ids))
    }

    /// The text of `id`; empty when there is none.
    pub(super) fn get(&self, id: Option<i64>) -> &str {
        id.and_then(|i| self.0.get(&i)).map_or("", String::as_str)
    }
}

/// Turns the export's timestamps (ns since the session started) into the model's.
#[derive(Clone, Copy, Default)]
pub(super) struct Time {
    /// The wall-clock time of timestamp 0, when the export has it.
    base: Option<u64>,
}

impl Time {
    /// Reads `TARGET_INFO_SESSION_START_TIME`.
    pub(super) fn read(export: &Export) -> Result<Self> {
        if !export.has("TARGET_INFO_SESSION_START_TIME") {
            return Ok(Self::default());
        }
        let first = export.all(
            "SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME LIMIT 1",
            |r| r.get::<_, Option<i64>>(0),
        )?;
        let base = first
            .into_iter()
            .flatten()
            .find_map(|v| u64::try_from(v).ok());
        Ok(Self { base })
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
pub(super) fn process_names(
    export: &Export,
    skipped: &mut Skipped,
) -> Result<FxHashMap<u32, String>> {
    let mut names = FxHashMap::default();
    if export.has("PROCESSES") {
        let parse = |r: &Row<'_>| Ok((pid_of(r.get::<_, i64>(0)?), r.get::<_, Option<String>>(1)?));
        let q = "SELECT globalPid, name FROM PROCESSES";
        export.rows(q, "PROCESSES", skipped, parse, |(pid, name)| {
            names.extend(name.map(|n| (pid, n)));
        })?;
    }
    Ok(names)
}

/// `ThreadNames`: the name of each (pid, tid) that has one.
pub(super) fn thread_names(
    export: &Export,
    names: &Names,
    skipped: &mut Skipped,
) -> Result<Vec<((u32, u32), String)>> {
    let mut threads = Vec::new();
    if export.has("ThreadNames") {
        let parse = |r: &Row<'_>| Ok((r.get::<_, i64>(0)?, r.get::<_, Option<i64>>(1)?));
        let q = "SELECT globalTid, nameId FROM ThreadNames";
        export.rows(q, "ThreadNames", skipped, parse, |(gtid, id)| {
            let n = names.get(id);
            if !n.is_empty() {
                threads.push(((pid_of(gtid), tid_of(gtid)), n.to_owned()));
            }
        })?;
    }
    Ok(threads)
}
