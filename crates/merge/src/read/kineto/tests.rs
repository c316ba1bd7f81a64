//! The Kineto reader's unit tests.

use std::io::{self, Read};
use std::path::Path;

use proptest::prelude::*;

use super::event::*;
use super::stream::*;
use super::*;
use crate::model::{Activity, ActivityKind, Record, StringTable, SyncWait};
use crate::read::cpu::{CpuTrace, StackId};

#[test]
fn microseconds_become_exact_nanoseconds() {
    for (text, ns) in [
        ("0", Some(0)),
        ("12", Some(12_000)),
        ("1623142623460111", Some(1_623_142_623_460_111_000)),
        ("1365627862814.773", Some(1_365_627_862_814_773)),
        ("0.001", Some(1)),
        ("0.0005", Some(1)),
        ("0.0004", Some(0)),
        ("2.0804", Some(2_080)),
        ("2.0806", Some(2_081)),
        ("1.25e0", Some(1_250)),
        ("1.5E3", Some(1_500_000)),
        ("7e-6", Some(0)),
        ("5e-4", Some(1)),
        ("3e-3", Some(3)),
        (".5", Some(500)),
        ("5.", Some(5_000)),
        ("000.250", Some(250)),
        ("-1", None),
        ("1e", None),
        ("", None),
        (".", None),
        ("1.2.3", None),
        ("NaN", None),
        ("99999999999999999999", None),
    ] {
        assert_eq!(us_to_ns(text), ns, "{text}");
    }
}

fn read_str(text: &str) -> Result<Imported> {
    let mut strings = StringTable::new();
    read(text.as_bytes(), Path::new("t.json"), &mut strings)
}

/// Reads `text` handed out 7 bytes at a time into a window of 16 bytes, so
/// that every value crosses a refill.
fn read_trickled(text: &[u8]) -> Imported {
    struct Trickle<'a>(&'a [u8]);
    impl Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = self.0.len().min(buf.len()).min(7);
            buf[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }
    let mut strings = StringTable::new();
    let mut w = Window::new(Trickle(text));
    w.buf = vec![0; 16];
    let mut b = Builder::new(Path::new("t"), &mut strings);
    let outcome = walk(&mut w, &mut b).unwrap();
    assert!(matches!(outcome, Walk::Done), "{outcome:?}");
    b.finish()
}

fn small_trace() -> Vec<u8> {
    std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/kineto/small.pt.trace.json"
    ))
    .unwrap()
}

fn same_import(a: Imported, b: Imported) {
    assert_eq!(a.records, b.records);
    assert_eq!(
        (a.skipped, a.diagnostics.count),
        (b.skipped, b.diagnostics.count)
    );
    let (a, b) = (a.launch_stacks.unwrap(), b.launch_stacks.unwrap());
    assert_eq!(a.launches, b.launches);
    let names = |t: &CpuTrace| -> Vec<String> {
        (0..t.stacks.len())
            .map(|i| t.stacks.text(StackId(i as u32)).to_owned())
            .collect()
    };
    assert_eq!(names(&a), names(&b));
}

#[test]
fn events_split_across_window_refills_read_the_same() {
    let text = small_trace();
    let mut strings = StringTable::new();
    let whole = read(&text[..], Path::new("t"), &mut strings).unwrap();
    same_import(whole, read_trickled(&text));
}

