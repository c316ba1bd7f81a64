"""Group `env`: the machine, its driver, CUDA, kernel and profiling settings."""
import os
import platform
import re
import shutil

from .base import HOLDS, NEEDS_GPU, NOT_RUN, REPO
from .runner import run


class Env:
    def check_env(self):
        g = "env"
        smi = shutil.which("nvidia-smi")
        if smi:
            r = run([smi, "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"], 30)
            if r.rc == 0 and r.out.strip():
                self.item(g, "gpu", HOLDS, r.out.strip().splitlines()[0])
            else:
                self.item(g, "gpu", NOT_RUN, f"nvidia-smi failed: {r.tail(200)}")
            r = run([smi], 30)
            m = re.search(r"CUDA Version:\s*([\d.]+)", r.out or "")
            self.item(g, "cuda", HOLDS if m else NOT_RUN, f"driver's CUDA {m.group(1)}" if m else "nvidia-smi names no CUDA version")
        elif self.sim:
            self.item(g, "gpu", NEEDS_GPU, "simulated runtime: no GPU, no driver")
        else:
            self.item(g, "gpu", NOT_RUN, "nvidia-smi not found")
        try:
            with open("/proc/driver/nvidia/version") as f:
                self.item(g, "driver", HOLDS, f.readline().strip()[:160])
        except OSError:
            self.item(g, "driver", NEEDS_GPU if self.sim else NOT_RUN, "/proc/driver/nvidia/version absent")
        self.item(g, "kernel", HOLDS, f"{platform.release()} ({platform.machine()}), "
                  f"{os.cpu_count()} CPUs, {'root' if self.root else 'uid ' + str(os.geteuid())}")
        try:
            with open("/proc/sys/kernel/perf_event_paranoid") as f:
                self.item(g, "perf_event_paranoid", HOLDS, f.read().strip())
        except OSError as e:
            self.item(g, "perf_event_paranoid", NOT_RUN, str(e))
        try:
            with open("/proc/driver/nvidia/params") as f:
                params = f.read()
            m = re.search(r"RmProfilingAdminOnly:\s*(\d+)", params)
            self.item(g, "RestrictProfilingToAdminUsers", HOLDS if m else NOT_RUN,
                      f"RmProfilingAdminOnly: {m.group(1)}" if m else "not in /proc/driver/nvidia/params")
        except OSError:
            self.item(g, "RestrictProfilingToAdminUsers", NEEDS_GPU if self.sim else NOT_RUN,
                      "/proc/driver/nvidia/params absent")
        btf = os.path.exists("/sys/kernel/btf/vmlinux")
        kprobes = os.path.exists("/sys/bus/event_source/devices/kprobe")
        self.item(g, "kprobes", HOLDS if kprobes else NOT_RUN,
                  "the kprobe PMU exists" if kprobes else "no kprobe PMU (/sys/bus/event_source/devices/kprobe): "
                  "kernel built without CONFIG_KPROBES; driver entry points cannot be probed")
        self.item(g, "ebpf_prerequisites", HOLDS if btf and self.root else NOT_RUN,
                  f"BTF {'present' if btf else 'absent (/sys/kernel/btf/vmlinux)'}, "
                  f"{'root' if self.root else 'not root'}; whether the probes load: native/ebpf_stacks")
        self.facts["btf"] = btf
        self.facts["kprobes"] = kprobes
        cupti = self.cupti if self.sim else (os.environ.get("GPUPERF_CUPTI") or self.find_lib("libcupti.so.13"))
        if not self.sim:
            self.cupti = cupti
        self.item(g, "libcupti", HOLDS if cupti else NOT_RUN,
                  f"using {cupti}" if cupti else "no libcupti.so.13 in the CUDA or wheel directories")
        # How much of the driver's code the unwinder can cross with .eh_frame alone.
        cov = next((p for p in (os.path.join(REPO, "gpu/stage/bin/unwind-coverage"),
                                os.path.join(REPO, "target/release/examples/coverage"),
                                os.path.join(REPO, "target/debug/examples/coverage")) if os.path.isfile(p)), "")
        libcuda = os.path.join(self.simdir, "libcuda.so.1") if self.sim and self.simdir else self.find_lib("libcuda.so.1")
        if not os.path.isfile(cov):
            self.item(g, "libcuda_unwind_coverage", NOT_RUN, "no unwind-coverage tool staged (gpu/stage.sh builds it)")
        elif not libcuda:
            self.item(g, "libcuda_unwind_coverage", NOT_RUN, "libcuda.so.1 not found")
        else:
            r = run([cov, libcuda], 60)
            self.item(g, "libcuda_unwind_coverage", HOLDS if r.rc == 0 else NOT_RUN,
                      f"{libcuda}: {r.out.strip() or r.tail(200)}")
