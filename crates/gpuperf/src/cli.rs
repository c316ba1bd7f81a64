//! Command-line arguments. Parsing only: `main.rs` dispatches.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::parser::ValueSource;
use clap::{
    ArgAction, ArgGroup, Args, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum,
};
use gpuperf_merge::recording::env::{PcBudget, PcMode, PcWindow};
use gpuperf_merge::recording::{DEFAULT_TITLE, Inputs, Outputs};
use gpuperf_merge::view::{Frames, Names, View};
use gpuperf_profiler::ProbeSpec;

/// gpuperf: which line of CPU code caused which GPU work, and what it cost.
#[derive(Debug, Parser)]
#[command(
    name = "gpuperf",
    version,
    about,
    subcommand_negates_reqs = true,
    override_usage = "gpuperf [OPTIONS] [--] PROGRAM [ARGS]...\n       gpuperf record [OPTIONS] [--] PROGRAM [ARGS]...\n       gpuperf merge|report [OPTIONS] [RECORDING]\n       gpuperf diff [OPTIONS] BEFORE AFTER\n       gpuperf monitor [OPTIONS]",
    after_help = "EXAMPLES:
    sudo gpuperf -c gpu.json -p cpu.txt -m merged.folded -- ./app args
    sudo gpuperf record --raw-dir run1 -- python3 train.py
    gpuperf record -- python3 train.py
    gpuperf record --gpu-only -- ./app
    gpuperf record --capture-range cudaProfilerApi -- python3 train.py
    sudo gpuperf record --cpu-only --uprobe /usr/local/cuda/lib64/libcudart.so.13:cudaLaunchKernel -p cpu.txt -- ./app
    gpuperf merge run1 -o flamegraph.svg -c timeline.json
    gpuperf report run1
    gpuperf diff run1 run2 -o diff.svg
    sudo gpuperf monitor --interval 2 --duration 60"
)]
pub struct Cli {
    /// More output on stderr (-v info, -vv debug, -vvv trace).
    #[arg(short, long, global = true, action = ArgAction::Count)]
    pub verbose: u8,
    /// Only errors on stderr.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,
    /// What to do; without a subcommand, `record`.
    #[command(subcommand)]
    pub command: Option<Command>,
    /// `gpuperf [OPTIONS] -- PROGRAM`: the same as `gpuperf record`.
    #[command(flatten)]
    pub record: RecordArgs,
}

impl Cli {
    /// Parses like [`Parser::try_parse_from`], and also rejects recording
    /// options placed before another subcommand (`gpuperf -o x merge …`),
    /// which would otherwise be ignored.
    pub fn try_parse_checked<I, T>(args: I) -> Result<Self, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString> + Clone,
    {
        let mut cmd = Self::command();
        let matches = cmd.try_get_matches_from_mut(args)?;
        if let Some((name, _)) = matches.subcommand()
            && let Some(id) = RecordArgs::augment_args(clap::Command::new("record"))
                .get_arguments()
                .map(|a| a.get_id().clone())
                .find(|id| matches.value_source(id.as_str()) == Some(ValueSource::CommandLine))
        {
            return Err(cmd.error(
                clap::error::ErrorKind::ArgumentConflict,
                format!("`{id}` is a recording option; it cannot come before `{name}`"),
            ));
        }
        Self::from_arg_matches(&matches).map_err(|e| e.format(&mut cmd))
    }
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a program and record which CPU stacks launched which GPU work (the default).
    Record(RecordArgs),
    /// Join a GPU trace with CPU stacks; write folded stacks, a flamegraph and a timeline.
    Merge(MergeArgs),
    /// Print the top kernels with their duration and launch-latency statistics.
    Report(ReportArgs),
    /// Watch GPU driver events system-wide (DRM scheduler jobs, dma_fences, vblanks, NVIDIA ioctls, interrupts, Xids); needs root.
    Monitor(MonitorArgs),
    /// Compare two runs: a differential flamegraph and the stacks whose GPU time changed most.
    Diff(DiffArgs),
}

