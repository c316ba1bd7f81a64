//! Round trips, cut-off and malformed files, and the byte layout of each record.

use proptest::prelude::*;

use super::*;
use std::io;
use std::path::Path;

use crate::error::{Error, Result};
use crate::model::{
    Activity, ActivityKind, ApiCall, ApiDomain, Autograd, AutogradTag, CallStack, Device,
    DropSource, Dropped, GraphNode, MemcpyKind, Module, Note, NvtxKind, NvtxRange, Origin,
    Overhead, PeerDevices, Process, ProcessOrigin, Record, Stack, StackEnd, StackFrame, StringId,
    StringTable, ThreadName,
};

pub(crate) fn sample(strings: &mut StringTable) -> Vec<Record> {
    let k = strings.intern("_Z6matmulPfS_S_i");
    let api = strings.intern("cudaLaunchKernel");
    let ovh = strings.intern("CUPTI_INSTRUMENTATION");
    vec![
        Record::Process(Process {
            pid: 42,
            ppid: Some(1),
            exe: "/bin/app".into(),
            start_ns: 10,
            start_realtime_ns: Some(20),
        }),
        Record::Device(Device {
            pid: 42,
            id: 0,
            name: "NVIDIA H100".into(),
            compute_capability: (9, 0),
        }),
        Record::Api(ApiCall {
            pid: 42,
            tid: 43,
            start_ns: 100,
            end_ns: 150,
            correlation_id: 7,
            cbid: 211,
            domain: ApiDomain::Runtime,
            name: api,
        }),
        Record::Activity(Activity {
            pid: 42,
            start_ns: 200,
            end_ns: 1200,
            correlation_id: 7,
            device: Some(0),
            context: 1,
            stream: Some(13),
            graph_id: Some(3),
            graph_node_id: Some(1 << 40),
            kind: ActivityKind::Kernel {
                name: k,
                grid: [1 << 20, 2, 3],
                block: [256, 1, 1],
            },
        }),
        Record::Activity(Activity {
            pid: 42,
            start_ns: 300,
            end_ns: 400,
            correlation_id: 8,
            device: Some(1),
            context: 1,
            stream: Some(7),
            graph_id: None,
            graph_node_id: None,
            kind: ActivityKind::Memcpy {
                kind: MemcpyKind::DtoH,
                bytes: 4096,
                peer: None,
            },
        }),
        Record::Activity(Activity {
            pid: 42,
            start_ns: 410,
            end_ns: 480,
            correlation_id: 11,
            device: Some(1),
            context: 1,
            stream: Some(7),
            graph_id: None,
            graph_node_id: None,
            kind: ActivityKind::Memcpy {
                kind: MemcpyKind::PtoP,
                bytes: 8192,
                peer: Some(PeerDevices { src: 1, dst: 3 }),
            },
        }),
        Record::Activity(Activity {
            pid: 42,
            start_ns: 500,
            end_ns: 600,
            correlation_id: 9,
            device: Some(0),
            context: 1,
            stream: Some(7),
            graph_id: None,
            graph_node_id: None,
            kind: ActivityKind::Memset {
                bytes: 64,
                value: 0xff,
            },
        }),
        Record::Activity(Activity {
            pid: 42,
            start_ns: 700,
            end_ns: 900,
            correlation_id: 10,
            device: Some(0),
            context: 1,
            stream: Some(7),
            graph_id: None,
            graph_node_id: None,
            kind: ActivityKind::Sync {
                sync_type: 3,
                wait: None,
            },
        }),
        // cuCtxSynchronize in a context the recorder never saw: no stream,
        // no device.
        Record::Activity(Activity {
            pid: 42,
            start_ns: 910,
            end_ns: 990,
            correlation_id: 12,
            device: None,
            context: 9,
            stream: None,
            graph_id: None,
            graph_node_id: None,
            kind: ActivityKind::Sync {
                sync_type: 4,
                wait: None,
            },
        }),
        Record::Dropped(Dropped {
            pid: 42,
            source: DropSource::CuptiActivity,
            count: 5,
        }),
        Record::Dropped(Dropped {
            pid: 42,
            source: DropSource::Incomplete,
            count: 2,
        }),
        Record::Overhead(Overhead {
            pid: 42,
            kind: ovh,
            correlation_id: Some(77),
            start_ns: 1,
            end_ns: 2,
        }),
        Record::Note(Note {
            pid: 42,
            text: "cuptiSubscribe failed".into(),
        }),
    ]
}

