# Simulated CUDA (no GPU): sim/run.sh puts this first on PYTHONPATH. It turns
# cuDNN off in PyTorch when `torch` is imported (cuDNN cannot start on the
# simulated driver, and PyTorch then takes its native kernels), then runs the
# next sitecustomize on the path. sim/build.sh copies it to OUTDIR/python.
import importlib.abc
import importlib.util
import os
import sys


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
