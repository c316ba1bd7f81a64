// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* GPU driver events: the DRM scheduler's job lifecycle, dma_fence, NVIDIA's
 * driver entry points and Xid errors. One record per event (an ioctl's is
 * sent at its return, with its duration), filtered by process here so a busy
 * system costs little. User space attaches only what the kernel has. */
#include <stdbool.h>
#include <linux/bpf.h>
#include <linux/ptrace.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "driver.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* The fields we read, relocated against the kernel's (or gpu-sched.ko's) BTF. */
typedef struct {
	int counter;
} atomic_t;

struct drm_gpu_scheduler {
	const char *name;
	atomic_t hw_rq_count;  /* up to 6.7 */
	atomic_t credit_count; /* 6.8 on */
} __attribute__((preserve_access_index));

struct dma_fence {
	__u64 context;
	__u64 seqno;
} __attribute__((preserve_access_index));

struct drm_sched_fence {
	struct dma_fence finished;
	struct drm_gpu_scheduler *sched;
} __attribute__((preserve_access_index));

struct drm_sched_job {
	struct drm_sched_fence *s_fence;
	struct drm_gpu_scheduler *sched;
} __attribute__((preserve_access_index));

struct spsc_queue {
	atomic_t job_count;
} __attribute__((preserve_access_index));

struct drm_sched_entity {
	struct spsc_queue job_queue;
} __attribute__((preserve_access_index));

/* The preempt count says whether this CPU serves an interrupt: a per-CPU
 * variable of its own up to 6.1 and again from 6.15, in pcpu_hot between. */
struct pcpu_hot {
	int preempt_count;
} __attribute__((preserve_access_index));

extern const int __preempt_count __ksym __weak;
extern const struct pcpu_hot pcpu_hot __ksym __weak;

#define HARDIRQ_MASK 0x000f0000
#define NMI_MASK 0x00f00000
#define SOFTIRQ_OFFSET 0x00000100

/* In a hard or soft interrupt (not merely with them disabled). */
static __always_inline bool in_irq_context(void)
{
	int pc = 0;
	if (bpf_ksym_exists(&pcpu_hot)) {
		struct pcpu_hot *h = bpf_this_cpu_ptr(&pcpu_hot);
		pc = h->preempt_count;
	} else if (bpf_ksym_exists(&__preempt_count)) {
		pc = *(int *)bpf_this_cpu_ptr(&__preempt_count);
	}
	return pc & (NMI_MASK | HARDIRQ_MASK | SOFTIRQ_OFFSET);
}

struct task_struct {
	int tgid;
} __attribute__((preserve_access_index));

/* pci_name(): dev_name() of the device inside the pci_dev. */
struct kobject {
	const char *name;
} __attribute__((preserve_access_index));

struct device {
	const char *init_name;
	struct kobject kobj;
} __attribute__((preserve_access_index));

struct pci_dev {
	struct device dev;
} __attribute__((preserve_access_index));

/* Force BTF for the record type. */
struct driver_event _driver_event = {0};

/* Filters: a process set (filter_pids), a command name, 1 in sample_every. */
const volatile bool filter_pids = false;
const volatile bool filter_comm = false;
const volatile char comm_filter[DRV_NAME_LEN] = {};
const volatile __u32 sample_every = 1;

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, __u8);
	__uint(max_entries, 1024);
} pids SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4 << 20);
} driver_events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, DSTAT_COUNT);
} driver_stats SEC(".maps");

/* A job's submitter, kept from drm_sched_job to drm_sched_process_job: the
 * scheduler runs and retires jobs in its own thread and in interrupts. */
struct submitter {
	__u32 pid;
	__u32 tid;
	char comm[DRV_NAME_LEN];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u64);
	__type(value, struct submitter);
	__uint(max_entries, 65536);
} jobs SEC(".maps");

struct ioctl_start {
	__u64 ts_ns;
	__u32 cmd;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, struct ioctl_start);
	__uint(max_entries, 16384);
} ioctls SEC(".maps");

/* One sampling sequence per event kind: a shared one aliased (with --sample 3
 * and a job's three events, every job kept or none). */
__u64 sample_seq[16] = {};