fn encode(recs: &[Record], strings: &StringTable) -> Vec<u8> {
    let mut w = Writer::new(Vec::new()).unwrap();
    for r in recs {
        w.write(r, strings).unwrap();
    }
    w.into_inner()
}

fn decode(bytes: &[u8]) -> (Vec<Record>, StringTable, ReadStats) {
    let mut strings = StringTable::new();
    let mut out = Vec::new();
    let stats = read(bytes, Path::new("t.gpt"), &mut strings, &mut |r, _| {
        out.push(r.clone())
    })
    .unwrap();
    (out, strings, stats)
}

#[test]
fn a_recording_that_closes_is_unclosed_until_its_closed_record() {
    let strings = StringTable::new();
    let note = Record::Note(Note {
        pid: 7,
        text: "after".into(),
    });
    // Old writers set no FLAG_CLOSES: never reported as unclosed.
    let old = Writer::new(Vec::new()).unwrap().into_inner();
    assert!(!decode(&old).2.unclosed());
    // Killed before the exit flush.
    let mut w = Writer::with_flags(Vec::new(), FLAG_CLOSES | FLAG_STACKS).unwrap();
    w.write(&note, &strings).unwrap();
    let cut = w.into_inner();
    let (recs, _, stats) = decode(&cut);
    assert_eq!((recs.len(), stats.closed_at), (1, None));
    assert!(stats.unclosed());
    // Closed, then a note on what came after: closed, and nothing lost.
    let mut w = Writer::with_flags(Vec::new(), FLAG_CLOSES).unwrap();
    w.write_closed(1234).unwrap();
    w.write(&note, &strings).unwrap();
    let (recs, _, stats) = decode(&w.into_inner());
    assert_eq!(recs.len(), 1, "{recs:?}");
    assert_eq!(stats.closed_at, Some(1234));
    assert_eq!(stats.records, 1);
    assert!(!stats.unclosed());
    // A CLOSED record too short for its time is malformed, not a close.
    let mut bad = Writer::with_flags(Vec::new(), FLAG_CLOSES)
        .unwrap()
        .into_inner();
    bad.extend_from_slice(&[kind::CLOSED, 0, 4, 0, 1, 2, 3, 4]);
    let (_, _, stats) = decode(&bad);
    assert!(stats.unclosed());
    assert_eq!(stats.diagnostics.count, 1, "{:?}", stats.diagnostics);
}

fn names(recs: &[Record], strings: &StringTable) -> Vec<String> {
    recs.iter()
        .map(|r| match r {
            Record::Api(a) => strings.get(a.name).to_owned(),
            Record::Activity(Activity {
                kind: ActivityKind::Kernel { name, .. },
                ..
            }) => strings.get(*name).to_owned(),
            Record::Overhead(o) => strings.get(o.kind).to_owned(),
            _ => String::new(),
        })
        .collect()
}

#[test]
fn round_trip_keeps_every_field() {
    let mut strings = StringTable::new();
    let recs = sample(&mut strings);
    let bytes = encode(&recs, &strings);
    let (back, bstrings, stats) = decode(&bytes);
    assert!(stats.diagnostics.is_empty(), "{:?}", stats.diagnostics);
    assert_eq!(stats.truncated_at, None);
    assert_eq!(stats.records, recs.len() as u64);
    assert_eq!(names(&back, &bstrings), names(&recs, &strings));
    // Ids differ between tables; compare with names blanked.
    let blank = |rs: &[Record]| -> Vec<Record> {
        rs.iter()
            .cloned()
            .map(|mut r| {
                match &mut r {
                    Record::Api(a) => a.name = StringId(0),
                    Record::Activity(Activity {
                        kind: ActivityKind::Kernel { name, .. },
                        ..
                    }) => *name = StringId(0),
                    Record::Overhead(o) => o.kind = StringId(0),
                    _ => {}
                }
                r
            })
            .collect()
    };
    assert_eq!(blank(&back), blank(&recs));
}

#[test]
fn kernel_record_is_at_most_64_bytes() {
    let mut strings = StringTable::new();
    let recs = sample(&mut strings);
    let mut w = Writer::new(Vec::new()).unwrap();
    w.write(&recs[3], &strings).unwrap();
    let before = w.into_inner().len();
    let mut w = Writer::new(Vec::new()).unwrap();
    w.intern("_Z6matmulPfS_S_i").unwrap();
    let with_name = w.into_inner().len();
    assert_eq!(before - with_name, 64);
}

