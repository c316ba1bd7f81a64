"""The command line, and the check as a whole: set-up, the groups in their
order, the outputs and the exit status."""
import argparse
import os
import shutil
import sys

from .base import GROUPS, NOT_RUN, SHORT, Base
from .driver import Driver
from .env import Env
from .native import Native
from .overhead import Overhead
from .pc import Pc
from .pytorch import PyTorch
from .prepare import Prepare
from .record import Recording
from .summary import Summary


class Check(Env, Native, Pc, Driver, PyTorch, Overhead, Summary, Recording, Prepare, Base):
    """The whole check: each group's items come from its own module's class."""

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
