#!/usr/bin/env python3
"""gpuperf's one-shot check on a machine with a GPU (or, with --sim, on the
simulated CUDA runtime). Run it through gpu/check.sh; gpu/README.md says what
each item checks and how to run it on a GPU machine.

Every item ends as one of:
  holds          checked, and it is as it should be
  falls short    checked, and it is not (the reason and the figure say how far)
  could not run  something the item needs is missing here (the reason says what)
  needs a GPU    (--sim only) the simulation cannot show this item

Writes OUT/summary.json, OUT/summary.md and OUT/check.tar.gz (the recordings,
flamegraphs and timelines, at most 16 MiB). Each step has its own time limit,
and the whole check a budget, so one step that hangs never costs the rest.
Exits 0 when nothing fell short, 1 otherwise.
"""
import argparse
import csv
import glob
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOLDS, SHORT, NOT_RUN, NEEDS_GPU = "holds", "falls short", "could not run", "needs a GPU"
GROUPS = ["env", "native", "pytorch", "pc", "overhead", "driver"]
NOBODY = 65534
TAR_LIMIT = 16 * 1024 * 1024
# Kernel time against the program's own CUDA events: "within a few percent".
EVENT_TOLERANCE = 0.05


class Result:
    """One finished command: exit status, output, time, and whether it was cut."""

    def __init__(self, rc, out, err, seconds, timed_out):
        self.rc, self.out, self.err, self.seconds, self.timed_out = rc, out, err, seconds, timed_out

    def tail(self, n=600):
        text = (self.err or "") + (self.out or "")
        return text[-n:].strip()


def run(cmd, timeout, cwd=None, env=None, user=None, peak_of_pid=False):
    """Runs cmd in its own process group, killed with the group at `timeout`.
    With peak_of_pid, also follows the peak RSS (VmHWM) of the process itself."""
    t0 = time.monotonic()
    kw = {}
    if user is not None:
        kw.update(user=user, group=user, extra_groups=[])
    try:
        p = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, errors="replace", start_new_session=True, **kw)
    except OSError as e:
        return Result(None, "", f"failed to start `{cmd[0]}`: {e}", 0.0, False)
    peak = [0]
    if peak_of_pid:
        def follow():
            while p.poll() is None:
                try:
                    with open(f"/proc/{p.pid}/status") as f:
                        for line in f:
                            if line.startswith("VmHWM:"):
                                peak[0] = max(peak[0], int(line.split()[1]))
                except OSError:
                    return
                time.sleep(0.02)
        threading.Thread(target=follow, daemon=True).start()
    timed_out = False
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(p.pid, sig)
            except ProcessLookupError:
                break
            try:
                p.wait(timeout=3)
                break
            except subprocess.TimeoutExpired:
                pass
        out, err = p.communicate()
    r = Result(p.returncode, out, err, time.monotonic() - t0, timed_out)
    r.peak_kib = peak[0]
    return r


def csv_rows(text):
    """The rows of a CSV table inside tool output (ncu prints lines before its
    header), as dicts; [] when there is none."""
    lines = (text or "").splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith('"')), None)
    if start is None:
        return []
    return list(csv.DictReader(lines[start:]))


class Timeline:
    """The parts of a Chrome-trace timeline written by `gpuperf record -c` that
    the check reads: GPU work with its stack, API calls, and thread names."""

    def __init__(self, path):
        with open(path) as f:
            events = json.load(f)["traceEvents"]
        self.gpu = [e for e in events if e.get("cat") in ("kernel", "memcpy", "memset")]
        self.api = {}
        self.threads = {}
        for e in events:
            if e.get("cat") == "cuda_api":
                self.api[e["args"].get("correlation_id")] = e
            elif e.get("ph") == "M" and e.get("name") == "thread_name":
                self.threads[(e["pid"], e["tid"])] = e["args"]["name"]

    def kernels(self):
        return [e for e in self.gpu if e["cat"] == "kernel"]

    def count(self, cat):
        return sum(1 for e in self.gpu if e["cat"] == cat)

    def stack(self, e):
        """A GPU record's CPU stack: its own (a replayed graph node's), else
        the one on its call's API slice (gpuperf writes a launch's stack once)."""
        s = e.get("args", {}).get("stack")
        if s is None:
            call = self.api.get(e.get("args", {}).get("correlation_id"))
            s = call.get("args", {}).get("stack") if call else None
        return s if isinstance(s, str) else None

    def reaches_main(self, e):
        return re.search(r"(^|;)main(;|$)", self.stack(e) or "") is not None


