/* A device reset while the other device's context lives, on the simulated
 * CUDA runtime (sim/, no GPU): the simulated driver loads the injection
 * library at cuInit from CUDA_INJECTION64_PATH (set here from the first
 * argument), as NVIDIA's driver does.
 *
 * usage: host_reset INJECT.so|none refuse|plain LAUNCHES
 *   On device 1, LAUNCHES launches (_Z7pendingv) and LAUNCHES copies to the
 *   device; one launch on device 0, whose context lives on; then
 *   cudaDeviceReset on device 1, which makes the library flush inside its
 *   callbacks. With `refuse`, this program's allocator (a mock) refuses
 *   every allocation the injection library makes on this thread during the
 *   reset. Then LAUNCHES launches on device 0 (_Z5afterv). Prints
 *   "launches L copies C". Exits with 3.
 *   HOST_RESET_LAST=1: nothing on device 0 before the reset, so that device
 *   1's context is the last one live when it is destroyed. */
#define _GNU_SOURCE
#include <link.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

void **__cudaRegisterFatBinary(void *fatCubin);
void __cudaRegisterFunction(void **h, const char *hostFun, char *deviceFun, const char *deviceName,
                            int thread_limit, void *tid, void *bid, void *bDim, void *gDim, int *wSize);

__attribute__((noinline)) static void pending_stub(void) { __asm__ volatile("" ::"r"(0)); }
__attribute__((noinline)) static void after_stub(void) { __asm__ volatile("" ::"r"(1)); }

static void register_kernels(void) {
    static int image;
    void **h = __cudaRegisterFatBinary(&image);
    __cudaRegisterFunction(h, (const char *)pending_stub, "_Z7pendingv", "_Z7pendingv", -1, 0, 0, 0,
                           0, 0);
    __cudaRegisterFunction(h, (const char *)after_stub, "_Z5afterv", "_Z5afterv", -1, 0, 0, 0, 0, 0);
}

static void launch(void (*stub)(void)) {
    dim3 g = {1, 1, 1}, b = {32, 1, 1};
    if (cudaLaunchKernel((const void *)stub, g, b, NULL, 0, 0) != cudaSuccess)
        exit(4);
}

/* ---- the mock of the allocator: the executable's functions interpose on
 * everyone's; those called from the injection library's code refuse while
 * `refusing` is set on the calling thread ---- */
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
static uintptr_t lib_lo, lib_hi;
static __thread int refusing;
static long refused;

static int refuses(void *caller) {
    uintptr_t a = (uintptr_t)caller;
    if (refusing && a >= lib_lo && a < lib_hi) {
        __atomic_add_fetch(&refused, 1, __ATOMIC_RELAXED);
        return 1;
    }
    return 0;
}

void *malloc(size_t n) {
    return refuses(__builtin_return_address(0)) ? NULL : __libc_malloc(n);
}
void *calloc(size_t n, size_t m) {
    return refuses(__builtin_return_address(0)) ? NULL : __libc_calloc(n, m);
}
void *realloc(void *p, size_t n) {
    return refuses(__builtin_return_address(0)) ? NULL : __libc_realloc(p, n);
}
int posix_memalign(void **p, size_t align, size_t n) {
    if (refuses(__builtin_return_address(0)))
        return 12;
    *p = __libc_memalign(align, n);
    return *p ? 0 : 12;
}
void *aligned_alloc(size_t align, size_t n) {
    return refuses(__builtin_return_address(0)) ? NULL : __libc_memalign(align, n);
}
void *memalign(size_t align, size_t n) {
    return refuses(__builtin_return_address(0)) ? NULL : __libc_memalign(align, n);
}

/* The injection library's mapped range, once CUDA loaded it. */
static int find_lib(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    (void)data;
    if (!strstr(info->dlpi_name, "gpuperf_inject"))
        return 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD)
            continue;
        uintptr_t lo = info->dlpi_addr + ph->p_vaddr, hi = lo + ph->p_memsz;
        if (!lib_lo || lo < lib_lo) lib_lo = lo;
        if (hi > lib_hi) lib_hi = hi;
    }
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 4) return 97;
    if (strcmp(argv[1], "none") != 0)
        setenv("CUDA_INJECTION64_PATH", argv[1], 1);
    else
        unsetenv("CUDA_INJECTION64_PATH");
    int refuse = strcmp(argv[2], "refuse") == 0;
    int last = getenv("HOST_RESET_LAST") != NULL;
    long launches = atol(argv[3]);
    register_kernels();
    if (cudaSetDevice(1) != cudaSuccess || cudaFree(0) != cudaSuccess) return 96;
    dl_iterate_phdr(find_lib, NULL);
    if (strcmp(argv[1], "none") != 0 && !lib_hi) return 95;
    static char host[4096];
    void *dev = NULL;
    if (cudaMalloc(&dev, sizeof host) != cudaSuccess) return 96;
    for (long i = 0; i < launches; i++) {
        launch(pending_stub);
        if (cudaMemcpy(dev, host, sizeof host, cudaMemcpyHostToDevice) != cudaSuccess) return 96;
    }
    if (!last) {
        if (cudaSetDevice(0) != cudaSuccess) return 96;
        launch(after_stub);
        if (cudaSetDevice(1) != cudaSuccess) return 96;
    }
    refusing = refuse;
    cudaError_t e = cudaDeviceReset();
    refusing = 0;
    if (e != cudaSuccess) return 94;
    if (cudaSetDevice(0) != cudaSuccess) return 96;
    for (long i = last ? 0 : 1; i < launches; i++)
        launch(after_stub);
    if (cudaDeviceSynchronize() != cudaSuccess) return 96;
    printf("launches %ld copies %ld\n", 2 * launches, launches);
    fprintf(stderr, "refused %ld\n", refused);
    return 3;
}
