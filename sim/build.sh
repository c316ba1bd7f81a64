#!/usr/bin/env bash
# Simulated CUDA (no GPU: kernels do not run, nothing reaches a device): builds
# the stand-ins for libcuda.so.1, libcudart.so.13, libcupti.so.13 and
# libnvidia-ml.so.1 into OUTDIR,
# and for libcublas.so.13 and libcublasLt.so.13 when cuBLAS's headers are found.
#
# usage: sim/build.sh [--python PYTHON [--install]] OUTDIR
#
#   --python PYTHON  take every header from the NVIDIA wheels of that Python (the
#                    venv that has torch: its purelib's nvidia/cu13/include), and
#                    build the cuBLAS stand-ins too, which sim/run.sh needs.
#   --install        install the wheels that Python lacks (PYTHON -m pip install,
#                    exactly those); without it they are named and nothing is built.
#
# Needs gcc and the CUDA 13 headers: from $CUDA_INCLUDE, else from the wheels of
# --python, else of the first python3 on PATH. The wheels:
#   nvidia-cuda-runtime==13.0.96 nvidia-cuda-cupti==13.0.85 nvidia-cuda-crt==13.0.88
#   nvidia-cuda-cccl==13.0.85, and nvidia-cublas for the cuBLAS stand-ins
# (PyTorch's wheel installs runtime, cupti and cublas, not crt and cccl).
# Every header the build includes is checked before anything is compiled.
# Without --python, cuBLAS's headers (cublas_api.h, cublasLt.h) come from
# $CUBLAS_INCLUDE, else the same directory, else the wheels of python3 or Debian's
# /usr/bin/python3.11; without them the two cuBLAS stand-ins are not built, and
# this says so.
set -euo pipefail
usage() { echo "usage: sim/build.sh [--python PYTHON [--install]] OUTDIR (see the top of sim/build.sh)"; }
py="" install=0
while [ $# -gt 0 ]; do
    case "$1" in
    --python) py=${2:?sim/build.sh: --python needs a path}; shift 2 ;;
    --python=*) py=${1#--python=}; shift ;;
    --install) install=1; shift ;;
    -h | --help) usage; exit 0 ;;
    --) shift; break ;;
    -*) echo "sim/build.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
    *) break ;;
    esac
done
[ $# -eq 1 ] || { usage >&2; exit 2; }
out=$1
here=$(cd "$(dirname "$0")" && pwd)
[ "$install" = 0 ] || [ -n "$py" ] || { echo "sim/build.sh: --install needs --python" >&2; exit 2; }
purelib() { "$1" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'; }
inc=${CUDA_INCLUDE:-}
if [ -z "$inc" ] && [ -n "$py" ]; then
    site=$(purelib "$py") || { echo "sim/build.sh: \`$py\` does not run as a Python" >&2; exit 2; }
    inc=$site/nvidia/cu13/include
    CUBLAS_INCLUDE=${CUBLAS_INCLUDE:-$inc}
fi
if [ -z "$inc" ]; then
    inc=$(purelib python3)/nvidia/cu13/include
fi

# Every header the build includes (and the two that cuda_runtime_api.h and
# cublas_api.h pull in from other wheels), with the wheel that ships it.
headers="cuda.h:nvidia-cuda-runtime==13.0.96 cuda_runtime_api.h:nvidia-cuda-runtime==13.0.96
generated_cuda_runtime_api_meta.h:nvidia-cuda-runtime==13.0.96
crt/host_defines.h:nvidia-cuda-crt==13.0.88 nv/target:nvidia-cuda-cccl==13.0.85
cupti.h:nvidia-cuda-cupti==13.0.85 cupti_callbacks.h:nvidia-cuda-cupti==13.0.85
cupti_activity.h:nvidia-cuda-cupti==13.0.85 cupti_runtime_cbid.h:nvidia-cuda-cupti==13.0.85
cupti_driver_cbid.h:nvidia-cuda-cupti==13.0.85 cupti_result.h:nvidia-cuda-cupti==13.0.85
generated_cuda_meta.h:nvidia-cuda-cupti==13.0.85
cupti_pcsampling.h:nvidia-cuda-cupti==13.0.85"
# With --python the cuBLAS stand-ins are required: sim/run.sh preloads them.
[ -z "$py" ] || headers="$headers cublas_v2.h:nvidia-cublas cublas_api.h:nvidia-cublas cublasLt.h:nvidia-cublas"
missing_wheels() {
    local w="" h
    for h in $headers; do
        [ -e "$inc/${h%%:*}" ] || case " $w " in *" ${h#*:} "*) ;; *) w="$w ${h#*:}" ;; esac
    done
    echo "${w# }"
}
wheels=$(missing_wheels)
if [ -n "$wheels" ] && [ "$install" = 1 ]; then
    echo "sim/build.sh: installing for $py: $wheels" >&2
    # shellcheck disable=SC2086
    "$py" -m pip install $wheels >&2
    wheels=$(missing_wheels)
