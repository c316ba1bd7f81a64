//! `gpuperf record` and its outputs: a path that cannot be written is found
//! before the program starts, and a recording whose outputs cannot be written at
//! the end is kept, with the command that makes them from it.
#![allow(non_snake_case)]

use crate::common;

use std::fs;

use common::{NO_ARGS, Record, cuda13, gpuperf, nvcc, show, sim, sim_app, work_dir};

#[test]
fn record_into_a_missing_directory__refused_before_the_program_starts() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let o = Record::new(dir.path())
        .flags(["-m", "no/such/dir/m.folded"])
        .program(
            "sh",
            ["-c".to_owned(), format!("touch {}", marker.display())],
        )
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{}", show(&o));
    assert!(!marker.exists(), "the program ran: {}", show(&o));
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
