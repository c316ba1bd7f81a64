// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Launch-stack probes: one fixed-size record per launch, stacks deduplicated by
 * the kernel's stack map and sent once each. See the crate docs for why the
 * stack is taken at the launch API's entry and joined at the marker. */
#include <stdbool.h>
#include <linux/bpf.h>
#include <linux/ptrace.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "launch.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#define EEXIST 17

/* The fields we read, relocated against the running kernel's BTF. */
struct task_struct {
	int pid;
	int tgid;
} __attribute__((preserve_access_index));

struct linux_binprm {
	const char *filename;
} __attribute__((preserve_access_index));

/* Set before load. */
const volatile bool filter_pids = false;

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 8 << 20);
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_STACK_TRACE);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, MAX_STACK_DEPTH * sizeof(__u64));
	__uint(max_entries, 16384);
} stacks SEC(".maps");

/* stack id -> 1 once its frames were sent; same size as `stacks`. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, 16384);
} stack_sent SEC(".maps");

/* Processes to trace (tgid), and their threads once they fork. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, __u8);
	__uint(max_entries, 65536);
} targets SEC(".maps");

/* The stack taken at a launch API's entry, waiting for its marker. Slots are
 * indexed by TID modulo the size and hold the TID they belong to: an array
 * lookup costs a fraction of a hash update, and two live threads sharing a
 * slot only cost one join (that launch then gets the marker's stack). */
struct pending {
	__u64 ts;
	__u64 sp;
	__u64 ret;
	__s32 stack_id;
	__u32 cpu;
	__u32 tid;
	__u32 tgid;
};

#define PENDING_SLOTS 65536

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct pending);
	__uint(max_entries, PENDING_SLOTS);
} pending SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, STAT_COUNT);
} stats SEC(".maps");

__u32 next_inline_id = 0;

/* Wake the reader only once a batch is waiting: a wake-up per record costs
 * more than the rest of the probe. The reader also polls on a short timer. */
#define WAKEUP_BYTES (256 << 10)

static __always_inline __u64 wakeup_flag(void)
{
	return bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) >= WAKEUP_BYTES
		       ? BPF_RB_FORCE_WAKEUP
		       : BPF_RB_NO_WAKEUP;
}

static __always_inline void count(__u32 index)
{
	__u64 *v = bpf_map_lookup_elem(&stats, &index);
	if (v)
		*v += 1;
}

static __always_inline bool traced(__u64 pid_tgid)
{
	if (!filter_pids)
		return true;
	__u32 tgid = pid_tgid >> 32;
	return bpf_map_lookup_elem(&targets, &tgid) != NULL;
}

/* Sends the (build id, offset) frames of the current user stack. */
static __always_inline bool send_stack(void *ctx, __s32 id, __u32 pid)
{
	struct stack_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		count(STAT_STACK_DROPS);
		return false;
	}
	e->kind = EVENT_STACK;
	e->stack_id = id;
	e->pid = pid;
	long n = bpf_get_stack(ctx, e->frames, sizeof(e->frames),
			       BPF_F_USER_STACK | BPF_F_USER_BUILD_ID);
	e->size = n > 0 ? n : 0;
	bpf_ringbuf_submit(e, wakeup_flag());
	return true;
}

/* The user stack's id; its frames are sent the first time it is seen. */
static __always_inline __s32 take_stack(void *ctx, __u32 pid)
{
	long id = bpf_get_stackid(ctx, &stacks, BPF_F_USER_STACK);
	if (id >= 0) {
		__u32 key = id;
		__u32 *sent = bpf_map_lookup_elem(&stack_sent, &key);
		if (sent && *sent == 0 && __sync_lock_test_and_set(sent, 1) == 0) {
			if (!send_stack(ctx, id, pid))
				*sent = 0; /* try again next time */
		}
		return id;
	}
	if (id == -EEXIST) {
		/* Another stack holds this hash bucket: send this one inline. */
		count(STAT_STACK_COLLISIONS);
		__s32 inline_id = INLINE_STACK_ID_BASE +
				  (__sync_fetch_and_add(&next_inline_id, 1) & 0x3fffffff);
		if (send_stack(ctx, inline_id, pid))
			return inline_id;
		return -1;
	}
	count(STAT_STACK_ERRORS);
	return id;
}

