//! The join's counts and the match summary they print as.

use std::fmt;

use rustc_hash::FxHashMap;

use super::NoStack;
use crate::model::{DropSource, Note};
use crate::read::gputrace::STACKLESS_NOTE;
use crate::read::input::GpuReadSummary;

/// How one process's CPU launches were paired.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pairing {
    /// Process id.
    pub pid: u32,
    /// Exact by correlation id, or ordered by time.
    pub exact: bool,
    /// Ordered pairing was per thread (otherwise per process).
    pub per_thread: bool,
    /// Offset added to CPU timestamps, ns.
    pub offset_ns: i64,
    /// Whether the offset was estimated.
    pub offset_estimated: bool,
    /// CPU launches paired with an API call.
    pub paired: u64,
    /// CPU launches left unpaired.
    pub unpaired_cpu: u64,
    /// Launch API calls left unpaired.
    pub unpaired_api: u64,
}

/// Counts of everything the join saw; its `Display` is the match summary.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    /// CPU launch events.
    pub cpu_launches: u64,
    /// Launch API calls in the GPU trace.
    pub api_launches: u64,
    /// Kernels.
    pub kernels: u64,
    /// Kernels with a CPU stack.
    pub kernels_matched: u64,
    /// Kernels from CUDA graphs.
    pub graph_kernels: u64,
    /// Kernels without a CPU stack, by reason.
    pub kernels_unmatched: FxHashMap<NoStack, u64>,
    /// Memcpy, memset and synchronization records.
    pub other_activities: u64,
    /// Of those, with a CPU stack.
    pub other_matched: u64,
    /// CPU launches whose API call was recorded but caused no GPU activity
    /// (the launch failed, or the trace ends before it ran).
    pub launches_without_gpu: u64,
    /// CPU launches with no API call paired or recorded.
    pub launches_without_api: u64,
    /// CPU launches made during a stream capture, with no GPU activity of their
    /// own: the graph's launches account for their work.
    pub launches_captured: u64,
    /// CPU stacks were not taken ([`Options::stacks_off`](super::Options::stacks_off)).
    pub stacks_off: bool,
    /// CPU lines whose correlation id repeats an earlier line's.
    pub duplicate_cpu_ids: u64,
    /// Launches the CPU profiler lost.
    pub cpu_dropped: u64,
    /// CPU launch stacks that came with the GPU inputs ([`GpuInputs::launch_stacks`](crate::read::input::GpuInputs::launch_stacks)).
    pub gpu_launch_stacks: u64,
    /// CPU launches whose stack stops before a root frame (`_start`, a thread
    /// start): truncated stacks ([`stacks::is_complete`](super::stacks::is_complete)).
    pub cpu_truncated: u64,
    /// GPU records lost, by where.
    pub gpu_dropped: FxHashMap<DropSource, u64>,
    /// Notes left by the recorder, with the process each came from.
    pub notes: Vec<Note>,
    /// Per-process pairing.
    pub pairings: Vec<Pairing>,
    /// What reading the GPU inputs saw.
    pub gpu_read: GpuReadSummary,
}

impl Summary {
    /// Share of kernels with a CPU stack, in percent (100 when there is none).
    pub(crate) fn kernel_match_percent(&self) -> f64 {
        if self.kernels == 0 {
            100.0
        } else {
            100.0 * self.kernels_matched as f64 / self.kernels as f64
        }
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.fmt_matches(f)?;
        self.fmt_launches(f)?;
        self.fmt_pairings(f)?;
        self.fmt_losses(f)?;
        for n in &self.gpu_read.notes {
            writeln!(f, "  note: {n}")?;
        }
        for n in &self.notes {
            writeln!(f, "  note from the recorder: {n}")?;
        }
        Ok(())
    }
}

