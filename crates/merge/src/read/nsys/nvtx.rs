//! `NVTX_EVENTS` (`NVTX_EVENTS_V<n>` in newer exports): the ranges that enclose API
//! calls.

use rustc_hash::FxHashMap;

use super::meta::{Names, Time};
use super::schema::{Export, Skipped};
use super::{frame_text, pid_of, tid_of};
use crate::error::Result;

const TABLE: &str = "NVTX_EVENTS";

/// NVTX event types of ranges: push/pop and start/end.
const RANGE_TYPES: [i64; 2] = [59, 60];

/// An NVTX range: start, end, text.
pub(super) type Range = (u64, u64, String);

/// NVTX ranges by (pid, tid), sorted by start.
pub(super) type Ranges = FxHashMap<(u32, u32), Vec<Range>>;

/// Reads the ranges with a text; the other events are no frames.
pub(super) fn ranges(
    export: &Export,
    names: &Names,
    time: Time,
    skipped: &mut Skipped,
) -> Result<Ranges> {
    let mut ranges = Ranges::default();
    let Some(table) = export.resolve(TABLE) else {
        return Ok(ranges);
    };
    let cols = export.columns(&table)?;
    // Older exports have only `text`; newer ones may put it in `StringIds`.
    let column = |c: &'static str| if cols.contains(c) { c } else { "NULL" };
    let (text, text_id) = (column("text"), column("textId"));
    let q = format!(
        "SELECT start, end, globalTid, {text}, {text_id} FROM {table} \
         WHERE eventType IN ({}, {}) AND end IS NOT NULL ORDER BY start",
        RANGE_TYPES[0], RANGE_TYPES[1]
    );
    let parse = |r: &rusqlite::Row<'_>| {
        Ok((
            r.get::<_, i64>(0)?,
            r.get::<_, i64>(1)?,
            r.get::<_, Option<i64>>(2)?,
            r.get::<_, Option<String>>(3)?,
            r.get::<_, Option<i64>>(4)?,
        ))
    };
    export.rows(
        &q,
        TABLE,
        skipped,
        parse,
        |(start, end, gtid, text, text_id)| {
            let Some(gtid) = gtid else { return };
            let text = text.unwrap_or_else(|| names.get(text_id).to_owned());
            if text.is_empty() {
                return;
            }
            ranges
                .entry((pid_of(gtid), tid_of(gtid)))
                .or_default()
                .push((time.at(start), time.at(end), frame_text(&text)));
        },
    )?;
    Ok(ranges)
}
