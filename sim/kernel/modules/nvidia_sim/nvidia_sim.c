// SPDX-License-Identifier: GPL-2.0
/*
 * Simulated NVIDIA driver (no GPU, no real driver code): functions with the
 * names of nvidia.ko's entry points (nvidia_open, nvidia_unlocked_ioctl,
 * nvidia_mmap, nvidia_isr, nvidia_isr_kthread_bh) behind /dev/nvidia-sim, so
 * kprobes attach by those names and fire from user threads, plus the
 * nvidia:nvidia_dev_xid tracepoint. It does no GPU work: ioctls sleep for the
 * microseconds they are given, mmap fails with -ENODEV.
 *
 * ioctl(fd, cmd, arg) by _IOC_NR(cmd):
 *   NV_SIM_NR_IRQ (0xf0): raise `arg` simulated interrupts (hard-irq context
 *                         through irq_work), each with a bottom half on the
 *                         "nv_queue" kernel thread; returns once all have run
 *   NV_SIM_NR_XID (0xf1): fire nvidia:nvidia_dev_xid with Xid `arg`
 *   anything else:        sleep `arg` microseconds (at most 1 s), return 0
 *
 * Counters (what the kernel saw, for tests to compare with their events):
 * /sys/kernel/debug/nvidia_sim/{opens,ioctls,mmaps,isrs,bhs,xids}.
 */
#include <linux/atomic.h>
#include <linux/completion.h>
#include <linux/debugfs.h>
#include <linux/delay.h>
#include <linux/fs.h>
#include <linux/irq_work.h>
#include <linux/kthread.h>
#include <linux/miscdevice.h>
#include <linux/module.h>
#include <linux/pci.h>

#define CREATE_TRACE_POINTS
#include "nvidia_sim_trace.h"

#define NV_SIM_NR_IRQ 0xf0
#define NV_SIM_NR_XID 0xf1
/* The simulated GPU's PCI name; a pci_dev that is only a name, as the
 * tracepoint reads nothing else (a real device's name is its kobject's). */
#define NV_SIM_DEV "0000:00:00.0"
static struct pci_dev nv_sim_pdev;

static atomic_t opens, ioctls, mmaps, isrs, bhs, xids;
static struct dentry *dir;
static struct kthread_worker *bh_worker;
static DEFINE_MUTEX(irq_lock);

/* One simulated interrupt in flight at a time (irq_lock). */
static struct {
	struct irq_work work;
	struct kthread_work bh;
	struct completion done;
} irq;

noinline void nvidia_isr_kthread_bh(void *arg)
{
	atomic_inc(&bhs);
	complete(&irq.done);
}

static void bh_fn(struct kthread_work *w)
{
	nvidia_isr_kthread_bh(w);
}

noinline int nvidia_isr(int irqn, void *arg)
{
	atomic_inc(&isrs);
	kthread_queue_work(bh_worker, &irq.bh);
	return 1; /* IRQ_HANDLED */
}

static void irq_fn(struct irq_work *w)
{
	nvidia_isr(0, w);
}

noinline int nvidia_open(struct inode *inode, struct file *file)
{
	atomic_inc(&opens);
	return 0;
}

static int nv_release(struct inode *inode, struct file *file)
{
	return 0;
}

noinline long nvidia_unlocked_ioctl(struct file *file, unsigned int cmd, unsigned long arg)
{
	unsigned long i;

	atomic_inc(&ioctls);
	switch (_IOC_NR(cmd)) {
	case NV_SIM_NR_IRQ:
		if (arg > 10000)
			return -EINVAL;
		mutex_lock(&irq_lock);
		for (i = 0; i < arg; i++) {
			reinit_completion(&irq.done);
			irq_work_queue(&irq.work);
			wait_for_completion(&irq.done);
		}
		mutex_unlock(&irq_lock);
		return 0;
	case NV_SIM_NR_XID:
		atomic_inc(&xids);
		trace_nvidia_dev_xid(&nv_sim_pdev, (u32)arg, "simulated Xid from nvidia_sim");
		return 0;
	default:
		if (arg > 1000000)
			return -EINVAL;
		if (arg)
			usleep_range(arg, arg);
		return 0;
	}
}

noinline int nvidia_mmap(struct file *file, struct vm_area_struct *vma)
{
	atomic_inc(&mmaps);
	return -ENODEV;
}

static const struct file_operations nv_fops = {
	.owner = THIS_MODULE,
	.open = nvidia_open,
	.release = nv_release,
	.unlocked_ioctl = nvidia_unlocked_ioctl,
	.mmap = nvidia_mmap,
};

static struct miscdevice nv_misc = {
	.minor = MISC_DYNAMIC_MINOR,
	.name = "nvidia-sim",
	.fops = &nv_fops,
	.mode = 0666,
};

static int __init nv_sim_init(void)
{
	int err;

	init_irq_work(&irq.work, irq_fn);
	kthread_init_work(&irq.bh, bh_fn);
	init_completion(&irq.done);
	/* Named as the driver core names a registered device: its kobject. */
	err = dev_set_name(&nv_sim_pdev.dev, NV_SIM_DEV);
	if (err)
		return err;
	bh_worker = kthread_create_worker(0, "nv_queue");
	if (IS_ERR(bh_worker)) {
		kfree_const(nv_sim_pdev.dev.kobj.name);
		return PTR_ERR(bh_worker);
	}
	err = misc_register(&nv_misc);
	if (err) {
		kthread_destroy_worker(bh_worker);
		kfree_const(nv_sim_pdev.dev.kobj.name);
		return err;
	}
	dir = debugfs_create_dir("nvidia_sim", NULL);
	debugfs_create_atomic_t("opens", 0444, dir, &opens);
	debugfs_create_atomic_t("ioctls", 0444, dir, &ioctls);
	debugfs_create_atomic_t("mmaps", 0444, dir, &mmaps);
	debugfs_create_atomic_t("isrs", 0444, dir, &isrs);
	debugfs_create_atomic_t("bhs", 0444, dir, &bhs);
	debugfs_create_atomic_t("xids", 0444, dir, &xids);
	pr_info("nvidia_sim: simulated NVIDIA entry points on /dev/nvidia-sim (no GPU)\n");
	return 0;
}

static void __exit nv_sim_exit(void)
{
	debugfs_remove_recursive(dir);
	misc_deregister(&nv_misc);
	irq_work_sync(&irq.work);
	kthread_destroy_worker(bh_worker);
	kfree_const(nv_sim_pdev.dev.kobj.name);
}

module_init(nv_sim_init);
module_exit(nv_sim_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("Simulated NVIDIA driver entry points for gpuperf's tests (no GPU)");
