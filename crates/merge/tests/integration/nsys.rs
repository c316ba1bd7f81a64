//! Nsight Systems exports of other versions and platforms: the tables that name
//! GPUs, processes, threads and strings change between versions, and none of
//! them may make the reader refuse a trace. Each variant is a small export built
//! from the SQL under `tests/data/nsys/` (see its README for where each comes from).

use std::fs;
use std::path::{Path, PathBuf};

use gpuperf_merge::model::{Device, Record, StringTable};
use gpuperf_merge::read::imported::Imported;
use gpuperf_merge::read::nsys;
use serde_json::Value;

use crate::data;
use crate::imported::run;

/// An export made of `base.sql`, the variant's SQL, and then `extra`.
fn export(dir: &Path, variant: &str, extra: &str) -> PathBuf {
    let p = dir.join(format!("{variant}.sqlite"));
    let db = rusqlite::Connection::open(&p).unwrap();
    for sql in ["base", variant] {
        let text = fs::read_to_string(data(&format!("nsys/{sql}.sql"))).unwrap();
        db.execute_batch(&text).unwrap();
    }
    db.execute_batch(extra).unwrap();
    p
}

fn read(p: &Path) -> Imported {
    nsys::read(p, &mut StringTable::new()).unwrap_or_else(|e| panic!("{e}"))
}

/// The devices the import names, as (pid, CUDA device, name, compute capability).
fn devices(imp: &Imported) -> Vec<(u32, u32, String, (u16, u16))> {
    imp.records
        .iter()
        .filter_map(|r| match r {
            Record::Device(Device {
                pid,
                id,
                name,
                compute_capability,
                ..
            }) => Some((*pid, *id, name.clone(), *compute_capability)),
            _ => None,
        })
        .collect()
}

/// The names of the timeline's GPU tracks.
fn gpu_tracks(p: &Path) -> Vec<String> {
    let out = run(&[p.to_owned()]);
    assert_eq!(out.summary.kernels_matched, 1, "{}", out.summary);
    let chrome: Value = serde_json::from_str(&out.chrome).unwrap();
    chrome["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"] == "process_name")
        .filter_map(|e| e["args"]["name"].as_str())
        .filter(|n| n.starts_with("GPU"))
        .map(str::to_owned)
        .collect()
}

fn one_device(variant: &str, name: &str, cc: (u16, u16)) {
    let dir = tempfile::tempdir().unwrap();
    let p = export(dir.path(), variant, "");
    let imp = read(&p);
    assert_eq!(devices(&imp), [(4242, 0, name.to_owned(), cc)], "{variant}");
    assert!(imp.notes.is_empty(), "{variant}: {:?}", imp.notes);
    assert_eq!(gpu_tracks(&p), [format!("GPU 0 {name} (pid 4242)")]);
}

#[test]
fn nsys_2021_cuda_gpu_table__gpu_named_from_it() {
    one_device("cuda_gpu_2021", "Tesla V100-SXM2-16GB", (7, 0));
}

#[test]
fn nsys_gpu_table_by_device_id_without_id__read_not_refused() {
    one_device("gpu_device_id", "Quadro RTX 6000", (7, 5));
}

#[test]
fn nsys_2021_gpu_table_by_id__id_is_the_cuda_device() {
    one_device("gpu_id_2021", "NVIDIA A10", (8, 6));
}

#[test]
fn nsys_cuda_device_table__the_gpu_the_process_sees_as_device_0() {
    one_device("cuda_device_map", "NVIDIA L40S", (8, 9));
}