/// `gpuperf record`.
#[derive(Debug, Args)]
pub struct RecordArgs {
    /// Write the flamegraph SVG here.
    #[arg(
        short = 'o',
        long,
        value_name = "FILE",
        default_value = "flamegraph.svg"
    )]
    pub output: PathBuf,
    /// Write merged folded stacks (µs of GPU time) here.
    #[arg(short = 'm', long, value_name = "FILE")]
    pub folded: Option<PathBuf>,
    #[command(flatten)]
    pub files: FileOutputs,
    #[command(flatten)]
    pub view: ViewArgs,
    /// Write the CPU trace (one line per launch with its stack) here.
    #[arg(short = 'p', long = "cpu-trace", value_name = "FILE")]
    pub cpu_trace: Option<PathBuf>,
    /// Keep the raw traces in this directory, for `gpuperf merge DIR` and `gpuperf report DIR`.
    #[arg(long, value_name = "DIR")]
    pub raw_dir: Option<PathBuf>,
    /// Record CPU stacks only, without injecting into the program (needs --uprobe
    /// unless the program has cudart linked in; eBPF, so root).
    #[arg(long, conflicts_with = "gpu_only")]
    pub cpu_only: bool,
    /// Record GPU activity only: no CPU stacks.
    #[arg(long)]
    pub gpu_only: bool,
    /// Where launch stacks come from: `inject` takes them inside the program (no
    /// root), `ebpf` with the eBPF profiler (root), `auto` in the program whenever
    /// the injection library runs, else with eBPF (--cpu-only, --uprobe).
    #[arg(long, value_enum, value_name = "FROM", default_value_t = StacksFrom::Auto)]
    pub stacks: StacksFrom,
    /// Record nothing until this many seconds after each process started (as
    /// Nsight Systems' --delay); with --capture-range, the range counts after it.
    #[arg(long, value_name = "SECS", value_parser = parse_duration, conflicts_with = "cpu_only")]
    pub delay: Option<f64>,
    /// Record only inside a window, as Nsight Systems does: `cudaProfilerApi`
    /// between cudaProfilerStart and cudaProfilerStop (torch.cuda.profiler.start()
    /// and stop()), or `nvtx:NAME` inside the NVTX ranges named NAME
    /// (torch.cuda.nvtx.range("NAME")). Calls and GPU work outside it are not written.
    #[arg(long, value_name = "RANGE", value_parser = parse_capture_range, conflicts_with = "cpu_only")]
    pub capture_range: Option<String>,
    /// Record no NVTX ranges. By default each range (torch.cuda.nvtx.range,
    /// emit_nvtx, nvtxRangePush/Pop, nvtxRangeStart/End) is a slice on the
    /// timeline, and push/pop ranges are `[nvtx] NAME` frames of the launches
    /// made inside them.
    #[arg(long, conflicts_with = "cpu_only")]
    pub no_nvtx: bool,
    /// Sample the GPU's program counters with CUPTI's PC Sampling API, with
    /// each stall reason (kernel-serialized by default: sampled kernels run
    /// one at a time, so the time flamegraph and timeline are of a serialized
    /// run, and say so). PERIOD: sample every 2^PERIOD cycles, 5 to 31
    /// (default: CUPTI's). Needs root unless the driver allows profiling to
    /// all users. Draw them with --pc-svg / --pc-folded / --pc-pprof.
    #[arg(
        long,
        value_name = "PERIOD",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "default",
        value_parser = parse_pc_period,
        conflicts_with = "cpu_only"
    )]
    pub pc_sampling: Option<PcPeriod>,
    /// With --pc-sampling: which launches are sampled, `all` or N/M: N
    /// consecutive launches in every M (the first N, then a window at a
    /// varying place in each stretch of M). Default: 100/1000, so a short run
    /// is sampled whole, and a long one on at most a tenth of its launches
    /// (fewer where --pc-sampling-budget closes windows). The summary counts
    /// the launches left out; nothing is scaled up for them.
    #[arg(long, value_name = "N/M", requires = "pc_sampling", value_parser = parse_pc_window)]
    pub pc_sampling_window: Option<PcWindow>,
    /// With --pc-sampling: the share of the run's time sampled launches may
    /// take, `off` or a percentage (default 10). A sampled launch costs far
    /// more than another (serialized, about 0.8 ms on an H200), so a window
    /// opens only while the sampled launches so far took at most that share
    /// of the run; the summary counts the launches it left unsampled.
    #[arg(long, value_name = "PERCENT", requires = "pc_sampling", value_parser = parse_pc_budget)]
    pub pc_sampling_budget: Option<PcBudget>,
    /// With --pc-sampling: `serialized` (default: each sample is charged to
    /// its launch's CPU stack) or `continuous` (kernels keep running
    /// concurrently; samples name no launch and are charged to their kernel
    /// only, under no CPU stack).
    #[arg(long, value_name = "MODE", requires = "pc_sampling", value_parser = parse_pc_mode)]
    pub pc_sampling_mode: Option<PcMode>,
    /// Stop the program (SIGINT) after this many seconds.
    #[arg(long, value_name = "SECS", value_parser = parse_duration)]
    pub duration: Option<f64>,
    /// Also record the GPU driver's events for the program and its children
    /// (NVIDIA ioctls, interrupts, Xid errors, DRM scheduler jobs, dma_fences,
    /// vblanks and the vblank events it asked for) where the
    /// kernel has them (eBPF, so root); what is missing is said and skipped.
    #[arg(long)]
    pub driver: bool,
    /// Take stacks at this function instead of at the injection library's marker
    /// (compatibility mode; matched to GPU work by time). Repeatable.
    #[arg(long, value_name = "LIB:SYMBOL", conflicts_with = "gpu_only")]
    pub uprobe: Vec<ProbeSpec>,
    /// The libcupti to use; by default the injection library searches for it.
    #[arg(long, value_name = "FILE")]
    pub cupti: Option<PathBuf>,
    /// Kernels to list in the summary.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(0..=10_000))]
    pub top: u64,
    /// Flamegraph title.
    #[arg(long, default_value = DEFAULT_TITLE)]
    pub title: String,
    /// The program to profile and its arguments.
    // No `allow_hyphen_values`: an unknown option before the program is a typo
    // that clap refuses with a suggestion, not a program to run. Everything
    // from the program's name on, and everything after `--`, is the program's.
    #[arg(
        value_name = "PROGRAM",
        required = true,
        trailing_var_arg = true,
        num_args = 1..
    )]
    pub program: Vec<OsString>,
}

