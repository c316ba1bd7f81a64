//! The simulated CUPTI's PC Sampling API (`sim/src/cupti_pcsampling.c`), driven by
//! `sim/tests/pc_sampling.c`, a client of `cupti_pcsampling.h` inside the program.
//! The sample counts follow the simulation's documented model (sim/README.md):
//! a launch of 2 blocks of 64 threads runs 1001 ns = 1981 cycles at 1.98 GHz,
//! 61 samples per busy sub-partition at period 5 (2^5 cycles), 4 warps busy:
//! 244 samples, spread 1:6:3 over the hot kernel's lines by largest remainder.
//! Needs NVIDIA's CUDA 13 wheels (headers), and skips without them unless
//! `GPUPERF_REQUIRE_CUDA_WHEELS=1`.
#![allow(non_snake_case)]

use std::process::Command;

use crate::common::{self, Record, Recording, cuda13, show, sim, text, work_dir};

/// The hot kernel's PC table: three lines of `/src/app/hot.cu`, weights 1:6:3.
const HOT: &str = "_Z3hotPf@/src/app/hot.cu=0x10:12:math_pipe_throttle:1,\
                   0x40:14:long_scoreboard:6,0x80:15:selected:3";

/// `sim/tests/pc_sampling.c`, linked `-rdynamic` for the simulation's test hooks.
fn program(cuda: &std::path::Path) -> std::path::PathBuf {
    common::sim_c_program_as(
        cuda,
        "pc_sampling",
        "pc_sampling",
        &["-rdynamic".as_ref()],
        &["cupti", "cudart", "cuda"],
    )
}

/// Runs `pc_sampling SCENARIO` with the hot kernel's table and `env`.
fn client(scenario: &str, env: &[(&str, &str)]) -> Option<String> {
    let cuda = cuda13()?;
    let exe = program(&cuda);
    let mut c = Command::new(exe);
    c.arg(scenario)
        .env_remove("CUDA_INJECTION64_PATH")
        .env_remove("GPUSIM_PC_SAMPLING_PRIVILEGE")
        .env("GPUSIM_PC_SAMPLES", HOT);
    for (k, v) in env {
        c.env(k, v);
    }
    let o = c.output().unwrap();
    assert!(o.status.success(), "{}", show(&o));
    Some(text(&o.stdout))
}

#[test]
fn sim_pc_sampling_reasons__table_with_cupti_names_and_documented_defaults() {
    let Some(out) = client("reasons", &[]) else {
        return;
    };
    // The table is refused (INVALID_OPERATION, 7) until sampling is enabled
    // in the context, as libcupti 13.0 answered on an H200. Most reasons have
    // a `_not_issued` count beside them, as on Hopper. Defaults from
    // cupti_pcsampling.h: continuous mode, 1 MB scratch, 512 MB hardware buffer.
    assert_eq!(
        out,
        "before enable: 7\n\
         stall reasons 34\n\
         reason 8 smsp__pcsamp_warps_issue_stalled_long_scoreboard\n\
         reason 14 smsp__pcsamp_warps_issue_stalled_not_selected\n\
         reason 15 smsp__pcsamp_warps_issue_stalled_selected\n\
         reason 108 smsp__pcsamp_warps_issue_stalled_long_scoreboard_not_issued\n\
         defaults mode 1 scratch 1048576 hw 536870912\n"
    );
}

#[test]
fn sim_pc_sampling_serialized__each_launch_its_correlation_id_lines_and_stall_reasons() {
    let Some(out) = client("serialized", &[]) else {
        return;
    };
    // Launches 0 and 2 are the hot kernel, 1 the cold one (no table: one PC,
    // "selected", and a module without line information). GetData after
    // Disable is an invalid operation (7).
    assert_eq!(
        out,
        "total samples 549 dropped 0 pcs 7 remaining 0 range 0 modules 2\n\
         launch 0 _Z3hotPf+0x10 /src/app/hot.cu:12 math_pipe_throttle=25\n\
         launch 0 _Z3hotPf+0x40 /src/app/hot.cu:14 long_scoreboard=146\n\
         launch 0 _Z3hotPf+0x80 /src/app/hot.cu:15 selected=73\n\
         launch 1 _Z4coldv+0x0 no line info selected=61\n\
         launch 2 _Z3hotPf+0x10 /src/app/hot.cu:12 math_pipe_throttle=25\n\
         launch 2 _Z3hotPf+0x40 /src/app/hot.cu:14 long_scoreboard=146\n\
         launch 2 _Z3hotPf+0x80 /src/app/hot.cu:15 selected=73\n\
         after disable: 7\n"
    );
}

#[test]
fn sim_pc_sampling_serialized_buffer__each_kernel_end_replaces_the_configured_buffer() {
    // As libcupti 13.0 did on an H200: a client that reads only with GetData
    // after the kernels gets nothing; the configured buffer holds the last
    // kernel's records only.
    let Some(out) = client("serialized-buffer", &[]) else {
        return;
    };
    assert_eq!(
        out,
        "get data after the workload: pcs 0\n\
         configured buffer after the workload: pcs 3\n\
         launch 2 _Z3hotPf+0x10 /src/app/hot.cu:12 math_pipe_throttle=25\n\
         launch 2 _Z3hotPf+0x40 /src/app/hot.cu:14 long_scoreboard=146\n\
         launch 2 _Z3hotPf+0x80 /src/app/hot.cu:15 selected=73\n"
    );
}

#[test]
fn sim_pc_sampling_serialized_drain__each_launch_return_has_its_kernels_records() {
    let Some(out) = client("serialized-drain", &[]) else {
        return;
    };
    assert_eq!(
        out,
        "drained at launch 0's return: pcs 3\n\
         launch 0 _Z3hotPf+0x10 /src/app/hot.cu:12 math_pipe_throttle=25\n\
         launch 0 _Z3hotPf+0x40 /src/app/hot.cu:14 long_scoreboard=146\n\
         launch 0 _Z3hotPf+0x80 /src/app/hot.cu:15 selected=73\n\
         drained at launch 1's return: pcs 1\n\
         launch 1 _Z4coldv+0x0 no line info selected=61\n\
         drained at launch 2's return: pcs 3\n\
         launch 2 _Z3hotPf+0x10 /src/app/hot.cu:12 math_pipe_throttle=25\n\
         launch 2 _Z3hotPf+0x40 /src/app/hot.cu:14 long_scoreboard=146\n\
         launch 2 _Z3hotPf+0x80 /src/app/hot.cu:15 selected=73\n\
         get data after the workload: pcs 0\n\
         configured buffer after the workload: pcs 0\n"
    );
}

