//! GPU PC samples (CUPTI's PC Sampling API) as folded stacks, weight = samples:
//!
//! ```text
//! cpu;…;cudaLaunchKernel;[GPU_Kernel]k;[GPU_PC]k+0x1f0;[CUDA]k.cu:42;[Stall]long_scoreboard 120
//! ```
//!
//! - Each sample goes under the CPU stack and API call of the launch whose
//!   correlation id it carries (kernel-serialized mode), then the kernel as the
//!   time flamegraph names it, the SASS instruction (function + offset), the
//!   CUDA source line when the module has line information, and the stall
//!   reason as the leaf (CUPTI's `smsp__pcsamp_warps_issue_stalled_` dropped).
//! - Samples that name no launch (continuous mode, correlation id 0) go under
//!   `[no CPU stack]` and their function: they are counted apart
//!   ([`PcStats::unattributed`]), as are samples whose launch has no kernel
//!   record in the trace ([`PcStats::unmatched`]); none is dropped.
//! - With several processes each stack starts with a process frame, as in the
//!   folded GPU-time output.
//! - CUPTI's `*_not_issued` reasons (`…_long_scoreboard_not_issued`, beside
//!   most reasons on an H100 or H200) are a part of their base reason's
//!   samples, not more samples (`not_issued_base` says why): they are not
//!   folded and not in the totals, only counted ([`PcStats::not_issued`], and
//!   per line and kernel by base reason in [`Stalls::not_issued`]), so each
//!   sample weighs once and the flamegraph has no `[Stall]…_not_issued`
//!   leaves.
//! - The recorder's notes say how the samples were taken (kernel-serialized
//!   or continuous), and its `PC_LAUNCHES` record how many launches the
//!   sampling windows covered ([`PcLaunches`]); [`PcStats`] carries them to
//!   the summary and report.

use std::collections::BTreeMap;
use std::io::Write;

use rustc_hash::FxHashMap;

use crate::error::{Error, Result};
use crate::join::{Context, Match, Sink, Summary};
use crate::model::{
    ActivityKind, PC_CONTINUOUS_NOTE, PC_SERIALIZED_NOTE, PcLaunches, PcSample, Record, StringId,
    not_issued_base,
};
use crate::read::cpu::StackId;
use crate::write::demangle::Demangler;
use crate::write::folded::{KERNEL_PREFIX, NO_STACK_ROOT, process_name, push_stack};
use crate::write::pprof::{Tables, cpu_frames, proto, write_gz};

/// Prefix of a SASS instruction's frame.
pub(crate) const PC_PREFIX: &str = "[GPU_PC]";
/// Prefix of a CUDA source line's frame.
pub(crate) const SOURCE_PREFIX: &str = "[CUDA]";
/// Prefix of the stall reason, the leaf.
pub(crate) const STALL_PREFIX: &str = "[Stall]";
/// The frame of an instruction whose module has no line information.
pub const NO_LINE: &str = "[CUDA]? (no line information: build with -lineinfo)";

/// What the samples were charged to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PcStats {
    /// All samples.
    pub samples: u64,
    /// Samples charged to their launch's CPU stack.
    pub attributed: u64,
    /// Samples that name no launch (continuous mode): charged to their function only.
    pub unattributed: u64,
    /// Samples whose launch has no kernel record in the trace.
    pub unmatched: u64,
    /// Samples without a source line (no line information in the module, or
    /// a module the recorder never had).
    pub without_line: u64,
    /// Samples of CUPTI's `*_not_issued` reasons, in none of the counts above:
    /// each is already one of its base reason's samples.
    pub not_issued: u64,
    /// Launches inside and outside the sampling windows, when the recorder
    /// counted them.
    pub launches: Option<PcLaunches>,
    /// Launches that have a sample (kernel-serialized: distinct correlation
    /// ids); fewer than [`PcLaunches::sampled`] when some sampled kernels
    /// were too short for the sampling period.
    pub launches_with_samples: u64,
    /// A recorder sampled in kernel-serialized mode (kernels ran one at a time).
    pub serialized: bool,
    /// A recorder sampled in continuous mode (samples name no launch).
    pub continuous: bool,
}

