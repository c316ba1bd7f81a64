//! The export as a database: opening it, checking it holds CUDA tables, the
//! columns each table has, and running queries with errors of one line.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use rusqlite::{Connection, OpenFlags, Row};
use rustc_hash::FxHashSet;

use super::{KERNEL, MEMCPY, MEMSET, RUNTIME};
use crate::error::{Error, Result};

/// An open export and the tables it has.
pub(super) struct Export {
    db: Connection,
    path: PathBuf,
    tables: FxHashSet<String>,
}

impl Export {
    /// Opens `path` read-only. Fails when it is not an SQLite database or has none
    /// of the CUPTI tables.
    pub(super) fn open(path: &Path) -> Result<Self> {
        let db = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| sql_error(path, &e))?;
        let mut export = Self {
            db,
            path: path.to_owned(),
            tables: FxHashSet::default(),
        };
        export.tables = export
            .all("SELECT name FROM sqlite_master WHERE type = 'table'", |r| {
                r.get::<_, String>(0)
            })?
            .into_iter()
            .collect();
        if ![KERNEL, MEMCPY, MEMSET, RUNTIME]
            .iter()
            .any(|t| export.has(t))
        {
            return Err(export.not_export(format!(
                "an SQLite database without the CUPTI tables ({KERNEL}, {RUNTIME}, …): export an nsys report recorded with CUDA tracing"
            )));
        }
        Ok(export)
    }

    /// Whether the export has `table`.
    pub(super) fn has(&self, table: &str) -> bool {
        self.tables.contains(table)
    }

    /// The table `base` as this export names it: `base`, else the newest
    /// `base_V<n>` (newer exports version the names of some tables).
    pub(super) fn resolve(&self, base: &str) -> Option<String> {
        if self.has(base) {
            return Some(base.to_owned());
        }
        let prefix = format!("{base}_V");
        self.tables
            .iter()
            .filter_map(|t| Some((t.strip_prefix(&prefix)?.parse::<u32>().ok()?, t)))
            .max()
            .map(|(_, t)| t.clone())
    }

    /// The names of `table`'s columns; none when there is no such table.
    pub(super) fn columns(&self, table: &str) -> Result<FxHashSet<String>> {
        Ok(self
            .all(
                &format!("SELECT name FROM pragma_table_info('{table}')"),
                |r| r.get::<_, String>(0),
            )?
            .into_iter()
            .collect())
    }

    /// Every row of `query` read by `parse`; the first row it cannot read fails
    /// the whole query.
    pub(super) fn all<T>(
        &self,
        query: &str,
        parse: impl FnMut(&Row<'_>) -> rusqlite::Result<T>,
    ) -> Result<Vec<T>> {
        self.db
            .prepare(query)
            .and_then(|mut s| s.query_map([], parse)?.collect())
            .map_err(|e| self.error(&e))
    }

    /// Hands each row of `query` that `parse` can read to `each`; the others are
    /// counted in `skipped` under `table`. Fails only when the query itself does.
    pub(super) fn rows<T>(
        &self,
        query: &str,
        table: &'static str,
        skipped: &mut Skipped,
        mut parse: impl FnMut(&Row<'_>) -> rusqlite::Result<T>,
        mut each: impl FnMut(T),
    ) -> Result<()> {
        let mut stmt = self.db.prepare(query).map_err(|e| self.error(&e))?;
        let mut rows = stmt.query([]).map_err(|e| self.error(&e))?;
        while let Some(r) = rows.next().map_err(|e| self.error(&e))? {
            match parse(r) {
                Ok(row) => each(row),
                Err(_) => *skipped.rows.entry(table).or_default() += 1,
            }
        }
        Ok(())
    }

    /// An SQLite failure as an error naming the file.
    pub(super) fn error(&self, e: &rusqlite::Error) -> Error {
        sql_error(&self.path, e)
    }

    fn not_export(&self, found: String) -> Error {
        not_export(&self.path, found)
    }
}

fn not_export(path: &Path, found: String) -> Error {
    Error::NotATrace {
        path: path.to_owned(),
        expected: "Nsight Systems SQLite export",
        found,
    }
}

/// One line: SQLite may quote a damaged schema, line breaks and all.
fn sql_error(path: &Path, e: &rusqlite::Error) -> Error {
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
    not_export(path, format!("SQLite: {line}"))
}

/// What the reader left out, for the summary's notes.
#[derive(Default)]
pub(super) struct Skipped {
    /// Rows with missing or malformed columns, by table.
    pub(super) rows: BTreeMap<&'static str, u64>,
    /// Copies whose source or destination device is missing or not a device.
    pub(super) half_peer: u64,
}

impl Skipped {
    /// One note per kind of loss, in a fixed order.
    pub(super) fn notes(&self) -> impl Iterator<Item = String> + '_ {
        let half_peer = (self.half_peer > 0).then(|| format!(
            "{} copies name only one of their source and destination devices (`srcDeviceId`, `dstDeviceId`), or one that is not a device: read as copies on one device",
            self.half_peer
        ));
        half_peer
            .into_iter()
            .chain(self.rows.iter().map(|(table, n)| {
                format!("{n} rows of `{table}` with missing or malformed columns were skipped")
            }))
    }
}
