//! pprof output for continuous-profiling back ends (Pyroscope, Parca, Grafana) and
//! `go tool pprof`: a gzipped `perftools.profiles.Profile` protobuf.
//!
//! - Two sample types: `gpu_time` in `nanoseconds` (the default) and `launches` in
//!   `count`. A sample is one (process, CPU stack, API call, GPU frame) with the
//!   summed GPU time of its activities, exact to the ns, and their number.
//! - Each distinct frame is one location with one line; the GPU frame
//!   (`[GPU_Kernel]name`, `[GPU_Memcpy HtoD]`, `[GPU_Memset]`) is the leaf, then the
//!   API call, then the CPU stack up to its root, as pprof lists a sample's
//!   locations leaf first. Python frames written as `file.py(12): func` become
//!   function `func` in file `file.py`, line 12.
//! - Activities without a CPU stack are under `[no CPU stack]`; launches that
//!   caused no GPU work end in `[GPU_Launch_Pending]` with 0 ns and 1 launch;
//!   synchronizations are CPU waits and are left out, as in the folded output.
//! - Each sample carries a `pid` label.
//!
//! The messages are declared here with prost's derive, field for field from
//! pprof's `profile.proto`, so no protobuf compiler is needed to build.

use std::io::Write;

use rustc_hash::FxHashMap;

use crate::error::{Error, Result};
use crate::join::{ApiInfo, Context, Match, Sink, Summary};
use crate::model::{ActivityKind, MemcpyKind, Record, StringId};
use crate::read::cpu::{CpuLaunch, StackId};
use crate::write::demangle::Demangler;
use crate::write::folded::{NO_STACK_ROOT, PENDING_FRAME};

