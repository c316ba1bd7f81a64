"""gpuperf's one-shot GPU check, one job per module; gpu/check.py runs it.

  runner    running a command with a time limit (and its peak RSS)
  timeline  reading a recording's Chrome-trace timeline
  base      the verdicts, the check's state, its budget and item bookkeeping
  prepare   finding gpuperf, nvcc, libraries and PyTorch; building the programs
  record    `gpuperf record` of one run, and what is wrong with a recording
  env, native, pc, driver, pytorch, overhead   the groups of items
  ncu       reading Nsight Compute's CSV pages (pc_vs_ncu)
  summary   summary.json, summary.md and check.tar.gz
  main      the command line and the order the groups run in
"""