static __always_inline void emit_launch(__u64 pid_tgid, __u64 ts, __u32 cpu,
					__u64 corr, __u64 callback, __s32 stack_id,
					__u32 origin)
{
	struct launch_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		count(STAT_LAUNCH_DROPS);
		return;
	}
	e->kind = EVENT_LAUNCH;
	e->pid = pid_tgid >> 32;
	e->tid = (__u32)pid_tgid;
	e->cpu = cpu;
	e->ts = ts;
	e->correlation_id = corr;
	e->callback = callback;
	e->stack_id = stack_id;
	e->origin = origin;
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	bpf_ringbuf_submit(e, wakeup_flag());
}

/* Cookie bit: emit a record here (compatibility mode, no marker follows). */
#define COOKIE_EMIT (1ULL << 63)

SEC("uprobe")
int launch_entry(struct pt_regs *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	if (!traced(pid_tgid))
		return 0;
	count(STAT_ENTRIES);
	__u64 ts = bpf_ktime_get_ns();
	__u32 cpu = bpf_get_smp_processor_id();
	__s32 stack_id = take_stack(ctx, pid_tgid >> 32);

	if (bpf_get_attach_cookie(ctx) & COOKIE_EMIT) {
		emit_launch(pid_tgid, ts, cpu, 0, 0, stack_id, STACK_AT_ENTRY);
		return 0;
	}
	__u32 slot = (__u32)pid_tgid % PENDING_SLOTS;
	struct pending *p = bpf_map_lookup_elem(&pending, &slot);
	if (!p)
		return 0;
	p->ts = ts;
	p->sp = PT_REGS_SP(ctx);
	p->stack_id = stack_id;
	p->cpu = cpu;
	p->tid = (__u32)pid_tgid;
	p->tgid = pid_tgid >> 32;
	/* The return address identifies this call while its frame is live. */
	if (bpf_probe_read_user(&p->ret, sizeof(p->ret), (void *)p->sp))
		p->sp = 0;
	return 0;
}

SEC("uprobe")
int launch_marker(struct pt_regs *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	if (!traced(pid_tgid))
		return 0;
	count(STAT_MARKERS);
	__u64 corr = PT_REGS_PARM1(ctx);
	__u64 callback = PT_REGS_PARM2(ctx);

	__u32 slot = (__u32)pid_tgid % PENDING_SLOTS;
	struct pending *p = bpf_map_lookup_elem(&pending, &slot);
	if (p && p->sp && p->tid == (__u32)pid_tgid && p->tgid == pid_tgid >> 32) {
		/* Accept the entry's stack only if that call is still on this
		 * thread's stack, i.e. the marker runs inside it. A stale entry
		 * (an API call without a marker) fails one of these checks. */
		__u64 ret = 0;
		if (p->sp > PT_REGS_SP(ctx) &&
		    bpf_probe_read_user(&ret, sizeof(ret), (void *)p->sp) == 0 &&
		    ret == p->ret) {
			__u64 ts = p->ts;
			__u32 cpu = p->cpu;
			__s32 stack_id = p->stack_id;
			p->sp = 0; /* consumed */
			count(STAT_MARKER_ENTRY_STACK);
			emit_launch(pid_tgid, ts, cpu, corr, callback, stack_id,
				    STACK_AT_ENTRY);
			return 0;
		}
		p->sp = 0;
	}
	count(STAT_MARKER_OWN_STACK);
	__s32 stack_id = take_stack(ctx, pid_tgid >> 32);
	emit_launch(pid_tgid, bpf_ktime_get_ns(), bpf_get_smp_processor_id(), corr,
		    callback, stack_id, STACK_AT_MARKER);
	return 0;
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(follow_fork, struct task_struct *parent, struct task_struct *child)
{
	__u32 tgid = parent->tgid;
	if (!bpf_map_lookup_elem(&targets, &tgid))
		return 0;
	__u32 child_tgid = child->tgid;
	__u8 one = 1;
	bpf_map_update_elem(&targets, &child_tgid, &one, BPF_ANY);
	return 0;
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(on_exec, struct task_struct *p, int old_pid, struct linux_binprm *bprm)
{
	__u32 tgid = p->tgid;
	if (filter_pids && !bpf_map_lookup_elem(&targets, &tgid))
		return 0;
	struct exec_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		count(STAT_EXEC_DROPS);
		return 0;
	}
	e->kind = EVENT_EXEC;
	e->pid = tgid;
	bpf_probe_read_kernel_str(e->filename, sizeof(e->filename), bprm->filename);
	bpf_ringbuf_submit(e, wakeup_flag());
	return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(forget_exit, struct task_struct *p)
{
	if (p->pid != p->tgid)
		return 0;
	__u32 tgid = p->tgid;
	bpf_map_delete_elem(&targets, &tgid);
	return 0;
}