/// pprof's `profile.proto` messages (the fields gpuperf writes, plus the rest so
/// that profiles read back in tests keep everything).
pub mod proto {
    /// `perftools.profiles.Profile`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Profile {
        /// What each sample value means.
        #[prost(message, repeated, tag = "1")]
        pub sample_type: Vec<ValueType>,
        /// The samples.
        #[prost(message, repeated, tag = "2")]
        pub sample: Vec<Sample>,
        /// Mapped binaries (none here).
        #[prost(message, repeated, tag = "3")]
        pub mapping: Vec<Mapping>,
        /// Locations, referenced by samples.
        #[prost(message, repeated, tag = "4")]
        pub location: Vec<Location>,
        /// Functions, referenced by lines.
        #[prost(message, repeated, tag = "5")]
        pub function: Vec<Function>,
        /// Strings referenced by index; entry 0 is "".
        #[prost(string, repeated, tag = "6")]
        pub string_table: Vec<String>,
        /// Regexp of frames to drop.
        #[prost(int64, tag = "7")]
        pub drop_frames: i64,
        /// Regexp of frames to keep.
        #[prost(int64, tag = "8")]
        pub keep_frames: i64,
        /// When the profile was taken, ns since the epoch.
        #[prost(int64, tag = "9")]
        pub time_nanos: i64,
        /// How long it covers, ns.
        #[prost(int64, tag = "10")]
        pub duration_nanos: i64,
        /// What the period counts.
        #[prost(message, optional, tag = "11")]
        pub period_type: Option<ValueType>,
        /// Sampling period.
        #[prost(int64, tag = "12")]
        pub period: i64,
        /// Free-form comments (string indices).
        #[prost(int64, repeated, tag = "13")]
        pub comment: Vec<i64>,
        /// Index of the default sample type's name in the string table.
        #[prost(int64, tag = "14")]
        pub default_sample_type: i64,
    }

    /// `perftools.profiles.ValueType`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ValueType {
        /// Type name (string index).
        #[prost(int64, tag = "1")]
        pub r#type: i64,
        /// Unit (string index).
        #[prost(int64, tag = "2")]
        pub unit: i64,
    }

    /// `perftools.profiles.Sample`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Sample {
        /// Locations, leaf first.
        #[prost(uint64, repeated, tag = "1")]
        pub location_id: Vec<u64>,
        /// One value per sample type.
        #[prost(int64, repeated, tag = "2")]
        pub value: Vec<i64>,
        /// Labels.
        #[prost(message, repeated, tag = "3")]
        pub label: Vec<Label>,
    }

    /// `perftools.profiles.Label`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Label {
        /// Key (string index).
        #[prost(int64, tag = "1")]
        pub key: i64,
        /// String value (string index).
        #[prost(int64, tag = "2")]
        pub str: i64,
        /// Numeric value.
        #[prost(int64, tag = "3")]
        pub num: i64,
        /// Unit of `num` (string index).
        #[prost(int64, tag = "4")]
        pub num_unit: i64,
    }

    /// `perftools.profiles.Mapping`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Mapping {
        /// Unique id.
        #[prost(uint64, tag = "1")]
        pub id: u64,
        /// Start address.
        #[prost(uint64, tag = "2")]
        pub memory_start: u64,
        /// End address.
        #[prost(uint64, tag = "3")]
        pub memory_limit: u64,
        /// File offset of the start.
        #[prost(uint64, tag = "4")]
        pub file_offset: u64,
        /// File name (string index).
        #[prost(int64, tag = "5")]
        pub filename: i64,
        /// Build id (string index).
        #[prost(int64, tag = "6")]
        pub build_id: i64,
        /// Symbols are resolved.
        #[prost(bool, tag = "7")]
        pub has_functions: bool,
        /// File names are resolved.
        #[prost(bool, tag = "8")]
        pub has_filenames: bool,
        /// Line numbers are resolved.
        #[prost(bool, tag = "9")]
        pub has_line_numbers: bool,
        /// Inline frames are resolved.
        #[prost(bool, tag = "10")]
        pub has_inline_frames: bool,
    }

    /// `perftools.profiles.Location`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Location {
        /// Unique id, not 0.
        #[prost(uint64, tag = "1")]
        pub id: u64,
        /// Its mapping, 0 for none.
        #[prost(uint64, tag = "2")]
        pub mapping_id: u64,
        /// Instruction address, 0 when unknown.
        #[prost(uint64, tag = "3")]
        pub address: u64,
        /// Lines, innermost inline frame first.
        #[prost(message, repeated, tag = "4")]
        pub line: Vec<Line>,
        /// Folded (merged) location.
        #[prost(bool, tag = "5")]
        pub is_folded: bool,
    }

    /// `perftools.profiles.Line`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Line {
        /// The function.
        #[prost(uint64, tag = "1")]
        pub function_id: u64,
        /// Line number, 0 when unknown.
        #[prost(int64, tag = "2")]
        pub line: i64,
        /// Column, 0 when unknown.
        #[prost(int64, tag = "3")]
        pub column: i64,
    }

    /// `perftools.profiles.Function`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Function {
        /// Unique id, not 0.
        #[prost(uint64, tag = "1")]
        pub id: u64,
        /// Name (string index).
        #[prost(int64, tag = "2")]
        pub name: i64,
        /// Mangled name (string index).
        #[prost(int64, tag = "3")]
        pub system_name: i64,
        /// Source file (string index).
        #[prost(int64, tag = "4")]
        pub filename: i64,
        /// First line.
        #[prost(int64, tag = "5")]
        pub start_line: i64,
    }
}

#[derive(Copy, Clone, PartialEq, Eq, Hash)]
enum Label {
    Kernel(StringId),
    Memcpy(MemcpyKind),
    Memset,
    Pending,
}

/// (pid, CPU stack, API, GPU frame).
type Key = (u32, Option<StackId>, Option<StringId>, Label);

/// Accumulates GPU time and launches per stack, then encodes the profile; a [`Sink`].
#[derive(Default)]
pub struct Builder {
    acc: FxHashMap<Key, (u64, u64)>,
    first_ns: u64,
    last_ns: u64,
    demangler: Demangler,
    profile: proto::Profile,
}

impl Builder {
    /// An empty builder.
    pub fn new() -> Self {
        Self {
            first_ns: u64::MAX,
            ..Self::default()
        }
    }

    /// The profile, complete after the join.
    pub fn profile(&self) -> &proto::Profile {
        &self.profile
    }

    /// Writes the gzipped profile.
    pub fn write<W: Write>(&self, out: W) -> Result<()> {
        write_gz(&self.profile, out)
    }

    fn add(&mut self, key: Key, ns: u64, launches: u64) {
        let v = self.acc.entry(key).or_default();
        v.0 = v.0.saturating_add(ns);
        v.1 += launches;
    }
}

/// Writes `profile` gzipped, as pprof's readers take it.
pub(crate) fn write_gz<W: Write>(profile: &proto::Profile, out: W) -> Result<()> {
    let err = |source| Error::Write {
        what: "pprof profile",
        source,
    };
    let mut gz = flate2::write::GzEncoder::new(out, flate2::Compression::default());
    gz.write_all(&prost::Message::encode_to_vec(profile))
        .map_err(err)?;
    gz.finish().map_err(err)?.flush().map_err(err)
}

