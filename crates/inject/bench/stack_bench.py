"""What in-process stacks add to a launch under 30 Python frames: calls the
shared-library build of stack_bench.c through ctypes at the bottom of 30 nested
distinct Python functions. usage: python3 stack_bench.py LIB.so INJECT.so LAUNCHES"""
import ctypes
import sys

lib = ctypes.CDLL(sys.argv[1])
lib.bench_run.restype = ctypes.c_double
if lib.bench_init(sys.argv[2].encode()) != 0:
    raise SystemExit("bench_init failed")


# 30 distinct functions, as in a real stack: 30 code objects to look up, not one
# recursive function's. f30 calls f29 ... f1 calls the library.
LAUNCHES = int(sys.argv[3])
exec(
    "def f1():\n    return lib.bench_run(0, LAUNCHES)\n"
    + "".join("def f%d():\n    return f%d() + 0.0\n" % (i, i - 1) for i in range(2, 31))
)
print("ns_per_launch %.1f" % f30())
