//! Perfetto's own protobuf trace (`perfetto.protos.Trace`), for timelines too
//! large for the Chrome JSON: an encoder of the same timeline model
//! (`write/timeline/`) as [`crate::write::chrome`], at a fraction of
//! the bytes per launch.
//!
//! - Every event is a `TrackEvent` on one packet sequence. Event names,
//!   categories, argument names and string arguments (CPU stacks among them)
//!   are interned in that sequence's incremental state (`InternedData`), so
//!   each is written once and events refer to it by a small id.
//! - Every process is a process track; a CPU thread is a thread track, every
//!   other track (a stream, its lanes, a driver track) a named track under its
//!   process, ordered by the model's rank. A recorder's note is a process label.
//! - A slice is a `SLICE_BEGIN`/`SLICE_END` pair, written in the model's order
//!   (by time; on a track, ends before begins at one instant, innermost first),
//!   so the trace processor's sort keeps them as written. Markers are
//!   `INSTANT`s. Timestamps are the input's ns, unchanged.
//! - Each flow has an id of its own: the call's slice lists it in `flow_ids`,
//!   the work's slice in `terminating_flow_ids`.
//!
//! The messages are declared in `proto` with prost's derive, field for field
//! from Perfetto's published `perfetto_trace.proto`.

use std::io::Write;
use std::path::Path;

use prost::Message as _;
use rustc_hash::FxHashMap;

use crate::error::Result;
use crate::write::timeline::{Arg, Step, Timeline};
use crate::write::timeline_writer::TimelineWriter;

/// Whether `path` asks for a Perfetto protobuf trace: it ends in `.pftrace` or
/// `.perfetto-trace`.
pub(crate) fn wanted_for(path: &Path) -> bool {
    let name = path.to_string_lossy().to_ascii_lowercase();
    name.ends_with(".pftrace") || name.ends_with(".perfetto-trace")
}

// The messages are public only for the tests that decode what the writer
// wrote (feature `test-internals`); they are no promise to users.
#[cfg(feature = "test-internals")]
#[doc(hidden)]
pub mod proto;
#[cfg(not(feature = "test-internals"))]
mod proto;

use proto::{DebugAnnotation, TrackDescriptor, TrackEvent};

/// The one packet sequence this writer uses.
const SEQUENCE: u32 = 1;

/// Strings to small ids, each id written once in the sequence's interned data.
#[derive(Default)]
struct Interner(FxHashMap<String, u64>);

impl Interner {
    /// The id of `s`, and whether it is new.
    fn get(&mut self, s: &str) -> (u64, bool) {
        if let Some(&id) = self.0.get(s) {
            return (id, false);
        }
        let id = self.0.len() as u64 + 1;
        self.0.insert(s.to_owned(), id);
        (id, true)
    }
}

/// Writes a Perfetto protobuf trace of what the join streams; a
/// [`Sink`](crate::join::Sink). The events are written when the join finishes.
pub type Writer<W> = TimelineWriter<W, Protobuf>;

/// Perfetto's protobuf format, for [`TimelineWriter`].
#[derive(Debug)]
pub enum Protobuf {}

impl<W: Write> TimelineWriter<W, Protobuf> {
    /// Starts the trace.
    pub fn new(out: W) -> Result<Self> {
        Ok(Self::with_encoder(out, "Perfetto trace", encode))
    }
}

/// Writes the packets of `t` and flushes `out`, counting the bytes in `written`.
fn encode<W: Write>(t: &Timeline, out: &mut W, written: &mut u64) -> std::io::Result<()> {
    let mut e = Encoder {
        out,
        buf: Vec::new(),
        written: 0,
        names: Interner::default(),
        categories: Interner::default(),
        arg_names: Interner::default(),
        strings: Interner::default(),
        new_interned: proto::InternedData::default(),
    };
    let r = e.encode(t);
    *written += e.written;
    r.and_then(|()| e.out.flush())
}

struct Encoder<'a, W: Write> {
    out: &'a mut W,
    buf: Vec<u8>,
    written: u64,
    names: Interner,
    categories: Interner,
    arg_names: Interner,
    strings: Interner,
    /// Interned entries new since the last packet: they go with the next one.
    new_interned: proto::InternedData,
}