/// `N GPU PC samples: …`, each share said.
impl std::fmt::Display for PcStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} GPU PC samples", self.samples)?;
        if self.samples > 0 {
            write!(
                f,
                ": {} charged to their launch's CPU stack",
                self.attributed
            )?;
        }
        if self.unattributed > 0 {
            write!(
                f,
                ", {} naming no launch (continuous mode) charged to their kernel only",
                self.unattributed
            )?;
        }
        if self.unmatched > 0 {
            write!(
                f,
                ", {} whose launch has no kernel record in the trace",
                self.unmatched
            )?;
        }
        if self.without_line > 0 {
            write!(
                f,
                "; {} without a source line (build your own kernels with -lineinfo; \
                 libraries' kernels, such as PyTorch's and cuBLAS's, usually ship without line \
                 information; a module CUPTI never passed to gpuperf has none either, as the \
                 recorder's notes then say)",
                self.without_line
            )?;
        }
        if self.not_issued > 0 {
            write!(
                f,
                "; {} not-issued samples (CUPTI's *_not_issued reasons: the part of a stall \
                 reason's samples on cycles that issued nothing) not added again",
                self.not_issued
            )?;
        }
        if let Some(l) = self.launches {
            write!(
                f,
                "; from {} of {} launches (the {} outside the sampling windows have none; \
                 nothing is scaled up)",
                l.sampled,
                l.sampled + l.unsampled,
                l.unsampled
            )?;
            // Only kernel-serialized samples name their launch.
            if self.serialized && l.sampled > self.launches_with_samples {
                write!(
                    f,
                    "; {} of the {} sampled launches have no sample (a kernel too short for \
                     the sampling period gets none: a smaller --pc-sampling=PERIOD takes more)",
                    l.sampled - self.launches_with_samples,
                    l.sampled
                )?;
            }
        }
        if self.serialized {
            f.write_str("; kernels serialized while sampled")?;
        }
        if self.continuous {
            f.write_str("; continuous mode: samples name no launch")?;
        }
        Ok(())
    }
}

/// The launch a correlation id names: its CPU stack, API call and kernel.
#[derive(Clone, Copy)]
struct Launch {
    stack: Option<StackId>,
    api: Option<StringId>,
    kernel: StringId,
}

/// One kernel's samples for the report, by source line and under each by
/// stall reason; the kernel's totals are sums over its lines.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KernelSamples {
    /// Its launches that have a sample (kernel-serialized mode; 0 when the
    /// samples name no launch).
    pub launches: u64,
    /// By `file:line` (or [`NO_LINE`]'s text without the prefix): why that
    /// line's warps stalled (Nsight Compute's per-line stall columns). A line
    /// with only not-issued samples is here, and in no [`lines`](Self::lines).
    pub line_stalls: BTreeMap<String, Stalls>,
}

impl KernelSamples {
    /// All its samples (not-issued ones are a part of these, not more).
    pub fn samples(&self) -> u64 {
        self.line_stalls.values().map(Stalls::samples).sum()
    }

    /// Samples by line, lines without any left out.
    pub fn lines(&self) -> BTreeMap<String, u64> {
        self.line_stalls
            .iter()
            .map(|(line, at)| (line.clone(), at.samples()))
            .filter(|&(_, n)| n > 0)
            .collect()
    }

    /// Its samples by stall reason over all its lines.
    pub fn stalls(&self) -> Stalls {
        let mut all = Stalls::default();
        for at in self.line_stalls.values() {
            for (to, from) in [
                (&mut all.stalls, &at.stalls),
                (&mut all.not_issued, &at.not_issued),
            ] {
                for (reason, n) in from {
                    *to.entry(reason.clone()).or_default() += n;
                }
            }
        }
        all
    }
}

