//! A header line turned into the model's record: an API call, a GPU
//! activity or a CUPTI overhead.

use crate::model::{
    Activity, ActivityKind, ApiCall, ApiDomain, MemcpyKind, Overhead, Record, api_base_name,
};

use super::items::{Bad, Header, Items, clip, parse_u32, parse_u64};
use super::kinds::{GRAPH_NODE_LINE, Kind, sync_type};
use super::parser::{Open, Parser};

impl Parser<'_> {
    /// Reads a header line of a kind that becomes a record and pushes the record.
    pub(super) fn header(&mut self, no: u64, kind: Kind, rest: &str) -> Result<Open, Bad> {
        let h = Header::parse(rest)?;
        let items = Items::parse(h.items);
        let (start_ns, end_ns) = (h.start, h.end);
        let activity = |correlation_id, kind| Activity {
            pid: 0,
            start_ns,
            end_ns,
            correlation_id,
            device: 0,
            context: 0,
            stream: 0,
            graph_id: 0,
            graph_node_id: 0,
            kind,
        };
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
                self.api(&items, domain, (start_ns, end_ns), index)?
            }
            Kind::Kernel => {
                let name = items.name()?;
                let correlation_id = items.required("correlationId", parse_u32)?;
                let name = self.strings.intern(name);
                open = Open::Activity {
                    index,
                    line: no,
                    kernel: true,
                    need_grid: true,
                    need_device: true,
                };
                self.trailer = &[GRAPH_NODE_LINE];
                Record::Activity(activity(
                    correlation_id,
                    ActivityKind::Kernel {
                        name,
                        grid: [0; 3],
                        block: [0; 3],
                    },
                ))
            }
            Kind::Memcpy => {
                let bytes = items.required("size", parse_u64)?;
                let correlation_id = items.required("correlationId", parse_u32)?;
                let (kind, unknown) = memcpy_kind(h.prefix);
                warning = unknown;
                self.trailer = &[GRAPH_NODE_LINE];
                Record::Activity(activity(
                    correlation_id,
                    ActivityKind::Memcpy {
                        kind,
                        bytes,
                        peer: None,
                    },
                ))
            }
            Kind::Memset => {
                let bytes = items.required("size", parse_u64)?;
                let value = items.optional("value", parse_u32)?.unwrap_or(0);
                let correlation_id = items.required("correlationId", parse_u32)?;
                Record::Activity(activity(
                    correlation_id,
                    ActivityKind::Memset { bytes, value },
                ))
            }
            Kind::Sync => {
                let correlation_id = items.required("correlationId", parse_u32)?;
                let sync_type = items.get("type").map_or(0, sync_type);
                let mut a = activity(
                    correlation_id,
                    ActivityKind::Sync {
                        sync_type,
                        wait: None,
                    },
                );
                a.context = items.optional("contextId", parse_u32)?.unwrap_or(0);
                a.stream = items.optional("streamId", parse_u32)?.unwrap_or(0);
                // The printer writes no device line for synchronizations; accept one.
                open = Open::Activity {
                    index,
                    line: no,
                    kernel: false,
                    need_grid: false,
                    need_device: false,
                };
                Record::Activity(a)
            }
            Kind::Overhead => {
                let kind = h.prefix;
                if kind.is_empty() || kind.contains(char::is_whitespace) {
                    return Err("missing overhead kind before `[`".into());
                }
                open = Open::Nothing;
                // Printed when a command buffer overflowed.
                self.trailer = &["CUpti_ActivityOverheadCommandBufferFullData"];
                Record::Overhead(Overhead {
                    pid: 0,
                    kind: self.strings.intern(kind),
                    correlation_id: 0,
                    start_ns,
                    end_ns,
                })
            }
            Kind::Skipped(_) => return Ok(Open::Ignored),
        };
        self.log.records.push(record);
        if let Some(msg) = warning {
            self.bad(no, msg);
        }
        Ok(open)
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
