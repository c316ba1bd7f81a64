//! End-to-end tests of `gpuperf diff`: two recordings of one program on the
//! simulated CUDA runtime (`sim/`), where an argument makes one function launch
//! more and bigger kernels; folded inputs; bad inputs.
#![allow(non_snake_case)]

use crate::common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Output;

use common::{Record, cuda13, gpuperf, show, sim, text, work_dir};

/// A kernel's simulated duration in ns, from the cost model in `sim/README.md`.
fn kernel_ns(grid: u64, block: u64) -> u64 {
    1000 + (grid * block).div_ceil(256)
}

/// `gpuperf record` of `diff_app GRID COUNT` with in-process stacks, keeping the
/// raw traces in `DIR/raw`.
fn record(cuda: &Path, name: &str, grid: u64, count: u64) -> PathBuf {
    let app = common::sim_c_program(cuda, "diff_app", &["cudart"]);
    let dir = work_dir(name);
    let o = Record::new(&dir)
        .flags(["--stacks", "inject", "--raw-dir", "raw"])
        .cupti(&sim(cuda).join("libcupti.so.13"))
        .program(&app, [grid.to_string(), count.to_string()])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", show(&o));
    assert_eq!(text(&o.stdout), format!("launched {}\n", 10 + count));
    dir.join("raw")
}

fn diff(dir: &Path, args: &[&std::ffi::OsStr]) -> Output {
    gpuperf(dir).arg("diff").args(args).output().unwrap()
}

/// The table's rows: (before, after, delta, change, stack).
fn rows(stdout: &str) -> Vec<(u64, u64, i64, String, String)> {
    stdout
        .lines()
        .skip(2)
        .filter(|l| !l.starts_with('('))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let stack = l.split_once("  ").map(|_| f[4..].join(" ")).unwrap();
            (
                f[0].parse().unwrap(),
                f[1].parse().unwrap(),
                f[2].parse().unwrap(),
                f[3].to_owned(),
                stack,
            )
        })
        .collect()
}