/// Samples by stall reason, and the not-issued part of each.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stalls {
    /// By stall reason.
    pub stalls: BTreeMap<String, u64>,
    /// CUPTI's `*_not_issued` samples by base reason (`long_scoreboard`): the
    /// part of that reason's [`stalls`](Self::stalls) taken on cycles that
    /// issued nothing; not in [`samples`](Self::samples).
    pub not_issued: BTreeMap<String, u64>,
}

impl Stalls {
    /// Its samples over every reason, the not-issued parts not added again.
    pub fn samples(&self) -> u64 {
        self.stalls.values().sum()
    }
}

/// Accumulates PC samples per (stack, kernel, instruction, line, stall), and
/// counts the not-issued ones apart; a [`Sink`].
#[derive(Default)]
pub struct PcFolder {
    launches: FxHashMap<(u32, u32), Launch>,
    samples: Vec<PcSample>,
    exes: FxHashMap<u32, String>,
    lines: Vec<(String, u64)>,
    kernels: BTreeMap<String, KernelSamples>,
    stats: PcStats,
    demangler: Demangler,
    /// The pprof profile, when asked for ([`PcFolder::with_profile`]).
    profile: Option<proto::Profile>,
}

/// One row of the PC-sample pprof profile: (pid, CPU stack, API call,
/// kernel, function, instruction offset, source line, stall reason).
type ProfileKey = (
    u32,
    Option<StackId>,
    Option<StringId>,
    String,
    String,
    u64,
    Option<(StringId, u32)>,
    String,
);

/// The unit of PC-sample folded stacks, as `diff` and the flamegraphs name it.
pub const UNIT: &str = "samples";

/// Whether folded stacks are PC samples (this module's output): every stack
/// ends with a stall reason. `gpuperf diff` reads a folded file's unit so.
pub fn is_pc_folded(lines: &[(String, u64)]) -> bool {
    !lines.is_empty()
        && lines.iter().all(|(stack, _)| {
            stack
                .rsplit(';')
                .next()
                .is_some_and(|leaf| leaf.starts_with(STALL_PREFIX))
        })
}

/// A stall reason as people say it: CUPTI's metric name without its common
/// prefix (`smsp__pcsamp_warps_issue_stalled_long_scoreboard` → `long_scoreboard`).
pub(crate) fn stall_name(reason: &str) -> &str {
    reason
        .strip_prefix("smsp__pcsamp_warps_issue_stalled_")
        .or_else(|| reason.strip_prefix("smsp__pcsamp_warps_issue_"))
        .unwrap_or(reason)
}

impl PcFolder {
    /// An empty folder.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty folder that also makes a pprof profile of the samples
    /// ([`PcFolder::write_profile`]).
    pub fn with_profile() -> Self {
        Self {
            profile: Some(proto::Profile::default()),
            ..Self::default()
        }
    }

    /// The pprof profile, complete after the join; `None` unless made
    /// [`with_profile`](Self::with_profile).
    pub fn profile(&self) -> Option<&proto::Profile> {
        self.profile.as_ref()
    }

    /// Writes the gzipped pprof profile: sample types `samples/count` (the
    /// default) and `not_issued_samples/count` (CUPTI's part of those
    /// samples on cycles that issued nothing); leaf first, each sample's
    /// SASS instruction (its function, offset as the address, CUDA source
    /// file and line), its kernel, API call and CPU stack; labels `pid` and
    /// `stall_reason`. An empty profile when not made with a profile.
    pub fn write_profile<W: Write>(&self, out: W) -> Result<()> {
        write_gz(
            self.profile.as_ref().unwrap_or(&proto::Profile::default()),
            out,
        )
    }

    /// The folded lines, sorted, weights in samples. Valid after the join.
    pub fn lines(&self) -> &[(String, u64)] {
        &self.lines
    }

    /// Where the samples went. Valid after the join.
    pub fn stats(&self) -> PcStats {
        self.stats
    }

    /// Each kernel's samples by line and by stall reason, by the kernel's
    /// label. Valid after the join.
    pub fn kernels(&self) -> &BTreeMap<String, KernelSamples> {
        &self.kernels
    }