#[test]
fn cut_file_reads_up_to_last_whole_record() {
    let mut strings = StringTable::new();
    let recs = sample(&mut strings);
    let bytes = encode(&recs, &strings);
    let (all, _, _) = decode(&bytes);
    let mut boundaries = vec![HEADER_LEN];
    while let Some(&b) = boundaries.last().filter(|&&b| b < bytes.len()) {
        boundaries.push(
            b + RECORD_HEADER_LEN + usize::from(u16::from_le_bytes([bytes[b + 2], bytes[b + 3]])),
        );
    }
    for cut in HEADER_LEN..=bytes.len() {
        let (part, _, stats) = decode(&bytes[..cut]);
        assert!(part.len() <= all.len());
        assert_eq!(&all[..part.len()], &part[..], "cut at {cut}");
        // A cut on a record boundary looks like a complete, shorter file.
        let at_boundary = boundaries.contains(&cut);
        assert_eq!(stats.truncated_at.is_none(), at_boundary, "cut at {cut}");
        if let Some(at) = stats.truncated_at {
            assert_eq!(
                at as usize,
                *boundaries.iter().rev().find(|&&b| b < cut).unwrap()
            );
        }
    }
    assert_eq!(decode(&bytes).0.len(), all.len());
}

#[test]
fn not_a_trace_is_one_clear_error() {
    let mut strings = StringTable::new();
    let err = read(
        &b"RUNTIME [ 1, 2 ]"[..],
        Path::new("x.txt"),
        &mut strings,
        &mut |_, _| {},
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "`x.txt` is not a gpuperf GPU trace (it starts with \"RUNTIME [ 1, 2 ]\")"
    );
    let mut newer = encode(&[], &strings);
    newer[8] = 9;
    let err = read(&newer[..], Path::new("n.gpt"), &mut strings, &mut |_, _| {}).unwrap_err();
    assert!(err.to_string().contains("version 9"), "{err}");
}

#[test]
fn far_string_ids_are_rejected_not_allocated() {
    let strings = StringTable::new();
    let mut bytes = encode(&[], &strings);
    for k in 1..=8u32 {
        bytes.extend_from_slice(&[kind::STRING, 0, 4, 0]);
        bytes.extend_from_slice(&(k << 24).to_le_bytes());
    }
    let mut strings = StringTable::new();
    let mut decoder_local = 0;
    let stats = read(&bytes[..], Path::new("s.gpt"), &mut strings, &mut |_, _| {
        decoder_local += 1
    })
    .unwrap();
    assert_eq!(stats.diagnostics.count, 8);
    assert_eq!(stats.diagnostics.first[0].message, "STRING id out of range");
}

#[test]
fn unknown_kinds_are_skipped_and_short_records_counted() {
    let mut strings = StringTable::new();
    let mut bytes = encode(&sample(&mut strings)[..1], &strings);
    bytes.extend_from_slice(&[200, 0, 3, 0, 1, 2, 3]); // unknown kind, 3 bytes
    bytes.extend_from_slice(&[kind::KERNEL, 0, 2, 0, 1, 2]); // kernel too short
    let (recs, _, stats) = decode(&bytes);
    assert_eq!(recs.len(), 1);
    assert_eq!(stats.unknown_kinds, 1);
    assert_eq!(stats.diagnostics.count, 1);
    assert!(stats.diagnostics.first[0].location.starts_with("t.gpt@"));
}