/// A launch's frames, root first: its CPU stack (`[no CPU stack]` without
/// one), then its API call unless the stack ends with it.
pub(crate) fn cpu_frames(
    ctx: &Context<'_>,
    stack: Option<StackId>,
    api: Option<StringId>,
) -> Vec<String> {
    let mut frames: Vec<String> = match (stack, ctx.cpu) {
        (Some(s), Some(cpu)) => cpu.stacks.text(s).split(';').map(str::to_owned).collect(),
        _ => vec![NO_STACK_ROOT.to_owned()],
    };
    if let Some(api) = api {
        let api = ctx.strings.get(api);
        if frames.last().map(String::as_str) != Some(api) {
            frames.push(api.to_owned());
        }
    }
    frames
}

/// Interns strings, functions and locations of one profile.
pub(crate) struct Tables {
    strings: Vec<String>,
    string_ids: FxHashMap<String, i64>,
    functions: Vec<proto::Function>,
    function_ids: FxHashMap<(i64, i64), u64>,
    locations: Vec<proto::Location>,
    location_ids: FxHashMap<String, u64>,
}

impl Tables {
    pub(crate) fn new() -> Self {
        let mut t = Self {
            strings: Vec::new(),
            string_ids: FxHashMap::default(),
            functions: Vec::new(),
            function_ids: FxHashMap::default(),
            locations: Vec::new(),
            location_ids: FxHashMap::default(),
        };
        t.string("");
        t
    }

    pub(crate) fn string(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.string_ids.get(s) {
            return i;
        }
        let i = self.strings.len() as i64;
        self.strings.push(s.to_owned());
        self.string_ids.insert(s.to_owned(), i);
        i
    }

    /// The location of a frame; `file.py(12): func` gets its file and line.
    pub(crate) fn location(&mut self, frame: &str) -> u64 {
        if let Some(&id) = self.location_ids.get(frame) {
            return id;
        }
        let (name, file, line) = python_frame(frame).unwrap_or((frame, "", 0));
        self.new_location(frame.to_owned(), name, file, line, 0)
    }

    /// The location of an instruction at `address` in function `name`, of
    /// source `file:line` (`""` and 0 when unknown).
    pub(crate) fn instruction(&mut self, name: &str, address: u64, file: &str, line: u32) -> u64 {
        let key = format!("{name}\0{address:#x}\0{file}:{line}");
        if let Some(&id) = self.location_ids.get(&key) {
            return id;
        }
        self.new_location(key, name, file, i64::from(line), address)
    }

    fn new_location(
        &mut self,
        key: String,
        name: &str,
        file: &str,
        line: i64,
        address: u64,
    ) -> u64 {
        let (name, file) = (self.string(name), self.string(file));
        let next = self.functions.len() as u64 + 1;
        let function_id = *self.function_ids.entry((name, file)).or_insert(next);
        if function_id == next {
            self.functions.push(proto::Function {
                id: function_id,
                name,
                system_name: name,
                filename: file,
                start_line: 0,
            });
        }
        let id = self.locations.len() as u64 + 1;
        self.locations.push(proto::Location {
            id,
            mapping_id: 0,
            address,
            line: vec![proto::Line {
                function_id,
                line,
                column: 0,
            }],
            is_folded: false,
        });
        self.location_ids.insert(key, id);
        id
    }

