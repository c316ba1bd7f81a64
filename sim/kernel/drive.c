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
 * dma-buf. With --vblank-events V (vkms, built by ci.sh: `modprobe vkms`),
 * the main thread lights vkms's CRTC 0 with a dumb buffer (mode set by
 * hand-made DRM ioctls) and asks V times for an event at the next vblank
 * (DRM_IOCTL_WAIT_VBLANK with _DRM_VBLANK_EVENT), reading each before asking
 * again. With --sw-sync-fences S (sw_sync, built by ci.sh: `modprobe
 * sw_sync`), it makes a sw_sync timeline, S fences on it at values 1..S,
 * then advances the timeline by one S times, each signalling one fence, and
 * checks each fence's state. It prints what it did, one `name count` per
 * line. */
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
#include <time.h>
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
static long vgem_fences, vgem_timeouts, vblank_events, sw_sync_fences;

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
struct drm_mode_card_res {
	uint64_t fb_id_ptr, crtc_id_ptr, connector_id_ptr, encoder_id_ptr;
	uint32_t count_fbs, count_crtcs, count_connectors, count_encoders;
	uint32_t min_width, max_width, min_height, max_height;
};
struct drm_mode_modeinfo {
	uint32_t clock;
	uint16_t hdisplay, hsync_start, hsync_end, htotal, hskew;
	uint16_t vdisplay, vsync_start, vsync_end, vtotal, vscan;
	uint32_t vrefresh, flags, type;
	char name[32];
};
struct drm_mode_get_connector {
	uint64_t encoders_ptr, modes_ptr, props_ptr, prop_values_ptr;
	uint32_t count_modes, count_props, count_encoders;
	uint32_t encoder_id, connector_id, connector_type, connector_type_id;
	uint32_t connection, mm_width, mm_height, subpixel, pad;
};
struct drm_mode_fb_cmd {
	uint32_t fb_id, width, height, pitch, bpp, depth, handle;
};
struct drm_mode_crtc {
	uint64_t set_connectors_ptr;
	uint32_t count_connectors, crtc_id, fb_id, x, y, gamma_size, mode_valid;
	struct drm_mode_modeinfo mode;
};
struct drm_wait_vblank_request {
	uint32_t type, sequence;
	unsigned long signal;
};
struct drm_event_vblank {
	uint32_t type, length;
	uint64_t user_data;
	uint32_t tv_sec, tv_usec, sequence, crtc_id;
};
_Static_assert(sizeof(struct drm_mode_modeinfo) == 68, "drm_mode_modeinfo");
_Static_assert(sizeof(struct drm_mode_crtc) == 104, "drm_mode_crtc");
_Static_assert(sizeof(struct drm_mode_get_connector) == 80, "drm_mode_get_connector");
_Static_assert(sizeof(struct drm_mode_card_res) == 64, "drm_mode_card_res");
_Static_assert(sizeof(struct drm_event_vblank) == 32, "drm_event_vblank");
#define DRM_VERSION _IOWR('d', 0x00, struct drm_version)
/* union drm_wait_vblank: the request and the reply are both 24 bytes. */
#define DRM_WAIT_VBLANK _IOWR('d', 0x3a, struct drm_wait_vblank_request)
#define DRM_MODE_GETRESOURCES _IOWR('d', 0xa0, struct drm_mode_card_res)
#define DRM_MODE_SETCRTC _IOWR('d', 0xa2, struct drm_mode_crtc)
#define DRM_MODE_GETCONNECTOR _IOWR('d', 0xa7, struct drm_mode_get_connector)
#define DRM_MODE_ADDFB _IOWR('d', 0xae, struct drm_mode_fb_cmd)
#define DRM_VBLANK_RELATIVE 0x1
#define DRM_VBLANK_EVENT 0x4000000
#define DRM_EVENT_VBLANK 0x01

/* sw_sync's UAPI (drivers/dma-buf/sw_sync.c; not in the UAPI headers). */
struct sw_sync_create_fence_data {
	uint32_t value;
	char name[32];
	int32_t fence;
};
#define SW_SYNC_CREATE_FENCE _IOWR('W', 0, struct sw_sync_create_fence_data)
#define SW_SYNC_INC _IOW('W', 1, uint32_t)
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

/* A DRM device, found by its driver name. */
static int open_drm(const char *driver)
{
	for (int i = 0; i < 16; i++) {
		char path[32], name[16] = {0};
		snprintf(path, sizeof(path), "/dev/dri/card%d", i);
		int fd = open(path, O_RDWR | O_CLOEXEC);
		if (fd < 0)
			continue;
		struct drm_version v = {.name_len = sizeof(name) - 1, .name = name};
		if (!ioctl(fd, DRM_VERSION, &v) && !strcmp(name, driver))
			return fd;
		close(fd);
	}
	errno = ENODEV;
	fprintf(stderr, "drive: no %s device in /dev/dri (modprobe %s)\n", driver, driver);
	exit(1);
}

