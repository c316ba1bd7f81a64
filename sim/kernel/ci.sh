#!/bin/sh
# Prepares the kernel VM the driver-level tests run in (simulated GPU drivers on
# Debian's own kernels under QEMU's software emulation). Idempotent: a second
# run only checks what is there. Exports nothing; prints the variables to set.
#
#   sim/kernel/ci.sh [CACHE_DIR]
#
# CACHE_DIR defaults to $GPUPERF_KERNEL_VM_DIR, else target/kernel-vm in the
# checkout. Kernels: Debian 12's newest 6.1 and bookworm-security's newest 6.12
# (override with GPUPERF_VM_KERNELS="6.1.0-56-amd64 6.12.117+deb12-amd64").
set -eu

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
cache=${1:-${GPUPERF_KERNEL_VM_DIR:-$repo/target/kernel-vm}}
start=$(date +%s)

say() { printf 'kernel-vm: %s\n' "$*" >&2; }

# 1. Host tools, by package name.
need=""
for pkg in qemu-system-x86 busybox-static kmod cpio xz-utils zstd gcc make libelf-dev dwarves; do
	dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' ||
		need="$need $pkg"
done
if [ -n "$need" ]; then
	say "installing$need"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $need >/dev/null
fi

# 2. The kernels: newest of each series the configured archives offer.
newest() { apt-cache search --names-only "$1" | cut -d' ' -f1 | sort -V | tail -n1; }
if [ -z "${GPUPERF_VM_KERNELS:-}" ]; then
	k61=$(newest '^linux-image-6\.1\.0-[0-9]*-amd64$' | sed 's/^linux-image-//')
	k612=$(newest '^linux-image-6\.12\.[0-9]*[+]deb12-amd64$' | sed 's/^linux-image-//')
	GPUPERF_VM_KERNELS="$k61 $k612"
fi
mkdir -p "$cache/debs"

# 2b. Kernel drivers Debian builds no module of (vkms, the kernel's virtual
# display: its vblanks come from a timer; sw_sync, a software dma_fence
# timeline), from Debian's linux-source-6.1: only their files are unpacked.
src="$cache/linux-source-6.1"
parts="drivers/gpu/drm/vkms drivers/dma-buf/sw_sync.c drivers/dma-buf/sync_debug.c
drivers/dma-buf/sync_debug.h drivers/dma-buf/sync_trace.h"
if [ "$(cat "$src/.ready" 2>/dev/null)" != "$parts" ]; then
	say "fetching linux-source-6.1 (vkms, sw_sync)"
	[ -n "$(ls "$cache/debs/linux-source-6.1_"*.deb 2>/dev/null)" ] ||
		(cd "$cache/debs" && apt-get download -qq linux-source-6.1)
	deb=$(ls "$cache/debs/linux-source-6.1_"*.deb | sort -V | tail -n1)
	rm -rf "$src" && mkdir -p "$src"
	# shellcheck disable=SC2086 # one argument per part
	dpkg-deb --fsys-tarfile "$deb" | tar -xO ./usr/src/linux-source-6.1.tar.xz |
		tar -xJ -C "$src" --strip-components=1 $(printf 'linux-source-6.1/%s ' $parts)
	echo "$parts" >"$src/.ready"
fi

