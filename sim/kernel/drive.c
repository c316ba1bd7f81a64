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
 * for them. With --vgem-fences F and --vgem-timeouts M (vgem, a Debian module:
 * `modprobe vgem`), the main thread makes a buffer on vgem's DRM device,
 * attaches F write fences to it one after another, each signalled by an ioctl
 * of this thread, then M more that it leaves to vgem's 10 s timer to signal
 * (in a timer interrupt), waiting for each by poll() on the buffer's
 * dma-buf. It prints what it did, one `name count` per line. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
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
static long vgem_fences, vgem_timeouts;

/* DRM and vgem UAPI (include/uapi/drm/{drm,drm_mode,vgem_drm}.h), declared
 * here so that no libdrm headers are needed. */
struct drm_version {
	int major, minor, patchlevel;
	size_t name_len;
	char *name;
	size_t date_len;
	char *date;
	size_t desc_len;
	char *desc;
};
struct drm_mode_create_dumb {
	uint32_t height, width, bpp, flags, handle, pitch;
	uint64_t size;
};
struct drm_prime_handle {
	uint32_t handle, flags;
	int32_t fd;
};
struct vgem_fence_attach {
	uint32_t handle, flags, out_fence, pad;
};
struct vgem_fence_signal {
	uint32_t fence, flags;
};
#define DRM_VERSION _IOWR('d', 0x00, struct drm_version)
#define DRM_PRIME_HANDLE_TO_FD _IOWR('d', 0x2d, struct drm_prime_handle)
#define DRM_CREATE_DUMB _IOWR('d', 0xb2, struct drm_mode_create_dumb)
#define VGEM_FENCE_ATTACH _IOWR('d', 0x41, struct vgem_fence_attach)
#define VGEM_FENCE_SIGNAL _IOW('d', 0x42, struct vgem_fence_signal)
#define VGEM_FENCE_WRITE 1

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

/* vgem's DRM device, found by its driver name. */
static int open_vgem(void)
{
	for (int i = 0; i < 16; i++) {
		char path[32], name[16] = {0};
		snprintf(path, sizeof(path), "/dev/dri/card%d", i);
		int fd = open(path, O_RDWR | O_CLOEXEC);
		if (fd < 0)
			continue;
		struct drm_version v = {.name_len = sizeof(name) - 1, .name = name};
		if (!ioctl(fd, DRM_VERSION, &v) && !strcmp(name, "vgem"))
			return fd;
		close(fd);
	}
	errno = ENODEV;
	die("no vgem device in /dev/dri (modprobe vgem)");
	return -1;
}

static void vgem(void)
{
	int fd = open_vgem();
	struct drm_mode_create_dumb bo = {.height = 1, .width = 4096, .bpp = 8};
	if (ioctl(fd, DRM_CREATE_DUMB, &bo))
		die("vgem: create buffer");
	struct drm_prime_handle prime = {.handle = bo.handle, .flags = O_CLOEXEC};
	if (ioctl(fd, DRM_PRIME_HANDLE_TO_FD, &prime))
		die("vgem: export buffer");
	for (long i = 0; i < vgem_fences + vgem_timeouts; i++) {
		struct vgem_fence_attach a = {.handle = bo.handle, .flags = VGEM_FENCE_WRITE};
		if (ioctl(fd, VGEM_FENCE_ATTACH, &a))
			die("vgem: attach fence");
		if (i < vgem_fences) {
			struct vgem_fence_signal sig = {.fence = a.out_fence};
			if (ioctl(fd, VGEM_FENCE_SIGNAL, &sig))
				die("vgem: signal fence");
		}
		/* A write fence makes the dma-buf unreadable until it signals. */
		struct pollfd p = {.fd = prime.fd, .events = POLLIN};
		if (poll(&p, 1, 60000) != 1)
			die("vgem: fence not signalled within 60 s");
	}
	close(prime.fd);
	close(fd);
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
		else if (!strcmp(a, "--vgem-fences")) vgem_fences = v;
		else if (!strcmp(a, "--vgem-timeouts")) vgem_timeouts = v;
		else {
			fprintf(stderr, "drive: unknown option %s\n", a);
			return 2;
		}
	}
	pthread_t t[64];
	if (threads < 1 || threads > 64)
		return 2;
	if (vgem_fences || vgem_timeouts)
		vgem();
	for (long i = 0; i < threads; i++)
		pthread_create(&t[i], NULL, work, NULL);
	for (long i = 0; i < threads; i++)
		pthread_join(t[i], NULL);
	printf("pid %d\nopens %ld\nioctls %ld\nmmaps %ld\nirqs %ld\nxids %ld\njobs %ld\ndeps %ld\n"
	       "vgem_fences %ld\n",
	       getpid(), threads * !!(ioctls || mmaps || irqs || xids),
	       threads * (ioctls + !!irqs + xids), threads * mmaps, threads * irqs,
	       threads * xids, threads * jobs, threads * (deps < jobs ? deps : jobs),
	       vgem_fences + vgem_timeouts);
	return 0;
}