impl RecordArgs {
    /// Every file and directory name the user gave, for their `%` patterns
    /// ([`gpuperf_merge::recording::expand_names`]); `-` (stdout) is not a name.
    pub fn names_mut(&mut self) -> Vec<&mut PathBuf> {
        let mut names = vec![&mut self.output];
        names.extend(self.folded.as_mut().filter(|p| p.as_os_str() != "-"));
        names.extend(self.files.names_mut());
        names.extend(
            [self.cpu_trace.as_mut(), self.raw_dir.as_mut()]
                .into_iter()
                .flatten(),
        );
        names
    }
}

/// The outputs that `record` and `merge` both write, named alike.
#[derive(Debug, Args)]
pub struct FileOutputs {
    /// Write a timeline here: Chrome-trace JSON, or Perfetto protobuf if FILE ends in .pftrace or .perfetto-trace.
    #[arg(short = 'c', long, value_name = "FILE")]
    pub chrome: Option<PathBuf>,
    /// Write idle-time folded stacks here (µs): each stream's gaps between GPU work,
    /// charged to the CPU stack that made it wait ([GPU_Idle: CPU late], [GPU_Idle: host
    /// sync], [GPU_Idle: launch latency]).
    #[arg(long, value_name = "FILE")]
    pub idle: Option<PathBuf>,
    /// Write a flamegraph of the idle-time stacks (as --idle) here.
    #[arg(long, value_name = "FILE")]
    pub idle_svg: Option<PathBuf>,
    /// Write a gzipped pprof profile (GPU time and launches by stack) here, for Pyroscope,
    /// Parca, Grafana or `go tool pprof`.
    #[arg(long, value_name = "FILE.pb.gz")]
    pub pprof: Option<PathBuf>,
    /// Write the recording as Parquet tables into this directory (events.parquet,
    /// stacks.parquet), for DuckDB, pandas, Spark or ClickHouse.
    #[arg(long, value_name = "DIR")]
    pub parquet: Option<PathBuf>,
    /// Write the GPU PC samples as folded stacks here (weight: samples): CPU
    /// stack, kernel, SASS instruction, CUDA line, stall reason.
    #[arg(long, value_name = "FILE")]
    pub pc_folded: Option<PathBuf>,
    /// Write a flamegraph of the GPU PC samples (as --pc-folded) here.
    #[arg(long, value_name = "FILE")]
    pub pc_svg: Option<PathBuf>,
    /// Write the GPU PC samples as a gzipped pprof profile here: each
    /// sample's CUDA source line under its launch's CPU stack, its stall
    /// reason as the label stall_reason (`go tool pprof -lines`, `-tags`).
    #[arg(long, value_name = "FILE.pb.gz")]
    pub pc_pprof: Option<PathBuf>,
}

impl FileOutputs {
    /// The files named (the Parquet directory is not one).
    pub fn files(&self) -> impl Iterator<Item = &PathBuf> {
        [
            &self.chrome,
            &self.idle,
            &self.idle_svg,
            &self.pprof,
            &self.pc_folded,
            &self.pc_svg,
            &self.pc_pprof,
        ]
        .into_iter()
        .flatten()
    }

