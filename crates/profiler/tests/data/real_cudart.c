/* Calls the real cudaLaunchKernel of libcudart.so.13. Without a driver every
 * call fails, but it is entered, which is what the probe sees.
 * usage: real_cudart_app LAUNCHES */
#include <stdio.h>
#include <stdlib.h>

typedef struct { unsigned x, y, z; } dim3;
int cudaLaunchKernel(const void *func, dim3 grid, dim3 block, void **args, size_t shared, void *stream);

static void kernel_stub(void) {}

__attribute__((noinline)) static int enqueue(void) {
    dim3 one = {1, 1, 1};
    return cudaLaunchKernel((const void *)kernel_stub, one, one, NULL, 0, NULL);
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 1;
    int err = 0;
    for (int i = 0; i < n; i++)
        err = enqueue();
    printf("last error %d\n", err);
    return 0;
}
