//! The `PC_SAMPLE` and `PC_LAUNCHES` records: round trip, size, a short one
//! counted, and an older reader skipping the launch counts.

use std::path::Path;

use super::*;
use crate::model::{PcLaunches, PcSample, Process, ProcessPcLaunches, Record, StringTable};

fn decode(bytes: &[u8]) -> (Vec<Record>, StringTable, ReadStats) {
    let mut strings = StringTable::new();
    let mut recs = Vec::new();
    let stats = read(bytes, Path::new("t.gpt"), &mut strings, &mut |r, _| {
        recs.push(r.clone())
    })
    .unwrap();
    (recs, strings, stats)
}

fn samples(strings: &mut StringTable) -> Vec<Record> {
    let reason = strings.intern("smsp__pcsamp_warps_issue_stalled_long_scoreboard");
    let function = strings.intern("_Z3hotPf");
    let file = strings.intern("/src/app/hot.cu");
    let sample = |correlation_id, pc_offset, source| {
        Record::PcSample(PcSample {
            pid: 42,
            correlation_id,
            context: 1,
            function,
            pc_offset,
            cubin_crc: 0x1234_5678_9abc_def0,
            stall_reason_index: 8,
            stall_reason: reason,
            samples: 146,
            source,
        })
    };
    vec![
        Record::Process(Process {
            pid: 42,
            ppid: Some(1),
            exe: "/opt/app".into(),
            start_ns: 1,
            start_realtime_ns: Some(2),
        }),
        sample(Some(7), 0x40, Some((file, 14))),
        sample(None, 0x80, None),
    ]
}

#[test]
fn pc_samples_round_trip_with_and_without_a_source_line() {
    let mut strings = StringTable::new();
    let recs = samples(&mut strings);
    let mut w = Writer::new(Vec::new()).unwrap();
    for r in &recs {
        w.write(r, &strings).unwrap();
    }
    let bytes = w.into_inner();
    let (back, bstrings, stats) = decode(&bytes);
    assert!(stats.diagnostics.is_empty(), "{:?}", stats.diagnostics);
    assert_eq!(stats.unknown_kinds, 0);
    let Record::PcSample(p) = &back[1] else {
        panic!("{back:?}")
    };
    assert_eq!(bstrings.get(p.function), "_Z3hotPf");
    assert_eq!(
        bstrings.get(p.stall_reason),
        "smsp__pcsamp_warps_issue_stalled_long_scoreboard"
    );
    assert_eq!(
        p.source.map(|(f, l)| (bstrings.get(f), l)),
        Some(("/src/app/hot.cu", 14))
    );
    assert_eq!(
        (
            p.correlation_id,
            p.context,
            p.pc_offset,
            p.cubin_crc,
            p.stall_reason_index,
            p.samples
        ),
        (Some(7), 1, 0x40, 0x1234_5678_9abc_def0, 8, 146)
    );
    let Record::PcSample(p) = &back[2] else {
        panic!("{back:?}")
    };
    assert_eq!(
        (p.correlation_id, p.pc_offset, p.source),
        (None, 0x80, None)
    );
}

#[test]
fn pc_sample_record_is_52_bytes_and_a_short_one_is_counted() {
    let mut strings = StringTable::new();
    let recs = samples(&mut strings);
    let mut w = Writer::new(Vec::new()).unwrap();
    w.write(&recs[0], &strings).unwrap();
    w.write(&recs[2], &strings).unwrap();
    let before = w.into_inner();
    let mut w = Writer::new(Vec::new()).unwrap();
    w.write(&recs[0], &strings).unwrap();
    w.write(&recs[2], &strings).unwrap();
    w.write(&recs[2], &strings).unwrap();
    let after = w.into_inner();
    // The second sample's strings are already defined: only its record is added.
    assert_eq!(after.len() - before.len(), 52);
    let mut short = before.clone();
    short.extend_from_slice(&[kind::PC_SAMPLE, 0, 4, 0, 1, 0, 0, 0]);
    let (back, _, stats) = decode(&short);
    assert_eq!(back.len(), 2);
    assert_eq!(stats.diagnostics.count, 1);
}

fn launches(pid: u32, sampled: u64, unsampled: u64) -> Record {
    Record::PcLaunches(ProcessPcLaunches {
        pid,
        launches: PcLaunches { sampled, unsampled },
    })
}

#[test]
fn pc_launches_round_trip_as_a_20_byte_record_of_their_process() {
    let mut strings = StringTable::new();
    let mut recs = samples(&mut strings);
    recs.push(launches(42, 10, 20));
    let mut w = Writer::new(Vec::new()).unwrap();
    for r in &recs {
        w.write(r, &strings).unwrap();
    }
    let bytes = w.into_inner();
    let (back, _, stats) = decode(&bytes);
    assert!(stats.diagnostics.is_empty(), "{:?}", stats.diagnostics);
    assert_eq!(stats.unknown_kinds, 0);
    assert_eq!(back.last(), Some(&launches(42, 10, 20)));
    // The layout: header, then sampled u64 and unsampled u64.
    let at = bytes.len() - 20;
    assert_eq!(&bytes[at..at + 4], &[kind::PC_LAUNCHES, 0, 16, 0]);
    assert_eq!(&bytes[at + 4..at + 12], &10u64.to_le_bytes());
    assert_eq!(&bytes[at + 12..], &20u64.to_le_bytes());
    // Short: counted, not misread.
    let mut short = bytes[..at].to_vec();
    short.extend_from_slice(&[kind::PC_LAUNCHES, 0, 8, 0, 1, 0, 0, 0, 0, 0, 0, 0]);
    let (back, _, stats) = decode(&short);
    assert_eq!(back.len(), recs.len() - 1);
    assert_eq!(stats.diagnostics.count, 1);
}

#[test]
fn a_reader_that_does_not_know_pc_launches_skips_them_and_reads_on() {
    let mut strings = StringTable::new();
    let recs = samples(&mut strings);
    let mut w = Writer::new(Vec::new()).unwrap();
    w.write(&recs[0], &strings).unwrap();
    w.write(&launches(42, 3, 4), &strings).unwrap();
    w.write(&recs[1], &strings).unwrap();
    let mut bytes = w.into_inner();
    // An older reader sees a kind it does not know: turn this one into one.
    let at = bytes
        .windows(4)
        .position(|w| w == [kind::PC_LAUNCHES, 0, 16, 0])
        .unwrap();
    bytes[at] = 200;
    let (back, _, stats) = decode(&bytes);
    assert!(stats.diagnostics.is_empty(), "{:?}", stats.diagnostics);
    assert_eq!(stats.unknown_kinds, 1);
    assert_eq!(back.len(), 2);
    assert!(matches!(back[1], Record::PcSample(_)), "{back:?}");
}