fi
if [ -n "$wheels" ]; then
    echo "sim/build.sh: headers missing in $inc; they come with the wheels: $wheels" >&2
    if [ -n "$py" ]; then
        echo "sim/build.sh: install them with: $py -m pip install $wheels   (or rerun with --install)" >&2
    else
        echo "sim/build.sh: set CUDA_INCLUDE, or build for the Python that has them: sim/build.sh --python PATH OUTDIR" >&2
    fi
    exit 2
fi
# Each header as gcc will read it: a header of another wheel that it includes
# is named here, not in a compiler error halfway through the build.
for h in $headers; do
    case "${h%%:*}" in */*) continue ;; esac
    if ! err=$(printf '#include <%s>\n' "${h%%:*}" | gcc -E -I"$inc" -x c - -o /dev/null 2>&1); then
        echo "sim/build.sh: ${h%%:*} in $inc does not preprocess:" >&2
        echo "$err" | grep -m1 'error' >&2
        exit 2
    fi
done
mkdir -p "$out/gen"
out=$(cd "$out" && pwd)

# Callback ids and names, generated from CUPTI's own headers so that they are
# CUDA 13's: one name per id below *_SIZE, as cuptiGetCallbackName returns them,
# and RT_CBID_<function> = the id of the newest version of each runtime function.
gen=$out/gen
{
    echo "/* Generated by sim/build.sh from cupti_runtime_cbid.h, cupti_driver_cbid.h and cupti_result.h. */"
    for dom in RUNTIME DRIVER; do
        lower=$(echo "$dom" | tr 'A-Z' 'a-z')
        echo "static const char *const gpusim_${lower}_cbid_names[] = {"
        sed -n "s/^ *CUPTI_${dom}_TRACE_CBID_\([A-Za-z0-9_]*\) *= *\([0-9][0-9]*\),.*/\2 \1/p" \
            "$inc/cupti_${lower}_cbid.h" | grep -v ' SIZE$' | awk '{ printf "    [%s] = \"%s\",\n", $1, $2 }'
        echo "};"
    done
    echo "static const struct { int code; const char *name; } gpusim_result_names[] = {"
    sed -n 's/^ *\(CUPTI_[A-Z_]*\) *= *\([0-9][0-9]*\),.*/\2 \1/p' "$inc/cupti_result.h" |
        awk '{ printf "    {%s, \"%s\"},\n", $1, $2 }'
    echo "};"
} > "$gen/cupti_names.h.tmp"
mv "$gen/cupti_names.h.tmp" "$gen/cupti_names.h"
{
    echo "/* Generated by sim/build.sh from cupti_runtime_cbid.h. */"
    sed -n 's/^ *CUPTI_RUNTIME_TRACE_CBID_\([A-Za-z0-9_]*\)_v\([0-9][0-9]*\) *= *\([0-9][0-9]*\),.*/\1 \2 \3/p' \
        "$inc/cupti_runtime_cbid.h" | sort -k1,1 -k2,2n |
        awk '{ id[$1] = $3; v[$1] = $2 } END { for (s in id) printf "#define RT_CBID_%s %s\n#define RT_PARAMS_%s %s_v%s_params\n", s, id[s], s, s, v[s] }' | sort
} > "$gen/runtime_cbids.h.tmp"
mv "$gen/runtime_cbids.h.tmp" "$gen/runtime_cbids.h"

