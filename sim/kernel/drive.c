/* Drives the simulated GPU driver modules (nvidia_sim, drm_sched_sim; no
 * GPU) with exact numbers of each event, for tests to compare with what they
 * recorded.
 *
 *   drive [--threads T] [--ioctls N] [--ioctl-us U] [--mmaps N] [--irqs N]
 *         [--xids N] [--jobs N] [--run-us U] [--deps N] [--dep-us U] [--ring R]
 *
 * Each of T threads opens /dev/nvidia-sim once and makes N ioctls (command
 * _IOWR('F', 0x2a, 16), U µs each), N mmaps, raises N interrupts and fires N
 * Xids (79); then opens /dev/drm-sched-sim and submits N jobs on ring R
 * (U µs each), the first `deps` of them with a dependency that signals
 * --dep-us later (default 100 µs), and waits
 * for them. It prints what it did, one `name count` per line. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

struct submit {
	uint32_t ring, run_us, dep_us, pad;
};
#define SUBMIT _IOW('S', 1, struct submit)
#define WAIT _IO('S', 2)
#define NV_IOCTL _IOWR('F', 0x2a, char[16])
#define NV_IRQ _IO('F', 0xf0)
#define NV_XID _IO('F', 0xf1)

static long ioctls, ioctl_us, mmaps, irqs, xids, jobs, run_us, deps, dep_us = 100, ring;

static void die(const char *what)
{
	fprintf(stderr, "drive: %s: %s\n", what, strerror(errno));
	exit(1);
}

static void *work(void *arg)
{
	(void)arg;
	if (ioctls || mmaps || irqs || xids) {
		int fd = open("/dev/nvidia-sim", O_RDWR);
		if (fd < 0)
			die("/dev/nvidia-sim");
		for (long i = 0; i < ioctls; i++)
			if (ioctl(fd, NV_IOCTL, ioctl_us))
				die("ioctl");
		for (long i = 0; i < mmaps; i++)
			if (mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 0) != MAP_FAILED)
				die("mmap succeeded on the simulated device");
		if (irqs && ioctl(fd, NV_IRQ, irqs))
			die("irq ioctl");
		for (long i = 0; i < xids; i++)
			if (ioctl(fd, NV_XID, 79))
				die("xid ioctl");
		close(fd);
	}
	if (jobs) {
		int fd = open("/dev/drm-sched-sim", O_RDWR);
		if (fd < 0)
			die("/dev/drm-sched-sim");
		for (long i = 0; i < jobs; i++) {
			struct submit s = {.ring = ring, .run_us = run_us, .dep_us = i < deps ? dep_us : 0};
			if (ioctl(fd, SUBMIT, &s))
				die("submit");
		}
		if (ioctl(fd, WAIT, 0))
			die("wait");
		close(fd);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	long threads = 1;
	for (int i = 1; i + 1 < argc; i += 2) {
		long v = atol(argv[i + 1]);
		const char *a = argv[i];
		if (!strcmp(a, "--threads")) threads = v;
		else if (!strcmp(a, "--ioctls")) ioctls = v;
		else if (!strcmp(a, "--ioctl-us")) ioctl_us = v;
		else if (!strcmp(a, "--mmaps")) mmaps = v;
		else if (!strcmp(a, "--irqs")) irqs = v;
		else if (!strcmp(a, "--xids")) xids = v;
		else if (!strcmp(a, "--jobs")) jobs = v;
		else if (!strcmp(a, "--run-us")) run_us = v;
		else if (!strcmp(a, "--deps")) deps = v;
		else if (!strcmp(a, "--dep-us")) dep_us = v;
		else if (!strcmp(a, "--ring")) ring = v;
		else {
			fprintf(stderr, "drive: unknown option %s\n", a);
			return 2;
		}
	}
	pthread_t t[64];
	if (threads < 1 || threads > 64)
		return 2;
	for (long i = 0; i < threads; i++)
		pthread_create(&t[i], NULL, work, NULL);
	for (long i = 0; i < threads; i++)
		pthread_join(t[i], NULL);
	printf("pid %d\nopens %ld\nioctls %ld\nmmaps %ld\nirqs %ld\nxids %ld\njobs %ld\ndeps %ld\n",
	       getpid(), threads * !!(ioctls || mmaps || irqs || xids),
	       threads * (ioctls + !!irqs + xids), threads * mmaps, threads * irqs,
	       threads * xids, threads * jobs, threads * (deps < jobs ? deps : jobs));
	return 0;
}
