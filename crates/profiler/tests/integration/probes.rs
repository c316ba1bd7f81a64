//! Probes on test programs whose stacks have a known shape.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;

use gpuperf_merge::gputrace;
use gpuperf_merge::model::{Record, StringTable};
use gpuperf_merge::read::cpu::CpuLaunch;
use gpuperf_profiler::{Options, ProbeSpec};
use tempfile::TempDir;

use crate::support::{
    Run, app, app_shared, cuda13, frames, inject_lib, launch_probe as compat, privileged, profile,
    profile_gated_env, profile_in, real_cudart_app, sim_env, tmp,
};

fn assert_suffix(run: &Run, l: &CpuLaunch, suffix: &[&str]) {
    let f = frames(run, l);
    assert!(
        f.ends_with(suffix),
        "stack {f:?} does not end with {suffix:?}\n{}",
        run.text
    );
}

#[test]
fn compat_mode_on_a_static_cudart_gives_one_full_stack_per_call() {
    if !privileged() {
        return;
    }
    let exe = app("app-fp", &["-fno-omit-frame-pointer"]);
    let run = profile(compat(&exe), &exe, &["200", "0"], &[]);
    assert_eq!(run.trace.launches.len(), 200, "{:?}", run.summary);
    assert_eq!(run.summary.launches, 200);
    assert_eq!(run.summary.entry_stacks, 200);
    assert_eq!(
        (run.summary.dropped_launches, run.summary.lost_stacks),
        (0, 0)
    );
    let tid = run.tids()[0];
    let mut last_ts = 0;
    for l in &run.trace.launches {
        assert_suffix(
            &run,
            l,
            &["main", "run_layer", "launch_kernel", "cudaLaunchKernel"],
        );
        assert_eq!((l.pid, l.tid, l.correlation_id), (run.pid, tid, None));
        assert!(l.ts_ns > last_ts, "timestamps increase");
        last_ts = l.ts_ns;
    }
}

#[test]
fn compat_mode_without_frame_pointers_keeps_the_caller() {
    if !privileged() {
        return;
    }
    let exe = app("app-nofp", &["-fomit-frame-pointer"]);
    let run = profile(compat(&exe), &exe, &["100", "0"], &[]);
    assert_eq!(run.trace.launches.len(), 100);
    // The walk stops early in code without frame pointers, but the kernel
    // reads the return address at the probed `push %rbp`: the caller is kept.
    for l in &run.trace.launches {
        assert_suffix(&run, l, &["launch_kernel", "cudaLaunchKernel"]);
    }
}

#[test]
fn a_short_lived_process_is_symbolized_after_it_exits() {
    if !privileged() {
        return;
    }
    let exe = app("app-fp", &["-fno-omit-frame-pointer"]);
    // Deferred: nothing is symbolized until the process is gone.
    let options = Options {
        defer_symbolization: true,
        ..compat(&exe)
    };
    let run = profile(options, &exe, &["3", "0"], &[]);
    assert!(
        !Path::new(&format!("/proc/{}", run.pid)).exists(),
        "the process has exited"
    );
    assert_eq!(run.trace.launches.len(), 3);
    for l in &run.trace.launches {
        assert_suffix(
            &run,
            l,
            &["main", "run_layer", "launch_kernel", "cudaLaunchKernel"],
        );
    }
    assert_eq!(run.summary.unsymbolized_frames, 0, "{}", run.text);
}

/// A program that lives a few milliseconds, started by a relative path, with
/// its CUDA library a shared object: every frame of the executable is named,
/// although the process is gone before its stacks are symbolized.
#[test]
fn a_process_that_lives_milliseconds_keeps_its_executables_symbols_relative_exe_200_launches() {
    if !privileged() {
        return;
    }
    let (dir, exe, lib) = app_shared("app-short");
    let relative = Path::new(".").join(exe.file_name().unwrap());
    for defer_symbolization in [false, true] {
        let options = Options {
            uprobes: vec![ProbeSpec {
                path: lib.clone(),
                symbol: "cudaLaunchKernel".into(),
            }],
            defer_symbolization,
            ..Options::default()
        };
        let run = profile_in(options, &dir, &relative, &["200", "0"], &[]);
        assert_eq!(run.trace.launches.len(), 200, "{:?}", run.summary);
        assert_eq!(run.summary.files_not_followed, None);
        for l in &run.trace.launches {
            assert_suffix(
                &run,
                l,
                &["main", "run_layer", "launch_kernel", "cudaLaunchKernel"],
            );
            // Unwound through glibc by the module table of its exec and
            // mmap events, whether or not the process is still there.
            assert_eq!(frames(&run, l)[0], "_start", "{}", run.text);
        }
        assert_eq!(run.summary.truncated_stacks, 0, "{:?}", run.summary);
        assert_eq!(
            run.summary.unsymbolized_frames, 0,
            "deferred: {defer_symbolization}\n{}",
            run.text
        );
    }
}

