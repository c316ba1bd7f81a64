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
import sys

from checklib.main import Check, parse

if __name__ == "__main__":
    sys.exit(Check(parse()).main())
