//! A header line turned into the model's record: an API call, a GPU
//! activity or a CUPTI overhead.

use crate::model::{
    Activity, ActivityKind, ApiCall, ApiDomain, MemcpyKind, Overhead, Record, api_base_name,
};

use super::items::{Bad, Header, Items, clip, parse_u32, parse_u64};
use super::kinds::{GRAPH_NODE_LINE, Kind, sync_type};
use super::parser::{Open, Parser, not_all_ones};

impl Parser<'_> {
    /// Reads a header line of a kind that becomes a record and pushes the record.
    pub(super) fn header(&mut self, no: u64, kind: Kind, rest: &str) -> Result<Open, Bad> {
        let h = Header::parse(rest)?;
        let items = Items::parse(h.items);
        let index = self.log.records.len();
        let mut warning: Option<Bad> = None;
        let mut open = Open::Activity {
            index,
            line: no,
            kernel: false,
            need_grid: false,
            need_device: true,
        };
        let record = match kind {
            Kind::Api(domain) => {
                open = Open::Nothing;
                self.api(&items, domain, (h.start, h.end), index)?
            }
            Kind::Kernel => {
                open = Open::Activity {
                    index,
                    line: no,
                    kernel: true,
                    need_grid: true,
                    need_device: true,
                };
                self.kernel(&h, &items)?
            }
            Kind::Memcpy => {
                let (record, unknown) = self.memcpy(&h, &items)?;
                warning = unknown;
                record
            }
            Kind::Memset => memset(&h, &items)?,
            Kind::Sync => {
                // The printer writes no device line for synchronizations; accept one.
                open = Open::Activity {
                    index,
                    line: no,
                    kernel: false,
                    need_grid: false,
                    need_device: false,
                };
                sync(&h, &items)?
            }
            Kind::Overhead => {
                open = Open::Nothing;
                self.overhead(&h)?
            }
            Kind::Skipped(_) => return Ok(Open::Ignored),
        };
        self.log.records.push(record);
        if let Some(msg) = warning {
            self.bad(no, msg);
        }
        Ok(open)
    }

    /// A kernel's record; its grid and device come on continuation lines.
    fn kernel(&mut self, h: &Header<'_>, items: &Items<'_>) -> Result<Record, Bad> {
        let name = items.name()?;
        let correlation_id = items.required("correlationId", parse_u32)?;
        let name = self.strings.intern(name);
        self.trailer = &[GRAPH_NODE_LINE];
        Ok(Record::Activity(activity(
            h,
            correlation_id,
            ActivityKind::Kernel {
                name,
                grid: [0; 3],
                block: [0; 3],
            },
        )))
    }

    /// A copy's record, with a warning when its kind is not one CUPTI prints.
    fn memcpy(&mut self, h: &Header<'_>, items: &Items<'_>) -> Result<(Record, Option<Bad>), Bad> {
        let bytes = items.required("size", parse_u64)?;
        let correlation_id = items.required("correlationId", parse_u32)?;
        let (kind, unknown) = memcpy_kind(h.prefix);
        self.trailer = &[GRAPH_NODE_LINE];
        let record = Record::Activity(activity(
            h,
            correlation_id,
            ActivityKind::Memcpy {
                kind,
                bytes,
                peer: None,
            },
        ));
        Ok((record, unknown))
    }

    /// A CUPTI overhead's record; its kind is the header's prefix.
    fn overhead(&mut self, h: &Header<'_>) -> Result<Record, Bad> {
        let kind = h.prefix;
        if kind.is_empty() || kind.contains(char::is_whitespace) {
            return Err("missing overhead kind before `[`".into());
        }
        // Printed when a command buffer overflowed.
        self.trailer = &["CUpti_ActivityOverheadCommandBufferFullData"];
        Ok(Record::Overhead(Overhead {
            pid: 0,
            kind: self.strings.intern(kind),
            correlation_id: None,
            start_ns: h.start,
            end_ns: h.end,
        }))
    }

    /// An API call's record; one without a pid is noted, to take the log's.
    fn api(
        &mut self,
        items: &Items<'_>,
        domain: ApiDomain,
        (start_ns, end_ns): (u64, u64),
        index: usize,
    ) -> Result<Record, Bad> {
        let name = items.name()?;
        let correlation_id = items.required("correlationId", parse_u32)?;
        let cbid = items.optional("cbid", parse_u32)?.unwrap_or(0);
        // CUPTI's threadId is a truncated pthread id; keep its low 32 bits.
        let tid = items.optional("threadId", parse_u64)?.unwrap_or(0) as u32;
        let pid = items.optional("processId", parse_u32)?;
        match pid {
            Some(pid) => {
                self.first_pid.get_or_insert(pid);
            }
            None => self.api_without_pid.push(index),
        }
        let name = self.strings.intern(api_base_name(name));
        Ok(Record::Api(ApiCall {
            pid: pid.unwrap_or(0),
            tid,
            start_ns,
            end_ns,
            correlation_id,
            cbid,
            domain,
            name,
        }))
    }
}

/// A copy's kind from the name before its `[`, with a warning when the name is
/// not one CUPTI prints.
pub(super) fn memcpy_kind(prefix: &str) -> (MemcpyKind, Option<Bad>) {
    let name = prefix.trim_matches('"');
    match MemcpyKind::from_name(name) {
        Some(k) => (k, None),
        None if matches!(name, "UNKNOWN" | "<unknown>") => (MemcpyKind::Unknown, None),
        None => (
            MemcpyKind::Unknown,
            Some(format!("unknown memcpy kind `{}`", clip(name)).into()),
        ),
    }
}

/// An activity over the header's time span; the continuation lines fill in the
/// device and the log's pid comes at the end.
fn activity(h: &Header<'_>, correlation_id: u32, kind: ActivityKind) -> Activity {
    Activity {
        pid: 0,
        start_ns: h.start,
        end_ns: h.end,
        correlation_id,
        device: Some(0),
        context: 0,
        stream: Some(0),
        graph_id: None,
        graph_node_id: None,
        kind,
    }
}

/// A memset's record.
fn memset(h: &Header<'_>, items: &Items<'_>) -> Result<Record, Bad> {
    let bytes = items.required("size", parse_u64)?;
    let value = items.optional("value", parse_u32)?.unwrap_or(0);
    let correlation_id = items.required("correlationId", parse_u32)?;
    Ok(Record::Activity(activity(
        h,
        correlation_id,
        ActivityKind::Memset { bytes, value },
    )))
}

/// A synchronization's record; its context and stream are on the header line.
fn sync(h: &Header<'_>, items: &Items<'_>) -> Result<Record, Bad> {
    let correlation_id = items.required("correlationId", parse_u32)?;
    let sync_type = items.get("type").map_or(0, sync_type);
    let mut a = activity(
        h,
        correlation_id,
        ActivityKind::Sync {
            sync_type,
            wait: None,
        },
    );
    a.context = items.optional("contextId", parse_u32)?.unwrap_or(0);
    a.stream = not_all_ones(items.optional("streamId", parse_u32)?.unwrap_or(0));
    Ok(Record::Activity(a))
}