    /// Writes `stack weight` lines.
    pub fn write<W: Write>(&self, mut out: W) -> Result<()> {
        let err = |source| Error::Write {
            what: "PC-sample folded stacks",
            source,
        };
        for (stack, w) in &self.lines {
            writeln!(out, "{stack} {w}").map_err(err)?;
        }
        out.flush().map_err(err)
    }

    /// The launch a sample names, when the trace has it.
    fn launch(&self, s: &PcSample) -> Option<Launch> {
        s.correlation_id
            .and_then(|corr| self.launches.get(&(s.pid, corr)).copied())
    }

    /// A sample's kernel as the time flamegraph names it: its launch's kernel,
    /// else its function.
    fn kernel_label(&mut self, ctx: &Context<'_>, s: &PcSample, launch: Option<Launch>) -> String {
        self.demangler
            .label(
                launch.map_or(s.function, |l| l.kernel),
                ctx.strings,
                ctx.view,
            )
            .replace(';', ":")
    }

    /// The stall counts of `kernel`'s `line`, made on first use.
    fn line_at(&mut self, kernel: String, line: String) -> &mut Stalls {
        let k = self.kernels.entry(kernel).or_default();
        k.line_stalls.entry(line).or_default()
    }

    /// A sample's function (its instruction's), as the folded frames name it.
    fn function_label(&mut self, ctx: &Context<'_>, s: &PcSample) -> String {
        self.demangler
            .label(s.function, ctx.strings, ctx.view)
            .replace(';', ":")
    }

    /// The folded text of one sample of `launch`, `kernel` and `function`
    /// (their labels).
    fn text(
        &mut self,
        ctx: &Context<'_>,
        s: &PcSample,
        roots: bool,
        launch: Option<Launch>,
        kernel: &str,
        function: &str,
    ) -> String {
        match (s.correlation_id, launch) {
            (None, _) => self.stats.unattributed += u64::from(s.samples),
            (_, None) => self.stats.unmatched += u64::from(s.samples),
            (_, Some(_)) => self.stats.attributed += u64::from(s.samples),
        }
        let mut text = if roots {
            format!("{} [pid {}];", process_name(&self.exes, ctx, s.pid), s.pid)
        } else {
            String::new()
        };
        match launch {
            Some(l) => push_stack(&mut text, ctx, l.stack, l.api),
            None => text.push_str(NO_STACK_ROOT),
        }
        text.push(';');
        text.push_str(KERNEL_PREFIX);
        text.push_str(kernel);
        text.push_str(&format!(";{PC_PREFIX}{function}+{:#x};", s.pc_offset));
        match s.source {
            Some((file, line)) => {
                let file = ctx.strings.get(file).replace(';', ":");
                text.push_str(&format!("{SOURCE_PREFIX}{file}:{line}"));
            }
            None => {
                self.stats.without_line += u64::from(s.samples);
                text.push_str(NO_LINE);
            }
        }
        text.push(';');
        text.push_str(STALL_PREFIX);
        text.push_str(stall_name(ctx.strings.get(s.stall_reason)));
        text
    }
}

impl Sink for PcFolder {
    fn record(&mut self, _ctx: &Context<'_>, rec: &Record, m: &Match<'_>) -> Result<()> {
        match rec {
            Record::Process(p) => {
                let name = p.exe.rsplit('/').next().unwrap_or("").trim();
                if !name.is_empty() {
                    self.exes.insert(p.pid, name.to_owned());
                }
            }
            Record::Activity(a) => {
                if let ActivityKind::Kernel { name, .. } = a.kind {
                    let c = m.charge();
                    self.launches.insert(
                        (a.pid, a.correlation_id),
                        Launch {
                            stack: c.stack,
                            api: c.api,
                            kernel: name,
                        },
                    );
                }
            }
            Record::PcSample(s) => self.samples.push(s.clone()),
            Record::PcLaunches(p) => {
                let all = self.stats.launches.get_or_insert_default();
                all.sampled += p.launches.sampled;
                all.unsampled += p.launches.unsampled;
            }
            Record::Note(n) => {
                self.stats.serialized |= n.text.starts_with(PC_SERIALIZED_NOTE);
                self.stats.continuous |= n.text.starts_with(PC_CONTINUOUS_NOTE);
            }
            _ => {}
        }
        Ok(())
    }