/// Injection mode on the simulated runtime's CUPTI: the real gpuperf-inject
/// calls its marker with the correlation id; the stack comes from the entry
/// probe.
fn injected(threads: &str, launches: &str, discover: bool) -> Option<(Run, TempDir)> {
    injected_env(threads, launches, discover, &[], None)
}

/// The correlation ids of the `cudaLaunchKernel` calls that the injection
/// library recorded in the GPU traces of `dir`, sorted.
fn recorded_launch_ids(dir: &Path) -> Vec<u32> {
    let mut strings = StringTable::new();
    let mut ids = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "gputrace") {
            let f = std::fs::File::open(&p).unwrap();
            gputrace::read(f, &p, &mut strings, &mut |r, strings| {
                if let Record::Api(a) = r
                    && strings.get(a.name) == "cudaLaunchKernel"
                {
                    ids.push(a.correlation_id);
                }
            })
            .unwrap();
        }
    }
    ids.sort_unstable();
    ids
}

fn injected_env(
    threads: &str,
    launches: &str,
    discover: bool,
    env: &[(&str, &Path)],
    firsts: Option<u64>,
) -> Option<(Run, TempDir)> {
    if !privileged() {
        return None;
    }
    let cuda = cuda13()?;
    let sim = sim_env(&cuda);
    let inject = inject_lib();
    let exe = app("app-fp", &["-fno-omit-frame-pointer"]);
    let options = Options {
        marker_libraries: vec![inject.clone()],
        api_files: if discover { vec![] } else { vec![exe.clone()] },
        ..Options::default()
    };
    let trace_dir = tempfile::tempdir().unwrap();
    let inject_arg = inject.to_str().unwrap();
    let env = [
        &[
            (sim[0].0, sim[0].1.as_path()),
            (sim[1].0, sim[1].1.as_path()),
            ("GPUPERF_GPU_TRACE", trace_dir.path()),
        ],
        env,
    ]
    .concat();
    let args = [launches, threads, inject_arg];
    let run = match firsts {
        Some(n) => profile_gated_env(options, &exe, &args, &env, n),
        None => profile(options, &exe, &args, &env),
    };
    Some((run, trace_dir))
}

#[test]
fn injection_mode_joins_entry_stacks_to_correlation_ids() {
    let Some((run, gpu)) = injected("0", "300", false) else {
        return;
    };
    // 300 launches and one marked call without an entry probe.
    assert_eq!(
        run.trace.launches.len(),
        301,
        "{:?}\n{}",
        run.summary,
        run.text
    );
    assert_eq!(
        (run.summary.entry_stacks, run.summary.marker_stacks),
        (300, 1)
    );
    let corrs: Vec<u32> = run
        .trace
        .launches
        .iter()
        .map(|l| l.correlation_id.map_or(0, |c| c.get()))
        .collect();
    // The simulation numbers every call, the driver calls its launches make
    // too: each launch's id is the one the library recorded for it.
    assert!(
        corrs.windows(2).all(|w| w[0] < w[1]),
        "every id once, in order: {corrs:?}"
    );
    assert_eq!(corrs, recorded_launch_ids(gpu.path()));
    for l in &run.trace.launches[..300] {
        assert_suffix(
            &run,
            l,
            &["main", "run_layer", "launch_kernel", "cudaLaunchKernel"],
        );
    }
    // The unprobed call's stack is taken at the marker (counted above), inside
    // CUPTI's callback: none of the injection library's own frames. It is cut
    // where the simulated libcupti's frame, like stretches of NVIDIA's, has
    // neither an unwind table nor a frame pointer, so the program's frames
    // below are not checked here (the mock libcupti this test used before
    // called back from code with frame pointers).
    let last = frames(&run, &run.trace.launches[300]);
    assert!(
        !last
            .iter()
            .any(|f| f.contains("gpuperf") || f.contains("marker")),
        "{last:?}"
    );
}

