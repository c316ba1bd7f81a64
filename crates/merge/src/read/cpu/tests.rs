//! Tests of the CPU trace readers and writer.

use std::io;

use proptest::prelude::*;

use super::parse::parse_u64;
use super::*;

#[test]
fn a_launch_is_24_bytes() {
    // 10 M launches in 240 MB: the correlation id's `None` costs no space.
    assert_eq!(size_of::<CpuLaunch>(), 24);
}

fn read(text: &str) -> Result<CpuTrace> {
    CpuTrace::read(text.as_bytes(), Path::new("cpu.txt"))
}

#[test]
fn reference_lines_parse() {
    let t = read("100 app 7 7 3 _start;main;cudaLaunchKernel\n200 my app 7 7 3 main;foo(int, char);cudaLaunchKernel\r\n").unwrap();
    assert_eq!(t.format, CpuFormat::Reference);
    assert_eq!(t.launches.len(), 2);
    assert_eq!(
        t.launches[1],
        CpuLaunch {
            ts_ns: 200,
            pid: 7,
            tid: 7,
            correlation_id: None,
            stack: StackId(1)
        }
    );
    assert_eq!(
        t.stacks.text(StackId(1)),
        "main;foo(int, char);cudaLaunchKernel"
    );
    assert_eq!(t.stacks.leaf(StackId(1)), "cudaLaunchKernel");
    assert_eq!(t.comms[&(7, 7)], "app");
    assert!(t.diagnostics.is_empty());
}

#[test]
fn gpuperf_lines_carry_correlation_ids_and_drops() {
    let t = read("# gpuperf-cpu v1\n# dropped 2\n100 app 7 8 1 42 main;cudaLaunchKernel\n# dropped 3\n101 app 7 8 1 43\n")
            .unwrap();
    assert_eq!(t.format, CpuFormat::Gpuperf);
    assert_eq!(t.dropped, 5);
    assert_eq!(t.launches[0].correlation_id, NonZeroU32::new(42));
    assert_eq!(t.stacks.text(t.launches[1].stack), NO_STACK_FRAME);
    assert!(t.has_correlation_ids());
}

#[test]
fn truncated_stacks_are_counted_by_their_root_frame() {
    let t = read("# gpuperf-cpu v1\n1 app 7 8 1 0 [truncated];main;cudaLaunchKernel\n2 app 7 8 1 0 _start;main;cudaLaunchKernel\n3 app 7 8 1 0 [truncated]x;cudaLaunchKernel\n4 app 7 8 1 0 [truncated]\n")
            .unwrap();
    assert_eq!(t.launches.len(), 4);
    assert_eq!(t.truncated, 2);
    assert_eq!(
        t.stacks.text(t.launches[0].stack),
        "[truncated];main;cudaLaunchKernel"
    );
    let mut both = t.clone();
    both.append(&t);
    assert_eq!(both.truncated, 4);
    // Reference lines carry no marker: nothing is counted.
    let r = read("100 app 7 7 3 main;cudaLaunchKernel\n").unwrap();
    assert_eq!(r.truncated, 0);
}

#[test]
fn malformed_lines_are_counted_with_their_line() {
    let t = read("100 app 7 7 3 main\nbogus\n\n300 app x 7 3 main\n400 app 7 7 3 main;x\n5000000000 a 99999999999 1 1 f\n").unwrap();
    assert_eq!(t.launches.len(), 2);
    assert_eq!(t.diagnostics.count, 3);
    let places: Vec<_> = t
        .diagnostics
        .first
        .iter()
        .map(|d| d.location.as_str())
        .collect();
    assert_eq!(places, ["cpu.txt:2", "cpu.txt:4", "cpu.txt:6"]);
}

#[test]
fn a_file_that_is_not_a_cpu_trace_is_one_error() {
    let err = read("GPUPERF\0\x01\0\x10\0").unwrap_err();
    assert!(
        err.to_string()
            .starts_with("`cpu.txt` is not a CPU stack trace"),
        "{err}"
    );
    let empty = read("").unwrap();
    assert!(empty.launches.is_empty());
}

#[test]
fn writer_output_reads_back() {
    let mut w = Writer::new(Vec::new()).unwrap();
    let l = LaunchLine {
        ts_ns: 5,
        comm: "my app",
        pid: 1,
        tid: 2,
        cpu: 3,
        correlation_id: 4,
    };
    w.launch(&l, ["main", "a;b", "cudaLaunchKernel"]).unwrap();
    w.dropped(7).unwrap();
    let bytes = w.into_inner();
    assert_eq!(
        String::from_utf8_lossy(&bytes),
        "# gpuperf-cpu v1\n5 my_app 1 2 3 4 main;a:b;cudaLaunchKernel\n# dropped 7\n"
    );
    let t = CpuTrace::read(&bytes[..], Path::new("x")).unwrap();
    assert_eq!(t.launches[0].correlation_id, NonZeroU32::new(4));
    assert_eq!(t.dropped, 7);
    assert_eq!(t.comms[&(1, 2)], "my_app");
}