    /// Every name given, the Parquet directory's too, for their `%` patterns.
    pub fn names_mut(&mut self) -> impl Iterator<Item = &mut PathBuf> {
        [
            &mut self.chrome,
            &mut self.idle,
            &mut self.idle_svg,
            &mut self.pprof,
            &mut self.parquet,
            &mut self.pc_folded,
            &mut self.pc_svg,
            &mut self.pc_pprof,
        ]
        .into_iter()
        .flatten()
    }

    /// Whether none is asked for.
    pub fn is_empty(&self) -> bool {
        self.files().next().is_none() && self.parquet.is_none()
    }

    /// Sets them in the outputs `o` of a merge.
    pub fn fill(&self, o: &mut Outputs) {
        o.chrome.clone_from(&self.chrome);
        o.idle.clone_from(&self.idle);
        o.idle_svg.clone_from(&self.idle_svg);
        o.pprof.clone_from(&self.pprof);
        o.parquet.clone_from(&self.parquet);
        o.pc_folded.clone_from(&self.pc_folded);
        o.pc_svg.clone_from(&self.pc_svg);
        o.pc_pprof.clone_from(&self.pc_pprof);
    }
}

/// Where `gpuperf record` takes launch stacks.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum StacksFrom {
    /// In the program when the injection library runs; eBPF otherwise.
    Auto,
    /// In the program, by the injection library (no root).
    Inject,
    /// With the eBPF profiler (root, or CAP_BPF + CAP_PERFMON).
    Ebpf,
}

fn parse_capture_range(s: &str) -> Result<String, String> {
    use gpuperf_merge::recording::env::{CAPTURE_NVTX_PREFIX, CAPTURE_PROFILER_API};
    match s.strip_prefix(CAPTURE_NVTX_PREFIX) {
        _ if s == CAPTURE_PROFILER_API => Ok(s.to_owned()),
        Some(name) if !name.is_empty() => Ok(s.to_owned()),
        _ => Err(format!(
            "`{s}` is not a capture range: give {CAPTURE_PROFILER_API} or {CAPTURE_NVTX_PREFIX}NAME"
        )),
    }
}

fn parse_duration(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v <= 1e7 => Ok(v),
        _ => Err(format!("`{s}` is not a number of seconds greater than 0")),
    }
}

/// Inputs shared by `merge` and `report`.
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("inputs").args(["recording", "gpu"]).required(true).multiple(true)))]
pub struct InputArgs {
    /// A directory that `gpuperf record --raw-dir` wrote (its GPU traces and its
    /// `cpu.txt`), or one trace file of any format `--gpu` reads.
    #[arg(value_name = "RECORDING")]
    pub recording: Option<PathBuf>,
    /// GPU trace: a gpuperf trace, a directory of them, a reference CUPTI text log, a PyTorch
    /// profiler trace (`.pt.trace.json[.gz]`) or an Nsight Systems SQLite export; the format is
    /// found from the content. Repeatable.
    #[arg(long, short = 'g', value_name = "FILE")]
    pub gpu: Vec<PathBuf>,
    /// CPU stacks: gpuperf's CPU trace or the reference's extended folded lines.
    /// Default: RECORDING/cpu.txt when it exists.
    #[arg(long, value_name = "FILE")]
    pub cpu: Option<PathBuf>,
    /// Offset added to CPU timestamps to reach the GPU clock, in ns. Default: estimated when needed.
    #[arg(long, value_name = "NS", allow_hyphen_values = true)]
    pub cpu_clock_offset_ns: Option<i64>,
    /// How far outside an API call a CPU event may fall and still pair with it by time, in µs.
    #[arg(long, value_name = "US", default_value_t = 50, value_parser = clap::value_parser!(u64).range(0..=10_000_000))]
    pub slack_us: u64,
    /// Keep PyTorch profiler traces' backward kernels on autograd's thread stack,
    /// instead of charging them to their forward op's stack under `[backward]`.
    #[arg(long)]
    pub no_link_backward: bool,
    #[command(flatten)]
    pub view: ViewArgs,
}

/// What the outputs show of stacks and names; every command that writes stacks takes it.
#[derive(Copy, Clone, Debug, Default, Args)]
pub struct ViewArgs {
    /// Keep the Python interpreter's own C frames (`_PyEval_EvalFrameDefault`,
    /// `PyObject_Call`, `python3.11+0x…`) between Python frames. Default: each Python
    /// frame stands in their place, as in py-spy; the recording keeps every frame.
    #[arg(long)]
    pub keep_interpreter_frames: bool,
    /// Spell C++ names in full, as c++filt does. Default: without return types, template
    /// arguments and parameter lists, as Nsight Systems shortens them; the full names are
    /// in the flamegraph's tooltips and the timeline's args.
    #[arg(long)]
    pub full_names: bool,
}

