//! Stacks of code without frame pointers: unwound from stack copies with
//! `.eh_frame`, cached by recipes, and counted as truncated when they stop
//! before a root frame.

// Test names put inputs before `__` and the expectation after.
#![allow(non_snake_case)]

use std::path::PathBuf;
use std::process::Command;

use gpuperf_merge::read::cpu::{CpuLaunch, TRUNCATED_FRAME};
use gpuperf_profiler::{Options, ProbeSpec};
use gpuperf_test_support::cc::Gcc;
use gpuperf_test_support::process::show;

use crate::support::{
    Run, app, data, frames, launch_probe as probe, levels, privileged, profile, profile_gated,
    profile_gated_env, tmp,
};

/// The frames below `launch_all`, down to the launch.
const LEVELS: [&str; 10] = [
    "run",
    "exe_level1",
    "exe_level2",
    "exe_level3",
    "exe_level4",
    "lib_level1",
    "lib_level2",
    "lib_level3",
    "lib_level4",
    "cudaLaunchKernel",
];

/// Every launch's stack is complete: it starts at the process's or the
/// thread's first frame and holds every level down to the launch.
fn assert_complete(run: &Run, thread_start: &str) {
    for l in &run.trace.launches {
        let f = frames(run, l);
        let root = if l.tid == run.pid { "_start" } else { "clone3" };
        assert!(
            f.first() == Some(&root) || (root == "clone3" && f.first() == Some(&"clone")),
            "stack {f:?} does not start at {root}\n{}",
            run.text
        );
        let tail = [&[thread_start, "launch_all"][..], &LEVELS[..]].concat();
        assert!(
            f.ends_with(&tail),
            "stack {f:?} does not end with {tail:?}\n{}",
            run.text
        );
    }
    assert_eq!(run.summary.truncated_stacks, 0, "{:?}", run.summary);
    assert_eq!(run.trace.truncated, 0);
    assert_eq!(run.summary.unreadable_files, [""; 0], "{:?}", run.summary);
}

#[test]
fn o2_executable_and_library_without_frame_pointers__every_stack_reaches_start() {
    if !privileged() {
        return;
    }
    let (exe, cudart) = levels();
    let run = profile_gated(probe(&cudart), &exe, &["2000", "0"], 1);
    assert_eq!(run.trace.launches.len(), 2000, "{:?}", run.summary);
    assert_complete(&run, "main");
    // One copy for the call site, then recipes: the other 1999 wait until
    // the first one's recipe is in place.
    assert_eq!(
        (run.summary.stack_copies, run.summary.recipe_hits),
        (1, 1999),
        "a hot call site costs one copy: {:?}",
        run.summary
    );
    assert_eq!(run.summary.unsymbolized_frames, 0, "{}", run.text);
}

#[test]
fn o2_threads_without_frame_pointers__every_stack_reaches_the_thread_start() {
    if !privileged() {
        return;
    }
    let (exe, cudart) = levels();
    let run = profile_gated(probe(&cudart), &exe, &["500", "3"], 3);
    assert_eq!(run.trace.launches.len(), 1500, "{:?}", run.summary);
    assert!(run.trace.launches.iter().all(|l| l.tid != run.pid));
    assert_complete(&run, "worker");
    assert!(
        run.trace
            .launches
            .iter()
            .all(|l| frames(&run, l).contains(&"start_thread")),
        "{}",
        run.text
    );
    // Each thread's stack is elsewhere: one copy per thread.
    assert_eq!(
        (run.summary.stack_copies, run.summary.recipe_hits),
        (3, 1497),
        "{:?}",
        run.summary
    );
}

#[test]
fn a_stack_deeper_than_the_copy_is_counted_truncated_in_the_summary_and_the_trace() {
    if !privileged() {
        return;
    }
    let (exe, cudart) = levels();
    // 12 frames of 2 KiB between main and the levels: the 16 KiB copy ends
    // before main.
    let run = profile(probe(&cudart), &exe, &["20", "0", "12"], &[]);
    assert_eq!(run.trace.launches.len(), 20);
    for l in &run.trace.launches {
        let f = frames(&run, l);
        assert_eq!(f[0], TRUNCATED_FRAME, "{f:?}");
        assert!(!f.contains(&"main"), "{f:?}");
        assert!(f.contains(&"recurse"), "{f:?}");
        assert!(f.ends_with(&["lib_level4", "cudaLaunchKernel"]), "{f:?}");
    }
    assert_eq!(run.summary.truncated_stacks, 20, "{:?}", run.summary);
    assert_eq!(run.trace.truncated, 20);
}

#[test]
fn without_unwinding_frame_pointer_walks_that_stop_early_are_counted_truncated() {
    if !privileged() {
        return;
    }
    let (exe, cudart) = levels();
    let options = Options {
        unwind: false,
        ..probe(&cudart)
    };
    let run = profile(options, &exe, &["50", "0"], &[]);
    assert_eq!(run.trace.launches.len(), 50);
    for l in &run.trace.launches {
        let f = frames(&run, l);
        assert_eq!(
            f,
            [TRUNCATED_FRAME, "lib_level4", "cudaLaunchKernel"],
            "{}",
            run.text
        );
    }
    assert_eq!(run.summary.truncated_stacks, 50);
    assert_eq!(run.summary.stack_copies, 0);
    assert_eq!(run.trace.truncated, 50);
}

