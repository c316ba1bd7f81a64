"""What in-process stacks add to a launch under 30 Python frames: calls the
shared-library build of stack_bench.c through ctypes at the bottom of 30 nested
Python functions. usage: python3 stack_bench.py LIB.so INJECT.so LAUNCHES"""
import ctypes
import sys

lib = ctypes.CDLL(sys.argv[1])
lib.bench_run.restype = ctypes.c_double
if lib.bench_init(sys.argv[2].encode()) != 0:
    raise SystemExit("bench_init failed")


def nest(depth):
    if depth == 1:
        return lib.bench_run(0, int(sys.argv[3]))
    return nest(depth - 1) + 0.0


print("ns_per_launch %.1f" % nest(30))
