"""gpuperf from Python: a recording as an Arrow table, and its report.

The `gpuperf` command installed with this package does the work; this module
runs it. For many ranks, run `read` or `report` once per rank recording, for
example as one Dask task each: `gpuperf.ranks` does that (see the README).
"""

import json
import os
import shutil
import subprocess
import sysconfig
import tempfile

__all__ = ["command", "read", "report"]


def command():
    """The path of the `gpuperf` command: `GPUPERF_COMMAND` when set, else the
    one installed with this package, else the first on PATH."""
    given = os.environ.get("GPUPERF_COMMAND")
    if given:
        return given
    here = os.path.join(sysconfig.get_path("scripts"), "gpuperf")
    if os.access(here, os.X_OK):
        return here
    found = shutil.which("gpuperf")
    if found is None:
        raise FileNotFoundError("the gpuperf command is not installed beside this module")
    return found


def _run(args):
    done = subprocess.run([command(), "-q", *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(done.stderr.strip() or f"gpuperf {' '.join(args)} failed")
    return done.stdout


def read(path, table="events"):
    """The recording (or trace) at `path` as a pyarrow Table: `events` (one row
    per GPU activity and CUDA API call) or `stacks`, as `--parquet` writes them."""
    import pyarrow.parquet as pq

    if table not in ("events", "stacks"):
        raise ValueError(f"table must be 'events' or 'stacks', not {table!r}")
    with tempfile.TemporaryDirectory(prefix="gpuperf-") as tmp:
        out = os.path.join(tmp, "parquet")
        _run(["merge", os.fspath(path), "--parquet", out])
        return pq.read_table(os.path.join(out, f"{table}.parquet"))


def report(path, top=20):
    """`gpuperf report PATH --format json` as a dict: kernels, stacks, Python
    lines and idle time."""
    return json.loads(_run(["report", os.fspath(path), "--format", "json", "--top", str(top)]))
