"""The launch-bound loop of launch_loop.cu, from PyTorch under 30 nested Python
functions: N in-place adds on a one-element CUDA tensor (one kernel launch each),
synchronized at the end. Prints the same line as launch_loop.cu:
"launches N seconds S per_launch_us U", then "cpu_per_launch_us C": the CPU
time of the whole process (every thread) per launch, which unlike the wall time
does not grow when other programs compete for the CPU.
usage: python3 launch_loop.py N"""
import sys
import time

import torch

n = int(sys.argv[1])
if not torch.cuda.is_available():
    raise SystemExit("launch_loop.py: no usable CUDA device")
x = torch.zeros(1, device="cuda")
for _ in range(1000):  # warm-up: kernel selection, caching allocator
    x.add_(1)
torch.cuda.synchronize()


def f1():
    global cpu
    c = time.process_time()
    t = time.perf_counter()
    for _ in range(n):
        x.add_(1)
    torch.cuda.synchronize()
    dt = time.perf_counter() - t
    cpu = time.process_time() - c
    return dt


cpu = 0.0


# 30 distinct functions, as in a real stack: f30 calls f29 ... f1 runs the loop.
exec("".join("def f%d():\n    return f%d()\n" % (i, i - 1) for i in range(2, 31)))
dt = f30()  # noqa: F821 (defined by the exec above)
print("launches %d seconds %.6f per_launch_us %.3f cpu_per_launch_us %.3f"
      % (n, dt, dt * 1e6 / n, cpu * 1e6 / n))
