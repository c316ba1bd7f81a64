"""`gpuperf record` of one run into its own directory, and what is wrong with
a recording whatever the program did."""
import os
import re

from .runner import run
from .timeline import Timeline


class Recording:
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
    def event_times(out):
        """check_app timed's CUDA-event lines in `out`: {kernel: (total_us, median_us)}."""
        return {m.group(1): (float(m.group(2)), float(m.group(3))) for m in
                re.finditer(r"check_app: event (\w+) count \d+ total_us ([\d.]+) median_us ([\d.]+)", out or "")}

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
            # Its last words, so that a summary (CI's, say) tells why.
            last = " | ".join((r.err or "").strip().splitlines()[-3:])[-300:]
            bad.append(f"exit status {r.rc}, expected {rc_expected}" + (f" (stderr ends: {last})" if last else ""))
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
