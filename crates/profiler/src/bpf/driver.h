/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Records of GPU driver events, shared by driver.bpf.c and the Rust reader. */
#ifndef GPUPERF_DRIVER_H
#define GPUPERF_DRIVER_H

/* What a driver_event records. */
enum driver_kind {
	DRV_OPEN = 1,      /* nvidia_open */
	DRV_IOCTL = 2,     /* nvidia_unlocked_ioctl, entry to return */
	DRV_MMAP = 3,      /* nvidia_mmap */
	DRV_ISR = 4,       /* nvidia_isr (interrupt context) */
	DRV_ISR_BH = 5,    /* nvidia_isr_kthread_bh (the driver's kernel thread) */
	DRV_XID = 6,       /* nvidia:nvidia_dev_xid */
	DRV_JOB_QUEUE = 7, /* gpu_scheduler:drm_sched_job */
	DRV_JOB_RUN = 8,   /* gpu_scheduler:drm_run_job */
	DRV_JOB_DONE = 9,  /* gpu_scheduler:drm_sched_process_job */
	DRV_JOB_DEP = 10,  /* gpu_scheduler:drm_sched_job_wait_dep */
	DRV_FENCE_INIT = 11,     /* dma_fence:dma_fence_init */
	DRV_FENCE_SIGNALED = 12, /* dma_fence:dma_fence_signaled */
	DRV_VBLANK = 13,         /* drm:drm_vblank_event (interrupt or timer context) */
	DRV_VBLANK_QUEUED = 14,  /* drm:drm_vblank_event_queued */
	DRV_VBLANK_DELIVERED = 15, /* drm:drm_vblank_event_delivered */
};

/* Counters in the stats array. */
enum driver_stat {
	DSTAT_KEPT,          /* events sent */
	DSTAT_SAMPLED_OUT,   /* matched the filters, left out by --sample */
	DSTAT_RINGBUF_DROPS, /* matched and sampled, lost to a full ring buffer */
	DSTAT_MAP_FULL,      /* ioctl or job starts not remembered (map full) */
	DSTAT_COUNT,
};

/* `ret` of an Xid or a fence signal made in an interrupt (hard or soft):
 * its task is whichever one the interrupt came upon. */
#define IN_IRQ 1

#define DRV_NAME_LEN 16
#define DRV_MSG_LEN 64

struct driver_event {
	__u64 ts_ns;  /* bpf_ktime_get_ns (CLOCK_MONOTONIC); an ioctl's entry */
	__u64 dur_ns; /* an ioctl's entry to return */
	__u64 id;     /* a job's finished fence, context << 32 | seqno (the
		       * same on its four events); a fence's context << 32 |
		       * seqno; a vblank event's DRM file address */
	__s64 ret;    /* an ioctl's return value; a vblank's own timestamp;
		       * a job queued or run: the hardware's jobs in flight
		       * (hw_job_count); an Xid or a fence signal: IN_IRQ when
		       * in interrupt context */
	__u32 pid;    /* for job events after the queue: the submitter's */
	__u32 tid;
	__u32 kind;   /* enum driver_kind */
	__u32 arg;    /* ioctl: the command; Xid: its number; vblank events:
		       * the sequence number (queued: the one asked for); a job
		       * queued or run: its entity's queued jobs (job_count) */
	char comm[DRV_NAME_LEN];
	char ring[DRV_NAME_LEN]; /* job events: the scheduler's name; Xid: the
				  * device; vblank events: "crtc N" */
	char msg[DRV_MSG_LEN];   /* Xid: the message; a vblank: "high_prec" when
				  * its timestamp is */
};

#endif