/// Reads `bytes` and checks what holds for any input; returns the stats, or
/// `None` when the read failed (as it may only for a bad header).
fn check_read(bytes: &[u8]) -> Result<Option<ReadStats>, TestCaseError> {
    let len = bytes.len() as u64;
    let mut strings = StringTable::new();
    let mut delivered = 0u64;
    let mut call_stacks = 0u64;
    let mut bad_name = None;
    let r = read(
        bytes,
        Path::new("t.gpt"),
        &mut strings,
        &mut |rec, strings| {
            delivered += 1;
            call_stacks += u64::from(matches!(rec, Record::CallStack(_)));
            let name = match rec {
                Record::Api(a) => Some(a.name),
                Record::Activity(Activity {
                    kind: ActivityKind::Kernel { name, .. },
                    ..
                }) => Some(*name),
                Record::Overhead(o) => Some(o.kind),
                _ => None,
            };
            if let Some(id) = name.filter(|id| id.index() >= strings.len()) {
                bad_name = Some(id);
            }
        },
    );
    prop_assert_eq!(bad_name, None, "a record names a string outside the table");
    let stats = match r {
        Ok(stats) => stats,
        Err(err) => {
            let msg = err.to_string();
            prop_assert!(!msg.contains('\n'), "multi-line error: {}", msg);
            match err {
                Error::NotATrace { .. } => prop_assert!(!is_gpu_trace(bytes)),
                Error::UnsupportedVersion { version, .. } => {
                    prop_assert!(version == 0 || version > FORMAT_VERSION);
                    prop_assert_eq!(version, u16::from_le_bytes([bytes[8], bytes[9]]));
                }
                other => prop_assert!(false, "unexpected error {:?}", other),
            }
            prop_assert_eq!(delivered, 0);
            return Ok(None);
        }
    };
    prop_assert!(is_gpu_trace(bytes));
    prop_assert_eq!(stats.records, delivered - call_stacks);
    // Every record, known or not, takes at least its 4-byte header.
    prop_assert!(stats.records + stats.unknown_kinds <= len / 4);
    if let Some(at) = stats.truncated_at {
        prop_assert!(at <= len, "truncated at {} of {}", at, len);
    }
    let d = &stats.diagnostics;
    prop_assert_eq!(d.first.len() as u64, d.count.min(crate::diag::KEPT as u64));
    for x in &d.first {
        let at: u64 = x
            .location
            .strip_prefix("t.gpt@")
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| TestCaseError::fail(format!("bad location {x}")))?;
        prop_assert!(at < len, "{} past the end ({})", x, len);
    }
    Ok(Some(stats))
}

fn header_len_field(bytes: &[u8]) -> Option<usize> {
    bytes
        .get(10..12)
        .map(|b| usize::from(u16::from_le_bytes([b[0], b[1]])))
}

/// `stats.bytes` is the input's length once the header is complete.
fn check_bytes(bytes: &[u8], stats: &ReadStats) -> Result<(), TestCaseError> {
    let complete_header =
        bytes.len() >= HEADER_LEN && header_len_field(bytes).is_some_and(|h| h <= bytes.len());
    if complete_header {
        prop_assert_eq!(stats.bytes, bytes.len() as u64);
    }
    Ok(())
}

fn encoded_sample() -> Vec<u8> {
    let mut strings = StringTable::new();
    let recs = sample(&mut strings);
    encode(&recs, &strings)
}

/// One framed record: kind, and a payload whose length is often the one the
/// kind needs, give or take a few bytes.
fn framed_record() -> impl Strategy<Value = Vec<u8>> {
    (0u8..20, any::<bool>(), -4i32..4, 0usize..80, any::<u32>()).prop_flat_map(
        |(kind, exact, delta, any_len, small_id)| {
            let want: i32 = match kind {
                kind::STRING => 12,
                kind::PROCESS => 32,
                kind::DEVICE => 12,
                kind::API => 36,
                kind::KERNEL => 60,
                kind::MEMCPY | kind::MEMSET => 56,
                kind::SYNC | kind::OVERHEAD => 32,
                kind::DROPPED => 16,
                kind::MODULE => 56,
                kind::STACK => 8 + 16 * (small_id % 4) as i32,
                kind::GRAPH_NODE | kind::ORIGIN => 16,
                _ => 8,
            };
            let n = if exact {
                usize::try_from((want + delta).max(0)).unwrap_or(0)
            } else {
                any_len
            };
            prop::collection::vec(any::<u8>(), n).prop_map(move |mut payload| {
                // Small string ids in definitions and uses, so that names
                // often resolve.
                let id_at = match kind {
                    kind::STRING => Some(0),
                    kind::PROCESS => Some(24),
                    kind::DEVICE => Some(4),
                    kind::API => Some(28),
                    kind::KERNEL => Some(20),
                    kind::OVERHEAD => Some(16),
                    kind::MODULE => Some(4),
                    kind::GRAPH_NODE => Some(12),
                    kind::THREAD => Some(4),
                    kind::ORIGIN => Some(0),
                    _ => None,
                };
                if let Some(at) = id_at.filter(|&at| exact && payload.len() >= at + 4) {
                    payload[at..at + 4].copy_from_slice(&(small_id % 8).to_le_bytes());
                }
                let mut r = vec![kind, 0];
                r.extend_from_slice(&(payload.len() as u16).to_le_bytes());
                r.extend_from_slice(&payload);
                r
            })
        },
    )
}

/// Where, which operation, and its bytes.
type Edit = (prop::sample::Index, u8, Vec<u8>);

