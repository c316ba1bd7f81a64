// SPDX-License-Identifier: GPL-2.0
/*
 * Simulated GPU rings on the kernel's DRM scheduler (gpu-sched.ko), no GPU:
 * user threads submit jobs through /dev/drm-sched-sim, so the scheduler's
 * own gpu_scheduler tracepoints (drm_sched_job, drm_run_job,
 * drm_sched_process_job, drm_sched_job_wait_dep) and dma_fence events fire
 * as they would for a real driver. A job "runs" for the microseconds it asks
 * for: an hrtimer signals its hardware fence; nothing executes.
 *
 * ioctl(fd, DRM_SCHED_SIM_SUBMIT, &struct drm_sched_sim_submit) queues one job
 * on ring `ring` (0 or 1) of this file's entity; with dep_us > 0 the job first
 * waits on a fence that signals dep_us after submission.
 * ioctl(fd, DRM_SCHED_SIM_WAIT, 0) returns once every job of this file is done.
 *
 * Counters: /sys/kernel/debug/drm_sched_sim/{submitted,run,done,deps}.
 */
#include <drm/gpu_scheduler.h>
#include <linux/atomic.h>
#include <linux/debugfs.h>
#include <linux/dma-fence.h>
#include <linux/hrtimer.h>
#include <linux/miscdevice.h>
#include <linux/module.h>
#include <linux/slab.h>
#include <linux/uaccess.h>
#include <linux/version.h>

#define NRINGS 2

struct drm_sched_sim_submit {
	__u32 ring;
	__u32 run_us;
	__u32 dep_us;
	__u32 pad;
};

#define DRM_SCHED_SIM_SUBMIT _IOW('S', 1, struct drm_sched_sim_submit)
#define DRM_SCHED_SIM_WAIT _IO('S', 2)

static struct drm_gpu_scheduler rings[NRINGS];
static const char *const ring_names[NRINGS] = {"sim-ring0", "sim-ring1"};
static u64 fence_ctx;
static atomic64_t fence_seq;
static DEFINE_SPINLOCK(fence_lock);
static atomic_t submitted, run, done, deps;
static struct dentry *dir;

/* A fence an hrtimer signals: a job's hardware fence or its dependency. */
struct sim_fence {
	struct dma_fence base;
	struct hrtimer timer;
};

static const char *sim_driver_name(struct dma_fence *f)
{
	return "drm_sched_sim";
}

static const char *sim_timeline_name(struct dma_fence *f)
{
	return "simulated";
}

static const struct dma_fence_ops sim_fence_ops = {
	.get_driver_name = sim_driver_name,
	.get_timeline_name = sim_timeline_name,
};

static enum hrtimer_restart sim_fence_fire(struct hrtimer *t)
{
	struct sim_fence *f = container_of(t, struct sim_fence, timer);

	dma_fence_signal(&f->base);
	dma_fence_put(&f->base);
	return HRTIMER_NORESTART;
}

/* A fence that signals after us microseconds (holds its own reference until). */
static struct dma_fence *sim_fence_after(u32 us)
{
	struct sim_fence *f = kzalloc(sizeof(*f), GFP_KERNEL);

	if (!f)
		return NULL;
	dma_fence_init(&f->base, &sim_fence_ops, &fence_lock, fence_ctx,
		       atomic64_inc_return(&fence_seq));
	dma_fence_get(&f->base);
	hrtimer_init(&f->timer, CLOCK_MONOTONIC, HRTIMER_MODE_REL);
	f->timer.function = sim_fence_fire;
	hrtimer_start(&f->timer, ns_to_ktime((u64)us * 1000), HRTIMER_MODE_REL);
	return &f->base;
}

struct sim_job {
	struct drm_sched_job base;
	u32 run_us;
};

struct sim_file {
	struct drm_sched_entity entity[NRINGS];
	struct drm_gpu_scheduler *sched[NRINGS];
	bool used[NRINGS];
	struct dma_fence *last;
	struct mutex lock;
};

static struct dma_fence *sim_run_job(struct drm_sched_job *job)
{
	struct sim_job *j = container_of(job, struct sim_job, base);

	atomic_inc(&run);
	return sim_fence_after(j->run_us);
}

static void sim_free_job(struct drm_sched_job *job)
{
	atomic_inc(&done);
	drm_sched_job_cleanup(job);
	kfree(container_of(job, struct sim_job, base));
}

static enum drm_gpu_sched_stat sim_timedout_job(struct drm_sched_job *job)
{
	return DRM_GPU_SCHED_STAT_NOMINAL;
}

static const struct drm_sched_backend_ops sim_ops = {
	.run_job = sim_run_job,
	.free_job = sim_free_job,
	.timedout_job = sim_timedout_job,
};

static int sim_open(struct inode *inode, struct file *file)
{
	struct sim_file *sf = kzalloc(sizeof(*sf), GFP_KERNEL);

	if (!sf)
		return -ENOMEM;
	mutex_init(&sf->lock);
	file->private_data = sf;
	return 0;
}

static int sim_release(struct inode *inode, struct file *file)
{
	struct sim_file *sf = file->private_data;
	int i;

	for (i = 0; i < NRINGS; i++)
		if (sf->used[i])
			drm_sched_entity_destroy(&sf->entity[i]);
	if (sf->last)
		dma_fence_put(sf->last);
	kfree(sf);
	return 0;
}

