"""Two launches through the MOCK libcupti's API callbacks with the injection
library loaded, one under 10 nested Python calls and one under 300: deeper than
the 256-frame stack cap. usage: deep_python_launch.py INJECT.so MOCK.so"""
import ctypes
import sys

inject = ctypes.CDLL(sys.argv[1])
if inject.InitializeInjection() != 1:
    raise SystemExit("InitializeInjection failed")
# The library the injection library loaded from GPUPERF_CUPTI_PATH: the same handle.
mock = ctypes.CDLL(sys.argv[2])

RUNTIME, LAUNCH_KERNEL = 2, 211  # CUPTI_CB_DOMAIN_RUNTIME_API, cudaLaunchKernel_v7000
corr = 0


def launch():
    global corr
    corr += 1
    mock.mock_api(RUNTIME, LAUNCH_KERNEL, corr, 1)
    mock.mock_api(RUNTIME, LAUNCH_KERNEL, corr, 0)


def rec(n):
    if n == 0:
        launch()
    else:
        rec(n - 1)


rec(10)
rec(300)
print("launched", corr)