fn apply_edits(bytes: &mut Vec<u8>, edits: Vec<Edit>) {
    for (at, op, data) in edits {
        let i = at.index(bytes.len() + 1);
        match op {
            0 => drop(bytes.splice(i..i, data)),
            1 => drop(bytes.drain(i..(i + data.len() + 1).min(bytes.len()))),
            2 => bytes.truncate(i),
            3 => {
                if let Some(b) = bytes.get_mut(i) {
                    *b ^= 1 << (data.first().copied().unwrap_or(0) % 8);
                }
            }
            _ => {
                for (j, d) in data.into_iter().enumerate() {
                    if let Some(b) = bytes.get_mut(i + j) {
                        *b = d;
                    }
                }
            }
        }
    }
}

/// Builds a trace of big unknown-kind records and small notes whose total
/// crosses the reader's 1 MiB buffer; returns it with each record's offset.
fn large_trace(sizes: &[u16]) -> (Vec<u8>, Vec<usize>) {
    let mut bytes = encode(&[], &StringTable::new());
    let mut starts = Vec::with_capacity(sizes.len());
    for (i, &n) in sizes.iter().enumerate() {
        starts.push(bytes.len());
        let kind = if i % 3 == 0 { kind::NOTE } else { 200 };
        bytes.extend_from_slice(&[kind, 0]);
        bytes.extend_from_slice(&n.to_le_bytes());
        bytes.resize(bytes.len() + usize::from(n), b'n');
    }
    (bytes, starts)
}

#[test]
fn header_len_below_16_keeps_offsets_exact() {
    let mut bytes = encode(&[], &StringTable::new());
    bytes[10] = 0; // header_len 0
    bytes.extend_from_slice(&[kind::KERNEL, 0, 2, 0, 1, 2]); // short: diagnostic at 16
    bytes.extend_from_slice(&[kind::NOTE, 0, 9, 0]); // cut: truncated at 22
    let (_, _, stats) = decode(&bytes);
    assert_eq!(stats.diagnostics.first[0].location, "t.gpt@16");
    assert_eq!(stats.truncated_at, Some(22));
    assert_eq!(stats.bytes, bytes.len() as u64);
}

/// Modules, stacks of every frame kind, API calls with and without a stack,
/// and a graph node.
pub(crate) fn stack_sample(strings: &mut StringTable) -> (Vec<Record>, Vec<(ApiCall, u32)>) {
    let api = strings.intern("cudaLaunchKernel");
    let f = strings.intern("train.step");
    let file = strings.intern("/srv/train.py");
    let module = Record::Module(Module {
        pid: 42,
        id: 0,
        path: "/opt/app/bin/app".into(),
        build_id: vec![0xde, 0xad, 0xbe, 0xef],
        bias: 0x5555_0000_0000,
        text_start: 0x5555_0000_1000,
        text_end: 0x5555_0000_9000,
    });
    let stack = Record::Stack(Stack {
        pid: 42,
        id: 1,
        end: StackEnd::Root,
        python_truncated: false,
        frames: vec![
            StackFrame::Native {
                module: 0,
                offset: 0x1234,
            },
            StackFrame::Python {
                function: f,
                file,
                line: Some(17),
            },
            StackFrame::Native {
                module: 0,
                offset: 0x1000,
            },
        ],
    });
    let jit = Record::Stack(Stack {
        pid: 42,
        id: 2,
        end: StackEnd::NoUnwindInfo,
        python_truncated: true,
        frames: vec![StackFrame::Unknown {
            address: 0x7f00_dead_beef,
        }],
    });
    let call = |corr, tid| ApiCall {
        pid: 42,
        tid,
        start_ns: 100 * u64::from(corr),
        end_ns: 100 * u64::from(corr) + 50,
        correlation_id: corr,
        cbid: 211,
        domain: ApiDomain::Runtime,
        name: api,
    };
    let node = Record::GraphNode(GraphNode {
        pid: 42,
        node_id: 1 << 40,
        stack: 2,
        api: Some(api),
    });
    let added = Record::GraphNode(GraphNode {
        pid: 42,
        node_id: 7,
        stack: 1,
        api: None,
    });
    (
        vec![
            Record::Process(Process {
                pid: 42,
                ppid: Some(1),
                exe: "/opt/app/bin/app".into(),
                start_ns: 1,
                start_realtime_ns: Some(2),
            }),
            module,
            stack,
            jit,
            node,
            added,
        ],
        vec![(call(7, 43), 1), (call(8, 44), 2), (call(9, 43), 0)],
    )
}

