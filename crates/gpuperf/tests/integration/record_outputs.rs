//! `gpuperf record` and its outputs: a path that cannot be written is found
//! before the program starts, and a recording whose outputs cannot be written at
//! the end is kept, with the command that makes them from it.
#![allow(non_snake_case)]

use crate::common;

use std::fs;

use gpuperf_test_support::perfetto::TraceProcessor;

use common::{NO_ARGS, Record, cuda13, gpuperf, nvcc, show, sim, sim_app, work_dir};

#[test]
fn record_into_a_missing_directory__refused_before_the_program_starts() {
    let stderr = refused_before_start(&["-m", "no/such/dir/m.folded"]);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(
        lines[0].starts_with("gpuperf: error: cannot write `no/such/dir/m.folded`")
            && lines[0].ends_with("the program was not started"),
        "{stderr}"
    );
}

#[test]
fn record_existing_output__checked_without_touching_its_contents() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("old.folded"), "kept\n").unwrap();
    // The flamegraph's directory is missing: refused, and the existing folded
    // file checked on the way is left as it was.
    let o = Record::new(dir.path())
        .flags(["-m", "old.folded", "-o", "gone/f.svg"])
        .program("true", NO_ARGS)
        .output()
        .unwrap();
    assert!(!o.status.success(), "{}", show(&o));
    assert_eq!(
        fs::read_to_string(dir.path().join("old.folded")).unwrap(),
        "kept\n"
    );
}

#[test]
fn sim_outputs_unwritable_at_the_end__recording_kept_and_merge_command_given() {
    let Some(cuda) = cuda13() else { return };
    let Some(nvcc) = nvcc(&cuda) else { return };
    let app = sim_app(&cuda, &nvcc);
    let cupti = sim(&cuda).join("libcupti.so.13");
    let dir = work_dir("record_outputs_unwritable");
    fs::create_dir_all(dir.join("out")).unwrap();
    // The program removes the output directory as it ends.
    let o = Record::new(&dir)
        .flags(["--stacks", "inject", "-o", "out/f.svg"])
        .cupti(&cupti)
        .program("sh", ["-c"])
        .arg(format!("{} chevron 5 && rm -rf out", app.display()))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    // The program's own exit code.
    assert!(o.status.success(), "{}", show(&o));
    let line = stderr
        .lines()
        .find(|l| l.starts_with("gpuperf: the recording is kept in `"))
        .unwrap_or_else(|| panic!("{stderr}"));
    let kept = line.split('`').nth(1).unwrap();
    let command = line.split('`').nth(3).unwrap();
    assert!(command.starts_with("gpuperf merge "), "{line}");
    // The command given makes the outputs from the kept recording.
    let o = gpuperf(&dir)
        .args(command.split(' ').skip(1))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", show(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("matched"),
        "{}",
        show(&o)
    );
    assert!(dir.join("flamegraph.svg").exists());
    let _ = fs::remove_dir_all(std::path::Path::new(kept).parent().unwrap());
}

