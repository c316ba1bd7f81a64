#!/usr/bin/env python3
"""Writes cpu.txt: a SYNTHETIC reference-format CPU trace for the real cupti.log.

The reference recording has no CPU side, so this script makes one: one extended
folded line per cudaLaunchKernel call in cupti.log, as the reference profiler
writes them (pid in the tid field, probe id in the cpu field), with stacks chosen
by kernel name and timestamps on CLOCK_MONOTONIC, i.e. off from CUPTI's epoch
clock by a fixed offset, and 0.2-1.5 us earlier than CUPTI's API-entry
timestamp (the uprobe fires at the function's entry, before CUPTI's callback).
"""
import random
import re
import sys

OFFSET_NS = 1_761_180_000_123_456_789  # epoch - monotonic at recording time
STACKS = {
    "attentionQKT": "run_inference;TransformerLayer::forward;MultiHeadAttention::forward;MultiHeadAttention::scores",
    "softmax": "run_inference;TransformerLayer::forward;MultiHeadAttention::forward;softmax_rows",
    "attentionScoresV": "run_inference;TransformerLayer::forward;MultiHeadAttention::forward;MultiHeadAttention::weighted_values",
    "residualAdd": "run_inference;TransformerLayer::forward;residual_add",
}
BASE = "_start;__libc_start_main;main;InferenceServer::handle_request"


def main(log_path: str, out_path: str) -> None:
    rng = random.Random(7)
    kernel_of = {}
    launches = []
    for line in open(log_path, encoding="utf-8"):
        m = re.match(r'CONCURRENT_KERNEL \[ \d+, \d+ \] duration \d+, "_Z\d+(\w+?)P', line)
        if m:
            corr = int(re.search(r"correlationId (\d+)", line).group(1))
            kernel_of[corr] = m.group(1)
        m = re.match(r'RUNTIME \[ (\d+), \d+ \] .*"cudaLaunchKernel_v7000".*processId (\d+).*correlationId (\d+)', line)
        if m:
            launches.append((int(m.group(1)), int(m.group(2)), int(m.group(3))))
    with open(out_path, "w", encoding="utf-8") as out:
        for start, pid, corr in sorted(launches):
            name = kernel_of.get(corr, "")
            mid = STACKS.get(name, "run_inference;TransformerLayer::forward;FeedForward::forward")
            ts = start - OFFSET_NS - rng.randint(200, 1500)
            out.write(f"{ts} llm_inference {pid} {pid} 0 {BASE};{mid};cudaLaunchKernel\n")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "cupti.log", sys.argv[2] if len(sys.argv) > 2 else "cpu.txt")
