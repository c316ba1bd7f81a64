# Sourced by the stack benchmarks (stack_depth.sh, hf_train.sh): what each
# variant of a run injects, how two runs are made at once, and the median of a
# column of numbers.
# Needs: inject (the library), baseline (another build, may be empty), out (the
# simulated runtime's directory), work (a scratch directory), python.

# The first two CPUs the process may use, and whether runs are made in pairs
# at once, one on each (PAIRED=0: never). A shared machine's speed moves by
# tens of percent from minute to minute, more than a capture costs in runs
# made one after another; two runs made at once see the same minute.
read -r -a cpus <<< "$("$python" -c 'import os; print(*sorted(os.sched_getaffinity(0))[:2])')"
paired=${PAIRED:-1}
[ "${#cpus[@]}" -ge 2 ] && command -v taskset > /dev/null || paired=0

# at_once ROUND OUT_X OUT_Y -- COMMAND_X... -- COMMAND_Y...: runs the two
# commands (a function and its arguments) at once, each pinned to one of the
# two CPUs (which one alternates with ROUND; children inherit it) and with a
# scratch directory of its own ($work/cpuN, as $work), their outputs in OUT_X
# and OUT_Y. Fails, with the stderr each command left in its directory's
# stderr file, when one fails.
at_once() {
    local round=$1 ox=$2 oy=$3 a b pa pb ra=0 rb=0 x=() y=()
    shift 4
    while [ "$1" != -- ]; do x+=("$1"); shift; done
    shift
    y=("$@")
    a=${cpus[$round % 2]}
    b=${cpus[1 - round % 2]}
    on_cpu "$a" "${x[@]}" > "$ox" &
    pa=$!
    on_cpu "$b" "${y[@]}" > "$oy" &
    pb=$!
    wait "$pa" || ra=$?
    wait "$pb" || rb=$?
    [ "$ra" = 0 ] && [ "$rb" = 0 ] || {
        echo "a paired run failed (${x[*]} / ${y[*]}):" >&2
        tail -n 20 "$work/cpu$a/stderr" "$work/cpu$b/stderr" >&2
        return 1
    }
}
# on_cpu CPU COMMAND...: COMMAND pinned to CPU, in $work/cpuCPU as $work.
on_cpu() {
    local work=$work/cpu$1
    mkdir -p "$work"
    taskset -cp "$1" "$BASHPID" > /dev/null
    shift
    "$@"
}

# The pairs of variants run at once, "X:Y" each (Y's cost over X's);
# hf_train.sh takes PAIRS instead where set.
pairs="plain:gpuonly gpuonly:stacks${baseline:+ baseline:stacks}"

# in_variant VARIANT COMMAND [ARGS...]: runs COMMAND as the variant has it:
# plain (no injection), gpuonly (the library, stacks off: `--gpu-only`), stacks
# (the library, stacks on: `gpuperf record`), baseline (BASELINE_INJECT, stacks
# on), basegpuonly (BASELINE_INJECT, stacks off). The library records to
# $work/trace* and logs to $work/log.
in_variant() {
    local lib stacks=1
    lib=$(variant_lib "$1")
    case $1 in gpuonly | basegpuonly) stacks=0 ;; esac
    shift
    rm -f "$work"/trace* "$work/log"
    ${lib:+env CUDA_INJECTION64_PATH="$lib" GPUPERF_CUPTI_PATH="$out/libcupti.so.13" \
        GPUPERF_GPU_TRACE="$work/trace.gputrace" GPUPERF_INJECT_LOG="$work/log" GPUPERF_STACKS=$stacks} \
        "$@"
}

# variant_lib VARIANT: the library the variant injects (none for plain).
variant_lib() {
    case $1 in
        plain) ;;
        baseline | basegpuonly) echo "$baseline" ;;
        *) echo "$inject" ;;
    esac
}

# balanced FILE FORMAT: the median of the means of each two rounds in a row of
# FILE's column (1 and 2, 3 and 4, ...; a last odd round left out), printed
# with FORMAT; "-" with fewer than two rounds. The two runs of a pair swap CPUs
# from one round to the next (at_once), so each mean has each variant once on
# each CPU: where one CPU runs slower than the other (a shared machine's often
# does, by more than a capture costs), the mean cancels it, where the median
# of single rounds leans to whichever placement came more often.
balanced() {
    [ "$(wc -l < "$1")" -ge 2 ] || { echo -; return; }
    awk 'NR % 2 { x = $1; next } { printf "%.3f\n", (x + $1) / 2 }' "$1" | median | awk -v f="$2" '{ printf f, $1 }'
}
# rounds FILE: a column, on one line.
rounds() { tr '\n' ' ' < "$1" | sed 's/ $//'; }
# signed_median: the median, rounded, with its sign.
signed_median() { median | awk '{ printf "%+.0f", $1 }'; }
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