static __always_inline void count(__u32 index)
{
	__u64 *v = bpf_map_lookup_elem(&driver_stats, &index);
	if (v)
		*v += 1;
}

/* Whether the current task is one of the processes asked for. */
static __always_inline bool wanted(__u64 pid_tgid)
{
	if (filter_pids) {
		__u32 tgid = pid_tgid >> 32;
		if (!bpf_map_lookup_elem(&pids, &tgid))
			return false;
	}
	if (filter_comm) {
		char comm[DRV_NAME_LEN];
		bpf_get_current_comm(comm, sizeof(comm));
		for (int i = 0; i < DRV_NAME_LEN; i++) {
			if (comm[i] != comm_filter[i])
				return false;
			if (!comm[i])
				break;
		}
	}
	return true;
}

/* 1 in sample_every of the events of `kind` that match, counted. */
static __always_inline bool sampled(__u32 kind)
{
	if (sample_every <= 1)
		return true;
	if (__sync_fetch_and_add(&sample_seq[kind & 15], 1) % sample_every == 0)
		return true;
	count(DSTAT_SAMPLED_OUT);
	return false;
}

static __always_inline struct driver_event *reserve(__u32 kind)
{
	struct driver_event *e = bpf_ringbuf_reserve(&driver_events, sizeof(*e), 0);
	if (!e) {
		count(DSTAT_RINGBUF_DROPS);
		return NULL;
	}
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	e->ts_ns = bpf_ktime_get_ns();
	e->dur_ns = 0;
	e->id = 0;
	e->ret = 0;
	e->pid = pid_tgid >> 32;
	e->tid = (__u32)pid_tgid;
	e->kind = kind;
	e->arg = 0;
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	e->ring[0] = 0;
	e->msg[0] = 0;
	return e;
}

static __always_inline void submit(struct driver_event *e)
{
	count(DSTAT_KEPT);
	bpf_ringbuf_submit(e, 0);
}

/* A process-context event from the current task. */
static __always_inline int task_event(__u32 kind)
{
	if (!wanted(bpf_get_current_pid_tgid()) || !sampled(kind))
		return 0;
	struct driver_event *e = reserve(kind);
	if (e)
		submit(e);
	return 0;
}

SEC("kprobe/nvidia_open")
int BPF_KPROBE(nv_open)
{
	return task_event(DRV_OPEN);
}

SEC("kprobe/nvidia_mmap")
int BPF_KPROBE(nv_mmap)
{
	return task_event(DRV_MMAP);
}

SEC("kprobe/nvidia_unlocked_ioctl")
int BPF_KPROBE(nv_ioctl, void *file, unsigned int cmd)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	if (!wanted(pid_tgid))
		return 0;
	__u32 tid = (__u32)pid_tgid;
	struct ioctl_start s = {.ts_ns = bpf_ktime_get_ns(), .cmd = cmd};
	if (bpf_map_update_elem(&ioctls, &tid, &s, BPF_ANY))
		count(DSTAT_MAP_FULL);
	return 0;
}

SEC("kretprobe/nvidia_unlocked_ioctl")
int BPF_KRETPROBE(nv_ioctl_ret, long ret)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct ioctl_start *s = bpf_map_lookup_elem(&ioctls, &tid);
	if (!s)
		return 0;
	__u64 start = s->ts_ns;
	__u32 cmd = s->cmd;
	bpf_map_delete_elem(&ioctls, &tid);
	if (!sampled(DRV_IOCTL))
		return 0;
	struct driver_event *e = reserve(DRV_IOCTL);
	if (!e)
		return 0;
	e->dur_ns = e->ts_ns - start;
	e->ts_ns = start;
	e->arg = cmd;
	e->ret = ret;
	submit(e);
	return 0;
}

/* The interrupt and its bottom half belong to the driver, not a process:
 * kept whatever the process filters. */
static __always_inline int driver_event(__u32 kind)
{
	if (!sampled(kind))
		return 0;
	struct driver_event *e = reserve(kind);
	if (e)
		submit(e);
	return 0;
}

SEC("kprobe/nvidia_isr")
int BPF_KPROBE(nv_isr)
{
	return driver_event(DRV_ISR);
}

