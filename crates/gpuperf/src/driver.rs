//! Driver events in gpuperf's own words, shared by `gpuperf monitor` and
//! recordings: the line for a source that is not present, and the
//! tab-separated event file.

use gpuperf_profiler::driver::{DriverEvent, Source};

/// The first line of an event file: its columns.
pub const EVENT_HEADER: &str = "# ts_ns\tkind\tpid\ttid\tcomm\tring\targ\tdur_ns\tret\tid\tmsg";

/// The line that says a source is missing and skipped.
pub fn absent_line(tool: &str, why: &str) -> String {
    format!("gpuperf {tool}: not present, skipped: {why}")
}

/// Prints [`absent_line`] for each absent source on stderr.
pub fn say_absent(tool: &str, absent: &[(Source, String)]) {
    for (_, why) in absent {
        eprintln!("{}", absent_line(tool, why));
    }
}

/// One event as a line of the event file (without the newline). Tabs and
/// newlines in names and messages become spaces, so each event is one line.
pub fn event_line(e: &DriverEvent) -> String {
    let clean = |s: &str| s.replace(['\t', '\n'], " ");
    format!(
        "{}\t{}\t{}\t{}\t{}\t{}\t{:#x}\t{}\t{}\t{:#x}\t{}",
        e.ts_ns,
        e.kind.name(),
        e.pid,
        e.tid,
        clean(&e.comm),
        clean(&e.ring),
        e.arg,
        e.dur_ns,
        e.ret,
        e.id,
        clean(&e.msg)
    )
}

#[cfg(test)]
mod tests {
    use gpuperf_profiler::driver::DriverKind;

    use super::*;

    #[test]
    fn an_event_is_one_line_with_every_column() {
        let e = DriverEvent {
            ts_ns: 5,
            dur_ns: 7,
            id: 0x10,
            ret: -22,
            pid: 1,
            tid: 2,
            kind: DriverKind::Xid,
            arg: 79,
            comm: "a\tb".into(),
            ring: String::new(),
            msg: "bad\nthing".into(),
        };
        let line = event_line(&e);
        assert_eq!(line, "5\txid\t1\t2\ta b\t\t0x4f\t7\t-22\t0x10\tbad thing");
        assert_eq!(line.split('\t').count(), EVENT_HEADER.split('\t').count());
    }
}
