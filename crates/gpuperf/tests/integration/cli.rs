//! End-to-end tests of the `gpuperf` binary: outputs, where they go, and how bad
//! input and bad arguments fail (exit code, one error line naming the file).
// Test names are `<command>_<input>__<what is checked>`.
#![allow(non_snake_case)]

use crate::common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Output;

use gpuperf_test_support::traces::Trace;

/// The kernels of the reference recording, as the report names them.
const KERNELS: [&str; 5] = [
    "layerNorm(",
    "attentionQKT(",
    "softmax(",
    "attentionScoresV(",
    "residualAdd(",
];
const MATCHED_ALL: &str = "matched 2115 of 2115 kernels (100.0%)";

fn reference(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../samples/recordings/reference")
        .join(file)
}

fn gpuperf<I, S>(args: I) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    common::gpuperf_cmd()
        .args(args)
        .output()
        .expect("failed to run gpuperf")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn assert_success(o: &Output) {
    assert!(
        o.status.success(),
        "gpuperf failed ({}); stderr:\n{}",
        o.status,
        stderr(o)
    );
    assert!(!stderr(o).contains("panicked"), "{}", stderr(o));
}

/// Exit code 1, stderr exactly one line, `gpuperf: error: …` naming `path`.
fn assert_one_error_line(o: &Output, path: &Path) {
    let err = stderr(o);
    assert!(!err.contains("panicked"), "panicked:\n{err}");
    assert_eq!(o.status.code(), Some(1), "stderr:\n{err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "expected one stderr line, got:\n{err}");
    assert!(lines[0].starts_with("gpuperf: error: "), "{err}");
    assert!(
        lines[0].contains(&path.display().to_string()),
        "error does not name `{}`: {err}",
        path.display()
    );
}

/// Every line is `stack weight` with an integer weight.
fn assert_folded(text: &str) {
    assert!(!text.is_empty(), "no folded stacks");
    for (i, line) in text.lines().enumerate() {
        let (stack, weight) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("line {}: no weight: {line:?}", i + 1));
        assert!(!stack.is_empty(), "line {}: empty stack", i + 1);
        assert!(
            weight.parse::<u64>().is_ok(),
            "line {}: weight {weight:?} is not an integer",
            i + 1
        );
    }
}

#[test]
fn merge_reference__folded_chrome_svg_files() {
    let dir = tempfile::tempdir().unwrap();
    let (m, c, o) = (
        dir.path().join("merged.folded"),
        dir.path().join("timeline.json"),
        dir.path().join("flame.svg"),
    );
    let out = gpuperf([
        "merge".as_ref(),
        // The c++filt spellings, not the default short names.
        "--full-names".as_ref(),
        "--gpu".as_ref(),
        reference("cupti.log").as_os_str(),
        "--cpu".as_ref(),
        reference("cpu.txt").as_os_str(),
        "-m".as_ref(),
        m.as_os_str(),
        "-c".as_ref(),
        c.as_os_str(),
        "-o".as_ref(),
        o.as_os_str(),
        "--title".as_ref(),
        "reference LLM run".as_ref(),
    ]);
    assert_success(&out);
    assert!(out.stdout.is_empty(), "stdout: {}", stdout(&out));
    assert!(stderr(&out).contains(MATCHED_ALL), "{}", stderr(&out));

    let folded = fs::read_to_string(&m).unwrap();
    assert_folded(&folded);
    assert!(folded.contains("[GPU_Kernel]attentionQKT("), "{folded}");

    let json: serde_json::Value = serde_json::from_slice(&fs::read(&c).unwrap()).unwrap();
    let events = json["traceEvents"].as_array().expect("traceEvents array");
    assert!(!events.is_empty());

    let svg = fs::read_to_string(&o).unwrap();
    assert!(svg.contains("<svg"), "not an SVG");
    assert!(svg.contains("reference LLM run"), "title missing from SVG");
}