#[test]
fn long_lines_and_buffer_boundaries() {
    let frame = "f".repeat(3 << 20);
    let text = format!("1 a 1 1 1 {frame}\n2 a 1 1 1 g\n");
    let t = read(&text).unwrap();
    assert_eq!(t.launches.len(), 2);
    assert_eq!(t.stacks.text(t.launches[0].stack).len(), 3 << 20);
}

#[test]
fn dropped_counts_past_u64_max_saturate() {
    let t = read("# gpuperf-cpu v1\n# dropped 18446744073709551615\n# dropped 1\n").unwrap();
    assert_eq!(t.dropped, u64::MAX);
}

const REFERENCE: &[u8] = include_bytes!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/data/cpu/reference.txt"
));
const GPUPERF: &[u8] = include_bytes!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/data/cpu/gpuperf.txt"
));

/// Pieces that make mutations and generated lines reach the parser's edge cases.
const TOKENS: &[&str] = &[
    " ",
    "  ",
    ";",
    ";;",
    "\n",
    "\r\n",
    "\r",
    "\t",
    "#",
    "# dropped",
    "# dropped ",
    "# dropped x\n",
    "\n# dropped 18446744073709551615\n",
    HEADER,
    "0",
    "7",
    "4294967295",
    "4294967296",
    "18446744073709551615",
    "18446744073709551616",
    "99999999999999999999",
    "000000000000000000001",
    "-1",
    "app",
    "my app",
    "cudaLaunchKernel",
    "main;f(int, char)",
    "\u{fffd}",
    "\u{0}",
    "\u{ff}",
];

/// The lines `for_each_line` hands out: split on `\n`, a last unterminated one
/// included, `\r` not yet stripped.
fn split_lines(bytes: &[u8]) -> Vec<&[u8]> {
    let mut lines: Vec<&[u8]> = bytes.split(|&b| b == b'\n').collect();
    if bytes.is_empty() || bytes.ends_with(b"\n") {
        lines.pop();
    }
    lines
}

/// What the line structure alone says the reader must report.
#[derive(Debug, Default)]
struct Expect {
    /// Non-blank lines that do not start with `#`.
    data: u64,
    /// Non-blank lines.
    nonblank: u64,
    /// Sum of valid `# dropped N` counts, saturating.
    dropped: Option<u64>,
    /// `# dropped` lines whose count does not parse.
    bad_dropped: u64,
    header: bool,
}

fn expect(bytes: &[u8]) -> Expect {
    let mut e = Expect {
        dropped: Some(0),
        ..Expect::default()
    };
    for (i, line) in split_lines(bytes).into_iter().enumerate() {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if i == 0 && line == HEADER.as_bytes() {
            e.header = true;
            continue;
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        e.nonblank += 1;
        if line[0] != b'#' {
            e.data += 1;
        } else if let Some(rest) = line.strip_prefix(b"# dropped ") {
            let count = rest.split(|&b| b == b' ').next().unwrap_or_default();
            match parse_u64(count) {
                Some(n) => e.dropped = e.dropped.map(|d| d.saturating_add(n)),
                None => e.bad_dropped += 1,
            }
        }
    }
    e
}

/// Hands out at most `step` bytes per call, with an `Interrupted` error between
/// reads, so that lines straddle reads.
struct Trickle<'a> {
    data: &'a [u8],
    step: usize,
    interrupt: bool,
}

impl Read for Trickle<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.interrupt = !self.interrupt;
        if self.interrupt {
            return Err(io::ErrorKind::Interrupted.into());
        }
        let n = self.step.min(buf.len()).min(self.data.len());
        buf[..n].copy_from_slice(&self.data[..n]);
        self.data = &self.data[n..];
        Ok(n)
    }
}

fn same(a: &CpuTrace, b: &CpuTrace) -> bool {
    let texts = |t: &CpuTrace| -> Vec<String> {
        (0..t.stacks.len())
            .map(|i| t.stacks.text(StackId(i as u32)).to_owned())
            .collect()
    };
    a.format == b.format
        && a.launches == b.launches
        && texts(a) == texts(b)
        && a.comms == b.comms
        && a.dropped == b.dropped
        && a.lines == b.lines
        && a.diagnostics == b.diagnostics
}

