//! Golden-file helpers shared by unit tests and (through `#[path]`) the integration
//! tests. Test-only.

use std::fmt::Write as _;
use std::path::Path;

use crate::model::{ActivityKind, Record, StackFrame, StringTable};

/// Shown when a golden comparison fails.
pub const BLESS_MSG: &str =
    "If the change is intended, rerun with GPUPERF_BLESS=1 to rewrite the expected file.";

/// Compares `actual` with the golden file `expected`: creates it when missing,
/// reports the first differing `file:line`, writes the actual output to the
/// temporary directory and prints its path, and rewrites the file under
/// `GPUPERF_BLESS=1`.
pub fn check(expected: &Path, actual: &str) {
    let bless = std::env::var_os("GPUPERF_BLESS").is_some_and(|v| v == "1");
    if bless || !expected.exists() {
        std::fs::write(expected, actual)
            .unwrap_or_else(|e| panic!("failed to write `{}`: {e}", expected.display()));
        eprintln!("wrote `{}`", expected.display());
        return;
    }
    let want = std::fs::read_to_string(expected)
        .unwrap_or_else(|e| panic!("failed to read `{}`: {e}", expected.display()));
    if want == actual {
        return;
    }
    let name = expected
        .file_name()
        .map_or("golden".into(), |n| n.to_string_lossy());
    let tmp = std::env::temp_dir().join(format!("gpuperf-actual-{name}"));
    std::fs::write(&tmp, actual)
        .unwrap_or_else(|e| panic!("failed to write `{}`: {e}", tmp.display()));
    let (w, a): (Vec<_>, Vec<_>) = (want.lines().collect(), actual.lines().collect());
    let first = (0..w.len().max(a.len()))
        .find(|&i| w.get(i) != a.get(i))
        .unwrap_or(0);
    panic!(
        "{}:{}: expected {:?}, got {:?}\nactual output written to `{}`\n{BLESS_MSG}",
        expected.display(),
        first + 1,
        w.get(first).copied().unwrap_or("<end of file>"),
        a.get(first).copied().unwrap_or("<end of file>"),
        tmp.display()
    );
}