#[test]
fn merge_reference__no_outputs_named__folded_on_stdout() {
    let out = gpuperf([
        "merge".as_ref(),
        // The c++filt spellings, not the default short names.
        "--full-names".as_ref(),
        "--gpu".as_ref(),
        reference("cupti.log").as_os_str(),
        "--cpu".as_ref(),
        reference("cpu.txt").as_os_str(),
    ]);
    assert_success(&out);
    let data = stdout(&out);
    assert_folded(&data);
    assert!(data.contains("[GPU_Kernel]attentionQKT("), "{data}");
    assert!(!data.contains("matched"), "summary leaked to stdout");
    assert!(stderr(&out).contains(MATCHED_ALL), "{}", stderr(&out));
}

#[test]
fn merge_reference__folded_dash__stdout_even_with_svg() {
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("f.svg");
    let out = gpuperf([
        "merge".as_ref(),
        "--gpu".as_ref(),
        reference("cupti.log").as_os_str(),
        "-m".as_ref(),
        "-".as_ref(),
        "-o".as_ref(),
        svg.as_os_str(),
    ]);
    assert_success(&out);
    assert_folded(&stdout(&out));
    assert!(svg.is_file());
}

#[test]
fn merge_reference__quiet__no_summary() {
    let dir = tempfile::tempdir().unwrap();
    let c = dir.path().join("t.json");
    let out = gpuperf([
        "-q".as_ref(),
        "merge".as_ref(),
        "--gpu".as_ref(),
        reference("cupti.log").as_os_str(),
        "--cpu".as_ref(),
        reference("cpu.txt").as_os_str(),
        "-c".as_ref(),
        c.as_os_str(),
    ]);
    assert_success(&out);
    assert_eq!(stderr(&out), "", "-q should leave stderr empty");
    assert!(c.is_file());
}

#[test]
fn report_reference__table_on_stdout() {
    let out = gpuperf([
        "report".as_ref(),
        // The c++filt spellings, not the default short names.
        "--full-names".as_ref(),
        "--gpu".as_ref(),
        reference("cupti.log").as_os_str(),
        "--cpu".as_ref(),
        reference("cpu.txt").as_os_str(),
    ]);
    assert_success(&out);
    let table = stdout(&out);
    for header in ["% GPU", "launch p50"] {
        assert!(table.contains(header), "no `{header}` header:\n{table}");
    }
    for k in KERNELS {
        assert!(table.contains(k), "kernel {k} missing:\n{table}");
    }
    assert!(!table.contains("matched"), "summary leaked to stdout");
    assert!(stderr(&out).contains(MATCHED_ALL), "{}", stderr(&out));
}

#[test]
fn report_reference__top_2__limits_rows() {
    let out = gpuperf([
        "report".as_ref(),
        // The c++filt spellings, not the default short names.
        "--full-names".as_ref(),
        "--gpu".as_ref(),
        reference("cupti.log").as_os_str(),
        "--top".as_ref(),
        "2".as_ref(),
    ]);
    assert_success(&out);
    let table = stdout(&out);
    assert!(table.contains("layerNorm("), "{table}");
    assert!(
        !table.contains("residualAdd("),
        "--top 2 shows more:\n{table}"
    );
}

#[test]
fn report_reference__quiet__no_summary() {
    let out = gpuperf([
        "-q".as_ref(),
        "report".as_ref(),
        "--gpu".as_ref(),
        reference("cupti.log").as_os_str(),
        "--cpu".as_ref(),
        reference("cpu.txt").as_os_str(),
    ]);
    assert_success(&out);
    assert_eq!(stderr(&out), "", "-q should leave stderr empty");
}

/// A gpuperf GPU trace of one process with two kernel launches (correlation ids
/// 1 and 2), and the matching gpuperf CPU trace.
fn own_format_traces() -> (Vec<u8>, String) {
    let mut t = Trace::new();
    // Interned in the order the trace always had them.
    t.strings.intern("_Z6matmulPfS_S_i");
    t.process(42, "/bin/app", 1_000);
    for corr in 1..=2u32 {
        let at = u64::from(corr) * 100_000;
        t.api(42, 43, corr, (at, at + 5_000), "cudaLaunchKernel", 211)
            .kernel(42, corr, (at + 10_000, at + 60_000), 7, "_Z6matmulPfS_S_i");
    }
    let cpu = "# gpuperf-cpu v1\n\
               100001 app 42 43 0 1 _start;main;step;cudaLaunchKernel\n\
               200001 app 42 43 0 2 _start;main;step;cudaLaunchKernel\n";
    (t.gputrace(), cpu.to_owned())
}