fn check_read(bytes: &[u8], step: usize) -> Result<(), TestCaseError> {
    let e = expect(bytes);
    let path = Path::new("f.txt");
    let got = CpuTrace::read(bytes, path);
    let trickled = CpuTrace::read(
        Trickle {
            data: bytes,
            step,
            interrupt: false,
        },
        path,
    );
    let t = match (got, trickled) {
        (Ok(t), Ok(u)) => {
            prop_assert!(same(&t, &u), "read in pieces of {} differs", step);
            t
        }
        (Err(err), Err(err2)) => {
            prop_assert!(
                matches!(&err, Error::NotATrace { path: p, .. } if p == path),
                "{:?}",
                err
            );
            let msg = err.to_string();
            prop_assert_eq!(&msg, &err2.to_string());
            prop_assert!(!msg.contains('\n'), "multi-line error: {}", msg);
            prop_assert!(e.data >= 1, "error without a data line: {}", msg);
            return Ok(());
        }
        (a, b) => {
            return Err(TestCaseError::fail(format!(
                "whole read {:?}, read in pieces of {step} {:?}",
                a.map(|t| t.launches.len()),
                b.map(|t| t.launches.len())
            )));
        }
    };
    let n_launches = t.launches.len() as u64;
    prop_assert_eq!(
        t.format,
        if e.header {
            CpuFormat::Gpuperf
        } else {
            CpuFormat::Reference
        }
    );
    prop_assert_eq!(t.lines, e.data);
    prop_assert!(n_launches + t.diagnostics.count <= e.nonblank);
    // Each data line is a launch or a diagnostic, and so is each `# dropped` line
    // that is not a count.
    prop_assert_eq!(n_launches + t.diagnostics.count, t.lines + e.bad_dropped);
    prop_assert_eq!(Some(t.dropped), e.dropped);
    for l in &t.launches {
        prop_assert!(l.stack.index() < t.stacks.len());
        prop_assert!(!t.stacks.text(l.stack).is_empty());
        let _ = t.stacks.leaf(l.stack);
        prop_assert!(t.comms.contains_key(&(l.pid, l.tid)));
        if t.format == CpuFormat::Reference {
            prop_assert_eq!(l.correlation_id, None);
        }
    }
    let d = &t.diagnostics;
    prop_assert_eq!(d.first.len() as u64, d.count.min(crate::diag::KEPT as u64));
    let total_lines = split_lines(bytes).len() as u64;
    let mut prev = 0;
    for x in &d.first {
        let n: u64 = x
            .location
            .strip_prefix("f.txt:")
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| TestCaseError::fail(format!("bad location {x}")))?;
        prop_assert!(prev < n && n <= total_lines, "{} after line {}", x, prev);
        prev = n;
    }
    Ok(())
}

use crate::golden::{Edit, apply_edits as apply_token_edits};

fn apply_edits(text: &mut Vec<u8>, edits: Vec<Edit>) {
    apply_token_edits(text, edits, TOKENS);
}

fn edits() -> impl Strategy<Value = Vec<Edit>> {
    prop::collection::vec(
        (
            any::<prop::sample::Index>(),
            0u8..8,
            prop::collection::vec(any::<u8>(), 0..8),
            any::<prop::sample::Index>(),
        ),
        0..12,
    )
}

/// A line of tokens: numbers, names, spaces and separators in any order.
fn token_line() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(
        prop_oneof![
            4 => prop::sample::select(TOKENS).prop_map(|t| t.as_bytes().to_vec()),
            2 => any::<u64>().prop_map(|n| n.to_string().into_bytes()),
            1 => "[a-z;:() ]{1,6}".prop_map(String::into_bytes),
        ],
        0..12,
    )
    .prop_map(|parts| parts.join(&b' '))
}

proptest! {
    #[test]
    fn fuzz_read_arbitrary_bytes(
        header in any::<bool>(),
        bytes in prop::collection::vec(any::<u8>(), 0..2048),
        step in 1usize..8,
    ) {
        let mut text = if header { format!("{HEADER}\n").into_bytes() } else { Vec::new() };
        text.extend_from_slice(&bytes);
        check_read(&text, step)?;
    }

    #[test]
    fn fuzz_read_token_lines(
        header in any::<bool>(),
        lines in prop::collection::vec(token_line(), 0..16),
        step in 1usize..64,
    ) {
        let mut text = if header { format!("{HEADER}\n").into_bytes() } else { Vec::new() };
        text.extend_from_slice(&lines.join(&b'\n'));
        check_read(&text, step)?;
    }

    #[test]
    fn fuzz_read_mutated_files(
        gpuperf in any::<bool>(),
        edits in edits(),
        step in 1usize..64,
    ) {
        let mut text = if gpuperf { GPUPERF } else { REFERENCE }.to_vec();
        apply_edits(&mut text, edits);
        check_read(&text, step)?;
    }
}
