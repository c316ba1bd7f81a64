/* A stand-in for a CUDA application without a driver: it loads the injection
 * library the way the CUDA driver does (dlopen + InitializeInjection) and does
 * nothing else, so that a test can check that a library that cannot record
 * (no libcupti, or a real one that finds no driver) leaves the program as it
 * was. The simulated runtime's host (sim_host.c) plays everything else.
 *
 * usage: host INJECT.so|none plain
 * The executable exports cuDriverGetVersion, answering as libcuda does before
 * cuInit. Exit status 3 when the program ran to its end. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

/* What libcuda would answer; 3 is CUDA_ERROR_NOT_INITIALIZED. */
int cuDriverGetVersion(int *v) {
    (void)v;
    return 3;
}

int main(int argc, char **argv) {
    if (argc < 3 || strcmp(argv[2], "plain") != 0) return 97;
    printf("host: start\n");
    fflush(stdout);
    if (strcmp(argv[1], "none") != 0) {
        void *inj = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
        if (!inj) { fprintf(stderr, "dlopen: %s\n", dlerror()); return 99; }
        int (*init)(void) = (int (*)(void))dlsym(inj, "InitializeInjection");
        if (!init) return 96;
        printf("host: init returned %d\n", init());
    } else {
        printf("host: init returned 1\n");
    }
    printf("host: done\n");
    return 3;
}
