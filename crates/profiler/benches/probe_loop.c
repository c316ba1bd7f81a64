/* The probed side of the overhead benchmark: N calls of a cudart-like entry
 * function (push %rbp first, as libcudart's cudaLaunchKernel), made DEPTH
 * frames below main so the stack walk does realistic work; built with and
 * without frame pointers (cudaLaunchKernel keeps its own). The file also
 * exports a marker and semaphore with gpuperf-inject's contract, so the
 * injection-mode path (entry probe + marker probe) can be timed without CUPTI.
 * usage: probe_loop CALLS DEPTH; prints "ns_per_call X cpu_ns_per_call Y":
 * wall time, and this thread's CPU time (probe handling included, time taken
 * by other processes on a busy machine not). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

volatile uint16_t gpuperf_marker_semaphore __attribute__((section(".probes")));
void gpuperf_launch_marker(uint64_t corr, uint64_t callback);
__asm__(".globl gpuperf_launch_marker\n"
        ".type gpuperf_launch_marker, @function\n"
        "gpuperf_launch_marker:\n"
        ".cfi_startproc\n"
        ".byte 0x0f, 0x1f, 0x44, 0x00, 0x00\n"
        "ret\n"
        ".cfi_endproc\n"
        ".size gpuperf_launch_marker, .-gpuperf_launch_marker\n");

static volatile uint64_t sink;

/* Frame pointer kept even in a build without them: libcudart's starts so. */
__attribute__((noinline, optimize("no-omit-frame-pointer"))) int cudaLaunchKernel(uint32_t corr) {
    if (gpuperf_marker_semaphore)
        gpuperf_launch_marker(corr, (2ull << 32) | 211);
    sink += corr;
    return 0;
}

static uint64_t now(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t cpu_ns;

__attribute__((noinline)) static uint64_t loop(long calls) {
    uint64_t t0 = now(CLOCK_MONOTONIC), c0 = now(CLOCK_THREAD_CPUTIME_ID);
    for (long i = 0; i < calls; i++)
        cudaLaunchKernel((uint32_t)i + 1);
    cpu_ns = now(CLOCK_THREAD_CPUTIME_ID) - c0;
    return now(CLOCK_MONOTONIC) - t0;
}

__attribute__((noinline)) static uint64_t nest(int depth, long calls) {
    uint64_t r = depth > 0 ? nest(depth - 1, calls) : loop(calls);
    sink += 1; /* not a tail call: each level keeps its frame */
    return r;
}

int main(int argc, char **argv) {
    long calls = argc > 1 ? atol(argv[1]) : 1000000;
    int depth = argc > 2 ? atoi(argv[2]) : 12;
    uint64_t wall_ns = nest(depth, calls);
    printf("ns_per_call %.1f cpu_ns_per_call %.1f\n", (double)wall_ns / (double)calls,
           (double)cpu_ns / (double)calls);
    return 0;
}