#[test]
fn text_that_is_not_utf8_reads_as_before() {
    // Characters of 2 and 3 bytes in a frame name (cut by refills when
    // trickled), and bytes that are not UTF-8 in a field gpuperf does not read:
    // serde_json skips such a field without looking into it, and so must the
    // faster path for text.
    let text = String::from_utf8(small_trace()).unwrap();
    let text = text.replace("train.py(10): step", "train\\u00e9é✓.py(10): step");
    let at = text.find(r#""args": {"Python parent id": 2"#).unwrap() + 9;
    let with = |junk: &[u8]| {
        let mut t = text.as_bytes()[..at].to_vec();
        t.extend_from_slice(br#""junk": ""#);
        t.extend_from_slice(junk);
        t.extend_from_slice(b"\", ");
        t.extend_from_slice(&text.as_bytes()[at..]);
        t
    };
    let (bad, good) = (with(b"\xff\xfe\xc3"), with(b"ok"));
    let read_all = |t: &[u8]| read(t, Path::new("t"), &mut StringTable::new()).unwrap();
    let imp = read_all(&bad);
    let stacks = imp.launch_stacks.as_ref().unwrap();
    assert!(
        (0..stacks.stacks.len()).any(|i| stacks
            .stacks
            .text(StackId(i as u32))
            .contains("trainéé✓.py(10): step")),
        "the frame keeps its characters"
    );
    same_import(read_all(&good), read_trickled(&bad));
    same_import(read_all(&good), imp);
}

#[test]
fn events_that_are_not_objects_are_counted_not_fatal() {
    let imp = read_str(
        r#"{"traceEvents": [1, "x", null, {"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1, "args": {"correlation": 2}}, []]}"#,
    )
    .unwrap();
    assert_eq!(imp.records.len(), 2, "process and kernel");
    // `[]` reads as an event with no fields, of no kind gpuperf uses.
    assert_eq!((imp.diagnostics.count, imp.skipped), (3, 1));
}

#[test]
fn sync_wait_that_is_not_a_number_is_one_diagnostic_and_the_sync_kept() {
    let sync = r#"{"ph": "X", "cat": "cuda_sync", "name": "Stream Wait Event", "ts": 1, "dur": 1, "args": {"cuda_sync_kind": "Stream Wait Event", "wait_on_stream": "seven", "wait_on_cuda_event_record_corr_id": 5, "wait_on_cuda_event_id": -1, "stream": 3, "device": 0, "correlation": 6}}"#;
    let text = format!(r#"{{"traceEvents": [{sync}]}}"#);
    let imp = read_str(&text).unwrap();
    assert_eq!(imp.diagnostics.count, 1);
    let d = &imp.diagnostics.first[0];
    assert_eq!(d.location, format!("t.json@{}", text.find(sync).unwrap()));
    assert_eq!(
        d.message,
        "`cuda_sync` event whose `args.wait_on_stream` is not an id: read as not known"
    );
    assert!(!d.to_string().contains('\n'));
    let wait = imp.records.iter().find_map(|r| match r {
        Record::Activity(Activity {
            kind: ActivityKind::Sync { sync_type: 2, wait },
            stream: Some(3),
            ..
        }) => Some(*wait),
        _ => None,
    });
    assert_eq!(
        wait,
        Some(Some(SyncWait {
            stream: None,
            record_correlation_id: Some(5),
            event_id: None,
        }))
    );
    // Its recording call is not in the trace: counted.
    assert!(
        imp.notes
            .iter()
            .any(|n| n.starts_with("1 of 1 waits on a CUDA event name a recording call")),
        "{:?}",
        imp.notes
    );
}

#[test]
fn empty_and_null_event_lists() {
    assert!(
        read_str(r#"{"traceEvents": []}"#)
            .unwrap()
            .records
            .is_empty()
    );
    assert!(
        read_str(r#"{"traceEvents": null}"#)
            .unwrap()
            .records
            .is_empty()
    );
    assert!(read_str(r#"{"traceEvents": 5}"#).is_err());
    assert!(read_str("").is_err());
    assert!(read_str("{").is_err());
    assert!(looks_like_kineto(b"\xef\xbb\xbf \n{"));
    assert!(!looks_like_kineto(b"[{}]"));
}

fn never_panics(bytes: &[u8]) -> std::result::Result<(), TestCaseError> {
    let _ = looks_like_kineto(bytes);
    let mut strings = StringTable::new();
    if let Ok(imp) = read(bytes, Path::new("p.json"), &mut strings) {
        prop_assert!(imp.diagnostics.first.len() as u64 <= imp.diagnostics.count);
        if let Some(stacks) = &imp.launch_stacks {
            for l in &stacks.launches {
                prop_assert!(l.stack.index() < stacks.stacks.len());
            }
        }
    }
    Ok(())
}

/// Pieces that make mutations reach the reader's edge cases.
const TOKENS: &[&str] = &[
    "{",
    "}",
    "[",
    "]",
    "\"",
    ",",
    ":",
    " ",
    "null",
    "-1",
    "1e999",
    "0.0000001",
    "\"traceEvents\": [",
    "\"ph\": \"X\"",
    "\"cat\": \"kernel\"",
    "\"cat\": \"python_function\"",
    "\"Python parent id\": 3",
    "\"Python id\": 3",
    "\"correlation\": 7",
    "\"ts\": ",
    "\"Call stack\": \"a;b;;c\"",
    "\\u0000",
    "\\\"",
    "\u{fffd}",
];

/// µs → ns as first written, with a string per number: the reference for the
/// faster [`us_to_ns`].
fn us_to_ns_reference(text: &str) -> Option<u64> {
    let (mantissa, exp) = match text.find(['e', 'E']) {
        Some(i) => (&text[..i], text[i + 1..].parse::<i32>().ok()?),
        None => (text, 0),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    if int.is_empty() && frac.is_empty()
        || !int.bytes().all(|b| b.is_ascii_digit())
        || !frac.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let digits = format!("{int}{frac}");
    let digits = digits.trim_start_matches('0');
    let shift = exp
        .checked_sub(i32::try_from(frac.len()).ok()?)?
        .checked_add(3)?;
    if digits.is_empty() {
        return Some(0);
    }
    if shift >= 0 {
        let v: u64 = digits.parse().ok()?;
        return v.checked_mul(10u64.checked_pow(u32::try_from(shift).ok()?)?);
    }
    let cut = usize::try_from(-shift).ok()?;
    if cut > digits.len() {
        let first = if cut == digits.len() + 1 {
            digits.as_bytes()[0]
        } else {
            b'0'
        };
        return Some(u64::from(first >= b'5'));
    }
    let (keep, drop) = digits.split_at(digits.len() - cut);
    let v: u64 = if keep.is_empty() {
        0
    } else {
        keep.parse().ok()?
    };
    v.checked_add(u64::from(drop.as_bytes()[0] >= b'5'))
}

proptest! {
    #[test]
    fn microseconds_match_the_reference(
        text in "[0-9]{0,12}(\\.[0-9]{0,6})?|[0-9]{0,22}(\\.[0-9]{0,9})?([eE][+-]?[0-9]{1,3})?|[0-9.eE+-]{0,6}|.{0,4}"
    ) {
        prop_assert_eq!(us_to_ns(&text), us_to_ns_reference(&text), "{}", text);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        never_panics(&bytes)?;
    }

    #[test]
    fn mutated_traces_never_panic(
        edits in proptest::collection::vec(
            (any::<proptest::sample::Index>(), 0u8..8, proptest::collection::vec(any::<u8>(), 0..8),
             any::<proptest::sample::Index>()),
            0..12,
        )
    ) {
        let mut text = include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/kineto/small.pt.trace.json")).to_vec();
        crate::golden::apply_edits(&mut text, edits, TOKENS);
        never_panics(&text)?;
    }

    #[test]
    fn decimal_microseconds_round_trip(ns in 0u64..4_000_000_000_000_000_000, exp in -3i32..4) {
        // The same ns written as µs with 3 decimals, and in exponent form.
        let text = format!("{}.{:03}", ns / 1000, ns % 1000);
        prop_assert_eq!(us_to_ns(&text), Some(ns));
        let digits = ns.to_string();
        let shifted = format!("{digits}e{}", exp - 3 - exp);
        prop_assert_eq!(us_to_ns(&shifted), Some(ns));
    }
}

#[test]
fn a_trace_whose_device_is_the_simulated_runtimes_says_so_in_a_note() {
    let trace = |name: &str| {
        format!(
            r#"{{"deviceProperties": [{{"id": 0, "name": "{name}", "computeMajor": 9}}], "traceEvents": []}}"#
        )
    };
    let sim = read_str(&trace("Simulated GPU 0 (gpusim, not a real GPU)")).unwrap();
    let notes: Vec<_> = sim
        .notes
        .iter()
        .filter(|n| n.starts_with(crate::model::SIMULATED_GPU_NOTE))
        .collect();
    assert_eq!(notes.len(), 1, "{:?}", sim.notes);
    assert!(notes[0].contains("Simulated GPU 0"), "{notes:?}");
    let real = read_str(&trace("NVIDIA H200")).unwrap();
    assert!(
        !real
            .notes
            .iter()
            .any(|n| n.starts_with(crate::model::SIMULATED_GPU_NOTE)),
        "{:?}",
        real.notes
    );
}