impl ViewArgs {
    /// The view asked for.
    pub fn view(&self) -> View {
        let mut v = View::concise();
        if self.keep_interpreter_frames {
            v.frames = Frames::All;
        }
        if self.full_names {
            v.names = Names::Full;
        }
        v
    }
}

impl InputArgs {
    /// What to read, for the library.
    pub fn to_inputs(&self) -> Inputs {
        let mut i = Inputs::default();
        i.recording.clone_from(&self.recording);
        i.gpu.clone_from(&self.gpu);
        i.cpu.clone_from(&self.cpu);
        i.kineto.link_backward = !self.no_link_backward;
        i.join.slack_ns = self.slack_us * 1000;
        i.join.cpu_clock_offset_ns = self.cpu_clock_offset_ns;
        i.join.view = self.view.view();
        i
    }
}

/// `gpuperf merge`.
#[derive(Debug, Args)]
pub struct MergeArgs {
    #[command(flatten)]
    pub input: InputArgs,
    /// Write merged folded stacks here (`-` for stdout). Default: stdout when no other output is named.
    #[arg(short = 'm', long, value_name = "FILE")]
    pub folded: Option<PathBuf>,
    /// Write an SVG flamegraph here.
    #[arg(short = 'o', long, value_name = "FILE")]
    pub svg: Option<PathBuf>,
    #[command(flatten)]
    pub files: FileOutputs,
    /// Flamegraph title.
    #[arg(long, default_value = DEFAULT_TITLE)]
    pub title: String,
    /// Write the CPU launch stacks the GPU traces carry (taken in process) as a
    /// CPU trace here: one line per launch with its stack and correlation id.
    #[arg(short = 'p', long = "cpu-trace", value_name = "FILE")]
    pub cpu_trace: Option<PathBuf>,
}

impl MergeArgs {
    /// Every output name the user gave, for their `%` patterns; `-` is stdout.
    pub fn names_mut(&mut self) -> Vec<&mut PathBuf> {
        let mut names: Vec<&mut PathBuf> = [
            self.folded.as_mut().filter(|p| p.as_os_str() != "-"),
            self.svg.as_mut(),
            self.cpu_trace.as_mut(),
        ]
        .into_iter()
        .flatten()
        .collect();
        names.extend(self.files.names_mut());
        names
    }

    /// The outputs asked for. Folded stacks go to stdout when no file output is named.
    pub fn outputs(&self) -> Outputs {
        let mut o = Outputs::default();
        let no_file = self.files.is_empty() && self.svg.is_none() && self.cpu_trace.is_none();
        o.folded = self.folded.clone().or_else(|| no_file.then(|| "-".into()));
        o.svg.clone_from(&self.svg);
        self.files.fill(&mut o);
        o.title.clone_from(&self.title);
        o
    }
}

/// `gpuperf report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    #[command(flatten)]
    pub input: InputArgs,
    /// Rows to show.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub top: u64,
    /// Print the report as JSON instead of text.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
}

/// `gpuperf diff`.
#[derive(Debug, Args)]
pub struct DiffArgs {
    /// The first run: a recording directory, a trace file `gpuperf merge` reads, or folded stacks.
    #[arg(value_name = "BEFORE")]
    pub before: PathBuf,
    /// The second run, in any of the same forms.
    #[arg(value_name = "AFTER")]
    pub after: PathBuf,
    /// Write the differential flamegraph here (widths from AFTER; red grew, blue shrank).
    #[arg(short = 'o', long, value_name = "FILE", default_value = "diff.svg")]
    pub output: PathBuf,
    /// Compare idle time by the CPU stack that made the GPU wait, instead of GPU time
    /// (folded inputs are read as they are: give it `--idle` folded files).
    #[arg(long)]
    pub idle: bool,
    /// Match Python frames whatever their line numbers (`file.py:123` as `file.py`).
    #[arg(long)]
    pub ignore_lines: bool,
    /// Stacks to list in the table of changes.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub top: u64,
    /// Flamegraph title.
    #[arg(long)]
    pub title: Option<String>,
    /// Print the table of changes as JSON instead of text.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// Exit with status 3 when the total, or any one stack, grew by more than PCT
    /// percent of BEFORE's total (a regression check for CI).
    #[arg(long, value_name = "PCT", value_parser = parse_percent)]
    pub fail_above: Option<f64>,
    #[command(flatten)]
    pub view: ViewArgs,
}

/// How `report` and `diff` print their tables.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Text for a terminal, lines of at most 200 characters.
    Text,
    /// One JSON document.
    Json,
}