impl Summary {
    /// The headline and what kernels were matched or not, and why.
    fn fmt_matches(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.kernels == 0 {
            write!(f, "no kernels in the GPU trace")?;
        } else {
            write!(
                f,
                "matched {} of {} kernels ({:.1}%) to a CPU stack",
                self.kernels_matched,
                self.kernels,
                self.kernel_match_percent()
            )?;
        }
        writeln!(
            f,
            "; {} CPU launches, {} launch API calls",
            self.cpu_launches, self.api_launches
        )?;
        if self.gpu_launch_stacks > 0 {
            writeln!(
                f,
                "  CPU stacks from the GPU trace itself: {} API calls",
                self.gpu_launch_stacks
            )?;
        }
        if self.graph_kernels > 0 {
            writeln!(
                f,
                "  {} kernels came from CUDA graph launches",
                self.graph_kernels
            )?;
        }
        let mut reasons: Vec<_> = self
            .kernels_unmatched
            .iter()
            .filter(|(_, n)| **n > 0)
            .collect();
        reasons.sort();
        let counted = self.notes.iter().any(|n| n.text.contains(STACKLESS_NOTE));
        for (reason, n) in reasons {
            let why = match reason {
                NoStack::NoCpuEvent if self.stacks_off => "CPU stacks were off: --gpu-only",
                // Stacks taken in the program: the recorder counts the calls
                // whose capture failed, and its note (below) says why.
                NoStack::NoCpuEvent if self.gpu_launch_stacks > 0 && counted => {
                    "launch recorded in the program, its stack capture failed: the recorder's \
                     note on calls that take a CPU stack and have none says why"
                }
                // No capture failed: the process took no stacks, or its
                // recorder took none for calls made while the exit path ran.
                NoStack::NoCpuEvent if self.gpu_launch_stacks > 0 => {
                    "launch recorded in the program without a stack, and no failed capture \
                     counted: stacks off in that process (GPUPERF_STACKS=0), or an older \
                     recorder that took none for calls made while the exit path ran"
                }
                _ => reason.describe(),
            };
            writeln!(f, "  unmatched kernels: {n} ({why})")?;
        }
        Ok(())
    }

    /// CPU launches that matched nothing, or were cut or repeated.
    fn fmt_launches(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.launches_without_gpu > 0 {
            writeln!(
                f,
                "  unmatched CPU launches: {} with no GPU activity (launch failed, or the GPU trace ends first or lacks them: any note from the recorder below says why)",
                self.launches_without_gpu
            )?;
        }
        if self.launches_captured > 0 {
            writeln!(
                f,
                "  CPU launches captured into CUDA graphs: {} (their work runs, and is charged, at each graph launch)",
                self.launches_captured
            )?;
        }
        if self.launches_without_api > 0 {
            writeln!(
                f,
                "  unmatched CPU launches: {} with no API call recorded or paired",
                self.launches_without_api
            )?;
        }
        if self.cpu_truncated > 0 {
            writeln!(
                f,
                "  truncated CPU stacks: {} of {} launches stop before a root frame (_start, a thread start)",
                self.cpu_truncated, self.cpu_launches
            )?;
        }
        if self.duplicate_cpu_ids > 0 {
            writeln!(
                f,
                "  CPU lines repeating a correlation id (first kept): {}",
                self.duplicate_cpu_ids
            )?;
        }
        if self.other_activities > 0 {
            writeln!(
                f,
                "  memcpy/memset/sync records: {} ({} with a CPU stack)",
                self.other_activities, self.other_matched
            )?;
        }
        Ok(())
    }

    /// How each process's launches were paired.
    fn fmt_pairings(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for p in &self.pairings {
            if p.exact {
                writeln!(f, "  pid {}: exact pairing by correlation id", p.pid)?;
            } else {
                writeln!(
                    f,
                    "  pid {}: paired by time per {} ({} paired, {} CPU events and {} launch calls unpaired), CPU clock offset {:+.6} s{}",
                    p.pid,
                    if p.per_thread { "thread" } else { "process" },
                    p.paired,
                    p.unpaired_cpu,
                    p.unpaired_api,
                    p.offset_ns as f64 / 1e9,
                    if p.offset_estimated {
                        " (estimated)"
                    } else {
                        ""
                    }
                )?;
            }
        }
        Ok(())
    }

