//! The line-by-line state machine: which record is open, its continuation
//! lines, the tool's own lines, and the diagnostics.

use std::path::Path;

use crate::model::{Activity, ActivityKind, Record, StringTable};

use super::items::{Bad, Items, Placement, clip};
use super::kinds::{Kind, kind_of};
use super::{CuptiLog, is_record_shaped};

/// The record whose continuation lines may follow.
pub(super) enum Open {
    /// None: a continuation line here is out of place.
    Nothing,
    /// An activity already pushed at `index`, read from header line `line`.
    Activity {
        index: usize,
        line: u64,
        kernel: bool,
        need_grid: bool,
        need_device: bool,
    },
    /// A skipped record, or a malformed one already counted: its continuation
    /// lines are ignored.
    Ignored,
}

pub(super) struct Parser<'p> {
    pub(super) path: &'p Path,
    pub(super) strings: &'p mut StringTable,
    pub(super) log: CuptiLog,
    pub(super) open: Open,
    /// Prefixes of unindented lines that still belong to the last record.
    pub(super) trailer: &'static [&'static str],
    pub(super) first_pid: Option<u32>,
    pub(super) api_without_pid: Vec<usize>,
}

impl Parser<'_> {
    pub(super) fn line(&mut self, no: u64, line: &str) {
        if line.trim().is_empty() {
            return;
        }
        if line.trim() == "<unknown>" {
            // What the printer writes, indented, for a record kind it does not know.
            self.close();
            self.trailer = &[];
            self.log.skipped_kinds += 1;
            self.open = Open::Ignored;
            return;
        }
        if line.starts_with([' ', '\t']) {
            return self.continuation(no, line.trim());
        }
        if self.trailer.iter().any(|t| line.starts_with(t)) {
            return;
        }
        let (word, rest) = line.split_once([' ', '\t']).unwrap_or((line, ""));
        let word = word.strip_suffix(':').unwrap_or(word);
        let kind = kind_of(word);
        if kind.is_none() && !is_record_shaped(word, rest) {
            // The tool's own output, possibly printed between a record's lines.
            self.log.other_lines += 1;
            return;
        }
        self.close();
        self.trailer = &[];
        let Some(kind) = kind else {
            self.open = Open::Ignored;
            return self.bad(no, format!("unknown record kind `{}`", clip(word)).into());
        };
        if let Kind::Skipped(trailer) = kind {
            self.log.skipped_kinds += 1;
            self.open = Open::Ignored;
            self.trailer = trailer;
            return;
        }
        match self.header(no, kind, rest) {
            Ok(open) => self.open = open,
            Err(msg) => {
                self.open = Open::Ignored;
                self.bad(no, msg);
            }
        }
    }
}

impl Parser<'_> {
    fn continuation(&mut self, no: u64, line: &str) {
        match self.open {
            Open::Ignored => {}
            Open::Nothing => self.bad(no, "continuation line without a record to continue".into()),
            Open::Activity {
                index,
                kernel,
                ref mut need_grid,
                ref mut need_device,
                ..
            } => {
                let items = Items::parse(line);
                let first = items.pairs.first().map_or("", |p| p.0);
                let result = match first {
                    "grid" if kernel => {
                        *need_grid = false;
                        items.grid().map(|(grid, block)| Cont::Grid(grid, block))
                    }
                    "deviceId" => {
                        *need_device = false;
                        items.device().map(Cont::Device)
                    }
                    // MEMCPY2's second line: peer devices, not used.
                    "srcDeviceId" => return,
                    _ => Err(format!(
                        "unexpected continuation line starting with `{}`",
                        clip(first)
                    )
                    .into()),
                };
                match result {
                    Ok(cont) => {
                        if let Some(Record::Activity(a)) = self.log.records.get_mut(index) {
                            cont.apply(a);
                        }
                    }
                    Err(msg) => self.bad(no, msg),
                }
            }
        }
    }

    /// Ends the open record, counting it if its continuation lines never came.
    pub(super) fn close(&mut self) {
        if let Open::Activity {
            line,
            need_grid,
            need_device,
            ..
        } = self.open
        {
            if need_grid {
                self.bad(line, "record cut off: no `grid` continuation line".into());
            } else if need_device {
                self.bad(
                    line,
                    "record cut off: no `deviceId` continuation line".into(),
                );
            }
        }
        self.open = Open::Nothing;
    }

    pub(super) fn finish(mut self) -> CuptiLog {
        self.close();
        let pid = self.first_pid.unwrap_or(0);
        for &i in &self.api_without_pid {
            if let Some(Record::Api(a)) = self.log.records.get_mut(i) {
                a.pid = pid;
            }
        }
        for r in &mut self.log.records {
            match r {
                Record::Activity(a) => a.pid = pid,
                Record::Overhead(o) => o.pid = pid,
                _ => {}
            }
        }
        self.log
    }

    pub(super) fn bad(&mut self, no: u64, msg: Bad) {
        let path = self.path;
        self.log
            .diagnostics
            .push(|| format!("{}:{no}", path.display()), || msg.into_owned());
    }
}

/// Fields read from a continuation line.
enum Cont {
    Grid([u32; 3], [u32; 3]),
    Device(Placement),
}

impl Cont {
    fn apply(self, a: &mut Activity) {
        match self {
            Cont::Grid(g, b) => {
                if let ActivityKind::Kernel { grid, block, .. } = &mut a.kind {
                    *grid = g;
                    *block = b;
                }
            }
            Cont::Device(p) => {
                // 0 is CUPTI's "not from a graph".
                a.device = not_all_ones(p.device);
                a.context = p.context;
                a.stream = not_all_ones(p.stream);
                a.graph_id = Some(p.graph_id).filter(|&g| g != 0);
                a.graph_node_id = Some(p.graph_node_id).filter(|&n| n != 0);
            }
        }
    }
}

/// `None` for CUPTI's all-ones "unknown device" and "no stream".
pub(super) fn not_all_ones(v: u32) -> Option<u32> {
    (v != u32::MAX).then_some(v)
}
