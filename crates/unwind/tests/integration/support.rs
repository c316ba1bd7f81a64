//! Building the C helpers, running them, parsing and symbolizing their stacks.

use std::path::{Path, PathBuf};
use std::process::Command;

use blazesym::symbolize::source::{Elf, Source};
use blazesym::symbolize::{Input, Symbolized, Symbolizer};
use gpuperf_test_support::cc::Gcc;
use gpuperf_test_support::process::{run_ok, text};
use gpuperf_test_support::test_data;

/// The probe library that `cargo test` built from examples/unwind_probe.rs.
pub fn probe() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    // target/<profile>/deps/integration-HASH → target/<profile>/examples/
    let p = exe
        .parent()
        .and_then(Path::parent)
        .unwrap()
        .join("examples/libunwind_probe.so");
    assert!(
        p.is_file(),
        "{} is missing: run the tests with `cargo test -p gpuperf-unwind`, which builds the examples",
        p.display()
    );
    p
}

/// The test's scratch directory.
pub fn tmp() -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("unwind");
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Compiles `srcs` (in tests/data) with gcc into `out` (in the scratch directory),
/// once per test process.
pub fn gcc(out: &str, srcs: &[&str], args: &[&str]) -> PathBuf {
    Gcc::new(tmp().join(out))
        .args(srcs.iter().map(|s| test_data("unwind", s)))
        .args(args)
        .build_once()
}

/// Runs a command and returns its stdout; panics with stderr on failure.
pub fn run(cmd: &mut Command) -> String {
    let what = format!("{cmd:?}");
    text(&run_ok(cmd, &what).stdout)
}

/// One stack as the probe printed it.
#[derive(Debug)]
pub struct Stack {
    /// The section (`== name`) it was printed under.
    pub section: String,
    /// `N path\tbuildid\toffset`, `P function\tfile\tline`, `U address`.
    pub lines: Vec<String>,
    /// The `end …` line.
    pub end: String,
}

pub fn parse(out: &str) -> Vec<Stack> {
    let mut stacks = Vec::new();
    let mut section = String::new();
    let mut lines = Vec::new();
    for l in out.lines() {
        if let Some(s) = l.strip_prefix("== ") {
            section = s.to_string();
        } else if l.starts_with("end ") {
            stacks.push(Stack {
                section: section.clone(),
                lines: std::mem::take(&mut lines),
                end: l.to_string(),
            });
        } else if l.starts_with("N ") || l.starts_with("P ") || l.starts_with("U ") {
            lines.push(l.to_string());
        }
    }
    stacks
}

impl Stack {
    /// Frame names, innermost first: native frames symbolized with blazesym from
    /// (path, offset) alone, Python frames as `function (file:line)`, unknown
    /// frames as `[unknown]`.
    pub fn names(&self) -> Vec<String> {
        let sym = Symbolizer::new();
        self.lines
            .iter()
            .map(|l| {
                if let Some(n) = l.strip_prefix("N ") {
                    let mut f = n.split('\t');
                    let (path, _id, off) =
                        (f.next().unwrap(), f.next().unwrap(), f.next().unwrap());
                    let off = u64::from_str_radix(off, 16).unwrap();
                    let src = Source::Elf(Elf::new(path));
                    match sym.symbolize_single(&src, Input::VirtOffset(off)) {
                        Ok(Symbolized::Sym(s)) => s.name.to_string(),
                        _ => format!("{path}+{off:#x}"),
                    }
                } else if let Some(p) = l.strip_prefix("P ") {
                    let f: Vec<&str> = p.split('\t').collect();
                    let file = Path::new(f[1])
                        .file_name()
                        .unwrap()
                        .to_string_lossy()
                        .into_owned();
                    format!("{} ({file}:{})", f[0], f[2])
                } else {
                    "[unknown]".to_string()
                }
            })
            .collect()
    }

    /// The `StackEnd` name.
    pub fn end_kind(&self) -> &str {
        self.end.split_whitespace().nth(1).unwrap()
    }
}

/// Asserts that `want` occurs in `names` in this order (not necessarily adjacent).
pub fn assert_in_order(names: &[String], want: &[&str], context: &str) {
    let mut it = names.iter();
    for w in want {
        assert!(
            it.any(|n| n == w),
            "{context}: `{w}` missing or out of order in\n  {}",
            names.join("\n  ")
        );
    }
}
