//! A recording as two Apache Parquet tables, for DuckDB, ClickHouse, Spark or
//! pandas without gpuperf: `events.parquet` (one row per GPU activity and per
//! CUDA API call) and `stacks.parquet` (the CPU stacks the events name).
//!
//! Schema version 1, in each file's key-value metadata as
//! `gpuperf.schema_version` (a new column keeps the version; a changed or
//! removed one raises it). Times are ns on the trace's clock
//! (`gpuperf.clock`: `monotonic` or `realtime`).
//!
//! `events.parquet`:
//!
//! | column | type | meaning |
//! |---|---|---|
//! | `host` | string, null | the machine the process ran on, when known |
//! | `rank` | int32, null | the process's distributed rank, when known |
//! | `local_rank` | int32, null | its rank on its host, when known |
//! | `world_size` | int32, null | the job's number of ranks, when known |
//! | `pid` | uint32 | process id |
//! | `tid` | uint32, null | the thread of the API call (for GPU work: of the call that launched it) |
//! | `device` | uint32, null | CUDA device ordinal (null for API calls, and when unknown) |
//! | `stream` | uint32, null | CUDA stream id |
//! | `kind` | string | `kernel`, `memcpy`, `memset`, `sync` or `api` |
//! | `name` | string | as gpuperf's report names it: the kernel's name in the run's view, `[Memcpy HtoD]`, `[Memset]`, `[Sync]`, the API function |
//! | `symbol` | string, null | a kernel's name as CUPTI reported it (mangled) |
//! | `start_ns` | int64 | start |
//! | `duration_ns` | int64 | duration |
//! | `bytes` | uint64, null | bytes copied or set |
//! | `correlation_id` | uint32 | CUPTI's id joining an API call to its GPU work, unique per process |
//! | `stack_id` | uint32, null | the CPU stack charged ([`crate::join::Match::charge`]), a row of `stacks.parquet` |
//! | `graph_id`, `graph_node_id` | uint32, uint64, null | the CUDA graph and node of replayed graph work |
//!
//! A process's host and ranks are those its trace recorded (the injection
//! library reads the launcher's `RANK`, `LOCAL_RANK`, `WORLD_SIZE` or their
//! Slurm, Open MPI and PMI equivalents; a Kineto trace gives its
//! `distributedInfo`); what a trace does not say comes from the recording's own
//! [`Origin`] (the environment `gpuperf record` ran in).
//!
//! `stacks.parquet`: `stack_id` (uint32) and `frames` (list of strings, the
//! root first, as the folded output spells them).

use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use arrow_array::builder::{
    Int32Builder, Int64Builder, ListBuilder, StringBuilder, UInt32Builder, UInt64Builder,
};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;
use rustc_hash::{FxHashMap, FxHashSet};

use crate::error::{Error, Result};
use crate::join::{Context, Match, Sink, Summary};
use crate::model::{ActivityKind, Clock, Origin, Record};
use crate::read::cpu::StackId;
use crate::write::activity_label;
use crate::write::demangle::Demangler;

/// The schema version written in each file's metadata.
pub(crate) const SCHEMA_VERSION: u32 = 1;
/// The events table's file name inside the output directory.
pub const EVENTS: &str = "events.parquet";
/// The stacks table's file name inside the output directory.
pub const STACKS: &str = "stacks.parquet";
/// Rows buffered before they are written as one row group.
const BATCH_ROWS: usize = 64 * 1024;

/// Writes the two tables into a directory as the join runs; a [`Sink`].
pub(crate) struct ParquetWriter {
    dir: std::path::PathBuf,
    origin: Origin,
    /// Each process's origin, as its trace recorded it, completed by `origin`.
    origins: FxHashMap<u32, Origin>,
    events: Option<ArrowWriter<File>>,
    rows: EventColumns,
    stacks: FxHashSet<StackId>,
    demangler: Demangler,
}

/// The events table's columns being filled.
#[derive(Default)]
struct EventColumns {
    len: usize,
    host: StringBuilder,
    rank: Int32Builder,
    local_rank: Int32Builder,
    world_size: Int32Builder,
    pid: UInt32Builder,
    tid: UInt32Builder,
    device: UInt32Builder,
    stream: UInt32Builder,
    kind: StringBuilder,
    name: StringBuilder,
    symbol: StringBuilder,
    start: Int64Builder,
    duration: Int64Builder,
    bytes: UInt64Builder,
    correlation: UInt32Builder,
    stack: UInt32Builder,
    graph: UInt32Builder,
    node: UInt64Builder,
}

/// One row of the events table.
struct Event<'a> {
    pid: u32,
    tid: Option<u32>,
    device: Option<u32>,
    stream: Option<u32>,
    kind: &'static str,
    name: &'a str,
    symbol: Option<&'a str>,
    start_ns: u64,
    duration_ns: u64,
    bytes: Option<u64>,
    correlation_id: u32,
    stack: Option<StackId>,
    graph: Option<(u32, u64)>,
}

