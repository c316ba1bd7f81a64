//! Python frames from CPython 3.10–3.13 calling the probe through ctypes.

use std::path::{Path, PathBuf};
use std::process::Command;

use gpuperf_test_support::python::{marker_line, pythons};

use crate::support::{Stack, assert_in_order, parse, probe, run};

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/py_stacks.py")
}

/// The line of the `# call:NAME` marker in the script.
fn line(name: &str) -> usize {
    marker_line(&script(), name)
}

fn stacks(python: &Path, case: &str) -> Vec<Stack> {
    let out = run(Command::new(python).arg(script()).arg(probe()).arg(case));
    parse(&out)
}

fn check_nested(name: &str, s: &Stack, outermost: &[String]) {
    let names = s.names();
    assert_eq!(
        s.end_kind(),
        "Root",
        "{name} {}: {}\n  {}",
        s.section,
        s.end,
        names.join("\n  ")
    );
    let want: Vec<String> = [
        format!("py_stacks.show (py_stacks.py:{})", line("show")),
        format!("py_stacks.inner (py_stacks.py:{})", line("inner")),
        format!("py_stacks.middle (py_stacks.py:{})", line("middle")),
        format!("py_stacks.outer (py_stacks.py:{})", line("outer")),
    ]
    .into_iter()
    .chain(outermost.iter().cloned())
    .collect();
    let want: Vec<&str> = want.iter().map(String::as_str).collect();
    assert_in_order(&names, &want, &format!("{name} {}", s.section));
    assert!(
        !names.iter().any(|n| n == "_PyEval_EvalFrameDefault"),
        "{name}: an eval-loop frame was not replaced:\n  {}",
        names.join("\n  ")
    );
}

#[test]
fn python_nested_calls_on_the_main_thread__named_outermost_first_with_lines() {
    for (name, py) in pythons() {
        let st = stacks(&py, "main");
        assert_eq!(st.len(), 1, "{name}");
        let module = format!("py_stacks.<module> (py_stacks.py:{})", line("module"));
        // python's `main` tail-calls Py_BytesMain, so it is not on the stack.
        check_nested(&name, &st[0], &[module, "_start".into()]);
        assert_eq!(st[0].names().last().unwrap(), "_start", "{name}");
    }
}

#[test]
fn python_nested_calls_holding_the_gil__named_outermost_first_with_lines() {
    for (name, py) in pythons() {
        let st = stacks(&py, "main_gil_held");
        assert_eq!(st.len(), 1, "{name}");
        let module = format!(
            "py_stacks.<module> (py_stacks.py:{})",
            line("module_gil_held")
        );
        check_nested(&name, &st[0], &[module, "_start".into()]);
        assert_eq!(st[0].names().last().unwrap(), "_start", "{name}");
    }
}

#[test]
fn python_nested_calls_on_a_threading_thread__named_with_lines() {
    for (name, py) in pythons() {
        let st = stacks(&py, "thread");
        assert_eq!(st.len(), 1, "{name}");
        let names = st[0].names();
        check_nested(&name, &st[0], &[]);
        assert!(
            // 3.10 code objects have no qualified name: `threading.run`.
            names
                .iter()
                .any(|n| n.starts_with("threading.Thread.run (threading.py:")
                    || n.starts_with("threading.run (threading.py:")),
            "{name}: {names:?}"
        );
        assert!(
            names.last().unwrap().starts_with("clone"),
            "{name}: {names:?}"
        );
    }
}

#[test]
fn python_thread_without_python_state__keeps_its_native_frames() {
    for (name, py) in pythons() {
        let st = stacks(&py, "native_thread");
        let s = &st[0];
        let names = s.names();
        assert_eq!(s.end_kind(), "Root", "{name}: {names:?}");
        assert!(s.end.contains("python 0 "), "{name}: {}", s.end);
        assert!(
            !s.lines.iter().any(|l| l.starts_with("P ")),
            "{name}: {names:?}"
        );
        assert!(
            names.last().unwrap().starts_with("clone"),
            "{name}: {names:?}"
        );
    }
}

