"""Tests of the Nsight Compute CSV readers (run: `cd gpu && python3 -m
unittest checklib.test_ncu`): on a real source page (`testdata/`: the
`cuda,sass` view that ncu 2025.3.1 printed of its report of `chase` in the
H200 run of 2026-12-04, run 2; its file path replaced, its rows cut to each
line's sum and a few instructions) and on hand-made pages in other layouts."""
import json
import os
import unittest

from .ncu import line_agreement, metric_stalls, source_lines

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

# Hand-made: a file's rows, then an inlined header's, each after its "File
# Path" row, with the per-reason columns under the metrics' own names.
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

# Hand-made, an older layout: a "Kernel Name" row, "#" for the line, "(All Cycles)", no file rows.
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
    def test_the_h200_page_lines_with_code_their_sums_and_reasons_under_cuptis_names(self):
        lines, stalls, per_line = source_lines(page("h200_chase_cuda_sass.csv"), "pc_hot.cu")
        # Only the line rows: an instruction row's samples are already in its line's.
        self.assertEqual(lines, {37: 11.0, 38: 9.0, 40: 41.0, 41: 96957.0, 42: 6633.0, 44: 9.0, 45: 9.0})
        self.assertEqual(max(per_line[41], key=per_line[41].get), "long_scoreboard")
        self.assertEqual(per_line[41]["long_scoreboard"], 96566.0)
        self.assertEqual(max(stalls, key=stalls.get), "long_scoreboard")
        # Every reason column is one of CUPTI's names; "(Not Issued)" parts are left out.
        self.assertEqual(sum(stalls.values()), sum(lines.values()))
        self.assertFalse([r for r in stalls if r.startswith("stall_") or "Issued" in r], stalls)
        self.assertEqual(stalls["dispatch_stall"], 46.0)

    def test_lines_of_the_named_file_only_after_its_file_and_function_rows(self):
        lines, stalls, _ = source_lines(SOURCE_BY_FILE, "pc_hot.cu")
        self.assertEqual(lines, {35: 12.0, 36: 1040.0, 37: 48000.0, 38: 0.0})
        self.assertEqual(max(lines, key=lines.get), 37)
        # The page's own per-reason columns, not-issued left out, other files' rows too.
        self.assertEqual(stalls, {"long_scoreboard": 47540.0, "selected": 1512.0})

    def test_another_files_rows_are_not_counted_under_its_line_numbers(self):
        lines, _, _ = source_lines(SOURCE_BY_FILE, "api.h")
        self.assertEqual(lines, {37: 99999.0})

    def test_an_older_page_without_file_rows_is_read_by_its_hash_column(self):
        lines, stalls, _ = source_lines(SOURCE_OLD, "pc_hot.cu")
        self.assertEqual(lines, {1: 0.0, 37: 900.0, 40: 30.0})
        self.assertEqual(stalls, {})

    def test_a_page_without_a_samples_column_gives_nothing(self):
        page = '"File Path","pc_hot.cu"\n"Line No","Source","Instructions Executed"\n"37","x","5"\n'
        self.assertEqual(source_lines(page, "pc_hot.cu"), ({}, {}, {}))


def page(name):
    with open(os.path.join(os.path.dirname(__file__), "testdata", name)) as f:
        return f.read()


# gpuperf's report of the same kernel in the same run (5 launches; ncu's page
# is of one), as `gpuperf report --format json` gave it, cut to its top three
# lines' top reasons.
GPUPERF_CHASE = {"kernel": "chase", "samples": 517285, "lines": [
    {"line": "/tmp/check/gpu/progs/pc_hot.cu:41", "samples": 483983,
     "stalls": [{"reason": "long_scoreboard", "samples": 482146}]},
    {"line": "/tmp/check/gpu/progs/pc_hot.cu:42", "samples": 32932,
     "stalls": [{"reason": "long_scoreboard", "samples": 32199}]},
    {"line": "/tmp/check/gpu/progs/pc_hot.cu:40", "samples": 211,
     "stalls": [{"reason": "wait", "samples": 131}]}]}


class LineAgreement(unittest.TestCase):
    def test_the_h200_run_agrees_with_ncu_on_each_line_over_5_percent(self):
        lines, _, per_line = source_lines(page("h200_chase_cuda_sass.csv"), "pc_hot.cu")
        bad, seen, fig = line_agreement(GPUPERF_CHASE, lines, per_line, "pc_hot.cu")
        self.assertEqual(bad, [])
        self.assertEqual(list(fig), [41, 42])
        self.assertEqual(fig[41], {"gpuperf_share": 0.9356, "ncu_share": 0.9353,
                                   "gpuperf_stall": "long_scoreboard", "ncu_stall": "long_scoreboard"})
        self.assertEqual(seen[0], "line 41 93.6% / 93.5% (long_scoreboard / long_scoreboard)")

    def test_a_share_off_by_more_than_the_tolerance_or_another_top_reason_disagrees(self):
        lines, _, per_line = source_lines(page("h200_chase_cuda_sass.csv"), "pc_hot.cu")
        moved = json.loads(json.dumps(GPUPERF_CHASE))
        moved["lines"][1]["samples"] = 80000
        moved["lines"][0]["stalls"][0]["reason"] = "wait"
        bad, _, _ = line_agreement(moved, lines, per_line, "pc_hot.cu")
        self.assertEqual(bad, ["line 41: top stall gpuperf wait, ncu long_scoreboard",
                               "line 42: 15.5% of gpuperf's samples, 6.4% of ncu's"])

    def test_a_line_gpuperf_lacks_counts_as_none_of_its_samples(self):
        lines, _, per_line = source_lines(page("h200_chase_cuda_sass.csv"), "pc_hot.cu")
        bad, _, _ = line_agreement({"samples": 10, "lines": []}, lines, per_line, "pc_hot.cu")
        self.assertEqual(bad[0], "line 41: 0.0% of gpuperf's samples, 93.5% of ncu's")


if __name__ == "__main__":
    unittest.main()
