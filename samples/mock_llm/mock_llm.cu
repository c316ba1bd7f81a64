// Mock LLM inference: the launch pattern of a decoder serving batches, without a
// model. Each step copies token ids to the GPU, runs an embedding lookup and
// NUM_LAYERS layers of small kernels (norm, qkv projection, attention, mlp), and
// copies logits back; batches alternate over several streams.
//
// usage: mock_llm [--steps N] [--streams S] [--launch-bound]
//   --launch-bound  near-empty kernels only, as fast as the CPU can launch them
//                   (at least 100 k launches/s on a current GPU)
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <vector>
#include <cuda_runtime.h>

#define CHECK(call)                                                              \
    do {                                                                         \
        cudaError_t e_ = (call);                                                 \
        if (e_ != cudaSuccess) {                                                 \
            fprintf(stderr, "mock_llm: %s: %s\n", #call, cudaGetErrorString(e_)); \
            exit(1);                                                             \
        }                                                                        \
    } while (0)

constexpr int HIDDEN = 1024;
constexpr int NUM_LAYERS = 12;
constexpr int BATCH = 8;
constexpr int VOCAB = 8192;

__global__ void embed(const int *tokens, const float *table, float *x) {
    int b = blockIdx.x, i = threadIdx.x;
    for (int j = i; j < HIDDEN; j += blockDim.x) x[b * HIDDEN + j] = table[(tokens[b] % VOCAB) * HIDDEN + j];
}

__global__ void rms_norm(float *x) {
    __shared__ float sum;
    int b = blockIdx.x;
    if (threadIdx.x == 0) sum = 0;
    __syncthreads();
    float local = 0;
    for (int j = threadIdx.x; j < HIDDEN; j += blockDim.x) local += x[b * HIDDEN + j] * x[b * HIDDEN + j];
    atomicAdd(&sum, local);
    __syncthreads();
    float scale = rsqrtf(sum / HIDDEN + 1e-5f);
    for (int j = threadIdx.x; j < HIDDEN; j += blockDim.x) x[b * HIDDEN + j] *= scale;
}

__global__ void matvec(const float *w, const float *x, float *y, int rows) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    int b = blockIdx.y;
    if (r >= rows) return;
    float acc = 0;
    for (int j = 0; j < HIDDEN; j++) acc += w[(size_t)r * HIDDEN + j] * x[b * HIDDEN + j];
    y[b * rows + r] = acc;
}

__global__ void attention(const float *qkv, float *out) {
    int b = blockIdx.x, i = threadIdx.x;
    for (int j = i; j < HIDDEN; j += blockDim.x) {
        float q = qkv[b * 3 * HIDDEN + j], k = qkv[b * 3 * HIDDEN + HIDDEN + j];
        float v = qkv[b * 3 * HIDDEN + 2 * HIDDEN + j];
        out[b * HIDDEN + j] = v / (1.0f + expf(-q * k));
    }
}

__global__ void residual_gelu(float *x, const float *h) {
    int b = blockIdx.x;
    for (int j = threadIdx.x; j < HIDDEN; j += blockDim.x) {
        float v = h[b * HIDDEN + j];
        x[b * HIDDEN + j] += 0.5f * v * (1.0f + tanhf(0.79788456f * (v + 0.044715f * v * v * v)));
    }
}

__global__ void tiny(float *x) {
    if (threadIdx.x == 0 && x) x[0] += 1.0f;
}

struct Stream {
    cudaStream_t s;
    int *tokens_d, *tokens_h;
    float *x, *h, *qkv, *logits_d, *logits_h;
};

static double now_s() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// Frame pointers kept (-fno-omit-frame-pointer) and no inlining, so the CPU stacks
// show this structure.
__attribute__((noinline)) static void layer(Stream &st, const float *w_qkv, const float *w_o) {
    rms_norm<<<BATCH, 256, 0, st.s>>>(st.x);
    matvec<<<dim3(3 * HIDDEN / 256, BATCH), 256, 0, st.s>>>(w_qkv, st.x, st.qkv, 3 * HIDDEN);
    attention<<<BATCH, 256, 0, st.s>>>(st.qkv, st.h);
    matvec<<<dim3(HIDDEN / 256, BATCH), 256, 0, st.s>>>(w_o, st.h, st.qkv, HIDDEN);
    residual_gelu<<<BATCH, 256, 0, st.s>>>(st.x, st.qkv);
}

