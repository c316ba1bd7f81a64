#!/usr/bin/env bash
# Installs Holistic Trace Analysis (HTA, MIT, PyPI `HolisticTraceAnalysis`) in a
# virtual environment of its own, for the tests that compare gpuperf's idle time
# with HTA's (crates/merge/tests/integration/idle_hta.rs).
#
#   bash crates/test-support/hta/install.sh [DIR]
#
# DIR defaults to ${XDG_CACHE_HOME:-~/.cache}/gpuperf/hta-<version>, where the
# tests look. Prints the venv's python. Nothing is installed into any other
# Python. Needs python3 (3.9 or newer) with the venv module.
set -euo pipefail

version=0.5.0
dir=${1:-${XDG_CACHE_HOME:-$HOME/.cache}/gpuperf/hta-$version}
python="$dir/bin/python"

check() { "$python" -c "import hta, hta.trace_analysis, importlib.metadata as m; assert m.version('HolisticTraceAnalysis') == '$version'" 2>/dev/null; }

if ! check; then
    python3 -m venv --clear "$dir" >&2
    # HTA imports psutil without declaring it.
    "$python" -m pip install -q --disable-pip-version-check --root-user-action=ignore \
        "HolisticTraceAnalysis==$version" psutil >&2
    check
    chmod -R a+rX "$dir"
fi
echo "$python"
