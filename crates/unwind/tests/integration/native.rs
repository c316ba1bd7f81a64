//! Native stacks of C programs without frame pointers.

use std::process::Command;

use crate::support::{assert_in_order, gcc, parse, probe, run, tmp};

fn levels(flags: &[&str], tag: &str) {
    let lib = gcc(
        &format!("liblevels{tag}.so"),
        &["liblevels.c"],
        &[&["-shared", "-fPIC"][..], flags].concat(),
    );
    let exe = gcc(
        &format!("levels{tag}"),
        &["levels.c"],
        &[
            flags,
            &[
                lib.to_str().unwrap(),
                &format!("-Wl,-rpath,{}", tmp().display()),
                "-pthread",
                "-ldl",
            ],
        ]
        .concat(),
    );
    let out = run(Command::new(&exe).arg(probe()));
    let stacks = parse(&out);
    assert_eq!(stacks.len(), 3, "{out}");
    for s in &stacks {
        let names = s.names();
        assert_eq!(
            s.end_kind(),
            "Root",
            "{}: {}\n  {}",
            s.section,
            s.end,
            names.join("\n  ")
        );
        let mut want = vec![
            "gpuperf_probe_capture",
            "lib_inner",
            "lib_enter",
            "level5",
            "level4",
            "level3",
            "level2",
            "level1",
        ];
        if s.section == "thread" {
            want.push("thread_main");
            assert_in_order(&names, &want, &s.section);
            // glibc's start_thread and clone3 are local symbols: they are named
            // only where libc keeps its symbol table, as `libc.so.6+0x…` elsewhere.
            let below = &names[names.iter().position(|n| n == "thread_main").unwrap() + 1..];
            let named =
                below.len() == 2 && below[0] == "start_thread" && below[1].starts_with("clone");
            let unnamed = below.len() == 2 && below.iter().all(|n| n.contains("libc.so.6+0x"));
            assert!(
                named || unnamed,
                "thread stack ends in start_thread and clone/clone3: {names:?}"
            );
        } else {
            want.extend(["main", "_start"]);
            assert_in_order(&names, &want, &s.section);
            assert_eq!(names.last().unwrap(), "_start");
        }
    }
}

#[test]
fn c_o2__every_stack_reaches_main_or_clone() {
    levels(&["-O2"], "_o2");
}

#[test]
fn c_o2_omit_frame_pointer__every_stack_reaches_main_or_clone() {
    levels(&["-O2", "-fomit-frame-pointer"], "_o2_nofp");
}

#[test]
fn code_without_unwind_info__jit_ends_unknown_a_library_is_crossed() {
    let nocfi = gcc(
        "libnocfi.so",
        &["libnocfi.c"],
        &[
            "-shared",
            "-fPIC",
            "-O2",
            "-fno-asynchronous-unwind-tables",
            "-fno-unwind-tables",
        ],
    );
    let late = gcc("liblate.so", &["liblate.c"], &["-shared", "-fPIC", "-O2"]);
    // The same code in another file (its own soname, so its own build id).
    let late2 = gcc(
        "liblate2.so",
        &["liblate.c"],
        &["-shared", "-fPIC", "-O2", "-Wl,-soname,liblate2.so"],
    );
    let exe = gcc("nounwind", &["nounwind.c"], &["-O2", "-ldl"]);
    let out = run(Command::new(&exe).args([probe(), nocfi, late, late2]));
    let stacks = parse(&out);
    let by = |name: &str| {
        stacks
            .iter()
            .find(|s| s.section == name)
            .unwrap_or_else(|| panic!("no `{name}` stack in\n{out}"))
    };
    // Anonymous code (JIT) ends the stack in an unknown frame.
    let s = by("jit");
    let names = s.names();
    assert_eq!(s.end_kind(), "NoUnwindInfo", "jit: {names:?}");
    assert_in_order(
        &names,
        &["gpuperf_probe_capture", "leaf", "[unknown]"],
        "jit",
    );
    assert_eq!(names.last().unwrap(), "[unknown]");
    // A library's code without unwind info is a frame of its own, and the
    // stack goes on past it (found by scan), counted.
    let s = by("nocfi");
    let names = s.names();
    assert_eq!(s.end_kind(), "Root", "nocfi: {names:?}");
    assert_in_order(
        &names,
        &[
            "gpuperf_probe_capture",
            "leaf",
            "nocfi_call",
            "main",
            "_start",
        ],
        "nocfi",
    );
    assert!(s.end.contains(" recovered 1 "), "{}", s.end);
    let s = by("late before refresh");
    assert_eq!(s.end_kind(), "ModuleNotInTable", "{:?}", s.names());
    assert_eq!(s.names().last().unwrap(), "[unknown]");
    assert!(out.contains("refreshed 1\n== late after refresh"), "{out}");
    let s = by("late after refresh");
    assert_eq!(s.end_kind(), "Root", "{:?}", s.names());
    assert_in_order(
        &s.names(),
        &["leaf", "late_call", "main", "_start"],
        "after refresh",
    );
    // After dlclose the table still lists the closed library: every module the
    // stack uses is checked with _dl_find_object, and the stack is still complete.
    let s = by("after dlclose");
    assert_eq!(s.end_kind(), "Root", "{:?}", s.names());
    assert_in_order(&s.names(), &["leaf", "main", "_start"], "after dlclose");
    // A library loaded where the closed one was is a module of its own: its
    // frames name its file, not the closed one's.
    assert!(
        out.contains("same address 1\n"),
        "the loader moved it: {out}"
    );
    let s = by("reused address");
    assert_eq!(s.end_kind(), "Root", "{:?}", s.names());
    let late_frame = s
        .lines
        .iter()
        .find(|l| l.contains("liblate"))
        .unwrap_or_else(|| panic!("no frame in liblate*: {:?}", s.lines));
    assert!(late_frame.contains("/liblate2.so\t"), "{late_frame}");
}