fn parse_percent(s: &str) -> Result<f64, String> {
    match s.trim_end_matches('%').parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!("`{s}` is not a percentage of 0 or more")),
    }
}

/// `gpuperf monitor`.
#[derive(Debug, Args)]
#[command(after_help = "EXAMPLES:
    sudo gpuperf monitor
    sudo gpuperf monitor --pid 1234 --interval 5
    sudo gpuperf monitor --event drm_sched --ring gfx --duration 60
    sudo gpuperf monitor --sample 10 --max-rate 5000 --output events.tsv
    sudo gpuperf monitor --duration 10 --output events.tsv.gz --timeline driver.json")]
pub struct MonitorArgs {
    /// Print statistics every this many seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 1.0, value_parser = positive_secs)]
    pub interval: f64,
    /// Stop after this many seconds (default: at Ctrl-C).
    #[arg(long, value_name = "SECONDS", value_parser = positive_secs)]
    pub duration: Option<f64>,
    /// Only these processes (repeatable); the driver's interrupts and kernel threads are kept.
    #[arg(long, value_name = "PID")]
    pub pid: Vec<u32>,
    /// Only threads with this command name (the first 15 bytes count).
    #[arg(long, value_name = "NAME")]
    pub comm: Option<String>,
    /// Only jobs on these rings (repeatable), filtered in user space after
    /// sampling (the kernel still sends the others); other events are unaffected.
    #[arg(long, value_name = "NAME")]
    pub ring: Vec<String>,
    /// Only these event sources (repeatable): nvidia, irq, xid, drm_sched, dma_fence, vblank.
    #[arg(long, value_name = "SOURCE", value_parser = ["nvidia", "irq", "xid", "drm_sched", "dma_fence", "vblank"])]
    pub event: Vec<String>,
    /// Keep one in N matching events of each kind (whole jobs; every Xid), in
    /// BPF; printed rates are scaled by N and say so.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub sample: u32,
    /// Keep at most this many events per second (of event time), in user space
    /// (whole jobs; every Xid); the rest are counted.
    #[arg(long, value_name = "EVENTS/S", value_parser = clap::value_parser!(u64).range(1..))]
    pub max_rate: Option<u64>,
    /// Write every kept event here, one tab-separated line each; gzip-compressed
    /// when FILE ends in `.gz`.
    #[arg(long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// At the end, write the kept events as a timeline: Chrome JSON, or
    /// Perfetto's protobuf for a `.pftrace` name.
    #[arg(long, value_name = "FILE")]
    pub timeline: Option<PathBuf>,
}