# Frame pointers and real call frames (no sibling calls), as NVIDIA's libcudart
# entry points have: CPU profilers see each API function as a frame.
cflags=(-std=gnu11 -O2 -g -fPIC -fno-omit-frame-pointer -fno-optimize-sibling-calls -fvisibility=hidden
        -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers -Werror
        -I"$inc" -I"$out/gen" -I"$here/src")
# The code between an API call and the CUPTI subscriber's callback (the driver's
# call into the tool, the tool's call of the callback) is built without unwind
# tables and without frame pointers, as stretches of NVIDIA's libcuda and libcupti
# are: a stack taken in the callback must cross frames that no .eh_frame entry
# covers. Each library links one such object; the check below proves it has none.
# GPUSIM_DISPATCH_UNWIND=1 builds it with unwind tables instead, as the callback
# path of the driver was on an NVIDIA H200 (driver 580: no stack crossed code
# without unwind info there): benchmarks of what stacks cost can measure that
# case. OUTDIR/dispatch-unwind says which was built.
dispatch=(-fno-asynchronous-unwind-tables -fno-unwind-tables -fomit-frame-pointer)
want="no .eh_frame"
if [ "${GPUSIM_DISPATCH_UNWIND:-0}" = 1 ]; then
    dispatch=(-fomit-frame-pointer)
    want=".eh_frame"
fi
gcc "${cflags[@]}" "${dispatch[@]}" -c -o "$gen/driver_dispatch.o" "$here/src/driver_dispatch.c"
gcc "${cflags[@]}" "${dispatch[@]}" -c -o "$gen/cupti_dispatch.o" "$here/src/cupti_dispatch.c"
for o in driver_dispatch cupti_dispatch; do
    has="no .eh_frame"
    readelf -S "$gen/$o.o" | grep -q '\.eh_frame' && has=".eh_frame"
    if [ "$has" != "$want" ]; then
        echo "sim/build.sh: $o.o has $has; it must have $want" >&2
        exit 1
    fi
done
if [ "$want" = ".eh_frame" ]; then
    echo "with unwind tables" > "$out/dispatch-unwind"
else
    echo "without unwind tables" > "$out/dispatch-unwind"
fi
gcc "${cflags[@]}" -shared -Wl,-soname,libcuda.so.1 -Wl,--no-undefined \
    -o "$out/libcuda.so.1" "$here"/src/driver{,_sim,_work,_memory,_streams,_graphs,_more}.c "$gen/driver_dispatch.o" -lpthread -ldl
ln -sf libcuda.so.1 "$out/libcuda.so"
gcc "${cflags[@]}" -shared -Wl,-soname,libcudart.so.13 -Wl,--no-undefined \
    -Wl,--version-script="$here/src/cudart.map" -Wl,-rpath,'$ORIGIN' \
    -o "$out/libcudart.so.13" "$here"/src/runtime{,_memory,_streams,_more}.c -L"$out" -lcuda -lpthread
ln -sf libcudart.so.13 "$out/libcudart.so"
gcc "${cflags[@]}" -shared -Wl,-soname,libcupti.so.13 -Wl,--no-undefined -Wl,-rpath,'$ORIGIN' \
    -o "$out/libcupti.so.13" "$here"/src/cupti{,_buffers,_pcsampling}.c "$gen/cupti_dispatch.o" -L"$out" -lcuda -lpthread
