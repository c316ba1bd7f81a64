//! GPU PC samples folded under the CPU stack of the launch they came from.

use std::fs;

use gpuperf_merge::join;
use gpuperf_merge::model::{
    Activity, ActivityKind, ApiCall, ApiDomain, Note, PC_SERIALIZED_NOTE, PcLaunches, PcSample,
    Process, ProcessPcLaunches, Record, StringId, StringTable,
};
use gpuperf_merge::read::cpu::CpuTrace;
use gpuperf_merge::read::gputrace;
use gpuperf_merge::read::input::GpuInputs;
use gpuperf_merge::recording::report::{PcTable, PythonLines, report_json};
use gpuperf_merge::write::idle::IdleFolder;
use gpuperf_merge::write::pc::{PcFolder, PcStats};
use gpuperf_merge::write::report::Reporter;

/// Joins `recs` (a GPU trace of process 7) with the CPU trace `cpu` and folds
/// the PC samples.
fn fold(recs: &[Record], strings: &StringTable, cpu: &str) -> PcFolder {
    fold_into(PcFolder::new(), recs, strings, cpu)
}

/// [`fold`] into `pc`.
fn fold_into(mut pc: PcFolder, recs: &[Record], strings: &StringTable, cpu: &str) -> PcFolder {
    let dir = tempfile::tempdir().unwrap();
    let mut w = gputrace::Writer::new(Vec::new()).unwrap();
    for r in recs {
        w.write(r, strings).unwrap();
    }
    let gpu = dir.path().join("gpu-7.gputrace");
    fs::write(&gpu, w.into_inner()).unwrap();
    let cpu_path = dir.path().join("cpu.txt");
    fs::write(&cpu_path, cpu).unwrap();

    let mut strings = StringTable::new();
    let inputs = GpuInputs::open(&[gpu], &mut strings).unwrap();
    let mut cpu = CpuTrace::open(&cpu_path).unwrap();
    join::merge(
        Some(&mut cpu),
        &inputs,
        &mut strings,
        &join::Options::default(),
        &mut [&mut pc],
    )
    .unwrap();
    pc
}

/// Process 7 (`trainer`) and `launches` of `kernel` on thread 8: for each
/// correlation id `c`, a `cudaLaunchKernel` at `c` × 10 µs and its kernel 2 µs
/// later, 5 µs long.
fn trainer_launches(kernel: StringId, launch: StringId, launches: &[u32]) -> Vec<Record> {
    let mut recs = vec![Record::Process(Process {
        pid: 7,
        ppid: Some(1),
        exe: "/usr/bin/trainer".into(),
        start_ns: 0,
        start_realtime_ns: None,
    })];
    for &corr in launches {
        let t = u64::from(corr) * 10_000;
        recs.push(Record::Api(ApiCall {
            pid: 7,
            tid: 8,
            start_ns: t,
            end_ns: t + 1_000,
            correlation_id: corr,
            cbid: 211,
            domain: ApiDomain::Runtime,
            name: launch,
        }));
        recs.push(Record::Activity(Activity {
            pid: 7,
            start_ns: t + 2_000,
            end_ns: t + 7_000,
            correlation_id: corr,
            device: Some(0),
            context: 1,
            stream: Some(7),
            graph_id: None,
            graph_node_id: None,
            kind: ActivityKind::Kernel {
                name: kernel,
                grid: [1, 1, 1],
                block: [32, 1, 1],
            },
        }));
    }
    recs
}

/// `gpuperf report --format json` of `pc`'s samples alone.
fn json_report(pc: &PcFolder) -> serde_json::Value {
    let mut rep = Reporter::new();
    let json = report_json(
        &mut rep,
        &IdleFolder::new(),
        &PythonLines::default(),
        pc,
        10,
    );
    serde_json::from_str(&json).unwrap()
}

/// The folded lines `pc` writes.
fn written(pc: &PcFolder) -> String {
    let mut out = Vec::new();
    pc.write(&mut out).unwrap();
    String::from_utf8(out).unwrap()
}

