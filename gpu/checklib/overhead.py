"""Group `overhead`: launch overhead natively and from PyTorch, decode
tokens/s, and gpuperf's memory and bytes per launch."""
import glob
import os
import re

from .base import HOLDS, NEEDS_GPU, NOT_RUN, REPO, medians
from .runner import run


class Overhead:
    def check_overhead(self):
        g = "overhead"
        label = " [simulated runtime: not a GPU figure]" if self.sim else ""
        status_ok = NEEDS_GPU if self.sim else HOLDS
        inject = next((p for p in (os.environ.get("GPUPERF_CHECK_INJECT"),
                                   os.path.join(REPO, "gpu/stage/lib/libgpuperf_inject.so"),
                                   os.path.join(REPO, "target/release/libgpuperf_inject.so"),
                                   os.path.join(REPO, "target/debug/libgpuperf_inject.so"))
                       if p and os.path.isfile(p)), "libgpuperf_inject.so")
        # An unoptimized library's figures say nothing of what recording costs.
        if os.path.basename(os.path.dirname(inject)) == "debug":
            label += " [debug build of the injection library: not a cost figure]"
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
        # How the stacks were taken (the first recorded round's log): proven
        # from the walk kept for the stack expected next, or walked.
        st = self.parse_stacks(r.out or "")
        if st:
            fig["stacks"] = st
            text += f"; stacks: {st['taken']} taken, {self.taken_how(st)}"
        self.item(g, name, status_ok, text + label, fig)

    def check_decode(self, g, label, status_ok):
        if not self.torch_python:
            self.item(g, "decode_tokens_per_s", NOT_RUN, "no Python with PyTorch")
            return
        script = os.path.join(REPO, "gpu/decode_loop.py")
        tokens = "20" if self.sim else "200"
        # torch.profiler (Kineto, CUDA activity only) as the reference a
        # PyTorch user knows; not on the simulation, whose CUPTI takes one client.
        modes = {"without": (None, []), "gpu_only": (["--gpu-only"], []), "stacks": ([], [])}
        if not self.sim:
            modes["kineto"] = (None, ["--kineto"])
        runs, cpu, dirs = self.decode_rounds("decode", modes, tokens, min_left=30, timeout=120)
        stacks_log = self.stacks_line(dirs["stacks"]) if "stacks" in dirs else None
        if not all(runs[k] for k in ("without", "gpu_only", "stacks")):
            self.item(g, "decode_tokens_per_s", NOT_RUN, f"decode loop failed: {runs}")
            return
        med = medians(runs)
        change = {k: med[k] / med["without"] - 1 for k in med if k != "without"}
        ref = (f", under torch.profiler (CUDA activity only) {med['kineto']:.1f} ({change['kineto'] * 100:+.1f}%)"
               if "kineto" in med else "")
        # The best round of each setting as well: on a machine whose CPU time is
        # stolen by others, the fastest round is the least disturbed one.
        best = {k: max(v) for k, v in runs.items() if v}
        best_text = ", ".join(f"{k} {v:.1f} ({(v / best['without'] - 1) * 100:+.1f}%)"
                              for k, v in best.items() if k != "without")
        cpu_med = medians(cpu)
        cpu_text, per_stack = "", None
        # The run's stacks over its timed tokens and the 5 of the warm-up (the
        # model's set-up launches a few more).
        per_token = stacks_log["taken"] / (int(tokens) + 5) if stacks_log else None
        if all(k in cpu_med for k in ("without", "gpu_only", "stacks")):
            cpu_text = (f"; CPU us per token: without {cpu_med['without']:.0f}, --gpu-only "
                        f"{cpu_med['gpu_only']:.0f}, stacks {cpu_med['stacks']:.0f}")
            if stacks_log:
                per_stack = (cpu_med["stacks"] - cpu_med["gpu_only"]) * 1e3 / per_token
                cpu_text += (f"; stacks over --gpu-only {per_stack:+.0f} ns of CPU per stack "
                             f"({per_token:.0f} stacks a token, {self.taken_how(stacks_log)})")
        inter_text, inter = self.decode_interleaved(script, "80" if self.sim else "800", per_token)
        self.item(g, "decode_tokens_per_s", status_ok,
                  f"median tokens/s without gpuperf {med['without']:.1f}, with --gpu-only {med['gpu_only']:.1f} "
                  f"({change['gpu_only'] * 100:+.1f}%), with stacks {med['stacks']:.1f} ({change['stacks'] * 100:+.1f}%)"
                  f"{ref}, {len(runs['without'])} rounds alternated; best rounds: without {best['without']:.1f}, "
                  f"{best_text}{cpu_text}{inter_text}" + label,
                  {"median": med, "best": best, "runs": runs, "cpu_us_per_token": cpu,
                   "stacks_over_gpu_only_ns_per_stack": per_stack, "stacks": stacks_log,
                   "interleaved": inter})

    def decode_rounds(self, name, modes, tokens, min_left, timeout):
        """gpu/decode_loop.py over TOKENS tokens in 3 rounds, MODES alternated in
        each: a mode maps to (gpuperf's flags, or None for the loop alone; the
        loop's own arguments). Returns tokens/s and CPU us per token for each
        mode (CPU time, unlike wall time, leaves out what other tenants of a
        virtual machine take), and each recorded mode's first recording."""
        script = os.path.join(REPO, "gpu/decode_loop.py")
        runs, cpu, dirs = {m: [] for m in modes}, {m: [] for m in modes}, {}
        for rnd in range(3):
            for mode, (flags, args) in modes.items():
                if self.left() < min_left:
                    break
                cmd = self.wrap([self.torch_python, script, *args, tokens])
                if flags is None:
                    r = run(cmd, self.limit(timeout))
                else:
                    r, _, d = self.record(f"{name}_{mode}_{rnd}", cmd, flags=flags, timeout=timeout, timeline=False)
                    dirs.setdefault(mode, d)
                m = re.search(r"tokens_per_s ([\d.]+) cpu_s ([\d.]+)", r.out or "")
                if r.rc == 0 and m:
                    runs[mode].append(float(m.group(1)))
                    cpu[mode].append(float(m.group(2)) * 1e6 / int(tokens))
        return runs, cpu, dirs

    def decode_interleaved(self, script, tokens, per_token, block=8):
        """Stacks against --gpu-only in one recorded process: the decode loop
        with gpuperf's stacks off and on in alternate blocks of BLOCK tokens
        (decode_loop.py --interleave), where rounds of separate processes on a
        noisy machine spread by more than stacks cost. Returns (text for the
        item, figures or None)."""
        if self.left() < 60:
            return "; stacks in one process: not run (time budget)", None
        cmd = self.wrap([self.torch_python, script, "--interleave", str(block), tokens])
        r, _, _ = self.record("decode_interleaved", cmd, timeout=180, timeline=False)
        m = re.search(r"^decode-interleaved: interleaved tokens (\d+) block \d+ (.*) stacks_on_tokens", r.out or "", re.M)
        if r.rc != 0 or not m:
            return f"; stacks in one process: failed ({r.tail(200)})", None
        fields = re.findall(r"(\w+)_(off_us|on_us|diffs_us) ((?:[-\d.]+ ?)+)", m.group(2))
        got = {(clock, what): [float(x) for x in vals.split()] for clock, what, vals in fields}
        fig = {"pairs": int(m.group(1)), "block": block}
        parts = []
        for clock in ("thread", "wall"):
            diffs, off = got.get((clock, "diffs_us")), got.get((clock, "off_us"))
            if not diffs or not off:
                continue
            d = sorted(diffs)[len(diffs) // 2]
            fig[clock] = {"off_us_per_token": off[0], "diff_us_per_token": d, "diffs_us": diffs,
                          "percent_of_token": 100 * d / off[0],
                          "ns_per_stack": d * 1e3 / per_token if per_token else None}
            what = "the loop thread's CPU time" if clock == "thread" else "wall time"
            stack = f", {d * 1e3 / per_token:+.0f} ns a stack" if per_token else ""
            parts.append(f"{what} {d:+.1f} us a token ({100 * d / off[0]:+.1f}% of {off[0]:.0f} us{stack})")
        return (f"; stacks in one process ({fig['pairs']} pairs of {block}-token blocks, medians): "
                + "; ".join(parts)), fig

    @staticmethod
    def stacks_line(d):
        """How a recording's stacks were taken, from the injection library's
        log in its raw directory: {taken, frames_per_capture, kept_walks}, or None."""
        for path in glob.glob(os.path.join(d, "raw", "*.log")):
            with open(path, errors="replace") as f:
                st = Overhead.parse_stacks(f.read())
            if st:
                return st
        return None

    @staticmethod
    def taken_how(st):
        """`parse_stacks`'s result in words: the depth and the share proven."""
        return (f"{st['frames_per_capture']} frames each, "
                f"{st['kept_walks'] / st['taken'] * 100:.1f}% proven from a kept walk")

    @staticmethod
    def parse_stacks(text):
        """The injection library's stacks line in `text`: {taken,
        frames_per_capture, kept_walks}, or None (no stack taken)."""
        taken = re.search(r"stacks: (\d+) taken", text)
        depth = re.search(r"([\d.]+) frames per capture", text)
        kept = re.search(r"(\d+) took the whole native walk kept", text)
        if not (taken and depth and kept and int(taken.group(1))):
            return None
        return {"taken": int(taken.group(1)), "frames_per_capture": float(depth.group(1)),
                "kept_walks": int(kept.group(1))}

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