ln -sf libcupti.so.13 "$out/libcupti.so"
# sim/run.sh puts OUTDIR/python first on PYTHONPATH (PyTorch without cuDNN).
mkdir -p "$out/python"
cp "$here/python/sitecustomize.py" "$out/python/sitecustomize.py"
gcc "${cflags[@]}" -shared -Wl,-soname,libnvidia-ml.so.1 -Wl,--no-undefined \
    -o "$out/libnvidia-ml.so.1" "$here/src/nvml.c"

# cuBLAS and cuBLASLt stand-ins. Every function their headers declare and the
# stand-ins do not implement exists and returns CUBLAS_STATUS_NOT_SUPPORTED
# (weak stubs generated from the headers): programs that link them load, and
# learn at the call that the simulation cannot do it.
blas_inc=${CUBLAS_INCLUDE:-}
if [ -z "$blas_inc" ]; then
    for cand in "$inc" \
        "$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' 2>/dev/null)/nvidia/cu13/include" \
        "$(/usr/bin/python3.11 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' 2>/dev/null)/nvidia/cu13/include"; do
        if [ -f "$cand/cublas_api.h" ] && [ -f "$cand/cublasLt.h" ]; then blas_inc=$cand; break; fi
    done
fi
if [ -z "$blas_inc" ] || [ ! -f "$blas_inc/cublas_api.h" ]; then
    echo "sim/build.sh: cuBLAS headers not found (pip install nvidia-cublas, or set CUBLAS_INCLUDE): libcublas.so.13 and libcublasLt.so.13 not built" >&2
    exit 0
fi
echo "$blas_inc" > "$gen/cublas_include"
stubs() { # header library-prefix exclude-prefix output
    echo "/* Generated by sim/build.sh from $1: the functions the stand-in does not implement. */" > "$4.tmp"
    printf '#include <%s>\n' "$1" | gcc -E -P -I"$inc" -I"$blas_inc" -x c - |
        grep -oE "\b$2[A-Za-z0-9_]*[[:space:]]*\(" | tr -d '( \t' | sort -u |
        { if [ -n "$3" ]; then grep -v "^$3"; else cat; fi; } |
        awk '{ printf "__attribute__((weak, visibility(\"default\"))) int %s(void) { return 15; /* CUBLAS_STATUS_NOT_SUPPORTED */ }\n", $1 }' >> "$4.tmp"
    mv "$4.tmp" "$4"
}
stubs cublas_api.h cublas cublasLt "$gen/cublas_stubs.c"
stubs cublasLt.h cublasLt "" "$gen/cublaslt_stubs.c"
printf 'libcublas.so.13 {\n    global: cublas*; gpusim_*;\n    local: *;\n};\n' > "$gen/cublas.map"
printf 'libcublasLt.so.13 {\n    global: cublasLt*; gpusim_*;\n    local: *;\n};\n' > "$gen/cublaslt.map"
gcc "${cflags[@]}" -I"$blas_inc" -shared -Wl,-soname,libcublas.so.13 -Wl,--no-undefined \
    -Wl,--version-script="$gen/cublas.map" -Wl,-rpath,'$ORIGIN' \
    -o "$out/libcublas.so.13" "$here/src/cublas.c" "$here/src/simblas.c" "$gen/cublas_stubs.c" \
    -L"$out" -lcudart -lcuda
ln -sf libcublas.so.13 "$out/libcublas.so"
gcc "${cflags[@]}" -I"$blas_inc" -shared -Wl,-soname,libcublasLt.so.13 -Wl,--no-undefined \
    -Wl,--version-script="$gen/cublaslt.map" -Wl,-rpath,'$ORIGIN' \
    -o "$out/libcublasLt.so.13" "$here/src/cublaslt.c" "$here/src/simblas.c" "$gen/cublaslt_stubs.c" \
    -L"$out" -lcudart -lcuda
ln -sf libcublasLt.so.13 "$out/libcublasLt.so"