fn events_schema() -> SchemaRef {
    let f = |name: &str, t: DataType, null: bool| Field::new(name, t, null);
    Arc::new(Schema::new(vec![
        f("host", DataType::Utf8, true),
        f("rank", DataType::Int32, true),
        f("local_rank", DataType::Int32, true),
        f("world_size", DataType::Int32, true),
        f("pid", DataType::UInt32, false),
        f("tid", DataType::UInt32, true),
        f("device", DataType::UInt32, true),
        f("stream", DataType::UInt32, true),
        f("kind", DataType::Utf8, false),
        f("name", DataType::Utf8, false),
        f("symbol", DataType::Utf8, true),
        f("start_ns", DataType::Int64, false),
        f("duration_ns", DataType::Int64, false),
        f("bytes", DataType::UInt64, true),
        f("correlation_id", DataType::UInt32, false),
        f("stack_id", DataType::UInt32, true),
        f("graph_id", DataType::UInt32, true),
        f("graph_node_id", DataType::UInt64, true),
    ]))
}

fn stacks_schema() -> SchemaRef {
    let frame = Field::new("item", DataType::Utf8, false);
    Arc::new(Schema::new(vec![
        Field::new("stack_id", DataType::UInt32, false),
        Field::new("frames", DataType::List(Arc::new(frame)), false),
    ]))
}

fn to_i64(ns: u64) -> i64 {
    i64::try_from(ns).unwrap_or(i64::MAX)
}

impl EventColumns {
    fn push(&mut self, origin: &Origin, e: &Event<'_>) {
        self.len += 1;
        let int = |v: Option<u32>| v.and_then(|v| i32::try_from(v).ok());
        self.host.append_option(origin.host.as_deref());
        self.rank.append_option(int(origin.rank));
        self.local_rank.append_option(int(origin.local_rank));
        self.world_size.append_option(int(origin.world_size));
        self.pid.append_value(e.pid);
        self.tid.append_option(e.tid);
        self.device.append_option(e.device);
        self.stream.append_option(e.stream);
        self.kind.append_value(e.kind);
        self.name.append_value(e.name);
        self.symbol.append_option(e.symbol);
        self.start.append_value(to_i64(e.start_ns));
        self.duration.append_value(to_i64(e.duration_ns));
        self.bytes.append_option(e.bytes);
        self.correlation.append_value(e.correlation_id);
        self.stack.append_option(e.stack.map(|s| s.index() as u32));
        self.graph.append_option(e.graph.map(|g| g.0));
        self.node.append_option(e.graph.map(|g| g.1));
    }

    /// The rows so far as a batch; the builders start again empty.
    fn batch(&mut self, schema: SchemaRef) -> std::result::Result<RecordBatch, String> {
        self.len = 0;
        let columns: Vec<ArrayRef> = vec![
            Arc::new(self.host.finish()),
            Arc::new(self.rank.finish()),
            Arc::new(self.local_rank.finish()),
            Arc::new(self.world_size.finish()),
            Arc::new(self.pid.finish()),
            Arc::new(self.tid.finish()),
            Arc::new(self.device.finish()),
            Arc::new(self.stream.finish()),
            Arc::new(self.kind.finish()),
            Arc::new(self.name.finish()),
            Arc::new(self.symbol.finish()),
            Arc::new(self.start.finish()),
            Arc::new(self.duration.finish()),
            Arc::new(self.bytes.finish()),
            Arc::new(self.correlation.finish()),
            Arc::new(self.stack.finish()),
            Arc::new(self.graph.finish()),
            Arc::new(self.node.finish()),
        ];
        RecordBatch::try_new(schema, columns).map_err(|e| e.to_string())
    }
}

impl ParquetWriter {
    /// Creates `dir` (and the events file in it) for a recording made at `origin`.
    pub fn create(dir: &Path, origin: Origin) -> Result<Self> {
        std::fs::create_dir_all(dir).map_err(Error::io("create", dir))?;
        Ok(Self {
            dir: dir.to_owned(),
            origin,
            origins: FxHashMap::default(),
            events: None,
            rows: EventColumns::default(),
            stacks: FxHashSet::default(),
            demangler: Demangler::default(),
        })
    }

    fn parquet_error(&self, file: &str, e: impl std::fmt::Display) -> Error {
        Error::Io {
            action: "write",
            path: self.dir.join(file),
            source: std::io::Error::other(e.to_string()),
        }
    }

    fn open(&self, file: &str, schema: SchemaRef, clock: Clock) -> Result<ArrowWriter<File>> {
        let path = self.dir.join(file);
        let f = File::create(&path).map_err(Error::io("create", &path))?;
        let clock = match clock {
            Clock::Monotonic => "monotonic",
            Clock::Realtime => "realtime",
        };
        let props = WriterProperties::builder()
            .set_compression(Compression::SNAPPY)
            .set_key_value_metadata(Some(vec![
                KeyValue::new(
                    "gpuperf.schema_version".to_owned(),
                    SCHEMA_VERSION.to_string(),
                ),
                KeyValue::new("gpuperf.clock".to_owned(), clock.to_owned()),
            ]))
            .build();
        ArrowWriter::try_new(f, schema, Some(props)).map_err(|e| self.parquet_error(file, e))
    }