SEC("kprobe/nvidia_isr_kthread_bh")
int BPF_KPROBE(nv_isr_bh)
{
	return driver_event(DRV_ISR_BH);
}

/* nvidia:nvidia_dev_xid(pdev, error_code, msg): the device is named as the
 * tracepoint names it, pci_name(pdev) ("0000:3b:00.0"). */
SEC("raw_tp/nvidia_dev_xid")
int BPF_PROG(nv_xid, struct pci_dev *pdev, __u32 error_code, const char *msg)
{
	/* Errors are never sampled out. */
	struct driver_event *e = reserve(DRV_XID);
	if (!e)
		return 0;
	e->arg = error_code;
	/* dev_name(): the name given before registration, else the kobject's. */
	const char *dev = BPF_CORE_READ(pdev, dev.init_name);
	if (!dev)
		dev = BPF_CORE_READ(pdev, dev.kobj.name);
	if (dev)
		bpf_probe_read_kernel_str(e->ring, sizeof(e->ring), dev);
	bpf_probe_read_kernel_str(e->msg, sizeof(e->msg), msg);
	if (in_irq_context())
		e->ret = IN_IRQ;
	submit(e);
	return 0;
}

static __always_inline void ring_name(struct driver_event *e, struct drm_gpu_scheduler *sched)
{
	const char *name = BPF_CORE_READ(sched, name);
	bpf_probe_read_kernel_str(e->ring, sizeof(e->ring), name);
}

/* A job's id for users: its finished fence, context << 32 | seqno (the
 * scheduler fence's address, the key of the jobs map, is a kernel address). */
static __always_inline __u64 job_fence_id(struct drm_sched_fence *f)
{
	return BPF_CORE_READ(f, finished.context) << 32 |
	       (BPF_CORE_READ(f, finished.seqno) & 0xffffffff);
}

/* The queue depth the gpu_scheduler tracepoints print: the entity's queued
 * jobs (job_count) and the hardware's in flight (hw_job_count). */
static __always_inline void queue_depth(struct driver_event *e, struct drm_sched_entity *entity,
					struct drm_gpu_scheduler *sched)
{
	if (entity)
		e->arg = BPF_CORE_READ(entity, job_queue.job_count.counter);
	if (bpf_core_field_exists(sched->credit_count))
		e->ret = BPF_CORE_READ(sched, credit_count.counter);
	else
		e->ret = BPF_CORE_READ(sched, hw_rq_count.counter);
}

SEC("raw_tp/drm_sched_job")
int BPF_PROG(sched_job, struct drm_sched_job *job, struct drm_sched_entity *entity)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	/* Whole jobs: the later events follow this decision (the jobs map). */
	if (!wanted(pid_tgid) || !sampled(DRV_JOB_QUEUE))
		return 0;
	__u64 id = (__u64)BPF_CORE_READ(job, s_fence);
	struct submitter who = {.pid = pid_tgid >> 32, .tid = (__u32)pid_tgid};
	bpf_get_current_comm(who.comm, sizeof(who.comm));
	if (bpf_map_update_elem(&jobs, &id, &who, BPF_ANY)) {
		count(DSTAT_MAP_FULL);
		return 0;
	}
	struct driver_event *e = reserve(DRV_JOB_QUEUE);
	if (!e)
		return 0;
	struct drm_gpu_scheduler *sched = BPF_CORE_READ(job, sched);
	e->id = job_fence_id(BPF_CORE_READ(job, s_fence));
	ring_name(e, sched);
	queue_depth(e, entity, sched);
	submit(e);
	return 0;
}

/* A later event of a job that was kept at its queueing, in its submitter's
 * name. */
static __always_inline int job_event(__u32 kind, struct drm_sched_fence *fence,
				     struct drm_gpu_scheduler *sched, struct drm_sched_entity *entity,
				     bool last)
{
	__u64 id = (__u64)fence;
	struct submitter *who = bpf_map_lookup_elem(&jobs, &id);
	if (!who)
		return 0;
	struct driver_event *e = reserve(kind);
	if (e) {
		e->id = job_fence_id(fence);
		e->pid = who->pid;
		e->tid = who->tid;
		__builtin_memcpy(e->comm, who->comm, sizeof(e->comm));
		ring_name(e, sched);
		if (kind == DRV_JOB_RUN)
			queue_depth(e, entity, sched);
		submit(e);
	}
	if (last)
		bpf_map_delete_elem(&jobs, &id);
	return 0;
}

