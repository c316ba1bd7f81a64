/* A CUPTI subscriber that takes its own stack, with the unwind probe, in the API-enter
 * callback of a driver call: the way the injection library takes launch stacks. On the
 * simulated CUDA runtime the callback is reached through frames without unwind info
 * (sim/src/driver_dispatch.c, sim/src/cupti_dispatch.c), as on a real driver.
 * usage: cupti_subscriber PROBE.so */
#include <dlfcn.h>
#include <stdio.h>

#include <cuda.h>
#include <cupti.h>

typedef int (*capture_fn)(char *, size_t);
static capture_fn capture;
static char buf[65536];
static volatile int taken;

__attribute__((noinline)) static void CUPTIAPI on_callback(void *userdata, CUpti_CallbackDomain domain,
                                                           CUpti_CallbackId cbid, const void *data) {
    const CUpti_CallbackData *d = data;
    if (d->callbackSite != CUPTI_API_ENTER || taken)
        return;
    taken = capture(buf, sizeof buf) >= 0;
}

__attribute__((noinline)) static int ask_for_device(void) {
    CUdevice dev;
    int r = cuDeviceGet(&dev, 0);
    __asm__ volatile("" ::: "memory"); /* a real call, not a tail call */
    return r;
}

int main(int argc, char **argv) {
    if (argc < 2)
        return 2;
    void *h = dlopen(argv[1], RTLD_NOW);
    if (!h) {
        fprintf(stderr, "%s\n", dlerror());
        return 1;
    }
    capture = (capture_fn)dlsym(h, "gpuperf_probe_capture");
    if (cuInit(0) != CUDA_SUCCESS)
        return 1;
    CUpti_SubscriberHandle s;
    if (cuptiSubscribe(&s, on_callback, NULL) != CUPTI_SUCCESS ||
        cuptiEnableCallback(1, s, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuDeviceGet) !=
            CUPTI_SUCCESS)
        return 1;
    ((void (*)(void))dlsym(h, "gpuperf_probe_init"))();
    if (ask_for_device() != CUDA_SUCCESS || !taken)
        return 1;
    printf("== callback\n%s", buf);
    return 0;
}