#[test]
fn diff_sim_recordings__grown_function_top_change_with_the_cost_models_delta() {
    let Some(cuda) = cuda13() else { return };
    let before = record(&cuda, "diff-before", 1000, 10);
    let after = record(&cuda, "diff-after", 4000, 15);
    let dir = work_dir("diff-out");
    let o = diff(
        &dir,
        &[
            before.as_os_str(),
            after.as_os_str(),
            "-o".as_ref(),
            "d.svg".as_ref(),
            "--full-names".as_ref(),
        ],
    );
    assert!(o.status.success(), "{}", show(&o));
    let out = text(&o.stdout);
    // Each run: 10 steady kernels of 2000 blocks; GRID x COUNT grown ones.
    let steady = 10 * kernel_ns(2000, 256);
    let (b, a) = (10 * kernel_ns(1000, 256), 15 * kernel_ns(4000, 256));
    let us = |ns: u64| {
        assert_eq!(ns % 1000, 0, "whole µs keep the check exact");
        ns / 1000
    };
    let first = out.lines().next().unwrap();
    assert!(
        first.starts_with(&format!(
            "GPU time by CPU stack: {} µs in `{}`, {} µs in `{}` (+{} µs); 1 of 2 stacks changed",
            us(steady + b),
            before.display(),
            us(steady + a),
            after.display(),
            us(a - b)
        )),
        "{out}"
    );
    let r = rows(&out);
    assert_eq!(r.len(), 1, "{out}");
    let (rb, ra, rd, pct, stack) = &r[0];
    assert_eq!(
        (*rb, *ra, *rd),
        (us(b), us(a), (us(a) - us(b)) as i64),
        "{out}"
    );
    assert_eq!(pct, "+275.0%", "{out}");
    assert!(
        // Leaf first (as in `report`), names as c++filt spells them (--full-names).
        stack.starts_with("[GPU_Kernel]grown() ← cudaLaunchKernel ← launch ← grown ← main ← "),
        "{out}"
    );
    // The flamegraph: a whole SVG that draws the grown kernel's stack.
    let svg = fs::read_to_string(dir.join("d.svg")).unwrap();
    assert!(svg.starts_with("<?xml"), "{svg}");
    assert!(svg.trim_end().ends_with("</svg>"), "{svg}");
    for frame in ["grown()", "steady()", ">grown<", ">main<"] {
        assert!(svg.contains(frame), "`{frame}` not in the SVG");
    }
    // Widths from AFTER, the change in percent of AFTER's total, red where it grew.
    let total = (us(steady + a)) as f64;
    let pct = |x: u64| format!("{:.2}", x as f64 * 100.0 / total);
    let grown = format!(
        "<title>[GPU_Kernel]grown() ({} µs, {}%; +{}%)</title>",
        us(a),
        pct(us(a)),
        pct(us(a - b))
    );
    let unchanged = format!(
        "<title>[GPU_Kernel]steady() ({} µs, {}%; 0.00%)</title>",
        us(steady),
        pct(us(steady))
    );
    for title in [&grown, &unchanged] {
        assert!(svg.contains(title.as_str()), "`{title}` not in the SVG");
    }
    let after_title = &svg[svg.find(&grown).unwrap()..];
    let grown_frame = &after_title[..after_title.find("</g>").unwrap()];
    assert!(
        grown_frame.contains("fill=\"rgb(255,100,100)\""),
        "the grown kernel is not red: {grown_frame}"
    );

    // Folded input: what `gpuperf merge -m` writes of BEFORE gives the same table.
    let m = gpuperf(&dir)
        .arg("merge")
        .arg(&before)
        .args(["--full-names", "-m", "before.folded"])
        .output()
        .unwrap();
    assert!(m.status.success(), "{}", show(&m));
    let f = diff(
        &dir,
        &[
            "before.folded".as_ref(),
            after.as_os_str(),
            "-o".as_ref(),
            "f.svg".as_ref(),
            "--full-names".as_ref(),
        ],
    );
    assert!(f.status.success(), "{}", show(&f));
    assert_eq!(rows(&text(&f.stdout)), r, "{}", show(&f));

    // Idle time: the totals are those `gpuperf merge --idle` writes.
    let idle_total = |raw: &Path, name: &str| -> u64 {
        let m = gpuperf(&dir)
            .arg("merge")
            .arg(raw)
            .args(["--idle", name])
            .output()
            .unwrap();
        assert!(m.status.success(), "{}", show(&m));
        fs::read_to_string(dir.join(name))
            .unwrap()
            .lines()
            .map(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap())
            .sum()
    };
    let (ib, ia) = (idle_total(&before, "b.idle"), idle_total(&after, "a.idle"));
    let i = diff(
        &dir,
        &[
            before.as_os_str(),
            after.as_os_str(),
            "--idle".as_ref(),
            "-o".as_ref(),
            "i.svg".as_ref(),
        ],
    );
    assert!(i.status.success(), "{}", show(&i));
    assert!(
        text(&i.stdout).starts_with(&format!(
            "idle time by CPU stack: {ib} µs in `{}`, {ia} µs in `{}`",
            before.display(),
            after.display()
        )),
        "{}",
        show(&i)
    );
}

#[test]
fn diff_folded_files__lines_and_addresses_matched_with_ignore_lines() {
    let dir = work_dir("diff-folded");
    fs::write(
        dir.join("a.folded"),
        "main;step+0x10;model.fwd (m.py:10);cudaLaunchKernel;[GPU_Kernel]k 40\n\
         main;other;cudaLaunchKernel;[GPU_Kernel]j 5\n",
    )
    .unwrap();
    fs::write(
        dir.join("b.folded"),
        "main;step+0x24;model.fwd (m.py:12);cudaLaunchKernel;[GPU_Kernel]k 10\n\
         main;other;cudaLaunchKernel;[GPU_Kernel]j 5\n",
    )
    .unwrap();
    let o = diff(
        &dir,
        &[
            "a.folded".as_ref(),
            "b.folded".as_ref(),
            "--ignore-lines".as_ref(),
        ],
    );
    assert!(o.status.success(), "{}", show(&o));
    assert_eq!(
        rows(&text(&o.stdout)),
        [(
            40,
            10,
            -30,
            "-75.0%".to_owned(),
            "[GPU_Kernel]k ← cudaLaunchKernel ← model.fwd (m.py) ← step ← main".to_owned()
        )],
        "{}",
        show(&o)
    );
    assert!(dir.join("diff.svg").is_file());
    // Without --ignore-lines the shifted line is another stack: two changes.
    let o = diff(
        &dir,
        &[
            "a.folded".as_ref(),
            "b.folded".as_ref(),
            "--top".as_ref(),
            "1".as_ref(),
        ],
    );
    assert!(o.status.success(), "{}", show(&o));
    let out = text(&o.stdout);
    assert_eq!(rows(&out).len(), 1, "{out}");
    assert!(
        out.contains("(1 more changed stacks; --top N shows more)"),
        "{out}"
    );
}