    fn finish(&mut self, ctx: &Context<'_>, _summary: &Summary) -> Result<()> {
        let samples = std::mem::take(&mut self.samples);
        let mut pids: Vec<u32> = samples.iter().map(|s| s.pid).collect();
        pids.sort_unstable();
        pids.dedup();
        let roots = pids.len() > 1;
        let mut by_text: FxHashMap<String, u64> = FxHashMap::default();
        let mut rows: FxHashMap<ProfileKey, (u64, u64)> = FxHashMap::default();
        let profiled = self.profile.is_some();
        // Launches with a sample, each once; a not-issued sample's launch has
        // its base reason's sample too.
        let mut launched: FxHashMap<(u32, u32), String> = FxHashMap::default();
        for s in &samples {
            let n = u64::from(s.samples);
            let reason = stall_name(ctx.strings.get(s.stall_reason));
            let line = match s.source {
                Some((file, line)) => format!("{}:{line}", ctx.strings.get(file)),
                None => NO_LINE[SOURCE_PREFIX.len()..].to_owned(),
            };
            let launch = self.launch(s);
            let kernel = self.kernel_label(ctx, s, launch);
            // The pprof row of the sample's `function`, under stall reason `reason`.
            let row = |function: String, reason: &str| -> ProfileKey {
                (
                    s.pid,
                    launch.and_then(|l| l.stack),
                    launch.and_then(|l| l.api),
                    kernel.clone(),
                    function,
                    s.pc_offset,
                    s.source,
                    reason.to_owned(),
                )
            };
            if let Some(base) = not_issued_base(reason) {
                self.stats.not_issued += n;
                if profiled {
                    let function = self.function_label(ctx, s);
                    rows.entry(row(function, base)).or_default().1 += n;
                }
                let at = self.line_at(kernel, line);
                *at.not_issued.entry(base.to_owned()).or_default() += n;
                continue;
            }
            self.stats.samples += n;
            let function = self.function_label(ctx, s);
            let text = self.text(ctx, s, roots, launch, &kernel, &function);
            *by_text.entry(text).or_default() += n;
            if profiled {
                rows.entry(row(function, reason)).or_default().0 += n;
            }
            if let Some(corr) = s.correlation_id {
                launched
                    .entry((s.pid, corr))
                    .or_insert_with(|| kernel.clone());
            }
            let at = self.line_at(kernel, line);
            *at.stalls.entry(reason.to_owned()).or_default() += n;
        }
        self.stats.launches_with_samples = launched.len() as u64;
        for kernel in launched.into_values() {
            if let Some(k) = self.kernels.get_mut(&kernel) {
                k.launches += 1;
            }
        }
        self.lines = by_text.into_iter().collect();
        self.lines.sort_unstable();
        if profiled {
            self.profile = Some(profile(ctx, rows));
        }
        self.launches = FxHashMap::default();
        Ok(())
    }
}

