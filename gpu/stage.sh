#!/usr/bin/env bash
# Builds what the GPU check needs on a GPU machine that has no Rust toolchain,
# into DIR (default gpu/stage, ignored by git; at most 64 MiB):
#   DIR/bin/gpuperf              release, stripped, the injection library embedded
#   DIR/bin/unwind-coverage      how much of a library .eh_frame covers
#   DIR/lib/libgpuperf_inject.so the injection library alone (the overhead benchmark loads it)
#   DIR/lib/*                    the shared libraries those link beyond glibc, found
#                                through an rpath of $ORIGIN/../lib
# The check's sources and scripts travel with the repository's working tree.
# gpu/README.md gives the command that runs the check there.
#
# usage: gpu/stage.sh [DIR]
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-$repo/gpu/stage}
# Its own target directory: the rpath flag would otherwise rebuild the usual one.
export CARGO_TARGET_DIR=$repo/target/stage
export RUSTFLAGS="-C link-arg=-Wl,-rpath,\$ORIGIN/../lib"
cargo build --release --locked --manifest-path "$repo/Cargo.toml" -p gpuperf -p gpuperf-inject
coverage=
if [ -f "$repo/crates/unwind/examples/coverage.rs" ]; then
    cargo build --release --locked --manifest-path "$repo/Cargo.toml" -p gpuperf-unwind --example coverage
    coverage=$CARGO_TARGET_DIR/release/examples/coverage
fi
rm -rf "$dir"
mkdir -p "$dir/bin" "$dir/lib"
rel=$CARGO_TARGET_DIR/release
install -m 755 "$rel/gpuperf" "$dir/bin/gpuperf"
[ -z "$coverage" ] || install -m 755 "$coverage" "$dir/bin/unwind-coverage"
install -m 755 "$rel/libgpuperf_inject.so" "$dir/lib/libgpuperf_inject.so"
strip "$dir"/bin/* "$dir/lib/libgpuperf_inject.so"
# Libraries beyond glibc's that the GPU machine's image may lack (libelf, zlib).
for f in "$dir"/bin/* "$dir/lib/libgpuperf_inject.so"; do
    ldd "$f" | awk '$3 ~ /^\// { print $3 }'
done | sort -u | while read -r lib; do
    case $(basename "$lib") in
        libc.so.*|libm.so.*|libgcc_s.so.*|libpthread.so.*|libdl.so.*|librt.so.*|ld-linux*) ;;
        *) install -m 644 "$lib" "$dir/lib/" ;;
    esac
done
size=$(du -sm "$dir" | cut -f1)
[ "$size" -le 64 ] || { echo "stage.sh: $dir is $size MiB, over the 64 MiB a GPU machine receives" >&2; exit 1; }
echo "staged $dir ($size MiB): $(cd "$dir" && find . -type f | sort | tr '\n' ' ')"
