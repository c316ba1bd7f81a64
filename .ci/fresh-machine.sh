#!/usr/bin/env bash
# Runs the README's quick start as a new user would, on a fresh Debian 12: a
# debootstrap root with gcc, make, pkg-config, zlib1g-dev and libelf1 (no clang,
# no libelf-dev), plus this machine's rustup toolchain. Each of the two
# commands runs alone, in its own clone of the committed HEAD, as a user
# without root; then `cargo install` from the README's install section.
#
#   sudo bash .ci/fresh-machine.sh [ROOT]
#
# ROOT (default: a directory under /var/tmp) is made once and reused. It needs
# debootstrap, root, network access to a Debian mirror and crates.io, and about
# 4 GB. The transcript goes to ROOT.log; its last lines are printed at the end.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
root=${1:-/var/tmp/gpuperf-fresh-debian12}
log=$root.log
user=dev
home=/home/$user

[ "$(id -u)" = 0 ] || { echo "fresh-machine: run as root (chroot, mount)" >&2; exit 1; }
command -v debootstrap >/dev/null || { echo "fresh-machine: needs debootstrap (apt-get install debootstrap)" >&2; exit 1; }

# The Debian mirror apt already uses here, else the default one.
mirror=$(sed -n 's/^URIs: *\([^ ]*\/debian\)\/*$/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -1)
[ -n "$mirror" ] || mirror=$(awk '$1 == "deb" && $2 ~ /\/debian\/?$/ { print $2; exit }' /etc/apt/sources.list 2>/dev/null || true)
mirror=${mirror:-http://deb.debian.org/debian}

if [ ! -f "$root/etc/debian_version" ]; then
    echo "fresh-machine: debootstrap bookworm into $root from $mirror"
    debootstrap --variant=minbase \
        --include=gcc,libc6-dev,make,pkg-config,zlib1g-dev,libelf1,ca-certificates,curl,git \
        bookworm "$root" "$mirror" >"$root.debootstrap.log" 2>&1 ||
        { tail -20 "$root.debootstrap.log"; exit 1; }
fi
for absent in clang libelf-dev; do
    if chroot "$root" dpkg -s "$absent" >/dev/null 2>&1; then
        echo "fresh-machine: $root has $absent; it must not" >&2
        exit 1
    fi
done

# Registry access as this machine has it: name resolution, and any CA that a
# TLS-inspecting proxy on the way to the registries needs.
cp /etc/resolv.conf /etc/hosts "$root/etc/"
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
    cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
    chroot "$root" update-ca-certificates >/dev/null 2>&1
fi

chroot "$root" id "$user" >/dev/null 2>&1 || chroot "$root" useradd -m -s /bin/bash "$user"

# rustup and its default toolchain, as `rustup-init` would leave them.
rustup_home=${RUSTUP_HOME:-$HOME/.rustup}
cargo_home=${CARGO_HOME:-$HOME/.cargo}
toolchain=$(rustup default | awk '{ print $1 }')
if [ ! -d "$root$home/.rustup/toolchains/$toolchain" ]; then
    mkdir -p "$root$home/.rustup/toolchains" "$root$home/.cargo/bin"
    cp -a "$(readlink -f "$rustup_home/toolchains/$toolchain")" "$root$home/.rustup/toolchains/$toolchain"
    printf 'version = "12"\ndefault_toolchain = "%s"\nprofile = "default"\n' "$toolchain" \
        >"$root$home/.rustup/settings.toml"
    cp "$cargo_home/bin/rustup" "$root$home/.cargo/bin/"
    for proxy in cargo rustc rustdoc rustfmt cargo-fmt cargo-clippy clippy-driver; do
        ln -sf rustup "$root$home/.cargo/bin/$proxy"
    done
    chroot "$root" chown -R "$user:$user" "$home/.rustup" "$home/.cargo"
fi

# Two clones of the committed HEAD: each command starts from nothing.
head=$(git -C "$repo" rev-parse HEAD)
for n in 1 2; do
    rm -rf "$root$home/gpuperf-$n"
    git clone -q --no-local "$repo" "$root$home/gpuperf-$n"
    git -C "$root$home/gpuperf-$n" checkout -q "$head"
    chroot "$root" chown -R "$user:$user" "$home/gpuperf-$n"
done

# The quick start's two commands, exactly as the README writes them.
quick_start=$(awk '/^## /{ on = ($0 == "## Quick start") } on' "$repo/README.md")
block() { awk -v k="$1" '/^```sh$/ { n++; on = 1; next } /^```/ { on = 0; next } on && n == k' <<<"$quick_start"; }
first=$(block 1)
second=$(block 2)
install=$(grep -m1 '^cargo install ' "$repo/README.md")

mounts=()
cleanup() {
    for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do umount -l "${mounts[i]}" 2>/dev/null || true; done
}
trap cleanup EXIT
for m in proc dev; do
    mountpoint -q "$root/$m" && continue
    if [ "$m" = proc ]; then mount -t proc proc "$root/proc"; else mount --bind /dev "$root/dev"; fi
    mounts+=("$root/$m")
done

# A login shell of the new user, with nothing from this machine's environment.
as_user() {
    chroot --userspec="$user:$user" "$root" env -i HOME="$home" USER="$user" LOGNAME="$user" \
        LANG=C.UTF-8 TERM=dumb PATH="$home/.cargo/bin:/usr/local/bin:/usr/bin:/bin" \
        bash -c "cd $home/$1 && $2"
}

status=0
{
    echo "== fresh Debian $(cat "$root/etc/debian_version"), $(as_user . 'rustc --version'), no clang, no libelf-dev; commit $head"
    echo "== 1: $first"
    if as_user gpuperf-1 "$first"; then
        as_user gpuperf-1 'ls -l flamegraph.svg timeline.json merged.folded' || status=1
    else
        echo "== FAILED: $first"
        status=1
    fi
    echo "== 2: $second"
    if ! as_user gpuperf-2 "$second"; then
        echo "== FAILED: $second"
        status=1
    fi
    echo "== install: $install"
    if as_user gpuperf-1 "$install" && as_user . 'gpuperf --version'; then
        :
    else
        echo "== FAILED: $install"
        status=1
    fi
    echo "== result: $([ $status = 0 ] && echo ok || echo FAILED)"
} 2>&1 | tee "$log" >/dev/null || true
status=$(grep -q '^== result: ok' "$log" && echo 0 || echo 1)
grep -E '^test result:' "$log" |
    awk '{ p += $4; f += $6; i += $8 } END { printf "== tests: %d passed, %d failed, %d ignored\n", p, f, i }' | tee -a "$log"
tail -n 40 "$log"
exit "$status"