SEC("raw_tp/drm_run_job")
int BPF_PROG(run_job, struct drm_sched_job *job, struct drm_sched_entity *entity)
{
	return job_event(DRV_JOB_RUN, BPF_CORE_READ(job, s_fence), BPF_CORE_READ(job, sched), entity,
			 false);
}

SEC("raw_tp/drm_sched_job_wait_dep")
int BPF_PROG(job_wait_dep, struct drm_sched_job *job)
{
	return job_event(DRV_JOB_DEP, BPF_CORE_READ(job, s_fence), BPF_CORE_READ(job, sched), NULL,
			 false);
}

SEC("raw_tp/drm_sched_process_job")
int BPF_PROG(process_job, struct drm_sched_fence *fence)
{
	return job_event(DRV_JOB_DONE, fence, BPF_CORE_READ(fence, sched), NULL, true);
}

/* The fences a wanted process made, kept from dma_fence_init to
 * dma_fence_signaled: a fence is often signalled in an interrupt or another
 * thread, which the process filter would drop. LRU: a fence destroyed without
 * being signalled is forgotten in time. Only filled when filtering. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, __u64);
	__type(value, struct submitter);
	__uint(max_entries, 65536);
} fences SEC(".maps");

static __always_inline __u64 fence_id(struct dma_fence *fence)
{
	return BPF_CORE_READ(fence, context) << 32 | (BPF_CORE_READ(fence, seqno) & 0xffffffff);
}

SEC("raw_tp/dma_fence_init")
int BPF_PROG(fence_init, struct dma_fence *fence)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	if (!wanted(pid_tgid) || !sampled(DRV_FENCE_INIT))
		return 0;
	__u64 id = fence_id(fence);
	if (filter_pids || filter_comm) {
		struct submitter who = {.pid = pid_tgid >> 32, .tid = (__u32)pid_tgid};
		bpf_get_current_comm(who.comm, sizeof(who.comm));
		if (bpf_map_update_elem(&fences, &id, &who, BPF_ANY))
			count(DSTAT_MAP_FULL);
	}
	struct driver_event *e = reserve(DRV_FENCE_INIT);
	if (!e)
		return 0;
	e->id = id;
	submit(e);
	return 0;
}

/* Kept if the fence was made by a wanted process (then in that process's
 * name, wherever it is signalled), or if the signalling task is wanted and
 * not merely interrupted. In an interrupt it is in nobody's name (pid 0). */
SEC("raw_tp/dma_fence_signaled")
int BPF_PROG(fence_signaled, struct dma_fence *fence)
{
	__u64 id = fence_id(fence);
	struct submitter *who = NULL;
	if (filter_pids || filter_comm)
		who = bpf_map_lookup_elem(&fences, &id);
	bool irq = in_irq_context();
	if (!who && ((irq && (filter_pids || filter_comm)) || !wanted(bpf_get_current_pid_tgid())))
		return 0;
	/* A fence kept at its init is kept at its signal (init was sampled). */
	if (!who && !sampled(DRV_FENCE_SIGNALED))
		return 0;
	struct driver_event *e = reserve(DRV_FENCE_SIGNALED);
	if (e) {
		e->id = id;
		if (who) {
			e->pid = who->pid;
			e->tid = who->tid;
			__builtin_memcpy(e->comm, who->comm, sizeof(e->comm));
		} else if (irq) {
			e->pid = 0;
			e->tid = 0;
			__builtin_memcpy(e->comm, "[interrupt]", 12);
		}
		if (irq)
			e->ret = IN_IRQ;
		submit(e);
	}
	if (who)
		bpf_map_delete_elem(&fences, &id);
	return 0;
}

/* A recording's process tree: a child of a traced process is traced from its
 * fork on, before it can open the driver. */