/// Two launches of `_Z4gemmPfi` (correlation ids 1 and 2) from two CPU stacks,
/// and samples of each, one without line information, one that names no
/// launch (continuous mode) and one whose launch is missing.
#[test]
fn samples_charged_to_their_launch_s_stack_then_kernel_instruction_line_and_stall() {
    let mut strings = StringTable::new();
    let gemm = strings.intern("_Z4gemmPfi");
    let launch = strings.intern("cudaLaunchKernel");
    let file = strings.intern("gemm.cu");
    let (long_sb, branch) = (
        strings.intern("smsp__pcsamp_warps_issue_stalled_long_scoreboard"),
        strings.intern("smsp__pcsamp_warps_issue_stalled_branch_resolving"),
    );
    let mut recs = trainer_launches(gemm, launch, &[1, 2]);
    let sample = |corr, pc_offset, line: Option<u32>, stall, samples| {
        Record::PcSample(PcSample {
            pid: 7,
            correlation_id: corr,
            context: 1,
            function: gemm,
            pc_offset,
            cubin_crc: 0xabcd,
            stall_reason_index: 0,
            stall_reason: stall,
            samples,
            source: line.map(|l| (file, l)),
        })
    };
    recs.extend([
        sample(Some(1), 0x1f0, Some(42), long_sb, 30),
        sample(Some(1), 0x200, Some(42), long_sb, 5),
        sample(Some(2), 0x1f0, Some(42), long_sb, 7),
        sample(Some(2), 0x80, Some(17), branch, 3),
        sample(Some(2), 0x90, None, branch, 2),
        sample(None, 0x1f0, Some(42), long_sb, 11),
        sample(Some(9), 0x1f0, Some(42), long_sb, 4),
    ]);
    let pc = fold(
        &recs,
        &strings,
        "# gpuperf-cpu v1\n\
         10000 trainer 7 8 2 1 _start;main;train;cudaLaunchKernel\n\
         20000 trainer 7 8 2 2 _start;main;evaluate;cudaLaunchKernel\n",
    );
    let got = written(&pc);
    let k = "[GPU_Kernel]gemm(float*, int);[GPU_PC]gemm(float*, int)+";
    let want = [
        format!("[no CPU stack];{k}0x1f0;[CUDA]gemm.cu:42;[Stall]long_scoreboard 15"),
        format!(
            "_start;main;evaluate;cudaLaunchKernel;{k}0x1f0;[CUDA]gemm.cu:42;[Stall]long_scoreboard 7"
        ),
        format!(
            "_start;main;evaluate;cudaLaunchKernel;{k}0x80;[CUDA]gemm.cu:17;[Stall]branch_resolving 3"
        ),
        format!(
            "_start;main;evaluate;cudaLaunchKernel;{k}0x90;[CUDA]? (no line information: build with -lineinfo);[Stall]branch_resolving 2"
        ),
        format!(
            "_start;main;train;cudaLaunchKernel;{k}0x1f0;[CUDA]gemm.cu:42;[Stall]long_scoreboard 30"
        ),
        format!(
            "_start;main;train;cudaLaunchKernel;{k}0x200;[CUDA]gemm.cu:42;[Stall]long_scoreboard 5"
        ),
    ];
    let mut want: Vec<String> = want.into_iter().collect();
    want.sort();
    assert_eq!(got.lines().collect::<Vec<_>>(), want, "{got}");
    assert_eq!(
        pc.stats(),
        PcStats {
            samples: 62,
            attributed: 47,
            unattributed: 11,
            unmatched: 4,
            without_line: 2,
            // 1, 2 and 9 (whose kernel record is missing).
            launches_with_samples: 3,
            ..PcStats::default()
        }
    );
    let gemm = &pc.kernels()["gemm(float*, int)"];
    assert_eq!((gemm.samples(), gemm.launches), (62, 3));
    assert_eq!(gemm.lines()["gemm.cu:42"], 57);
    assert_eq!(gemm.stalls().stalls["branch_resolving"], 5);
    let reasons = |line: &str| {
        gemm.line_stalls[line]
            .stalls
            .clone()
            .into_iter()
            .collect::<Vec<_>>()
    };
    assert_eq!(reasons("gemm.cu:42"), [("long_scoreboard".to_owned(), 57)]);
    assert_eq!(reasons("gemm.cu:17"), [("branch_resolving".to_owned(), 3)]);
    assert_eq!(
        reasons("? (no line information: build with -lineinfo)"),
        [("branch_resolving".to_owned(), 2)]
    );
}

