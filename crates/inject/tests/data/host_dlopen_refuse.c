/* A host program that loads a library after CUDA started and launches from
 * it first while its malloc refuses, on the simulated CUDA runtime (sim/, no
 * GPU): the simulated driver loads the injection library at cuInit from
 * CUDA_INJECTION64_PATH (set here from the first argument), as NVIDIA's
 * driver does.
 *
 * usage: host_dlopen_refuse INJECT.so|none LIB SIZE LAUNCHES
 *   LAUNCHES launches from main (_Z6beforev); then dlopen LIB (reuse_lib.c:
 *   late_call(f) calls f through the library's code) and, while this
 *   program's malloc (a mock of the allocator) refuses every block of SIZE
 *   bytes, LAUNCHES launches called back from inside LIB (_Z7refusedv); then
 *   LAUNCHES more from inside it with memory back (_Z5afterv).
 *   Prints "launches L" and exits with 3. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "refusing.h"

__attribute__((noinline)) static void before_stub(void) { __asm__ volatile("" ::"r"(0)); }
__attribute__((noinline)) static void refused_stub(void) { __asm__ volatile("" ::"r"(1)); }
__attribute__((noinline)) static void after_stub(void) { __asm__ volatile("" ::"r"(2)); }

static void register_kernels(void) {
    static int image;
    void **h = __cudaRegisterFatBinary(&image);
    __cudaRegisterFunction(h, (const char *)before_stub, "_Z6beforev", "_Z6beforev", -1, 0, 0, 0, 0,
                           0);
    __cudaRegisterFunction(h, (const char *)refused_stub, "_Z7refusedv", "_Z7refusedv", -1, 0, 0, 0,
                           0, 0);
    __cudaRegisterFunction(h, (const char *)after_stub, "_Z5afterv", "_Z5afterv", -1, 0, 0, 0, 0, 0);
}

static void launch_refused(void) { launch(refused_stub); }
static void launch_after(void) { launch(after_stub); }

int main(int argc, char **argv) {
    if (argc < 5) return 97;
    if (strcmp(argv[1], "none") != 0)
        setenv("CUDA_INJECTION64_PATH", argv[1], 1);
    else
        unsetenv("CUDA_INJECTION64_PATH");
    refused_size = (size_t)atol(argv[3]);
    long launches = atol(argv[4]);
    register_kernels();
    /* CUDA starts here (the injection library with it). */
    if (cudaFree(0) != cudaSuccess) return 96;
    for (long i = 0; i < launches; i++)
        launch(before_stub);
    void *lib = dlopen(argv[2], RTLD_NOW | RTLD_LOCAL);
    if (!lib) { fprintf(stderr, "dlopen: %s\n", dlerror()); return 92; }
    void (*late_call)(void (*)(void)) = (void (*)(void (*)(void)))dlsym(lib, "late_call");
    if (!late_call) return 93;
    refusing = 1;
    for (long i = 0; i < launches; i++)
        late_call(launch_refused);
    refusing = 0;
    for (long i = 0; i < launches; i++)
        late_call(launch_after);
    if (cudaDeviceSynchronize() != cudaSuccess) return 96;
    printf("launches %ld\n", 3 * launches);
    return 3;
}