#[test]
fn python_thread_known_to_the_interpreter_between_python_calls__no_frames_and_no_probe() {
    for (name, py) in pythons() {
        let out = run(Command::new(&py)
            .arg(script())
            .arg(probe())
            .arg("idle_thread"));
        let st = parse(&out);
        assert_eq!(st.len(), 1, "{name}: {out}");
        let s = &st[0];
        assert_eq!(s.end_kind(), "Root", "{name}: {}", s.end);
        assert!(s.end.contains("python 0 "), "{name}: {}", s.end);
        // 3.11 and 3.12: the thread's cframe is the thread state's own root
        // cframe, read without a probe; 3.10 and 3.13: no frame at all.
        let probes = counter(&out, 1, "python_probes") - counter(&out, 0, "python_probes");
        assert_eq!(probes, 0, "{name}: {out}");
        assert_eq!(counter(&out, 1, "python_skipped"), 0, "{name}");
    }
}

#[test]
fn python_300_deep_recursion__truncated_at_the_cap_and_counted() {
    for (name, py) in pythons() {
        let st = stacks(&py, "deep");
        let s = &st[0];
        let names = s.names();
        assert_eq!(s.end_kind(), "DepthLimit", "{name}: {}", s.end);
        assert!(s.end.contains("truncated true"), "{name}: {}", s.end);
        assert!(names.len() <= gpuperf_unwind::MAX_FRAMES, "{name}");
        let rec0 = format!("py_stacks.rec (py_stacks.py:{})", line("rec0"));
        let rec = format!("py_stacks.rec (py_stacks.py:{})", line("rec"));
        assert_in_order(&names, &[&rec0, &rec], &name);
        // The stack holds MAX_FRAMES frames: 3.10 spends about two native frames
        // per Python call (its eval loop recurses in C), 3.11+ none.
        let recs = names.iter().filter(|n| **n == rec).count();
        assert!(recs > 100, "{name}: only {recs} recursive frames");
        assert!(
            names.len() >= gpuperf_unwind::MAX_FRAMES - 8,
            "{name}: cut at {} frames",
            names.len()
        );
    }
}

/// The counter `name` in the `stats` line the script printed after its stacks.
fn counter(out: &str, nth: usize, name: &str) -> u64 {
    let line = out
        .lines()
        .filter(|l| l.starts_with("stats "))
        .nth(nth)
        .unwrap_or_else(|| panic!("no stats line {nth} in:\n{out}"));
    let at = line
        .find(&format!("{name}: "))
        .unwrap_or_else(|| panic!("no {name} in {line}"));
    line[at + name.len() + 2..]
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|v| v.parse().ok())
        .unwrap()
}

#[test]
fn python_corrupted_frame_link__that_stack_skipped_and_counted_the_next_read() {
    for (name, py) in pythons() {
        let out = run(Command::new(&py).arg(script()).arg(probe()).arg("corrupt"));
        let st = parse(&out);
        assert_eq!(st.len(), 2, "{name}");
        // No crash, no Python frames for the bad stack, a complete native one.
        assert!(st[0].end.contains("python 0 "), "{name}: {}", st[0].end);
        assert_eq!(st[0].end_kind(), "Root", "{name}: {}", st[0].end);
        // Python frames stay on for the next stack of the same process.
        for s in &st {
            assert!(s.end.contains("Active"), "{name} {}: {}", s.section, s.end);
        }
        let names = st[1].names();
        let want = format!("py_stacks.corrupt (py_stacks.py:{})", line("corrupt") + 1);
        assert!(names.contains(&want), "{name}: {names:?}");
        assert_eq!(counter(&out, 0, "python_skipped"), 1, "{name}");
    }
}

