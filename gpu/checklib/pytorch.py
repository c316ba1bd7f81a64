"""Group `pytorch`: gpt2_small.py recorded eager, training, compiled and with
CUDA graphs, and compared with torch.profiler."""
import os
import re
import shutil

from .base import HOLDS, NEEDS_GPU, NOBODY, NOT_RUN, REPO, SHORT
from .runner import run
from .timeline import Timeline


class PyTorch:
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