static long sim_submit(struct sim_file *sf, struct drm_sched_sim_submit *s)
{
	struct sim_job *j;
	int err;

	if (s->ring >= NRINGS || s->run_us > 1000000 || s->dep_us > 1000000)
		return -EINVAL;
	if (!sf->used[s->ring]) {
		sf->sched[s->ring] = &rings[s->ring];
		err = drm_sched_entity_init(&sf->entity[s->ring], DRM_SCHED_PRIORITY_NORMAL,
					    &sf->sched[s->ring], 1, NULL);
		if (err)
			return err;
		sf->used[s->ring] = true;
	}
	j = kzalloc(sizeof(*j), GFP_KERNEL);
	if (!j)
		return -ENOMEM;
	j->run_us = s->run_us;
#if defined(SIM_JOB_CLIENT_ID)
	err = drm_sched_job_init(&j->base, &sf->entity[s->ring], 1, sf, 0);
#elif defined(SIM_JOB_CREDITS)
	err = drm_sched_job_init(&j->base, &sf->entity[s->ring], 1, sf);
#else
	err = drm_sched_job_init(&j->base, &sf->entity[s->ring], sf);
#endif
	if (err) {
		kfree(j);
		return err;
	}
	if (s->dep_us) {
		struct dma_fence *dep = sim_fence_after(s->dep_us);

		if (!dep) {
			drm_sched_job_cleanup(&j->base);
			kfree(j);
			return -ENOMEM;
		}
		atomic_inc(&deps);
		/* The job takes over this reference. */
		err = drm_sched_job_add_dependency(&j->base, dep);
		if (err) {
			drm_sched_job_cleanup(&j->base);
			kfree(j);
			return err;
		}
	}
	drm_sched_job_arm(&j->base);
	if (sf->last)
		dma_fence_put(sf->last);
	sf->last = dma_fence_get(&j->base.s_fence->finished);
	atomic_inc(&submitted);
	drm_sched_entity_push_job(&j->base);
	return 0;
}

static long sim_ioctl(struct file *file, unsigned int cmd, unsigned long arg)
{
	struct sim_file *sf = file->private_data;
	struct drm_sched_sim_submit s;
	struct dma_fence *last;
	long err;

	switch (cmd) {
	case DRM_SCHED_SIM_SUBMIT:
		if (copy_from_user(&s, (void __user *)arg, sizeof(s)))
			return -EFAULT;
		mutex_lock(&sf->lock);
		err = sim_submit(sf, &s);
		mutex_unlock(&sf->lock);
		return err;
	case DRM_SCHED_SIM_WAIT:
		mutex_lock(&sf->lock);
		last = sf->last ? dma_fence_get(sf->last) : NULL;
		mutex_unlock(&sf->lock);
		if (!last)
			return 0;
		err = dma_fence_wait(last, true);
		dma_fence_put(last);
		/* Every job of this file is done once its scheduler freed them. */
		for (s.ring = 0; s.ring < NRINGS; s.ring++)
			if (sf->used[s.ring])
				drm_sched_entity_flush(&sf->entity[s.ring], MAX_SCHEDULE_TIMEOUT);
		return err < 0 ? err : 0;
	default:
		return -ENOTTY;
	}
}

static const struct file_operations sim_fops = {
	.owner = THIS_MODULE,
	.open = sim_open,
	.release = sim_release,
	.unlocked_ioctl = sim_ioctl,
};

static struct miscdevice sim_misc = {
	.minor = MISC_DYNAMIC_MINOR,
	.name = "drm-sched-sim",
	.fops = &sim_fops,
	.mode = 0666,
};

static int __init sim_init(void)
{
	int i, err;

	fence_ctx = dma_fence_context_alloc(1);
	for (i = 0; i < NRINGS; i++) {
#if defined(SIM_INIT_ARGS)
		struct drm_sched_init_args args = {
			.ops = &sim_ops,
#ifdef SIM_NUM_RQS
			.num_rqs = DRM_SCHED_PRIORITY_COUNT,
#endif
			.credit_limit = 64,
			.timeout = MAX_SCHEDULE_TIMEOUT,
			.name = ring_names[i],
		};

		err = drm_sched_init(&rings[i], &args);
#elif defined(SIM_SUBMIT_WQ)
		err = drm_sched_init(&rings[i], &sim_ops, NULL, DRM_SCHED_PRIORITY_COUNT, 64, 0,
				     MAX_SCHEDULE_TIMEOUT, NULL, NULL, ring_names[i],
				     sim_misc.this_device);
#else
		err = drm_sched_init(&rings[i], &sim_ops, 64, 0, MAX_SCHEDULE_TIMEOUT, NULL, NULL,
				     ring_names[i], sim_misc.this_device);
#endif
		if (err) {
			while (i--)
				drm_sched_fini(&rings[i]);
			return err;
		}
	}
	err = misc_register(&sim_misc);
	if (err) {
		for (i = 0; i < NRINGS; i++)
			drm_sched_fini(&rings[i]);
		return err;
	}
	dir = debugfs_create_dir("drm_sched_sim", NULL);
	debugfs_create_atomic_t("submitted", 0444, dir, &submitted);
	debugfs_create_atomic_t("run", 0444, dir, &run);
	debugfs_create_atomic_t("done", 0444, dir, &done);
	debugfs_create_atomic_t("deps", 0444, dir, &deps);
	pr_info("drm_sched_sim: simulated rings sim-ring0, sim-ring1 on /dev/drm-sched-sim (no GPU)\n");
	return 0;
}

static void __exit sim_exit(void)
{
	int i;

	debugfs_remove_recursive(dir);
	misc_deregister(&sim_misc);
	for (i = 0; i < NRINGS; i++)
		drm_sched_fini(&rings[i]);
}

module_init(sim_init);
module_exit(sim_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("Simulated GPU rings on the DRM scheduler for gpuperf's tests (no GPU)");
