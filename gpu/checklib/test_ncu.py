"""Tests of the Nsight Compute CSV readers, on pages laid out as ncu 2023-2025
print them (run: `cd gpu && python3 -m unittest checklib.test_ncu`)."""
import unittest

from .ncu import metric_stalls, source_lines

DETAILS = """\
==PROF== Connected to process 4242 (/tmp/pc_hot)
==PROF== Profiling "chase" - 0: 0%....50%....100% - 9 passes
chase: 1 launches, 0.95 ms
==PROF== Disconnected from process 4242
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
"0","4242","pc_hot","127.0.0.1","chase(const unsigned int *, unsigned int *, int)","1","7","(256, 1, 1)","(528, 1, 1)","0","9.0","Command line profiler metrics","smsp__pcsamp_warps_issue_stalled_long_scoreboard","","12,480"
"0","4242","pc_hot","127.0.0.1","chase(const unsigned int *, unsigned int *, int)","1","7","(256, 1, 1)","(528, 1, 1)","0","9.0","Command line profiler metrics","smsp__pcsamp_warps_issue_stalled_long_scoreboard_not_issued","","12,001"
"0","4242","pc_hot","127.0.0.1","chase(const unsigned int *, unsigned int *, int)","1","7","(256, 1, 1)","(528, 1, 1)","0","9.0","Command line profiler metrics","smsp__pcsamp_warps_issue_stalled_selected","","310"
"0","4242","pc_hot","127.0.0.1","chase(const unsigned int *, unsigned int *, int)","1","7","(256, 1, 1)","(528, 1, 1)","0","9.0","Command line profiler metrics","smsp__pcsamp_warps_issue_stalled_wait","","n/a"
"""

# --print-source cuda of a report with --import-source yes: the file's rows,
# then an inlined header's, each after its "File Path" row.
SOURCE_BY_FILE = """\
"File Path","/work/gpu/progs/pc_hot.cu"
"Function Name","chase"
"Line No","Source","Warp Stall Sampling (All Samples)","Warp Stall Sampling (Not-issued Samples)","smsp__pcsamp_warps_issue_stalled_long_scoreboard","smsp__pcsamp_warps_issue_stalled_long_scoreboard_not_issued","smsp__pcsamp_warps_issue_stalled_selected"
"35","    unsigned i = threadIdx.x;","12","0","0","0","12"
"36","    for (int k = 0; k < n; k++)","1,040","200","40","30","1,000"
"37","        i = next[i]; // HOT: a dependent load","48,000","45,000","47,500","44,000","500"
"38","","",""
"File Path","/usr/local/cuda/include/cuda/std/__atomic/api.h"
"Line No","Source","Warp Stall Sampling (All Samples)","Warp Stall Sampling (Not-issued Samples)","smsp__pcsamp_warps_issue_stalled_long_scoreboard","smsp__pcsamp_warps_issue_stalled_long_scoreboard_not_issued","smsp__pcsamp_warps_issue_stalled_selected"
"37","  return __a;","99,999","0","99,999","0","0"
"""

# An older layout: a "Kernel Name" row, "#" for the line, "(All Cycles)", no file rows.
SOURCE_OLD = """\
"Kernel Name","chase"
"#","Source","Warp Stall Sampling (All Cycles)","Warp Stall Sampling (No Instructions)"
"1","#include <cstdio>","0","0"
"37","        i = next[i];","900","10"
"40","    out[i] = k;","30","1"
"""


class MetricStalls(unittest.TestCase):
    def test_reasons_summed_after_the_programs_output_not_issued_and_unreadable_left_out(self):
        self.assertEqual(metric_stalls(DETAILS), {"long_scoreboard": 12480.0, "selected": 310.0})

    def test_no_table_gives_nothing(self):
        self.assertEqual(metric_stalls("==ERROR== the profiling of chase failed\n"), {})
        self.assertEqual(metric_stalls(None), {})


class SourceLines(unittest.TestCase):
    def test_lines_of_the_named_file_only_after_its_file_and_function_rows(self):
        lines, stalls = source_lines(SOURCE_BY_FILE, "pc_hot.cu")
        self.assertEqual(lines, {35: 12.0, 36: 1040.0, 37: 48000.0, 38: 0.0})
        self.assertEqual(max(lines, key=lines.get), 37)
        # The page's own per-reason columns, not-issued left out, other files' rows too.
        self.assertEqual(stalls, {"long_scoreboard": 47540.0, "selected": 1512.0})

    def test_another_files_rows_are_not_counted_under_its_line_numbers(self):
        lines, _ = source_lines(SOURCE_BY_FILE, "api.h")
        self.assertEqual(lines, {37: 99999.0})

    def test_an_older_page_without_file_rows_is_read_by_its_hash_column(self):
        lines, stalls = source_lines(SOURCE_OLD, "pc_hot.cu")
        self.assertEqual(lines, {1: 0.0, 37: 900.0, 40: 30.0})
        self.assertEqual(stalls, {})

    def test_a_page_without_a_samples_column_gives_nothing(self):
        page = '"File Path","pc_hot.cu"\n"Line No","Source","Instructions Executed"\n"37","x","5"\n'
        self.assertEqual(source_lines(page, "pc_hot.cu"), ({}, {}))


if __name__ == "__main__":
    unittest.main()
