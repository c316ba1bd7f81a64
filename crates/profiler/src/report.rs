//! The profiler's summary in words, for `gpuperf record` to print.

use std::fmt;

use crate::Summary;

/// What the summary tells the user, a line each, as `gpuperf record` prints it.
impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self;
        let mut report = String::new();
        report += &format!(
            "gpuperf: CPU side: {} launch stacks ({} taken at the API entry, {} inside NVIDIA code), \
         {} dropped, {} stacks lost, {} truncated (stop before _start or a thread start), \
         {} frames without symbols\n",
            s.launches,
            s.entry_stacks,
            s.marker_stacks,
            s.dropped_launches,
            s.lost_stacks,
            s.truncated_stacks,
            s.unsymbolized_frames
        );
        if let Some(dir) = &s.tracefs_mounted {
            report += &format!(
                "gpuperf: mounted tracefs at `{}` (nothing was mounted there): the mmap syscall \
             tracepoints need it\n",
                dir.display()
            );
        }
        if let Some(why) = &s.files_not_followed {
            report += &format!(
                "gpuperf: libraries the program maps are not followed ({why}): they are read from \
             /proc while the process lives, so stacks of a process that exits first may stop \
             at the first frame without a frame pointer\n"
            );
        }
        if s.signal_stacks_cut > 0 {
            report += &format!(
                "gpuperf: {} of the truncated stacks stop at a signal handler's frame: the copied \
             stack does not reach the interrupted code (an alternate signal stack, or a signal \
             frame too large for the copy)\n",
                s.signal_stacks_cut
            );
        }
        if !s.unreadable_files.is_empty() {
            // Each once, with why; a long list is cut, with its length said.
            const SHOWN: usize = 5;
            let n = s.unreadable_files.len();
            report += &format!(
                "gpuperf: {n} file{} the program maps could not be read; stacks through \
             their code stop there (counted truncated):\n",
                if n == 1 { "" } else { "s" }
            );
            for line in s.unreadable_files.iter().take(SHOWN) {
                report += &format!("  {line}\n");
            }
            if n > SHOWN {
                report += &format!("  and {} more\n", n - SHOWN);
            }
        }
        if !s.slow_functions_skipped.is_empty() {
            report += &format!(
                "gpuperf: not probed (a probe there would cost ~10 µs a call): {}\n",
                s.slow_functions_skipped.join(", ")
            );
        }
        f.write_str(&report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unreadable_files_and_signal_cut_stacks_are_reported_a_long_list_cut() {
        let mut s = Summary {
            launches: 9,
            truncated_stacks: 4,
            ..Default::default()
        };
        assert!(!s.to_string().contains("could not be read"));
        assert!(!s.to_string().contains("signal handler"));
        s.signal_stacks_cut = 3;
        assert!(
            s.to_string()
                .contains("gpuperf: 3 of the truncated stacks stop at a signal handler's frame"),
            "{}",
            s.to_string()
        );
        s.unreadable_files = vec!["`/lib/a.so`: cannot open: No such file or directory".into()];
        let one = s.to_string();
        assert!(
            one.contains("gpuperf: 1 file the program maps could not be read")
                && one.contains("\n  `/lib/a.so`: cannot open: No such file or directory\n"),
            "{one}"
        );
        s.unreadable_files = (0..7).map(|i| format!("`/lib/{i}.so`: denied")).collect();
        let seven = s.to_string();
        assert!(seven.contains("gpuperf: 7 files"), "{seven}");
        assert!(
            seven.contains("`/lib/4.so`") && !seven.contains("`/lib/5.so`"),
            "{seven}"
        );
        assert!(seven.ends_with("  and 2 more\n"), "{seven}");
    }

    #[test]
    fn mmap_tracepoints_refused_and_tracefs_mounted_are_said() {
        let mut s = Summary::default();
        assert!(!s.to_string().contains("not followed"));
        assert!(!s.to_string().contains("mounted tracefs"));
        s.files_not_followed = Some("attaching to the mmap syscall tracepoints: -ENOENT".into());
        s.tracefs_mounted = Some("/sys/kernel/tracing".into());
        let text = s.to_string();
        assert!(
            text.contains("libraries the program maps are not followed (attaching to the mmap"),
            "{text}"
        );
        assert!(
            text.contains("mounted tracefs at `/sys/kernel/tracing`"),
            "{text}"
        );
    }
}
