//! The foreign formats (PyTorch profiler traces, Nsight Systems exports) through
//! the join and the writers, on the real traces under `samples/recordings/real`
//! and on small hand-written ones.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use gpuperf_merge::Error;
use gpuperf_merge::join::{self, NoStack, Summary};
use gpuperf_merge::model::StringTable;
use gpuperf_merge::read::input::GpuInputs;
use gpuperf_merge::read::kineto;
use gpuperf_merge::write::chrome;
use gpuperf_merge::write::folded::Folder;
use gpuperf_merge::write::pprof;
use gpuperf_merge::write::report::Reporter;
use gpuperf_test_support::pprof::go_pprof;
use serde_json::Value;

use crate::{data, golden};

/// A real recording shipped in the repository.
pub fn real(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../samples/recordings/real")
        .join(name)
}

pub const V100: &str = "v100_resnet50_kineto2021.pt.trace.json.gz";
pub const B200: &str = "b200_vllm_gpt_oss.pt.trace.json.gz";
pub const A100: &str = "a100_saxpy_mpi_nsys.sqlite";

pub struct Out {
    pub summary: Summary,
    pub folded: String,
    pub chrome: String,
    pub report: String,
    pub profile: pprof::proto::Profile,
    /// Stack text by correlation id, from the inputs' own launch stacks.
    pub stacks: HashMap<u32, String>,
}