__attribute__((noinline)) static void decode_step(Stream &st, const float *table,
                                                  const std::vector<float *> &w, int step) {
    for (int b = 0; b < BATCH; b++) st.tokens_h[b] = step * 31 + b * 7;
    CHECK(cudaMemcpyAsync(st.tokens_d, st.tokens_h, BATCH * sizeof(int), cudaMemcpyHostToDevice, st.s));
    embed<<<BATCH, 256, 0, st.s>>>(st.tokens_d, table, st.x);
    for (int l = 0; l < NUM_LAYERS; l++) layer(st, w[2 * l], w[2 * l + 1]);
    matvec<<<dim3(HIDDEN / 256, BATCH), 256, 0, st.s>>>(w[0], st.x, st.logits_d, HIDDEN);
    CHECK(cudaMemcpyAsync(st.logits_h, st.logits_d, BATCH * HIDDEN * sizeof(float), cudaMemcpyDeviceToHost, st.s));
}

__attribute__((noinline)) static long launch_bound(Stream *streams, int nstreams, int steps) {
    long launches = 0;
    for (int i = 0; i < steps; i++) {
        Stream &st = streams[i % nstreams];
        for (int k = 0; k < 100; k++, launches++) tiny<<<1, 32, 0, st.s>>>(nullptr);
    }
    return launches;
}

int main(int argc, char **argv) {
    int steps = 50, nstreams = 4;
    bool bound = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--streams") && i + 1 < argc) nstreams = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--launch-bound")) bound = true;
        else {
            fprintf(stderr, "usage: mock_llm [--steps N] [--streams S] [--launch-bound]\n");
            return 2;
        }
    }
    if (steps <= 0 || nstreams <= 0) {
        fprintf(stderr, "mock_llm: --steps and --streams must be positive\n");
        return 2;
    }
    std::vector<Stream> streams(nstreams);
    for (auto &st : streams) {
        CHECK(cudaStreamCreateWithFlags(&st.s, cudaStreamNonBlocking));
        CHECK(cudaMalloc(&st.tokens_d, BATCH * sizeof(int)));
        CHECK(cudaMallocHost(&st.tokens_h, BATCH * sizeof(int)));
        CHECK(cudaMalloc(&st.x, BATCH * HIDDEN * sizeof(float)));
        CHECK(cudaMalloc(&st.h, BATCH * HIDDEN * sizeof(float)));
        CHECK(cudaMalloc(&st.qkv, BATCH * 3 * HIDDEN * sizeof(float)));
        CHECK(cudaMalloc(&st.logits_d, BATCH * HIDDEN * sizeof(float)));
        CHECK(cudaMallocHost(&st.logits_h, BATCH * HIDDEN * sizeof(float)));
    }
    double t0 = now_s();
    long launches;
    if (bound) {
        launches = launch_bound(streams.data(), nstreams, steps * 100);
    } else {
        float *table;
        CHECK(cudaMalloc(&table, (size_t)VOCAB * HIDDEN * sizeof(float)));
        CHECK(cudaMemset(table, 0, (size_t)VOCAB * HIDDEN * sizeof(float)));
        std::vector<float *> w(2 * NUM_LAYERS);
        for (int l = 0; l < NUM_LAYERS; l++) {
            CHECK(cudaMalloc(&w[2 * l], (size_t)3 * HIDDEN * HIDDEN * sizeof(float)));
            CHECK(cudaMalloc(&w[2 * l + 1], (size_t)HIDDEN * HIDDEN * sizeof(float)));
            CHECK(cudaMemset(w[2 * l], 0, (size_t)3 * HIDDEN * HIDDEN * sizeof(float)));
            CHECK(cudaMemset(w[2 * l + 1], 0, (size_t)HIDDEN * HIDDEN * sizeof(float)));
        }
        t0 = now_s();
        for (int i = 0; i < steps; i++) decode_step(streams[i % nstreams], table, w, i);
        launches = (long)steps * (2 + NUM_LAYERS * 5);
    }
    CHECK(cudaDeviceSynchronize());
    double dt = now_s() - t0;
    printf("mock_llm: %s, %d steps on %d streams, %ld launches in %.3f s (%.0f launches/s)\n",
           bound ? "launch-bound" : "decode", steps, nstreams, launches, dt, launches / dt);
    return 0;
}
