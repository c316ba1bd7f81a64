"""Group `pc`: PC sampling inside the kernel (gpu/progs/pc_hot.cu), against
Nsight Compute, in each mode, rootless, and its overhead."""
import glob
import json
import os
import re
import shutil

from .base import HOLDS, NEEDS_GPU, NOBODY, NOT_RUN, REPO, SHORT, medians
from .ncu import line_agreement, metric_stalls, source_lines
from .runner import run


class Pc:
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

    def pc_samples(self, d):
        """`gpuperf report --format json`'s pc_samples of the recording in d/raw, or None and why."""
        r = run([self.gpuperf, "report", "raw", "--format", "json"], self.limit(60), cwd=d)
        try:
            return json.loads(r.out or "").get("pc_samples", {}), None
        except ValueError:
            return None, f"report --format json unreadable: {r.tail(200)}"

    def pc_report(self, d):
        """The `chase` kernel's entry in the report's pc_samples, or None."""
        pc, why = self.pc_samples(d)
        if pc is None:
            return None, why
        k = next((k for k in pc.get("kernels", []) if "chase" in k["kernel"]), None)
        return k, (None if k else f"no PC samples for `chase` in the report: {json.dumps(pc)[:300]}")

    @staticmethod
    def log_line(d, start):
        """The recorder's log line from `start` on (e.g. "PC sampling reads:"), or None."""
        for log in sorted(glob.glob(os.path.join(d, "raw", "*.log"))):
            with open(log, errors="replace") as f:
                for ln in f:
                    if start in ln:
                        return ln[ln.index(start):].strip()
        return None

    def reads_line(self, d):
        """The recorder's log line on how CUPTI handed the PC records over, or None."""
        return self.log_line(d, "PC sampling reads:")

    def check_pc(self):
        g = "pc"
        names = ["pc_hot_line", "pc_vs_ncu", "pc_modes", "pc_threads", "pc_rootless", "pc_overhead", "pc_decode"]
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
            # As on Hopper, a not-issued count beside the base reasons (a subset).
            env["GPUSIM_PC_NOT_ISSUED_PERCENT"] = "50"
        label = " [simulated samples]" if self.sim else ""
        plain = run([app, "5"], self.limit(60), env=dict(os.environ, **env))
        flags = ["--pc-sampling", "--pc-folded", "pc.folded", "--pc-svg", "pc.svg", "--pc-pprof", "pc.pb.gz"]
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
            fig = {"samples": k["samples"], "launches_with_samples": k.get("launches"), "top_line": top_line, "top_stall": top_stall, "top_line_share": round(share, 4),
                   # What CUPTI did that its header leaves open: records returned
                   # twice, drops, a full hardware buffer, Disable's discards.
                   "pc_notes": [n for n in (tl.notes if tl else []) if n.startswith("PC sampling:")],
                   # Where the records came from: the configured buffer, GetData.
                   "pc_reads": self.reads_line(d)}
            if not top_line or not top_line["line"].endswith(f"pc_hot.cu:{hot}"):
                bad.append(f"chase's hottest line is {top_line and top_line['line']}, not pc_hot.cu:{hot} (HOT)")
            elif share < 0.5:
                bad.append(f"the HOT line holds {share:.0%} of chase's samples")
        folded = os.path.join(d, "pc.folded")
        stacks = open(folded).read().splitlines() if os.path.isfile(folded) else []
        if not stacks:
            bad.append("no pc.folded")
        else:
            odd = [s for s in stacks if not re.search(r"(^|;)main;.*launch_chase;.*\[GPU_Kernel\]chase;\[GPU_PC\]", s)]
            if odd:
                bad.append(f"{len(odd)} of {len(stacks)} PC-sample stacks do not run main → launch_chase → chase, "
                           f"the first: {odd[0][:200]}")
        pprof = os.path.join(d, "pc.pb.gz")
        if not (os.path.isfile(pprof) and open(pprof, "rb").read(2) == b"\x1f\x8b"):
            bad.append("no gzipped pc.pb.gz (--pc-pprof)")
        if bad:
            self.item(g, "pc_hot_line", SHORT, "; ".join(bad), fig)
        else:
            self.item(g, "pc_hot_line", NEEDS_GPU if self.sim else HOLDS,
                      f"chase: {k['samples']} samples, {fig['top_line_share']:.1%} on pc_hot.cu:{hot} (HOT), "
                      f"top stall {self.stall_name(fig['top_stall']['reason'])}, above main → workload → "
                      f"launch_chase; output and exit status unchanged" + label, fig)
        self.check_pc_ncu(g, app, hot, k)
        self.check_pc_modes(g, app, hot, env, label)
        self.check_pc_threads(g, app, env, label)
        self.check_pc_rootless(g, app, flags)
        self.check_pc_overhead(g, app, env, label)
        self.check_pc_decode(g)

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
        stalls = metric_stalls(m.out)
        # The kernel's samples per CUDA source line: the source page of a
        # SourceCounters report, in its `cuda,sass` view (`cuda` alone prints
        # the file's text without metrics).
        rep = os.path.join(d, "chase")
        s = run([ncu, "--clock-control", "none", "--section", "SourceCounters", "--import-source", "yes", "-k", "regex:chase", "-c", "1",
                 "-f", "-o", rep, app, "1"], self.limit(120), cwd=d)
        src = run([ncu, "-i", rep + ".ncu-rep", "--page", "source", "--csv", "--print-source", "cuda,sass"],
                  self.limit(60), cwd=d) if s.rc == 0 else s
        with open(os.path.join(d, "ncu-source.csv"), "w") as f:
            f.write((src.out or "") + (src.err or ""))
        ncu_lines, page_stalls, ncu_line_stalls = source_lines(src.out, "pc_hot.cu")
        # The source page's own per-reason columns, where the metrics run gave none.
        stalls = stalls or page_stalls
        ncu_line = max(ncu_lines, key=ncu_lines.get) if ncu_lines else None
        ours = self.stall_name(k["stalls"][0]["reason"]) if k and k["stalls"] else None
        theirs = max(stalls, key=stalls.get) if stalls else None
        fig = {"gpuperf_top_stall": ours, "ncu_top_stall": theirs, "ncu_stalls": stalls,
               "gpuperf_top_line": k["lines"][0]["line"] if k and k["lines"] else None, "ncu_top_line": ncu_line,
               "ncu_lines": ncu_lines}
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
        if not ncu_lines:
            bad.append("ncu's source page gave no line's samples (ncu-source.csv)")
        elif ncu_line != hot:
            bad.append(f"ncu's hottest line is {ncu_line}, gpuperf's pc_hot.cu:{hot}")
        if ncu_lines:
            # Each line with at least 5 % of ncu's samples: its share and its top stall reason.
            off, lines_seen, fig["lines"] = line_agreement(k, ncu_lines, ncu_line_stalls, "pc_hot.cu")
            bad += off
            seen += "; per line, gpuperf / ncu: " + ", ".join(lines_seen)
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

    def check_pc_threads(self, g, app, env, label):
        """Four host threads launching at once, kernel-serialized: CUPTI writes
        each kernel's records into one buffer as it ends, so gpuperf holds a
        sampled launch until the context's previous one has returned and read
        its records. Every one of the 20 launches must give samples."""
        threads, launches = 4, 5
        plain = run([app, str(launches), str(threads)], self.limit(60), env=dict(os.environ, **env))
        r, tl, d = self.record("pc_threads", [app, str(launches), str(threads)], flags=["--pc-sampling"],
                               env=env, timeout=120)
        bad = self.recording_faults(r, tl)
        if plain.rc != 0:
            bad.append(f"without gpuperf pc_hot exited {plain.rc}: {plain.tail(200)}")
        elif (r.out or "").strip() != (plain.out or "").strip():
            bad.append(f"its output changed: {(r.out or '').strip()!r}, without gpuperf {(plain.out or '').strip()!r}")
        pc, why = self.pc_samples(d)
        if pc is None:
            pc = {}
            bad.append(why)
        want = threads * launches
        fig = {"launches_sampled": pc.get("launches_sampled"), "launches_with_samples": pc.get("launches_with_samples"),
               "samples": pc.get("samples"), "pc_reads": self.reads_line(d),
               "pc_notes": [n for n in (tl.notes if tl else []) if n.startswith("PC sampling:")]}
        # A launch that waited past gpuperf's bound for another thread's (CUPTI
        # holding a lock of its own across gpuperf's callbacks?) turned the waits off.
        if any("went on" in n for n in fig["pc_notes"]):
            bad.append("a sampled launch's wait for another thread's timed out: "
                       + next(n for n in fig["pc_notes"] if "went on" in n))
        if pc and (fig["launches_sampled"] != want or fig["launches_with_samples"] != want):
            bad.append(f"{fig['launches_with_samples']} of {fig['launches_sampled']} sampled launches have samples, "
                       f"not all {want}")
        self.item(g, "pc_threads", SHORT if bad else (NEEDS_GPU if self.sim else HOLDS), "; ".join(bad) or
                  f"{threads} threads × {launches} launches: all {want} sampled launches have samples "
                  f"({fig['samples']}); {fig['pc_reads']}" + label, fig)

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
        recorded with PC sampling at its defaults; rounds alternated, medians.
        The first launch is given apart: with sampling it also pays CUPTI's
        one-time set-up, which over 5 launches would swamp what each costs."""
        # At CUPTI's default period and at 2^18 cycles (64 times fewer samples
        # than the default gave on an H200).
        modes = ("without", "record", "pc_sampling", "pc_sampling_18")
        later, first = {m: [] for m in modes}, {m: [] for m in modes}
        for rnd in range(3):
            for mode in modes:
                if self.left() < 40:
                    break
                if mode == "without":
                    r = run([app, "5"], self.limit(60), env=dict(os.environ, **env))
                else:
                    flags = {"pc_sampling": ["--pc-sampling"], "pc_sampling_18": ["--pc-sampling=18"]}.get(mode, [])
                    r, _, _ = self.record(f"pc_overhead_{mode}_{rnd}", [app, "5"], flags=flags, env=env,
                                          timeout=120, timeline=False)
                m = re.search(r"first launch ([\d.]+) ms, later launches median ([\d.]+) ms", r.err or "")
                if r.rc == 0 and m:
                    first[mode].append(float(m.group(1)))
                    later[mode].append(float(m.group(2)))
        if not all(later.values()):
            self.item(g, "pc_overhead", NOT_RUN, f"a run gave no time: {later}")
            return
        med, med_first = medians(later), medians(first)
        fig = {"ms_per_launch_after_the_first": med, "first_launch_ms": med_first, "runs": later, "first_runs": first}
        short, fig["short_kernels_us"] = self.pc_cost_of_short_kernels(env)
        base = med["without"]
        each = ", ".join(f"{what} {med[m]:.3f} (x{med[m] / base:.2f})" for m, what in
                         (("record", "recorded"), ("pc_sampling", "with --pc-sampling"),
                          ("pc_sampling_18", "with --pc-sampling=18")))
        self.item(g, "pc_overhead", NEEDS_GPU if self.sim else HOLDS,
                  f"chase, median ms per launch after the first: without gpuperf {base:.3f}, {each}; "
                  f"the first launch (one-time set-up): without gpuperf {med_first['without']:.1f} ms, "
                  f"with --pc-sampling {med_first['pc_sampling']:.1f} ms; "
                  f"{len(later['without'])} rounds alternated{short}" + label, fig)

    def check_pc_decode(self, g):
        """What --pc-sampling at its defaults costs a launch-bound PyTorch loop
        (gpu/decode_loop.py: hundreds of small kernels a token): tokens/s
        without gpuperf, recorded, and recorded with --pc-sampling (its default
        window samples 100 launches in every 1000, each serialized, while the
        sampled launches take at most 10 % of the run), rounds alternated,
        medians."""
        if not self.torch_python:
            self.item(g, "pc_decode", NOT_RUN, "no Python with PyTorch")
            return
        tokens = "20" if self.sim else "200"
        modes = {"without": (None, []), "record": ([], []), "pc_sampling": (["--pc-sampling"], [])}
        runs, _, dirs = self.decode_rounds("pc_decode", modes, tokens, min_left=40, timeout=180)
        d = dirs.get("pc_sampling")
        windows = d and "; ".join(filter(None, (self.log_line(d, "PC sampling windows:"),
                                                self.log_line(d, "PC sampling budget:"))))
        if not all(runs.values()):
            self.item(g, "pc_decode", NOT_RUN, f"the decode loop gave no figure: {runs}")
            return
        med = medians(runs)
        change = {k: med[k] / med["without"] - 1 for k in med if k != "without"}
        label = " [simulated: no kernel is serialized]" if self.sim else ""
        self.item(g, "pc_decode", NEEDS_GPU if self.sim else HOLDS,
                  f"median tokens/s without gpuperf {med['without']:.1f}, recorded {med['record']:.1f} "
                  f"({change['record'] * 100:+.1f}%), with --pc-sampling {med['pc_sampling']:.1f} "
                  f"({change['pc_sampling'] * 100:+.1f}%), {len(runs['without'])} rounds alternated; "
                  f"{windows or 'no PC sampling windows line in the log'}" + label,
                  {"median": med, "runs": runs, "windows": windows})

    def pc_cost_of_short_kernels(self, env):
        """Whether a sampled launch's cost is fixed or grows with the kernel:
        check_app's 200 us and 50 us kernels, each between CUDA events, without
        gpuperf and with --pc-sampling (medians of 5 of each). Returns the text
        for the item's detail and the figure."""
        app = self.progs.get("check_app")
        if not app or self.left() < 40:
            return "", None
        plain = run([app, "timed", "5"], self.limit(60), env=dict(os.environ, **env))
        r, _, _ = self.record("pc_overhead_short_kernels", [app, "timed", "5"], flags=["--pc-sampling"], env=env,
                              timeout=120, timeline=False)
        before, after = self.event_times(plain.out), self.event_times(r.out)
        fig = {k: {"without": before[k][1], "pc_sampling": after[k][1]} for k in before if k in after}
        if not fig:
            return f"; check_app's short kernels gave no event times ({r.tail(120)})", None
        parts = [f"{k} {v['without']:.1f} us without, {v['pc_sampling']:.1f} us sampled"
                 for k, v in sorted(fig.items())]
        return "; between CUDA events (median): " + ", ".join(parts), fig