SEC("raw_tp/sched_process_fork")
int BPF_PROG(follow_fork, struct task_struct *parent, struct task_struct *child)
{
	if (!filter_pids)
		return 0;
	__u32 tgid = BPF_CORE_READ(parent, tgid);
	if (!bpf_map_lookup_elem(&pids, &tgid))
		return 0;
	__u32 child_tgid = BPF_CORE_READ(child, tgid);
	__u8 one = 1;
	bpf_map_update_elem(&pids, &child_tgid, &one, BPF_ANY);
	return 0;
}

/* drm:drm_vblank_event* (the DRM core's vblank handling, any KMS driver).
 * Their CRTC is an index on its device; the tracepoints name no device. */
static __always_inline void crtc_name(struct driver_event *e, int crtc)
{
	/* "crtc N", N < 1000 (a device has at most 32 CRTCs). */
	__builtin_memcpy(e->ring, "crtc ", 5);
	unsigned int n = crtc < 0 ? 0 : (unsigned int)crtc % 1000, i = 5;
	if (n >= 100)
		e->ring[i++] = '0' + n / 100;
	if (n >= 10)
		e->ring[i++] = '0' + n / 10 % 10;
	e->ring[i++] = '0' + n % 10;
	e->ring[i & (DRV_NAME_LEN - 1)] = 0;
}

/* A vblank happens in an interrupt or a timer, for no process: kept like the
 * driver's interrupts, whatever the process filters. */
SEC("raw_tp/drm_vblank_event")
int BPF_PROG(vblank, int crtc, unsigned int seq, __s64 time, bool high_prec)
{
	if (!sampled(DRV_VBLANK))
		return 0;
	struct driver_event *e = reserve(DRV_VBLANK);
	if (!e)
		return 0;
	e->arg = seq;
	e->ret = time;
	crtc_name(e, crtc);
	if (high_prec)
		__builtin_memcpy(e->msg, "high_prec", 10);
	submit(e);
	return 0;
}

/* The asker of each DRM file's vblank events, kept from its queueing to
 * their delivery (in the vblank's interrupt, or at once in the asking
 * thread). LRU: a closed file is forgotten in time. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, __u64);
	__type(value, struct submitter);
	__uint(max_entries, 4096);
} vblank_files SEC(".maps");

SEC("raw_tp/drm_vblank_event_queued")
int BPF_PROG(vblank_queued, void *file, int crtc, unsigned int seq)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u64 key = (__u64)file;
	if (!wanted(pid_tgid)) {
		/* A file address reused by a process not asked for. */
		bpf_map_delete_elem(&vblank_files, &key);
		return 0;
	}
	struct submitter who = {.pid = pid_tgid >> 32, .tid = (__u32)pid_tgid};
	bpf_get_current_comm(who.comm, sizeof(who.comm));
	if (bpf_map_update_elem(&vblank_files, &key, &who, BPF_ANY))
		count(DSTAT_MAP_FULL);
	if (!sampled(DRV_VBLANK_QUEUED))
		return 0;
	struct driver_event *e = reserve(DRV_VBLANK_QUEUED);
	if (!e)
		return 0;
	e->id = key;
	e->arg = seq;
	crtc_name(e, crtc);
	submit(e);
	return 0;
}

/* Kept in the asker's name when its file queued a vblank event, else if the
 * delivering task is wanted (a page-flip event delivered in its own thread).
 * The kernel's own commit events (no file) belong to nobody: not sent. */
SEC("raw_tp/drm_vblank_event_delivered")
int BPF_PROG(vblank_delivered, void *file, int crtc, unsigned int seq)
{
	__u64 key = (__u64)file;
	if (!key)
		return 0;
	struct submitter *who = bpf_map_lookup_elem(&vblank_files, &key);
	if (!who && !wanted(bpf_get_current_pid_tgid()))
		return 0;
	if (!sampled(DRV_VBLANK_DELIVERED))
		return 0;
	struct driver_event *e = reserve(DRV_VBLANK_DELIVERED);
	if (!e)
		return 0;
	e->id = key;
	e->arg = seq;
	crtc_name(e, crtc);
	if (who) {
		e->pid = who->pid;
		e->tid = who->tid;
		__builtin_memcpy(e->comm, who->comm, sizeof(e->comm));
	}
	submit(e);
	return 0;
}