#[test]
fn python_steady_state_captures__no_probe_system_calls_from_3_11_on() {
    for (name, py) in pythons() {
        let out = run(Command::new(&py).arg(script()).arg(probe()).arg("probes"));
        let st = parse(&out);
        assert_eq!(st.len(), 11, "{name}");
        for s in &st {
            let names = s.names();
            assert!(
                names
                    .iter()
                    .any(|n| n.starts_with("py_stacks.outer (")
                        || n.starts_with("py_stacks.repeat (")),
                "{name}: {names:?}"
            );
        }
        let stacks = counter(&out, 1, "python_stacks") - counter(&out, 0, "python_stacks");
        assert_eq!(stacks, 10, "{name}");
        let probes = counter(&out, 1, "python_probes") - counter(&out, 0, "python_probes");
        if name.contains("3.10") {
            // 3.10's frames are heap objects: each capture probes their pages.
            assert!(probes > 0, "{name}");
        } else {
            // Frames in the thread's data stack, their code objects through the
            // frames: proven live without a system call.
            assert_eq!(probes, 0, "{name}: {out}");
        }
    }
}

#[test]
fn python_generator_and_init_frames__named_in_order() {
    for (name, py) in pythons() {
        let st = stacks(&py, "generator");
        assert_eq!(st.len(), 1, "{name}");
        let names = st[0].names();
        assert_eq!(st[0].end_kind(), "Root", "{name}: {}", st[0].end);
        let init = if name.contains("3.10") {
            "py_stacks.__init__"
        } else {
            "py_stacks.Init.__init__"
        };
        let want = [
            format!("py_stacks.show (py_stacks.py:{})", line("show")),
            format!("py_stacks.inner (py_stacks.py:{})", line("inner")),
            format!("py_stacks.gen (py_stacks.py:{})", line("gen")),
            format!("{init} (py_stacks.py:{})", line("init")),
            format!(
                "py_stacks.<module> (py_stacks.py:{})",
                line("generator_module")
            ),
        ];
        let want: Vec<&str> = want.iter().map(String::as_str).collect();
        assert_in_order(&names, &want, &name);
    }
}

#[test]
fn python_frame_link_into_memory_unmapped_since_it_was_read__no_crash() {
    for (name, py) in pythons() {
        let st = stacks(&py, "stale");
        assert_eq!(st.len(), 3, "{name}");
        // While mapped, the copy of the module frame is read like the original.
        let module = format!("py_stacks.<module> (py_stacks.py:{})", line("stale_module"));
        let names = st[0].names();
        assert!(
            names.contains(&module),
            "{name} {}: {names:?}",
            st[0].section
        );
        // Unmapped: no fault, and the stack is still complete natively.
        assert_eq!(st[1].section, "unmapped");
        assert_eq!(st[1].end_kind(), "Root", "{name}: {}", st[1].end);
    }
}

#[test]
fn python_frames_with_process_vm_readv_refused_by_seccomp__still_read() {
    for (name, py) in pythons() {
        let st = stacks(&py, "seccomp");
        assert_eq!(st.len(), 1, "{name}");
        assert!(st[0].end.contains("Active"), "{name}: {}", st[0].end);
        let module = format!(
            "py_stacks.<module> (py_stacks.py:{})",
            line("seccomp_module")
        );
        check_nested(&name, &st[0], &[module]);
    }
}

#[test]
fn python_subinterpreter_inside_a_main_interpreter_call__stack_marked_python_cut() {
    for (name, py) in pythons() {
        let st = stacks(&py, "subinterpreter");
        assert_eq!(st.len(), 1, "{name}");
        let names = st[0].names();
        // The main interpreter's loop keeps its native frame, its Python frames
        // (or, before 3.12, the subinterpreter's) are not in the chain read.
        assert_eq!(st[0].end_kind(), "PythonCut", "{name}: {names:?}");
        if !name.contains("3.10") && !name.contains("3.11") {
            assert!(
                names.iter().any(|n| n.starts_with("<string>.in_sub (")),
                "{name}: {names:?}"
            );
        }
    }
}