static void vgem(void)
{
	int fd = open_drm("vgem");
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

static uint64_t now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* Lights vkms's first CRTC with its connector's first mode and a dumb
 * buffer; returns the device. */
static int vkms_lit(void)
{
	int fd = open_drm("vkms");
	uint32_t crtcs[8], connectors[8];
	struct drm_mode_card_res res = {0};
	if (ioctl(fd, DRM_MODE_GETRESOURCES, &res))
		die("vkms: resources");
	if (!res.count_crtcs || !res.count_connectors || res.count_crtcs > 8 ||
	    res.count_connectors > 8) {
		errno = ENODEV;
		die("vkms: unexpected number of CRTCs or connectors");
	}
	res = (struct drm_mode_card_res){
		.crtc_id_ptr = (uintptr_t)crtcs,
		.connector_id_ptr = (uintptr_t)connectors,
		.count_crtcs = res.count_crtcs,
		.count_connectors = res.count_connectors,
	};
	if (ioctl(fd, DRM_MODE_GETRESOURCES, &res))
		die("vkms: resources");
	struct drm_mode_get_connector conn = {.connector_id = connectors[0]};
	if (ioctl(fd, DRM_MODE_GETCONNECTOR, &conn))
		die("vkms: connector");
	if (!conn.count_modes) {
		errno = ENODEV;
		die("vkms: the connector has no mode");
	}
	struct drm_mode_modeinfo *modes = calloc(conn.count_modes, sizeof(*modes));
	conn = (struct drm_mode_get_connector){
		.connector_id = connectors[0],
		.modes_ptr = (uintptr_t)modes,
		.count_modes = conn.count_modes,
	};
	if (!modes || ioctl(fd, DRM_MODE_GETCONNECTOR, &conn))
		die("vkms: connector modes");
	struct drm_mode_modeinfo mode = modes[0];
	free(modes);
	struct drm_mode_create_dumb bo = {.height = mode.vdisplay, .width = mode.hdisplay, .bpp = 32};
	if (ioctl(fd, DRM_CREATE_DUMB, &bo))
		die("vkms: dumb buffer");
	struct drm_mode_fb_cmd fb = {.width = bo.width, .height = bo.height, .pitch = bo.pitch,
				     .bpp = 32, .depth = 24, .handle = bo.handle};
	if (ioctl(fd, DRM_MODE_ADDFB, &fb))
		die("vkms: framebuffer");
	struct drm_mode_crtc set = {.set_connectors_ptr = (uintptr_t)connectors,
				    .count_connectors = 1, .crtc_id = crtcs[0], .fb_id = fb.fb_id,
				    .mode_valid = 1, .mode = mode};
	if (ioctl(fd, DRM_MODE_SETCRTC, &set))
		die("vkms: mode set");
	return fd;
}

/* Asks for an event at the next vblank of CRTC 0, vblank_events times, each
 * read before the next is asked for; prints the counts and the time span. */
static void vblanks(void)
{
	int fd = vkms_lit();
	long delivered = 0;
	uint32_t first = 0, last = 0;
	uint64_t start = now_ns();
	for (long i = 0; i < vblank_events; i++) {
		struct drm_wait_vblank_request w = {
			.type = DRM_VBLANK_RELATIVE | DRM_VBLANK_EVENT, .sequence = 1, .signal = i};
		if (ioctl(fd, DRM_WAIT_VBLANK, &w))
			die("vkms: wait for a vblank event");
		struct pollfd p = {.fd = fd, .events = POLLIN};
		if (poll(&p, 1, 10000) != 1)
			die("vkms: no vblank event within 10 s");
		struct drm_event_vblank ev;
		if (read(fd, &ev, sizeof(ev)) != sizeof(ev) || ev.type != DRM_EVENT_VBLANK ||
		    ev.user_data != (uint64_t)i) {
			errno = EPROTO;
			die("vkms: not the vblank event asked for");
		}
		if (!delivered++)
			first = ev.sequence;
		last = ev.sequence;
	}
	uint64_t end = now_ns();
	close(fd);
	printf("vblank_events %ld\nvblank_delivered %ld\nvblank_first_seq %u\nvblank_last_seq %u\n"
	       "vblank_start_ns %llu\nvblank_end_ns %llu\n",
	       vblank_events, delivered, first, last, (unsigned long long)start,
	       (unsigned long long)end);
}

/* S fences on a new sw_sync timeline, each signalled by one step of it. */
static void sw_sync(void)
{
	int tl = open("/sys/kernel/debug/sync/sw_sync", O_RDWR | O_CLOEXEC);
	if (tl < 0)
		die("/sys/kernel/debug/sync/sw_sync (modprobe sw_sync)");
	int *fences = calloc(sw_sync_fences, sizeof(int));
	if (!fences)
		die("calloc");
	uint64_t start = now_ns();
	for (long i = 0; i < sw_sync_fences; i++) {
		struct sw_sync_create_fence_data d = {.value = i + 1};
		snprintf(d.name, sizeof(d.name), "drive %ld", i + 1);
		if (ioctl(tl, SW_SYNC_CREATE_FENCE, &d))
			die("sw_sync: create fence");
		fences[i] = d.fence;
	}
	long signalled = 0;
	for (long i = 0; i < sw_sync_fences; i++) {
		struct pollfd p = {.fd = fences[i], .events = POLLIN};
		if (poll(&p, 1, 0) != 0) {
			errno = EPROTO;
			die("sw_sync: a fence signalled before its step");
		}
		uint32_t one = 1;
		if (ioctl(tl, SW_SYNC_INC, &one))
			die("sw_sync: step the timeline");
		signalled += poll(&p, 1, 0) == 1;
		close(fences[i]);
	}
	uint64_t end = now_ns();
	free(fences);
	close(tl);
	printf("sw_sync_fences %ld\nsw_sync_signalled %ld\nsw_sync_start_ns %llu\n"
	       "sw_sync_end_ns %llu\n",
	       sw_sync_fences, signalled, (unsigned long long)start, (unsigned long long)end);
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
		else if (!strcmp(a, "--vblank-events")) vblank_events = v;
		else if (!strcmp(a, "--sw-sync-fences")) sw_sync_fences = v;
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
	if (vblank_events)
		vblanks();
	if (sw_sync_fences)
		sw_sync();
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
