/* A stand-in for cudart's launch entry point, built with frame pointers like
 * the real libcudart (its cudaLaunchKernel starts with push %rbp). Linked into
 * test programs as a static archive, as nvcc links cudart by default. When a
 * hook is set, it plays the part of CUPTI's API-entry callback. */
#include <stdint.h>

void (*fake_cupti_callback)(uint32_t corr);
static volatile uint32_t sink;

__attribute__((noinline)) int cudaLaunchKernel(uint32_t corr) {
    if (fake_cupti_callback)
        fake_cupti_callback(corr);
    sink += corr;
    return 0;
}

/* An API call that has no entry probe but does fire the marker. */
__attribute__((noinline)) int fakeUnprobedCopy(uint32_t corr) {
    if (fake_cupti_callback)
        fake_cupti_callback(corr);
    return 0;
}
