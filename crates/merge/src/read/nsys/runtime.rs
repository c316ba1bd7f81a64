//! `CUPTI_ACTIVITY_KIND_RUNTIME`: the runtime and driver API calls.

use super::meta::{Names, Time};
use super::schema::{Export, Skipped};
use super::{RUNTIME, pid_of, tid_of};
use crate::error::Result;
use crate::model::api_base_name;

/// An API call, one per (process, correlation id).
pub(super) struct Call {
    pub(super) pid: u32,
    pub(super) tid: u32,
    pub(super) start: u64,
    pub(super) end: u64,
    pub(super) corr: u32,
    /// Without nsys's version suffix (`_v7000`).
    pub(super) name: String,
    /// Its backtrace in `CUDA_CALLCHAINS`, when nsys took one.
    pub(super) callchain: Option<i64>,
}

/// Reads the API calls. nsys lists a call twice with one correlation id; the row
/// with the call chain is kept.
pub(super) fn calls(
    export: &Export,
    names: &Names,
    time: Time,
    skipped: &mut Skipped,
) -> Result<Vec<Call>> {
    let mut calls = Vec::new();
    if !export.has(RUNTIME) {
        return Ok(calls);
    }
    let chain = export.columns(RUNTIME)?.contains("callchainId");
    // Rows of one call are adjacent, the one with a call chain first.
    let q = format!(
        "SELECT start, end, globalTid, correlationId, nameId, {} FROM {RUNTIME} \
         ORDER BY globalTid >> 24, correlationId, {} , start",
        if chain { "callchainId" } else { "NULL" },
        if chain { "callchainId IS NULL" } else { "1" },
    );
    let mut last: Option<(u32, u32)> = None;
    let parse = |r: &rusqlite::Row<'_>| {
        Ok((
            r.get::<_, i64>(0)?,
            r.get::<_, i64>(1)?,
            r.get::<_, i64>(2)?,
            r.get::<_, i64>(3)?,
            r.get::<_, Option<i64>>(4)?,
            r.get::<_, Option<i64>>(5)?,
        ))
    };
    export.rows(&q, RUNTIME, skipped, parse, |row| {
        let (start, end, gtid, corr, name_id, callchain) = row;
        let (pid, corr) = (pid_of(gtid), u32::try_from(corr).unwrap_or(0));
        if last == Some((pid, corr)) {
            return;
        }
        last = Some((pid, corr));
        calls.push(Call {
            pid,
            tid: tid_of(gtid),
            start: time.at(start),
            end: time.at(end),
            corr,
            name: api_base_name(names.get(name_id)).to_owned(),
            callchain,
        });
    })?;
    Ok(calls)
}