#[test]
fn nsys_windows_adapters_all_cuda_device_0__the_cuda_gpu_wins() {
    let dir = tempfile::tempdir().unwrap();
    let p = export(dir.path(), "windows_adapters", "");
    let imp = read(&p);
    assert_eq!(
        devices(&imp),
        [(4242, 0, "NVIDIA GeForce RTX 3080".to_owned(), (8, 6))]
    );
    assert_eq!(
        imp.notes,
        [
            "2 adapters in `TARGET_INFO_GPU` are not the CUDA GPU of their CUDA device number (they have no compute capability, or another adapter is that GPU) and were left out: Intel(R) UHD Graphics 630, Microsoft Basic Render Driver"
        ]
    );
    assert_eq!(gpu_tracks(&p), ["GPU 0 NVIDIA GeForce RTX 3080 (pid 4242)"]);
    // A table without compute capabilities: the CUDA GPU table tells which it is.
    let dir = tempfile::tempdir().unwrap();
    let p = export(
        dir.path(),
        "windows_adapters",
        "ALTER TABLE TARGET_INFO_GPU DROP COLUMN computeMajor;
         ALTER TABLE TARGET_INFO_GPU DROP COLUMN computeMinor;
         ALTER TABLE TARGET_INFO_GPU DROP COLUMN smCount;
         CREATE TABLE TARGET_INFO_CUDA_GPU (deviceId INTEGER, name TEXT,
           computeCapabilityMajor INTEGER, computeCapabilityMinor INTEGER);
         INSERT INTO TARGET_INFO_CUDA_GPU VALUES (0, 'NVIDIA GeForce RTX 3080', 8, 6);",
    );
    let imp = read(&p);
    assert_eq!(
        devices(&imp),
        [(4242, 0, "NVIDIA GeForce RTX 3080".to_owned(), (8, 6))]
    );
    assert_eq!(imp.notes.len(), 1, "{:?}", imp.notes);
    assert!(
        imp.notes[0]
            .ends_with("left out: Intel(R) UHD Graphics 630, Microsoft Basic Render Driver"),
        "{:?}",
        imp.notes
    );
    // Whichever row comes last.
    for last in [0, 1] {
        let dir = tempfile::tempdir().unwrap();
        let p = export(
            dir.path(),
            "windows_adapters",
            &format!(
                "CREATE TABLE t AS SELECT * FROM TARGET_INFO_GPU;
                 DELETE FROM TARGET_INFO_GPU;
                 INSERT INTO TARGET_INFO_GPU SELECT * FROM t WHERE id != {last};
                 INSERT INTO TARGET_INFO_GPU SELECT * FROM t WHERE id = {last};"
            ),
        );
        let names: Vec<String> = devices(&read(&p)).into_iter().map(|d| d.2).collect();
        assert_eq!(names, ["NVIDIA GeForce RTX 3080"], "last {last}");
    }
}

#[test]
fn nsys_gpu_table_without_id_or_name__gpu_named_by_number_and_said() {
    let dir = tempfile::tempdir().unwrap();
    let p = export(dir.path(), "gpu_unnamed", "");
    let imp = read(&p);
    assert!(devices(&imp).is_empty());
    assert_eq!(
        imp.notes,
        ["the export names no GPU for CUDA device 0: its tracks are named `GPU 0`"]
    );
    assert_eq!(gpu_tracks(&p), ["GPU 0 (pid 4242)"]);
    // Two devices with work, neither named.
    let dir = tempfile::tempdir().unwrap();
    let p = export(
        dir.path(),
        "gpu_unnamed",
        "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL
           SELECT start + 5000, end + 5000, 1, contextId, streamId, correlationId, globalPid,
                  demangledName, shortName, gridX, gridY, gridZ, blockX, blockY, blockZ
           FROM CUPTI_ACTIVITY_KIND_KERNEL;",
    );
    assert_eq!(
        read(&p).notes,
        ["the export names no GPU for CUDA devices 0, 1: their tracks are named `GPU N`"]
    );
}

