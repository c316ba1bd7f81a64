# Simulated CUDA (no GPU): sim/run.sh puts this first on PYTHONPATH. It turns
# cuDNN off in PyTorch when `torch` is imported (cuDNN cannot start on the
# simulated driver, and PyTorch then takes its native kernels), keeps the main
# thread's last backward context (below), then runs the next sitecustomize on
# the path. sim/build.sh copies it to OUTDIR/python.
import importlib.abc
import importlib.util
import os
import sys
import threading


def _keep_main_threads_backward_context(torch):
    """PyTorch 2.14 aborts at exit now and then ("terminate called without an
    active exception", pytorch/pytorch#117762 and #180701): each backward
    stashes a Python context in the calling thread's native TLS, its autograd
    graph task shares it, and the caller erases its own reference when the
    backward returns. When the autograd device thread drops the task last
    while the interpreter is finalizing, freeing the context takes the GIL,
    CPython ends that thread with pthread_exit, and the forced unwind meets a
    noexcept frame. A simulated GPU finishes at once, so a script exits within
    microseconds of its last backward and the race is likely (about one run
    in 40 on two busy CPUs). The main thread here keeps its reference until
    its next backward replaces it, so the device thread never drops the last
    one; the reference left at exit goes with the main thread's TLS after the
    interpreter is gone, which PyTorch then leaks instead of freeing. Other
    threads erase theirs as PyTorch does: a thread that exits holding one
    would deadlock in its TLS destructor."""
    remove = getattr(torch._C, "_remove_obj_from_tls", None)
    if remove is None:
        return

    def remove_unless_main(key):
        if key == "context" and threading.current_thread() is threading.main_thread():
            return
        remove(key)

    torch._C._remove_obj_from_tls = remove_unless_main


class _SimulatedCudaTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            import torch.backends.cuda
            import torch.backends.cudnn

            torch.backends.cudnn.enabled = False
            torch.backends.cuda.enable_cudnn_sdp(False)
            _keep_main_threads_backward_context(module)

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _SimulatedCudaTorch())


def _next_sitecustomize():
    here = os.path.dirname(os.path.abspath(__file__))
    for d in sys.path:
        if not d or os.path.abspath(d) == here:
            continue
        f = os.path.join(d, "sitecustomize.py")
        if os.path.isfile(f):
            spec = importlib.util.spec_from_file_location("_next_sitecustomize", f)
            if spec and spec.loader:
                spec.loader.exec_module(importlib.util.module_from_spec(spec))
            return


_next_sitecustomize()