#[test]
fn merge_own_format_dir__exact_join() {
    let dir = tempfile::tempdir().unwrap();
    let traces = dir.path().join("traces");
    fs::create_dir(&traces).unwrap();
    let (gpu, cpu) = own_format_traces();
    fs::write(traces.join("app.42.gpuperf"), gpu).unwrap();
    fs::write(traces.join("README.txt"), "not a trace, skipped\n").unwrap();
    let cpu_path = dir.path().join("cpu.txt");
    fs::write(&cpu_path, cpu).unwrap();
    let out = gpuperf([
        "merge".as_ref(),
        // The c++filt spellings, not the default short names.
        "--full-names".as_ref(),
        "--gpu".as_ref(),
        traces.as_os_str(),
        "--cpu".as_ref(),
        cpu_path.as_os_str(),
    ]);
    assert_success(&out);
    assert_eq!(
        stdout(&out),
        "_start;main;step;cudaLaunchKernel;[GPU_Kernel]matmul(float*, float*, float*, int) 100\n"
    );
    let err = stderr(&out);
    assert!(err.contains("matched 2 of 2 kernels (100.0%)"), "{err}");
    assert!(err.contains("exact pairing by correlation id"), "{err}");
}

#[test]
fn merge_own_format_cut_mid_record__reads_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let (mut gpu, cpu) = own_format_traces();
    gpu.truncate(gpu.len() - 10); // inside the second kernel record
    let gpu_path = dir.path().join("cut.gpuperf");
    fs::write(&gpu_path, gpu).unwrap();
    let cpu_path = dir.path().join("cpu.txt");
    fs::write(&cpu_path, cpu).unwrap();
    let out = gpuperf([
        "merge".as_ref(),
        // The c++filt spellings, not the default short names.
        "--full-names".as_ref(),
        "--gpu".as_ref(),
        gpu_path.as_os_str(),
        "--cpu".as_ref(),
        cpu_path.as_os_str(),
    ]);
    assert_success(&out);
    assert_eq!(
        stdout(&out),
        "_start;main;step;cudaLaunchKernel;[GPU_Kernel]matmul(float*, float*, float*, int) 50\n\
         _start;main;step;cudaLaunchKernel;[GPU_Launch_Pending] 0\n"
    );
    let err = stderr(&out);
    assert!(err.contains("matched 1 of 1 kernels (100.0%)"), "{err}");
    let cut = format!("`{}` ends inside a record", gpu_path.display());
    assert!(err.contains(&cut), "cut not reported:\n{err}");
}

#[test]
fn merge_bad_cpu_lines__warned_with_file_line__merge_succeeds() {
    let dir = tempfile::tempdir().unwrap();
    let good = fs::read_to_string(reference("cpu.txt")).unwrap();
    let mut lines: Vec<&str> = good.lines().collect();
    // Lines 6 and 8 of the new file are malformed.
    lines.insert(5, "this is not a launch");
    lines.insert(7, "123 app notapid 1 1 main;cudaLaunchKernel");
    let cpu = dir.path().join("cpu.txt");
    fs::write(&cpu, lines.join("\n") + "\n").unwrap();
    let out = gpuperf([
        "merge".as_ref(),
        "--gpu".as_ref(),
        reference("cupti.log").as_os_str(),
        "--cpu".as_ref(),
        cpu.as_os_str(),
    ]);
    assert_success(&out);
    assert_folded(&stdout(&out));
    let err = stderr(&out);
    let at = |n: u32| format!("{}:{n}", cpu.display());
    assert!(err.contains(&at(6)), "no warning for line 6:\n{err}");
    assert!(err.contains(&at(8)), "no warning for line 8:\n{err}");
    assert!(err.contains("2 malformed"), "{err}");
    assert!(err.contains(MATCHED_ALL), "{err}");
}