/// One stable line per record, names resolved.
pub fn render_records(records: &[Record], strings: &StringTable) -> String {
    let mut out = String::new();
    for r in records {
        let _ = match r {
            // As the derived `Debug` printed it when unknown was 0.
            Record::Process(p) => writeln!(
                out,
                "Process(Process {{ pid: {}, ppid: {}, exe: {:?}, start_ns: {}, start_realtime_ns: {} }})",
                p.pid,
                p.ppid.unwrap_or(0),
                p.exe,
                p.start_ns,
                p.start_realtime_ns.unwrap_or(0)
            ),
            Record::Api(a) => writeln!(
                out,
                "api {:?} [{}, {}] pid {} tid {} corr {} cbid {} {}",
                a.domain,
                a.start_ns,
                a.end_ns,
                a.pid,
                a.tid,
                a.correlation_id,
                a.cbid,
                strings.get(a.name)
            ),
            Record::Activity(a) => {
                let (what, detail) = match a.kind {
                    ActivityKind::Kernel { name, grid, block } => (
                        "kernel",
                        format!(
                            "grid {}x{}x{} block {}x{}x{} {}",
                            grid[0],
                            grid[1],
                            grid[2],
                            block[0],
                            block[1],
                            block[2],
                            strings.get(name)
                        ),
                    ),
                    ActivityKind::Memcpy { kind, bytes, peer } => (
                        "memcpy",
                        match peer {
                            Some(p) => format!(
                                "{kind} {bytes} bytes from device {} to device {}",
                                p.src, p.dst
                            ),
                            None => format!("{kind} {bytes} bytes"),
                        },
                    ),
                    ActivityKind::Memset { bytes, value } => {
                        ("memset", format!("{bytes} bytes value {value}"))
                    }
                    ActivityKind::Sync { sync_type, wait } => {
                        let mut d = format!("type {sync_type}");
                        if let Some(w) = wait {
                            let part = |v: Option<u32>| v.map_or("?".to_owned(), |v| v.to_string());
                            d += &format!(
                                " waits on stream {} event {} recorded by corr {}",
                                part(w.stream),
                                part(w.event_id),
                                part(w.record_correlation_id)
                            );
                        }
                        ("sync", d)
                    }
                    // Kinds a newer format adds (the enum is non-exhaustive
                    // outside this crate, where the integration tests use this).
                    #[allow(unreachable_patterns)]
                    other => ("other", format!("{other:?}")),
                };
                writeln!(
                    out,
                    "{what} [{}, {}] pid {} dev {} ctx {} stream {} graph {}/{} corr {} {detail}",
                    a.start_ns,
                    a.end_ns,
                    a.pid,
                    a.device.unwrap_or(u32::MAX),
                    a.context,
                    a.stream.unwrap_or(u32::MAX),
                    a.graph_id.unwrap_or(0),
                    a.graph_node_id.unwrap_or(0),
                    a.correlation_id
                )
            }
            Record::Overhead(o) => {
                writeln!(
                    out,
                    "overhead [{}, {}] pid {} {}",
                    o.start_ns,
                    o.end_ns,
                    o.pid,
                    strings.get(o.kind)
                )
            }
            Record::Stack(st) => {
                let frames: Vec<String> = st
                    .frames
                    .iter()
                    .map(|f| match *f {
                        StackFrame::Native { module, offset } => format!("m{module}+{offset:#x}"),
                        StackFrame::Python {
                            function,
                            file,
                            line,
                        } => format!(
                            "{} ({}:{})",
                            strings.get(function),
                            strings.get(file),
                            line.unwrap_or(0)
                        ),
                        StackFrame::Unknown { address } => format!("?{address:#x}"),
                        #[allow(unreachable_patterns)]
                        other => format!("{other:?}"),
                    })
                    .collect();
                writeln!(
                    out,
                    "stack pid {} id {} end {:?} python_truncated {}: {}",
                    st.pid,
                    st.id,
                    st.end,
                    st.python_truncated,
                    frames.join(" <- ")
                )
            }
            Record::GraphNode(g) => writeln!(
                out,
                "graph node pid {} node {} stack {} api {}",
                g.pid,
                g.node_id,
                g.stack,
                g.api.map_or("-", |a| strings.get(a))
            ),
            other => writeln!(out, "{other:?}"),
        };
    }
    out
}

/// Where, which operation, its bytes, and which token.
pub type Edit = (
    proptest::sample::Index,
    u8,
    Vec<u8>,
    proptest::sample::Index,
);

/// Applies random edits: inserts, deletes, truncations, overwrites, bit
/// flips, inserted `tokens` and duplicated lines.
pub fn apply_edits(text: &mut Vec<u8>, edits: Vec<Edit>, tokens: &[&str]) {
    for (at, op, bytes, token) in edits {
        let i = at.index(text.len() + 1);
        match op {
            0 => drop(text.splice(i..i, bytes)),
            1 => drop(text.drain(i..(i + bytes.len() + 1).min(text.len()))),
            2 => text.truncate(i),
            3 => {
                for (j, b) in bytes.into_iter().enumerate() {
                    if let Some(slot) = text.get_mut(i + j) {
                        *slot = b;
                    }
                }
            }
            4 => {
                if let Some(slot) = text.get_mut(i) {
                    *slot ^= 1 << (bytes.first().copied().unwrap_or(0) % 8);
                }
            }
            5 | 6 => {
                let t = tokens[token.index(tokens.len())].as_bytes();
                drop(text.splice(i..i, t.iter().copied()));
            }
            _ => {
                // Duplicate the line around `i`.
                let start = text[..i]
                    .iter()
                    .rposition(|&b| b == b'\n')
                    .map_or(0, |p| p + 1);
                let end = text[i..]
                    .iter()
                    .position(|&b| b == b'\n')
                    .map_or(text.len(), |p| i + p + 1);
                let line = text[start..end].to_vec();
                drop(text.splice(start..start, line));
            }
        }
    }
}