#[test]
fn record_pprof_on_the_simulated_runtime__profile_written_and_stubs_demangled() {
    let Some(cuda) = cuda13() else { return };
    let Some(nvcc) = nvcc(&cuda) else { return };
    let app = sim_app(&cuda, &nvcc);
    let cupti = sim(&cuda).join("libcupti.so.13");
    let dir = work_dir("record_outputs_pprof");
    let o = Record::new(&dir)
        .flags(["--stacks", "inject", "--pprof", "p.pb.gz", "-m", "m.folded"])
        .cupti(&cupti)
        .program(&app, NO_ARGS)
        .args(["chevron", "5"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", show(&o));
    let pprof = fs::read(dir.join("p.pb.gz")).unwrap();
    assert_eq!(&pprof[..2], [0x1f, 0x8b], "not gzip");
    let folded = fs::read_to_string(dir.join("m.folded")).unwrap();
    assert!(folded.contains("__device_stub__"), "{folded}");
    assert!(!folded.contains("__device_stub__Z"), "{folded}");
}

/// The host name, as `%h` spells it.
fn host_name() -> String {
    fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim_end()
        .to_owned()
}

#[test]
fn record_two_ranks__each_writes_its_own_outputs_named_by_rank_host_and_number() {
    let Some(cuda) = cuda13() else { return };
    let Some(nvcc) = nvcc(&cuda) else { return };
    let app = sim_app(&cuda, &nvcc);
    let cupti = sim(&cuda).join("libcupti.so.13");
    let dir = work_dir("record_per_rank_names");
    let host = host_name();
    for (rank, launches) in [("0", "2"), ("1", "3")] {
        let o = Record::new(&dir)
            .flags([
                "--stacks",
                "inject",
                "-o",
                "gpu.%q{RANK}.svg",
                "-m",
                "gpu.%q{RANK}.folded",
                "-c",
                "timeline.%n.json",
                "--raw-dir",
                "raw.%h.%q{RANK}",
                "--parquet",
                "pq.%q{RANK}",
            ])
            .env("RANK", rank)
            .cupti(&cupti)
            .program(&app, ["chevron", launches])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    }
    for (rank, launches, number) in [(0, 2, 1), (1, 3, 2)] {
        assert!(dir.join(format!("gpu.{rank}.svg")).is_file());
        // Each rank's folded stacks are its own run's: `chevron N` launches N times.
        let folded = fs::read_to_string(dir.join(format!("gpu.{rank}.folded"))).unwrap();
        assert!(folded.contains("k_scale"), "{folded}");
        assert!(dir.join(format!("timeline.{number}.json")).is_file());
        let raw = dir.join(format!("raw.{host}.{rank}"));
        let traces = fs::read_dir(&raw)
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .ends_with(".gputrace")
            })
            .count();
        assert_eq!(
            traces,
            1,
            "rank {rank} ({launches} launches): {}",
            raw.display()
        );
    }
    // Each raw directory holds its own rank's run: `chevron 2` and `chevron 3`.
    let kernels = |rank: u32| {
        common::Recording::open(&dir.join(format!("raw.{host}.{rank}")))
            .kernels()
            .len()
    };
    let (k0, k1) = (kernels(0), kernels(1));
    assert!(k0 > 0 && k0 * 3 == k1 * 2, "{k0} and {k1} kernels");
    assert!(!dir.join("timeline.3.json").exists());
    // Each rank's Parquet tables say which host and rank they are, and hold its kernels.
    for (rank, kernels) in [(0, k0), (1, k1)] {
        let events = dir.join(format!("pq.{rank}/events.parquet"));
        let Some(rows) = gpuperf_test_support::duckdb::query(&format!(
            "select distinct host, rank, count(*) over () from '{}' where kind = 'kernel'",
            events.display()
        )) else {
            return;
        };
        assert_eq!(rows.len(), 1, "{rows:?}");
        assert_eq!(rows[0][0].as_str(), Some(host.as_str()));
        assert_eq!(rows[0][1].as_i64(), Some(rank));
        assert_eq!(rows[0][2].as_u64(), Some(kernels as u64));
    }
}