/// The stacks of a `reuse_*` case, each checked to hold, in order, the frames
/// every one of them shares above `differs` (its own, per stack), then those
/// below; and the count of captures that reused Python frames of the last.
fn check_reuse(case: &str, differs: &[String], below: &[String]) {
    for (name, py) in pythons() {
        let out = run(Command::new(&py).arg(script()).arg(probe()).arg(case));
        let st = parse(&out);
        assert_eq!(st.len(), differs.len(), "{name}: {out}");
        for (s, d) in st.iter().zip(differs) {
            assert_eq!(s.end_kind(), "Root", "{name} {}: {}", s.section, s.end);
            let want: Vec<String> = [
                format!("py_stacks.show (py_stacks.py:{})", line("show")),
                format!("py_stacks.leaf (py_stacks.py:{})", line("leaf")),
                format!("py_stacks.mid (py_stacks.py:{})", line("mid")),
            ]
            .into_iter()
            .chain([d.clone()])
            .chain(below.iter().cloned())
            .collect();
            let want: Vec<&str> = want.iter().map(String::as_str).collect();
            assert_in_order(&s.names(), &want, &format!("{name} {case} {}", s.section));
        }
        let reused = counter(&out, 0, "python_reused");
        if name.contains("3.10") {
            // 3.10's frames are heap objects: read in full every time.
            assert_eq!(reused, 0, "{name}");
        } else {
            // The second capture repeats the first; the third shares the
            // frames outward of the change, which it reuses.
            assert_eq!(reused, 2, "{name}: {out}");
        }
    }
}

#[test]
fn python_trail__the_same_function_called_from_another_line_deep_in_the_stack__gets_that_line() {
    let at = |m: &str| format!("py_stacks.reuse_lines (py_stacks.py:{})", line(m));
    check_reuse(
        "reuse_lines",
        &[at("line_a"), at("line_a"), at("line_b")],
        &[format!(
            "py_stacks.<module> (py_stacks.py:{})",
            line("reuse_lines_module")
        )],
    );
}

#[test]
fn python_trail__another_function_called_into_the_same_slot_deep_in_the_stack__gets_its_frame() {
    let via = |f: &str| format!("py_stacks.{f} (py_stacks.py:{})", line(f));
    check_reuse(
        "reuse_slot",
        &[via("via_a"), via("via_a"), via("via_b")],
        &[
            format!("py_stacks.reuse_slot (py_stacks.py:{})", line("slot")),
            format!(
                "py_stacks.<module> (py_stacks.py:{})",
                line("reuse_slot_module")
            ),
        ],
    );
}

#[test]
fn python_trail__a_generator_resumed_from_another_frame__gets_that_frame() {
    let resume = |f: &str| format!("py_stacks.{f} (py_stacks.py:{})", line(f));
    check_reuse(
        "reuse_generator",
        &[resume("resume_a"), resume("resume_a"), resume("resume_b")],
        &[
            format!(
                "py_stacks.reuse_generator (py_stacks.py:{})",
                line("resume")
            ),
            format!(
                "py_stacks.<module> (py_stacks.py:{})",
                line("reuse_generator_module")
            ),
        ],
    );
}

