//! The reader on the real A100 export, whole, damaged and mutated.

use std::sync::OnceLock;

use proptest::prelude::*;

use rusqlite::Connection;

use super::*;
use crate::model::{Activity, ActivityKind, PeerDevices, Record};
use crate::read::imported::Imported;

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

/// The metadata tables, each with the columns any version is known to give it
/// and one no version has.
const METADATA: [(&str, &[&str]); 9] = [
    ("StringIds", &["id", "value", "junk"]),
    ("ThreadNames", &["nameId", "priority", "globalTid", "junk"]),
    ("PROCESSES", &["globalPid", "pid", "name", "junk"]),
    (
        "TARGET_INFO_SESSION_START_TIME",
        &["utcEpochNs", "utcTime", "junk"],
    ),
    (
        "TARGET_INFO_GPU",
        &[
            "vmId",
            "id",
            "name",
            "cuDevice",
            "deviceId",
            "cudaId",
            "smCount",
            "computeMajor",
            "computeMinor",
            "junk",
        ],
    ),
    (
        "TARGET_INFO_CUDA_GPU",
        &[
            "deviceId",
            "id",
            "name",
            "computeCapabilityMajor",
            "computeCapabilityMinor",
            "numMultiprocessors",
            "junk",
        ],
    ),
    (
        "TARGET_INFO_CUDA_DEVICE",
        &["gpuId", "cudaId", "pid", "uuid", "junk"],
    ),
    (
        "NVTX_EVENTS",
        &[
            "start",
            "end",
            "eventType",
            "text",
            "globalTid",
            "textId",
            "junk",
        ],
    ),
    (
        "CUDA_CALLCHAINS",
        &["id", "symbol", "module", "unresolved", "stackDepth", "junk"],
    ),
];

/// GPU work records of the whole A100 export.
fn whole_work() -> usize {
    static WORK: OnceLock<usize> = OnceLock::new();
    *WORK.get_or_init(|| {
        let p = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../samples/recordings/real/a100_saxpy_mpi_nsys.sqlite");
        work(&read(&p, &mut StringTable::new()).unwrap())
    })
}

/// GPU work records (API calls and activities) of an import.
fn work(imp: &Imported) -> usize {
    imp.records
        .iter()
        .filter(|r| matches!(r, Record::Api(_) | Record::Activity(_)))
        .count()
}

proptest! {
    // Each case writes and reads a 300 KB export.
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Whatever shape a metadata table has, the export is read, and no GPU work
    /// or API call is lost.
    #[test]
    fn metadata_tables_of_any_shape_never_refuse_the_export(
        tables in proptest::collection::vec(
            (any::<prop::sample::Index>(), any::<u16>(),
             proptest::collection::vec((0..VALUES.len(), 0..VALUES.len()), 0..4)),
            1..4,
        )
    ) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("shapes.sqlite");
        std::fs::write(&p, export()).unwrap();
        let db = Connection::open(&p).unwrap();
        db.execute_batch("PRAGMA foreign_keys = OFF").unwrap();
        for (table, subset, rows) in &tables {
            let (t, known) = METADATA[table.index(METADATA.len())];
            // A non-empty subset of the known columns, by the bits of `subset`.
            let mut cols: Vec<&str> = known
                .iter()
                .enumerate()
                .filter(|(i, _)| subset >> (i % 16) & 1 == 1)
                .map(|(_, c)| *c)
                .collect();
            if cols.is_empty() {
                cols.push(known[usize::from(*subset) % known.len()]);
            }
            db.execute_batch(&format!(
                "DROP TABLE IF EXISTS \"{t}\"; CREATE TABLE \"{t}\" ({})",
                cols.join(", ")
            ))
            .unwrap();
            for (a, b) in rows {
                let values: Vec<&str> = (0..cols.len())
                    .map(|i| VALUES[if i % 2 == 0 { *a } else { *b }])
                    .collect();
                db.execute_batch(&format!(
                    "INSERT INTO \"{t}\" VALUES ({})",
                    values.join(", ")
                ))
                .unwrap();
            }
        }
        drop(db);
        let imp = read(&p, &mut StringTable::new());
        prop_assert!(imp.is_ok(), "{}", imp.err().unwrap());
        let imp = imp.unwrap();
        prop_assert_eq!(work(&imp), whole_work());
        for n in &imp.notes {
            prop_assert!(!n.contains('\n'), "{}", n);
        }
    }
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