/// Each metadata table with a column renamed away: the trace is still read, with
/// the GPU work and its launch, and a note says what is missing.
#[test]
fn nsys_metadata_tables_of_another_shape__read_with_a_note_each() {
    let cases = [
        (
            "ALTER TABLE StringIds RENAME COLUMN value TO text",
            "`StringIds` could not be read (SQLite: no such column: value): names are empty",
        ),
        (
            "CREATE TABLE ThreadNames (globalTid INTEGER, name TEXT)",
            "`ThreadNames` could not be read (SQLite: no such column: nameId): threads are named after their process",
        ),
        (
            "CREATE TABLE PROCESSES (globalPid INTEGER, pid INTEGER)",
            "`PROCESSES` could not be read (SQLite: no such column: name): processes are unnamed",
        ),
        (
            "CREATE TABLE NVTX_EVENTS (start INTEGER, end INTEGER, globalTid INTEGER, text TEXT)",
            "`NVTX_EVENTS` could not be read (SQLite: no such column: eventType): stacks have no NVTX ranges",
        ),
        (
            "DROP TABLE CUDA_CALLCHAINS;
             CREATE TABLE CUDA_CALLCHAINS (id INTEGER, symbol INTEGER, module INTEGER)",
            "`CUDA_CALLCHAINS` could not be read (SQLite: no such column: stackDepth): each stack is the API call alone",
        ),
        (
            "CREATE TABLE TARGET_INFO_SESSION_START_TIME (utcTime TEXT)",
            "`TARGET_INFO_SESSION_START_TIME` could not be read (SQLite: no such column: utcEpochNs): times are from the start of the session",
        ),
    ];
    for (sql, note) in cases {
        let dir = tempfile::tempdir().unwrap();
        let p = export(dir.path(), "gpu_id_2021", sql);
        let imp = read(&p);
        assert!(
            imp.notes.iter().any(|n| n == note),
            "{sql}: {:?}",
            imp.notes
        );
        let kernels = imp
            .records
            .iter()
            .filter(|r| matches!(r, Record::Activity(_)))
            .count();
        assert_eq!(kernels, 1, "{sql}");
        let stacks = imp.launch_stacks.as_ref().expect("a launch stack");
        assert_eq!(stacks.launches.len(), 1, "{sql}");
    }
}

/// A row of a metadata table that cannot be read is counted, and the others kept.
#[test]
fn nsys_malformed_gpu_row__counted_and_the_others_kept() {
    let dir = tempfile::tempdir().unwrap();
    let p = export(
        dir.path(),
        "gpu_id_2021",
        "INSERT INTO TARGET_INFO_GPU (id, name) VALUES ('x', 'broken');",
    );
    let imp = read(&p);
    assert_eq!(devices(&imp), [(4242, 0, "NVIDIA A10".to_owned(), (8, 6))]);
    assert_eq!(
        imp.notes,
        ["1 rows of `TARGET_INFO_GPU` with missing or malformed columns were skipped"]
    );
}

/// Newer exports name the NVTX table `NVTX_EVENTS_V2`, `_V3`, …: its ranges are
/// still read.
#[test]
fn a100_nsys_nvtx_table_versioned__ranges_still_in_the_stacks() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("nvtx_v3.sqlite");
    fs::copy(crate::imported::real(crate::imported::A100), &p).unwrap();
    rusqlite::Connection::open(&p)
        .unwrap()
        .execute_batch("ALTER TABLE NVTX_EVENTS RENAME TO NVTX_EVENTS_V3")
        .unwrap();
    let out = run(&[p]);
    let kernel_stacks: Vec<&str> = out
        .folded
        .lines()
        .filter(|l| l.contains("[GPU_Kernel]"))
        .collect();
    assert_eq!(
        kernel_stacks,
        [
            "_start;__libc_start_main;main;saxpy;cudaLaunchKernel;[GPU_Kernel]saxpy(double *, double *, double *, double, int) 88573"
        ]
    );
}

/// Two adapters claim CUDA device 0 and the table has no column that tells a CUDA
/// GPU: neither name is guessed.
#[test]
fn nsys_two_adapters_one_device_no_compute_capability__named_by_number_and_said() {
    let dir = tempfile::tempdir().unwrap();
    let p = export(
        dir.path(),
        "gpu_unnamed",
        "DROP TABLE TARGET_INFO_GPU;
         CREATE TABLE TARGET_INFO_GPU (cuDevice INTEGER, name TEXT);
         INSERT INTO TARGET_INFO_GPU VALUES (0, 'NVIDIA T1000'), (0, 'Intel(R) Iris(R) Xe Graphics');",
    );
    let imp = read(&p);
    assert!(devices(&imp).is_empty());
    assert_eq!(
        imp.notes,
        [
            "`TARGET_INFO_GPU` names several adapters as CUDA device 0 and cannot tell which is the CUDA GPU: named by number",
            "the export names no GPU for CUDA device 0: its tracks are named `GPU 0`",
        ]
    );
}
