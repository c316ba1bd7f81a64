"""Group `driver`: `gpuperf record --driver` and `gpuperf monitor` on the real
nvidia.ko."""
import os
import re

from .base import HOLDS, NEEDS_GPU, NOT_RUN, SHORT
from .runner import run


class Driver:
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
