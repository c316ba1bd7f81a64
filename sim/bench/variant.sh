# Sourced by the stack benchmarks (stack_depth.sh, hf_train.sh): what each
# variant of a run injects, and the median of a column of numbers.
# Needs: inject (the library), baseline (another build, may be empty), out (the
# simulated runtime's directory), work (a scratch directory).

# in_variant VARIANT COMMAND [ARGS...]: runs COMMAND as the variant has it:
# plain (no injection), gpuonly (the library, stacks off: `--gpu-only`), stacks
# (the library, stacks on: `gpuperf record`), baseline (BASELINE_INJECT, stacks
# on). The library records to $work/trace* and logs to $work/log.
in_variant() {
    local lib stacks=1
    lib=$(variant_lib "$1")
    [ "$1" != gpuonly ] || stacks=0
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
        baseline) echo "$baseline" ;;
        *) echo "$inject" ;;
    esac
}

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
