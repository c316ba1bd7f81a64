"""Simulated CUDA (no GPU: kernels do not run): a launch-bound loop at a chosen
stack depth, for sim/bench/stack_depth.sh. LAUNCHES empty-kernel launches
(cuLaunchKernel through ctypes, on the simulated driver) at the bottom of
PYFRAMES nested, distinct Python functions; every HOP-th of them calls the next
through a C builtin (`map`), as Python code calls into PyTorch's C++ and back:
each such hop adds native interpreter frames between the Python frames, as a
model's forward does (module __call__, the dispatcher, autograd). HOP 0: plain
Python calls only (CPython 3.11+ runs them in one eval-loop frame).

Prints "launches N cpu_per_launch_us C wall_per_launch_us W": C is the CPU
time of the whole process (every thread) over the timed loop, per launch.
With GPUPERF_BENCH_BLOCK=B, in a process with the injection library, the
launches are made in steps of 100 from the top of the stack, in pairs of
blocks of B steps with stacks off in one and on in the other (interleave.py),
and it prints interleave.line's line and "launches_per_step 100" instead.
usage: python3 stack_depth.py PYFRAMES HOP LAUNCHES"""
import ctypes
import os
import sys
import time

import interleave

pyframes, hop, launches = (int(a) for a in sys.argv[1:4])
cu = ctypes.CDLL("libcuda.so.1")


def check(r, what):
    if r != 0:
        raise SystemExit("stack_depth.py: %s failed: %d" % (what, r))


PTX = b""".version 8.0
.target sm_90
.address_size 64
.visible .entry bench_empty()
{
    ret;
}
"""
check(cu.cuInit(0), "cuInit")
dev = ctypes.c_int()
check(cu.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
ctx = ctypes.c_void_p()
check(cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
check(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
mod = ctypes.c_void_p()
check(cu.cuModuleLoadData(ctypes.byref(mod), PTX), "cuModuleLoadData")
fn = ctypes.c_void_p()
check(cu.cuModuleGetFunction(ctypes.byref(fn), mod, b"bench_empty"), "cuModuleGetFunction")
launch = cu.cuLaunchKernel
launch.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
null = None


def f0(n):
    for _ in range(n):
        launch(fn, 1, 1, 1, 1, 1, 1, 0, null, null, null)
    return 0


# Distinct functions, as in a real stack (one code object each): f{i} calls
# f{i-1}, directly or, every HOP-th, through map() (a C call back into Python).
src = []
for i in range(1, pyframes):
    if hop and i % hop == 0:
        body = "    for r in map(f%d, (n,)):\n        return r\n" % (i - 1)
    else:
        body = "    return f%d(n)\n" % (i - 1)
    src.append("def f%d(n):\n%s" % (i, body))
exec("".join(src))
top = globals()["f%d" % (pyframes - 1)]
top(1000)  # warm-up: the first launches, the stack's first capture
check(cu.cuCtxSynchronize(), "cuCtxSynchronize")
block = int(os.environ.get("GPUPERF_BENCH_BLOCK", "0"))
if block > 0:
    step = 100
    r = interleave.blocks(lambda: top(step), launches // step, block,
                          lambda: check(cu.cuCtxSynchronize(), "cuCtxSynchronize"))
    print(interleave.line("step", r))
    print("launches_per_step %d" % step)
    sys.exit(0)
c = time.process_time()
t = time.perf_counter()
top(launches)
check(cu.cuCtxSynchronize(), "cuCtxSynchronize")
wall = time.perf_counter() - t
cpu = time.process_time() - c
print("launches %d cpu_per_launch_us %.3f wall_per_launch_us %.3f"
      % (launches, cpu * 1e6 / launches, wall * 1e6 / launches))
