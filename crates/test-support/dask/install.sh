#!/usr/bin/env bash
# Installs Dask's distributed scheduler (BSD-3-Clause, PyPI `dask[distributed]`)
# in a virtual environment of its own, for the test that fans the cross-rank
# report (python/gpuperf/ranks.py) out over a local two-worker Dask cluster
# (crates/gpuperf/tests/integration/ranks.rs).
#
#   bash crates/test-support/dask/install.sh [DIR]
#
# DIR defaults to ${XDG_CACHE_HOME:-~/.cache}/gpuperf/dask-<version>, where the
# tests look. Prints the venv's python. Nothing is installed into any other
# Python. Needs python3 (3.10 or newer) with the venv module. No pyarrow: the
# cross-rank report reads `gpuperf report`'s JSON only.
set -euo pipefail

version=2026.8.0
dir=${1:-${XDG_CACHE_HOME:-$HOME/.cache}/gpuperf/dask-$version}
python="$dir/bin/python"

check() {
    "$python" -c "import dask, distributed
assert dask.__version__ == '$version' and distributed.__version__ == '$version'" 2>/dev/null
}

if ! check; then
    python3 -m venv --clear "$dir" >&2
    "$python" -m pip install -q --disable-pip-version-check --root-user-action=ignore \
        "dask[distributed]==$version" "distributed==$version" >&2
    check
    chmod -R a+rX "$dir"
fi
echo "$python"