fn positive_secs(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v > 0.0 && v.is_finite() => Ok(v),
        _ => Err(format!("`{s}` is not a positive number of seconds")),
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn merge_parses_outputs() {
        let cli = Cli::try_parse_from([
            "gpuperf", "merge", "--gpu", "g", "--cpu", "c", "-m", "m.folded", "-c", "t.json", "-o",
            "f.svg", "-vv",
        ])
        .unwrap();
        assert_eq!(cli.verbose, 2);
        let Some(Command::Merge(m)) = cli.command else {
            panic!("not merge")
        };
        assert_eq!(m.input.gpu, [PathBuf::from("g")]);
        assert_eq!(m.folded.as_deref(), Some("m.folded".as_ref()));
        assert_eq!(m.files.chrome.as_deref(), Some("t.json".as_ref()));
        assert_eq!(m.svg.as_deref(), Some("f.svg".as_ref()));
        assert_eq!(m.input.slack_us, 50);
    }

    #[test]
    fn bad_arguments_are_rejected() {
        assert!(
            Cli::try_parse_from(["gpuperf", "merge", "--cpu", "c"]).is_err(),
            "--gpu is required"
        );
        assert!(Cli::try_parse_from(["gpuperf", "report", "--gpu", "g", "--top", "0"]).is_err());
        assert!(Cli::try_parse_from(["gpuperf", "-q", "-v", "report", "--gpu", "g"]).is_err());
        let r = Cli::try_parse_from([
            "gpuperf",
            "report",
            "--gpu",
            "g",
            "--cpu-clock-offset-ns",
            "-5",
        ])
        .unwrap();
        let Some(Command::Report(r)) = r.command else {
            panic!("not report")
        };
        assert_eq!(r.input.cpu_clock_offset_ns, Some(-5));
    }

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn the_design_card_form_records() {
        let cli = Cli::try_parse_from([
            "gpuperf",
            "-c",
            "gpu.json",
            "-p",
            "cpu.txt",
            "-m",
            "merged.folded",
            "--",
            "./app",
            "--flag",
            "x",
        ])
        .unwrap();
        assert!(cli.command.is_none());
        let r = cli.record;
        assert_eq!(r.files.chrome.as_deref(), Some("gpu.json".as_ref()));
        assert_eq!(r.cpu_trace.as_deref(), Some("cpu.txt".as_ref()));
        assert_eq!(r.folded.as_deref(), Some("merged.folded".as_ref()));
        assert_eq!(r.output, PathBuf::from("flamegraph.svg"));
        assert_eq!(r.program, os(&["./app", "--flag", "x"]));
        assert!(!r.cpu_only && !r.gpu_only);
        assert_eq!(r.stacks, StacksFrom::Auto);
    }

    #[test]
    fn stacks_source_is_chosen_by_name() {
        for (v, want) in [
            ("auto", StacksFrom::Auto),
            ("inject", StacksFrom::Inject),
            ("ebpf", StacksFrom::Ebpf),
        ] {
            let cli = Cli::try_parse_from(["gpuperf", "--stacks", v, "--", "./app"]).unwrap();
            assert_eq!(cli.record.stacks, want);
        }
        assert!(Cli::try_parse_from(["gpuperf", "--stacks", "bpf", "--", "./app"]).is_err());
    }

    #[test]
    fn record_subcommand_takes_every_option() {
        let cli = Cli::try_parse_from([
            "gpuperf",
            "-q",
            "record",
            "--cpu-only",
            "--uprobe",
            "/opt/lib/libcudart.so.13:cudaLaunchKernel",
            "--uprobe",
            "./app:cuLaunchKernel",
            "--duration",
            "2.5",
            "--raw-dir",
            "run1",
            "-o",
            "f.svg",
            "python3",
            "-X",
            "perf",
            "train.py",
        ])
        .unwrap();
        assert!(cli.quiet);
        let Some(Command::Record(r)) = cli.command else {
            panic!("not record")
        };
        assert!(r.cpu_only);
        assert_eq!(r.uprobe.len(), 2);
        assert_eq!(r.uprobe[0].symbol, "cudaLaunchKernel");
        assert_eq!(r.uprobe[1].path, PathBuf::from("./app"));
        assert_eq!(r.duration, Some(2.5));
        assert_eq!(r.raw_dir.as_deref(), Some("run1".as_ref()));
        assert_eq!(r.output, PathBuf::from("f.svg"));
        // Options after the program belong to it.
        assert_eq!(r.program, os(&["python3", "-X", "perf", "train.py"]));
    }

    #[test]
    fn bad_record_arguments_are_rejected() {
        let bad: &[&[&str]] = &[
            &["gpuperf"],
            &["gpuperf", "record"],
            &["gpuperf", "--cpu-only", "--gpu-only", "--", "app"],
            &["gpuperf", "--gpu-only", "--uprobe", "l:s", "--", "app"],
            &["gpuperf", "--duration", "0", "--", "app"],
            &["gpuperf", "--duration", "-1", "--", "app"],
            &["gpuperf", "--duration", "nan", "--", "app"],
            &["gpuperf", "--uprobe", "nosymbol", "--", "app"],
            &["gpuperf", "--uprobe", ":sym", "--", "app"],
        ];
        for args in bad {
            assert!(Cli::try_parse_checked(*args).is_err(), "{args:?} parsed");
        }
        let e =
            Cli::try_parse_checked(["gpuperf", "-o", "x.svg", "merge", "--gpu", "g"]).unwrap_err();
        assert!(
            e.to_string().contains("`output` is a recording option"),
            "{e}"
        );
    }

    #[test]
    fn unknown_options_are_refused_with_a_suggestion_not_run() {
        // Before the program (with or without `--` after), an option gpuperf does not
        // know is a typo, not the program to run.
        let cases: &[&[&str]] = &[
            &[
                "gpuperf",
                "record",
                "--captur-range",
                "x",
                "--",
                "python",
                "x.py",
            ],
            &["gpuperf", "record", "--raw-dri", "d", "--", "./app"],
            &["gpuperf", "--raw-dri", "d", "--", "./app"],
            &["gpuperf", "--raw-dri", "d", "./app"],
            &["gpuperf", "record", "--gpu-onyl", "./app"],
            &["gpuperf", "merge", "--gpuu", "g"],
            &["gpuperf", "report", "run1", "--topp", "3"],
            &["gpuperf", "diff", "a", "b", "--idel"],
            &["gpuperf", "monitor", "--intervall", "2"],
        ];
        for args in cases {
            let e = Cli::try_parse_checked(*args).unwrap_err();
            assert_eq!(
                e.kind(),
                clap::error::ErrorKind::UnknownArgument,
                "{args:?}: {e}"
            );
            assert!(
                e.to_string().contains("tip: a similar argument exists"),
                "{args:?}: {e}"
            );
        }
        let e = Cli::try_parse_checked(["gpuperf", "record", "--zzz", "--", "./app"]).unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::UnknownArgument, "{e}");
    }

    #[test]
    fn capture_windows_parse_as_nsight_systems_spells_them() {
        let cli = Cli::try_parse_checked([
            "gpuperf",
            "record",
            "--capture-range",
            "cudaProfilerApi",
            "--delay",
            "2.5",
            "--",
            "./app",
        ])
        .unwrap();
        let Some(Command::Record(r)) = cli.command else {
            panic!("not record")
        };
        assert_eq!(r.capture_range.as_deref(), Some("cudaProfilerApi"));
        assert_eq!(r.delay, Some(2.5));
        let cli =
            Cli::try_parse_checked(["gpuperf", "--capture-range", "nvtx:train step", "./app"])
                .unwrap();
        assert_eq!(cli.record.capture_range.as_deref(), Some("nvtx:train step"));
        for bad in ["nvtx:", "nvtx", "cudaprofilerapi", ""] {
            assert!(
                Cli::try_parse_checked(["gpuperf", "--capture-range", bad, "./app"]).is_err(),
                "{bad}"
            );
        }
        assert!(
            Cli::try_parse_checked(["gpuperf", "--cpu-only", "--delay", "1", "./app"]).is_err()
        );
    }

    #[test]
    fn the_programs_own_options_pass_through() {
        for args in [
            &["gpuperf", "record", "./app", "--foo", "-x", "--", "y"][..],
            &["gpuperf", "record", "--", "./app", "--foo", "-x", "--", "y"],
            &["gpuperf", "./app", "--foo", "-x", "--", "y"],
            &["gpuperf", "--", "./app", "--foo", "-x", "--", "y"],
        ] {
            let cli = Cli::try_parse_checked(args).unwrap();
            let r = match cli.command {
                Some(Command::Record(r)) => r,
                None => cli.record,
                _ => panic!("not record"),
            };
            assert_eq!(
                r.program,
                os(&["./app", "--foo", "-x", "--", "y"]),
                "{args:?}"
            );
        }
        // After `--`, even a program whose name starts with `-` is the program.
        let cli = Cli::try_parse_checked(["gpuperf", "record", "--", "-app", "-o"]).unwrap();
        let Some(Command::Record(r)) = cli.command else {
            panic!("not record")
        };
        assert_eq!(r.program, os(&["-app", "-o"]));
        assert_eq!(r.output, PathBuf::from("flamegraph.svg"));
    }

    #[test]
    fn merge_and_report_take_a_recording_directory() {
        let cli = Cli::try_parse_from(["gpuperf", "merge", "run1", "-o", "f.svg"]).unwrap();
        let Some(Command::Merge(m)) = cli.command else {
            panic!("not merge")
        };
        assert_eq!(m.input.recording.as_deref(), Some("run1".as_ref()));
        assert!(m.input.gpu.is_empty());
        let cli = Cli::try_parse_from([
            "gpuperf",
            "merge",
            "t.pt.trace.json.gz",
            "--pprof",
            "p.pb.gz",
        ])
        .unwrap();
        let Some(Command::Merge(m)) = cli.command else {
            panic!("not merge")
        };
        assert_eq!(m.files.pprof.as_deref(), Some("p.pb.gz".as_ref()));
        let cli = Cli::try_parse_from(["gpuperf", "report", "run1", "--top", "3"]).unwrap();
        assert!(matches!(cli.command, Some(Command::Report(_))));
        assert!(Cli::try_parse_from(["gpuperf", "report"]).is_err());
    }
}

/// `--pc-sampling`'s value: CUPTI's default period, or 2^N cycles.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PcPeriod(pub Option<u8>);

fn parse_pc_period(s: &str) -> Result<PcPeriod, String> {
    if s == "default" {
        return Ok(PcPeriod(None));
    }
    match s.parse::<u8>() {
        Ok(n @ 5..=31) => Ok(PcPeriod(Some(n))),
        _ => Err(format!(
            "`{s}` is not a sampling period: give N from 5 to 31 (every 2^N cycles)"
        )),
    }
}

fn parse_pc_window(s: &str) -> Result<PcWindow, String> {
    PcWindow::parse(s)
}

fn parse_pc_budget(s: &str) -> Result<PcBudget, String> {
    PcBudget::parse(s)
}

fn parse_pc_mode(s: &str) -> Result<PcMode, String> {
    PcMode::parse(s).ok_or_else(|| format!("`{s}` is not a mode: give serialized or continuous"))
}