    fn flush(&mut self, clock: Clock) -> Result<()> {
        let batch = self
            .rows
            .batch(events_schema())
            .map_err(|e| self.parquet_error(EVENTS, e))?;
        let mut w = match self.events.take() {
            Some(w) => w,
            None => self.open(EVENTS, events_schema(), clock)?,
        };
        let written = w.write(&batch);
        self.events = Some(w);
        written.map_err(|e| self.parquet_error(EVENTS, e))
    }

    fn push(&mut self, ctx: &Context<'_>, e: &Event<'_>) -> Result<()> {
        if let Some(s) = e.stack {
            self.stacks.insert(s);
        }
        let origin = self.origins.get(&e.pid).unwrap_or(&self.origin);
        self.rows.push(origin, e);
        if self.rows.len >= BATCH_ROWS {
            self.flush(ctx.clock)?;
        }
        Ok(())
    }

    fn write_stacks(&self, ctx: &Context<'_>) -> Result<()> {
        let mut ids: Vec<StackId> = self.stacks.iter().copied().collect();
        ids.sort_unstable();
        let mut id = UInt32Builder::with_capacity(ids.len());
        let mut frames = ListBuilder::new(StringBuilder::new()).with_field(Arc::new(Field::new(
            "item",
            DataType::Utf8,
            false,
        )));
        if let Some(cpu) = ctx.cpu {
            for s in ids {
                id.append_value(s.index() as u32);
                for f in cpu.stacks.text(s).split(';') {
                    frames.values().append_value(f);
                }
                frames.append(true);
            }
        }
        let columns: Vec<ArrayRef> = vec![Arc::new(id.finish()), Arc::new(frames.finish())];
        let batch = RecordBatch::try_new(stacks_schema(), columns)
            .map_err(|e| self.parquet_error(STACKS, e))?;
        let mut w = self.open(STACKS, stacks_schema(), ctx.clock)?;
        w.write(&batch).map_err(|e| self.parquet_error(STACKS, e))?;
        w.close().map_err(|e| self.parquet_error(STACKS, e))?;
        Ok(())
    }
}

impl Sink for ParquetWriter {
    fn record(&mut self, ctx: &Context<'_>, rec: &Record, m: &Match<'_>) -> Result<()> {
        match rec {
            Record::Activity(a) => {
                let (kind, bytes) = match a.kind {
                    ActivityKind::Kernel { .. } => ("kernel", None),
                    ActivityKind::Memcpy { bytes, .. } => ("memcpy", Some(bytes)),
                    ActivityKind::Memset { bytes, .. } => ("memset", Some(bytes)),
                    ActivityKind::Sync { .. } => ("sync", None),
                };
                let name = activity_label(a.kind, |name| {
                    self.demangler.label(name, ctx.strings, ctx.view).to_owned()
                });
                let symbol = match a.kind {
                    ActivityKind::Kernel { name, .. } => Some(ctx.strings.get(name)),
                    _ => None,
                };
                let e = Event {
                    pid: a.pid,
                    tid: m.api.map(|api| api.tid),
                    device: a.device,
                    stream: a.stream,
                    kind,
                    name: &name,
                    symbol,
                    start_ns: a.start_ns,
                    duration_ns: a.duration_ns(),
                    bytes,
                    correlation_id: a.correlation_id,
                    stack: m.charge().stack,
                    graph: a.graph(),
                };
                self.push(ctx, &e)
            }
            Record::Api(a) => {
                let e = Event {
                    pid: a.pid,
                    tid: Some(a.tid),
                    device: None,
                    stream: None,
                    kind: "api",
                    name: ctx.strings.get(a.name),
                    symbol: None,
                    start_ns: a.start_ns,
                    duration_ns: a.end_ns.saturating_sub(a.start_ns),
                    bytes: None,
                    correlation_id: a.correlation_id,
                    stack: m.launch.map(|l| l.stack),
                    graph: None,
                };
                self.push(ctx, &e)
            }
            Record::Origin(o) => {
                let (mine, fallback) = (&o.origin, &self.origin);
                let merged = Origin {
                    host: mine.host.clone().or_else(|| fallback.host.clone()),
                    rank: mine.rank.or(fallback.rank),
                    local_rank: mine.local_rank.or(fallback.local_rank),
                    world_size: mine.world_size.or(fallback.world_size),
                };
                self.origins.insert(o.pid, merged);
                Ok(())
            }
            _ => Ok(()),
        }
    }

    fn finish(&mut self, ctx: &Context<'_>, _summary: &Summary) -> Result<()> {
        if self.rows.len > 0 || self.events.is_none() {
            self.flush(ctx.clock)?;
        }
        if let Some(w) = self.events.take() {
            w.close().map_err(|e| self.parquet_error(EVENTS, e))?;
        }
        self.write_stacks(ctx)
    }
}