/// One launch of `gemm` from `main;train`: at line 42, 60 long_scoreboard
/// samples (30 not issued) and 20 barrier; at line 50, 40 math_pipe_throttle.
fn two_lines(pc: PcFolder) -> PcFolder {
    let mut strings = StringTable::new();
    let gemm = strings.intern("gemm");
    let launch = strings.intern("cudaLaunchKernel");
    let file = strings.intern("gemm.cu");
    let samples = [
        (0x1f0, 42, "long_scoreboard", 60),
        (0x1f0, 42, "long_scoreboard_not_issued", 30),
        (0x200, 42, "barrier", 20),
        (0x300, 50, "math_pipe_throttle", 40),
    ];
    let recs: Vec<Record> = trainer_launches(gemm, launch, &[1])
        .into_iter()
        .chain(samples.map(|(pc_offset, line, reason, samples)| {
            let reason = format!("smsp__pcsamp_warps_issue_stalled_{reason}");
            Record::PcSample(PcSample {
                pid: 7,
                correlation_id: Some(1),
                context: 1,
                function: gemm,
                pc_offset,
                cubin_crc: 0xabcd,
                stall_reason_index: 0,
                stall_reason: strings.intern(&reason),
                samples,
                source: Some((file, line)),
            })
        }))
        .collect();
    fold_into(
        pc,
        &recs,
        &strings,
        "# gpuperf-cpu v1\n10000 trainer 7 8 2 1 _start;main;train;cudaLaunchKernel\n",
    )
}

/// The pprof profile of [`two_lines`]: each sample's leaf is its instruction
/// at its CUDA line, under the kernel and the launch's CPU stack, with its
/// stall reason as a label; `go tool pprof` reads the lines and the labels.
#[test]
fn pc_pprof__instruction_lines_under_the_launch_stack_stall_reasons_as_labels() {
    let pc = two_lines(PcFolder::with_profile());
    let p = pc.profile().unwrap();
    let s = |i: i64| p.string_table[i as usize].as_str();
    let types: Vec<_> = p
        .sample_type
        .iter()
        .map(|t| (s(t.r#type), s(t.unit)))
        .collect();
    assert_eq!(
        types,
        [("samples", "count"), ("not_issued_samples", "count")]
    );
    let location = |id: u64| &p.location[id as usize - 1];
    let function = |id: u64| &p.function[id as usize - 1];
    let mut got: Vec<(String, u64, String, i64, String, i64, i64)> = p
        .sample
        .iter()
        .map(|x| {
            let leaf = location(x.location_id[0]);
            let f = function(leaf.line[0].function_id);
            let stacks: Vec<&str> = x.location_id[1..]
                .iter()
                .map(|&l| s(function(location(l).line[0].function_id).name))
                .collect();
            assert_eq!(
                stacks,
                [
                    "[GPU_Kernel]gemm",
                    "cudaLaunchKernel",
                    "train",
                    "main",
                    "_start"
                ]
            );
            let labels: Vec<_> = x
                .label
                .iter()
                .map(|l| (s(l.key), s(l.str), l.num))
                .collect();
            assert_eq!(labels[0], ("pid", "", 7));
            assert_eq!(labels[1].0, "stall_reason");
            (
                s(f.name).to_owned(),
                leaf.address,
                s(f.filename).to_owned(),
                leaf.line[0].line,
                labels[1].1.to_owned(),
                x.value[0],
                x.value[1],
            )
        })
        .collect();
    got.sort();
    let row = |pc, line, stall: &str, n, ni| {
        (
            "gemm".to_owned(),
            pc,
            "gemm.cu".to_owned(),
            line,
            stall.to_owned(),
            n,
            ni,
        )
    };
    assert_eq!(
        got,
        [
            row(0x1f0, 42, "long_scoreboard", 60, 30),
            row(0x200, 42, "barrier", 20, 0),
            row(0x300, 50, "math_pipe_throttle", 40, 0),
        ]
    );

    let Some(mut go) = gpuperf_test_support::pprof::go_pprof() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pc.pb.gz");
    let mut gz = Vec::new();
    pc.write_profile(&mut gz).unwrap();
    fs::write(&file, gz).unwrap();
    let top = go
        .args(["-top", "-lines", "-nodecount=10"])
        .arg(&file)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&top.stdout);
    assert!(
        top.status.success(),
        "{}",
        String::from_utf8_lossy(&top.stderr)
    );
    // Flat samples per line, hottest first: line 42 (60 + 20), then 50.
    let flat: Vec<(u64, &str)> = text
        .lines()
        .filter(|l| l.contains("gemm.cu:"))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f[0].parse().unwrap(), *f.last().unwrap())
        })
        .collect();
    assert_eq!(flat, [(80, "gemm.cu:42"), (40, "gemm.cu:50")], "{text}");
    let mut go = gpuperf_test_support::pprof::go_pprof().unwrap();
    let tags = go.arg("-tags").arg(&file).output().unwrap();
    let text = String::from_utf8_lossy(&tags.stdout);
    for want in [
        "60.0 (50.00%): long_scoreboard",
        "40.0 (33.33%): math_pipe_throttle",
        "20.0 (16.67%): barrier",
    ] {
        assert!(text.contains(want), "{want}: {text}");
    }
}