for kver in $GPUPERF_VM_KERNELS; do
	root="$cache/$kver"
	if [ -f "$root/.ready" ]; then
		say "$kver: kernel present"
	else
		say "$kver: fetching Debian's packages"
		series=$(echo "$kver" | sed -E 's/^([0-9]+\.[0-9]+)(\.[0-9]+)?[-.].*/\1/')
		common=$(echo "$kver" | sed 's/-amd64$/-common/')
		case "$series" in
		6.1) kbuild=linux-kbuild-6.1 ;;
		*) kbuild=linux-kbuild-$(echo "$kver" | sed 's/-amd64$//') ;;
		esac
		(cd "$cache/debs" && apt-get download -qq "linux-image-$kver" \
			"linux-headers-$kver" "linux-headers-$common" "$kbuild")
		rm -rf "$root" && mkdir -p "$root"
		for deb in "$cache/debs/linux-image-${kver}_"*.deb "$cache/debs/linux-headers-${kver}_"*.deb \
			"$cache/debs/linux-headers-${common}_"*.deb "$cache/debs/${kbuild}_"*.deb; do
			dpkg -x "$deb" "$root"
		done
		depmod -b "$root" "$kver"
		touch "$root/.ready"
	fi
	# Debian's headers include their common half by absolute path.
	sed -i "s#^include /usr/src/#include $root/usr/src/#" "$root/usr/src/linux-headers-$kver/Makefile"
	# 3. The simulated drivers, built out of tree against this kernel.
	for mod in "$here"/modules/*/; do
		[ -f "$mod/Makefile" ] || continue
		name=$(basename "$mod")
		build="$root/sim-modules/$name"
		if [ -d "$build" ] && [ -z "$(find "$mod" -newer "$build/.built" 2>/dev/null)" ] &&
			[ -f "$build/.built" ]; then
			continue
		fi
		say "$kver: building $name"
		rm -rf "$build" && mkdir -p "$build" && cp -r "$mod"/. "$build"/
		make -s -C "$root/usr/src/linux-headers-$kver" M="$build" modules >"$build/build.log" 2>&1 || {
			cat "$build/build.log" >&2
			exit 1
		}
		mkdir -p "$root/lib/modules/$kver/extra"
		cp --remove-destination "$build"/*.ko "$root/lib/modules/$kver/extra/"
		depmod -b "$root" "$kver"
		touch "$build/.built"
	done
	# vkms and sw_sync from 6.1's sources: their API use builds against 6.1
	# only (6.12 dropped drm_fbdev_generic_setup, changed __assign_str);
	# elsewhere said once and skipped.
	for name in vkms sw_sync; do
		build="$root/sim-modules/$name"
		if [ -f "$build/.built" ] && [ "$build/.built" -nt "$src/.ready" ] &&
			[ -z "$(find "$here/from-source" -newer "$build/.built")" ]; then
			continue
		fi
		if [ -f "$build/.failed" ] && [ "$build/.failed" -nt "$src/.ready" ] &&
			[ -z "$(find "$here/from-source" -newer "$build/.failed")" ]; then
			say "$kver: $name from linux-source-6.1 does not build against this kernel" \
				"($(grep -m1 'error' "$build/build.log" | sed 's/.*error: //')): no $name tests on it"
			continue
		fi
		say "$kver: building $name from linux-source-6.1"
		rm -rf "$build" && mkdir -p "$build"
		case "$name" in
		vkms)
			cp "$src"/drivers/gpu/drm/vkms/*.[ch] "$build"/
			sed 's/^obj-$(CONFIG_DRM_VKMS)/obj-m/' "$src/drivers/gpu/drm/vkms/Makefile" >"$build/Kbuild"
			;;
		sw_sync)
			cp "$src"/drivers/dma-buf/sync_debug.[ch] "$build"/
			cp "$src/drivers/dma-buf/sw_sync.c" "$build/sw_sync_impl.c"
			# Its trace header, included from the build directory.
			sed 's|^#define TRACE_INCLUDE_PATH .*|#define TRACE_INCLUDE_PATH .|' \
				"$src/drivers/dma-buf/sync_trace.h" >"$build/sync_trace.h"
			cp "$here"/from-source/sw_sync/* "$build"/
			;;
		esac
		if make -s -C "$root/usr/src/linux-headers-$kver" M="$build" modules >"$build/build.log" 2>&1; then
			mkdir -p "$root/lib/modules/$kver/extra"
			cp --remove-destination "$build/$name.ko" "$root/lib/modules/$kver/extra/"
			depmod -b "$root" "$kver"
			touch "$build/.built"
		else
			touch "$build/.failed"
			say "$kver: $name from linux-source-6.1 does not build against this kernel" \
				"($(grep -m1 'error' "$build/build.log" | sed 's/.*error: //')): no $name tests on it"
		fi
	done
done

# 4. The initramfs: busybox, the init script, and each kernel's 9p/overlay
# modules (decompressed: busybox insmod reads plain .ko files).
for kver in $GPUPERF_VM_KERNELS; do
	root="$cache/$kver"
	img="$root/initramfs.cpio.gz"
	if [ -f "$img" ] && [ "$img" -nt "$here/init" ]; then
		continue
	fi
	say "$kver: building the initramfs"
	tree=$(mktemp -d)
	mkdir -p "$tree/bin" "$tree/mods" "$tree/proc" "$tree/sys" "$tree/dev" "$tree/host" \
		"$tree/rw" "$tree/newroot"
	cp /bin/busybox "$tree/bin/busybox"
	for app in sh mount umount mkdir insmod poweroff cat echo chroot sleep ln mknod; do
		ln -s busybox "$tree/bin/$app"
	done
	cp "$here/init" "$tree/init"
	chmod +x "$tree/init"
	i=0
	modprobe -d "$root" -S "$kver" --show-depends -a virtio_pci 9pnet_virtio 9p overlay |
		awk '$1 == "insmod" { print $2 }' | awk '!seen[$0]++' | while read -r ko; do
		i=$((i + 1))
		dst="$tree/mods/$(printf '%02d' "$i")-$(basename "$ko" | sed -E 's/\.ko(\.xz|\.zst|\.gz)?$//').ko"
		case "$ko" in
		*.xz) xz -dc "$ko" >"$dst" ;;
		*.zst) zstd -qdc "$ko" >"$dst" ;;
		*.gz) gzip -dc "$ko" >"$dst" ;;
		*) cp "$ko" "$dst" ;;
		esac
	done
	(cd "$tree" && find . | cpio -o -H newc --quiet | gzip -1) >"$img.tmp"
	mv "$img.tmp" "$img"
	rm -rf "$tree"
done

say "ready in $(($(date +%s) - start)) s: $(du -sh "$cache" | cut -f1) in $cache"
say "kernels: $GPUPERF_VM_KERNELS"
echo "GPUPERF_KERNEL_VM_DIR=$cache"
echo "GPUPERF_VM_KERNELS=\"$GPUPERF_VM_KERNELS\""
echo "GPUPERF_REQUIRE_KERNEL_VM=1"
