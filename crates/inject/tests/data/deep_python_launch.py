"""Two launches on the simulated CUDA runtime (sim/, no GPU) with the injection
library loaded by its driver, one under 10 nested Python calls and one under
300: deeper than the 256-frame stack cap. The kernel is registered by hand, as
nvcc's host code does. usage: deep_python_launch.py INJECT.so LIBCUDART.so"""
import ctypes
import os
import sys

# The simulated driver loads the injection library at cuInit, as NVIDIA's does.
os.environ["CUDA_INJECTION64_PATH"] = sys.argv[1]
cudart = ctypes.CDLL(sys.argv[2])


class Dim3(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]


cudart.__cudaRegisterFatBinary.restype = ctypes.POINTER(ctypes.c_void_p)
cudart.__cudaRegisterFatBinary.argtypes = [ctypes.c_void_p]
cudart.__cudaRegisterFunction.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p,
                                          ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int]
cudart.__cudaRegisterFunction.argtypes += [ctypes.c_void_p] * 4 + [ctypes.POINTER(ctypes.c_int)]
cudart.cudaLaunchKernel.argtypes = [ctypes.c_void_p, Dim3, Dim3, ctypes.c_void_p, ctypes.c_size_t,
                                    ctypes.c_void_p]

STUB = ctypes.CFUNCTYPE(None)(lambda: None)  # the host stub: any distinct address
image = ctypes.c_int(0)
handle = cudart.__cudaRegisterFatBinary(ctypes.byref(image))
name = b"_Z4deepv"
cudart.__cudaRegisterFunction(handle, ctypes.cast(STUB, ctypes.c_void_p), name, name, -1,
                              None, None, None, None, None)
launched = 0


def launch():
    global launched
    err = cudart.cudaLaunchKernel(ctypes.cast(STUB, ctypes.c_void_p), Dim3(1, 1, 1),
                                  Dim3(32, 1, 1), None, 0, None)
    if err != 0:
        raise SystemExit(f"cudaLaunchKernel: {err}")
    launched += 1


def rec(n):
    if n == 0:
        launch()
    else:
        rec(n - 1)


rec(10)
rec(300)
print("launched", launched)