#[test]
fn diff_bad_inputs__one_line_error_naming_the_file() {
    let dir = work_dir("diff-bad");
    fs::write(dir.join("ok.folded"), "main;a 3\n").unwrap();
    fs::write(dir.join("junk.txt"), "main;a 3\nnot folded at all\n").unwrap();
    for (args, names) in [
        (["ok.folded", "missing.folded"], "`missing.folded`"),
        (["junk.txt", "ok.folded"], "`junk.txt`"),
    ] {
        let o = gpuperf(&dir).arg("diff").args(args).output().unwrap();
        assert_eq!(o.status.code(), Some(1), "{}", show(&o));
        let err = text(&o.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.starts_with("gpuperf: error: "), "{err}");
        assert!(err.contains(names), "{err}");
    }
    let err = text(
        &gpuperf(&dir)
            .arg("diff")
            .args(["junk.txt", "ok.folded"])
            .output()
            .unwrap()
            .stderr,
    );
    assert!(
        err.contains("nor folded stacks (line 2 is \"not folded at all\", not `stack weight`)"),
        "{err}"
    );
}

#[test]
fn diff_runs_with_few_kernel_names_in_common__one_warning_line_naming_the_cause() {
    let dir = work_dir("diff-names");
    // One program's kernels, as gpuperf once spelled them and as PyTorch's
    // profiler spells them: only the cheap kernel has the same name.
    fs::write(
        dir.join("ours.folded"),
        "main;step;cudaLaunchKernel;[GPU_Kernel]void at::native::vectorized_elementwise_kernel<4, \
         at::native::FillFunctor<int>, std::array<char*, (unsigned long)1>, false>(int, \
         at::native::FillFunctor<int>, std::array<char*, (unsigned long)1>) 80\n\
         main;step;cudaLaunchKernel;[GPU_Kernel]gemm(float*) 20\n",
    )
    .unwrap();
    fs::write(
        dir.join("torch.folded"),
        "main;step;cudaLaunchKernel;[GPU_Kernel]void at::native::vectorized_elementwise_kernel<4, \
         at::native::FillFunctor<int>, std::array<char*, 1ul>, false>(int, \
         at::native::FillFunctor<int>, std::array<char*, 1ul>) 80\n\
         main;step;cudaLaunchKernel;[GPU_Kernel]gemm(float*) 20\n",
    )
    .unwrap();
    let o = diff(&dir, &["ours.folded".as_ref(), "torch.folded".as_ref()]);
    assert!(o.status.success(), "{}", show(&o));
    let warnings: Vec<String> = text(&o.stderr)
        .lines()
        .filter(|l| l.contains("WARN"))
        .map(str::to_owned)
        .collect();
    assert_eq!(warnings.len(), 1, "{}", show(&o));
    for part in [
        "share few kernel names: 20% of BEFORE's kernel time and 20% of AFTER's",
        "spell kernel names differently",
        "or ran different programs",
        "(heaviest only in BEFORE: `…, std::array<char*, (unsigned long)1>, false>(int, at::nativ…`; \
         only in AFTER: `…, std::array<char*, 1ul>, false>(int, at::native::FillFuncto…`)",
    ] {
        assert!(
            warnings[0].contains(part),
            "`{part}` not in: {}",
            warnings[0]
        );
    }
    // The table still compares them: both stacks changed.
    assert!(
        text(&o.stdout).contains("2 of 3 stacks changed"),
        "{}",
        show(&o)
    );
    // A run against itself: no warning.
    let o = diff(&dir, &["ours.folded".as_ref(), "ours.folded".as_ref()]);
    assert!(o.status.success(), "{}", show(&o));
    assert!(!text(&o.stderr).contains("WARN"), "{}", show(&o));
}