#[test]
fn sim_pc_sampling_continuous__one_record_per_pc_without_correlation_id() {
    let Some(out) = client("continuous", &[]) else {
        return;
    };
    assert_eq!(
        out,
        "total samples 549 dropped 0 pcs 4 remaining 0 range 0 modules 2\n\
         launch -1 _Z3hotPf+0x10 /src/app/hot.cu:12 math_pipe_throttle=50\n\
         launch -1 _Z3hotPf+0x40 /src/app/hot.cu:14 long_scoreboard=292\n\
         launch -1 _Z3hotPf+0x80 /src/app/hot.cu:15 selected=146\n\
         launch -1 _Z4coldv+0x0 no line info selected=61\n\
         after disable: 7\n"
    );
}

#[test]
fn sim_pc_sampling_buffers__data_in_pieces_and_a_full_hardware_buffer_out_of_memory() {
    let Some(out) = client("buffers", &[]) else {
        return;
    };
    assert_eq!(
        out,
        "get: pcs 2 remaining 5\n\
         get: pcs 2 remaining 3\n\
         get: pcs 2 remaining 1\n\
         get: pcs 1 remaining 0\n\
         small hardware buffer: CUPTI_ERROR_OUT_OF_MEMORY full 1 pcs 0 dropped 244\n"
    );
}

#[test]
fn sim_pc_sampling_ranges__start_stop_control_one_range_id_per_buffer() {
    let Some(out) = client("ranges", &[]) else {
        return;
    };
    // Start/Stop without the control attribute, and a second Stop, are invalid
    // operations (7); the launch before the first range is not sampled.
    assert_eq!(
        out,
        "start without control: 7\n\
         stop twice: 7\n\
         range 0 pcs 3 samples 244\n\
         launch 1 _Z3hotPf+0x10 /src/app/hot.cu:12 math_pipe_throttle=25\n\
         launch 1 _Z3hotPf+0x40 /src/app/hot.cu:14 long_scoreboard=146\n\
         launch 1 _Z3hotPf+0x80 /src/app/hot.cu:15 selected=73\n\
         range 1 pcs 1 samples 61\n\
         launch 2 _Z4coldv+0x0 no line info selected=61\n\
         range 2 pcs 0 samples 0\n"
    );
}

#[test]
fn sim_pc_sampling_config__statuses_per_attribute_and_selected_reasons_only() {
    let Some(out) = client("config", &[]) else {
        return;
    };
    // Period 4 (below 5) and stall reason index 3 (not in the table) are
    // refused (7, INVALID_OPERATION), an unknown attribute is INVALID_PARAMETER (1).
    assert_eq!(
        out,
        "before enable: 7\n\
         enable twice: 7\n\
         set: 7 statuses 7 7 0 1\n\
         selected only: total samples 549 pcs 1\n\
         launch -1 _Z3hotPf+0x40 /src/app/hot.cu:14 long_scoreboard=292\n"
    );
}

#[test]
fn sim_pc_sampling_privilege__enable_refused_and_the_program_goes_on() {
    let Some(out) = client("privilege", &[("GPUSIM_PC_SAMPLING_PRIVILEGE", "0")]) else {
        return;
    };
    assert_eq!(
        out,
        "enable: CUPTI_ERROR_INSUFFICIENT_PRIVILEGES\n\
         get data: CUPTI_ERROR_INVALID_OPERATION\n\
         launch after refusal: 0\n"
    );
}

// ------------------------------------------------------------------ recorded by gpuperf

/// One PC sample as the test compares it: launch, function, offset, stall
/// reason, samples, source line.
type Line = (String, String, u64, String, u32, Option<(String, u32)>);

/// `gpuperf record --pc-sampling=5` of `pc_sampling app` (two launches of the
/// hot kernel around one of the cold one) with `env`: [`record_with`], the PC
/// samples also drawn as `pc.svg`.
fn record_app(
    name: &str,
    env: &[(&str, &str)],
) -> Option<(std::process::Output, Recording, std::path::PathBuf)> {
    record_with(
        name,
        &["--pc-svg", "pc.svg", "--pc-pprof", "pc.pb.gz"],
        &["app"],
        env,
    )
}

