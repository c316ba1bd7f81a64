#!/bin/sh
# Boots one of the kernel VM's Debian kernels under QEMU's software emulation
# (TCG), runs one command in it on the host's root (read-only, with a
# throw-away overlay), prints what it printed and exits with its exit code.
# One guest at a time: a second caller waits for the first.
#
#   sim/kernel/run.sh [-k KERNEL] [-t TIMEOUT_S] [-C DIR] [-e VAR=VALUE]... -- COMMAND [ARG]...
#
# KERNEL is a version prepared by sim/kernel/ci.sh (default: the first of
# GPUPERF_VM_KERNELS, else the first prepared). Exit code 125: the VM failed.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
cache=${GPUPERF_KERNEL_VM_DIR:-$(cd "$here/../.." && pwd)/target/kernel-vm}
kver=""
timeout=600
cwd=$(pwd)
envs=""
# Single-quotes a word for sh.
quote() { printf "'%s'" "$(printf '%s' "$1" | sed "s/'/'\\\\''/g")"; }
while [ $# -gt 0 ]; do
	case "$1" in
	-k) kver=$2; shift 2 ;;
	-t) timeout=$2; shift 2 ;;
	-C) cwd=$2; shift 2 ;;
	-e) envs="$envs export ${2%%=*}=$(quote "${2#*=}");"; shift 2 ;;
	--) shift; break ;;
	*) echo "run.sh: unknown option $1 (usage: run.sh [-k KERNEL] [-t S] [-C DIR] [-e VAR=VALUE] -- COMMAND...)" >&2; exit 125 ;;
	esac
done
[ $# -gt 0 ] || { echo "run.sh: no command given" >&2; exit 125; }
if [ -z "$kver" ]; then
	for k in ${GPUPERF_VM_KERNELS:-} $(ls "$cache" 2>/dev/null); do
		[ -f "$cache/$k/.ready" ] && { kver=$k; break; }
	done
fi
root=$cache/$kver
if [ -z "$kver" ] || [ ! -f "$root/.ready" ] || [ ! -f "$root/initramfs.cpio.gz" ]; then
	echo "run.sh: kernel '${kver:-none}' is not prepared in $cache: run sim/kernel/ci.sh" >&2
	exit 125
fi

mkdir -p "$cache/runs"
run=$(mktemp -d "$cache/runs/run.XXXXXX")
[ -n "${GPUPERF_VM_KEEP:-}" ] || trap 'rm -rf "$run"' EXIT
{
	echo "cd '$cwd' || exit 125"
	echo "export PATH='$PATH' HOME=/tmp GPUPERF_IN_KERNEL_VM='$kver'"
	echo "$envs"
	printf 'exec'
	for a in "$@"; do
		printf ' %s' "$(quote "$a")"
	done
	echo
} >"$run/cmd.sh"

# A kernel that dies while booting, before any module is loaded (so before
# init ran the command), is a flake of the emulation (seen once: a panic in
# sched_clock_cpu from an initcall); it is booted once more.
boot_crash() {
	grep -q 'Kernel panic' "$run/console" 2>/dev/null &&
		grep -q 'Modules linked in:[[:space:]]*$' "$run/console" &&
		! [ -s "$run/out" ]
}

# A guest kernel that locks up (softlockup_panic ends it at once, with every
# CPU's backtrace on the console) is booted once more, the backtraces said on
# stderr. Seen once in a CI run of the 6.1 guest on a busy machine: a CPU of
# a process the tests do not profile (pyenv's bash shim) and a thread of the
# test process both stuck in the kernel for minutes; not reproduced in runs
# of the same tests here, with or without load.
soft_lockup() {
	grep -aq 'soft lockup' "$run/console" 2>/dev/null &&
		! grep -aq '^GPUPERF-VM-EXIT ' "$run/out" 2>/dev/null
}

# A guest kernel that oopses while the command runs (oops=panic ends it at
# once), before the command's exit code, is booted once more, the oops said on
# stderr. Seen once in a CI run of the 6.12 guest on a busy machine, after
# every test in it had passed: "Fatal exception in interrupt" with the
# instruction pointer on a patched no-op of syscall_trace_enter (a jump label
# the kernel rewrites as tracepoints are switched on and off), which points at
# the emulation's handling of code modified under a running CPU.
command_oops() {
	grep -aq 'Kernel panic - not syncing' "$run/console" 2>/dev/null &&
		! grep -aq '^GPUPERF-VM-EXIT ' "$run/out" 2>/dev/null
}

exec 9>"$cache/vm.lock"
flock 9
for attempt in 1 2; do
	status=0
	timeout --foreground -k 5 "$timeout" qemu-system-x86_64 -accel tcg -cpu max \
		-smp "${GPUPERF_VM_CPUS:-2}" -m "${GPUPERF_VM_MEMORY:-2048}" \
		-nodefaults -nographic -no-reboot -display none \
		-kernel "$root/boot/vmlinuz-$kver" -initrd "$root/initramfs.cpio.gz" \
		-append "console=ttyS0 quiet loglevel=5 panic=-1 oops=panic softlockup_panic=1 softlockup_all_cpu_backtrace=1 gpuperf.cmd=$run/cmd.sh gpuperf.modules=$root/lib/modules" \
		-virtfs "local,path=/,mount_tag=host,security_model=none,readonly=on,multidevs=remap" \
		-serial "file:$run/console" -serial "file:$run/out" </dev/null >"$run/qemu.log" 2>&1 || status=$?
	[ "$attempt" = 1 ] || break
	if boot_crash; then
		echo "run.sh: the VM ($kver) crashed while booting, before the command; booting it again:" >&2
		grep -a -m1 -A1 'RIP:' "$run/console" >&2 || true
	elif soft_lockup; then
		echo "run.sh: the guest kernel ($kver) locked up (soft lockup) while running the command; running it once more. Its console:" >&2
		grep -a -A40 'soft lockup' "$run/console" | head -n 200 >&2 || true
	elif command_oops; then
		echo "run.sh: the guest kernel ($kver) panicked while running the command; running it once more. Its console:" >&2
		grep -a -B2 -A50 -m1 -E 'Oops|BUG:|invalid opcode|general protection|Kernel panic' "$run/console" | head -n 200 >&2 || true
	else
		break
	fi
	: >"$run/console"
	: >"$run/out"
done
exec 9>&-

code=$(sed -n 's/^GPUPERF-VM-EXIT \([0-9]*\).*/\1/p' "$run/out" 2>/dev/null | tail -n1)
grep -av '^GPUPERF-VM-EXIT ' "$run/out" 2>/dev/null | tr -d '\r' || true
if [ -z "$code" ]; then
	echo "run.sh: the VM ($kver) ended without the command's exit code (qemu status $status); its console:" >&2
	tail -n 40 "$run/console" "$run/qemu.log" >&2 2>/dev/null || true
	exit 125
fi
exit "$code"
