#!/usr/bin/env bash
# Builds what the GPU check needs on a GPU machine that has no Rust toolchain,
# packed into DIR/stage.tar.gz (DIR default gpu/stage, ignored by git):
#   bin/gpuperf              release, stripped, the injection library embedded
#   bin/unwind-coverage      how much of a library .eh_frame covers
#   lib/libgpuperf_inject.so the injection library alone (the overhead benchmark loads it)
#   lib/*                    the shared libraries those link beyond glibc, found
#                            through an rpath of $ORIGIN/../lib
# The check's sources and scripts travel with the repository's working tree;
# a GPU machine receives at most 64 MiB of tree and stage together, which the
# stage unpacked would not fit. gpu/check.sh unpacks it where it runs.
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
files=$(cd "$dir" && find . -type f | sort | tr '\n' ' ')
tar -czf "$dir/stage.tar.gz" -C "$dir" bin lib
rm -rf "$dir"/bin "$dir"/lib
# What travels: the tracked and untracked files git does not ignore, and the stage.
tree=$(cd "$repo" && git ls-files -z --cached --others --exclude-standard |
       xargs -0 stat -c %s 2>/dev/null | awk '{ s += $1 } END { print s + 0 }')
packed=$(stat -c %s "$dir/stage.tar.gz")
mib=$(( (tree + packed + 1048575) / 1048576 ))
[ "$mib" -le 64 ] || { echo "stage.sh: the working tree and $dir come to $mib MiB, over the 64 MiB a GPU machine receives" >&2; exit 1; }
echo "staged $dir/stage.tar.gz ($((packed / 1048576)) MiB packed; $mib MiB with the working tree): $files"