#[test]
fn record_pc_sampling__each_launchs_samples_carry_its_correlation_id_line_and_stall_reason() {
    let Some((o, rec, dir)) = record_app("pc-sampling-record", &[]) else {
        return;
    };
    rec.check_invariants();
    let kernels: Vec<(u32, String)> = rec
        .kernels()
        .iter()
        .map(|k| (k.correlation_id, rec.label(k)))
        .collect();
    assert_eq!(kernels.len(), 3, "{kernels:?}");
    let mut got: Vec<Line> = rec
        .pc_samples
        .iter()
        .map(|p| {
            let launch = kernels
                .iter()
                .position(|(c, _)| Some(*c) == p.correlation_id)
                .map_or("no launch".to_owned(), |i| format!("launch {i}"));
            let reason = rec.strings.get(p.stall_reason);
            (
                launch,
                rec.strings.get(p.function).to_owned(),
                p.pc_offset,
                reason
                    .trim_start_matches("smsp__pcsamp_warps_issue_stalled_")
                    .to_owned(),
                p.samples,
                p.source.map(|(f, l)| (rec.strings.get(f).to_owned(), l)),
            )
        })
        .collect();
    got.sort();
    let hot = |launch: &str| {
        let line = |off, reason: &str, n, l| {
            (
                launch.to_owned(),
                "_Z3hotPf".to_owned(),
                off,
                reason.to_owned(),
                n,
                Some(("/src/app/hot.cu".to_owned(), l)),
            )
        };
        [
            line(0x10, "math_pipe_throttle", 25, 12),
            line(0x40, "long_scoreboard", 146, 14),
            line(0x80, "selected", 73, 15),
        ]
    };
    let mut want: Vec<_> = hot("launch 0").into_iter().chain(hot("launch 2")).collect();
    want.push((
        "launch 1".to_owned(),
        "_Z4coldv".to_owned(),
        0,
        "selected".to_owned(),
        61,
        None,
    ));
    want.sort();
    assert_eq!(got, want, "{}", show(&o));
    assert_eq!(kernels[1].1, "_Z4coldv");
    // The stall reason's index is CUPTI's (the simulation's table), not a position.
    assert!(rec.pc_samples.iter().any(|p| p.stall_reason_index == 8));

    // The flamegraph's stacks: the program's call into CUDA, then the kernel,
    // the instruction, its line and the stall reason; both hot launches come
    // from one call site, so their samples add up.
    let folded = std::fs::read_to_string(dir.join("pc.folded")).unwrap();
    let lines: Vec<(&str, u64)> = folded
        .lines()
        .map(|l| {
            let (s, w) = l.rsplit_once(' ').unwrap();
            (s, w.parse().unwrap())
        })
        .collect();
    let tail = |s: &str| {
        s.split(';')
            .skip_while(|f| !f.starts_with("[GPU_Kernel]"))
            .collect::<Vec<_>>()
            .join(";")
    };
    let weight = |want: &str| -> u64 {
        lines
            .iter()
            .filter(|(s, _)| tail(s) == want)
            .map(|l| l.1)
            .sum()
    };
    assert_eq!(
        weight("[GPU_Kernel]hot;[GPU_PC]hot+0x40;[CUDA]/src/app/hot.cu:14;[Stall]long_scoreboard"),
        2 * 146,
        "{folded}"
    );
    assert_eq!(
        weight(
            "[GPU_Kernel]cold;[GPU_PC]cold+0x0;[CUDA]? (no line information: build with -lineinfo);[Stall]selected"
        ),
        61,
        "{folded}"
    );
    let total: u64 = lines.iter().map(|l| l.1).sum();
    assert_eq!(
        total,
        got.iter().map(|l| u64::from(l.4)).sum::<u64>(),
        "{folded}"
    );
    // Every sample is under the program's own frames (the `app` mode's function).
    assert!(lines.iter().all(|(s, _)| s.contains("main")), "{folded}");
    let svg = std::fs::read_to_string(dir.join("pc.svg")).unwrap();
    assert!(
        svg.contains("long_scoreboard"),
        "pc.svg has no stall reason"
    );
    let err = text(&o.stderr);
    assert!(
        err.contains(&format!(
            "{total} GPU PC samples: {total} charged to their launch's CPU stack"
        )),
        "{err}"
    );

    // `gpuperf report` of the kept recording: per kernel, its lines and stall
    // reasons, hottest first, in the JSON and in the text.
    let report = |format: &str| {
        let o = common::gpuperf_cmd()
            .arg("report")
            .arg(dir.join("raw"))
            .args(["--format", format])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", show(&o));
        text(&o.stdout)
    };
    let json: serde_json::Value = serde_json::from_str(&report("json")).unwrap();
    let pc = &json["pc_samples"];
    assert_eq!(pc["samples"], total, "{pc}");
    assert_eq!(pc["attributed"], total, "{pc}");
    assert_eq!(pc["kernels"][0]["kernel"], "hot", "{pc}");
    assert_eq!(pc["kernels"][0]["samples"], 2 * (25 + 146 + 73), "{pc}");
    assert_eq!(
        pc["kernels"][0]["lines"][0]["line"], "/src/app/hot.cu:14",
        "{pc}"
    );
    assert_eq!(pc["kernels"][0]["lines"][0]["samples"], 2 * 146, "{pc}");
    assert_eq!(
        pc["kernels"][0]["stalls"][0]["reason"], "long_scoreboard",
        "{pc}"
    );
    assert_eq!(pc["kernels"][1]["kernel"], "cold", "{pc}");
    let text_report = report("text");
    assert!(
        text_report.contains("GPU PC samples by kernel")
            && text_report.contains("line   /src/app/hot.cu:14")
            && text_report.contains("stall  long_scoreboard"),
        "{text_report}"
    );

    // The pprof profile, as `go tool pprof` reads it: the hot line first,
    // with as many samples as the report gives it.
    assert!(
        err.contains("wrote `pc.pb.gz`: PC-sample pprof profile"),
        "{err}"
    );
    let Some(mut go) = gpuperf_test_support::pprof::go_pprof() else {
        return;
    };
    let top = go
        .args(["-top", "-lines", "-nodecount=1"])
        .arg(dir.join("pc.pb.gz"))
        .output()
        .unwrap();
    let out = text(&top.stdout);
    assert!(top.status.success(), "{}", show(&top));
    let hottest = out
        .lines()
        .find(|l| l.contains("hot.cu:"))
        .unwrap_or_else(|| panic!("no CUDA line in go tool pprof -top -lines:\n{out}"));
    let f: Vec<&str> = hottest.split_whitespace().collect();
    assert_eq!(
        (f[0], *f.last().unwrap()),
        (&*(2 * 146).to_string(), "/src/app/hot.cu:14"),
        "{out}"
    );
    assert!(out.contains(&format!("of {total} total")), "{out}");
}