#[test]
fn injection_mode_keeps_threads_apart() {
    let Some((run, gpu)) = injected("4", "100", false) else {
        return;
    };
    let tids: HashSet<u32> = run.tids().into_iter().collect();
    assert_eq!(tids.len(), 4);
    let mut per_tid: BTreeMap<u32, Vec<&CpuLaunch>> = BTreeMap::new();
    for l in &run.trace.launches {
        assert!(tids.contains(&l.tid), "tid {} not one of {tids:?}", l.tid);
        assert_eq!(l.pid, run.pid);
        assert_suffix(
            &run,
            l,
            &["worker", "run_layer", "launch_kernel", "cudaLaunchKernel"],
        );
        per_tid.entry(l.tid).or_default().push(l);
    }
    let mut all: Vec<u32> = Vec::new();
    for (tid, mut ls) in per_tid {
        assert_eq!(ls.len(), 100, "tid {tid}");
        ls.sort_by_key(|l| l.ts_ns);
        let ids: Vec<u32> = ls
            .iter()
            .map(|l| l.correlation_id.map_or(0, |c| c.get()))
            .collect();
        assert!(
            ids.windows(2).all(|w| w[0] < w[1]),
            "tid {tid}: ids follow time: {ids:?}"
        );
        all.extend(ids);
    }
    all.sort_unstable();
    assert_eq!(all, recorded_launch_ids(gpu.path()));
}

#[test]
fn injection_mode_discovers_the_launch_api_in_the_target() {
    // The program waits after its first launch until the profiler has
    // handled it, and so found cudart in the executable and probed its entry.
    // (The simulated runtime's libraries, loaded before, are found and probed
    // too: the first launch may be seen at their entry, not at the marker.)
    let gate = [("APP_GATE", Path::new("1"))];
    let Some((run, _gpu)) = injected_env("0", "2000", true, &gate, Some(1)) else {
        return;
    };
    assert_eq!(run.trace.launches.len(), 2001);
    assert!(run.summary.marker_stacks >= 1, "{:?}", run.summary);
    assert!(run.summary.entry_stacks >= 1999 - 1, "{:?}", run.summary);
    assert!(
        run.summary.api_files.iter().any(|f| f.ends_with("app-fp")),
        "the executable's cudart was found: {:?}",
        run.summary.api_files
    );
    assert_eq!(run.summary.entry_stacks + run.summary.marker_stacks, 2001);
    assert!(
        run.trace
            .launches
            .iter()
            .all(|l| l.correlation_id.is_some())
    );
}

#[test]
fn the_real_libcudart_launch_entry_fires() {
    if !privileged() {
        return;
    }
    let Some(cuda) = cuda13() else { return };
    let exe = real_cudart_app(&cuda);
    let lib = cuda.join("lib/libcudart.so.13");
    let options = Options {
        uprobes: vec![ProbeSpec {
            path: lib,
            symbol: "cudaLaunchKernel".into(),
        }],
        ..Options::default()
    };
    let run = profile(options, &exe, &["50"], &[]);
    assert_eq!(
        run.trace.launches.len(),
        50,
        "{:?}\n{}",
        run.summary,
        run.text
    );
    for l in &run.trace.launches {
        assert_suffix(&run, l, &["main", "enqueue", "cudaLaunchKernel"]);
    }
}

#[test]
fn injection_mode_in_a_mount_namespace_with_another_file_at_the_executables_path_probes_its_own() {
    if !privileged() {
        return;
    }
    let Some(cuda) = cuda13() else { return };
    let sim = sim_env(&cuda);
    let inject = inject_lib();
    let exe = app("app-fp", &["-fno-omit-frame-pointer"]);
    // Where the target runs `exe`, bound there in its mount namespace, this
    // process sees another build (its cudaLaunchKernel elsewhere, another
    // inode): probes on that file would never fire in the target.
    let other = app("app-fp-O0", &["-fno-omit-frame-pointer", "-O0"]);
    let dir = tmp().join("app-ns");
    std::fs::create_dir_all(&dir).unwrap();
    let seen_here = dir.join("app");
    std::fs::copy(&other, &seen_here).unwrap();
    let trace_dir = tempfile::tempdir().unwrap();
    let options = Options {
        marker_libraries: vec![inject.clone()],
        ..Options::default()
    };
    let run = profile_gated_env(
        options,
        Path::new("unshare"),
        &[
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            r#"mount --bind "$1" "$2" && exec "$2" 2000 0 "$3""#,
            "sh",
            exe.to_str().unwrap(),
            seen_here.to_str().unwrap(),
            inject.to_str().unwrap(),
        ],
        &[
            (sim[0].0, sim[0].1.as_path()),
            (sim[1].0, sim[1].1.as_path()),
            ("GPUPERF_GPU_TRACE", trace_dir.path()),
            ("APP_GATE", Path::new("1")),
        ],
        1,
    );
    assert_eq!(run.trace.launches.len(), 2001, "{:?}", run.summary);
    assert!(run.summary.entry_stacks >= 1999 - 1, "{:?}", run.summary);
    assert_eq!(run.summary.entry_stacks + run.summary.marker_stacks, 2001);
}
