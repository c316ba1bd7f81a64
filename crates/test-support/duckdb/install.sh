#!/usr/bin/env bash
# Installs DuckDB's Python package (MIT, PyPI `duckdb`) in a virtual environment
# of its own, for the tests that read gpuperf's Parquet tables as a user's
# DuckDB reads them (crates/test-support/src/duckdb.rs).
#
#   bash crates/test-support/duckdb/install.sh [DIR]
#
# DIR defaults to ${XDG_CACHE_HOME:-~/.cache}/gpuperf/duckdb-<version>, where the
# tests look. Prints the venv's python. Nothing is installed into any other
# Python. Needs python3 (3.9 or newer) with the venv module.
set -euo pipefail

version=2.0.1
dir=${1:-${XDG_CACHE_HOME:-$HOME/.cache}/gpuperf/duckdb-$version}
python="$dir/bin/python"

check() { "$python" -c "import duckdb; assert duckdb.__version__ == '$version'" 2>/dev/null; }

if ! check; then
    python3 -m venv --clear "$dir" >&2
    "$python" -m pip install -q --disable-pip-version-check --root-user-action=ignore \
        "duckdb==$version" >&2
    check
    chmod -R a+rX "$dir"
fi
echo "$python"