/// One launch of `gemm`: line 42 stalls on memory (long_scoreboard, 30 of
/// them on cycles that issued nothing) and on barriers, line 50 only on
/// math: the report says, under each line, why its warps stalled.
#[test]
fn each_line_lists_its_own_stall_reasons__in_the_report_text_and_json() {
    let pc = two_lines(PcFolder::new());

    let text = PcTable { pc: &pc, top: 10 }.to_string();
    let want = "      120 100.0%  gemm (1 launch)\n\
               \x20      80  66.7%    line   gemm.cu:42\n\
               \x20      60  75.0%             long_scoreboard (not issued 30, 50.0%)\n\
               \x20      20  25.0%             barrier\n\
               \x20      40  33.3%    line   gemm.cu:50\n\
               \x20      40 100.0%             math_pipe_throttle\n\
               \x20      60  50.0%    stall  long_scoreboard (not issued 30, 50.0%)\n\
               \x20      40  33.3%    stall  math_pipe_throttle\n\
               \x20      20  16.7%    stall  barrier\n";
    assert!(text.ends_with(want), "{text}");

    let json = json_report(&pc);
    assert_eq!(
        json["pc_samples"]["kernels"][0]["lines"],
        serde_json::json!([
            { "line": "gemm.cu:42", "samples": 80, "stalls": [
                { "reason": "long_scoreboard", "samples": 60, "not_issued": 30 },
                { "reason": "barrier", "samples": 20 },
            ] },
            { "line": "gemm.cu:50", "samples": 40, "stalls": [
                { "reason": "math_pipe_throttle", "samples": 40 },
            ] },
        ])
    );
}

/// One launch of `gemm` from `main;train`, and one PC with 10 `long_scoreboard`
/// samples of which CUPTI says 6 were on cycles that issued nothing
/// (`long_scoreboard_not_issued`, a subset as in Nsight Compute).
#[test]
fn long_scoreboard_10_of_them_6_not_issued__weighs_10_and_the_report_says_6() {
    let mut strings = StringTable::new();
    let gemm = strings.intern("gemm");
    let launch = strings.intern("cudaLaunchKernel");
    let file = strings.intern("gemm.cu");
    let recs: Vec<Record> = trainer_launches(gemm, launch, &[1])
        .into_iter()
        .chain(
            [
                (8, "long_scoreboard", 10),
                (108, "long_scoreboard_not_issued", 6),
            ]
            .map(|(index, reason, samples)| {
                Record::PcSample(PcSample {
                    pid: 7,
                    correlation_id: Some(1),
                    context: 1,
                    function: gemm,
                    pc_offset: 0x1f0,
                    cubin_crc: 0xabcd,
                    stall_reason_index: index,
                    stall_reason: strings
                        .intern(&format!("smsp__pcsamp_warps_issue_stalled_{reason}")),
                    samples,
                    source: Some((file, 42)),
                })
            }),
        )
        .collect();
    let pc = fold(
        &recs,
        &strings,
        "# gpuperf-cpu v1\n10000 trainer 7 8 2 1 _start;main;train;cudaLaunchKernel\n",
    );

    assert_eq!(
        written(&pc),
        "_start;main;train;cudaLaunchKernel;[GPU_Kernel]gemm;[GPU_PC]gemm+0x1f0;\
         [CUDA]gemm.cu:42;[Stall]long_scoreboard 10\n"
    );
    let stats = pc.stats();
    assert_eq!(
        stats,
        PcStats {
            samples: 10,
            attributed: 10,
            not_issued: 6,
            launches_with_samples: 1,
            ..PcStats::default()
        }
    );
    let k = &pc.kernels()["gemm"];
    let stalls = k.stalls();
    assert_eq!((k.samples(), stalls.stalls.len()), (10, 1));
    assert_eq!(stalls.not_issued["long_scoreboard"], 6);
    assert!(
        stats.to_string().contains(
            "; 6 not-issued samples (CUPTI's *_not_issued reasons: the part of a stall \
             reason's samples on cycles that issued nothing) not added again"
        ),
        "{stats}"
    );

    let text = PcTable { pc: &pc, top: 10 }.to_string();
    assert!(
        text.contains("       10 100.0%    stall  long_scoreboard (not issued 6, 60.0%)\n"),
        "{text}"
    );
    assert!(!text.contains("long_scoreboard_not_issued"), "{text}");
    let json = json_report(&pc);
    let kernel = &json["pc_samples"]["kernels"][0];
    assert_eq!(
        kernel["stalls"],
        serde_json::json!([{ "reason": "long_scoreboard", "samples": 10, "not_issued": 6 }]),
        "{kernel}"
    );
    // A line's not-issued samples are said under its stall reasons.
    assert_eq!(
        kernel["lines"],
        serde_json::json!([{ "line": "gemm.cu:42", "samples": 10, "stalls": [
            { "reason": "long_scoreboard", "samples": 10, "not_issued": 6 }
        ] }]),
        "{kernel}"
    );
    assert_eq!(json["pc_samples"]["samples"], 10);
    assert_eq!(json["pc_samples"]["not_issued"], 6);
}

