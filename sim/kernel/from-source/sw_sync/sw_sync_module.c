// SPDX-License-Identifier: GPL-2.0
/* Test infrastructure, no GPU: makes the kernel's own sw_sync (a software
 * dma_fence timeline behind /sys/kernel/debug/sync/sw_sync, off in Debian's
 * config) a loadable module. Its only own code is below. */
#include <linux/module.h>
#include <linux/string.h>
#include <linux/sync_file.h>

MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("sw_sync from linux-source-6.1, built out of tree for gpuperf's tests");

/* The kernel does not export sync_file_get_name; only sync_debug.c's dump of
 * sync files in debugfs uses it, so the dump names every file alike. */
char *sync_file_get_name(struct sync_file *sync_file, char *buf, int len)
{
	strscpy(buf, "sync_file", len);
	return buf;
}