    /// Everything dropped, cut off or skipped on the way in.
    fn fmt_losses(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.cpu_dropped > 0 {
            writeln!(
                f,
                "  dropped: {} CPU launch events (eBPF ring buffer full)",
                self.cpu_dropped
            )?;
        }
        let mut drops: Vec<_> = self.gpu_dropped.iter().filter(|(_, n)| **n > 0).collect();
        drops.sort_by_key(|(s, _)| s.name());
        for (source, n) in drops {
            writeln!(f, "  dropped: {n} GPU records ({})", source.name())?;
        }
        for (path, at) in &self.gpu_read.truncated {
            writeln!(
                f,
                "  truncated: `{}` ends inside a record at byte {at}",
                path.display()
            )?;
        }
        for path in &self.gpu_read.unclosed {
            writeln!(
                f,
                "  not closed: `{}`: the process ended without gpuperf's exit flush (killed, or \
                 ended by _exit); what it did after its last periodic flush is missing",
                path.display()
            )?;
        }
        if self.gpu_read.skipped > 0 {
            writeln!(
                f,
                "  skipped: {} GPU records of kinds not used",
                self.gpu_read.skipped
            )?;
        }
        if self.gpu_read.other_lines > 0 {
            writeln!(
                f,
                "  skipped: {} lines of the GPU log that are not records (the recording tool's own output)",
                self.gpu_read.other_lines
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_with_stacks_off_says_so_instead_of_blaming_the_profiler() {
        let mut s = Summary {
            kernels: 3,
            ..Summary::default()
        };
        s.kernels_unmatched.insert(NoStack::NoCpuEvent, 3);
        assert!(s.to_string().contains(
            "  unmatched kernels: 3 (launch seen by CUPTI but not by the CPU profiler)\n"
        ));
        s.stacks_off = true;
        let text = s.to_string();
        assert!(
            text.contains("  unmatched kernels: 3 (CPU stacks were off: --gpu-only)\n"),
            "{text}"
        );
        assert!(!text.contains("CPU profiler"), "{text}");
    }

    #[test]
    fn summary_with_stacks_taken_in_the_program_points_at_the_recorders_reason() {
        let mut s = Summary {
            kernels: 5,
            gpu_launch_stacks: 40,
            ..Summary::default()
        };
        s.kernels_unmatched.insert(NoStack::NoCpuEvent, 5);
        s.notes.push(Note {
            pid: 7,
            text: "5 calls that take a CPU stack have none; stacks: …".into(),
        });
        let text = s.to_string();
        assert!(
            text.contains(
                "  unmatched kernels: 5 (launch recorded in the program, its stack capture \
                 failed: the recorder's note on calls that take a CPU stack and have none says \
                 why)\n"
            ),
            "{text}"
        );
        assert!(!text.contains("CPU profiler"), "{text}");
        assert!(
            text.contains("note from the recorder: pid 7: 5 calls"),
            "{text}"
        );
    }

    /// A recording from an H200 (samples/recordings/real/h200-20261130,
    /// check_app_exit_from_thread): a launch made while another thread's `exit`
    /// ran the exit path was written without a stack, and the only note was
    /// about calls after the close, "not recorded". The reason must not point
    /// at a note that says something else.
    #[test]
    fn summary_without_a_note_on_failed_captures_does_not_point_at_other_notes() {
        let mut s = Summary {
            kernels: 142,
            kernels_matched: 141,
            gpu_launch_stacks: 142,
            ..Summary::default()
        };
        s.kernels_unmatched.insert(NoStack::NoCpuEvent, 1);
        s.notes.push(Note {
            pid: 806,
            text: "2 API calls came after the trace was closed (static destructors, atexit \
                   handlers registered before CUDA started, or other threads while the program \
                   exits); not recorded"
                .into(),
        });
        let text = s.to_string();
        assert!(
            text.contains(
                "  unmatched kernels: 1 (launch recorded in the program without a stack, and no \
                 failed capture counted: stacks off in that process (GPUPERF_STACKS=0), or an \
                 older recorder that took none for calls made while the exit path ran)\n"
            ),
            "{text}"
        );
        assert!(!text.contains("see the recorder's note"), "{text}");
    }
}
