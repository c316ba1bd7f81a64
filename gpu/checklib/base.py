"""The verdicts an item ends as, and the check's state: its options, scratch
directory, budget and the items judged so far."""
import os
import sys
import tempfile
import time

# The repository root: this file is gpu/checklib/base.py.
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HOLDS, SHORT, NOT_RUN, NEEDS_GPU = "holds", "falls short", "could not run", "needs a GPU"
GROUPS = ["env", "native", "pytorch", "pc", "overhead", "driver"]
NOBODY = 65534


def medians(runs):
    """The median of each non-empty list of `runs` (the upper one of an even count)."""
    return {k: sorted(v)[len(v) // 2] for k, v in runs.items() if v}


class Base:
    """What every group shares: the options, the scratch directory, the time
    budget, and the items judged so far."""

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