    /// The profile of `sample`s of `sample_type`s, with these tables.
    pub(crate) fn profile(
        mut self,
        sample_type: Vec<proto::ValueType>,
        sample: Vec<proto::Sample>,
        comment: &str,
        time_nanos: i64,
        duration_nanos: i64,
    ) -> proto::Profile {
        let default_sample_type = sample_type.first().map_or(0, |t| t.r#type);
        let comment = vec![self.string(comment)];
        proto::Profile {
            sample_type,
            sample,
            mapping: Vec::new(),
            location: self.locations,
            function: self.functions,
            string_table: self.strings,
            drop_frames: 0,
            keep_frames: 0,
            time_nanos,
            duration_nanos,
            period_type: None,
            period: 0,
            comment,
            default_sample_type,
        }
    }

    /// A value type `ty` in `unit`.
    pub(crate) fn value_type(&mut self, ty: &str, unit: &str) -> proto::ValueType {
        proto::ValueType {
            r#type: self.string(ty),
            unit: self.string(unit),
        }
    }
}

/// `path/file.py(12): func` → (`func`, `path/file.py`, 12).
fn python_frame(frame: &str) -> Option<(&str, &str, i64)> {
    let (head, name) = frame.split_once("): ")?;
    let (file, line) = head.rsplit_once('(')?;
    let line: i64 = line.parse().ok()?;
    (!file.is_empty() && !name.is_empty()).then_some((name, file, line))
}

impl Sink for Builder {
    fn record(&mut self, _ctx: &Context<'_>, rec: &Record, m: &Match<'_>) -> Result<()> {
        let Record::Activity(a) = rec else {
            return Ok(());
        };
        let label = match a.kind {
            ActivityKind::Kernel { name, .. } => Label::Kernel(name),
            ActivityKind::Memcpy { kind, .. } => Label::Memcpy(kind),
            ActivityKind::Memset { .. } => Label::Memset,
            ActivityKind::Sync { .. } => return Ok(()),
        };
        self.first_ns = self.first_ns.min(a.start_ns);
        self.last_ns = self.last_ns.max(a.end_ns);
        let c = m.charge();
        self.add((a.pid, c.stack, c.api, label), a.duration_ns(), 1);
        Ok(())
    }

    fn pending(
        &mut self,
        _ctx: &Context<'_>,
        launch: &CpuLaunch,
        api: Option<&ApiInfo>,
    ) -> Result<()> {
        self.add(
            (
                launch.pid,
                Some(launch.stack),
                api.map(|a| a.name),
                Label::Pending,
            ),
            0,
            1,
        );
        Ok(())
    }

    fn finish(&mut self, ctx: &Context<'_>, _summary: &Summary) -> Result<()> {
        let mut t = Tables::new();
        let sample_type = vec![
            t.value_type("gpu_time", "nanoseconds"),
            t.value_type("launches", "count"),
        ];
        let pid_key = t.string("pid");
        // Deterministic output: samples in the order of their rendered stacks.
        let mut rows: Vec<(Vec<String>, u32, u64, u64)> = Vec::with_capacity(self.acc.len());
        for (&(pid, stack, api, label), &(ns, n)) in &self.acc {
            let mut frames = cpu_frames(ctx, stack, api);
            frames.push(match label {
                Label::Kernel(name) => {
                    format!(
                        "[GPU_Kernel]{}",
                        self.demangler.label(name, ctx.strings, ctx.view)
                    )
                }
                Label::Memcpy(kind) => format!("[GPU_Memcpy {kind}]"),
                Label::Memset => "[GPU_Memset]".to_owned(),
                Label::Pending => PENDING_FRAME.to_owned(),
            });
            rows.push((frames, pid, ns, n));
        }
        rows.sort_unstable();
        let sample = rows
            .iter()
            .map(|(frames, pid, ns, n)| proto::Sample {
                location_id: frames.iter().rev().map(|f| t.location(f)).collect(),
                value: vec![
                    i64::try_from(*ns).unwrap_or(i64::MAX),
                    i64::try_from(*n).unwrap_or(i64::MAX),
                ],
                label: vec![proto::Label {
                    key: pid_key,
                    str: 0,
                    num: i64::from(*pid),
                    num_unit: 0,
                }],
            })
            .collect();
        let duration = self.last_ns.saturating_sub(self.first_ns.min(self.last_ns));
        let time_nanos = if ctx.clock == crate::model::Clock::Realtime && self.first_ns != u64::MAX
        {
            i64::try_from(self.first_ns).unwrap_or(0)
        } else {
            0
        };
        self.profile = t.profile(
            sample_type,
            sample,
            "generated by gpuperf: GPU time by the CPU stack that launched it",
            time_nanos,
            i64::try_from(duration).unwrap_or(i64::MAX),
        );
        self.acc = FxHashMap::default();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_frames_split_into_file_line_and_function() {
        assert_eq!(
            python_frame("torch/nn/modules/module.py(1750): _call_impl"),
            Some(("_call_impl", "torch/nn/modules/module.py", 1750))
        );
        assert_eq!(
            python_frame("resnet50_profiler_api.py(54): <module>"),
            Some(("<module>", "resnet50_profiler_api.py", 54))
        );
        assert_eq!(python_frame("aten::conv2d"), None);
        assert_eq!(
            python_frame("<built-in method to of Tensor object at 0x7f>"),
            None
        );
        assert_eq!(python_frame("f(x): y"), None);
    }
}