#[test]
fn python_kept_capture__taken_whole_only_where_the_python_chain_is_the_same() {
    for (name, py) in pythons() {
        let out = run(Command::new(&py).arg(script()).arg(probe()).arg("kept"));
        let st: Vec<Stack> = parse(&out)
            .into_iter()
            .filter(|s| s.section != "warm")
            .collect();
        assert_eq!(st.len(), 6, "{name}: {out}");
        // (depth, expected tag's depth) per capture: the first two keep.
        let cases = [(2, 0), (4, 0), (2, 2), (4, 2), (4, 4), (2, 4)];
        // 3.10 calls each Python function through a C frame of its own.
        let same_native = !name.contains("3.10");
        // Captures taken whole on the caller's stack so far (the probe's
        // unwinder's count): the script's main thread has room.
        let mut on_caller_stack = 0;
        for (s, &(depth, expected)) in st.iter().zip(&cases) {
            let what = format!("{name} {}", s.section);
            assert_eq!(s.end_kind(), "Root", "{what}: {}", s.end);
            let rec = format!("py_stacks.kept_rec (py_stacks.py:{})", line("kept_rec"));
            let leaf = format!("py_stacks.kept_rec (py_stacks.py:{})", line("kept_leaf"));
            let names = s.names();
            assert_eq!(
                (
                    names.iter().filter(|n| **n == rec).count(),
                    names.iter().filter(|n| **n == leaf).count()
                ),
                (depth, 1),
                "{what}: the frames of its own depth\n  {}",
                names.join("\n  ")
            );
            let field = |k: &str| {
                s.end
                    .split(&format!(" {k} "))
                    .nth(1)
                    .and_then(|r| r.split(' ').next())
                    .unwrap_or("?")
                    .to_string()
            };
            let kept = expected != 0 && (expected == depth || same_native);
            assert_eq!(field("kept"), kept.to_string(), "{what}: {}", s.end);
            let whole = expected == depth && same_native;
            assert_eq!(field("whole"), whole.to_string(), "{what}: {}", s.end);
            on_caller_stack += u32::from(whole);
            assert_eq!(
                field("on_caller_stack"),
                on_caller_stack.to_string(),
                "{what}: {}",
                s.end
            );
        }
    }
}

#[test]
fn python_kept_capture__not_taken_whole_once_a_code_object_of_its_chain_was_destroyed() {
    for (name, py) in pythons() {
        let out = run(Command::new(&py)
            .arg(script())
            .arg(probe())
            .arg("kept_code"));
        let printed = |key: &str| {
            out.lines()
                .find_map(|l| l.strip_prefix(key)?.strip_prefix(' '))
                .unwrap_or("?")
                .to_string()
        };
        // 3.11 on: the probe's init had the main thread set up the count of
        // destroyed code objects (3.12's watcher, 3.11's counting
        // deallocator), so that the first kept chain is proven without its
        // code objects, the second (after one was destroyed) with them.
        let minor: u32 = name
            .rsplit('.')
            .next()
            .and_then(|m| m.parse().ok())
            .unwrap();
        assert_eq!(
            printed("watching"),
            u32::from(minor >= 11).to_string(),
            "{name}: {out}"
        );
        // What makes the case: another code object at the destroyed one's
        // address (CPython reuses a freed block first).
        assert_eq!(
            printed("same_address"),
            "1",
            "{name}: the new code object never took the old one's address\n{out}"
        );
        let st: Vec<Stack> = parse(&out)
            .into_iter()
            .filter(|s| s.section != "warm")
            .collect();
        assert_eq!(st.len(), 3, "{name}: {out}");
        // 3.10 calls each Python function through a C frame of its own.
        let same_native = !name.contains("3.10");
        let via = |file: &str, line: u32| format!("{file}.via ({file}.py:{line})");
        let kept_rec = format!("py_stacks.kept_rec (py_stacks.py:{})", line("kept_rec"));
        let caller = format!("py_stacks.kept_code (py_stacks.py:{})", line("kept_code"));
        for (s, (file, line, whole)) in st[1..]
            .iter()
            .zip([("via_a", 2, same_native), ("via_b", 5, false)])
        {
            let what = format!("{name} {}", s.section);
            let names = s.names();
            let frame = via(file, line);
            let want = [kept_rec.as_str(), frame.as_str(), caller.as_str()];
            assert_in_order(&names, &want, &what);
            assert!(
                !names.iter().any(|n| n.starts_with("via_") && *n != frame),
                "{what}: a frame of the destroyed code object\n  {}",
                names.join("\n  ")
            );
            assert!(
                s.end.contains(&format!(" whole {whole}")),
                "{what}: {}",
                s.end
            );
        }
    }
}