class Check:
    def __init__(self, args):
        self.out = os.path.abspath(args.out)
        self.sim = args.sim
        self.only = set(args.only.split(",")) if args.only else set(GROUPS)
        self.budget = args.budget
        self.strict = args.strict
        self.t0 = time.monotonic()
        self.items = []
        self.root = os.geteuid() == 0
        os.makedirs(self.out, exist_ok=True)
        self.work = tempfile.mkdtemp(prefix="gpuperf-check-")
        os.chmod(self.work, 0o755)
        self.runs = os.path.join(self.work, "runs")
        os.makedirs(self.runs)
        os.chmod(self.runs, 0o777)
        self.fault = os.environ.get("GPUPERF_CHECK_FAULT")
        self.gpuperf = None
        self.cupti = None
        self.progs = {}
        self.nvcc_base = None
        self.simdir = None
        self.torch_python = None
        self.facts = {}

    # ---- bookkeeping ----
    def left(self):
        return self.budget - (time.monotonic() - self.t0)

    def item(self, group, name, status, detail, figure=None):
        self.items.append({"group": group, "item": name, "status": status, "detail": detail,
                           "figure": figure})
        mark = {HOLDS: "ok", SHORT: "SHORT", NOT_RUN: "not run", NEEDS_GPU: "needs GPU"}[status]
        print(f"check: [{mark}] {group}/{name}: {detail}", file=sys.stderr, flush=True)

    def limit(self, seconds):
        """A step's time limit, never past the check's budget. On the simulation
        (CI, where other work may keep every core busy) each limit is tripled:
        the limits only catch hangs, and a slow step must not read as one."""
        return max(1.0, min(seconds * (3 if self.sim else 1), self.left() - 5))

    def out_of_time(self, group, names):
        if self.left() > 15:
            return False
        for n in names:
            self.item(group, n, NOT_RUN, f"the check's time budget ({self.budget} s) ran out before it")
        return True

    # ---- set-up ----
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
        self.torch_python = self.find_torch_python() if "pytorch" in self.only or "overhead" in self.only else None
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

    # ---- recording ----
    def run_dir(self, name):
        """A run's own directory, writable by the user it may run as."""
        d = os.path.join(self.runs, name)
        os.makedirs(d, exist_ok=True)
        os.chmod(d, 0o777)
        return d

    def record(self, name, cmd, flags=(), user=None, env=None, timeout=60, cupti=True, timeline=True):
        """`gpuperf record` of cmd into its own run directory; returns (Result, Timeline or None, dir)."""
        d = self.run_dir(name)
        argv = [self.gpuperf, "record", "--raw-dir", "raw", "-o", "flame.svg", "-m", "merged.folded"]
        if timeline:
            argv += ["-c", "timeline.json"]
        if cupti and self.cupti:
            argv += ["--cupti", self.cupti]
        argv += list(flags) + ["--"] + cmd
        e = dict(os.environ)
        if user is not None:
            home = os.path.join(d, "home")
            os.makedirs(home, exist_ok=True)
            os.chmod(home, 0o777)
            e["HOME"] = home
        e.update(env or {})
        r = run(argv, self.limit(timeout), cwd=d, env=e, user=user, peak_of_pid=True)
        with open(os.path.join(d, "stdout.txt"), "w") as f:
            f.write(r.out or "")
        with open(os.path.join(d, "stderr.txt"), "w") as f:
            f.write(r.err or "")
        tl = None
        path = os.path.join(d, "timeline.json")
        if os.path.isfile(path):
            try:
                tl = Timeline(path)
            except (ValueError, KeyError) as e2:
                r.err += f"\ncheck: timeline.json unreadable: {e2}"
        return r, tl, d

    @staticmethod
    def matched(r):
        """(matched, kernels) from record's summary line, or None."""
        m = re.search(r"matched (\d+) of (\d+) kernels", r.err or "")
        return (int(m.group(1)), int(m.group(2))) if m else None

    @staticmethod
    def app_counts(r):
        m = re.search(r"check_app: kernels (\d+) copies (\d+) memsets (\d+) graph_launches (\d+)", r.out or "")
        return tuple(int(x) for x in m.groups()) if m else None

    def recording_faults(self, r, tl, rc_expected=0):
        """What is wrong with a recording whatever the program did: the reasons, or []."""
        bad = []
        if r.timed_out:
            bad.append(f"cut at its time limit ({r.seconds:.0f} s)")
        if r.rc != rc_expected and not r.timed_out:
            bad.append(f"exit status {r.rc}, expected {rc_expected}")
        if "not closed" in (r.err or ""):
            bad.append("the recording was not closed")
        m = self.matched(r)
        if m is None and "no kernels in the GPU trace" in (r.err or ""):
            pass  # a program of copies and memsets only
        elif m is None:
            bad.append("no match summary on stderr")
        elif m[0] != m[1]:
            bad.append(f"matched {m[0]} of {m[1]} kernels")
        if tl is None:
            bad.append("no readable timeline")
        else:
            nostack = [e for e in tl.gpu if tl.stack(e) is None]
            if nostack:
                bad.append(f"{len(nostack)} of {len(tl.gpu)} GPU records without a CPU stack "
                           f"(first: {nostack[0]['name'][:80]})")
        return bad

    # ---- env ----
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

    # ---- native ----
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
        for name, (src, extra) in progs.items():
            exe = os.path.join(bindir, name)
            procs[name] = (exe, subprocess.Popen(base + extra + ["-o", exe, os.path.join(REPO, src)],
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

    def check_native(self):
        g = "native"
        names = ["build", "cupti_search", "timed_root", "gpu_time_vs_events", "stacks_reach_main",
                 "timed_rootless", "copies", "graph", "two_processes", "ebpf_stacks", "exit_from_thread",
                 "sigint", "never_synchronizes", "samples"]
        if not self.gpuperf:
            for n in names:
                self.item(g, n, NOT_RUN, "no gpuperf binary (gpu/stage.sh, or cargo build --release)")
            return
        err = self.build_programs()
        if "check_app" not in self.progs:
            for n in names:
                self.item(g, n, NOT_RUN, f"programs not built: {err}")
            return
        self.item(g, "build", SHORT if err else HOLDS, err or f"built {', '.join(sorted(self.progs))} (sm_90, -O2)")
        app = self.progs["check_app"]

        # gpuperf's own search for libcupti, as a user without --cupti gets it.
        if self.sim:
            self.item(g, "cupti_search", NEEDS_GPU, "the simulation's libcupti is always named")
        else:
            r, tl, d = self.record("cupti_search", [app, "timed", "2"], cupti=False, timeout=60)
            bad = self.recording_faults(r, tl)
            found = ""
            for log in glob.glob(os.path.join(d, "raw", "*.log")):
                with open(log, errors="replace") as f:
                    found = next((ln.strip() for ln in f if "libcupti" in ln), found)
            self.item(g, "cupti_search", SHORT if bad else HOLDS,
                      "; ".join(bad + [found]) if bad else f"found a libcupti by itself: {found}")

        n = 20
        r, tl, _ = self.record("timed_root", [app, "timed", str(n)], timeout=60)
        self.judge_counts(g, "timed_root", r, tl, expect_kernels=2 * n)
        if tl and not r.timed_out:
            self.judge_event_times(g, r, tl)
            self.judge_main(g, "stacks_reach_main", tl, "-O2 without frame pointers")
        else:
            self.item(g, "gpu_time_vs_events", NOT_RUN, "the timed recording failed")
            self.item(g, "stacks_reach_main", NOT_RUN, "the timed recording failed")

        if self.root:
            r, tl, _ = self.record("timed_rootless", [app, "timed", str(n)], user=NOBODY, timeout=60)
            self.judge_counts(g, "timed_rootless", r, tl, expect_kernels=2 * n, note="as uid 65534")
        else:
            r, tl, _ = self.record("timed_rootless", [app, "timed", str(n)], timeout=60)
            self.judge_counts(g, "timed_rootless", r, tl, expect_kernels=2 * n, note=f"as uid {os.geteuid()}")

        r, tl, _ = self.record("copies", [app, "copies", "5"], timeout=60)
        self.judge_counts(g, "copies", r, tl, expect_kernels=0)

        r, tl, _ = self.record("graph", [app, "graph", "10"], timeout=60)
        self.judge_counts(g, "graph", r, tl, expect_kernels=30, graph=True)

        sh = f"'{app}' timed 5 & '{app}' timed 5; wait"
        r, tl, d = self.record("two_processes", ["sh", "-c", sh], timeout=60)
        bad = self.recording_faults(r, tl)
        traces = glob.glob(os.path.join(d, "raw", "*.gputrace"))
        k = len(tl.kernels()) if tl else 0
        if len(traces) != 2:
            bad.append(f"{len(traces)} GPU traces, expected 2")
        if k != 20:
            bad.append(f"{k} kernels, expected 20")
        self.item(g, "two_processes", SHORT if bad else HOLDS, "; ".join(bad) or "2 processes, 20 of 20 kernels matched")

        self.check_ebpf(g, app)
        self.check_exit_thread(g, app)
        self.check_sigint(g)
        r, tl, _ = self.record("never_synchronizes", [app, "nosync", "50"], timeout=60)
        self.judge_counts(g, "never_synchronizes", r, tl, expect_kernels=50)

        done, bad = [], []
        for s, args in (("mock_llm", []), ("transformer", ["--steps", "8"])):
            if s not in self.progs:
                bad.append(f"{s} not built")
                continue
            r, tl, _ = self.record(s, [self.progs[s]] + args, timeout=90)
            b = self.recording_faults(r, tl)
            bad += [f"{s}: {x}" for x in b]
            if not b:
                done.append(f"{s}: {len(tl.kernels())} kernels matched")
        self.item(g, "samples", SHORT if bad else HOLDS, "; ".join(bad) or "; ".join(done))

    def judge_counts(self, g, name, r, tl, expect_kernels, graph=False, note=""):
        bad = self.recording_faults(r, tl)
        counts = self.app_counts(r)
        if counts is None:
            bad.append("the program printed no counts")
        elif tl is not None:
            k, c, m, _ = counts
            got = (len(tl.kernels()), tl.count("memcpy"), tl.count("memset"))
            if got != (k, c, m):
                bad.append(f"recorded kernels/copies/memsets {got[0]}/{got[1]}/{got[2]}, "
                           f"the program made {k}/{c}/{m}")
            if k != expect_kernels:
                bad.append(f"the program reports {k} kernels, the check expected {expect_kernels}")
        if graph and tl is not None:
            for e in tl.kernels():
                s = tl.stack(e) or ""
                want = ["replay_graph", "cudaGraphLaunch", "[graph node captured at]", "capture_graph"]
                miss = [w for w in want if w not in s]
                if miss:
                    bad.append(f"a graph kernel's stack lacks {', '.join(miss)}: {s[-200:]}")
                    break
        fig = None
        if counts:
            fig = {"kernels": counts[0], "copies": counts[1], "memsets": counts[2]}
        detail = "; ".join(bad) if bad else (
            f"{counts[0]} kernels, {counts[1]} copies, {counts[2]} memsets: every one recorded, "
            f"matched and with a CPU stack" + (" (replay and capture stacks)" if graph else "") +
            (f", {note}" if note else ""))
        self.item(g, name, SHORT if bad else HOLDS, detail, fig)

    def judge_event_times(self, g, r, tl):
        """Each kernel's median GPU time against the median of the CUDA events
        around it: the first pair of events also holds the lazy loading of the
        kernel's module, so medians, not totals, are compared (totals shown)."""
        ev = {m.group(1): (float(m.group(2)), float(m.group(3))) for m in
              re.finditer(r"check_app: event (\w+) count \d+ total_us ([\d.]+) median_us ([\d.]+)", r.out or "")}
        # The cost of the event pair itself (two events with nothing between),
        # taken from each bracket: on an H200 about 3 us, 6 % of a 50 us kernel.
        m = re.search(r"check_app: event empty_pair count \d+ median_us ([\d.]+)", r.out or "")
        pair = float(m.group(1)) if m else 0.0
        gpu = {}
        for e in tl.kernels():
            name = e["name"].split("(")[0].split()[-1]
            gpu.setdefault(name, []).append(float(e["dur"]))
        if not ev:
            self.item(g, "gpu_time_vs_events", SHORT, "the program printed no event times")
            return
        worst, parts, fig = 0.0, [], {}
        for k, (total, bracket) in ev.items():
            durs = sorted(gpu.get(k, []))
            got = durs[len(durs) // 2] if durs else 0.0
            us = bracket - pair
            rel = abs(got - us) / us if us > 0 else float("inf")
            worst = max(worst, rel)
            parts.append(f"{k}: median gpuperf {got:.2f} us, CUDA events {us:.2f} us ({rel * 100:+.2f}%; "
                         f"{bracket:.2f} us between the events less {pair:.2f} us for an empty pair; "
                         f"totals {sum(durs):.1f} and {total:.1f} us)")
            fig[k] = {"gpuperf_median_us": round(got, 3), "events_median_us": round(us, 3),
                      "bracket_median_us": bracket, "empty_pair_median_us": pair, "rel": round(rel, 5),
                      "gpuperf_total_us": round(sum(durs), 3), "events_total_us": total}
        self.item(g, "gpu_time_vs_events", HOLDS if worst <= EVENT_TOLERANCE else SHORT,
                  "; ".join(parts) + f" (tolerance {EVENT_TOLERANCE * 100:.0f}%)" +
                  (" [simulated times]" if self.sim else ""), fig)

    def judge_main(self, g, name, tl, what):
        ks = tl.kernels()
        reach = [e for e in ks if tl.reaches_main(e)]
        fig = {"kernels": len(ks), "reach_main": len(reach)}
        ok = ks and len(reach) == len(ks)
        first_bad = next((tl.stack(e) for e in ks if e not in reach), None)
        self.item(g, name, HOLDS if ok else SHORT,
                  f"{len(reach)} of {len(ks)} kernel stacks reach main ({what})" +
                  ("" if ok else f"; first that does not: {(first_bad or 'none')[-240:]}"), fig)

    def check_ebpf(self, g, app):
        if not self.root:
            self.item(g, "ebpf_stacks", NOT_RUN, "not root: eBPF needs root")
            return
        r, tl, _ = self.record("ebpf_stacks", [app, "timed", "10"], flags=["--stacks", "ebpf"], timeout=90)
        if r.rc != 0 and re.search(r"(?i)bpf|permission|btf|attach", r.err or ""):
            self.item(g, "ebpf_stacks", NOT_RUN, f"eBPF did not load: {r.tail(300)}")
            return
        bad = self.recording_faults(r, tl)
        if tl is not None:
            ks = tl.kernels()
            reach = [e for e in ks if tl.reaches_main(e)]
            if len(ks) != 20:
                bad.append(f"{len(ks)} kernels, expected 20")
            if len(reach) != len(ks):
                bad.append(f"{len(reach)} of {len(ks)} stacks reach main")
        self.item(g, "ebpf_stacks", SHORT if bad else HOLDS,
                  "; ".join(bad) or "20 of 20 kernels matched with eBPF stacks that reach main")

    def check_exit_thread(self, g, app):
        plain = run([app, "exit-thread", "20"], self.limit(30))
        r, tl, _ = self.record("exit_from_thread", [app, "exit-thread", "20"], timeout=60)
        bad = []
        if plain.rc != 7:
            bad.append(f"without gpuperf the program exited {plain.rc}, expected 7")
        bad += self.recording_faults(r, tl, rc_expected=7)
        counts = self.app_counts(r)
        if tl is not None and counts and len(tl.kernels()) < counts[0]:
            bad.append(f"{len(tl.kernels())} kernels recorded, the program synchronized {counts[0]} before exit")
        self.item(g, "exit_from_thread", SHORT if bad else HOLDS, "; ".join(bad) or
                  f"exit status 7 kept; {len(tl.kernels())} kernels recorded and matched "
                  f"({counts[0]} before the exit thread started, the rest while it ran)")

    def check_sigint(self, g):
        app = self.progs.get("sim_app")
        if not app:
            self.item(g, "sigint", NOT_RUN, "sim_app not built")
            return
        r, tl, _ = self.record("sigint", [app, "until-signal"], flags=["--duration", "1"], timeout=60)
        bad = self.recording_faults(r, tl, rc_expected=130)
        printed = [int(x) for x in re.findall(r"(\d+)", r.out or "")]
        n = max(printed) if printed else 0
        k = len(tl.kernels()) if tl else 0
        if tl is not None and k < n:
            bad.append(f"{k} kernels recorded, the program saw {n} launches return")
        self.item(g, "sigint", SHORT if bad else HOLDS, "; ".join(bad) or
                  f"stopped by SIGINT (status 130 as without gpuperf); {k} kernels recorded and matched, "
                  f"the program saw {n} launches return", {"kernels": k, "launches_returned": n})

    # ---- PyTorch ----
    def check_pytorch(self):
        g = "pytorch"
        names = ["eager", "train", "compile", "cudagraphs", "torch_profiler"]
        if not self.gpuperf:
            for n in names:
                self.item(g, n, NOT_RUN, "no gpuperf binary")
            return
        if not self.torch_python:
            for n in names:
                self.item(g, n, NOT_RUN, "no Python with PyTorch (GPUPERF_TORCH_PYTHON, python3)")
            return
        if self.sim and not self.simdir:
            for n in names:
                self.item(g, n, NOT_RUN, "the simulation did not build")
            return
        script = os.path.join(self.work, "gpt2_small.py")
        shutil.copy(os.path.join(REPO, "samples/pytorch/gpt2_small.py"), script)
        os.chmod(script, 0o644)
        small = ["--steps", "2", "--warmup", "1", "--batch", "2", "--seq", "128"]
        user = NOBODY if self.root else None
        py = self.torch_python

        def rec(name, extra, env=None, timeout=150):
            d = os.path.join(self.runs, name)
            cache = {"TORCHINDUCTOR_CACHE_DIR": os.path.join(d, "inductor"), "TRITON_CACHE_DIR": os.path.join(d, "triton")}
            cache.update(env or {})
            return self.record(name, self.wrap([py, script] + small + extra), user=user, env=cache,
                               timeout=timeout, timeline=True)

        for name, extra, env in (("eager", ["--mode", "eager"], None),
                                 ("train", ["--mode", "eager", "--train"], None),
                                 ("compile", ["--mode", "compile"], None),
                                 ("cudagraphs", ["--mode", "compile"], {"TORCHINDUCTOR_CUDAGRAPHS": "1"})):
            if self.out_of_time(g, [name]):
                continue
            r, tl, _ = rec(name, extra, env, timeout=240 if name in ("compile", "cudagraphs") else 150)
            bad = self.recording_faults(r, tl)
            fig, detail = None, ""
            if tl is not None:
                ks = tl.kernels()
                under = [e for e in ks if "gpt2_small.py" in (tl.stack(e) or "")]
                fig = {"kernels": len(ks), "under_script": len(under)}
                detail = f"{len(ks)} kernels, {len(under)} under the script's lines"
                rest = [e for e in ks if e not in under]
                if name == "train":
                    auto = [e for e in rest if "autograd" in self.thread_of(tl, e)]
                    fig["autograd_thread"] = len(auto)
                    detail += f", {len(auto)} on autograd's thread"
                    if len(under) + len(auto) != len(ks):
                        bad.append(f"{len(ks) - len(under) - len(auto)} kernels neither under the script "
                                   f"nor on autograd's thread")
                elif rest:
                    bad.append(f"{len(rest)} kernels not under the script's lines (first: {rest[0]['name'][:80]})")
                if name == "compile":
                    tri = [e for e in ks if e["name"].startswith("triton")]
                    detail += f", {len(tri)} Triton kernels"
                    if not tri:
                        bad.append("no Triton kernel recorded")
                if name == "cudagraphs":
                    replay = [e for e in ks if "cudaGraphLaunch" in (tl.stack(e) or "")]
                    detail += f", {len(replay)} replayed from CUDA graphs"
                    if not replay:
                        bad.append("no kernel charged to a CUDA graph launch")
            self.item(g, name, SHORT if bad else HOLDS, "; ".join(bad) or detail + ", all matched (rootless)", fig)
        if not self.out_of_time(g, ["torch_profiler"]):
            self.check_torch_profiler(g, py, script, small, user)
        if not self.out_of_time(g, ["torch_profiler_inside_record"]):
            self.check_profiler_inside_record(g, py, script, small, user)

    @staticmethod
    def thread_of(tl, e):
        """The name of the thread whose API call launched GPU record e (one process)."""
        api = tl.api.get(e.get("args", {}).get("correlation_id"))
        return tl.threads.get((api["pid"], api["tid"]), "") if api else ""

    def check_torch_profiler(self, g, py, script, small, user):
        d = self.run_dir("torch_profiler")
        trace = os.path.join(d, "kineto.pt.trace.json")
        args = small[:]
        args[args.index("--warmup") + 1] = "0"
        r = run(self.wrap([py, script, "--mode", "eager"] + args +
                          ["--profile-kineto", os.path.join(d, "kineto.json"), "--profile-trace", trace]),
                self.limit(150), cwd=d)
        if r.rc != 0 or not os.path.isfile(trace):
            self.item(g, "torch_profiler", SHORT, f"the script under torch.profiler failed: {r.tail(300)}")
            return
        m = run([self.gpuperf, "merge", trace, "-c", os.path.join(d, "kineto.timeline.json"),
                 "-o", os.path.join(d, "kineto.svg")], self.limit(60), cwd=d)
        r2, tl2, _ = self.record("torch_profiler_gpuperf", self.wrap([py, script, "--mode", "eager"] + args),
                                 user=user, timeout=150)
        bad = []
        if m.rc != 0:
            bad.append(f"gpuperf merge of the profiler's trace failed: {m.tail(300)}")
        bad += self.recording_faults(r2, tl2)
        if not bad:
            tk = Timeline(os.path.join(d, "kineto.timeline.json"))
            a = sorted(e["name"] for e in tk.kernels())
            b = sorted(e["name"] for e in tl2.kernels())
            if len(a) != len(b):
                bad.append(f"torch.profiler saw {len(a)} kernels, gpuperf {len(b)}")
            elif a != b:
                diff = sorted(set(a) ^ set(b))
                bad.append(f"names differ: {len(diff)} names only on one side (first: {diff[0][:100]})")
        self.item(g, "torch_profiler", SHORT if bad else HOLDS, "; ".join(bad) or
                  f"torch.profiler's trace read by gpuperf merge: the same {len(tl2.kernels())} kernels, "
                  f"same names, as gpuperf's own recording")

    def check_profiler_inside_record(self, g, py, script, small, user):
        """A script with a torch.profiler window, recorded by gpuperf: two CUPTI
        clients in one process. Both must keep their records, or gpuperf must say
        what was lost and from when."""
        name = "torch_profiler_inside_record"
        kj = os.path.join(self.runs, name, "kineto.json")
        r, tl, _ = self.record(name, self.wrap([py, script, "--mode", "eager"] + small +
                                               ["--profile-kineto", kj]), user=user, timeout=150)
        m = re.search(r"wrote \S+: (\d+) kernels, (\d+) launches", r.err or "")
        kineto = int(m.group(2)) if m else None
        bad = self.recording_faults(r, tl)
        k = len(tl.kernels()) if tl else 0
        said = re.search(r"(?im)^.*(torch\.profiler|another CUPTI|second CUPTI|took over).*$", r.err or "")
        if kineto is None:
            bad.append("the script wrote no torch.profiler summary")
        elif kineto == 0 and not said:
            bad.append("torch.profiler saw no kernel inside gpuperf record, and gpuperf said nothing of it")
        fig = {"gpuperf_kernels": k, "torch_profiler_launches": kineto}
        detail = (f"gpuperf recorded {k} kernels; torch.profiler's window saw {kineto} launches"
                  + (f"; gpuperf said: {said.group(0).strip()[:200]}" if said else ""))
        if self.sim:
            # The simulated CUPTI refuses the second subscriber as CUPTI 13.0
            # documents; what a real libcupti and driver do with Kineto's
            # later activity calls only a GPU shows.
            self.item(g, name, NEEDS_GPU, detail + ("; " + "; ".join(bad) if bad else ""), fig)
        else:
            self.item(g, name, SHORT if bad else HOLDS, "; ".join(bad + [detail]) if bad else detail, fig)

    # ---- overhead ----
    # ---- PC sampling (issue: inside the kernel) ----
    def find_ncu(self):
        for c in [os.environ.get("NCU"), shutil.which("ncu"), "/usr/local/cuda/bin/ncu"] + \
                sorted(glob.glob("/opt/nvidia/nsight-compute/*/ncu"), reverse=True):
            if c and os.path.isfile(c) and os.access(c, os.X_OK):
                return c
        return None

    @staticmethod
    def marked_line(mark):
        """The line of gpu/progs/pc_hot.cu that holds `// MARK:`."""
        with open(os.path.join(REPO, "gpu/progs/pc_hot.cu")) as f:
            return next(i for i, ln in enumerate(f, 1) if f"// {mark}:" in ln)

    @staticmethod
    def stall_name(reason):
        return reason.removeprefix("smsp__pcsamp_warps_issue_stalled_")

    def pc_report(self, d):
        """The `chase` kernel's entry in `gpuperf report --format json`'s pc_samples, or None."""
        r = run([self.gpuperf, "report", "raw", "--format", "json"], self.limit(60), cwd=d)
        try:
            doc = json.loads(r.out or "")
        except ValueError:
            return None, f"report --format json unreadable: {r.tail(200)}"
        k = next((k for k in doc.get("pc_samples", {}).get("kernels", []) if "chase" in k["kernel"]), None)
        return k, (None if k else f"no PC samples for `chase` in the report: {json.dumps(doc.get('pc_samples'))[:300]}")

    def check_pc(self):
        g = "pc"
        names = ["pc_hot_line", "pc_vs_ncu", "pc_modes", "pc_rootless", "pc_overhead"]
        app = self.progs.get("pc_hot")
        if not self.gpuperf or not app:
            for n in names:
                self.item(g, n, NOT_RUN, "no gpuperf binary" if not self.gpuperf else "pc_hot not built")
            return
        hot, warm = self.marked_line("HOT"), self.marked_line("WARM")
        env = {}
        if self.sim:
            # The simulation's samples: a table in the shape a -lineinfo build of
            # pc_hot gives on a GPU (sim/README.md), so the steps are checked.
            src = os.path.join(REPO, "gpu/progs/pc_hot.cu")
            env["GPUSIM_PC_SAMPLES"] = f"_Z5chasePKjPji@{src}=0x40:{hot}:long_scoreboard:9,0x80:{warm}:selected:1"
        label = " [simulated samples]" if self.sim else ""
        plain = run([app, "5"], self.limit(60), env=dict(os.environ, **env))
        flags = ["--pc-sampling", "--pc-folded", "pc.folded", "--pc-svg", "pc.svg"]
        r, tl, d = self.record("pc_hot_line", [app, "5"], flags=flags, env=env, timeout=120)
        bad = self.recording_faults(r, tl)
        if plain.rc != 0:
            bad.append(f"without gpuperf pc_hot exited {plain.rc}: {plain.tail(200)}")
        elif (r.out or "").strip() != (plain.out or "").strip():
            bad.append(f"its output changed: {(r.out or '').strip()!r}, without gpuperf {(plain.out or '').strip()!r}")
        k, why = self.pc_report(d)
        fig = None
        if k is None:
            bad.append(why)
        else:
            top_line, top_stall = k["lines"][0] if k["lines"] else None, k["stalls"][0] if k["stalls"] else None
            share = top_line["samples"] / k["samples"] if top_line and k["samples"] else 0.0
            fig = {"samples": k["samples"], "top_line": top_line, "top_stall": top_stall, "top_line_share": round(share, 4)}
            if not top_line or not top_line["line"].endswith(f"pc_hot.cu:{hot}"):
                bad.append(f"chase's hottest line is {top_line and top_line['line']}, not pc_hot.cu:{hot} (HOT)")
            elif share < 0.5:
                bad.append(f"the HOT line holds {share:.0%} of chase's samples")
        folded = os.path.join(d, "pc.folded")
        stacks = open(folded).read().splitlines() if os.path.isfile(folded) else []
        if not stacks:
            bad.append("no pc.folded")
        elif not all(re.search(r"(^|;)main;.*launch_chase;.*\[GPU_Kernel\]chase;\[GPU_PC\]", s) for s in stacks):
            bad.append(f"a PC-sample stack does not run main → launch_chase → chase: {stacks[0][:200]}")
        if bad:
            self.item(g, "pc_hot_line", SHORT, "; ".join(bad), fig)
        else:
            self.item(g, "pc_hot_line", NEEDS_GPU if self.sim else HOLDS,
                      f"chase: {k['samples']} samples, {fig['top_line_share']:.1%} on pc_hot.cu:{hot} (HOT), "
                      f"top stall {self.stall_name(fig['top_stall']['reason'])}, above main → workload → "
                      f"launch_chase; output and exit status unchanged" + label, fig)
        self.check_pc_ncu(g, app, hot, k)
        self.check_pc_modes(g, app, hot, env, label)
        self.check_pc_rootless(g, app, flags)
        self.check_pc_overhead(g, app, env, label)

    def check_pc_ncu(self, g, app, hot, k):
        if self.sim:
            self.item(g, "pc_vs_ncu", NEEDS_GPU, "Nsight Compute samples a real GPU")
            return
        ncu = self.find_ncu()
        if not ncu:
            self.item(g, "pc_vs_ncu", NOT_RUN, "no ncu (PATH, /usr/local/cuda/bin, /opt/nvidia/nsight-compute)")
            return
        # ncu runs even without gpuperf's samples: its figures (and raw CSVs in
        # the tarball) are then shown alone.
        d = self.run_dir("pc_vs_ncu")
        # The kernel's sample counts per stall reason, from the same PC-sampling metrics.
        # Clocks left as they are: the same conditions gpuperf's samples had.
        m = run([ncu, "--clock-control", "none", "--csv", "--metrics", "regex:^smsp__pcsamp_warps_issue_stalled_", "-k", "regex:chase",
                 "-c", "1", app, "1"], self.limit(120), cwd=d)
        with open(os.path.join(d, "ncu-metrics.csv"), "w") as f:
            f.write((m.out or "") + (m.err or ""))
        stalls = {}
        for row in csv_rows(m.out):
            name, value = row.get("Metric Name", ""), row.get("Metric Value", "")
            if name.startswith("smsp__pcsamp_warps_issue_stalled_") and not name.endswith("_not_issued"):
                try:
                    stalls[self.stall_name(name)] = stalls.get(self.stall_name(name), 0) + float(value.replace(",", ""))
                except ValueError:
                    pass
        # The kernel's samples per CUDA source line: the source page of a SourceCounters report.
        rep = os.path.join(d, "chase")
        s = run([ncu, "--clock-control", "none", "--section", "SourceCounters", "--import-source", "yes", "-k", "regex:chase", "-c", "1",
                 "-f", "-o", rep, app, "1"], self.limit(120), cwd=d)
        src = run([ncu, "-i", rep + ".ncu-rep", "--page", "source", "--csv", "--print-source", "cuda"],
                  self.limit(60), cwd=d) if s.rc == 0 else s
        with open(os.path.join(d, "ncu-source.csv"), "w") as f:
            f.write((src.out or "") + (src.err or ""))
        ncu_line, ncu_lines = None, {}
        for i, row in enumerate(csv_rows(src.out), 1):
            col = next((c for c in row if c.startswith("Warp Stall Sampling (All")), None)
            if col:
                try:
                    n = float(row[col].replace(",", "") or 0)
                except ValueError:
                    continue
                line = int(row.get("#") or row.get("Line") or i)
                ncu_lines[line] = ncu_lines.get(line, 0) + n
        if ncu_lines:
            ncu_line = max(ncu_lines, key=ncu_lines.get)
        ours = self.stall_name(k["stalls"][0]["reason"]) if k and k["stalls"] else None
        theirs = max(stalls, key=stalls.get) if stalls else None
        fig = {"gpuperf_top_stall": ours, "ncu_top_stall": theirs, "ncu_stalls": stalls,
               "gpuperf_top_line": k["lines"][0]["line"] if k and k["lines"] else None, "ncu_top_line": ncu_line}
        if not stalls and not ncu_lines:
            self.item(g, "pc_vs_ncu", NOT_RUN, f"ncu gave no PC-sampling figures: {m.tail(200)} | {src.tail(200)}", fig)
            return
        total = sum(stalls.values())
        seen = (f"ncu: top stall {theirs} ({stalls.get(theirs, 0) / total:.0%} of {total:.0f})" if stalls
                else "ncu's metrics unreadable") + \
            (f", hottest line {ncu_line}" if ncu_lines else ", source page unreadable")
        if k is None:
            self.item(g, "pc_vs_ncu", NOT_RUN, f"gpuperf's own PC samples are missing (pc_hot_line); {seen}", fig)
            return
        bad = []
        if stalls and ours != theirs:
            bad.append(f"top stall reason: gpuperf {ours}, ncu {theirs}")
        if ncu_lines and ncu_line != hot:
            bad.append(f"ncu's hottest line is {ncu_line}, gpuperf's pc_hot.cu:{hot}")
        self.item(g, "pc_vs_ncu", SHORT if bad else HOLDS,
                  "; ".join(bad + [seen]) if bad else f"gpuperf and ncu agree: {seen}", fig)

    def check_pc_modes(self, g, app, hot, env, label):
        """The other ways of sampling: every launch (no start/stop control) and
        continuous mode (kernels not serialized, samples charged to the kernel
        only): chase's samples and its hottest line in each."""
        bad, seen, fig = [], [], {}
        for name, flags in (("pc_window_all", ["--pc-sampling-window", "all"]),
                            ("pc_continuous", ["--pc-sampling-mode", "continuous"])):
            r, tl, d = self.record(name, [app, "5"], flags=["--pc-sampling"] + flags, env=env, timeout=120)
            b = self.recording_faults(r, tl)
            k, why = self.pc_report(d)
            if k is None:
                b.append(why)
            else:
                top = k["lines"][0]["line"] if k["lines"] else None
                fig[name] = {"samples": k["samples"], "top_line": top}
                seen.append(f"{' '.join(flags[1:])}: {k['samples']} samples, hottest {top}")
                if not top or not top.endswith(f"pc_hot.cu:{hot}"):
                    b.append(f"hottest line {top}, not pc_hot.cu:{hot} (HOT)")
            bad += [f"{name}: {x}" for x in b]
        status = SHORT if bad else (NEEDS_GPU if self.sim else HOLDS)
        self.item(g, "pc_modes", status, "; ".join(bad + seen) + label, fig)

    def check_pc_rootless(self, g, app, flags):
        """PC sampling is a profiling feature: as a user, unless the driver allows
        it, one line says why and what to do, and everything else is recorded."""
        restricted = None
        try:
            with open("/proc/driver/nvidia/params") as f:
                # The driver's params file names the module option RmProfilingAdminOnly.
                m = re.search(r"(?:RmProfilingAdminOnly|RestrictProfilingToAdminUsers):\s*(\d+)", f.read())
                restricted = m and m.group(1) != "0"
        except OSError:
            pass
        env = {}
        if self.sim:
            env["GPUSIM_PC_SAMPLING_PRIVILEGE"] = "0"
            restricted = True
        user = NOBODY if self.root else None
        if user is None and not self.sim:
            self.item(g, "pc_rootless", NOT_RUN, "not root: cannot run as another user")
            return
        r, tl, _ = self.record("pc_rootless", [app, "3"], flags=flags, user=user, env=env, timeout=90)
        bad = self.recording_faults(r, tl)
        refused = "INSUFFICIENT_PRIVILEGES" in (r.err or "")
        what = "refused with one line" if refused else "sampled"
        if restricted and not refused:
            bad.append("profiling is restricted to admin users, but gpuperf did not say sampling was refused")
        if restricted is False and refused:
            bad.append("RestrictProfilingToAdminUsers=0, but sampling was refused")
        self.item(g, "pc_rootless", SHORT if bad else HOLDS, "; ".join(bad) or
                  f"as uid {user if user is not None else os.geteuid()}: PC sampling {what}, every kernel recorded "
                  f"and matched" + (" [simulated refusal]" if self.sim else ""))

    def check_pc_overhead(self, g, app, env, label):
        """pc_hot's own CUDA-event time per launch: without gpuperf, recorded, and
        recorded with PC sampling at its defaults; rounds alternated, medians."""
        # At CUPTI's default period and at 2^18 cycles (64 times fewer samples
        # than the default gave on an H200).
        times = {"without": [], "record": [], "pc_sampling": [], "pc_sampling_18": []}
        for rnd in range(3):
            for mode in times:
                if self.left() < 40:
                    break
                if mode == "without":
                    r = run([app, "5"], self.limit(60), env=dict(os.environ, **env))
                else:
                    flags = {"pc_sampling": ["--pc-sampling"], "pc_sampling_18": ["--pc-sampling=18"]}.get(mode, [])
                    r, _, _ = self.record(f"pc_overhead_{mode}_{rnd}", [app, "5"], flags=flags, env=env,
                                          timeout=120, timeline=False)
                m = re.search(r"pc_hot: ([\d.]+) ms per launch", r.err or "")
                if r.rc == 0 and m:
                    times[mode].append(float(m.group(1)))
        if not all(times.values()):
            self.item(g, "pc_overhead", NOT_RUN, f"a run gave no time: {times}")
            return
        med = {k: sorted(v)[len(v) // 2] for k, v in times.items()}
        fig = {"ms_per_launch": med, "runs": times}
        self.item(g, "pc_overhead", NEEDS_GPU if self.sim else HOLDS,
                  f"chase, median ms per launch: without gpuperf {med['without']:.3f}, recorded "
                  f"{med['record']:.3f} (x{med['record'] / med['without']:.2f}), with --pc-sampling "
                  f"{med['pc_sampling']:.3f} (x{med['pc_sampling'] / med['without']:.2f}), with --pc-sampling=18 "
                  f"{med['pc_sampling_18']:.3f} (x{med['pc_sampling_18'] / med['without']:.2f}), "
                  f"{len(times['without'])} rounds alternated" + label, fig)

    def check_overhead(self):
        g = "overhead"
        label = " [simulated runtime: not a GPU figure]" if self.sim else ""
        status_ok = NEEDS_GPU if self.sim else HOLDS
        inject = next((p for p in (os.environ.get("GPUPERF_CHECK_INJECT"),
                                   os.path.join(REPO, "gpu/stage/lib/libgpuperf_inject.so"),
                                   os.path.join(REPO, "target/release/libgpuperf_inject.so"),
                                   os.path.join(REPO, "target/debug/libgpuperf_inject.so"))
                       if p and os.path.isfile(p)), "libgpuperf_inject.so")
        loop = self.progs.get("launch_loop")
        if not loop and self.find_nvcc():
            loop = self.build_launch_loop()
        bench = os.path.join(REPO, "crates/inject/bench/launch-overhead.sh")
        env = dict(os.environ, INJECT=inject)
        if self.cupti:
            env["GPUPERF_CUPTI_PATH"] = self.cupti
        if self.sim and self.simdir:
            env["LD_LIBRARY_PATH"] = self.simdir
        n, rounds = ("20000", "3") if self.sim else ("200000", "5")
        no_inject = ("no libgpuperf_inject.so (gpu/stage.sh stages it; or cargo build -p gpuperf-inject, "
                     "or GPUPERF_CHECK_INJECT)")
        if not os.path.isfile(inject):
            self.item(g, "launch_native", NOT_RUN, no_inject)
        elif not loop:
            self.item(g, "launch_native", NOT_RUN, "launch_loop not built")
        else:
            r = run(["bash", bench, n, rounds], self.limit(120), env=dict(env, LAUNCH_LOOP=loop))
            self.overhead_item(g, "launch_native", r, label, status_ok)
        if not self.torch_python:
            self.item(g, "launch_python", NOT_RUN, "no Python with PyTorch")
        elif not os.path.isfile(inject):
            self.item(g, "launch_python", NOT_RUN, no_inject)
        else:
            py_env = dict(env, PYTHON=self.torch_python)
            cmd = ["bash", bench, "20000" if self.sim else "100000", rounds]
            if self.sim:
                cmd = self.wrap(cmd)
                py_env.pop("LD_LIBRARY_PATH", None)
            r = run(cmd, self.limit(180), env=py_env)
            self.overhead_item(g, "launch_python", r, label, status_ok)
        self.check_decode(g, label, status_ok)
        self.check_memory(g, label, status_ok)

    def build_launch_loop(self):
        if not self.nvcc_base:  # set by build_programs, which runs first
            return None
        exe = os.path.join(self.work, "progs", "launch_loop")
        r = run(self.nvcc_base + ["-o", exe, os.path.join(REPO, "crates/inject/bench/launch_loop.cu")],
                self.limit(120))
        return exe if r.rc == 0 else None

    def overhead_item(self, g, name, r, label, status_ok):
        ratios = dict(re.findall(r"^(injection(?: and stacks)?|stacks alone): ratio ([\d.]+)", r.out or "", re.M))
        per = dict(re.findall(r"^(injection(?: and stacks)?|stacks alone): ratio [\d.]+, ([+-]?\d+) ns per launch", r.out or "", re.M))
        if r.rc != 0 or not ratios:
            self.item(g, name, NOT_RUN, f"launch-overhead.sh failed: {r.tail(300)}")
            return
        fig = {k: {"ratio": float(v), "ns_per_launch": int(per.get(k, 0))} for k, v in ratios.items()}
        text = ", ".join(f"{k} x{v} ({per.get(k, '?')} ns/launch)" for k, v in ratios.items())
        self.item(g, name, status_ok, text + label, fig)

    def check_decode(self, g, label, status_ok):
        if not self.torch_python:
            self.item(g, "decode_tokens_per_s", NOT_RUN, "no Python with PyTorch")
            return
        script = os.path.join(REPO, "gpu/decode_loop.py")
        tokens = "20" if self.sim else "200"
        # torch.profiler (Kineto, CUDA activity only) as the reference a
        # PyTorch user knows; not on the simulation, whose CUPTI takes one client.
        runs = {"without": [], "gpu_only": [], "stacks": []}
        if not self.sim:
            runs["kineto"] = []
        for rnd in range(3):
            for mode in runs:
                if self.left() < 30:
                    break
                cmd = self.wrap([self.torch_python, script, tokens])
                if mode == "without":
                    r = run(cmd, self.limit(120))
                elif mode == "kineto":
                    r = run(self.wrap([self.torch_python, script, "--kineto", tokens]), self.limit(120))
                else:
                    flags = ["--gpu-only"] if mode == "gpu_only" else []
                    r, _, _ = self.record(f"decode_{mode}_{rnd}", cmd, flags=flags, timeout=120, timeline=False)
                m = re.search(r"tokens_per_s ([\d.]+)", r.out or "")
                if m:
                    runs[mode].append(float(m.group(1)))
        if not all(runs[k] for k in ("without", "gpu_only", "stacks")):
            self.item(g, "decode_tokens_per_s", NOT_RUN, f"decode loop failed: {runs}")
            return
        med = {k: sorted(v)[len(v) // 2] for k, v in runs.items() if v}
        change = {k: med[k] / med["without"] - 1 for k in med if k != "without"}
        ref = (f", under torch.profiler (CUDA activity only) {med['kineto']:.1f} ({change['kineto'] * 100:+.1f}%)"
               if "kineto" in med else "")
        # The best round of each setting as well: on a machine whose CPU time is
        # stolen by others, the fastest round is the least disturbed one.
        best = {k: max(v) for k, v in runs.items() if v}
        best_text = ", ".join(f"{k} {v:.1f} ({(v / best['without'] - 1) * 100:+.1f}%)"
                              for k, v in best.items() if k != "without")
        self.item(g, "decode_tokens_per_s", status_ok,
                  f"median tokens/s without gpuperf {med['without']:.1f}, with --gpu-only {med['gpu_only']:.1f} "
                  f"({change['gpu_only'] * 100:+.1f}%), with stacks {med['stacks']:.1f} ({change['stacks'] * 100:+.1f}%)"
                  f"{ref}, {len(runs['without'])} rounds alternated; best rounds: without {best['without']:.1f}, "
                  f"{best_text}" + label, {"median": med, "best": best, "runs": runs})

    def check_memory(self, g, label, status_ok):
        app = self.progs.get("sim_app")
        if not app or not self.gpuperf:
            self.item(g, "memory_and_bytes_per_launch", NOT_RUN, "sim_app or gpuperf missing")
            return
        n = 100000 if self.sim else 500000
        r, _, d = self.record("memory", [app, "loop", str(n), "1"], timeout=180, timeline=False)
        raw = sum(os.path.getsize(p) for p in glob.glob(os.path.join(d, "raw", "*")) if os.path.isfile(p))
        if r.rc != 0:
            self.item(g, "memory_and_bytes_per_launch", NOT_RUN, f"record failed: {r.tail(300)}")
            return
        self.item(g, "memory_and_bytes_per_launch", status_ok,
                  f"{n} launches: gpuperf's peak RSS {r.peak_kib / 1024:.1f} MiB, raw recording "
                  f"{raw / 1e6:.1f} MB ({raw / n:.1f} bytes per launch)" + label,
                  {"launches": n, "peak_rss_kib": r.peak_kib, "raw_bytes": raw})

    # ---- driver events ----
    def check_driver(self):
        g = "driver"
        if self.sim:
            for n in ("record_driver", "monitor"):
                self.item(g, n, NEEDS_GPU, "needs the real nvidia.ko (the kernel VM tests cover the simulated drivers)")
            return
        if not self.root:
            for n in ("record_driver", "monitor"):
                self.item(g, n, NOT_RUN, "not root")
            return
        app = self.progs.get("check_app")
        if app and self.gpuperf:
            r, tl, d = self.record("record_driver", [app, "timed", "5"], flags=["--driver"], timeout=60)
            drv = os.path.join(d, "raw", "driver.tsv")
            lines = sum(1 for _ in open(drv)) if os.path.isfile(drv) else 0
            bad = self.recording_faults(r, tl)
            what = re.findall(r"(?m)^.*driver.*$", r.err or "")[:4]
            absent = re.search(r"(?m)^.*no GPU driver events on this machine.*$", r.err or "")
            if absent and not lines:
                # The machine's kernel lacks what the sources need: said, not failed.
                self.item(g, "record_driver", NOT_RUN, absent.group(0).strip()[:600])
            else:
                self.item(g, "record_driver", SHORT if bad or not lines else HOLDS,
                          "; ".join(bad) or f"{lines} lines of driver events; " + " | ".join(w.strip() for w in what),
                          {"driver_tsv_lines": lines})
        else:
            self.item(g, "record_driver", NOT_RUN, "check_app or gpuperf missing")
        if self.gpuperf:
            d = self.run_dir("monitor")
            r = run([self.gpuperf, "monitor", "--interval", "1", "--duration", "3",
                     "--timeline", os.path.join(d, "monitor.json")], self.limit(30), cwd=d)
            with open(os.path.join(d, "stdout.txt"), "w") as f:
                f.write((r.out or "") + (r.err or ""))
            text = " | ".join((r.out + r.err).strip().splitlines()[-4:])[:500]
            nothing = "nothing can be watched" in (r.err or "")
            self.item(g, "monitor", HOLDS if r.rc == 0 else (NOT_RUN if nothing else SHORT), f"exit {r.rc}: {text}")

    # ---- outputs ----
    def write(self):
        summary = {
            "format": "gpuperf-gpu-check/1",
            "mode": "simulated" if self.sim else "gpu",
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "seconds": round(time.monotonic() - self.t0, 1),
            "facts": self.facts,
            "counts": {s: sum(1 for i in self.items if i["status"] == s) for s in (HOLDS, SHORT, NOT_RUN, NEEDS_GPU)},
            "items": self.items,
        }
        left_out = self.tarball()
        summary["tarball_left_out"] = left_out
        with open(os.path.join(self.out, "summary.json"), "w") as f:
            json.dump(summary, f, indent=2)
            f.write("\n")
        with open(os.path.join(self.out, "summary.md"), "w") as f:
            f.write(f"# gpuperf GPU check ({summary['mode']}), {summary['date']}\n\n")
            f.write(", ".join(f"{v} {k}" for k, v in summary["counts"].items()) +
                    f"; {summary['seconds']} s\n\n| group | item | status | detail |\n|---|---|---|---|\n")
            for i in self.items:
                detail = i["detail"].replace("|", "\\|").replace("\n", " ")
                f.write(f"| {i['group']} | {i['item']} | {i['status']} | {detail} |\n")
            if left_out:
                f.write(f"\nLeft out of check.tar.gz (16 MiB limit): {', '.join(left_out)}\n")
        return summary

    def tarball(self):
        """The runs' files, smallest kinds first, up to the size limit; what did
        not fit is listed, never dropped silently."""
        files = []
        for root, _, names in os.walk(self.runs):
            for n in names:
                p = os.path.join(root, n)
                rel = os.path.relpath(p, self.runs)
                if "/inductor/" in p or "/triton/" in p or "/home/" in p or os.path.islink(p):
                    continue
                files.append((0 if n.endswith((".txt", ".svg", ".log", ".folded")) else 1, os.path.getsize(p), rel, p))
        files.sort()
        path = os.path.join(self.out, "check.tar.gz")
        left_out, budget = [], TAR_LIMIT - 64 * 1024
        with tarfile.open(path, "w:gz") as tar:
            for _, size, rel, p in files:
                # Compressed sizes are not known in advance: count a file at a
                # third of its size (text and traces compress better than that).
                cost = size // 3 if size > 4096 else size
                if cost > budget:
                    left_out.append(rel)
                    continue
                budget -= cost
                tar.add(p, arcname=os.path.join("runs", rel))
        while os.path.getsize(path) > TAR_LIMIT and files:
            # Estimate was wrong: drop the largest timelines until it fits.
            os.remove(path)
            keep = [f for f in files if f[2] not in left_out]
            biggest = max(keep, key=lambda f: f[1])
            left_out.append(biggest[2])
            with tarfile.open(path, "w:gz") as tar:
                for _, _, rel, p in keep:
                    if rel not in left_out:
                        tar.add(p, arcname=os.path.join("runs", rel))
        return left_out

    def main(self):
        self.setup()
        # PyTorch and the overhead benchmarks last: they take the longest, and
        # each of their items stops cleanly when the budget runs out (a second
        # run with --only picks them up).
        steps = [("env", self.check_env), ("native", self.check_native), ("pc", self.check_pc),
                 ("driver", self.check_driver), ("pytorch", self.check_pytorch), ("overhead", self.check_overhead)]
        for name, fn in steps:
            if name not in self.only:
                continue
            if name != "env" and self.out_of_time(name, ["(all)"]):
                continue
            if name != "env" and not self.progs and name in ("pc", "overhead", "driver") and "native" not in self.only:
                self.build_programs()
            try:
                fn()
            except Exception as e:  # one broken step never costs the rest
                self.item(name, "(step)", SHORT, f"the check itself failed: {type(e).__name__}: {e}")
        s = self.write()
        print(f"check: {', '.join(f'{v} {k}' for k, v in s['counts'].items())}; "
              f"wrote {self.out}/summary.md, summary.json, check.tar.gz", file=sys.stderr)
        if os.environ.get("GPUPERF_CHECK_KEEP") != "1":
            shutil.rmtree(self.work, ignore_errors=True)
        unrun = [i for i in self.items if i["status"] == NOT_RUN and i["group"] not in ("env", "driver")]
        if self.strict and unrun:
            print(f"check: --strict: {len(unrun)} item(s) could not run: "
                  + "; ".join(f"{i['group']}/{i['item']}" for i in unrun), file=sys.stderr)
            return 1
        return 1 if s["counts"][SHORT] else 0


def parse():
    p = argparse.ArgumentParser(description="gpuperf's check on a GPU machine (or --sim: the simulated runtime)")
    p.add_argument("out", help="directory for summary.md, summary.json and check.tar.gz")
    p.add_argument("--sim", action="store_true", help="run on the simulated CUDA runtime, built here")
    p.add_argument("--only", help=f"comma-separated groups ({','.join(GROUPS)}); default all")
    p.add_argument("--strict", action="store_true",
                   help="an item of the native, pytorch or overhead groups that could not run fails the check too")
    p.add_argument("--budget", type=int, default=420, help="seconds for the whole check (default 420)")
    a = p.parse_args()
    if a.only:
        unknown = set(a.only.split(",")) - set(GROUPS)
        if unknown:
            p.error(f"unknown group(s): {', '.join(sorted(unknown))}")
    return a


if __name__ == "__main__":
    sys.exit(Check(parse()).main())