#[test]
fn frame_pointer_code_gets_the_same_frames_as_its_frame_pointer_walk_and_reaches_start() {
    if !privileged() {
        return;
    }
    let exe = app("app-fp", &["-fno-omit-frame-pointer"]);
    let spec = ProbeSpec {
        path: exe.clone(),
        symbol: "cudaLaunchKernel".into(),
    };
    let with = |unwind| Options {
        uprobes: vec![spec.clone()],
        unwind,
        ..Options::default()
    };
    let walked = profile(with(false), &exe, &["100", "0"], &[]);
    let unwound = profile(with(true), &exe, &["100", "0"], &[]);
    // From main down, the frame-pointer walk and the unwinder agree.
    let from_main = |run: &Run, l: &CpuLaunch| -> Vec<String> {
        let f = frames(run, l);
        let at = f.iter().position(|&x| x == "main").expect("main");
        f[at..].iter().map(|s| s.to_string()).collect()
    };
    for (a, b) in walked.trace.launches.iter().zip(&unwound.trace.launches) {
        assert_eq!(from_main(&walked, a), from_main(&unwound, b));
        assert_eq!(frames(&unwound, b)[0], "_start", "{}", unwound.text);
    }
    // glibc here keeps no frame pointers: the walk stops in it.
    assert_eq!(walked.summary.truncated_stacks, 100);
    assert_eq!(unwound.summary.truncated_stacks, 0);
}

/// Set, to the `levels` executable, in the chroot that
/// `in_a_chroot__...` runs itself in.
const IN_CHROOT: &str = "GPUPERF_TEST_LEVELS_IN_CHROOT";

#[test]
fn in_a_chroot__the_files_the_target_maps_are_found_and_every_stack_reaches_start() {
    if !privileged() {
        return;
    }
    if let Some(exe) = std::env::var_os(IN_CHROOT) {
        // The profiler and its target both run in the chroot: the paths BPF
        // sends must be the chroot's, as /proc/PID/maps shows them (they were
        // the mount namespace's, and no file was found by them).
        let exe = PathBuf::from(exe);
        let cudart = exe.with_file_name("libfakecudart.so");
        let run = profile(probe(&cudart), &exe, &["200", "0"], &[]);
        assert_eq!(run.trace.launches.len(), 200, "{:?}", run.summary);
        assert_complete(&run, "main");
        return;
    }
    // Built here, outside: the test in the chroot must not rebuild files
    // that other tests run.
    let (exe, _) = levels();
    // The whole tree again under a directory, in a mount namespace of its own
    // (the mounts go with it), and this test run again chrooted there.
    let root = tmp().join("chroot");
    std::fs::create_dir_all(&root).unwrap();
    let out = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg(r#"mount --rbind / "$1" && exec chroot "$@""#)
        .arg("sh")
        .arg(&root)
        .arg(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "unwind::in_a_chroot__the_files_the_target_maps_are_found_and_every_stack_reaches_start",
            "--nocapture",
            "--color=never",
        ])
        .env(IN_CHROOT, &exe)
        .output()
        .expect("unshare (util-linux) runs");
    let log = show(&out);
    assert!(out.status.success(), "in the chroot:\n{log}");
    assert!(
        log.contains("1 passed"),
        "the test did not run in the chroot:\n{log}"
    );
}

#[test]
fn a_target_in_a_chroot_profiled_from_outside__its_files_are_read_under_the_chroot() {
    if !privileged() {
        return;
    }
    let (exe, _) = levels();
    // A chroot of its own files and libraries, at the same places, but the
    // program's own files only in it: no `/levels` here.
    let root = tmp().join("levels-chroot");
    let _ = std::fs::remove_dir_all(&root);
    let ldd = Command::new("ldd").arg(&exe).output().expect("ldd runs");
    let mut files = vec![
        exe.clone(),
        exe.with_file_name("liblevels.so"),
        exe.with_file_name("libfakecudart.so"),
    ];
    for line in String::from_utf8_lossy(&ldd.stdout).lines() {
        let path = line.split_whitespace().find(|w| w.starts_with('/'));
        files.extend(
            path.map(PathBuf::from)
                .filter(|p| !p.starts_with(exe.parent().unwrap())),
        );
    }
    for f in &files {
        let to = if f.starts_with(exe.parent().unwrap()) {
            root.join("levels").join(f.file_name().unwrap())
        } else {
            root.join(f.strip_prefix("/").unwrap())
        };
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(f, &to).unwrap();
    }
    let cudart = root.join("levels/libfakecudart.so");
    // Gated: its files are looked for while it lives (a process gone by
    // then, in a chroot, has paths that name no file here).
    let run = profile_gated_env(
        probe(&cudart),
        std::path::Path::new("chroot"),
        &[root.to_str().unwrap(), "/levels/levels", "200", "0"],
        // No /proc in the chroot, which `$ORIGIN` in the run path needs.
        &[("LD_LIBRARY_PATH", std::path::Path::new("/levels"))],
        1,
    );
    assert_eq!(run.trace.launches.len(), 200, "{:?}", run.summary);
    assert_complete(&run, "main");
}

