//! What a PyTorch user sees of the repository's simulated recordings: Python
//! frames without the interpreter's, short names with the full ones at hand,
//! and text that fits a terminal (`report`, `diff`).
// Test names are `<input>__<what is checked>`.
#![allow(non_snake_case)]

use crate::common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Output;

use common::{gpuperf, show, work_dir};

/// A recording of `samples/pytorch/gpt2_small.py` (torch, eager) on the simulated runtime.
fn gpt2() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../samples/recordings/simulated/gpt2_small_eager")
}

/// A recording of the nvcc-built mock LLM, whose launches go through `__device_stub__` frames.
fn mock_llm() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../samples/recordings/simulated/mock_llm")
}

fn run(dir: &Path, args: &[&str]) -> Output {
    let o = gpuperf(dir).args(args).output().unwrap();
    assert!(o.status.success(), "{}", show(&o));
    o
}

/// `merge -m` of a recording with `flags`: the folded stacks' frames, per line.
fn folded(rec: &Path, dir: &Path, flags: &[&str]) -> Vec<Vec<String>> {
    let out = dir.join("m.folded");
    let mut args = vec![
        "merge",
        "-q",
        rec.to_str().unwrap(),
        "-m",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(flags);
    run(dir, &args);
    fs::read_to_string(&out)
        .unwrap()
        .lines()
        .map(|l| {
            let (stack, _) = l.rsplit_once(' ').unwrap();
            stack.split(';').map(str::to_owned).collect()
        })
        .collect()
}

fn median_depth(stacks: &[Vec<String>]) -> usize {
    let mut d: Vec<usize> = stacks.iter().map(Vec::len).collect();
    d.sort_unstable();
    d[d.len() / 2]
}

fn is_interpreter(f: &str) -> bool {
    f.starts_with("_PyEval_")
        || f.starts_with("PyObject_")
        || f.starts_with("_PyObject_")
        || f.starts_with("_PyFunction_")
        || f.starts_with("python3.11+0x")
}

#[test]
fn gpt2_eager__python_frames_stand_in_for_the_interpreters_and_the_flag_keeps_them() {
    let dir = work_dir("view_interpreter_frames");
    let all = folded(
        &gpt2(),
        &dir,
        &["--keep-interpreter-frames", "--full-names"],
    );
    let python = folded(&gpt2(), &dir, &[]);
    assert!(all.iter().flatten().any(|f| is_interpreter(f)));
    let left: Vec<&String> = python
        .iter()
        .flatten()
        .filter(|f| is_interpreter(f))
        .collect();
    assert!(left.is_empty(), "interpreter frames left: {left:?}");
    // The same Python lines, in the same order, and the same native frames of
    // torch, are there either way.
    let py = |s: &[Vec<String>]| -> std::collections::BTreeSet<Vec<String>> {
        s.iter()
            .map(|st| st.iter().filter(|f| f.contains(".py:")).cloned().collect())
            .collect()
    };
    assert!(py(&all) == py(&python), "the Python lines differ");
    assert!(
        python
            .iter()
            .flatten()
            .any(|f| f.starts_with("torch::autograd::THPVariable_"))
    );
    assert!(python.iter().all(|s| s[0] == "_start"), "roots are kept");
    let (before, after) = (median_depth(&all), median_depth(&python));
    assert!(after * 3 / 2 <= before, "median depth {before} → {after}");
}

#[test]
fn gpt2_eager__names_are_short_and_the_full_ones_are_in_tooltips_and_args() {
    let dir = work_dir("view_short_names");
    let full = folded(&gpt2(), &dir, &["--full-names"]);
    let short = folded(&gpt2(), &dir, &[]);
    let longest = |s: &[Vec<String>]| s.iter().flatten().map(|f| f.chars().count()).max().unwrap();
    assert!(longest(&full) > 1000, "{}", longest(&full));
    assert!(longest(&short) <= 300, "{}", longest(&short));
    assert!(
        short
            .iter()
            .flatten()
            .any(|f| f == "c10::impl::wrap_kernel_functor_unboxed_<…>::call")
    );
    // The SVG's tooltip and the timeline's args hold the full names.
    let svg = dir.join("f.svg");
    let timeline = dir.join("t.json");
    run(
        &dir,
        &[
            "merge",
            "-q",
            gpt2().to_str().unwrap(),
            "-o",
            svg.to_str().unwrap(),
            "-c",
            timeline.to_str().unwrap(),
        ],
    );
    let svg = fs::read_to_string(svg).unwrap();
    assert!(
        svg.contains("<title>c10::impl::wrap_kernel_functor_unboxed_&lt;c10::impl::detail::"),
        "no full name in a tooltip"
    );
    let timeline = fs::read_to_string(timeline).unwrap();
    assert!(
        timeline.contains(r#""full_name":"void at::native::vectorized_elementwise_kernel<"#),
        "no full kernel name in the timeline's args"
    );
}

#[test]
fn mock_llm__device_stubs_are_demangled() {
    let dir = work_dir("view_stubs");
    for flags in [&[][..], &["--full-names"][..]] {
        let stacks = folded(&mock_llm(), &dir, flags);
        let stubs: Vec<&String> = stacks
            .iter()
            .flatten()
            .filter(|f| f.starts_with("__device_stub__"))
            .collect();
        assert!(!stubs.is_empty());
        assert!(
            stubs.iter().all(|f| !f.starts_with("__device_stub__Z")),
            "{flags:?}: {stubs:?}"
        );
    }
    let stacks = folded(&mock_llm(), &dir, &["--full-names"]);
    assert!(
        stacks
            .iter()
            .flatten()
            .any(|f| f == "__device_stub__matvec(float const*, float const*, float*, int)")
    );
}

fn widest(text: &str) -> usize {
    text.lines().map(|l| l.chars().count()).max().unwrap_or(0)
}

#[test]
fn gpt2_eager__report_lines_fit_a_terminal_and_list_python_lines() {
    let dir = work_dir("view_report");
    let o = run(
        &dir,
        &["report", "-q", gpt2().to_str().unwrap(), "--top", "50"],
    );
    let text = String::from_utf8(o.stdout).unwrap();
    assert!(
        widest(&text) <= 200,
        "a line of {} characters",
        widest(&text)
    );
    let table = text
        .split("GPU time and GPU idle time by Python line")
        .nth(1)
        .unwrap_or_else(|| panic!("no Python line table:\n{text}"));
    assert!(
        table.contains("linear.Linear.forward (linear.py:134)"),
        "{table}"
    );
    // The top stacks start with their leaf, then their innermost Python line.
    assert!(
        text.contains("cudaLaunchKernel ← … ← linear.Linear.forward (linear.py:134)"),
        "{text}"
    );
    let o = run(
        &dir,
        &["report", "-q", gpt2().to_str().unwrap(), "--format", "json"],
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v["kernels"].as_array().is_some_and(|k| !k.is_empty()));
    assert!(
        v["python_lines"]
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l["line"] == "linear.Linear.forward (linear.py:134)"
                && l["gpu_ns"].as_u64() > Some(0))
    );
    assert!(v["idle_stacks"].as_array().is_some_and(|k| !k.is_empty()));
}

#[test]
fn gpt2_eager_against_itself_scaled__diff_fits_a_terminal_speaks_json_and_fails_above() {
    let dir = work_dir("view_diff");
    // AFTER: BEFORE's folded stacks, one stack grown.
    let before = dir.join("before.folded");
    let after = dir.join("after.folded");
    run(
        &dir,
        &[
            "merge",
            "-q",
            gpt2().to_str().unwrap(),
            "--keep-interpreter-frames",
            "--full-names",
            "-m",
            before.to_str().unwrap(),
        ],
    );
    let text = fs::read_to_string(&before).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    let (stack, w) = lines[0].rsplit_once(' ').unwrap();
    let w: u64 = w.parse().unwrap();
    lines[0] = format!("{stack} {}", w + 20_000);
    fs::write(&after, lines.join("\n") + "\n").unwrap();
    let args = |extra: &[&str]| -> Vec<String> {
        // Relative paths: the summary line names them as given.
        let mut a = vec![
            "diff".to_owned(),
            "before.folded".to_owned(),
            "after.folded".to_owned(),
            "-o".to_owned(),
            "d.svg".to_owned(),
        ];
        a.extend(extra.iter().map(|s| (*s).to_owned()));
        a
    };
    let o = gpuperf(&dir).args(args(&[])).output().unwrap();
    assert!(o.status.success(), "{}", show(&o));
    let out = String::from_utf8(o.stdout).unwrap();
    assert!(
        widest(&out) <= 200,
        "a line of {} characters:\n{out}",
        widest(&out)
    );
    let o = gpuperf(&dir)
        .args(args(&["--format", "json"]))
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["changes"][0]["delta"], 20_000);
    // The total grew by 20 ms of ~60 ms: over 10 %, under 50 %.
    let o = gpuperf(&dir)
        .args(args(&["--fail-above", "50"]))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let o = gpuperf(&dir)
        .args(args(&["--fail-above", "10"]))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(3), "{}", show(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("regression: "));
}

#[test]
fn gpt2_eager__merge_idle_alone_prints_no_folded_stacks() {
    let dir = work_dir("view_merge_idle");
    let idle = dir.join("idle.folded");
    let o = run(
        &dir,
        &[
            "merge",
            "-q",
            gpt2().to_str().unwrap(),
            "--idle",
            idle.to_str().unwrap(),
        ],
    );
    assert!(o.stdout.is_empty(), "{} bytes on stdout", o.stdout.len());
    assert!(fs::metadata(&idle).unwrap().len() > 0);
}