/// Opens `paths` and runs the join with every writer.
pub fn run(paths: &[PathBuf]) -> Out {
    let mut strings = StringTable::new();
    let inputs = GpuInputs::open(paths, &mut strings).unwrap();
    let stacks = inputs
        .launch_stacks()
        .map(|c| {
            c.launches
                .iter()
                .map(|l| {
                    (
                        l.correlation_id.map_or(0, |c| c.get()),
                        c.stacks.text(l.stack).to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let mut folder = Folder::new();
    let mut chrome = chrome::Writer::new(Vec::new()).unwrap();
    let mut report = Reporter::new();
    let mut profile = pprof::Builder::new();
    let summary = join::merge(
        None,
        &inputs,
        &mut strings,
        &join::Options::default(),
        &mut [&mut folder, &mut chrome, &mut report, &mut profile],
    )
    .unwrap();
    let mut f = Vec::new();
    folder.write(&mut f).unwrap();
    let mut r = Vec::new();
    report.write(&mut r, 10).unwrap();
    // Through the bytes a user gets: gzip, then protobuf.
    let mut gz = Vec::new();
    profile.write(&mut gz).unwrap();
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(&gz[..])
        .read_to_end(&mut raw)
        .unwrap();
    let profile = <pprof::proto::Profile as prost::Message>::decode(&raw[..]).unwrap();
    Out {
        summary,
        folded: String::from_utf8(f).unwrap(),
        chrome: String::from_utf8(chrome.into_inner()).unwrap(),
        report: String::from_utf8(r).unwrap(),
        profile,
        stacks,
    }
}

/// The decompressed JSON of a Kineto trace, as a DOM (tests only).
fn kineto_json(path: &Path) -> Value {
    let bytes = fs::read(path).unwrap();
    if bytes.starts_with(&[0x1f, 0x8b]) {
        serde_json::from_reader(flate2::read::GzDecoder::new(&bytes[..])).unwrap()
    } else {
        serde_json::from_slice(&bytes).unwrap()
    }
}

/// µs (a JSON number) → ns, through the decimal text so that no digit is lost.
fn ns(v: &Value) -> u64 {
    (v.as_f64().unwrap() * 1000.0).round() as u64
}

/// Kernel name → (count, total ns), from the trace itself.
fn kernel_sums(trace: &Value) -> BTreeMap<String, (u64, u64)> {
    let mut sums = BTreeMap::new();
    for e in trace["traceEvents"].as_array().unwrap() {
        if matches!(e["cat"].as_str(), Some("kernel" | "Kernel")) {
            let s: &mut (u64, u64) = sums
                .entry(e["name"].as_str().unwrap().to_owned())
                .or_default();
            s.0 += 1;
            s.1 += ns(&e["dur"]);
        }
    }
    sums
}

/// `[GPU_Kernel]name` → (launches, ns) from the pprof profile.
fn profile_sums(p: &pprof::proto::Profile) -> BTreeMap<String, (u64, u64)> {
    let name = |loc: u64| -> &str {
        let l = &p.location[loc as usize - 1];
        let f = &p.function[l.line[0].function_id as usize - 1];
        &p.string_table[f.name as usize]
    };
    let mut sums = BTreeMap::new();
    for s in &p.sample {
        let leaf = name(s.location_id[0]);
        if let Some(k) = leaf.strip_prefix("[GPU_Kernel]") {
            let e: &mut (u64, u64) = sums.entry(k.to_owned()).or_default();
            e.0 += s.value[1] as u64;
            e.1 += s.value[0] as u64;
        }
    }
    sums
}

/// `[GPU_Kernel]name` → µs from the folded output.
fn folded_sums(folded: &str) -> BTreeMap<String, u64> {
    let mut sums = BTreeMap::new();
    for l in folded.lines() {
        let (stack, w) = l.rsplit_once(' ').unwrap();
        let leaf = stack.rsplit(';').next().unwrap();
        if let Some(k) = leaf.strip_prefix("[GPU_Kernel]") {
            *sums.entry(k.to_owned()).or_default() += w.parse::<u64>().unwrap();
        }
    }
    sums
}

/// Every kernel's GPU time equals the trace's own sum: to the ns in the pprof
/// profile, and rounded once to µs in the folded output.
fn check_kernel_times(trace: &Value, out: &Out) {
    let want = kernel_sums(trace);
    assert_eq!(profile_sums(&out.profile), want);
    let folded = folded_sums(&out.folded);
    assert_eq!(folded.len(), want.len());
    for (k, (_, ns)) in &want {
        assert_eq!(folded[k], (ns + 500) / 1000, "{k}");
    }
}

#[test]
fn v100_kineto2021__every_kernel_matched_with_exact_times() {
    let path = real(V100);
    let out = run(std::slice::from_ref(&path));
    let s = &out.summary;
    assert_eq!((s.kernels, s.kernels_matched), (8772, 8772), "{s}");
    assert_eq!(s.api_launches, 8772);
    // 8772 launches and the 324 copies and memsets that moved data.
    assert_eq!(s.gpu_launch_stacks, 9096);
    assert_eq!((s.other_activities, s.other_matched), (324, 324));
    check_kernel_times(&kineto_json(&path), &out);
}

#[test]
fn v100_kineto2021__python_stack_of_a_launch_frame_by_frame() {
    let out = run(&[real(V100)]);
    // The `cudaLaunchKernel` of correlation 34441 (cask_cudnn::computeOffsetsKernel):
    // ProfilerStep#5's call stack, then aten::conv2d's, then the operator nesting.
    let site = "/home/yangu/anaconda3/envs/kineto/lib/python3.7/site-packages";
    let want: Vec<String> = [
        "resnet50_profiler_api.py(54): <module>",
        "@/torch/profiler/profiler.py(313): step",
        "@/torch/autograd/profiler.py(614): __enter__",
        "ProfilerStep#5",
        "resnet50_profiler_api.py(46): <module>",
        "@/torch/nn/modules/module.py(1051): _call_impl",
        "@/torchvision/models/resnet.py(249): forward",
        "@/torchvision/models/resnet.py(232): _forward_impl",
        "@/torch/nn/modules/module.py(1051): _call_impl",
        "@/torch/nn/modules/conv.py(443): forward",
        "@/torch/nn/modules/conv.py(440): _conv_forward",
        "aten::conv2d",
        "aten::convolution",
        "aten::_convolution",
        "aten::cudnn_convolution",
        "cudaLaunchKernel",
    ]
    .iter()
    .map(|f| f.replacen('@', site, 1))
    .collect();
    let got: Vec<&str> = out.stacks[&34441].split(';').collect();
    assert_eq!(got, want);
}

#[test]
fn v100_kineto2021__autograd_thread_launches_keep_operator_nesting() {
    let path = real(V100);
    let trace = kineto_json(&path);
    let events = trace["traceEvents"].as_array().unwrap();
    let on_autograd = |e: &&Value| e["tid"] == "25772";
    let ops: Vec<&Value> = events
        .iter()
        .filter(on_autograd)
        .filter(|e| e["cat"] == "Operator")
        .collect();
    let launches: Vec<&Value> = events
        .iter()
        .filter(on_autograd)
        .filter(|e| e["cat"] == "Runtime" && e["name"] == "cudaLaunchKernel")
        .collect();
    assert_eq!(launches.len(), 3228);
    let out = run(&[path]);
    for l in launches {
        let t = ns(&l["ts"]);
        // The enclosing operators on that thread, outermost first, then the call.
        let mut enclosing: Vec<(u64, std::cmp::Reverse<u64>, &str)> = ops
            .iter()
            .filter(|o| ns(&o["ts"]) <= t && t <= ns(&o["ts"]) + ns(&o["dur"]))
            .map(|o| {
                (
                    ns(&o["ts"]),
                    std::cmp::Reverse(ns(&o["dur"])),
                    o["name"].as_str().unwrap(),
                )
            })
            .collect();
        enclosing.sort();
        let mut want: Vec<&str> = enclosing.into_iter().map(|e| e.2).collect();
        assert!(!want.is_empty());
        want.push("cudaLaunchKernel");
        let corr = l["args"]["correlation"].as_u64().unwrap() as u32;
        // Under a linked backward op, the forward op's stack comes first.
        let stack = &out.stacks[&corr];
        let own = stack.split_once(";[backward];").map_or(&stack[..], |s| s.1);
        let got: Vec<&str> = own.split(';').collect();
        assert_eq!(got, want, "correlation {corr}");
    }
}

/// Every launch's stack, rebuilt independently from the trace's DOM: the Python
/// frames by parent id from the innermost enclosing one, and the enclosing
/// operators, sorted by start.
fn expected_stacks(trace: &Value) -> HashMap<u32, Vec<String>> {
    let events = trace["traceEvents"].as_array().unwrap();
    let us = |v: &Value| ns(v);
    let spans: Vec<&Value> = events
        .iter()
        .filter(|e| {
            matches!(
                e["cat"].as_str(),
                Some("python_function" | "cpu_op" | "user_annotation")
            )
        })
        .collect();
    let by_id: HashMap<i64, &Value> = spans
        .iter()
        .filter(|e| e["cat"] == "python_function")
        .map(|e| (e["args"]["Python id"].as_i64().unwrap(), *e))
        .collect();
    let mut out = HashMap::new();
    for call in events
        .iter()
        .filter(|e| matches!(e["cat"].as_str(), Some("cuda_runtime" | "cuda_driver")))
    {
        let t = us(&call["ts"]);
        let encloses = |e: &&&Value| {
            e["tid"] == call["tid"] && us(&e["ts"]) <= t && t <= us(&e["ts"]) + us(&e["dur"])
        };
        let mut frames: Vec<(u64, std::cmp::Reverse<u64>, bool, String)> = Vec::new();
        let python: Vec<&&Value> = spans
            .iter()
            .filter(|e| e["cat"] == "python_function")
            .filter(encloses)
            .collect();
        if let Some(inner) = python
            .iter()
            .max_by_key(|e| (us(&e["ts"]), std::cmp::Reverse(us(&e["dur"]))))
        {
            let mut cur: &Value = inner;
            loop {
                frames.push((
                    us(&cur["ts"]),
                    std::cmp::Reverse(us(&cur["dur"])),
                    false,
                    cur["name"].as_str().unwrap().replace(';', ":"),
                ));
                match cur["args"]["Python parent id"]
                    .as_i64()
                    .and_then(|p| by_id.get(&p))
                {
                    Some(p) => cur = p,
                    None => break,
                }
            }
        }
        for op in spans
            .iter()
            .filter(|e| e["cat"] != "python_function")
            .filter(encloses)
        {
            frames.push((
                us(&op["ts"]),
                std::cmp::Reverse(us(&op["dur"])),
                true,
                op["name"].as_str().unwrap().to_owned(),
            ));
        }
        frames.sort();
        let mut stack: Vec<String> = frames.into_iter().map(|f| f.3).collect();
        stack.push(call["name"].as_str().unwrap().to_owned());
        out.insert(call["args"]["correlation"].as_u64().unwrap() as u32, stack);
    }
    out
}

#[test]
fn b200_kineto__python_stacks_of_every_launch_match_an_independent_rebuild() {
    let path = real(B200);
    let trace = kineto_json(&path);
    let out = run(std::slice::from_ref(&path));
    let s = &out.summary;
    assert_eq!((s.kernels, s.kernels_matched), (768, 768), "{s}");
    // cudaLaunchKernel, cudaLaunchKernelExC, cuLaunchKernelEx and cuLaunchKernel.
    assert_eq!(s.api_launches, 367 + 180 + 220 + 1);
    check_kernel_times(&trace, &out);
    let want = expected_stacks(&trace);
    let mut checked = 0;
    for (corr, stack) in &out.stacks {
        let got: Vec<&str> = stack.split(';').collect();
        assert_eq!(got, want[corr], "correlation {corr}");
        checked += 1;
    }
    assert_eq!(checked, 929);
    // The vLLM model code is in the stacks.
    assert!(
        out.folded
            .lines()
            .any(|l| l.contains(";vllm/model_executor/models/gpt_oss.py("))
    );
}

#[test]
fn small_kineto__records_stacks_and_outputs_match_goldens() {
    let path = data("kineto/small.pt.trace.json");
    let mut strings = StringTable::new();
    // Named relative to tests/data, so that the golden file holds no machine path.
    let name = Path::new("kineto/small.pt.trace.json");
    let imported = kineto::read(fs::File::open(&path).unwrap(), name, &mut strings).unwrap();
    let mut text = golden::render_records(&imported.records, &strings);
    let stacks = imported.launch_stacks.as_ref().unwrap();
    for l in &stacks.launches {
        let _ = writeln!(
            text,
            "stack ts {} pid {} tid {} corr {}: {}",
            l.ts_ns,
            l.pid,
            l.tid,
            l.correlation_id.map_or(0, |c| c.get()),
            stacks.stacks.text(l.stack)
        );
    }
    let _ = writeln!(
        text,
        "# skipped {} diagnostics {}",
        imported.skipped, imported.diagnostics.count
    );
    for d in &imported.diagnostics.first {
        let _ = writeln!(text, "# {d}");
    }
    golden::check(&data("kineto/small.expected.txt"), &text);

    let out = run(&[path]);
    golden::check(&data("kineto/small.expected.folded"), &out.folded);
    // The reader's notes name the file: relative to tests/data in the golden file.
    let summary = out
        .summary
        .to_string()
        .replace(&data("").display().to_string(), "");
    golden::check(&data("kineto/small.expected.summary.txt"), &summary);
    golden::check(&data("kineto/small.expected.report.txt"), &out.report);
    let chrome: Value = serde_json::from_str(&out.chrome).unwrap();
    golden::check(
        &data("kineto/small.expected.chrome.json"),
        &(serde_json::to_string_pretty(&chrome).unwrap() + "\n"),
    );
    assert_eq!(
        out.summary.kernels_unmatched.get(&NoStack::NoApiRecord),
        Some(&1)
    );
    assert_eq!(
        out.summary.launches_without_gpu, 1,
        "corr 14 launched nothing"
    );
    // The Python chain crosses to the root on thread 0, and goes around the
    // missing parent 999 by time containment.
    assert_eq!(
        out.stacks[&11],
        "threading.py(1012): run;train.py(10): step;ProfilerStep#1;model.py(20): forward;\
         helpers.py(5): helper: with a semicolon;<built-in method linear of type object at 0x7f00>;\
         aten::linear;aten::addmm;cudaLaunchKernel"
    );
}

#[test]
fn truncated_kineto_gz__keeps_events_before_the_cut_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let whole = fs::read(real(V100)).unwrap();
    let cut = dir.path().join("cut.pt.trace.json.gz");
    fs::write(&cut, &whole[..whole.len() / 2]).unwrap();
    let out = run(std::slice::from_ref(&cut));
    let s = &out.summary;
    assert_eq!(s.gpu_read.truncated.len(), 1, "{s}");
    assert!(s.kernels > 0 && s.kernels < 8772, "{s}");
    assert_eq!(s.kernels, s.kernels_matched, "{s}");
    assert!(s.to_string().contains("truncated: `"), "{s}");
}

#[test]
fn json_that_is_not_a_trace__one_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let mut strings = StringTable::new();
    for (name, text, found) in [
        (
            "config.json",
            "{\"model\": \"resnet\", \"layers\": [1, 2]}",
            "without `traceEvents`",
        ),
        ("list.json", "[1, 2, 3]", "starts with \"[1, 2, 3]\""),
        (
            "broken.json",
            "{\"traceEvents\": [ {\"ph\": \"X\",, } ]}",
            "malformed JSON at byte 18: key must be a string)",
        ),
        (
            "cut.json",
            "{\"traceEvents\": [ {\"ph\": \"X\", ",
            "ends at byte 18 before any complete event",
        ),
    ] {
        let p = dir.path().join(name);
        fs::write(&p, text).unwrap();
        let e = GpuInputs::open(std::slice::from_ref(&p), &mut strings)
            .err()
            .unwrap_or_else(|| panic!("{name} accepted"));
        let msg = e.to_string();
        assert!(matches!(e, Error::NotATrace { .. }), "{msg}");
        assert!(
            msg.contains(name) && msg.contains(found) && !msg.contains('\n'),
            "{msg}"
        );
    }
    // A trace whose events turn malformed partway keeps what came before.
    let p = dir.path().join("half.json");
    fs::write(&p, "{\"traceEvents\": [ {\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"k\", \"ts\": 1, \"dur\": 2, \"args\": {\"correlation\": 3}}, {\"ph\" \"X\"} ]}").unwrap();
    let out = run(&[p]);
    assert_eq!(out.summary.kernels, 1);
    assert_eq!(out.summary.gpu_read.diagnostics.count, 1);
    assert!(
        out.summary.gpu_read.diagnostics.first[0]
            .message
            .contains("malformed JSON")
    );
}

#[test]
fn kineto_with_kernels_but_no_launches__summary_says_what_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("gpu_only.pt.trace.json");
    let mut f = fs::File::create(&p).unwrap();
    write!(f, "{{\"traceEvents\": [").unwrap();
    for i in 0..5 {
        write!(f, "{}{{\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"k{i}\", \"pid\": 0, \"tid\": 7, \"ts\": {}, \"dur\": 1.5, \"args\": {{\"device\": 0, \"stream\": 7, \"correlation\": {i}}}}}", if i > 0 { "," } else { "" }, 10 * i).unwrap();
    }
    write!(f, "]}}").unwrap();
    drop(f);
    let out = run(&[p]);
    let text = out.summary.to_string();
    assert!(text.starts_with("matched 0 of 5 kernels (0.0%)"), "{text}");
    assert!(
        text.contains("unmatched kernels: 5 (no API record with its correlation id)"),
        "{text}"
    );
    assert!(
        out.folded
            .lines()
            .all(|l| l.starts_with("[no CPU stack];[GPU_Kernel]k")),
        "{}",
        out.folded
    );
}

#[test]
fn reference_log_with_tool_lines__read_as_a_gpu_trace_with_one_summary_line() {
    // The reference CUPTI log as its users save it: the injection library's own
    // stdout lines first, between records and at the end.
    let log = fs::read_to_string(data("cupti_log/reference-cupti-log.txt")).unwrap();
    let mut text = String::from(
        "Calling CUPTI API: cuptiSubscribe(&subscriberHandle, (CUpti_CallbackFunc)CallbackHandler, NULL)\nEnabling CUPTI_ACTIVITY_KIND_DRIVER.\nFound 2 devices\n",
    );
    for (i, line) in log.lines().enumerate() {
        text.push_str(line);
        text.push('\n');
        if i % 1000 == 999 {
            text.push_str("Calling CUPTI API: cuptiActivityFlushAll(1)\n");
        }
    }
    text.push_str("Disabling CUPTI_ACTIVITY_KIND_DRIVER.\n");
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("cupti.log");
    fs::write(&p, &text).unwrap();
    let out = run(&[p]);
    let summary = out.summary.to_string();
    assert_eq!(out.summary.kernels, 2115, "{summary}");
    assert_eq!(out.summary.gpu_read.diagnostics.count, 0, "{summary}");
    let lines: Vec<&str> = summary
        .lines()
        .filter(|l| l.contains("not records"))
        .collect();
    assert_eq!(
        lines,
        [
            "  skipped: 14 lines of the GPU log that are not records (the recording tool's own output)"
        ]
    );
}

/// Kernel name → (count, total ns), from the export itself.
fn sqlite_kernel_sums(path: &Path) -> BTreeMap<String, (u64, u64)> {
    let db = rusqlite::Connection::open(path).unwrap();
    let mut stmt = db
        .prepare(
            "SELECT s.value, count(*), sum(k.end - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k \
             JOIN StringIds s ON s.id = k.demangledName GROUP BY s.value",
        )
        .unwrap();
    stmt.query_map([], |r| {
        Ok((
            r.get::<_, String>(0)?,
            (r.get::<_, i64>(1)? as u64, r.get::<_, i64>(2)? as u64),
        ))
    })
    .unwrap()
    .collect::<rusqlite::Result<_>>()
    .unwrap()
}

#[test]
fn a100_nsys__every_kernel_matched_and_stacks_reach_main() {
    let path = real(A100);
    let out = run(std::slice::from_ref(&path));
    let s = &out.summary;
    assert_eq!((s.kernels, s.kernels_matched), (5, 5), "{s}");
    // nsys lists each call twice (`cudaLaunchKernel`, `cudaLaunchKernel_v7000`): one API record each.
    assert_eq!(s.api_launches, 5, "{s}");
    assert_eq!((s.other_activities, s.other_matched), (15, 15), "{s}");
    assert!(s.gpu_read.notes.is_empty(), "{s}");
    let want = sqlite_kernel_sums(&path);
    assert_eq!(profile_sums(&out.profile), want);
    for (k, (_, ns)) in &want {
        assert_eq!(folded_sums(&out.folded)[k], (ns + 500) / 1000, "{k}");
    }
    // Root first from `_start`, NVIDIA's frames dropped, the NVTX range `saxpy`
    // that encloses each launch above it, and the call as the leaf.
    let kernel_stacks: Vec<&str> = out
        .folded
        .lines()
        .filter(|l| l.contains("[GPU_Kernel]"))
        .collect();
    assert_eq!(
        kernel_stacks,
        [
            "_start;__libc_start_main;main;saxpy;cudaLaunchKernel;[GPU_Kernel]saxpy(double *, double *, double *, double, int) 88573"
        ]
    );
    for stack in out.stacks.values() {
        assert!(
            stack.starts_with("_start;__libc_start_main;main;"),
            "{stack}"
        );
        assert!(!stack.contains("libcu"), "{stack}");
    }
    // One GPU track per device and stream, and an arrow from each launch to its kernel.
    let chrome: Value = serde_json::from_str(&out.chrome).unwrap();
    let events = chrome["traceEvents"].as_array().unwrap();
    let names: Vec<&str> = events
        .iter()
        .filter(|e| e["name"] == "process_name")
        .map(|e| e["args"]["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"GPU 0 NVIDIA A100-SXM4-40GB (pid 1230493)"),
        "{names:?}"
    );
    assert_eq!(events.iter().filter(|e| e["ph"] == "f").count(), 20);
    assert!(
        out.report
            .contains("saxpy(double *, double *, double *, double, int)")
    );
}

#[test]
fn nsys_without_callchains__stack_is_the_call_and_the_summary_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("no_backtraces.sqlite");
    fs::copy(real(A100), &p).unwrap();
    rusqlite::Connection::open(&p)
        .unwrap()
        .execute_batch("DROP TABLE CUDA_CALLCHAINS; DROP TABLE NVTX_EVENTS;")
        .unwrap();
    let out = run(&[p]);
    assert_eq!(out.summary.kernels_matched, 5);
    assert!(
        out.folded
            .lines()
            .any(|l| l.starts_with("cudaLaunchKernel;[GPU_Kernel]saxpy")),
        "{}",
        out.folded
    );
    let text = out.summary.to_string();
    assert!(text.contains("no CUDA API backtraces"), "{text}");
}

#[test]
fn sqlite_without_cupti_tables__one_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("other.sqlite");
    rusqlite::Connection::open(&p)
        .unwrap()
        .execute_batch("CREATE TABLE t (x INTEGER); INSERT INTO t VALUES (1);")
        .unwrap();
    let mut strings = StringTable::new();
    let e = GpuInputs::open(std::slice::from_ref(&p), &mut strings)
        .err()
        .unwrap();
    let msg = e.to_string();
    assert!(
        msg.contains("is not a Nsight Systems SQLite export")
            && msg.contains("without the CUPTI tables"),
        "{msg}"
    );
    // SQLite's magic followed by garbage.
    let bad = dir.path().join("bad.sqlite");
    let mut bytes = b"SQLite format 3\0".to_vec();
    bytes.extend((0..8192u32).map(|i| (i * 7919 % 251) as u8));
    fs::write(&bad, bytes).unwrap();
    let e = GpuInputs::open(&[bad], &mut strings).err().unwrap();
    assert!(e.to_string().contains("SQLite: "), "{e}");
}

#[test]
fn pprof_profiles__go_tool_pprof_reads_them_and_totals_match_the_traces() {
    for name in [V100, B200, A100] {
        let path = real(name);
        let out = run(std::slice::from_ref(&path));
        // Totals in the profile itself, parsed back by prost.
        let p = &out.profile;
        let st = |i: usize| {
            let t = &p.sample_type[i];
            (
                p.string_table[t.r#type as usize].as_str(),
                p.string_table[t.unit as usize].as_str(),
            )
        };
        assert_eq!(
            (st(0), st(1)),
            (("gpu_time", "nanoseconds"), ("launches", "count"))
        );
        let total = |i: usize| p.sample.iter().map(|s| s.value[i] as u64).sum::<u64>();
        let gpu_records = out.summary.kernels + out.summary.other_activities;
        let pending = out.summary.launches_without_gpu + out.summary.launches_without_api;
        assert_eq!(total(1), gpu_records + pending, "{name}");
        // Kernels are the leaves: each location appears once in the table.
        let mut ids: Vec<u64> = p.location.iter().map(|l| l.id).collect();
        ids.dedup();
        assert_eq!(ids.len(), p.location.len());

        let Some(mut go) = go_pprof() else { return };
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("gpu.pb.gz");
        let mut gz = Vec::new();
        // The same bytes `gpuperf merge --pprof` writes.
        let mut strings = StringTable::new();
        let inputs = GpuInputs::open(std::slice::from_ref(&path), &mut strings).unwrap();
        let mut b = pprof::Builder::new();
        join::merge(
            None,
            &inputs,
            &mut strings,
            &join::Options::default(),
            &mut [&mut b],
        )
        .unwrap();
        b.write(&mut gz).unwrap();
        fs::write(&file, gz).unwrap();
        let raw = go.arg("-raw").arg(&file).output().unwrap();
        assert!(
            raw.status.success(),
            "{}",
            String::from_utf8_lossy(&raw.stderr)
        );
        let text = String::from_utf8(raw.stdout).unwrap();
        let samples = text
            .split("Samples:")
            .nth(1)
            .unwrap()
            .split("Locations")
            .next()
            .unwrap();
        let (mut ns, mut launches) = (0u64, 0u64);
        for line in samples.lines() {
            let mut f = line.split_whitespace();
            if let (Some(a), Some(b)) = (f.next(), f.next())
                && let (Ok(a), Ok(b)) = (a.parse::<u64>(), b.trim_end_matches(':').parse::<u64>())
            {
                ns += a;
                launches += b;
            }
        }
        assert_eq!(
            (ns, launches),
            (total(0), total(1)),
            "{name}: go tool pprof -raw:\n{text}"
        );
        assert!(
            text.contains("gpu_time/nanoseconds[dflt] launches/count"),
            "{text}"
        );
    }
}

pub const ALEXNET: &str = "a100_alexnet_kineto_syncs.pt.trace.json.gz";
pub const EVENT_SYNC: &str = "a100_event_sync_kineto.pt.trace.json.gz";

/// A JSON number of µs → ns, exactly, from its decimal text (the tests' own
/// conversion: integers and plain decimals, as the real traces write them).
fn exact_ns(v: &Value) -> u64 {
    let text = v.to_string();
    assert!(!text.contains(['e', 'E', '-']), "{text}");
    let (int, frac) = text.split_once('.').unwrap_or((&text, ""));
    let mut digits: Vec<u64> = frac.bytes().map(|b| u64::from(b - b'0')).collect();
    digits.resize(digits.len().max(4), 0);
    let ns = int.parse::<u64>().unwrap() * 1000 + digits[0] * 100 + digits[1] * 10 + digits[2];
    ns + u64::from(digits[3] >= 5)
}

/// Kineto's name of each CUPTI synchronization type.
const SYNC_KINDS: [(&str, u8, &str); 5] = [
    ("Unknown Sync", 0, "Synchronize"),
    ("Event Sync", 1, "Event Synchronize"),
    ("Stream Wait Event", 2, "Stream Wait Event"),
    ("Stream Sync", 3, "Stream Synchronize"),
    ("Context Sync", 4, "Context Synchronize"),
];

/// A sync's `wait_on_…` args as [`model_activities`] writes a `SyncWait`.
fn dom_wait(args: &Value) -> String {
    let keys = [
        "wait_on_stream",
        "wait_on_cuda_event_record_corr_id",
        "wait_on_cuda_event_id",
    ];
    if keys.iter().all(|k| args.get(k).is_none()) {
        return String::new();
    }
    let v = |k: &str| args[k].as_i64().unwrap_or(-1);
    format!(
        " on stream {} record {} event {}",
        v(keys[0]),
        v(keys[1]),
        v(keys[2])
    )
}

/// (start, end, correlation, device, stream, graph id, graph node id, what) of a
/// GPU activity.
type Gpu = (u64, u64, u32, u32, u32, u32, u64, String);

/// Every GPU event of a Kineto trace as the model should hold it, read from the
/// JSON DOM.
fn dom_activities(trace: &Value) -> Vec<Gpu> {
    let base = trace["baseTimeNanoseconds"].as_u64().unwrap_or(0);
    let mut out = Vec::new();
    for e in trace["traceEvents"].as_array().unwrap() {
        let a = &e["args"];
        let int = |k: &str| a[k].as_i64();
        let Some(corr) = int("correlation") else {
            continue;
        };
        let what = match e["cat"].as_str().unwrap_or("") {
            "kernel" | "Kernel" => format!("kernel {}", e["name"].as_str().unwrap()),
            "gpu_memcpy" | "Memcpy" => {
                let peer = match (int("fromDevice"), int("toDevice")) {
                    (Some(s), Some(d)) => format!(" from {s} to {d}"),
                    _ => String::new(),
                };
                let kind = e["name"].as_str().unwrap().split(' ').nth(1).unwrap();
                format!("memcpy {kind} {}{peer}", int("bytes").unwrap())
            }
            "gpu_memset" | "Memset" => format!("memset {}", int("bytes").unwrap()),
            "cuda_sync" => {
                let kind = a["cuda_sync_kind"].as_str().unwrap();
                let t = SYNC_KINDS.iter().find(|k| k.0 == kind).unwrap().1;
                format!("sync {t}{}", dom_wait(a))
            }
            _ => continue,
        };
        let sync = e["cat"] == "cuda_sync";
        let stream = match int("stream") {
            Some(-1 | 4_294_967_295) | None if sync => u32::MAX,
            s => s.unwrap_or(0) as u32,
        };
        let device = int("device").or(int("inDevice"));
        let device = device.map_or(if sync { u32::MAX } else { 0 }, |d| d as u32);
        let start = base + exact_ns(&e["ts"]);
        let dur = e.get("dur").map_or(0, exact_ns);
        out.push((
            start,
            start + dur,
            corr as u32,
            device,
            stream,
            int("graph id").unwrap_or(0) as u32,
            a["graph node id"].as_u64().unwrap_or(0),
            what,
        ));
    }
    out.sort();
    out
}

/// The activities gpuperf read, in the shape of [`dom_activities`].
fn model_activities(path: &Path) -> Vec<Gpu> {
    use gpuperf_merge::model::{ActivityKind, Record};
    let mut strings = StringTable::new();
    let inputs = GpuInputs::open(&[path.to_owned()], &mut strings).unwrap();
    let mut out = Vec::new();
    inputs
        .visit(&mut strings, &mut |rec, names| {
            let Record::Activity(a) = rec else { return };
            let what = match a.kind {
                ActivityKind::Kernel { name, .. } => format!("kernel {}", names.get(name)),
                ActivityKind::Memcpy { kind, bytes, peer } => format!(
                    "memcpy {kind} {bytes}{}",
                    peer.map_or(String::new(), |p| format!(" from {} to {}", p.src, p.dst))
                ),
                ActivityKind::Memset { bytes, .. } => format!("memset {bytes}"),
                ActivityKind::Sync { sync_type, wait } => {
                    let wait = wait.map_or(String::new(), |w| {
                        let part = |v: Option<u32>| v.map_or(-1, i64::from);
                        format!(
                            " on stream {} record {} event {}",
                            part(w.stream),
                            part(w.record_correlation_id),
                            part(w.event_id)
                        )
                    });
                    format!("sync {sync_type}{wait}")
                }
                other => format!("{other:?}"),
            };
            out.push((
                a.start_ns,
                a.end_ns,
                a.correlation_id,
                a.device.unwrap_or(u32::MAX),
                a.stream.unwrap_or(u32::MAX),
                a.graph_id.unwrap_or(0),
                a.graph_node_id.unwrap_or(0),
                what,
            ));
        })
        .unwrap();
    out.sort();
    out
}

#[test]
fn kineto_traces__every_gpu_event_read_as_the_json_has_it() {
    for name in [ALEXNET, EVENT_SYNC, B200, V100] {
        let path = real(name);
        let want = dom_activities(&kineto_json(&path));
        assert!(!want.is_empty(), "{name}");
        assert_eq!(model_activities(&path), want, "{name}");
    }
}

/// Slices by track: (process name, thread name) → (name, start ns, duration ns,
/// correlation id).
type Tracks = BTreeMap<(String, String), Vec<(String, u64, u64, u64)>>;

/// The timeline's slices by track, and the flow arrows' ends by track.
struct Timeline {
    slices: Tracks,
    flow_ends: BTreeMap<(String, String), u64>,
}

fn timeline(chrome: &str) -> Timeline {
    let doc: Value = serde_json::from_str(chrome).unwrap();
    let base = doc["otherData"]["time_base_ns"].as_u64().unwrap();
    let events = doc["traceEvents"].as_array().unwrap();
    let meta = |what: &str| -> HashMap<(u64, u64), String> {
        events
            .iter()
            .filter(|e| e["ph"] == "M" && e["name"] == what)
            .map(|e| {
                let key = (e["pid"].as_u64().unwrap(), e["tid"].as_u64().unwrap());
                (key, e["args"]["name"].as_str().unwrap().to_owned())
            })
            .collect()
    };
    let (processes, threads) = (meta("process_name"), meta("thread_name"));
    let track = |e: &Value| {
        let (pid, tid) = (e["pid"].as_u64().unwrap(), e["tid"].as_u64().unwrap());
        (processes[&(pid, 0)].clone(), threads[&(pid, tid)].clone())
    };
    let mut t = Timeline {
        slices: BTreeMap::new(),
        flow_ends: BTreeMap::new(),
    };
    for e in events {
        if e["ph"] == "X" {
            t.slices.entry(track(e)).or_default().push((
                e["name"].as_str().unwrap().to_owned(),
                base + exact_ns(&e["ts"]),
                exact_ns(&e["dur"]),
                e["args"]["correlation_id"].as_u64().unwrap(),
            ));
        } else if e["ph"] == "f" {
            *t.flow_ends.entry(track(e)).or_default() += 1;
        }
    }
    t
}

/// Slices on one track must nest: one that starts inside another ends inside it.
fn assert_slices_nest(t: &Timeline) {
    for (track, slices) in &t.slices {
        let mut s: Vec<(u64, u64)> = slices.iter().map(|x| (x.1, x.1 + x.2)).collect();
        s.sort_by_key(|&(a, b)| (a, std::cmp::Reverse(b)));
        let mut open: Vec<u64> = Vec::new();
        for (a, b) in s {
            while open.last().is_some_and(|&end| end <= a) {
                open.pop();
            }
            if let Some(&end) = open.last() {
                assert!(
                    b <= end,
                    "{track:?}: [{a}, {b}] overlaps a slice ending at {end}"
                );
            }
            open.push(b);
        }
    }
}

#[test]
fn a100_kineto_syncs__each_on_its_device_and_stream_with_duration_and_api_call() {
    for (name, counts) in [
        (
            ALEXNET,
            [
                ("Stream Sync", 16),
                ("Context Sync", 5),
                ("Stream Wait Event", 20),
            ],
        ),
        (
            EVENT_SYNC,
            [("Stream Sync", 1), ("Context Sync", 1), ("Event Sync", 2)],
        ),
    ] {
        let path = real(name);
        let trace = kineto_json(&path);
        let events = trace["traceEvents"].as_array().unwrap();
        let calls: HashMap<i64, &Value> = events
            .iter()
            .filter(|e| e["cat"] == "cuda_runtime")
            .map(|e| (e["args"]["correlation"].as_i64().unwrap(), e))
            .collect();
        let gpu_name = |d: i64| {
            trace["deviceProperties"]
                .as_array()
                .unwrap()
                .iter()
                .find(|p| p["id"] == d)
                .unwrap()["name"]
                .as_str()
                .unwrap()
                .to_owned()
        };
        // Where each sync should be, from the JSON.
        let mut want = Tracks::new();
        let mut by_kind: BTreeMap<&str, usize> = BTreeMap::new();
        for e in events.iter().filter(|e| e["cat"] == "cuda_sync") {
            let a = &e["args"];
            let kind = a["cuda_sync_kind"].as_str().unwrap();
            *by_kind.entry(kind).or_default() += 1;
            let corr = a["correlation"].as_i64().unwrap();
            let call = calls[&corr];
            let device = a["device"].as_i64().unwrap();
            let pid = call["pid"].as_i64().unwrap();
            let thread = match a["stream"].as_i64().unwrap() {
                -1 | 4_294_967_295 => "no stream".to_owned(),
                s => format!("stream {s} sync"),
            };
            let process = format!("GPU {device} {} (pid {pid})", gpu_name(device));
            let mut slice = SYNC_KINDS
                .iter()
                .find(|k| k.0 == kind)
                .unwrap()
                .2
                .to_owned();
            if let Some(s) = a["wait_on_stream"].as_i64().filter(|&s| s >= 0) {
                slice += &format!(" (stream {s})");
            }
            want.entry((process, thread)).or_default().push((
                slice,
                exact_ns(&e["ts"]),
                exact_ns(&e["dur"]),
                corr as u64,
            ));
            // Its API call is the one CUPTI correlates with it.
            let api = call["name"].as_str().unwrap();
            let expected_api = match kind {
                "Stream Sync" => &["cudaStreamSynchronize"][..],
                "Context Sync" => &["cudaDeviceSynchronize"][..],
                "Stream Wait Event" => &["cudaStreamWaitEvent"][..],
                _ => &["cudaEventSynchronize", "cudaEventQuery"][..],
            };
            assert!(expected_api.contains(&api), "{name}: {kind} from {api}");
        }
        let counts: BTreeMap<&str, usize> = counts.into_iter().collect();
        assert_eq!(by_kind, counts, "{name}");

        let out = run(std::slice::from_ref(&path));
        let t = timeline(&out.chrome);
        let mut got = Tracks::new();
        let mut sync_flows = 0;
        for (track, slices) in &t.slices {
            let syncs: Vec<_> = slices
                .iter()
                .filter(|s| {
                    SYNC_KINDS
                        .iter()
                        .any(|k| s.0 == k.2 || s.0.starts_with(&format!("{} (stream ", k.2)))
                })
                .cloned()
                .collect();
            if !syncs.is_empty() {
                assert!(
                    track.1 == "no stream" || track.1.ends_with(" sync"),
                    "{name}: a sync on {track:?}, among other GPU work"
                );
                sync_flows += t.flow_ends.get(track).copied().unwrap_or(0);
                got.insert(track.clone(), syncs);
            }
        }
        for v in want.values_mut().chain(got.values_mut()) {
            v.sort();
        }
        assert_eq!(got, want, "{name}");
        // An arrow from each sync's API call, whose slice is on the CPU thread,
        // and one from the recording call of each event waited on (all in the
        // trace: see `kineto_waits__…`).
        let n_syncs: usize = by_kind.values().sum();
        let n_waits = events
            .iter()
            .filter(|e| e["cat"] == "cuda_sync" && e["args"]["wait_on_stream"].is_i64())
            .count();
        assert_eq!(sync_flows as usize, n_syncs + n_waits, "{name}");
        let api_corrs: std::collections::HashSet<u64> = t
            .slices
            .iter()
            .filter(|(k, _)| !k.0.starts_with("GPU "))
            .flat_map(|(_, v)| v.iter().map(|s| s.3))
            .collect();
        for v in want.values() {
            for s in v {
                assert!(api_corrs.contains(&s.3), "{name}: no API slice for {s:?}");
            }
        }
        assert_slices_nest(&t);

        // In the summary with the copies and memsets, each with its call's stack,
        // and no note: nothing about them was left out.
        let s = &out.summary;
        let others = events
            .iter()
            .filter(|e| {
                matches!(
                    e["cat"].as_str(),
                    Some("gpu_memcpy" | "gpu_memset" | "cuda_sync")
                )
            })
            .count() as u64;
        assert_eq!(
            (s.other_activities, s.other_matched),
            (others, others),
            "{s}"
        );
        assert_eq!(s.kernels, s.kernels_matched, "{s}");
        assert!(s.gpu_read.notes.is_empty(), "{s}");
        assert_eq!(s.gpu_read.diagnostics.count, 0, "{s}");
        // Waiting is not GPU work: no folded weight, kernels' times unchanged.
        assert!(!out.folded.contains("Synchronize"), "{}", out.folded);
        assert!(
            !out.folded.contains("cudaStreamWaitEvent"),
            "{}",
            out.folded
        );
        check_kernel_times(&trace, &out);
    }
}

/// What [`check_waits`] found: waits on a CUDA event, by the stream waited on;
/// arrows drawn from their recording calls; waits counted as having none.
#[derive(Debug, PartialEq)]
struct Waits {
    by_stream: BTreeMap<i64, usize>,
    arrows: usize,
    unknown_record: usize,
    missing_record: usize,
}

/// Checks the waits on CUDA events of a Kineto trace against its JSON, read with
/// serde_json: each wait's slice is named with the stream waited on, each whose
/// `cudaEventRecord` call is in the trace (same process) has one arrow from that
/// call's slice to it, the others are counted in the notes, and flow ids are
/// unique.
fn check_waits(path: &Path) -> Waits {
    let trace = kineto_json(path);
    let events = trace["traceEvents"].as_array().unwrap();
    let is_call = |e: &&Value| {
        e["ph"] == "X"
            && matches!(
                e["cat"].as_str(),
                Some("cuda_runtime" | "cuda_driver" | "Runtime" | "Driver")
            )
    };
    let mut call_pid: HashMap<i64, i64> = HashMap::new();
    let mut calls_per_pid: BTreeMap<i64, usize> = BTreeMap::new();
    for e in events.iter().filter(is_call) {
        let pid = e["pid"].as_i64().unwrap();
        call_pid
            .entry(e["args"]["correlation"].as_i64().unwrap())
            .or_insert(pid);
        *calls_per_pid.entry(pid).or_default() += 1;
    }
    let main_pid = calls_per_pid
        .iter()
        .max_by_key(|(p, n)| (**n, std::cmp::Reverse(**p)))
        .map(|(p, _)| *p)
        .unwrap();

    let out = run(&[path.to_owned()]);
    let doc: Value = serde_json::from_str(&out.chrome).unwrap();
    let chrome = doc["traceEvents"].as_array().unwrap();
    let base = doc["otherData"]["time_base_ns"].as_u64().unwrap();
    let at = |e: &Value| base + exact_ns(&e["ts"]);
    // Flow ids are unique: one start and one end each.
    let mut ends: HashMap<u64, (Option<&Value>, Option<&Value>)> = HashMap::new();
    for e in chrome.iter().filter(|e| e["ph"] == "s" || e["ph"] == "f") {
        let slot = ends.entry(e["id"].as_u64().unwrap()).or_default();
        let end = if e["ph"] == "s" {
            &mut slot.0
        } else {
            &mut slot.1
        };
        assert!(end.replace(e).is_none(), "flow id used twice: {e}");
    }
    let mut arrows_to: HashMap<(u64, u64, u64), (&Value, &Value)> = HashMap::new();
    for (id, (s, f)) in &ends {
        let (s, f) = (s.unwrap(), f.unwrap());
        if s["cat"] == "event_wait" {
            assert_eq!(f["cat"], "event_wait", "flow {id}");
            let key = (
                f["pid"].as_u64().unwrap(),
                f["tid"].as_u64().unwrap(),
                at(f),
            );
            assert!(arrows_to.insert(key, (s, f)).is_none(), "{key:?}");
        }
    }
    let api_slice = |corr: i64| {
        chrome
            .iter()
            .find(|e| e["cat"] == "cuda_api" && e["args"]["correlation_id"] == corr)
            .unwrap()
    };

    let mut got = Waits {
        by_stream: BTreeMap::new(),
        arrows: 0,
        unknown_record: 0,
        missing_record: 0,
    };
    for e in events.iter().filter(|e| e["cat"] == "cuda_sync") {
        let a = &e["args"];
        let Some(record) = a.get("wait_on_cuda_event_record_corr_id") else {
            continue;
        };
        let (record, stream) = (
            record.as_i64().unwrap(),
            a["wait_on_stream"].as_i64().unwrap(),
        );
        *got.by_stream.entry(stream).or_default() += 1;
        let corr = a["correlation"].as_i64().unwrap();
        let pid = call_pid.get(&corr).copied().unwrap_or(main_pid);
        // Its slice, named with the stream waited on.
        let slice = chrome
            .iter()
            .find(|s| {
                s["ph"] == "X"
                    && s["cat"] == "sync"
                    && s["args"]["correlation_id"] == corr
                    && at(s)
                        == trace["baseTimeNanoseconds"].as_u64().unwrap_or(0) + exact_ns(&e["ts"])
            })
            .unwrap_or_else(|| panic!("no slice for {e}"));
        let kind = a["cuda_sync_kind"].as_str().unwrap();
        let name = SYNC_KINDS.iter().find(|k| k.0 == kind).unwrap().2;
        let want = if stream >= 0 {
            format!("{name} (stream {stream})")
        } else {
            name.to_owned()
        };
        assert_eq!(slice["name"], want.as_str(), "{e}");
        let key = (
            slice["pid"].as_u64().unwrap(),
            slice["tid"].as_u64().unwrap(),
            at(slice),
        );
        let arrow = arrows_to.remove(&key);
        if record < 0 {
            got.unknown_record += 1;
            assert!(arrow.is_none(), "{e}");
        } else if call_pid.get(&record) != Some(&pid) {
            got.missing_record += 1;
            assert!(arrow.is_none(), "{e}");
        } else {
            // From inside the recording call's slice, on its thread.
            let (s, _) = arrow.unwrap_or_else(|| panic!("no arrow to {e}"));
            let call = api_slice(record);
            assert_eq!(call["name"], "cudaEventRecord", "{e}");
            assert_eq!((&s["pid"], &s["tid"]), (&call["pid"], &call["tid"]), "{e}");
            let (from, start) = (at(s), at(call));
            assert!(
                (start..=start + exact_ns(&call["dur"])).contains(&from),
                "{e}"
            );
            got.arrows += 1;
        }
    }
    assert!(arrows_to.is_empty(), "arrows to no wait: {arrows_to:?}");
    // Waits without an arrow are counted in the notes.
    let total: usize = got.by_stream.values().sum();
    for (n, what) in [
        (
            got.unknown_record,
            "do not name the call that recorded the event",
        ),
        (
            got.missing_record,
            "name a recording call (`cudaEventRecord`) that is not in the trace",
        ),
    ] {
        let note = out.summary.gpu_read.notes.iter().find(|s| s.contains(what));
        match n {
            0 => assert!(note.is_none(), "{note:?}"),
            n => assert!(
                note.is_some_and(|s| s.contains(&format!("{n} of {total} waits"))),
                "{what}: {:?}",
                out.summary.gpu_read.notes
            ),
        }
    }
    got
}

#[test]
fn kineto_waits__named_with_the_stream_waited_on_and_an_arrow_from_the_event_record() {
    let streams = |v: &[(i64, usize)]| v.iter().copied().collect::<BTreeMap<_, _>>();
    assert_eq!(
        check_waits(&real(ALEXNET)),
        Waits {
            by_stream: streams(&[
                (7, 4),
                (20, 2),
                (21, 2),
                (22, 2),
                (23, 2),
                (24, 2),
                (25, 2),
                (26, 2),
                (27, 2)
            ]),
            arrows: 20,
            unknown_record: 0,
            missing_record: 0,
        }
    );
    assert_eq!(
        check_waits(&real(EVENT_SYNC)),
        Waits {
            by_stream: streams(&[(7, 2)]),
            arrows: 2,
            unknown_record: 0,
            missing_record: 0,
        }
    );
    // One wait of each kind: recorded by a call in the trace, by one before it
    // began (-1), and by one not in it.
    assert_eq!(
        check_waits(&data("kineto/small.pt.trace.json")),
        Waits {
            by_stream: streams(&[(7, 2), (8, 1)]),
            arrows: 1,
            unknown_record: 1,
            missing_record: 1,
        }
    );
}

#[test]
fn small_kineto__graph_kernels_counted_labelled_and_charged_to_the_graph_launch() {
    let path = data("kineto/small.pt.trace.json");
    let trace = kineto_json(&path);
    let out = run(std::slice::from_ref(&path));
    // Kernels with a graph id, from the JSON (one's id is not a number: counted
    // as a bad event, kept outside graphs).
    let graph_kernels: Vec<&Value> = trace["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["cat"] == "kernel" && e["args"]["graph id"].as_u64().is_some_and(|g| g != 0))
        .collect();
    assert_eq!(graph_kernels.len(), 2);
    assert_eq!(out.summary.graph_kernels, 2, "{}", out.summary);
    assert!(
        out.summary
            .to_string()
            .contains("  2 kernels came from CUDA graph launches\n")
    );
    let doc: Value = serde_json::from_str(&out.chrome).unwrap();
    for k in graph_kernels {
        let name = k["name"].as_str().unwrap();
        // Charged to the stack of the `cudaGraphLaunch` that replayed it.
        let line = out
            .folded
            .lines()
            .find(|l| l.contains(&format!("[GPU_Kernel]{name} ")))
            .unwrap();
        assert!(
            line.contains(";ProfilerStep#1;CUDAGraph::replay;cudaGraphLaunch;[GPU_Kernel]"),
            "{line}"
        );
        // Labelled with its graph and node in the timeline.
        let slice = doc["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["ph"] == "X" && e["name"] == name)
            .unwrap();
        assert_eq!(slice["args"]["graph_id"], k["args"]["graph id"]);
        assert_eq!(slice["args"]["graph_node_id"], k["args"]["graph node id"]);
    }
    let bad: Vec<String> = out
        .summary
        .gpu_read
        .diagnostics
        .first
        .iter()
        .map(|d| d.to_string())
        .collect();
    assert!(
        bad.iter().any(|d| d.ends_with(
            "`kernel` event whose `graph id` or `graph node id` is not a number: read as not from a graph"
        ) && d.contains("small.pt.trace.json@")),
        "{bad:?}"
    );
    // The peer copy: both devices, run by the `inDevice`.
    assert!(
        out.folded
            .contains(";cudaMemcpyPeerAsync;[GPU_Memcpy PtoP] 3\n"),
        "{}",
        out.folded
    );
    let p2p = doc["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "Memcpy PtoP" && e["args"]["bytes"] == 1024)
        .unwrap();
    assert_eq!(
        (
            &p2p["args"]["device"],
            &p2p["args"]["src_device"],
            &p2p["args"]["dst_device"]
        ),
        (&Value::from(1), &Value::from(0), &Value::from(1))
    );
}

/// (correlation id, peer devices) of every copy gpuperf read from an export.
fn model_copies(path: &Path) -> Vec<(u32, Option<(u32, u32)>)> {
    use gpuperf_merge::model::{ActivityKind, Record};
    let mut strings = StringTable::new();
    let inputs = GpuInputs::open(&[path.to_owned()], &mut strings).unwrap();
    let mut out = Vec::new();
    inputs
        .visit(&mut strings, &mut |rec, _| {
            if let Record::Activity(a) = rec
                && let ActivityKind::Memcpy { peer, .. } = a.kind
            {
                out.push((a.correlation_id, peer.map(|p| (p.src, p.dst))));
            }
        })
        .unwrap();
    out.sort();
    out
}

/// The same, by an SQL query of the export: a copy names a peer when both its
/// source and destination device are given.
fn sqlite_copies(path: &Path) -> Vec<(u32, Option<(u32, u32)>)> {
    let db = rusqlite::Connection::open(path).unwrap();
    let mut stmt = db
        .prepare(
            "SELECT correlationId, CASE WHEN srcDeviceId IS NOT NULL AND dstDeviceId IS NOT NULL \
             THEN srcDeviceId END, CASE WHEN srcDeviceId IS NOT NULL AND dstDeviceId IS NOT NULL \
             THEN dstDeviceId END FROM CUPTI_ACTIVITY_KIND_MEMCPY ORDER BY correlationId",
        )
        .unwrap();
    let mut v: Vec<(u32, Option<(u32, u32)>)> = stmt
        .query_map([], |r| {
            let (s, d): (Option<u32>, Option<u32>) = (r.get(1)?, r.get(2)?);
            Ok((r.get(0)?, s.zip(d)))
        })
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    v.sort();
    v
}

#[test]
fn nsys_peer_copies__both_devices_carried_into_the_model_and_the_timeline() {
    // The real export has 15 copies, none between two devices.
    let path = real(A100);
    let want = sqlite_copies(&path);
    assert_eq!(want.len(), 15);
    assert!(want.iter().all(|c| c.1.is_none()));
    assert_eq!(model_copies(&path), want);

    // The same export with one copy made peer-to-peer (device 0 to device 1, as
    // nsys writes CUPTI's MEMCPY2 records), and one naming only its source.
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("peer.sqlite");
    fs::copy(&path, &p).unwrap();
    let db = rusqlite::Connection::open(&p).unwrap();
    db.execute_batch(
        "UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET copyKind = 10, srcKind = 2, dstKind = 2, \
           srcDeviceId = 0, srcContextId = 1, dstDeviceId = 1, dstContextId = 2 \
           WHERE correlationId = (SELECT min(correlationId) FROM CUPTI_ACTIVITY_KIND_MEMCPY);
         UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET srcDeviceId = 0 \
           WHERE correlationId = (SELECT max(correlationId) FROM CUPTI_ACTIVITY_KIND_MEMCPY);",
    )
    .unwrap();
    drop(db);
    let want = sqlite_copies(&p);
    let peers: Vec<_> = want.iter().filter(|c| c.1.is_some()).collect();
    assert_eq!(peers.len(), 1);
    assert_eq!(model_copies(&p), want);

    let out = run(std::slice::from_ref(&p));
    let s = out.summary.to_string();
    assert!(
        s.contains("1 copies name only one of their source and destination devices"),
        "{s}"
    );
    assert!(out.folded.contains("[GPU_Memcpy PtoP]"), "{}", out.folded);
    let doc: Value = serde_json::from_str(&out.chrome).unwrap();
    let slices: Vec<&Value> = doc["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"] == "Memcpy PtoP")
        .collect();
    assert_eq!(slices.len(), 1);
    let a = &slices[0]["args"];
    assert_eq!(
        (&a["correlation_id"], &a["src_device"], &a["dst_device"]),
        (&Value::from(peers[0].0), &Value::from(0), &Value::from(1))
    );
}
