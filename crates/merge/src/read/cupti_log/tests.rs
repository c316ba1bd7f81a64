//! Tests of the CUPTI text log reader: goldens, diagnostics and a fuzz property.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::PathBuf;

use proptest::prelude::*;

use super::items::{Items, clip, parse_u32};
use super::kinds::sync_type;
use super::*;
use crate::model::{Activity, ActivityKind, ApiDomain, MemcpyKind, Record};

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/cupti_log")
        .join(name)
}

fn read(name: &str) -> Vec<u8> {
    let path = data(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("failed to read `{}`: {e}", path.display()))
}

fn parse_str(text: &str) -> (CuptiLog, StringTable) {
    let mut strings = StringTable::new();
    let log = parse(text.as_bytes(), Path::new("t.log"), &mut strings);
    (log, strings)
}

/// One line per record with names resolved, then the counts and kept diagnostics.
fn render(log: &CuptiLog, strings: &StringTable) -> String {
    let mut out = crate::golden::render_records(&log.records, strings);
    let _ = writeln!(
        out,
        "# lines {} skipped {} diagnostics {}",
        log.lines, log.skipped_kinds, log.diagnostics.count
    );
    for d in &log.diagnostics.first {
        let _ = writeln!(out, "# {d}");
    }
    out
}

fn check_golden(expected: &Path, actual: &str) {
    crate::golden::check(expected, actual);
}