/// An export of `sql` (plus an empty kernel table, so that it opens), for the
/// steps one at a time.
fn export_of(sql: &str) -> (tempfile::TempDir, Export) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("steps.sqlite");
    let db = Connection::open(&p).unwrap();
    db.execute_batch(&format!(
        "CREATE TABLE {KERNEL} (start INTEGER, end INTEGER); {sql}"
    ))
    .unwrap();
    drop(db);
    let export = Export::open(&p).unwrap();
    (dir, export)
}

const STRINGS: &str = "CREATE TABLE StringIds (id INTEGER, value TEXT);
    INSERT INTO StringIds VALUES (1, 'cudaLaunchKernel_v7000'), (2, 'cudaLaunchKernel'),
      (3, 'main'), (4, '/app/a.out'), (5, 'cuLaunchKernel'),
      (6, '/usr/lib/x86_64-linux-gnu/libcuda.so.1'), (7, '0x1234'), (8, 'a;b');";

#[test]
fn runtime_calls_one_per_correlation_id_the_one_with_the_chain() {
    let (_dir, export) = export_of(&format!(
        "{STRINGS}
         CREATE TABLE {RUNTIME} (start INTEGER, end INTEGER, globalTid INTEGER,
           correlationId INTEGER, nameId INTEGER, callchainId INTEGER);
         INSERT INTO {RUNTIME} VALUES
           (10, 20, 7 * 16777216 + 9, 1, 2, NULL), (10, 20, 7 * 16777216 + 9, 1, 1, 5),
           (30, 40, 7 * 16777216 + 9, 2, 1, NULL), ('x', 40, 7 * 16777216 + 9, 3, 1, NULL);"
    ));
    let mut skipped = Skipped::default();
    let names = Names::read(&export, &mut skipped).unwrap();
    let calls = runtime::calls(&export, &names, Time::default(), &mut skipped).unwrap();
    let got: Vec<_> = calls
        .iter()
        .map(|c| (c.pid, c.tid, c.corr, c.name.as_str(), c.callchain))
        .collect();
    assert_eq!(
        got,
        [
            (7, 9, 1, "cudaLaunchKernel", Some(5)),
            (7, 9, 2, "cudaLaunchKernel", None)
        ]
    );
    assert_eq!(skipped.rows.get(RUNTIME), Some(&1));
}

#[test]
fn call_chains_outermost_first_without_cuda_frames_next_to_the_call() {
    let (_dir, export) = export_of(&format!(
        "{STRINGS}
         CREATE TABLE CUDA_CALLCHAINS (id INTEGER, symbol INTEGER, module INTEGER,
           unresolved INTEGER, stackDepth INTEGER);
         INSERT INTO CUDA_CALLCHAINS VALUES
           (5, 5, 6, NULL, 0), (5, 7, 4, 1, 1), (5, 8, 4, NULL, 2), (5, 3, 4, NULL, 3),
           (6, 3, 4, NULL, 0);"
    ));
    let mut skipped = Skipped::default();
    let names = Names::read(&export, &mut skipped).unwrap();
    let chains = callchains::read(&export, &names, &mut skipped).unwrap();
    assert_eq!(chains[&5], ["main", "a:b", "[a.out]+0x1234"]);
    assert_eq!(chains[&6], ["main"]);
}

#[test]
fn nvtx_ranges_only_ranges_with_text_by_thread_in_start_order() {
    let (_dir, export) = export_of(
        "CREATE TABLE NVTX_EVENTS (start INTEGER, end INTEGER, eventType INTEGER,
           text TEXT, globalTid INTEGER);
         INSERT INTO NVTX_EVENTS VALUES
           (50, 60, 59, 'inner', 7 * 16777216 + 9), (10, 90, 60, 'outer', 7 * 16777216 + 9),
           (10, NULL, 59, 'open', 7 * 16777216 + 9), (10, 20, 34, 'mark', 7 * 16777216 + 9),
           (10, 20, 59, NULL, 7 * 16777216 + 9), (10, 20, 59, 'other', 7 * 16777216 + 8);",
    );
    let mut skipped = Skipped::default();
    let ranges = nvtx::ranges(&export, &Names::default(), Time::default(), &mut skipped).unwrap();
    assert_eq!(
        ranges[&(7, 9)],
        [(10, 90, "outer".to_owned()), (50, 60, "inner".to_owned())]
    );
    assert_eq!(ranges[&(7, 8)], [(10, 20, "other".to_owned())]);
}