#[test]
fn merge_bad_cpu_lines__stderr_not_a_tty__no_ansi_escapes() {
    let dir = tempfile::tempdir().unwrap();
    let cpu = dir.path().join("cpu.txt");
    fs::write(&cpu, "1 a 1 1 1 main\nbogus\n").unwrap();
    let out = gpuperf([
        "merge".as_ref(),
        "--gpu".as_ref(),
        reference("cupti.log").as_os_str(),
        "--cpu".as_ref(),
        cpu.as_os_str(),
    ]);
    assert_success(&out);
    assert!(!out.stderr.contains(&0x1b), "{:?}", stderr(&out));
}

#[test]
fn merge_gpu_missing__one_error_line() {
    let dir = tempfile::tempdir().unwrap();
    let gpu = dir.path().join("no-such.trace");
    let out = gpuperf(["merge".as_ref(), "--gpu".as_ref(), gpu.as_os_str()]);
    assert_one_error_line(&out, &gpu);
}

#[test]
fn report_gpu_missing__one_error_line() {
    let dir = tempfile::tempdir().unwrap();
    let gpu = dir.path().join("no-such.trace");
    let out = gpuperf(["report".as_ref(), "--gpu".as_ref(), gpu.as_os_str()]);
    assert_one_error_line(&out, &gpu);
}

#[test]
fn merge_gpu_text_garbage__one_error_line() {
    let dir = tempfile::tempdir().unwrap();
    let gpu = dir.path().join("garbage.txt");
    fs::write(&gpu, "hello world\nthis is\nnot a trace\n\0\x01\x02").unwrap();
    let out = gpuperf(["merge".as_ref(), "--gpu".as_ref(), gpu.as_os_str()]);
    assert_one_error_line(&out, &gpu);
}

#[test]
fn merge_gpu_empty__one_error_line() {
    let dir = tempfile::tempdir().unwrap();
    let gpu = dir.path().join("empty.trace");
    fs::write(&gpu, "").unwrap();
    let out = gpuperf(["merge".as_ref(), "--gpu".as_ref(), gpu.as_os_str()]);
    assert_one_error_line(&out, &gpu);
}

#[test]
fn merge_cpu_is_gpu_binary_trace__one_error_line() {
    let dir = tempfile::tempdir().unwrap();
    let cpu = dir.path().join("gpu.trace");
    let header = Trace::new().gputrace();
    assert!(header.starts_with(b"GPUPERF\0"));
    fs::write(&cpu, header).unwrap();
    let out = gpuperf([
        "merge".as_ref(),
        "--gpu".as_ref(),
        reference("cupti.log").as_os_str(),
        "--cpu".as_ref(),
        cpu.as_os_str(),
    ]);
    assert_one_error_line(&out, &cpu);
}

#[test]
fn merge_gpu_dir_without_traces__one_error_line() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("notes.txt"), "nothing here\n").unwrap();
    let out = gpuperf(["merge".as_ref(), "--gpu".as_ref(), dir.path().as_os_str()]);
    assert_one_error_line(&out, dir.path());
}

#[test]
fn merge_output_unwritable__one_error_line() {
    for (flag, path) in [
        ("-m", "/nonexistent-dir/x.folded"),
        ("-c", "/nonexistent-dir/x.json"),
        ("-o", "/nonexistent-dir/x.svg"),
    ] {
        let out = gpuperf([
            "merge".as_ref(),
            "--gpu".as_ref(),
            reference("cupti.log").as_os_str(),
            flag.as_ref(),
            path.as_ref(),
        ]);
        assert_one_error_line(&out, Path::new(path));
        assert!(out.stdout.is_empty(), "{flag}: {}", stdout(&out));
    }
}