#[test]
fn thread_names_round_trip_and_a_rename_follows() {
    let strings = StringTable::new();
    let proc_rec = Record::Process(Process {
        pid: 42,
        ppid: Some(1),
        exe: "/opt/app".into(),
        start_ns: 1,
        start_realtime_ns: Some(2),
    });
    let name = |tid, n: &str| {
        Record::Thread(ThreadName {
            pid: 42,
            tid,
            name: n.into(),
        })
    };
    let recs = [
        proc_rec,
        name(43, "loader"),
        name(44, "worker-1"),
        // A rename: the later record supersedes the first.
        name(43, "loader-2"),
    ];
    let (back, _, stats) = decode(&encode(&recs, &strings));
    assert!(stats.diagnostics.is_empty(), "{:?}", stats.diagnostics);
    assert_eq!(stats.unknown_kinds, 0);
    assert_eq!(back, recs);
}

#[test]
fn origins_round_trip_with_unknown_fields_and_belong_to_their_process() {
    let strings = StringTable::new();
    let process = |pid| {
        Record::Process(Process {
            pid,
            ppid: Some(1),
            exe: "/usr/bin/python3".into(),
            start_ns: 1,
            start_realtime_ns: Some(2),
        })
    };
    let origin = |pid, host: Option<&str>, rank, world_size| {
        Record::Origin(ProcessOrigin {
            pid,
            origin: Origin {
                host: host.map(str::to_owned),
                rank,
                local_rank: rank.map(|r| r % 8),
                world_size,
            },
        })
    };
    let recs = [
        process(42),
        origin(42, Some("node-3"), Some(13), Some(64)),
        process(43),
        origin(43, None, None, None),
    ];
    let bytes = encode(&recs, &strings);
    let (back, _, stats) = decode(&bytes);
    assert!(stats.diagnostics.is_empty(), "{:?}", stats.diagnostics);
    assert_eq!(stats.unknown_kinds, 0);
    assert_eq!(back, recs);
    // The layout: host string, rank, local rank, world size; u32::MAX unknown.
    let at = bytes
        .windows(4)
        .rposition(|w| w == [kind::ORIGIN, 0, 16, 0])
        .unwrap();
    assert_eq!(&bytes[at + 8..at + 20], &[0xff; 12]);
    assert_eq!(&bytes[at + 4..at + 8], &[0xff; 4]);
}

#[test]
fn autograd_tags_round_trip_and_an_unknown_kind_is_skipped() {
    let strings = StringTable::new();
    let tag = |correlation_id, tag| {
        Record::Autograd(Autograd {
            pid: 42,
            correlation_id,
            tag,
        })
    };
    let recs = [
        Record::Process(Process {
            pid: 42,
            ppid: Some(1),
            exe: "/opt/app".into(),
            start_ns: 1,
            start_realtime_ns: Some(2),
        }),
        tag(
            7,
            AutogradTag::Forward {
                thread: 1,
                next_seq: 12,
            },
        ),
        tag(
            9,
            AutogradTag::Backward {
                thread: 1,
                seq: None,
            },
        ),
    ];
    let mut bytes = encode(&recs, &strings);
    let (back, _, stats) = decode(&bytes);
    assert!(stats.diagnostics.is_empty(), "{:?}", stats.diagnostics);
    assert_eq!(back, recs);
    // A third kind of tag, from a newer writer: skipped, not misread.
    let at = bytes.len() - 24 + 4;
    bytes[at] = 3;
    let (back, _, stats) = decode(&bytes);
    assert_eq!(back, recs[..2]);
    assert_eq!(stats.unknown_kinds, 1);
}

#[test]
fn nvtx_ranges_round_trip() {
    let mut strings = StringTable::new();
    let range = |name, domain, kind, unclosed| {
        Record::Nvtx(NvtxRange {
            pid: 42,
            tid: 43,
            start_ns: 100,
            end_ns: 250,
            name,
            domain,
            kind,
            unclosed,
        })
    };
    let (step, fwd, dom) = (
        strings.intern("step"),
        strings.intern("forward"),
        strings.intern("mylib"),
    );
    let recs = [
        Record::Process(Process {
            pid: 42,
            ppid: Some(1),
            exe: "/opt/app".into(),
            start_ns: 1,
            start_realtime_ns: Some(2),
        }),
        range(step, None, NvtxKind::PushPop, false),
        range(fwd, Some(dom), NvtxKind::StartEnd, true),
    ];
    let (back, bstrings, stats) = decode(&encode(&recs, &strings));
    assert!(stats.diagnostics.is_empty(), "{:?}", stats.diagnostics);
    let Record::Nvtx(r) = &back[2] else {
        panic!("{back:?}")
    };
    assert_eq!(bstrings.get(r.name), "forward");
    assert_eq!(r.domain.map(|d| bstrings.get(d)), Some("mylib"));
    assert_eq!((r.kind, r.unclosed, r.tid), (NvtxKind::StartEnd, true, 43));
    let Record::Nvtx(r) = &back[1] else {
        panic!("{back:?}")
    };
    assert_eq!((bstrings.get(r.name), r.domain), ("step", None));
    assert_eq!((r.start_ns, r.end_ns), (100, 250));
}

