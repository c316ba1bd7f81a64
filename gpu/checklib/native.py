"""Group `native`: the check's own CUDA programs recorded as root and
rootless, counts, GPU times, stacks, exits and signals."""
import glob
import os
import re

from .base import HOLDS, NEEDS_GPU, NOBODY, NOT_RUN, SHORT
from .runner import run

# Kernel time against the program's own CUDA events: "within a few percent".
EVENT_TOLERANCE = 0.05


class Native:
    def check_native(self):
        g = "native"
        names = ["build", "cupti_search", "timed_root", "gpu_time_vs_events", "stacks_reach_main",
                 "timed_rootless", "copies", "graph", "two_processes", "ebpf_stacks", "exit_from_thread",
                 "exit_racing_launches",
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
        self.check_exit_racing(g, app)
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
        ev = self.event_times(r.out)
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
        bad += self.exit_kernels_faults(r, tl)
        self.item(g, "exit_from_thread", SHORT if bad else HOLDS, "; ".join(bad) or
                  f"exit status 7 kept; {len(tl.kernels())} kernels recorded and matched "
                  f"({self.app_counts(r)[0]} before the exit thread started, the rest while it ran)")

    def exit_kernels_faults(self, r, tl):
        """An exit mode's recording holds at least the launches the program synchronized."""
        counts = self.app_counts(r)
        if tl is not None and counts and len(tl.kernels()) < counts[0]:
            return [f"{len(tl.kernels())} kernels recorded, the program synchronized {counts[0]} before exit"]
        if tl is not None and not counts:
            return ["the program's count line is missing"]
        return []

    def check_exit_racing(self, g, app, rounds=5):
        """`exit()` while another thread is inside CUDA calls: the CUDA runtime's
        teardown races with them, and on a real driver the program often dies of
        SIGSEGV without gpuperf too. So each status is judged against the
        statuses the program gives alone, over alternated rounds."""
        plain, rec, bad = {}, {}, []
        kernels = 0
        for i in range(rounds):
            p = run([app, "exit-racing", "20"], self.limit(30))
            if p.timed_out:
                bad.append(f"without gpuperf, round {i + 1} hung ({p.seconds:.0f} s)")
            status = 128 - p.rc if p.rc is not None and p.rc < 0 else p.rc
            plain[status] = plain.get(status, 0) + 1
            r, tl, _ = self.record(f"exit_racing_{i}", [app, "exit-racing", "20"], timeout=60)
            rec[r.rc] = rec.get(r.rc, 0) + 1
            faults = self.recording_faults(r, tl, rc_expected=r.rc) + self.exit_kernels_faults(r, tl)
            bad += [f"round {i + 1}: {f}" for f in faults]
            kernels += len(tl.kernels()) if tl else 0
        new = sorted(s for s in rec if s not in plain and s != 7)
        if new:
            bad.append(f"recorded, the program ended with status {', '.join(map(str, new))}, "
                       f"which it never gave alone")
        seen = f"statuses without gpuperf: {tally(plain)}; recorded: {tally(rec)}"
        self.item(g, "exit_racing_launches", SHORT if bad else HOLDS,
                  "; ".join(bad + [seen]) if bad else
                  f"{seen}{' (139: SIGSEGV)' if 139 in plain or 139 in rec else ''}; every recording closed, "
                  f"{kernels} kernels recorded and matched",
                  {"plain": {str(k): v for k, v in plain.items()}, "recorded": {str(k): v for k, v in rec.items()},
                   "kernels": kernels})

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


def tally(counts):
    """`{7: 3, 139: 2}` as `7 ×3, 139 ×2`."""
    return ", ".join(f"{k} ×{n}" for k, n in sorted(counts.items(), key=lambda kv: str(kv[0])))