#[test]
fn in_a_mount_namespace_with_another_build_at_a_librarys_path__the_mapped_file_is_read() {
    if !privileged() {
        return;
    }
    let (levels_exe, _) = levels();
    // The program in a directory of its own, where this process sees another
    // build of liblevels.so than the one the target maps: its mount namespace
    // has the first build bound over that path.
    let dir = tmp().join("levels-ns");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for name in ["levels", "libfakecudart.so"] {
        std::fs::copy(levels_exe.with_file_name(name), dir.join(name)).unwrap();
    }
    let mapped = levels_exe.with_file_name("liblevels.so");
    let seen_here = Gcc::new(dir.join("liblevels.so"))
        .args(["-O2", "-g", "-shared", "-fPIC", "-DANOTHER_BUILD"])
        .arg(data("liblevels.c"))
        .build();
    // Gated: the files are looked for while the process lives, which a
    // process that exits first does not wait for.
    let run = profile_gated(
        probe(&dir.join("libfakecudart.so")),
        std::path::Path::new("unshare"),
        &[
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            r#"mount --bind "$1" "$2" && exec "$3" 2000 0"#,
            "sh",
            mapped.to_str().unwrap(),
            seen_here.to_str().unwrap(),
            dir.join("levels").to_str().unwrap(),
        ],
        1,
    );
    assert_eq!(run.trace.launches.len(), 2000, "{:?}", run.summary);
    assert_complete(&run, "main");
    assert_eq!(
        (run.summary.stack_copies, run.summary.recipe_hits),
        (1, 1999),
        "{:?}",
        run.summary
    );
}

/// `signal_levels.c`, built -O2 without frame pointers beside `levels`' libraries,
/// once: two tests run it at the same time.
fn signal_levels() -> (PathBuf, PathBuf) {
    static BUILT: std::sync::OnceLock<(PathBuf, PathBuf)> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let (levels, cudart) = levels();
            let dir = levels.parent().unwrap();
            let exe = Gcc::new(dir.join("signal_levels"))
                .args(["-Wall", "-Werror", "-O2", "-g", "-fomit-frame-pointer"])
                .arg(data("signal_levels.c"))
                .arg(format!("-L{}", dir.display()))
                .args(["-Wl,-rpath,$ORIGIN", "-llevels", "-lfakecudart"])
                .build();
            (exe, cudart)
        })
        .clone()
}

#[test]
fn launches_in_a_signal_handler__every_stack_continues_through_the_signal_frame_to_start() {
    if !privileged() {
        return;
    }
    let (exe, cudart) = signal_levels();
    let run = profile(probe(&cudart), &exe, &["20", "0"], &[]);
    assert_eq!(run.trace.launches.len(), 20, "{:?}", run.summary);
    for l in &run.trace.launches {
        let f = frames(&run, l);
        assert_eq!(f[0], "_start", "{f:?}");
        // glibc's start frames are named by its version.
        let f = &f[f.iter().position(|&x| x == "main").expect("main")..];
        let outside = ["main", "outer", "interrupted"];
        let inside = [
            "handler",
            "lib_level1",
            "lib_level2",
            "lib_level3",
            "lib_level4",
            "cudaLaunchKernel",
        ];
        // Between them, one frame: the signal return trampoline (glibc's
        // __restore_rt, named where libc keeps its symbol table).
        assert!(
            f.len() == outside.len() + 1 + inside.len()
                && f.starts_with(&outside)
                && f.ends_with(&inside),
            "{f:?}\n{}",
            run.text
        );
        let restore = f[outside.len()];
        assert!(
            restore == "__restore_rt" || restore.starts_with("libc.so.6+0x"),
            "{f:?}"
        );
    }
    assert_eq!(run.summary.truncated_stacks, 0, "{:?}", run.summary);
    assert_eq!(run.summary.signal_stacks_cut, 0, "{:?}", run.summary);
}

#[test]
fn launches_in_a_signal_handler_on_an_alternate_stack__stop_at_the_signal_frame_and_are_counted() {
    if !privileged() {
        return;
    }
    let (exe, cudart) = signal_levels();
    let run = profile(probe(&cudart), &exe, &["20", "1"], &[]);
    assert_eq!(run.trace.launches.len(), 20, "{:?}", run.summary);
    for l in &run.trace.launches {
        let f = frames(&run, l);
        // The interrupted function is found (from the signal frame's
        // registers); its stack is not in the copy.
        assert_eq!(
            f,
            [
                TRUNCATED_FRAME,
                "interrupted",
                f[2],
                "handler",
                "lib_level1",
                "lib_level2",
                "lib_level3",
                "lib_level4",
                "cudaLaunchKernel"
            ],
            "{}",
            run.text
        );
    }
    assert_eq!(run.summary.truncated_stacks, 20, "{:?}", run.summary);
    assert_eq!(run.summary.signal_stacks_cut, 20, "{:?}", run.summary);
}