/// The pprof profile of the PC samples' `rows` ([`PcFolder::write_profile`]).
fn profile(ctx: &Context<'_>, rows: FxHashMap<ProfileKey, (u64, u64)>) -> proto::Profile {
    let mut t = Tables::new();
    let sample_type = vec![
        t.value_type("samples", "count"),
        t.value_type("not_issued_samples", "count"),
    ];
    let (pid_key, stall_key) = (t.string("pid"), t.string("stall_reason"));
    // Deterministic output: samples in the order of their rendered stacks.
    let mut rows: Vec<_> = rows
        .into_iter()
        .map(
            |((pid, stack, api, kernel, function, pc, source, stall), n)| {
                let mut frames = cpu_frames(ctx, stack, api);
                frames.push(format!("{KERNEL_PREFIX}{kernel}"));
                let source = source.map(|(file, line)| (ctx.strings.get(file).to_owned(), line));
                (frames, function, pc, source, stall, pid, n)
            },
        )
        .collect();
    rows.sort_unstable();
    let to_i64 = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    let sample = rows
        .iter()
        .map(
            |(frames, function, pc, source, stall, pid, (n, not_issued))| {
                let (file, line) = source.as_ref().map_or(("", 0), |(f, l)| (f.as_str(), *l));
                let mut location_id = vec![t.instruction(function, *pc, file, line)];
                location_id.extend(frames.iter().rev().map(|f| t.location(f)));
                let stall = t.string(stall);
                proto::Sample {
                    location_id,
                    value: vec![to_i64(*n), to_i64(*not_issued)],
                    label: vec![
                        proto::Label {
                            key: pid_key,
                            num: i64::from(*pid),
                            ..proto::Label::default()
                        },
                        proto::Label {
                            key: stall_key,
                            str: stall,
                            ..proto::Label::default()
                        },
                    ],
                }
            },
        )
        .collect();
    t.profile(
        sample_type,
        sample,
        "generated by gpuperf: GPU PC samples by the CPU stack that launched their kernel; \
         label stall_reason says why the warp stalled",
        0,
        0,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stall_names_lose_cupti_s_prefix_only() {
        assert_eq!(
            stall_name("smsp__pcsamp_warps_issue_stalled_long_scoreboard"),
            "long_scoreboard"
        );
        assert_eq!(stall_name("smsp__pcsamp_warps_issue_selected"), "selected");
        assert_eq!(stall_name("branch_resolving"), "branch_resolving");
    }

    #[test]
    fn not_issued_reasons_name_their_base_reason_and_others_none() {
        let full = "smsp__pcsamp_warps_issue_stalled_long_scoreboard_not_issued";
        assert_eq!(not_issued_base(stall_name(full)), Some("long_scoreboard"));
        assert_eq!(
            not_issued_base(full),
            Some("smsp__pcsamp_warps_issue_stalled_long_scoreboard")
        );
        assert_eq!(not_issued_base("long_scoreboard"), None);
        // `not_selected` is a reason of its own, not a not-issued part.
        assert_eq!(
            not_issued_base(stall_name("smsp__pcsamp_warps_issue_stalled_not_selected")),
            None
        );
    }

    /// Samples of process 7 that name no launch, as `(reason, pc_offset, samples)`.
    fn folded(reasons: &[(&str, u64, u32)]) -> PcFolder {
        let mut strings = crate::model::StringTable::new();
        let function = strings.intern("k");
        let file = strings.intern("k.cu");
        let records: Vec<Record> = reasons
            .iter()
            .map(|&(reason, pc_offset, samples)| {
                Record::PcSample(PcSample {
                    pid: 7,
                    correlation_id: None,
                    context: 1,
                    function,
                    pc_offset,
                    cubin_crc: 0,
                    stall_reason_index: 0,
                    stall_reason: strings
                        .intern(&format!("smsp__pcsamp_warps_issue_stalled_{reason}")),
                    samples,
                    source: Some((file, 3)),
                })
            })
            .collect();
        let offsets = FxHashMap::default();
        let ctx = Context::for_tests(&strings, &offsets);
        let mut pc = PcFolder::new();
        for r in &records {
            pc.record(&ctx, r, &Match::default()).unwrap();
        }
        pc.finish(&ctx, &Summary::default()).unwrap();
        pc
    }

    #[test]
    fn not_issued_samples_are_counted_apart_not_folded_nor_in_the_totals() {
        let pc = folded(&[
            ("long_scoreboard", 0x10, 10),
            ("long_scoreboard_not_issued", 0x10, 6),
            ("selected", 0x20, 4),
            // A not-issued part whose base reason has no samples here: counted
            // apart all the same.
            ("wait_not_issued", 0x20, 1),
        ]);
        assert_eq!(
            pc.lines(),
            &[
                (
                    "[no CPU stack];[GPU_Kernel]k;[GPU_PC]k+0x10;[CUDA]k.cu:3;[Stall]long_scoreboard"
                        .to_owned(),
                    10
                ),
                (
                    "[no CPU stack];[GPU_Kernel]k;[GPU_PC]k+0x20;[CUDA]k.cu:3;[Stall]selected"
                        .to_owned(),
                    4
                ),
            ]
        );
        let stats = pc.stats();
        assert_eq!(
            stats,
            PcStats {
                samples: 14,
                unattributed: 14,
                not_issued: 7,
                ..PcStats::default()
            }
        );
        let k = &pc.kernels()["k"];
        assert_eq!(k.samples(), 14);
        assert_eq!(k.lines()["k.cu:3"], 14);
        let stalls = k.stalls();
        assert_eq!(
            stalls.stalls.keys().collect::<Vec<_>>(),
            ["long_scoreboard", "selected"]
        );
        assert_eq!(
            stalls.not_issued,
            BTreeMap::from([("long_scoreboard".to_owned(), 6), ("wait".to_owned(), 1)])
        );
    }

    #[test]
    fn not_issued_samples_are_said_in_the_summary_only_when_there_are_some() {
        let stats = PcStats {
            samples: 10,
            attributed: 10,
            ..PcStats::default()
        };
        assert_eq!(
            stats.to_string(),
            "10 GPU PC samples: 10 charged to their launch's CPU stack"
        );
        let stats = PcStats {
            not_issued: 6,
            serialized: true,
            ..stats
        };
        assert_eq!(
            stats.to_string(),
            "10 GPU PC samples: 10 charged to their launch's CPU stack; 6 not-issued samples \
             (CUPTI's *_not_issued reasons: the part of a stall reason's samples on cycles that \
             issued nothing) not added again; kernels serialized while sampled"
        );
    }

    #[test]
    fn samples_without_a_source_line_are_said_with_what_to_do() {
        let stats = PcStats {
            samples: 10,
            attributed: 10,
            without_line: 4,
            ..PcStats::default()
        };
        assert_eq!(
            stats.to_string(),
            "10 GPU PC samples: 10 charged to their launch's CPU stack; 4 without a source line \
             (build your own kernels with -lineinfo; libraries' kernels, such as PyTorch's and \
             cuBLAS's, usually ship without line information; a module CUPTI never passed to \
             gpuperf has none either, as the recorder's notes then say)"
        );
    }

    #[test]
    fn pc_folded_stacks_are_known_by_their_stall_leaves() {
        let line = |s: &str| (s.to_owned(), 3);
        assert!(is_pc_folded(&[line(
            "main;[GPU_Kernel]k;[GPU_PC]k+0x10;[CUDA]k.cu:3;[Stall]selected"
        )]));
        assert!(!is_pc_folded(&[
            line("main;[GPU_Kernel]k;[GPU_PC]k+0x10;[CUDA]k.cu:3;[Stall]selected"),
            line("main;cudaLaunchKernel;[GPU_Kernel]k"),
        ]));
        assert!(!is_pc_folded(&[]));
    }

    #[test]
    fn the_launch_counts_are_said_in_the_note_and_the_summary() {
        let l = PcLaunches {
            sampled: 10,
            unsampled: 20,
        };
        let text = l.note("2/6");
        assert!(
            text.starts_with("PC sampling windows: 10 of 30 launches sampled (window 2/6)"),
            "{text}"
        );
        let stats = PcStats {
            samples: 7,
            attributed: 7,
            launches: Some(l),
            serialized: true,
            ..PcStats::default()
        };
        let said = stats.to_string();
        assert!(
            said.starts_with("7 GPU PC samples: 7 charged to their launch's CPU stack; from 10 of 30 launches (the 20 outside")
                && said.ends_with("; kernels serialized while sampled"),
            "{said}"
        );
    }
}
