//! Stacks taken in a CUPTI callback on the simulated CUDA runtime (`sim/`), whose
//! callback dispatch has no unwind info and no frame pointer, as stretches of
//! NVIDIA's libcuda and libcupti: the stack must still reach `main`.
//! Needs NVIDIA's CUDA 13 wheels (headers); skips without them unless
//! `GPUPERF_REQUIRE_CUDA_WHEELS=1`.

use std::path::Path;
use std::process::Command;

use gpuperf_test_support::cuda::{cuda13, sim};

use crate::support::{assert_in_order, gcc, parse, probe, run};

/// The dispatch between the driver call and the subscriber has no unwind info
/// (the stack crosses a frame in libcupti and one in libcuda that no FDE
/// covers): before the unwinder crossed such frames, the stack ended there, in
/// an unknown frame, with nothing of the program.
#[test]
fn sim_cupti_callback__stack_crosses_the_dispatch_without_unwind_info_to_main() {
    let Some(cuda) = cuda13() else { return };
    let sim = sim(&cuda);
    let exe = gcc(
        "cupti_subscriber",
        &["cupti_subscriber.c"],
        &[
            "-O2",
            &format!("-I{}", cuda.join("include").display()),
            &format!("-L{}", sim.display()),
            &format!("-Wl,-rpath,{}", sim.display()),
            "-lcuda",
            "-lcupti",
            "-ldl",
        ],
    );
    let out = run(Command::new(&exe).arg(probe()));
    let stacks = parse(&out);
    let s = stacks
        .iter()
        .find(|s| s.section == "callback")
        .unwrap_or_else(|| panic!("no stack in\n{out}"));
    let names = s.names();
    assert_eq!(s.end_kind(), "Root", "{}\n  {}", s.end, names.join("\n  "));
    // Every frame in order, those without unwind info included (found by the
    // tables' step from the frame below them), and the libcuda and libcupti
    // frames between them (found by scan, not skipped by a frame-pointer step).
    assert_in_order(
        &names,
        &[
            "on_callback",
            "gpusim_cupti_deliver",
            "on_api_enter",
            "gpusim_dispatch_api",
            "gpusim_api_begin",
            "ask_for_device",
            "main",
        ],
        "callback stack",
    );
    assert!(
        s.end.contains(" recovered 2"),
        "two crossings, counted: {}",
        s.end
    );
}

/// `(address, name)` of `lib`'s function symbols, by `nm`.
fn functions(lib: &Path) -> Vec<(u64, String)> {
    run(Command::new("nm").arg("--defined-only").arg(lib))
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let [addr, kind, name] = f[..] else {
                return None;
            };
            let addr = u64::from_str_radix(addr, 16).ok()?;
            matches!(kind, "t" | "T").then(|| (addr, name.to_string()))
        })
        .collect()
}

/// The simulated dispatch has no FDE, the code around it has: what
/// `sim/build.sh` promises, measured on the built libraries.
#[test]
fn sim_coverage__the_dispatch_functions_alone_have_no_unwind_entry() {
    let Some(cuda) = cuda13() else { return };
    let sim = sim(&cuda);
    for (lib, dispatch, around) in [
        ("libcupti.so.13", "gpusim_cupti_deliver", "on_api_enter"),
        ("libcuda.so.1", "gpusim_dispatch_api", "gpusim_api_begin"),
    ] {
        let path = sim.join(lib);
        let c = gpuperf_unwind::coverage(&path).unwrap();
        let f = functions(&path);
        let at = |name: &str| {
            f.iter()
                .find(|(_, n)| n == name)
                .unwrap_or_else(|| panic!("no `{name}` in {lib}"))
                .0
        };
        assert!(!c.covers(at(dispatch)), "{lib}: {dispatch} covered");
        assert!(c.covers(at(around)), "{lib}: {around} not covered");
        // Everything else with a symbol is covered but for the loader's
        // stubs (.init, .fini) and gcc's crtbeginS.o, which has no FDEs.
        let uncovered: Vec<&str> = f
            .iter()
            .filter(|(a, _)| !c.covers(*a))
            .map(|(_, n)| n.as_str())
            .filter(|n| {
                !matches!(
                    *n,
                    "_init"
                        | "_fini"
                        | "deregister_tm_clones"
                        | "register_tm_clones"
                        | "__do_global_dtors_aux"
                        | "frame_dummy"
                )
            })
            .collect();
        assert_eq!(uncovered, [dispatch], "{lib}");
        assert!(c.fraction() > 0.8 && c.fraction() < 1.0, "{lib}: {c:?}");
    }
    let obj = gpuperf_unwind::coverage(&sim.join("gen/cupti_dispatch.o")).unwrap();
    assert!(obj.executable_bytes > 0);
    assert_eq!(obj.covered_bytes, 0, "{obj:?}");
}

/// NVIDIA's libcupti.so.13 (the wheel's): about 97 % of its code has
/// unwind entries, as measured with `readelf --debug-dump=frames`.
#[test]
fn nvidia_libcupti_13__coverage_is_about_97_percent() {
    let Some(cuda) = cuda13() else { return };
    let c = gpuperf_unwind::coverage(&cuda.join("lib/libcupti.so.13")).unwrap();
    assert!(c.executable_bytes > 1_000_000, "{}", c.executable_bytes);
    let pct = 100.0 * c.fraction();
    assert!((95.0..99.9).contains(&pct), "{pct:.2}%");
}
