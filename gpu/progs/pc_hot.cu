// The GPU check's PC-sampling program (gpu/checklib/pc.py): one kernel
// with a known hot line, so that gpuperf's `--pc-sampling` can be judged
// against Nsight Compute's source-level sampling of the same kernel.
//
// `chase` follows a random cycle through 64 MiB of indices (larger than an
// H200's 60 MB L2): every step waits for a dependent, uncoalesced load from
// DRAM, so the line marked HOT holds almost every sample, stalled on the long
// scoreboard. The line marked WARM is cheap arithmetic beside it.
//
// usage: pc_hot [LAUNCHES=5] [THREADS=1]
// With THREADS > 1, each of THREADS host threads makes LAUNCHES launches on a
// stream of its own, at once: the check's test of PC records from launches
// that return together (every thread writes the same values).
// stdout: pc_hot: launches N checksum C   (the same with or without gpuperf)
// stderr: pc_hot: X ms per launch; first launch F ms, later launches median M ms
//         (CUDA events; the check's overhead figures)
// Built by nvcc with -lineinfo, -cudart shared, -O2.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>
#include <cuda_runtime.h>

#define CHECK(call)                                                                  \
    do {                                                                             \
        cudaError_t e_ = (call);                                                     \
        if (e_ != cudaSuccess) {                                                     \
            fprintf(stderr, "pc_hot: %s: %s\n", #call, cudaGetErrorString(e_));      \
            exit(3);                                                                 \
        }                                                                            \
    } while (0)
#define NOINLINE __attribute__((noinline))

constexpr unsigned N_IDX = 1u << 24;  // 64 MiB of uint32 indices
constexpr int STEPS = 512;
constexpr int THREADS = 256;

__global__ void chase(const unsigned *__restrict__ next, unsigned *out, int steps) {
    unsigned i = (blockIdx.x * blockDim.x + threadIdx.x) * 2654435761u % N_IDX;
    unsigned acc = 0;
    for (int s = 0; s < steps; s++) {
        i = next[i];                 // HOT: dependent uncoalesced load
        acc = acc * 31u + (i & 7u);  // WARM: cheap arithmetic
    }
    out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}

// A single cycle through all N_IDX slots (Sattolo's shuffle), fixed seed.
static std::vector<unsigned> cycle() {
    std::vector<unsigned> p(N_IDX);
    for (unsigned k = 0; k < N_IDX; k++) p[k] = k;
    unsigned long long x = 88172645463325252ull;
    for (unsigned k = N_IDX - 1; k > 0; k--) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        unsigned j = (unsigned)(x % k);
        unsigned t = p[k];
        p[k] = p[j], p[j] = t;
    }
    std::vector<unsigned> next(N_IDX);
    for (unsigned k = 0; k < N_IDX; k++) next[p[k]] = p[(k + 1) % N_IDX];
    return next;
}

NOINLINE static void launch_chase(const unsigned *next, unsigned *out, int blocks,
                                  cudaStream_t stream = 0) {
    chase<<<blocks, THREADS, 0, stream>>>(next, out, STEPS);
    CHECK(cudaGetLastError());
}

// One host thread's launches, on its own stream.
NOINLINE static void thread_body(int launches, const unsigned *next, unsigned *out, int blocks) {
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    for (int l = 0; l < launches; l++) launch_chase(next, out, blocks, s);
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaStreamDestroy(s));
}

// Each launch between two CUDA events. A sampled launch returns when its
// kernel and CUPTI's work on it are done, so the span of its pair is what it
// costs the program. The first launch also pays one-time set-up (the module's
// lazy loading; with gpuperf, CUPTI's sampling set-up), so it is given apart.
struct Times {
    float total_ms, first_ms, later_median_ms;
};
NOINLINE static Times workload(int launches, const unsigned *next, unsigned *out, int blocks) {
    std::vector<cudaEvent_t> ev(2 * launches);
    for (auto &e : ev) CHECK(cudaEventCreate(&e));
    for (int l = 0; l < launches; l++) {
        CHECK(cudaEventRecord(ev[2 * l]));
        launch_chase(next, out, blocks);
        CHECK(cudaEventRecord(ev[2 * l + 1]));
    }
    CHECK(cudaEventSynchronize(ev.back()));
    Times t{};
    CHECK(cudaEventElapsedTime(&t.total_ms, ev.front(), ev.back()));
    std::vector<float> ms(launches);
    for (int l = 0; l < launches; l++) CHECK(cudaEventElapsedTime(&ms[l], ev[2 * l], ev[2 * l + 1]));
    t.first_ms = ms[0];
    std::vector<float> later(ms.begin() + 1, ms.end());
    std::sort(later.begin(), later.end());
    t.later_median_ms = later.empty() ? ms[0] : later[later.size() / 2];
    for (auto &e : ev) CHECK(cudaEventDestroy(e));
    return t;
}

int main(int argc, char **argv) {
    int launches = argc > 1 ? atoi(argv[1]) : 5;
    if (launches < 1) launches = 1;
    int threads = argc > 2 ? atoi(argv[2]) : 1;
    if (threads < 1) threads = 1;
    int sms = 0;
    CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    int blocks = (sms > 0 ? sms : 1) * 4;
    std::vector<unsigned> host = cycle();
    unsigned *next, *out;
    CHECK(cudaMalloc(&next, sizeof(unsigned) * N_IDX));
    CHECK(cudaMalloc(&out, sizeof(unsigned) * blocks * THREADS));
    CHECK(cudaMemcpy(next, host.data(), sizeof(unsigned) * N_IDX, cudaMemcpyHostToDevice));
    CHECK(cudaMemset(out, 0, sizeof(unsigned) * blocks * THREADS));
    Times t{};
    if (threads == 1) {
        t = workload(launches, next, out, blocks);
    } else {
        std::vector<std::thread> pool;
        for (int t = 0; t < threads; t++) pool.emplace_back(thread_body, launches, next, out, blocks);
        for (auto &t : pool) t.join();
        launches *= threads;
    }
    std::vector<unsigned> res(blocks * THREADS);
    CHECK(cudaMemcpy(res.data(), out, sizeof(unsigned) * res.size(), cudaMemcpyDeviceToHost));
    unsigned long long sum = 0;
    for (unsigned v : res) sum += v;
    printf("pc_hot: launches %d checksum %llu\n", launches, sum);
    fprintf(stderr, "pc_hot: %.3f ms per launch; first launch %.3f ms, later launches median %.3f ms\n",
            t.total_ms / launches, t.first_ms, t.later_median_ms);
    CHECK(cudaFree(next));
    CHECK(cudaFree(out));
    return 0;
}