#[test]
fn reference_log_counts_match_its_readme() {
    let text = read("reference-cupti-log.txt");
    assert!(looks_like_cupti_log(&text[..256]));
    let mut strings = StringTable::new();
    let log = parse(&text, Path::new("reference-cupti-log.txt"), &mut strings);
    assert!(log.diagnostics.is_empty(), "{:?}", log.diagnostics);
    assert_eq!(log.lines, 10_317);
    assert_eq!(log.skipped_kinds, 72, "MEMORY2 records");

    let launch = strings
        .lookup("cudaLaunchKernel")
        .expect("cudaLaunchKernel interned");
    let (mut runtime, mut driver, mut launches, mut memcpy, mut overhead) = (0, 0, 0, 0, 0);
    let mut launch_corr: HashMap<u32, u32> = HashMap::new();
    let mut kernels: HashMap<&str, u32> = HashMap::new();
    let mut kernel_corr = Vec::new();
    let mut copies: HashMap<MemcpyKind, u32> = HashMap::new();
    let mut kernel_streams: HashMap<u32, u32> = HashMap::new();
    for r in &log.records {
        match r {
            Record::Api(a) => {
                assert_eq!(a.pid, 2_384_094);
                assert_eq!(a.tid, 2_830_733_312);
                assert!(a.start_ns <= a.end_ns && a.start_ns > 1_700_000_000_000_000_000);
                match a.domain {
                    ApiDomain::Runtime => runtime += 1,
                    ApiDomain::Driver => driver += 1,
                }
                if a.name == launch {
                    launches += 1;
                    *launch_corr.entry(a.correlation_id).or_default() += 1;
                }
            }
            Record::Activity(a) => {
                assert_eq!(a.pid, 2_384_094);
                assert_eq!(
                    (a.device, a.context, a.graph_id, a.graph_node_id),
                    (Some(0), 1, None, None)
                );
                match a.kind {
                    ActivityKind::Kernel { name, grid, block } => {
                        *kernels.entry(strings.get(name)).or_default() += 1;
                        kernel_corr.push(a.correlation_id);
                        assert!(grid.iter().chain(&block).all(|&d| d > 0), "{a:?}");
                        *kernel_streams.entry(a.stream.unwrap()).or_default() += 1;
                    }
                    ActivityKind::Memcpy { kind, bytes, .. } => {
                        assert_eq!(a.stream, Some(7));
                        memcpy += 1;
                        *copies.entry(kind).or_default() += 1;
                        assert!(bytes > 0);
                    }
                    other => panic!("unexpected {other:?}"),
                }
            }
            Record::Overhead(o) => {
                assert_eq!(o.pid, 2_384_094);
                overhead += 1;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(
        (runtime, driver, launches, memcpy, overhead),
        (2905, 117, 2115, 288, 14)
    );
    assert_eq!(log.records.len(), 2905 + 117 + 2115 + 288 + 14);
    assert_eq!(kernels.len(), 5, "{kernels:?}");
    assert!(kernels.values().all(|&n| n == 423), "{kernels:?}");
    assert_eq!(kernel_corr.len(), 2115);
    for c in kernel_corr {
        assert_eq!(
            launch_corr.get(&c),
            Some(&1),
            "kernel with correlation id {c}"
        );
    }
    assert_eq!(
        (copies[&MemcpyKind::HtoD], copies[&MemcpyKind::DtoH]),
        (147, 141)
    );
    // Three streams (three `cudaStreamCreate` calls), 705 kernels each.
    assert_eq!(
        kernel_streams,
        HashMap::from([(13, 705), (14, 705), (15, 705)])
    );

    // The first kernel, lines 375-377 of the file.
    let first = log.records.iter().find_map(|r| match r {
        Record::Activity(
            a @ Activity {
                kind: ActivityKind::Kernel { .. },
                ..
            },
        ) => Some(*a),
        _ => None,
    });
    let name = strings.intern("_Z12attentionQKTPfS_S_iii");
    assert_eq!(
        first,
        Some(Activity {
            pid: 2_384_094,
            start_ns: 1_761_183_645_346_438_172,
            end_ns: 1_761_183_645_346_759_804,
            correlation_id: 166,
            device: Some(0),
            context: 1,
            stream: Some(13),
            graph_id: None,
            graph_node_id: None,
            kind: ActivityKind::Kernel {
                name,
                grid: [32, 32, 8],
                block: [16, 16, 1]
            },
        })
    );
}

#[test]
fn small_log_matches_golden_file() {
    let text = read("small.log");
    let mut strings = StringTable::new();
    let log = parse(&text, Path::new("small.log"), &mut strings);
    check_golden(&data("small.expected.txt"), &render(&log, &strings));
}

#[test]
fn small_log_reads_the_same_with_crlf() {
    let text = String::from_utf8(read("small.log")).unwrap();
    let (lf, lf_strings) = parse_str(&text);
    let (crlf, crlf_strings) = parse_str(&text.replace('\n', "\r\n"));
    assert!(crlf.diagnostics.is_empty(), "{:?}", crlf.diagnostics);
    assert_eq!(render(&crlf, &crlf_strings), render(&lf, &lf_strings));
}

#[test]
fn small_log_fields() {
    let (log, strings) = parse_str(&String::from_utf8(read("small.log")).unwrap());
    assert!(log.diagnostics.is_empty(), "{:?}", log.diagnostics);
    assert_eq!(log.skipped_kinds, 3);
    let Some(Record::Api(cu_init)) = log.records.first() else {
        panic!("{:?}", log.records)
    };
    assert_eq!(cu_init.tid, (5_000_000_001u64 & 0xffff_ffff) as u32);
    assert_eq!(cu_init.domain, ApiDomain::Driver);
    let activities: Vec<&Activity> = log
        .records
        .iter()
        .filter_map(|r| {
            if let Record::Activity(a) = r {
                Some(a)
            } else {
                None
            }
        })
        .collect();
    let kernel = activities.iter().find(|a| a.correlation_id == 5).unwrap();
    let ActivityKind::Kernel { name, .. } = kernel.kind else {
        panic!("{kernel:?}")
    };
    assert_eq!(
        strings.get(name),
        "void gemm<float, (int)128>(float const*, float*, int)"
    );
    let graph = activities.iter().find(|a| a.correlation_id == 6).unwrap();
    assert_eq!(
        (graph.device, graph.graph_id, graph.graph_node_id),
        (Some(1), Some(3), Some(4_294_967_297))
    );
    let ctx_sync = activities.iter().find(|a| a.correlation_id == 10).unwrap();
    assert_eq!(
        (ctx_sync.stream, ctx_sync.kind),
        (
            None,
            ActivityKind::Sync {
                sync_type: 4,
                wait: None
            }
        )
    );
    let api = |c: u32| {
        log.records.iter().find_map(|r| match r {
            Record::Api(a) if a.correlation_id == c => Some(strings.get(a.name)),
            _ => None,
        })
    };
    assert_eq!(api(5), Some("cudaLaunchKernel"));
    assert_eq!(api(6), Some("cudaGraphLaunch"));
}

#[test]
fn sniffs_logs_and_nothing_else() {
    assert!(looks_like_cupti_log(b"RUNTIME [ 1, 2 ] duration 1"));
    assert!(looks_like_cupti_log(b"\xef\xbb\xbf\r\n\nDRIVER [ 1, 2 ]"));
    assert!(looks_like_cupti_log(b"MEMORY2 [ 1 ] memoryOperationType"));
    assert!(looks_like_cupti_log(b"ENVIRONMENT: kind=SPEED, deviceId 0"));
    assert!(!looks_like_cupti_log(b""));
    assert!(!looks_like_cupti_log(b"RUNTIME"));
    assert!(!looks_like_cupti_log(b"GPUPERF\0\x01\x00"));
    assert!(!looks_like_cupti_log(b"1761183645 app 42 42 0 main;foo 1"));
    assert!(!looks_like_cupti_log(b"\tgrid [ 1, 1, 1 ]"));
    assert!(!looks_like_cupti_log(b"RUNTIMES [ 1, 2 ]"));
}

/// `(input, records, [(line, message fragment)])`: every diagnostic, in order.
type Case = (&'static str, usize, &'static [(u64, &'static str)]);

const KERNEL: &str =
    "CONCURRENT_KERNEL [ 10, 20 ] duration 10, \"_Z1kv\", correlationId 5, cacheConfigRequested 0";
const GRID: &str = "\tgrid [ 1, 2, 3 ], block [ 4, 5, 6 ], cluster [ 0, 0, 0 ], sharedMemory (static 0, dynamic 0)";
const DEVICE: &str = "\tdeviceId 0, contextId 1, streamId 7, graphId 0, graphNodeId 0, channelId 1, channelType COMPUTE";
const API: &str = "RUNTIME [ 1, 2 ] duration 1, \"cudaLaunchKernel_v7000\", cbid 211, processId 9, threadId 8, correlationId 5";

fn check_cases(cases: &[Case]) {
    for &(input, records, want) in cases {
        let (log, _) = parse_str(input);
        let got: Vec<(String, String)> = log
            .diagnostics
            .first
            .iter()
            .map(|d| (d.location.clone(), d.message.clone()))
            .collect();
        assert_eq!(log.records.len(), records, "records of {input:?}: {got:?}");
        assert_eq!(
            log.diagnostics.count,
            want.len() as u64,
            "diagnostics of {input:?}: {got:?}"
        );
        for ((loc, msg), &(line, frag)) in got.iter().zip(want) {
            assert_eq!(loc, &format!("t.log:{line}"), "{input:?}: {msg}");
            assert!(msg.contains(frag), "{input:?}: {msg:?} lacks {frag:?}");
        }
    }
}

#[test]
fn truncated_lines_are_counted() {
    check_cases(&[
        (
            "RUNTIME [ 1, 2 ] duration 1, \"cudaFree_v3020\", cbid 22, proc",
            0,
            &[(1, "missing `correlationId`")],
        ),
        (
            "RUNTIME [ 1, 2 ] duration 1, \"cudaFr",
            0,
            &[(1, "unterminated quoted name")],
        ),
        ("RUNTIME [ 1, 2", 0, &[(1, "missing `]`")]),
        ("RUNTIME [ 1", 0, &[(1, "missing `]`")]),
        ("RUNTIME", 0, &[(1, "missing `[")]),
        (
            "OVERHEAD [ 1, 2 ] duration 1, THREAD, id 3, correlation id 4",
            0,
            &[(1, "missing overhead kind")],
        ),
        (
            "MEMCPY \"HtoD\" [ 1, 2 ] duration 1, correlationId 3\n\tdeviceId 0",
            0,
            &[(1, "missing `size`")],
        ),
    ]);
}

#[test]
fn garbage_numbers_are_counted() {
    check_cases(&[
        (
            "RUNTIME [ 1x, 2 ] duration 1, \"f\", correlationId 3",
            0,
            &[(1, "bad start timestamp `1x`")],
        ),
        (
            "RUNTIME [ 1, -2 ] duration 1, \"f\", correlationId 3",
            0,
            &[(1, "bad end timestamp `-2`")],
        ),
        (
            "RUNTIME [ 1 ] duration 1, \"f\", correlationId 3",
            0,
            &[(1, "bad end timestamp ``")],
        ),
        (
            "RUNTIME [ 1, 2, 3 ] duration 1, \"f\", correlationId 3",
            0,
            &[(1, "more than two timestamps")],
        ),
        (
            "RUNTIME [ 1, 2 ] duration 1, \"f\", cbid zz, correlationId 3",
            0,
            &[(1, "bad `cbid` value `zz`")],
        ),
        (
            "RUNTIME [ 1, 2 ] duration 1, \"f\", correlationId 99999999999",
            0,
            &[(1, "bad `correlationId`")],
        ),
        (
            "RUNTIME [ 99999999999999999999, 2 ] \"f\", correlationId 1",
            0,
            &[(1, "bad start timestamp")],
        ),
        (
            concat_lines(&[KERNEL, "\tgrid [ 1, 2 ], block [ 1, 1, 1 ]", DEVICE]),
            1,
            &[(2, "bad `grid` value")],
        ),
        (
            concat_lines(&[KERNEL, GRID, "\tdeviceId x, contextId 1, streamId 7"]),
            1,
            &[(3, "bad `deviceId`")],
        ),
        (
            concat_lines(&[KERNEL, GRID, "\tdeviceId 0, streamId 7"]),
            1,
            &[(3, "missing `contextId`")],
        ),
    ]);
}

/// Leaks the joined lines: test inputs must be `'static` to sit in a [`Case`] table.
fn concat_lines(lines: &[&str]) -> &'static str {
    Box::leak(lines.join("\n").into_boxed_str())
}

#[test]
fn unknown_kinds_and_stray_lines_are_counted() {
    check_cases(&[
        // The unknown record's own continuation lines add nothing.
        (
            concat_lines(&["FOO [ 1, 2 ] duration 1", GRID, DEVICE, API]),
            1,
            &[(1, "unknown record kind `FOO`")],
        ),
        (
            concat_lines(&[API, DEVICE, "hello world"]),
            1,
            &[(2, "without a record")],
        ),
        // A record-shaped line of an unknown kind is a diagnostic, not tool output.
        (
            concat_lines(&[API, "NEW_KIND [ 1, 2 ] duration 1"]),
            1,
            &[(2, "unknown record kind `NEW_KIND`")],
        ),
        (
            concat_lines(&[DEVICE, API]),
            1,
            &[(1, "continuation line without a record")],
        ),
        (
            concat_lines(&[KERNEL, GRID, "\tbogus 1, 2", DEVICE]),
            1,
            &[(3, "unexpected continuation line")],
        ),
        (
            concat_lines(&[
                "MEMSET [ 1, 2 ] duration 1, value 0, size 8, correlationId 3",
                GRID,
                DEVICE,
            ]),
            1,
            &[(2, "unexpected")],
        ),
        (
            "MEMCPY \"XtoY\" [ 1, 2 ] duration 1, size 8, correlationId 3\n\tdeviceId 0, contextId 1, streamId 2",
            1,
            &[(1, "unknown memcpy kind `XtoY`")],
        ),
        // Known kinds the printer writes and gpuperf skips, with odd continuation lines.
        (
            "JIT [ 1, 2 ] duration 1, deviceId 0\njitEntryType PTX, jitOperationType LOAD\n cacheSize 0, cachePath x",
            0,
            &[],
        ),
        ("  <unknown>\nNAME CONTEXT 1 DEVICE id 0, name ctx", 0, &[]),
        (
            concat_lines(&[KERNEL, GRID, DEVICE, "  <unknown>", API]),
            2,
            &[],
        ),
        ("\n\n   \n\t\n", 0, &[]),
    ]);
}

#[test]
fn cut_off_records_are_kept_and_counted() {
    let cases: &[Case] = &[
        (concat_lines(&[API, KERNEL]), 2, &[(2, "no `grid`")]),
        (
            concat_lines(&[API, KERNEL, GRID]),
            2,
            &[(2, "no `deviceId`")],
        ),
        (
            concat_lines(&[API, KERNEL, "\tgrid [ 1, 2, 3 ], blo"]),
            2,
            &[(3, "missing `block`"), (2, "no `deviceId`")],
        ),
        (
            concat_lines(&[API, "CONCURRENT_KERNEL [ 10, 20 ] duration 10, \"_Z1k"]),
            1,
            &[(2, "unterminated")],
        ),
        (concat_lines(&[KERNEL, API]), 2, &[(1, "no `grid`")]),
        (
            concat_lines(&[
                API,
                "MEMSET [ 1, 2 ] duration 1, value 0, size 8, correlationId 3",
            ]),
            2,
            &[(2, "no `deviceId`")],
        ),
    ];
    check_cases(cases);
    let (log, _) = parse_str(concat_lines(&[API, KERNEL, GRID]));
    let Some(Record::Activity(a)) = log.records.get(1) else {
        panic!("{:?}", log.records)
    };
    assert_eq!(
        (a.pid, a.device, a.context, a.stream),
        (9, Some(0), 0, Some(0))
    );
    assert_eq!(
        a.kind,
        ActivityKind::Kernel {
            name: a_name(&log),
            grid: [1, 2, 3],
            block: [4, 5, 6]
        }
    );
}

fn a_name(log: &CuptiLog) -> crate::model::StringId {
    match log.records.get(1) {
        Some(Record::Activity(Activity {
            kind: ActivityKind::Kernel { name, .. },
            ..
        })) => *name,
        other => panic!("{other:?}"),
    }
}

#[test]
fn empty_and_binary_input() {
    let (log, _) = parse_str("");
    assert_eq!(log, CuptiLog::default());
    let (log, _) = parse_str("\n");
    assert_eq!(
        (log.lines, log.records.len(), log.diagnostics.count),
        (1, 0, 0)
    );

    let garbage: Vec<u8> = (0..=255u8).cycle().take(4096).collect();
    let mut strings = StringTable::new();
    let log = parse(&garbage, Path::new("g.bin"), &mut strings);
    assert_eq!(log.lines, 17, "16 newlines, no newline at the end");
    assert!(log.records.is_empty());
    assert!(log.diagnostics.count + log.other_lines >= 1);
    assert!(
        log.diagnostics
            .first
            .iter()
            .all(|d| d.location.starts_with("g.bin:"))
    );
    assert!(!looks_like_cupti_log(&garbage));
}

#[test]
fn invalid_utf8_names_are_read_lossily() {
    let mut text =
        b"CONCURRENT_KERNEL [ 1, 2 ] duration 1, \"_Z1k\xff\xfe\", correlationId 5\r\n".to_vec();
    text.extend_from_slice(GRID.as_bytes());
    text.extend_from_slice(b"\r\n");
    text.extend_from_slice(DEVICE.as_bytes());
    let mut strings = StringTable::new();
    let log = parse(&text, Path::new("u.log"), &mut strings);
    assert!(log.diagnostics.is_empty(), "{:?}", log.diagnostics);
    let Some(Record::Activity(Activity {
        kind: ActivityKind::Kernel { name, .. },
        stream: Some(7),
        ..
    })) = log.records.first()
    else {
        panic!("{:?}", log.records)
    };
    assert_eq!(strings.get(*name), "_Z1k\u{fffd}\u{fffd}");
}

#[test]
fn pid_comes_from_first_api_record() {
    // No API record: pid 0.
    let (log, _) = parse_str(concat_lines(&[KERNEL, GRID, DEVICE]));
    assert!(matches!(
        log.records.as_slice(),
        [Record::Activity(Activity { pid: 0, .. })]
    ));
    // An API record without processId gets the first one seen, even a later one.
    let no_pid = "DRIVER [ 1, 2 ] duration 1, \"cuInit\", cbid 1, threadId 3, correlationId 1";
    let (log, _) = parse_str(concat_lines(&[KERNEL, GRID, DEVICE, no_pid, API]));
    assert!(log.diagnostics.is_empty(), "{:?}", log.diagnostics);
    let pids: Vec<u32> = log
        .records
        .iter()
        .map(|r| match r {
            Record::Api(a) => a.pid,
            Record::Activity(a) => a.pid,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(pids, [9, 9, 9]);
}

#[test]
fn quoted_names_keep_commas_quotes_and_brackets() {
    let line = "CONCURRENT_KERNEL [ 1, 2 ] duration 1, \"void f<\"a\", [3], (4)>(int, char)\" , correlationId 5";
    let (log, strings) = parse_str(concat_lines(&[line, GRID, DEVICE]));
    assert!(log.diagnostics.is_empty(), "{:?}", log.diagnostics);
    let Some(Record::Activity(Activity {
        kind: ActivityKind::Kernel { name, .. },
        correlation_id: 5,
        ..
    })) = log.records.first()
    else {
        panic!("{:?}", log.records)
    };
    assert_eq!(strings.get(*name), "void f<\"a\", [3], (4)>(int, char)");
}

#[test]
fn item_split_respects_depth() {
    let items = Items::parse(" grid [ 32, 32, 8 ], sharedMemory (static 0, dynamic 0), pc 0,, x");
    assert_eq!(
        items.pairs.as_slice(),
        [
            ("grid", "[ 32, 32, 8 ]"),
            ("sharedMemory", "(static 0, dynamic 0)"),
            ("pc", "0"),
            ("x", "")
        ]
    );
    assert_eq!(sync_type("STREAM_WAIT_EVENT"), 2);
    assert_eq!(sync_type("3"), 3);
    assert_eq!(sync_type("<unknown>"), 0);
    assert_eq!(parse_u32("-1"), Some(u32::MAX));
    assert_eq!(parse_u32("4294967296"), None);
    assert_eq!(clip(&"é".repeat(50)).chars().count(), 43);
}

/// The reference injection's own stdout lines, as its users' saved logs hold them.
const TOOL_LINES: &[&str] = &[
    "Calling CUPTI API: cuptiSubscribe(&subscriberHandle, (CUpti_CallbackFunc)CallbackHandler, NULL)",
    "Enabling CUPTI_ACTIVITY_KIND_MEMCPY.",
    "Enabling CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL.",
    "Found 2 devices",
    "Device Name: NVIDIA H100 80GB HBM3",
];

/// The reference log as two devices of one process saved it: device 1 repeats
/// device 0's records with other correlation ids, and the tool's lines come
/// before, between (also inside a kernel record) and after the records.
fn two_device_log() -> (String, u64) {
    let text = String::from_utf8(read("reference-cupti-log.txt")).unwrap();
    let mut out = String::new();
    let mut tool_lines = 0u64;
    let mut tool = |out: &mut String, i: usize| {
        out.push_str(TOOL_LINES[i % TOOL_LINES.len()]);
        out.push('\n');
        tool_lines += 1;
    };
    for i in 0..TOOL_LINES.len() {
        tool(&mut out, i);
    }
    for device in 0..2u32 {
        let mut kernels = 0;
        for line in text.lines() {
            let mut line = line.to_owned();
            if device == 1 {
                line = line.replace("deviceId 0,", "deviceId 1,");
                if let Some(at) = line.find("correlationId ") {
                    let digits = &line[at + 14..];
                    let end = digits
                        .find(|c: char| !c.is_ascii_digit())
                        .unwrap_or(digits.len());
                    let corr: u32 = digits[..end].parse().unwrap();
                    line = format!(
                        "{}correlationId {}{}",
                        &line[..at],
                        corr + 1_000_000,
                        &digits[end..]
                    );
                }
            }
            out.push_str(&line);
            out.push('\n');
            if line.starts_with("CONCURRENT_KERNEL ") {
                kernels += 1;
                // Another thread's output between a kernel's header and its lines.
                if kernels % 500 == 0 {
                    tool(&mut out, kernels);
                }
            }
        }
        tool(&mut out, 0);
    }
    tool(&mut out, 1);
    (out, tool_lines)
}

#[test]
fn two_device_log_with_tool_lines_is_detected_by_its_records_and_lines_counted() {
    let (text, tool_lines) = two_device_log();
    assert!(text.starts_with("Calling CUPTI API: "));
    // The first line is not a record: detection looks for records.
    assert!(looks_like_cupti_log(&text.as_bytes()[..4096]));
    assert!(!looks_like_cupti_log(TOOL_LINES.join("\n").as_bytes()));

    let mut strings = StringTable::new();
    let log = parse(text.as_bytes(), Path::new("two.log"), &mut strings);
    assert!(log.diagnostics.is_empty(), "{:?}", log.diagnostics);
    assert_eq!(log.other_lines, tool_lines);

    let (one, _) = parse_str(&String::from_utf8(read("reference-cupti-log.txt")).unwrap());
    assert_eq!(log.records.len(), 2 * one.records.len());
    // Every kernel keeps its grid and device lines, on both devices.
    let mut per_device = [0u32; 2];
    for r in &log.records {
        if let Record::Activity(
            a @ Activity {
                kind: ActivityKind::Kernel { grid, .. },
                ..
            },
        ) = r
        {
            assert!(grid.iter().all(|&g| g > 0), "{a:?}");
            assert!((13..=15).contains(&a.stream.unwrap()), "{a:?}");
            per_device[a.device.unwrap() as usize] += 1;
        }
    }
    assert_eq!(per_device, [2115, 2115]);
}

fn never_panics(bytes: &[u8]) -> Result<(), TestCaseError> {
    let _ = looks_like_cupti_log(bytes);
    let mut strings = StringTable::new();
    let log = parse(bytes, Path::new("p.log"), &mut strings);
    prop_assert!(log.records.len() as u64 <= log.lines);
    prop_assert!(log.diagnostics.first.len() as u64 <= log.diagnostics.count);
    prop_assert!(log.diagnostics.count + log.skipped_kinds <= log.lines * 2);
    Ok(())
}

/// Pieces that make mutations reach the parser's edge cases.
const TOKENS: &[&str] = &[
    "[",
    "]",
    "(",
    ")",
    "\"",
    ",",
    " ",
    "\t",
    "\n",
    "\r\n",
    "-1",
    "99999999999999999999",
    "correlationId ",
    "grid [ 1, 2, 3 ]",
    "deviceId 0",
    "RUNTIME ",
    "CONCURRENT_KERNEL ",
    "MEMORY2 ",
    "  ",
    "\u{fffd}",
    "\u{0}",
];

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        never_panics(&bytes)?;
    }

    #[test]
    fn mutated_logs_never_panic(
        edits in proptest::collection::vec(
            (any::<proptest::sample::Index>(), 0u8..8, proptest::collection::vec(any::<u8>(), 0..8),
             any::<proptest::sample::Index>()),
            0..12,
        )
    ) {
        let mut text = include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/cupti_log/small.log")).to_vec();
        crate::golden::apply_edits(&mut text, edits, TOKENS);
        never_panics(&text)?;
    }
}