/// Kernel-serialized, four launches in the sampling window, of which launch 2
/// (a kernel too short for the sampling period) gave no sample: the summary,
/// the report's table and its JSON say how many launches gave samples.
#[test]
fn four_launches_sampled_one_without_a_sample__said_in_the_summary_and_the_report() {
    let mut strings = StringTable::new();
    let gemm = strings.intern("gemm");
    let launch = strings.intern("cudaLaunchKernel");
    let file = strings.intern("gemm.cu");
    let stall = strings.intern("smsp__pcsamp_warps_issue_stalled_long_scoreboard");
    let mut recs = trainer_launches(gemm, launch, &[1, 2, 3, 4]);
    recs.push(Record::Note(Note {
        pid: 7,
        text: format!("{PC_SERIALIZED_NOTE} (CUPTI's kernel-serialized mode, window 4/10)"),
    }));
    recs.push(Record::PcLaunches(ProcessPcLaunches {
        pid: 7,
        launches: PcLaunches {
            sampled: 4,
            unsampled: 6,
        },
    }));
    for (corr, pc_offset, samples) in [(1, 0x10, 5), (1, 0x20, 2), (3, 0x10, 4), (4, 0x10, 1)] {
        recs.push(Record::PcSample(PcSample {
            pid: 7,
            correlation_id: Some(corr),
            context: 1,
            function: gemm,
            pc_offset,
            cubin_crc: 0xabcd,
            stall_reason_index: 8,
            stall_reason: stall,
            samples,
            source: Some((file, 42)),
        }));
    }
    let cpu: String = (1..=4)
        .map(|c| {
            format!(
                "{} trainer 7 8 2 {c} _start;main;train;cudaLaunchKernel\n",
                c * 10_000
            )
        })
        .collect();
    let pc = fold(&recs, &strings, &format!("# gpuperf-cpu v1\n{cpu}"));

    let stats = pc.stats();
    assert_eq!((stats.samples, stats.launches_with_samples), (12, 3));
    assert_eq!(pc.kernels()["gemm"].launches, 3);
    let said = stats.to_string();
    assert!(
        said.contains(
            "; from 4 of 10 launches (the 6 outside the sampling windows have none; nothing is \
             scaled up); 1 of the 4 sampled launches have no sample (a kernel too short for the \
             sampling period gets none: a smaller --pc-sampling=PERIOD takes more)"
        ),
        "{said}"
    );
    let text = PcTable { pc: &pc, top: 10 }.to_string();
    assert!(
        text.contains("       12 100.0%  gemm (3 launches)\n"),
        "{text}"
    );
    let json = json_report(&pc);
    assert_eq!(json["pc_samples"]["launches_sampled"], 4);
    assert_eq!(json["pc_samples"]["launches_with_samples"], 3);
    assert_eq!(json["pc_samples"]["kernels"][0]["launches"], 3);
}
