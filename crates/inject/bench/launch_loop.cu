// Launch-bound loop for the injection overhead benchmark: N launches of an empty
// kernel, then one synchronize. Prints the loop's wall time; launch-overhead.sh
// runs it with and without gpuperf's injection library and compares.
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <cuda_runtime.h>

__global__ void empty_kernel() {}

static double now_s() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 200000;
    // Warm up: context creation and module loading are not what is measured.
    empty_kernel<<<1, 1>>>();
    if (cudaDeviceSynchronize() != cudaSuccess) {
        fprintf(stderr, "launch_loop: no usable CUDA device: %s\n",
                cudaGetErrorString(cudaGetLastError()));
        return 2;
    }
    double t0 = now_s();
    for (long i = 0; i < n; i++) empty_kernel<<<1, 1>>>();
    cudaError_t err = cudaDeviceSynchronize();
    double dt = now_s() - t0;
    if (err != cudaSuccess) {
        fprintf(stderr, "launch_loop: %s\n", cudaGetErrorString(err));
        return 1;
    }
    printf("launches %ld seconds %.6f per_launch_us %.3f\n", n, dt, dt * 1e6 / n);
    return 0;
}
