//! Command-line arguments. Parsing only: `main.rs` dispatches.

use std::path::PathBuf;

use clap::{ArgAction, Args, Parser, Subcommand};

/// gpuperf: which line of CPU code caused which GPU work, and what it cost.
#[derive(Debug, Parser)]
#[command(
    name = "gpuperf",
    version,
    about,
    after_help = "EXAMPLES:
    gpuperf merge --gpu gpu.trace --cpu cpu.txt -m merged.folded -o flamegraph.svg -c timeline.json
    gpuperf report --gpu gpu.trace --cpu cpu.txt"
)]
pub struct Cli {
    /// More output on stderr (-v info, -vv debug, -vvv trace).
    #[arg(short, long, global = true, action = ArgAction::Count)]
    pub verbose: u8,
    /// Only errors on stderr.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Join a GPU trace with CPU stacks; write folded stacks, a flamegraph and a timeline.
    Merge(MergeArgs),
    /// Print the top kernels with their duration and launch-latency statistics.
    Report(ReportArgs),
}

/// Inputs shared by `merge` and `report`.
#[derive(Debug, Args)]
pub struct InputArgs {
    /// GPU trace: a gpuperf trace, a directory of them, or a reference CUPTI text log. Repeatable.
    #[arg(long, short = 'g', value_name = "FILE", required = true)]
    pub gpu: Vec<PathBuf>,
    /// CPU stacks: gpuperf's CPU trace or the reference's extended folded lines.
    #[arg(long, value_name = "FILE")]
    pub cpu: Option<PathBuf>,
    /// Offset added to CPU timestamps to reach the GPU clock, in ns. Default: estimated when needed.
    #[arg(long, value_name = "NS", allow_hyphen_values = true)]
    pub cpu_clock_offset_ns: Option<i64>,
    /// How far outside an API call a CPU event may fall and still pair with it by time, in µs.
    #[arg(long, value_name = "US", default_value_t = 50, value_parser = clap::value_parser!(u64).range(0..=10_000_000))]
    pub slack_us: u64,
}

/// `gpuperf merge`.
#[derive(Debug, Args)]
pub struct MergeArgs {
    #[command(flatten)]
    pub input: InputArgs,
    /// Write merged folded stacks here (`-` for stdout). Default: stdout when no other output is named.
    #[arg(short = 'm', long, value_name = "FILE")]
    pub folded: Option<PathBuf>,
    /// Write a Chrome-trace timeline (Perfetto, chrome://tracing) here.
    #[arg(short = 'c', long, value_name = "FILE")]
    pub chrome: Option<PathBuf>,
    /// Write an SVG flamegraph here.
    #[arg(short = 'o', long, value_name = "FILE")]
    pub svg: Option<PathBuf>,
    /// Flamegraph title.
    #[arg(long, default_value = "gpuperf: GPU time by CPU stack")]
    pub title: String,
}

/// `gpuperf report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    #[command(flatten)]
    pub input: InputArgs,
    /// Rows to show.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub top: u64,
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
        let Command::Merge(m) = cli.command else {
            panic!("not merge")
        };
        assert_eq!(m.input.gpu, [PathBuf::from("g")]);
        assert_eq!(m.folded.as_deref(), Some("m.folded".as_ref()));
        assert_eq!(m.chrome.as_deref(), Some("t.json".as_ref()));
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
        let Command::Report(r) = r.command else {
            panic!("not report")
        };
        assert_eq!(r.input.cpu_clock_offset_ns, Some(-5));
    }
}