#[test]
fn stacks_and_api_stack_ids_round_trip() {
    let mut strings = StringTable::new();
    let (recs, calls) = stack_sample(&mut strings);
    let mut w = Writer::with_flags(Vec::new(), FLAG_STACKS).unwrap();
    for r in &recs {
        w.write(r, &strings).unwrap();
    }
    for (a, s) in &calls {
        w.write_api(a, (*s != 0).then_some(*s), &strings).unwrap();
    }
    let bytes = w.into_inner();
    let (back, bstrings, stats) = decode(&bytes);
    assert!(stats.diagnostics.is_empty(), "{:?}", stats.diagnostics);
    assert_eq!(stats.flags, FLAG_STACKS);
    assert_eq!(header_flags(&bytes), Some(FLAG_STACKS));
    assert_eq!(header_flags(&bytes[..HEADER_LEN - 1]), None);
    assert_eq!(header_flags(b"GPUPERX\0\x01\0\x10\0\x01\0\0\0"), None);
    assert_eq!(back.len(), recs.len() + 5, "{back:?}");
    // Stacks, with names resolved through the reader's table.
    let Record::Stack(st) = &back[2] else {
        panic!("{:?}", back[2])
    };
    assert_eq!(st.id, 1);
    assert_eq!(st.end, StackEnd::Root);
    assert_eq!(
        st.frames[0],
        StackFrame::Native {
            module: 0,
            offset: 0x1234
        }
    );
    let StackFrame::Python {
        function,
        file,
        line,
    } = st.frames[1]
    else {
        panic!("{:?}", st.frames[1])
    };
    assert_eq!(
        (bstrings.get(function), bstrings.get(file), line),
        ("train.step", "/srv/train.py", Some(17))
    );
    assert_eq!(back[1], recs[1]);
    assert_eq!(back[3], recs[3]);
    let Record::GraphNode(g) = back[4] else {
        panic!("{:?}", back[4])
    };
    assert_eq!((g.node_id, g.stack), (1 << 40, 2));
    assert_eq!(g.api.map(|a| bstrings.get(a)), Some("cudaLaunchKernel"));
    assert_eq!(back[5], recs[5]);
    // Each API call, followed by its stack when it has one.
    let tail: Vec<String> = back[6..]
        .iter()
        .map(|r| match r {
            Record::Api(a) => format!("api {}", a.correlation_id),
            Record::CallStack(c) => format!("stack {} {}", c.correlation_id, c.stack),
            other => format!("{other:?}"),
        })
        .collect();
    assert_eq!(tail, ["api 7", "stack 7 1", "api 8", "stack 8 2", "api 9"]);
    // Two API records carried a stack id: delivered as two records each.
    assert_eq!(stats.records, back.len() as u64 - 2);
}

#[test]
fn api_record_with_a_stack_id_is_four_bytes_longer_and_old_fields_unchanged() {
    let mut strings = StringTable::new();
    let (_, calls) = stack_sample(&mut strings);
    let one = |stack| {
        let mut w = Writer::new(Vec::new()).unwrap();
        w.intern("cudaLaunchKernel").unwrap();
        let before = w.into_inner().len();
        let mut w = Writer::new(Vec::new()).unwrap();
        w.write_api(&calls[0].0, stack, &strings).unwrap();
        w.into_inner().split_off(before)
    };
    let (plain, with) = (one(None), one(Some(5)));
    assert_eq!((plain.len(), with.len()), (40, 44));
    // The first 36 payload bytes are what older readers read.
    assert_eq!(plain[4..40], with[4..40]);
    assert_eq!(with[40..], 5u32.to_le_bytes());
    assert_eq!(u16::from_le_bytes([with[2], with[3]]), 40);
}

#[test]
fn a_call_stack_cannot_be_written_on_its_own() {
    let mut w = Writer::new(Vec::new()).unwrap();
    let err = w
        .write(
            &Record::CallStack(CallStack {
                pid: 1,
                correlation_id: 2,
                stack: 3,
            }),
            &StringTable::new(),
        )
        .unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
}

