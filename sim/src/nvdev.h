/* SIMULATED driver calls: when the stand-in NVIDIA module of sim/kernel/
 * (nvidia_sim, /dev/nvidia-sim) is loaded, the simulated driver makes, inside
 * some of its functions, ioctls like those NVIDIA's driver makes, so that
 * `gpuperf record --driver` sees driver time under the CUDA calls. Nothing
 * here reaches a GPU; without the device nothing happens.
 *
 * Which function makes which ioctl (NVIDIA's escape numbers, _IOC('F', nr);
 * the module sleeps the argument's µs, or raises interrupts for 0xf0):
 *   cuInit                               open
 *   cuMemAlloc*, cuMemAllocHost, cuMemHostAlloc
 *                                        NV_ESC_RM_ALLOC (0x2b), NV_ESC_RM_MAP_MEMORY (0x4e)
 *   cuMemFree, cuMemFreeHost             NV_ESC_RM_FREE (0x29)
 *   cu*Synchronize, blocking cuMemcpy*   0xf0: wait for one completion interrupt
 *   launches                             none: a real driver writes a launch into a
 *                                        push buffer mapped in the process
 * Stream-ordered allocations (cuMemAllocAsync, cuMemFreeAsync) and asynchronous
 * copies make none. */
#ifndef GPUSIM_NVDEV_H
#define GPUSIM_NVDEV_H

#include <fcntl.h>
#include <pthread.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#define NVDEV_PATH "/dev/nvidia-sim"
#define NV_ESC_RM_FREE 0x29
#define NV_ESC_RM_ALLOC 0x2b
#define NV_ESC_RM_MAP_MEMORY 0x4e
#define NVDEV_WAIT_IRQ 0xf0

static int nvdev_fd = -1;
static pthread_once_t nvdev_once = PTHREAD_ONCE_INIT;

static void nvdev_open(void) { nvdev_fd = open(NVDEV_PATH, O_RDWR | O_CLOEXEC); }

static void nvdev_ioctl(unsigned nr, unsigned long arg) {
    /* The module ignores the size; errno is the program's, keep it. */
    int saved = errno;
    (void)ioctl(nvdev_fd, _IOC(_IOC_READ | _IOC_WRITE, 'F', nr, 0), arg);
    errno = saved;
}

static int nvdev_starts(const char *s, const char *prefix) {
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* Called at the start of each driver function, by its name (cuMemAlloc_v2, …). */
static void nvdev_call(const char *name) {
    if (!name || name[0] != 'c')
        return;
    int saved = errno;
    pthread_once(&nvdev_once, nvdev_open);
    errno = saved;
    if (nvdev_fd < 0)
        return;
    int async = strstr(name, "Async") != NULL;
    if ((nvdev_starts(name, "cuMemAlloc") && !async) || nvdev_starts(name, "cuMemHostAlloc")) {
        nvdev_ioctl(NV_ESC_RM_ALLOC, 50);
        nvdev_ioctl(NV_ESC_RM_MAP_MEMORY, 30);
    } else if (nvdev_starts(name, "cuMemFree") && !async) {
        nvdev_ioctl(NV_ESC_RM_FREE, 20);
    } else if ((strstr(name, "Synchronize") && nvdev_starts(name, "cu")) ||
               (nvdev_starts(name, "cuMemcpy") && !async)) {
        nvdev_ioctl(NVDEV_WAIT_IRQ, 1);
    }
}

#endif
