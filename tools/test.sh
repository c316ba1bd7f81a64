#!/usr/bin/env bash
# Runs the tests (`cargo test --workspace`, or `cargo test` with the arguments
# given) and ends with one line that counts the tests that passed, failed and
# skipped, after the list of skipped tests and why each skipped.
#
# A test that lacks what it needs (root, Chromium, NVIDIA's wheels, ...) returns
# early, so to cargo it passed; it writes why to the file named by
# GPUPERF_SKIP_LOG (gpuperf_test_support::require::skipped), which this script
# makes unless the caller names one (CI does, to check the list).
set -uo pipefail
cd "$(dirname "$0")/.."

[ $# -gt 0 ] || set -- --workspace
own_log=
if [ -z "${GPUPERF_SKIP_LOG:-}" ]; then
    GPUPERF_SKIP_LOG=$(mktemp)
    own_log=1
fi
export GPUPERF_SKIP_LOG
touch "$GPUPERF_SKIP_LOG"
before=$(wc -l <"$GPUPERF_SKIP_LOG")
out=$(mktemp)
cargo test "$@" 2>&1 | tee "$out"
rc=${PIPESTATUS[0]}

# This run's skips, one per test (a test may say it skips more than once).
skips=$(tail -n +"$((before + 1))" "$GPUPERF_SKIP_LOG" | awk -F': ' '!seen[$1]++')
n_skipped=$(grep -c . <<<"$skips")
if [ "$n_skipped" -gt 0 ]; then
    echo
    echo "skipped (passed without running what they test):"
    sed 's/^/  /' <<<"$skips"
fi
awk -v s="$n_skipped" -v rc="$rc" '
    /^test result:/ { p += $4; f += $6; i += $8 }
    END {
        printf "tests: %d passed, %d failed, %d skipped", p - s, f, s
        if (i) printf ", %d ignored", i
        if (rc && !f) printf " (cargo test failed: see above)"
        printf "\n"
    }' "$out"
rm -f "$out"
[ -z "$own_log" ] || rm -f "$GPUPERF_SKIP_LOG"
exit "$rc"
