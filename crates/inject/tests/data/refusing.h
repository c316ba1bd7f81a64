/* What host_dlopen_refuse.c and host_threads.c share: nvcc's registration,
 * done by hand (a host stub names a device function), a launch of one block,
 * and a mock of the allocator that refuses blocks of one size. */
#include <stdlib.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

void **__cudaRegisterFatBinary(void *fatCubin);
void __cudaRegisterFunction(void **h, const char *hostFun, char *deviceFun, const char *deviceName,
                            int thread_limit, void *tid, void *bid, void *bDim, void *gDim, int *wSize);

static void launch(void (*stub)(void)) {
    dim3 g = {1, 1, 1}, b = {32, 1, 1};
    if (cudaLaunchKernel((const void *)stub, g, b, NULL, 0, 0) != cudaSuccess)
        _exit(4);
}

/* The executable's malloc interposes on everyone's, the injection library's
 * too: while `refusing` is set on a thread, it refuses that thread every
 * block of `refused_size` bytes. */
extern void *__libc_malloc(size_t);
static size_t refused_size;
static __thread int refusing;
void *malloc(size_t n) {
    if (refusing && n == refused_size)
        return NULL;
    return __libc_malloc(n);
}