#[test]
fn record_one_launcher_of_two_ranks__each_process_keeps_its_own_rank_in_parquet_and_timeline() {
    // As under torchrun: one `gpuperf record` over a launcher whose children
    // are the ranks, each with its own RANK, LOCAL_RANK and WORLD_SIZE, and
    // gpuperf itself with none of them.
    let Some(cuda) = cuda13() else { return };
    let Some(nvcc) = nvcc(&cuda) else { return };
    let app = sim_app(&cuda, &nvcc);
    let cupti = sim(&cuda).join("libcupti.so.13");
    let dir = work_dir("record_launcher_ranks");
    let app = app.display();
    let script = format!(
        "RANK=0 LOCAL_RANK=0 WORLD_SIZE=2 {app} chevron 2 & \
         RANK=1 LOCAL_RANK=1 WORLD_SIZE=2 {app} chevron 3; wait"
    );
    let o = Record::new(&dir)
        .flags([
            "--stacks",
            "inject",
            "-c",
            "timeline.json",
            "--raw-dir",
            "raw",
            "--parquet",
            "pq",
        ])
        .env_remove("RANK")
        .env_remove("LOCAL_RANK")
        .env_remove("WORLD_SIZE")
        .cupti(&cupti)
        .program("sh", ["-c".to_owned(), script])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let rec = common::Recording::open(&dir.join("raw"));
    let kernels_of = |pid: u32| rec.kernels().iter().filter(|k| k.pid == pid).count() as i64;
    let events = dir.join("pq/events.parquet");
    let Some(rows) = gpuperf_test_support::duckdb::query(&format!(
        "select pid, host, rank, local_rank, world_size, count(*) from '{}' \
         where kind = 'kernel' group by all order by rank",
        events.display()
    )) else {
        return;
    };
    assert_eq!(rows.len(), 2, "{rows:?}");
    let mut pids = Vec::new();
    for (row, rank) in rows.iter().zip([0i64, 1]) {
        let pid = row[0].as_u64().unwrap() as u32;
        pids.push(pid);
        assert_eq!(row[1].as_str(), Some(host_name().as_str()), "{row:?}");
        assert_eq!(row[2].as_i64(), Some(rank), "{row:?}");
        assert_eq!(row[3].as_i64(), Some(rank), "{row:?}");
        assert_eq!(row[4].as_i64(), Some(2), "{row:?}");
        assert_eq!(row[5].as_i64(), Some(kernels_of(pid)), "{row:?}");
    }
    // `chevron 2` and `chevron 3`: rank 1 launched half as much again as rank 0.
    assert_eq!(kernels_of(pids[0]) * 3, kernels_of(pids[1]) * 2, "{rows:?}");
    // The timeline names each rank's process and GPU by its rank, as
    // Perfetto's trace processor reads it.
    let Some(tp) = TraceProcessor::load(&dir.join("timeline.json")).unwrap() else {
        return;
    };
    let names = tp
        .query("select pid, name from process where name is not null order by name")
        .unwrap();
    let host = host_name();
    for (pid, rank) in pids.iter().zip(0..) {
        let named = |part: &str| {
            names.rows.iter().any(|r| {
                let n = r[1].as_str().unwrap_or("");
                n.contains(part) && n.ends_with(&format!("(pid {pid}, rank {rank} of 2 on {host})"))
            })
        };
        assert!(named("/sim_app (pid"), "process {pid}: {:?}", names.rows);
        assert!(named("GPU 0 "), "GPU of process {pid}: {:?}", names.rows);
    }
}

#[test]
fn record_output_naming_an_unset_variable__refused_before_the_program_starts() {
    let stderr = refused_before_start(&["-o", "gpu.%q{GPUPERF_TEST_UNSET_RANK}.svg"]);
    assert_eq!(
        stderr.trim_end(),
        "gpuperf: error: `gpu.%q{GPUPERF_TEST_UNSET_RANK}.svg`: the environment variable \
         GPUPERF_TEST_UNSET_RANK (%q{GPUPERF_TEST_UNSET_RANK}) is not set"
    );
}

/// Runs `gpuperf record FLAGS -- sh -c 'touch MARKER'`, checks that gpuperf
/// failed without starting the program (no marker), and returns its stderr.
fn refused_before_start(flags: &[&str]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let o = Record::new(dir.path())
        .flags(flags)
        .program(
            "sh",
            ["-c".to_owned(), format!("touch {}", marker.display())],
        )
        .output()
        .unwrap();
    assert!(!o.status.success(), "{}", show(&o));
    assert!(!marker.exists(), "the program ran: {}", show(&o));
    String::from_utf8_lossy(&o.stderr).into_owned()
}