#[test]
fn bad_arguments__usage_error_code_2() {
    let gpu = reference("cupti.log");
    let gpu = gpu.to_str().unwrap();
    let cases: [&[&str]; 5] = [
        &["report", "--gpu", gpu, "--top", "0"],
        &["merge", "--gpu", gpu, "--frobnicate"],
        &["merge", "--cpu", "cpu.txt"],
        &["-q", "-v", "merge", "--gpu", gpu],
        &["record"],
    ];
    for args in cases {
        let out = gpuperf(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(out.stdout.is_empty(), "{args:?}");
        assert!(!stderr(&out).contains("panicked"), "{args:?}");
        assert!(stderr(&out).starts_with("error: "), "{args:?}");
    }
}

#[test]
fn record_mistyped_option_before_the_program__refused_with_a_suggestion_not_run() {
    for (bad, args) in [
        (
            "--captur-range",
            &["record", "--captur-range", "cudaProfilerApi", "--", "true"][..],
        ),
        ("--raw-dri", &["--raw-dri", "run1", "true"]),
    ] {
        let out = gpuperf(args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.starts_with(&format!("error: unexpected argument '{bad}'")),
            "{args:?}: {err}"
        );
        assert!(err.contains("tip: a similar argument exists"), "{err}");
        assert!(!err.contains("failed to start"), "{err}");
    }
}

fn real(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../samples/recordings/real")
        .join(file)
}

#[test]
fn merge_pytorch_trace_file__format_from_content_every_output_and_pprof() {
    let dir = tempfile::tempdir().unwrap();
    // A PyTorch profiler trace in place of a recording directory, gzipped.
    let trace = real("b200_vllm_gpt_oss.pt.trace.json.gz");
    let (folded, chrome, svg, prof) = (
        dir.path().join("m.folded"),
        dir.path().join("t.json"),
        dir.path().join("f.svg"),
        dir.path().join("p.pb.gz"),
    );
    let o = gpuperf([
        "merge".as_ref(),
        trace.as_os_str(),
        "-m".as_ref(),
        folded.as_os_str(),
        "-c".as_ref(),
        chrome.as_os_str(),
        "-o".as_ref(),
        svg.as_os_str(),
        "--pprof".as_ref(),
        prof.as_os_str(),
    ]);
    assert_success(&o);
    let err = stderr(&o);
    assert!(err.contains("matched 768 of 768 kernels (100.0%)"), "{err}");
    assert!(
        err.contains(&format!("wrote `{}`: pprof profile", prof.display())),
        "{err}"
    );
    let folded = fs::read_to_string(&folded).unwrap();
    assert!(
        folded
            .lines()
            .any(|l| l.contains("gpt_oss.py(") && l.contains(";cudaLaunchKernel;[GPU_Kernel]"))
    );
    let chrome: serde_json::Value = serde_json::from_slice(&fs::read(&chrome).unwrap()).unwrap();
    assert!(
        chrome["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["args"]["name"] == "GPU 0 NVIDIA B200 (pid 6583, rank 0 of 8)")
    );
    assert!(fs::read_to_string(&svg).unwrap().contains("gpt_oss.py"));
    assert_eq!(&fs::read(&prof).unwrap()[..2], &[0x1f, 0x8b], "gzipped");
}

#[test]
fn report_nsys_export__kernel_table_stacks_and_summary() {
    let o = gpuperf([
        "report".as_ref(),
        // The c++filt spellings, not the default short names.
        "--full-names".as_ref(),
        real("a100_saxpy_mpi_nsys.sqlite").as_os_str(),
    ]);
    assert_success(&o);
    let out = stdout(&o);
    assert!(
        out.contains("saxpy(double *, double *, double *, double, int)"),
        "{out}"
    );
    assert!(out.contains("top launch stacks by GPU time ("), "{out}");
    assert!(out.contains("saxpy;cudaLaunchKernel ← main"), "{out}");
    assert!(
        stderr(&o).contains("matched 5 of 5 kernels"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn merge_sqlite_without_cupti_tables__one_error_line() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("empty.sqlite");
    // The smallest SQLite database: a header page of an empty schema.
    let mut page = vec![0u8; 4096];
    page[..16].copy_from_slice(b"SQLite format 3\0");
    page[16..18].copy_from_slice(&4096u16.to_be_bytes());
    page[18] = 1;
    page[19] = 1;
    page[21] = 64;
    page[22] = 32;
    page[23] = 32;
    page[28..32].copy_from_slice(&1u32.to_be_bytes());
    page[44..48].copy_from_slice(&4u32.to_be_bytes());
    page[47] = 4;
    page[56..60].copy_from_slice(&1u32.to_be_bytes());
    page[92..96].copy_from_slice(&1u32.to_be_bytes());
    page[96..100].copy_from_slice(&3_045_000u32.to_be_bytes());
    page[100] = 13;
    page[105..107].copy_from_slice(&4096u16.to_be_bytes());
    fs::write(&p, &page).unwrap();
    let o = gpuperf(["merge".as_ref(), p.as_os_str()]);
    assert_one_error_line(&o, &p);
    assert!(
        stderr(&o).contains("without the CUPTI tables"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn merge_simulated_recording__pftrace_name_writes_perfetto_protobuf() {
    let dir = tempfile::tempdir().unwrap();
    let rec = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../samples/recordings/simulated/transformer");
    let (json, pb, svg) = (
        dir.path().join("t.json"),
        dir.path().join("t.perfetto-trace"),
        dir.path().join("f.svg"),
    );
    let mut sizes = Vec::new();
    for out in [&json, &pb] {
        let o = gpuperf([
            "merge".as_ref(),
            rec.as_os_str(),
            "-c".as_ref(),
            out.as_os_str(),
            "-o".as_ref(),
            svg.as_os_str(),
        ]);
        assert_success(&o);
        let err = stderr(&o);
        assert!(!err.contains("pftrace` instead"), "no size hint: {err}");
        sizes.push(fs::metadata(out).unwrap().len());
    }
    let err = stderr(&gpuperf([
        "merge".as_ref(),
        rec.as_os_str(),
        "-c".as_ref(),
        pb.as_os_str(),
        "-o".as_ref(),
        svg.as_os_str(),
    ]));
    assert!(
        err.contains(&format!(
            "wrote `{}`: open it in https://ui.perfetto.dev\n",
            pb.display()
        )),
        "{err}"
    );
    let bytes = fs::read(&pb).unwrap();
    // A `Trace` whose first field is a packet, not JSON text.
    assert_eq!(bytes[0], 0x0a);
    let has = |s: &str| bytes.windows(s.len()).any(|w| w == s.as_bytes());
    // The recorder's note (a process label) and the GPU's stream tracks.
    assert!(has("simulated GPU"), "no simulated-GPU note");
    assert!(has("stream "), "no stream track");
    assert!(sizes[1] * 3 < sizes[0], "{sizes:?}");
}

#[test]
fn merge_kineto_backward__under_the_forward_op_by_default_native_with_no_link_backward() {
    let trace = real("v100_resnet50_kineto2021.pt.trace.json.gz");
    let folded = |extra: &[&str]| {
        let mut args: Vec<std::ffi::OsString> = vec!["merge".into(), trace.clone().into()];
        args.extend(["-m", "-"].iter().chain(extra).map(Into::into));
        let o = gpuperf(args);
        assert_success(&o);
        (stdout(&o), stderr(&o))
    };
    let (linked, note) = folded(&[]);
    let (native, quiet) = folded(&["--no-link-backward"]);
    let backward = |f: &str| f.lines().filter(|l| l.contains(";[backward];")).count();
    assert!(backward(&linked) > 0, "{linked}");
    assert!(
        note.contains("charged to their forward op's stack"),
        "{note}"
    );
    assert_eq!(backward(&native), 0, "{native}");
    assert!(
        !quiet.contains("charged to their forward op's stack"),
        "{quiet}"
    );
    // The same GPU time either way: linking moves kernels, it loses none.
    let total = |f: &str| -> u64 {
        f.lines()
            .filter_map(|l| l.rsplit_once(' ')?.1.parse::<u64>().ok())
            .sum()
    };
    assert_eq!(total(&linked), total(&native));
}
