"""Finding what the check runs (gpuperf, nvcc, CUDA libraries, a Python with
PyTorch, the simulation) and building the check's CUDA programs."""
import os
import re
import shutil
import subprocess
import time

from .base import REPO
from .runner import run


class Prepare:
    def find_gpuperf(self):
        cands = [os.environ.get("GPUPERF"), os.path.join(REPO, "gpu/stage/bin/gpuperf"),
                 os.path.join(REPO, "target/release/gpuperf"), os.path.join(REPO, "target/debug/gpuperf")]
        for c in cands:
            if c and os.path.isfile(c) and os.access(c, os.X_OK):
                # A copy every user can run; staged libraries beside it, where
                # its rpath ($ORIGIN/../lib) finds them.
                dst = os.path.join(self.work, "bin", "gpuperf")
                os.makedirs(os.path.dirname(dst), exist_ok=True)
                shutil.copy(c, dst)
                os.chmod(dst, 0o755)
                os.chmod(os.path.dirname(dst), 0o755)
                libs = os.path.join(os.path.dirname(os.path.dirname(c)), "lib")
                if os.path.isdir(libs) and os.path.basename(os.path.dirname(os.path.dirname(c))) == "stage":
                    shutil.copytree(libs, os.path.join(self.work, "lib"))
                    os.chmod(os.path.join(self.work, "lib"), 0o755)
                self.facts["gpuperf"] = os.path.relpath(c, REPO)
                return dst
        return None

    def purelib(self, python="python3"):
        r = run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], 30)
        return r.out.strip() if r.rc == 0 else None

    def wheel_dirs(self):
        dirs = []
        for py in [self.torch_python, "python3"]:
            if py:
                p = self.purelib(py)
                if p:
                    dirs += [os.path.join(p, "nvidia", "cu13"), os.path.join(p, "nvidia", "cuda_cupti"),
                             os.path.join(p, "nvidia", "cuda_runtime")]
        return dirs

    def find_nvcc(self):
        if os.environ.get("NVCC"):
            return os.environ["NVCC"]
        for c in [shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc"] + \
                [os.path.join(d, "bin", "nvcc") for d in self.wheel_dirs()]:
            if c and os.path.isfile(c):
                return c
        return None

    def find_lib(self, name, extra=()):
        roots = list(extra) + [os.path.join(d, "lib") for d in self.wheel_dirs()] + \
            ["/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib",
             "/usr/local/cuda/extras/CUPTI/lib64", "/usr/lib/x86_64-linux-gnu"]
        for r in roots:
            p = os.path.join(r, name)
            if os.path.isfile(p):
                return p
        # Elsewhere the loader knows it (a driver mounted under /usr/local/nvidia).
        r = run(["ldconfig", "-p"], 30)
        m = re.search(rf"^\s*{re.escape(name)} \(libc6,x86-64[^)]*\) => (\S+)$", r.out or "", re.M)
        return m.group(1) if m and os.path.isfile(m.group(1)) else None

    def find_torch_python(self):
        for py in [os.environ.get("GPUPERF_TORCH_PYTHON"), "python3", "/usr/bin/python3.11"]:
            if py and run([py, "-c", "import torch"], 120).rc == 0:
                return py
        return None

    def setup(self):
        self.gpuperf = self.find_gpuperf()
        self.torch_python = self.find_torch_python() if self.only & {"pytorch", "overhead", "pc"} else None
        if self.sim:
            inc = os.environ.get("CUDA_INCLUDE")
            env = dict(os.environ)
            if inc:
                env["CUDA_INCLUDE"] = inc
            self.simdir = os.path.join(self.work, "sim")
            r = run(["bash", os.path.join(REPO, "sim/build.sh"), self.simdir], 300, env=env)
            if r.rc != 0:
                self.simdir = None
                self.facts["sim_error"] = r.tail()
            else:
                for f in os.listdir(self.simdir):
                    os.chmod(os.path.join(self.simdir, f), 0o755)
                self.cupti = os.path.join(self.simdir, "libcupti.so.13")

    def wrap(self, cmd):
        """A torch command as it runs here: under sim/run.sh on the simulation."""
        if self.sim and self.simdir:
            return ["bash", os.path.join(REPO, "sim/run.sh"), self.simdir, "--"] + cmd
        return cmd

    def build_programs(self):
        nvcc = self.find_nvcc()
        if not nvcc:
            return "no nvcc (PATH, /usr/local/cuda, or NVIDIA's wheels)"
        if self.sim:
            if not self.simdir:
                return f"sim/build.sh failed: {self.facts.get('sim_error', '')}"
            libdir = self.simdir
        else:
            rt = self.find_lib("libcudart.so.13")
            if not rt:
                return "no libcudart.so.13 to link against"
            libdir = os.path.join(self.work, "cudart")
            os.makedirs(libdir, exist_ok=True)
            os.chmod(libdir, 0o755)
            for n in ("libcudart.so", "libcudart.so.13"):
                if not os.path.exists(os.path.join(libdir, n)):
                    os.symlink(rt, os.path.join(libdir, n))
        self.facts["nvcc"] = nvcc
        devrt = [f"-L{os.path.join(os.path.dirname(os.path.dirname(nvcc)), 'lib')}",
                 f"-L{os.path.join(os.path.dirname(os.path.dirname(nvcc)), 'lib64')}"]
        base = [nvcc, "-O2", "-g", "-arch=sm_90", "-cudart", "shared", f"-L{libdir}"] + devrt + \
            ["-Xlinker", "-rpath", "-Xlinker", libdir]
        self.nvcc_base = base
        progs = {
            # No frame pointers: stacks must reach main through .eh_frame.
            "check_app": ("gpu/progs/check_app.cu", ["-Xcompiler", "-fomit-frame-pointer"]),
            "sim_app": ("sim/tests/sim_app.cu", ["-Xcompiler", "-fno-omit-frame-pointer"]),
            "mock_llm": ("samples/mock_llm/mock_llm.cu", ["-Xcompiler", "-fno-omit-frame-pointer"]),
            "transformer": ("samples/transformer/transformer.cu", ["-Xcompiler", "-fno-omit-frame-pointer"]),
            # Line information, for PC samples' source lines.
            "pc_hot": ("gpu/progs/pc_hot.cu", ["-lineinfo"]),
        }
        bindir = os.path.join(self.work, "progs")
        os.makedirs(bindir, exist_ok=True)
        os.chmod(bindir, 0o755)
        procs, errors = {}, []
        # Built from copies under the check's own directory: the paths that
        # line information and stacks carry into a recording name no checkout.
        srcdir = os.path.join(self.work, "src")
        for src, _ in progs.values():
            os.makedirs(os.path.dirname(os.path.join(srcdir, src)), exist_ok=True)
            shutil.copy(os.path.join(REPO, src), os.path.join(srcdir, src))
        for name, (src, extra) in progs.items():
            exe = os.path.join(bindir, name)
            procs[name] = (exe, subprocess.Popen(base + extra + ["-o", exe, os.path.join(srcdir, src)],
                                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        deadline = time.monotonic() + self.limit(240)
        for name, (exe, p) in procs.items():
            try:
                out, _ = p.communicate(timeout=max(1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                out = "nvcc timed out"
            if p.returncode == 0:
                self.progs[name] = exe
            else:
                errors.append(f"{name}: {out.strip()[-300:]}")
        return "; ".join(errors) if errors else None