/// Coroutines on their own stacks (ucontext, as boost.context and fibers do):
/// each stack's bounds are looked up once, not on every capture.
#[test]
fn coroutine_stacks__bounds_looked_up_once_per_stack() {
    let exe = gcc("coroutines", &["coroutines.c"], &["-O2", "-ldl"]);
    let out = run(Command::new(&exe).arg(probe()));
    let stacks = parse(&out);
    assert_eq!(stacks.len(), 3, "{out}");
    for s in &stacks {
        assert!(!s.lines.is_empty(), "{}: {out}", s.section);
    }
    let scans: u64 = out
        .split("stack_scans: ")
        .nth(1)
        .and_then(|s| s.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{out}"));
    // The main stack and the two coroutine stacks, not 300 captures' worth.
    assert!(scans <= 3, "{scans} lookups of /proc/self/maps: {out}");
}

/// A stack taken in a signal handler continues through the kernel's signal
/// frame (`__restore_rt`) into the interrupted function and on to `main`,
/// whether the handler runs on the thread's stack or on an alternate one.
#[test]
fn signal_handler_stacks__continue_past_the_signal_frame_to_main() {
    let exe = gcc(
        "signals",
        &["signals.c"],
        &["-O2", "-fomit-frame-pointer", "-ldl"],
    );
    let out = run(Command::new(&exe).arg(probe()));
    let stacks = parse(&out);
    assert_eq!(stacks.len(), 2, "{out}");
    for s in &stacks {
        let names = s.names();
        assert_eq!(
            s.end_kind(),
            "Root",
            "{}: {}\n  {}",
            s.section,
            s.end,
            names.join("\n  ")
        );
        assert_in_order(
            &names,
            &[
                "handler_take",
                "handler",
                "interrupted",
                "outer",
                "main",
                "_start",
            ],
            &s.section,
        );
        // The signal frame itself is one frame: glibc's __restore_rt (named
        // where libc keeps its symbol table).
        let h = names.iter().position(|n| n == "handler").unwrap();
        let i = names.iter().position(|n| n == "interrupted").unwrap();
        assert_eq!(i, h + 2, "{}: {names:?}", s.section);
        let restore = &names[h + 1];
        assert!(
            restore == "__restore_rt" || restore.contains("libc.so.6+0x"),
            "{}: {names:?}",
            s.section
        );
    }
}

/// A library loaded after the table was built is added beside it (only its
/// own headers read: no rebuild, the unwind caches' rules kept), and a later
/// refresh folds it in.
#[test]
fn dlopened_libraries__added_without_rebuilding_the_table() {
    let late = gcc("liblate.so", &["liblate.c"], &["-shared", "-fPIC", "-O2"]);
    let late2 = gcc(
        "liblate2.so",
        &["liblate.c"],
        &["-shared", "-fPIC", "-O2", "-Wl,-soname,liblate2.so"],
    );
    let exe = gcc("added", &["added.c"], &["-O2", "-ldl"]);
    let out = run(Command::new(&exe).args([probe(), late, late2]));
    let stacks = parse(&out);
    let by = |name: &str| {
        stacks
            .iter()
            .find(|s| s.section == name)
            .unwrap_or_else(|| panic!("no `{name}` stack in\n{out}"))
    };
    assert_eq!(by("late before").end_kind(), "ModuleNotInTable", "{out}");
    for section in ["late added", "late2 added", "late again", "late refreshed"] {
        let s = by(section);
        assert_eq!(s.end_kind(), "Root", "{section}: {:?}", s.names());
        assert_in_order(&s.names(), &["leaf", "late_call", "main"], section);
    }
    assert!(
        by("late2 added")
            .lines
            .iter()
            .any(|l| l.contains("/liblate2.so\t")),
        "{out}"
    );
    assert!(out.contains("added 1\n== late added"), "{out}");
    assert!(out.contains("added 1\n== late2 added"), "{out}");
    let counter = |when: &str, name: &str| -> u64 {
        out.split(&format!("stats {when}: "))
            .nth(1)
            .and_then(|s| s.split(&format!("{name}: ")).nth(1))
            .and_then(|s| s.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {when}: {out}"))
    };
    assert_eq!(counter("added", "table_rebuilds"), 0, "{out}");
    assert_eq!(counter("added", "modules_added"), 2, "{out}");
    assert!(
        out.contains("refreshed 1\n"),
        "the refresh folds them in: {out}"
    );
    assert_eq!(counter("refreshed", "table_rebuilds"), 1, "{out}");
}