impl<W: Write> Encoder<'_, W> {
    fn encode(&mut self, t: &Timeline) -> std::io::Result<()> {
        // The first packet clears the sequence's interned state.
        self.packet(&proto::TracePacket {
            trusted_packet_sequence_id: Some(SEQUENCE),
            sequence_flags: Some(proto::SEQ_INCREMENTAL_STATE_CLEARED),
            ..Default::default()
        })?;
        let process_uuid = |i: usize| i as u64 + 1;
        let mut by_pid: FxHashMap<u64, u64> = FxHashMap::default();
        for (i, p) in t.processes.iter().enumerate() {
            by_pid.insert(p.pid, process_uuid(i));
            self.descriptor(TrackDescriptor {
                uuid: Some(process_uuid(i)),
                process: Some(proto::ProcessDescriptor {
                    pid: Some(p.pid as i32),
                    process_name: Some(p.name.clone()),
                    process_labels: p.labels.clone(),
                }),
                child_ordering: Some(proto::ORDER_EXPLICIT),
                ..Default::default()
            })?;
        }
        let base = t.processes.len() as u64 + 1;
        let track_uuid = |i: usize| base + i as u64;
        for (i, tr) in t.tracks.iter().enumerate() {
            let d = if tr.thread {
                TrackDescriptor {
                    uuid: Some(track_uuid(i)),
                    thread: Some(proto::ThreadDescriptor {
                        pid: Some(tr.pid as i32),
                        tid: Some(tr.tid as i64),
                        thread_name: Some(tr.name.clone()),
                    }),
                    ..Default::default()
                }
            } else {
                TrackDescriptor {
                    uuid: Some(track_uuid(i)),
                    parent_uuid: by_pid.get(&tr.pid).copied(),
                    name: Some(tr.name.clone()),
                    sibling_order_rank: tr.rank,
                    ..Default::default()
                }
            };
            self.descriptor(d)?;
        }
        for &step in &t.steps {
            match step {
                Step::Begin(i) | Step::Instant(i) => {
                    let e = &t.events[i];
                    let args = e.args.iter().map(|(k, v)| self.arg(t, k, v)).collect();
                    let ids = |m: &FxHashMap<usize, Vec<usize>>| -> Vec<u64> {
                        m.get(&i)
                            .into_iter()
                            .flatten()
                            .map(|&f| t.flows[f].id)
                            .collect()
                    };
                    let ev = TrackEvent {
                        category_iids: vec![self.category_iid(e.cat)],
                        name_iid: Some(self.name_iid(&e.name)),
                        r#type: Some(if matches!(step, Step::Begin(_)) {
                            proto::TYPE_SLICE_BEGIN
                        } else {
                            proto::TYPE_INSTANT
                        }),
                        track_uuid: Some(track_uuid(e.track)),
                        debug_annotations: args,
                        flow_ids: ids(&t.flows_out),
                        terminating_flow_ids: ids(&t.flows_in),
                        ..Default::default()
                    };
                    self.event(e.start_ns, ev)?;
                }
                Step::End(i) => {
                    let e = &t.events[i];
                    let end = TrackEvent {
                        r#type: Some(proto::TYPE_SLICE_END),
                        track_uuid: Some(track_uuid(e.track)),
                        ..Default::default()
                    };
                    self.event(e.start_ns + e.dur_ns.unwrap_or(0), end)?;
                }
            }
        }
        Ok(())
    }

    fn arg(&mut self, t: &Timeline, name: &str, v: &Arg) -> DebugAnnotation {
        let a = self.arg_name(name);
        match v {
            Arg::Uint(u) => DebugAnnotation {
                uint_value: Some(*u),
                ..a
            },
            Arg::Str(s) => DebugAnnotation {
                string_value_iid: Some(self.string_iid(s)),
                ..a
            },
            Arg::Stack(s) => DebugAnnotation {
                string_value_iid: Some(self.string_iid(&t.stacks[*s as usize])),
                ..a
            },
            Arg::Dim(d) => DebugAnnotation {
                array_values: d
                    .iter()
                    .map(|&x| DebugAnnotation {
                        int_value: Some(i64::from(x)),
                        ..Default::default()
                    })
                    .collect(),
                ..a
            },
        }
    }

    /// Writes one packet as a `Trace.packet` field (tag 1, length-delimited).
    fn packet(&mut self, p: &proto::TracePacket) -> std::io::Result<()> {
        self.buf.clear();
        self.buf.push(0x0a);
        p.encode_length_delimited(&mut self.buf)
            .map_err(std::io::Error::other)?;
        self.written += self.buf.len() as u64;
        self.out.write_all(&self.buf)
    }

    fn descriptor(&mut self, d: TrackDescriptor) -> std::io::Result<()> {
        self.packet(&proto::TracePacket {
            track_descriptor: Some(d),
            trusted_packet_sequence_id: Some(SEQUENCE),
            ..Default::default()
        })
    }

    /// Writes an event with the interned entries it introduced.
    fn event(&mut self, ts: u64, e: TrackEvent) -> std::io::Result<()> {
        let interned = std::mem::take(&mut self.new_interned);
        let empty = interned == proto::InternedData::default();
        self.packet(&proto::TracePacket {
            timestamp: Some(ts),
            track_event: Some(e),
            trusted_packet_sequence_id: Some(SEQUENCE),
            interned_data: (!empty).then_some(interned),
            sequence_flags: Some(proto::SEQ_NEEDS_INCREMENTAL_STATE),
            ..Default::default()
        })
    }

    fn name_iid(&mut self, name: &str) -> u64 {
        let (iid, new) = self.names.get(name);
        if new {
            self.new_interned.event_names.push(entry(iid, name));
        }
        iid
    }

    fn category_iid(&mut self, cat: &str) -> u64 {
        let (iid, new) = self.categories.get(cat);
        if new {
            self.new_interned.event_categories.push(entry(iid, cat));
        }
        iid
    }

    fn arg_name(&mut self, name: &str) -> DebugAnnotation {
        let (iid, new) = self.arg_names.get(name);
        if new {
            self.new_interned
                .debug_annotation_names
                .push(entry(iid, name));
        }
        DebugAnnotation {
            name_iid: Some(iid),
            ..Default::default()
        }
    }

    fn string_iid(&mut self, v: &str) -> u64 {
        let (iid, new) = self.strings.get(v);
        if new {
            self.new_interned
                .debug_annotation_string_values
                .push(proto::InternedString {
                    iid: Some(iid),
                    str: Some(v.as_bytes().to_vec()),
                });
        }
        iid
    }
}

fn entry(iid: u64, name: &str) -> proto::NameEntry {
    proto::NameEntry {
        iid: Some(iid),
        name: Some(name.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_that_ask_for_protobuf() {
        for p in ["t.pftrace", "a/b.PFTRACE", "t.perfetto-trace"] {
            assert!(wanted_for(Path::new(p)), "{p}");
        }
        for p in ["t.json", "pftrace", "t.pftrace.json", "t.perfetto"] {
            assert!(!wanted_for(Path::new(p)), "{p}");
        }
    }
}
