/* Test program for the simulated CUDA runtime (no GPU: the kernels never run there): two
 * functions launch kernels, and the arguments change only one of them, for `gpuperf diff`.
 *
 * usage: diff_app GRID COUNT
 *   steady(): 10 x steady() kernels of 2000 blocks of 256 threads, whatever the arguments;
 *   grown():  COUNT x grown() kernels of GRID blocks of 256 threads;
 *   both on one stream. */
#define APP_NAME "diff_app"
#include "runtime_app.h"

static void steady_stub(void) {}
static void grown_stub(void) {}

NOINLINE void launch(const void *stub, unsigned grid, cudaStream_t s) {
    dim3 g = {grid, 1, 1}, b = {256, 1, 1};
    CHECK(cudaLaunchKernel(stub, g, b, NULL, 0, s));
    __asm__ volatile("" ::: "memory"); /* a real frame, not a tail call */
}

NOINLINE void steady(cudaStream_t s) {
    for (int i = 0; i < 10; i++)
        launch((const void *)steady_stub, 2000, s);
    __asm__ volatile("" ::: "memory");
}

NOINLINE void grown(cudaStream_t s, unsigned grid, int count) {
    for (int i = 0; i < count; i++)
        launch((const void *)grown_stub, grid, s);
    __asm__ volatile("" ::: "memory");
}

int main(int argc, char **argv) {
    if (argc < 3)
        return 2;
    static int image;
    void **h = __cudaRegisterFatBinary(&image);
    __cudaRegisterFunction(h, (const char *)steady_stub, "_Z6steadyv", "steady", -1, 0, 0, 0, 0, 0);
    __cudaRegisterFunction(h, (const char *)grown_stub, "_Z5grownv", "grown", -1, 0, 0, 0, 0, 0);
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    steady(s);
    grown(s, (unsigned)atoi(argv[1]), atoi(argv[2]));
    CHECK(cudaStreamSynchronize(s));
    printf("launched %d\n", 10 + atoi(argv[2]));
    return 0;
}