#[test]
fn cut_stack_records_are_reported_not_misread() {
    let mut strings = StringTable::new();
    let (recs, _) = stack_sample(&mut strings);
    let bytes = encode(&recs, &strings);
    let (all, _, _) = decode(&bytes);
    for cut in HEADER_LEN..bytes.len() {
        let (part, _, stats) = decode(&bytes[..cut]);
        assert_eq!(&all[..part.len()], &part[..], "cut at {cut}");
        assert!(stats.diagnostics.is_empty(), "cut at {cut}");
    }
    // A stack whose frame count claims more frames than its payload holds.
    let mut short = encode(&[], &strings);
    short.extend_from_slice(&[kind::STACK, 0, 8, 0, 1, 0, 0, 0, 0, 0, 3, 0]);
    let (recs, _, stats) = decode(&short);
    assert!(recs.is_empty());
    assert_eq!(stats.diagnostics.count, 1);
}

proptest! {
    #[test]
    fn fuzz_read_arbitrary_bytes(
        after_header in any::<bool>(),
        bytes in prop::collection::vec(any::<u8>(), 0..4096),
    ) {
        let mut input = if after_header { encode(&[], &StringTable::new()) } else { Vec::new() };
        input.extend_from_slice(&bytes);
        if let Some(stats) = check_read(&input)? {
            check_bytes(&input, &stats)?;
        }
    }

    #[test]
    fn fuzz_read_framed_records(
        records in prop::collection::vec(framed_record(), 0..24),
        cut in any::<prop::sample::Index>(),
        cut_it in any::<bool>(),
    ) {
        let mut input = encode(&[], &StringTable::new());
        let whole = records.len() as u64;
        input.extend(records.into_iter().flatten());
        if cut_it {
            let at = cut.index(input.len() + 1).max(HEADER_LEN);
            input.truncate(at);
        }
        let stats = check_read(&input)?.expect("valid header");
        check_bytes(&input, &stats)?;
        if !cut_it {
            prop_assert_eq!(stats.truncated_at, None);
        }
        prop_assert!(stats.records + stats.unknown_kinds <= whole);
    }

    #[test]
    fn fuzz_read_mutated_trace(
        edits in prop::collection::vec(
            (any::<prop::sample::Index>(), 0u8..5, prop::collection::vec(any::<u8>(), 0..8)),
            1..8,
        ),
    ) {
        let mut input = encoded_sample();
        apply_edits(&mut input, edits);
        if let Some(stats) = check_read(&input)? {
            check_bytes(&input, &stats)?;
        }
    }

    #[test]
    fn fuzz_read_truncated_trace(cut in any::<prop::sample::Index>(), flip in any::<prop::sample::Index>()) {
        let full = encoded_sample();
        let (all, _, _) = decode(&full);
        let mut input = full[..cut.index(full.len() + 1)].to_vec();
        if input.len() > HEADER_LEN {
            // One flipped payload or length byte as well, past the header.
            let i = HEADER_LEN + flip.index(input.len() - HEADER_LEN);
            input[i] ^= 0x40;
        }
        match check_read(&input)? {
            None => prop_assert!(input.len() < MAGIC.len()),
            Some(stats) => {
                check_bytes(&input, &stats)?;
                prop_assert!(stats.records <= all.len() as u64);
            }
        }
    }

    #[test]
    fn fuzz_read_large_traces_across_the_buffer(
        sizes in prop::collection::vec(any::<u16>(), 24..64),
        cut in any::<prop::sample::Index>(),
    ) {
        let (full, starts) = large_trace(&sizes);
        let at = HEADER_LEN + cut.index(full.len() - HEADER_LEN + 1);
        let input = &full[..at];
        let stats = check_read(input)?.expect("valid header");
        check_bytes(input, &stats)?;
        // Records wholly inside the cut are delivered or skipped; the first one
        // it splits is where the file is reported cut.
        let whole = starts
            .iter()
            .zip(&sizes)
            .filter(|&(&s, &n)| s + RECORD_HEADER_LEN + usize::from(n) <= at)
            .count() as u64;
        prop_assert_eq!(stats.records + stats.unknown_kinds, whole);
        let split = starts
            .iter()
            .zip(&sizes)
            .find(|&(&s, &n)| s < at && s + RECORD_HEADER_LEN + usize::from(n) > at)
            .map(|(&s, _)| s as u64);
        prop_assert_eq!(stats.truncated_at, split);
        prop_assert!(stats.diagnostics.is_empty());
    }
}