#[test]
fn record_pc_sampling_refused__one_line_says_what_to_do_and_the_rest_is_recorded() {
    let Some((o, rec, _)) = record_app(
        "pc-sampling-refused",
        &[("GPUSIM_PC_SAMPLING_PRIVILEGE", "0")],
    ) else {
        return;
    };
    let err = text(&o.stderr);
    assert_eq!(
        err.matches("NVreg_RestrictProfilingToAdminUsers=0").count(),
        1,
        "{err}"
    );
    assert!(err.contains("CUPTI_ERROR_INSUFFICIENT_PRIVILEGES"), "{err}");
    assert!(rec.pc_samples.is_empty());
    assert_eq!(rec.kernels().len(), 3);
    // The trace says so once, beside the simulation's note.
    assert_eq!(rec.notes.len(), 2, "{:?}", rec.notes);
    assert!(rec.notes[0].starts_with("simulated GPU"), "{:?}", rec.notes);
    assert!(
        rec.notes[1].starts_with("PC sampling refused (CUPTI_ERROR_INSUFFICIENT_PRIVILEGES)")
            && rec.notes[1].contains("run as root")
            && rec.notes[1].contains("NVreg_RestrictProfilingToAdminUsers=0"),
        "{:?}",
        rec.notes
    );
}

/// `gpuperf record --pc-sampling=5 FLAGS` of `pc_sampling ARGS` with `env`,
/// within 2 minutes, with in-process stacks, the raw traces kept, and the time
/// and PC-sample flamegraphs, the timeline and `pc.folded` written in the
/// directory returned.
fn record_with(
    name: &str,
    flags: &[&str],
    args: &[&str],
    env: &[(&str, &str)],
) -> Option<(std::process::Output, Recording, std::path::PathBuf)> {
    let cuda = cuda13()?;
    let exe = program(&cuda);
    let dir = work_dir(name);
    // A hang (a close that waits for a stuck CUPTI) ends the run.
    let mut r = Record::time_limited(&dir, 120)
        .flags([
            "--stacks",
            "inject",
            "--raw-dir",
            "raw",
            "--pc-sampling=5",
            "--pc-folded",
            "pc.folded",
            "-o",
            "time.svg",
            "-c",
            "gpu.json",
        ])
        .flags(flags)
        .cupti(&sim(&cuda).join("libcupti.so.13"))
        .env("GPUSIM_PC_SAMPLES", HOT);
    for (k, v) in env {
        r = r.env(k, v);
    }
    let o = r.program(&exe, args).output().unwrap();
    assert!(o.status.success(), "{}", show(&o));
    Some((o, Recording::open(&dir.join("raw")), dir))
}

/// The recorder's log lines of the recording kept in `dir/raw`.
fn recorder_log(dir: &std::path::Path) -> String {
    std::fs::read_dir(dir.join("raw"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect()
}

/// The JSON report of the recording kept in `dir/raw`.
fn report_json(dir: &std::path::Path) -> serde_json::Value {
    let o = common::gpuperf_cmd()
        .arg("report")
        .arg(dir.join("raw"))
        .args(["--format", "json"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", show(&o));
    serde_json::from_str(&text(&o.stdout)).unwrap()
}

#[test]
fn record_pc_sampling_window_2_of_6__only_the_windows_launches_have_samples_and_the_rest_are_counted()
 {
    // 10 rounds of (hot, cold, hot): 30 launches, 2 sampled in each stretch of 6.
    // No budget: a loaded machine's timing must not close a window here
    // (the budget has its own test).
    let Some((o, rec, dir)) = record_with(
        "pc-sampling-window",
        &["--pc-sampling-window=2/6", "--pc-sampling-budget=off"],
        &["app", "10"],
        &[],
    ) else {
        return;
    };
    rec.check_invariants();
    let mut launches: Vec<u32> = rec.kernels().iter().map(|k| k.correlation_id).collect();
    launches.sort_unstable();
    assert_eq!(launches.len(), 30);
    let window = gpuperf_merge::recording::env::PcWindow::parse("2/6").unwrap();
    let want: std::collections::BTreeSet<u32> = launches
        .iter()
        .enumerate()
        .filter(|(i, _)| window.contains(*i as u64))
        .map(|(_, c)| *c)
        .collect();
    assert_eq!(want.len(), 10);
    let got: std::collections::BTreeSet<Option<u32>> =
        rec.pc_samples.iter().map(|p| p.correlation_id).collect();
    let want: std::collections::BTreeSet<Option<u32>> = want.iter().copied().map(Some).collect();
    assert_eq!(got, want, "{}", show(&o));
    let note = rec
        .notes
        .iter()
        .find(|n| n.starts_with("PC sampling windows:"))
        .unwrap_or_else(|| panic!("{:?}", rec.notes));
    assert!(
        note.starts_with("PC sampling windows: 10 of 30 launches sampled (window 2/6)"),
        "{note}"
    );
    let counts: Vec<_> = rec.pc_launches.iter().map(|p| p.launches).collect();
    assert_eq!(
        counts,
        [gpuperf_merge::model::PcLaunches {
            sampled: 10,
            unsampled: 20
        }]
    );
    let err = text(&o.stderr);
    assert!(
        err.contains("; from 10 of 30 launches (the 20 outside the sampling windows have none; nothing is scaled up)"),
        "{err}"
    );
    // Every sampled launch gave samples.
    assert!(!err.contains("have no sample"), "{err}");
    let pc = &report_json(&dir)["pc_samples"];
    assert_eq!(pc["launches_sampled"], 10, "{pc}");
    assert_eq!(pc["launches_unsampled"], 20, "{pc}");
    let total: u64 = rec.pc_samples.iter().map(|p| u64::from(p.samples)).sum();
    assert_eq!(pc["samples"], total, "{pc}");
}

/// The launches a recording's PC samples name, and its `PC_LAUNCHES` counts.
fn sampled_launches(rec: &Recording) -> (std::collections::BTreeSet<u32>, (u64, u64)) {
    let got = rec
        .pc_samples
        .iter()
        .filter_map(|p| p.correlation_id)
        .collect();
    let counts = rec.pc_launches.iter().fold((0, 0), |(s, u), p| {
        (s + p.launches.sampled, u + p.launches.unsampled)
    });
    (got, counts)
}

#[test]
fn record_pc_sampling_budget__windows_stop_opening_once_sampled_launches_took_their_share() {
    // Each sampled launch costs 100 ms (simulated, as serialized launches cost
    // an H200 about 0.8 ms): the first window's 2 take 200 ms, over 1 % of any
    // run shorter than 20 s, so none of the other 4 windows (8 launches) opens
    // however busy the machine is.
    let cost = [("GPUSIM_PC_SERIALIZED_COST_US", "100000")];
    let Some((o, rec, dir)) = record_with(
        "pc-sampling-budget",
        &["--pc-sampling-window=2/6", "--pc-sampling-budget=1"],
        &["app", "10"],
        &cost,
    ) else {
        return;
    };
    rec.check_invariants();
    let mut launches: Vec<u32> = rec.kernels().iter().map(|k| k.correlation_id).collect();
    launches.sort_unstable();
    assert_eq!(launches.len(), 30);
    let (got, counts) = sampled_launches(&rec);
    assert_eq!(got, launches[..2].iter().copied().collect(), "{}", show(&o));
    assert_eq!(counts, (2, 28));
    let note = rec
        .notes
        .iter()
        .find(|n| n.contains("left unsampled"))
        .unwrap_or_else(|| panic!("{:?}", rec.notes));
    assert!(
        note.starts_with(
            "PC sampling budget: 8 launches in the windows were left unsampled to keep the sampled \
             launches within 1 % of the run's time (they took 0.2"
        ),
        "{note}"
    );
    assert!(text(&o.stderr).contains(note.as_str()), "{}", show(&o));
    assert_eq!(report_json(&dir)["pc_samples"]["launches_sampled"], 2);

    // The same run without a budget samples every window's launches.
    let Some((o, rec, _)) = record_with(
        "pc-sampling-budget-off",
        &["--pc-sampling-window=2/6", "--pc-sampling-budget=off"],
        &["app", "10"],
        &cost,
    ) else {
        return;
    };
    let (got, counts) = sampled_launches(&rec);
    assert_eq!((got.len(), counts), (10, (10, 20)), "{}", show(&o));
    assert!(
        !rec.notes.iter().any(|n| n.contains("left unsampled")),
        "{:?}",
        rec.notes
    );
}

#[test]
fn record_pc_sampling_continuous_window_2_of_6__every_windows_samples_kept_across_its_stop() {
    // Continuous mode with windows: each window's range ends at its Stop, when
    // CUPTI writes its records into the configured buffer (the simulation does
    // as cupti_pcsampling.h says); the next window's would replace them.
    let Some((o, rec, _dir)) = record_with(
        "pc-sampling-continuous-window",
        &[
            "--pc-sampling-mode=continuous",
            "--pc-sampling-window=2/6",
            "--pc-sampling-budget=off",
        ],
        &["app", "10"],
        &[],
    ) else {
        return;
    };
    assert!(rec.pc_samples.iter().all(|p| p.correlation_id.is_none()));
    // 10 rounds of (hot, cold, hot): a hot launch gives 244 samples, a cold one 61.
    let window = gpuperf_merge::recording::env::PcWindow::parse("2/6").unwrap();
    let want: u64 = (0..30u64)
        .filter(|&i| window.contains(i))
        .map(|i| if i % 3 == 1 { 61 } else { 244 })
        .sum();
    let total: u64 = rec.pc_samples.iter().map(|p| u64::from(p.samples)).sum();
    assert_eq!(total, want, "{}", show(&o));
    // The windows open at launch calls, and the context is not synchronized
    // there: the note says that queued kernels are sampled as they run.
    assert!(
        rec.notes
            .iter()
            .any(|n| n.starts_with("PC sampling in continuous mode")
                && n.contains("the windows (2/6) open and close at launch calls")),
        "{:?}",
        rec.notes
    );
}

#[test]
fn record_pc_sampling_continuous__samples_charged_to_their_kernel_only_and_the_summary_says_so() {
    let Some((o, rec, dir)) = record_with(
        "pc-sampling-continuous",
        &["--pc-sampling-mode=continuous"],
        &["app"],
        &[],
    ) else {
        return;
    };
    assert!(!rec.pc_samples.is_empty());
    assert!(rec.pc_samples.iter().all(|p| p.correlation_id.is_none()));
    // Two hot launches and one cold one, summed per PC (244 + 244 + 61).
    let total: u64 = rec.pc_samples.iter().map(|p| u64::from(p.samples)).sum();
    assert_eq!(total, 549);
    assert!(
        rec.notes
            .iter()
            .any(|n| n.starts_with("PC sampling in continuous mode")),
        "{:?}",
        rec.notes
    );
    assert!(
        !rec.notes
            .iter()
            .any(|n| n.starts_with("kernels serialized")),
        "{:?}",
        rec.notes
    );
    let folded = std::fs::read_to_string(dir.join("pc.folded")).unwrap();
    assert!(
        folded
            .lines()
            .all(|l| l.starts_with("[no CPU stack];[GPU_Kernel]")),
        "{folded}"
    );
    let err = text(&o.stderr);
    assert!(
        err.contains("549 naming no launch (continuous mode) charged to their kernel only")
            && err.contains("continuous mode: samples name no launch"),
        "{err}"
    );
    assert_eq!(report_json(&dir)["pc_samples"]["continuous"], true);
}

#[test]
fn record_pc_sampling__the_time_flamegraph_timeline_and_summary_say_kernels_were_serialized() {
    let Some((o, rec, dir)) = record_with("pc-sampling-serialized", &[], &["app"], &[]) else {
        return;
    };
    assert!(
        rec.notes
            .iter()
            .any(|n| n.starts_with("kernels serialized for PC sampling")),
        "{:?}",
        rec.notes
    );
    let svg = std::fs::read_to_string(dir.join("time.svg")).unwrap();
    assert!(
        svg.contains("kernels serialized for PC sampling"),
        "time.svg's title does not say so"
    );
    let timeline: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("gpu.json")).unwrap()).unwrap();
    let notes = timeline["otherData"]["notes"].to_string();
    assert!(
        notes.contains("kernels serialized for PC sampling"),
        "{notes}"
    );
    let err = text(&o.stderr);
    assert!(
        err.contains("kernels serialized for PC sampling")
            && err.contains("kernels serialized while sampled"),
        "{err}"
    );
    // The default window covers a run this short whole: 3 of 3 launches.
    assert!(err.contains("from 3 of 3 launches"), "{err}");
}

#[test]
fn record_pc_sampling_context_reset_during_a_read__no_call_on_the_dying_context_and_no_sample_lost()
{
    // Each GetData takes 400 ms (simulated) and the flush thread reads every
    // 50 ms (continuous mode: kernel-serialized ranges are read as each
    // launch returns), so when the program resets its device 100 ms after its
    // launches the flush thread is almost always inside a GetData on that
    // context.
    let Some((o, rec, _)) = record_with(
        "pc-sampling-reset",
        &["--pc-sampling-mode=continuous"],
        &["app-reset"],
        &[
            ("GPUSIM_PC_GETDATA_DELAY_MS", "400"),
            ("GPUPERF_FLUSH_MS", "50"),
        ],
    ) else {
        return;
    };
    assert_eq!(text(&o.stdout), "reset\n");
    let err = text(&o.stderr);
    assert!(!err.contains("on a destroyed context"), "{err}");
    assert_eq!(total(&rec), 549, "{}", show(&o));
}

/// A driver that stops answering as sampling is disabled at exit: the close
/// waited for `cuptiPCSamplingDisable` without bound, and the program hung in
/// `exit`. It now waits 10 s, then closes the trace with the samples read at
/// each launch's return, the kernels, and a note; the program exits as it
/// would have.
#[test]
fn record_pc_sampling_disable_stuck_at_exit__the_program_exits_with_what_was_read() {
    let Some((o, rec, _)) = record_with(
        "pc-sampling-disable-hang",
        &[],
        &["app"],
        &[("GPUSIM_PC_DISABLE_HANG_S", "600")],
    ) else {
        return;
    };
    assert_eq!(rec.kernels().len(), 3, "{}", show(&o));
    assert_eq!(total(&rec), 549, "{}", show(&o));
    assert!(
        rec.notes.iter().any(|n| n.starts_with(
            "the PC samples CUPTI still held are missing: it had been reading them for over 10 s"
        )),
        "{:?}",
        rec.notes
    );
    // Their lines were found before the last read began.
    assert_hot_samples_have_their_lines(&rec);
}

/// A CUPTI whose module calls take the lock it holds across its callbacks
/// (simulated; gpufl saw `cuptiGetCubinCrc` deadlock inside one): gpuperf
/// asks a module's CRC and its source lines at the flush, outside every
/// callback, so the program runs to its end and the samples keep their lines.
#[test]
fn record_pc_sampling_module_calls_that_deadlock_inside_callbacks__made_outside_them() {
    for (name, flags) in [
        ("pc-sampling-module-lock", &[][..]),
        (
            "pc-sampling-module-lock-continuous",
            &["--pc-sampling-mode=continuous"][..],
        ),
    ] {
        let Some((o, rec, _)) = record_with(
            name,
            flags,
            &["app"],
            &[("GPUSIM_PC_MODULE_CALLS_LOCK", "1")],
        ) else {
            return;
        };
        assert!(!text(&o.stderr).contains("deadlock"), "{}", show(&o));
        assert_eq!(total(&rec), 549, "{}", show(&o));
        assert_hot_samples_have_their_lines(&rec);
    }
}

/// PC records that name their module by a CRC no loaded cubin has
/// (simulated; gpufl saw a profiled module carry another CRC): their samples
/// are kept, without lines, and a note says why, not "no line information".
#[test]
fn record_pc_sampling_records_naming_a_module_never_loaded__kept_and_said() {
    // The not-issued counts (a subset of their base reason's) are not added.
    let Some((o, rec, _)) = record_with(
        "pc-sampling-unknown-module",
        &[],
        &["app"],
        &[
            ("GPUSIM_PC_RECORD_CRC_DIFFERS", "1"),
            ("GPUSIM_PC_NOT_ISSUED_PERCENT", "50"),
        ],
    ) else {
        return;
    };
    assert_eq!(total(&rec), 549 + 170, "{}", show(&o));
    assert!(rec.pc_samples.iter().all(|p| p.source.is_none()));
    let note = rec
        .notes
        .iter()
        .find(|n| n.contains("never gave"))
        .unwrap_or_else(|| panic!("{:?}", rec.notes));
    assert!(
        note.starts_with(
            "PC sampling: 549 samples name modules whose cubin CUPTI's MODULE_LOADED callbacks \
             never gave (cubin CRC 0x"
        ),
        "{note}"
    );
    assert_eq!(note.matches(", 0x").count(), 1, "two modules: {note}");
}

/// Every sample of `pc_sampling app`'s hot kernel (built with line
/// information) has its source line; the cold kernel's module has none.
fn assert_hot_samples_have_their_lines(rec: &Recording) {
    let mut hot = 0;
    for p in &rec.pc_samples {
        let source = p.source.map(|(f, l)| (rec.strings.get(f), l));
        match rec.strings.get(p.function) {
            "_Z3hotPf" => {
                hot += 1;
                assert!(
                    matches!(source, Some(("/src/app/hot.cu", 12..=15))),
                    "a hot kernel's sample has {source:?} for its line"
                );
            }
            _ => assert_eq!(source, None),
        }
    }
    assert!(hot > 0, "no sample of the hot kernel");
}

/// Sum of the samples of the records kept in the trace.
fn total(rec: &Recording) -> u64 {
    rec.pc_samples.iter().map(|p| u64::from(p.samples)).sum()
}

/// CUPTI's `*_not_issued` reasons are part of their base reason's samples
/// (those taken on cycles that issued nothing), as on Hopper: the trace keeps
/// them as CUPTI gave them, the flamegraph and totals count each sample once,
/// and the summary and report give the not-issued share.
#[test]
fn record_pc_sampling_not_issued__kept_counted_apart_and_not_added_to_the_totals() {
    let Some((o, rec, dir)) = record_with(
        "pc-sampling-not-issued",
        &[],
        &["app"],
        &[("GPUSIM_PC_NOT_ISSUED_PERCENT", "50")],
    ) else {
        return;
    };
    let (not_issued, issued): (Vec<_>, Vec<_>) = rec
        .pc_samples
        .iter()
        .partition(|p| rec.strings.get(p.stall_reason).ends_with("_not_issued"));
    let sum = |v: &[&gpuperf_merge::model::PcSample]| -> u64 {
        v.iter().map(|p| u64::from(p.samples)).sum()
    };
    // A hot launch: math_pipe_throttle 25 (12 not issued), long_scoreboard
    // 146 (73), selected 73 (no not-issued count); the cold one selected 61.
    assert_eq!(sum(&issued), 549, "{}", show(&o));
    assert_eq!(sum(&not_issued), 2 * (12 + 73), "{}", show(&o));
    let folded = std::fs::read_to_string(dir.join("pc.folded")).unwrap();
    assert!(!folded.contains("not_issued"), "{folded}");
    let weights: u64 = folded
        .lines()
        .map(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap())
        .sum();
    assert_eq!(weights, 549, "{folded}");
    let err = text(&o.stderr);
    assert!(
        err.contains("549 GPU PC samples: 549 charged to their launch's CPU stack")
            && err.contains("; 170 not-issued samples (CUPTI's *_not_issued reasons"),
        "{err}"
    );
    let pc = &report_json(&dir)["pc_samples"];
    assert_eq!(pc["samples"], 549, "{pc}");
    assert_eq!(pc["not_issued"], 170, "{pc}");
}

/// `cupti_pcsampling.h` does not say whether `cuptiPCSamplingGetData` returns
/// a range's records again after CUPTI wrote them into the configured
/// buffer at the range's end. Where it does (simulated), each record is
/// counted once, and the trace says how many came twice.
#[test]
fn record_pc_sampling_records_returned_twice__counted_once_and_said() {
    let Some((o, rec, dir)) = record_with(
        "pc-sampling-twice",
        &[],
        &["app", "10"],
        &[("GPUSIM_PC_RANGE_END_KEEPS", "1")],
    ) else {
        return;
    };
    // 10 rounds of (hot, cold, hot), each kernel one range.
    assert_eq!(total(&rec), 10 * (244 + 61 + 244), "{}", show(&o));
    // 3 + 1 + 3 PC records a round.
    assert!(
        rec.notes.iter().any(|n| n.starts_with(
            "PC sampling: 70 PC records that CUPTI returned twice (from the configured buffer \
             at a range's end, then from cuptiPCSamplingGetData) were counted once"
        )),
        "{:?}",
        rec.notes
    );
    // The log says where the records came from, for a real GPU's run.
    let log = recorder_log(&dir);
    assert!(
        log.contains(
            "PC sampling reads: 70 PC records from the configured buffer (30 ranges), 70 from "
        ) && log.contains("; 70 returned twice, 0 re-enables, 0 discarded by Disable"),
        "{log}"
    );
}

/// After a full hardware buffer CUPTI samples no more in the context until
/// sampling is disabled and enabled again (parcagpu saw it on real GPUs; the
/// simulation does so). The launch whose samples did not fit is counted as
/// dropped; every later one is sampled.
#[test]
fn record_pc_sampling_hardware_buffer_full__sampling_enabled_again_and_said() {
    let Some((o, rec, _)) = record_with(
        "pc-sampling-hw-full",
        &[],
        &["app", "10"],
        &[("GPUSIM_PC_HW_FULL_AT", "4")],
    ) else {
        return;
    };
    let launches: std::collections::BTreeSet<u32> =
        rec.kernels().iter().map(|k| k.correlation_id).collect();
    let sampled: std::collections::BTreeSet<u32> = rec
        .pc_samples
        .iter()
        .filter_map(|p| p.correlation_id)
        .collect();
    // The 4th launch (hot, 244 samples) filled the buffer; 29 of 30 sampled.
    assert_eq!(launches.len(), 30);
    assert_eq!(sampled.len(), 29, "{}", show(&o));
    assert_eq!(total(&rec), 10 * (244 + 61 + 244) - 244);
    assert!(
        rec.notes.iter().any(|n| n.starts_with(
            "PC sampling: 244 samples dropped by CUPTI, its hardware buffer full 1 times; \
             sampling was disabled and enabled again 1 times"
        )),
        "{:?}",
        rec.notes
    );
}

/// CUPTI before API 22 (CUDA 12.4) writes PC records without the launch's
/// correlation id, of another size: PC sampling is refused, said once, and
/// everything else recorded.
#[test]
fn record_pc_sampling_cupti_before_12_4__refused_with_the_reason_and_the_rest_recorded() {
    let Some((o, rec, _)) = record_with(
        "pc-sampling-old-cupti",
        &[],
        &["app"],
        &[("GPUSIM_CUPTI_VERSION", "21")],
    ) else {
        return;
    };
    assert_eq!(rec.kernels().len(), 3, "{}", show(&o));
    assert!(rec.pc_samples.is_empty());
    assert!(
        rec.notes.iter().any(|n| n.starts_with(
            "PC sampling unavailable: CUPTI API version 21 predates version 22 (CUDA 12.4)"
        )),
        "{:?}",
        rec.notes
    );
}

#[test]
fn diff_pc_folded_files__weights_are_samples_not_microseconds() {
    let dir = work_dir("pc-sampling-diff");
    let stack = "main;cudaLaunchKernel;[GPU_Kernel]hot;[GPU_PC]hot+0x40;[CUDA]/src/app/hot.cu:14";
    std::fs::write(
        dir.join("before.folded"),
        format!("{stack};[Stall]long_scoreboard 100\n{stack};[Stall]selected 50\n"),
    )
    .unwrap();
    std::fs::write(
        dir.join("after.folded"),
        format!("{stack};[Stall]long_scoreboard 300\n{stack};[Stall]selected 50\n"),
    )
    .unwrap();
    std::fs::write(
        dir.join("time.folded"),
        "main;cudaLaunchKernel;[GPU_Kernel]hot 40\n",
    )
    .unwrap();
    let diff = |args: &[&str]| {
        common::gpuperf_cmd()
            .current_dir(&dir)
            .arg("diff")
            .args(args)
            .output()
            .unwrap()
    };
    let o = diff(&["before.folded", "after.folded"]);
    assert!(o.status.success(), "{}", show(&o));
    let out = text(&o.stdout);
    let head = out.lines().next().unwrap_or_default();
    assert!(
        head.starts_with(
            "GPU PC samples by CPU stack: 150 samples in `before.folded`, 350 samples in `after.folded` (+200 samples)"
        ),
        "{out}"
    );
    assert!(!out.contains("µs"), "{out}");
    let svg = std::fs::read_to_string(dir.join("diff.svg")).unwrap();
    assert!(
        svg.contains("samples") && !svg.contains("µs"),
        "diff.svg says µs"
    );
    let o = diff(&["before.folded", "after.folded", "--format", "json"]);
    assert!(o.status.success(), "{}", show(&o));
    let json: serde_json::Value = serde_json::from_str(&text(&o.stdout)).unwrap();
    assert_eq!(json["unit"], "samples", "{json}");
    // PC samples and GPU time do not compare.
    let o = diff(&["before.folded", "time.folded"]);
    assert!(!o.status.success(), "{}", show(&o));
    assert!(text(&o.stderr).contains("GPU PC samples"), "{}", show(&o));
}

#[test]
fn record_pc_sampling_a_sampled_launch_without_samples__counted_in_the_summary_and_the_report() {
    // hot, cold, hot, all in the window; cold's weights are all 0, so it gets
    // no sample, as a kernel too short for the sampling period.
    let table = format!("{HOT};_Z4coldv=0x10:3:selected:0");
    let Some((o, rec, dir)) = record_with(
        "pc-sampling-launch-without-samples",
        &[],
        &["app"],
        &[("GPUSIM_PC_SAMPLES", table.as_str())],
    ) else {
        return;
    };
    let cold = rec
        .kernels()
        .iter()
        .find(|k| rec.label(k).contains("cold"))
        .map(|k| k.correlation_id)
        .expect("a cold kernel");
    assert!(!rec.pc_samples.is_empty());
    assert!(
        rec.pc_samples
            .iter()
            .all(|p| p.correlation_id != Some(cold)),
        "{}",
        show(&o)
    );
    let err = text(&o.stderr);
    assert!(
        err.contains("; from 3 of 3 launches")
            && err.contains("; 1 of the 3 sampled launches have no sample (a kernel too short"),
        "{err}"
    );
    let pc = &report_json(&dir)["pc_samples"];
    assert_eq!(pc["launches_sampled"], 3, "{pc}");
    assert_eq!(pc["launches_with_samples"], 2, "{pc}");
    assert_eq!(pc["kernels"][0]["launches"], 2, "{pc}");
}

/// `app-threads` recorded with `flags`: the first thread's hot kernel ends,
/// and before its launch returns the second thread launches the same kernel.
/// Checks the kernels sampled, the samples kept (244 a hot launch) and that
/// the second launch waited for the first, within the bound.
fn threads_run_keeps_each_sampled_kernels_records(name: &str, flags: &[&str], sampled: u64) {
    let Some((o, rec, dir)) = record_with(
        name,
        flags,
        &["app-threads"],
        &[("GPUSIM_PC_KERNEL_END_HOOK", "pc_kernel_end_hook")],
    ) else {
        return;
    };
    assert!(
        text(&o.stdout).contains(&format!("threads: {sampled} kernels ended")),
        "{}",
        show(&o)
    );
    let total: u64 = rec.pc_samples.iter().map(|p| u64::from(p.samples)).sum();
    assert_eq!(total, sampled * 244, "{}", show(&o));
    let pc = &report_json(&dir)["pc_samples"];
    assert_eq!(pc["launches_with_samples"], sampled, "{pc}");
    let log = recorder_log(&dir);
    assert!(
        log.contains("; 1 launches waited for another thread's sampled launch to return"),
        "{log}"
    );
    // It waited about 2 s (the first launch's hold), under the bound.
    assert!(
        !rec.notes.iter().any(|n| n.contains("went on")),
        "{:?}",
        rec.notes
    );
}

#[test]
fn record_pc_sampling_two_threads_launches_return_together__each_kernels_records_kept() {
    // Kernel-serialized: CUPTI writes each kernel's records into the one
    // configured buffer as it ends. The first hot kernel's range ends, and
    // before its launch returns a second thread's hot kernel could end too
    // and replace them (244 samples instead of 488): gpuperf holds a sampled
    // launch until the one before it in the context has returned and read
    // its records.
    threads_run_keeps_each_sampled_kernels_records("pc-sampling-threads", &[], 2);
}

#[test]
fn record_pc_sampling_window_ends_while_another_threads_kernel_is_sampled__its_records_kept() {
    // Windowed, kernel-serialized: the first hot launch is the window's
    // (1/2), the second thread's is past it and stops sampling, so its kernel
    // is not sampled. Its Stop ends the range, and CUPTI writes that range
    // into the configured buffer: had it come before the first launch
    // returned, the first kernel's records would be gone (0 samples). The
    // Stop waits as a sampled launch does.
    threads_run_keeps_each_sampled_kernels_records(
        "pc-sampling-threads-window",
        &["--pc-sampling-window=1/2", "--pc-sampling-budget=off"],
        1,
    );
}

/// The GPU check's `pc_vs_ncu` compares gpuperf with Nsight Compute's CSV
/// pages, which only a GPU machine prints: its readers are tested here on the
/// source page ncu 2025.3.1 printed on an H200 (with gpuperf's lines from the
/// same run) and on hand-made pages in other layouts (rows before the header,
/// other files' lines, older column names), so that a run on a GPU is not
/// wasted.
#[test]
fn gpu_check_pc_vs_ncu__reads_nsight_computes_csv_pages() {
    let o = Command::new("python3")
        .args(["-m", "unittest", "-v", "checklib.test_ncu"])
        .current_dir(gpuperf_test_support::repo().join("gpu"))
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", show(&o));
    // unittest reports on stderr; a run that found no test would pass too.
    let err = text(&o.stderr);
    assert!(
        err.contains("Ran 10 tests") && err.ends_with("OK\n"),
        "{err}"
    );
}
