/* Simulated cuBLAS and cuBLASLt (no GPU): the launch of one simulated kernel per
 * operation, shared by the two stand-ins; nothing is computed. The cost comes
 * from the simulated driver's cost model (sim/README.md). */
#include "simblas.h"

#include "gpusim.h"

extern cudaError_t gpusim_launch_named(const char *name, dim3 grid, dim3 block, cudaStream_t stream,
                                       uint64_t cost_ns);
extern uint64_t gpusim_math_cost(double flops, double bytes, int tensor_cores);

const char *simblas_status_name(cublasStatus_t s) {
    switch (s) {
#define S(x) case x: return #x;
    S(CUBLAS_STATUS_SUCCESS) S(CUBLAS_STATUS_NOT_INITIALIZED) S(CUBLAS_STATUS_ALLOC_FAILED)
    S(CUBLAS_STATUS_INVALID_VALUE) S(CUBLAS_STATUS_ARCH_MISMATCH) S(CUBLAS_STATUS_MAPPING_ERROR)
    S(CUBLAS_STATUS_EXECUTION_FAILED) S(CUBLAS_STATUS_INTERNAL_ERROR) S(CUBLAS_STATUS_NOT_SUPPORTED)
    S(CUBLAS_STATUS_LICENSE_ERROR)
#undef S
    default: return "<unknown>";
    }
}

const char *simblas_status_string(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_MAPPING_ERROR: return "an access to GPU memory space failed";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
    default: return "an internal operation failed";
    }
}

const char *simblas_type_name(cudaDataType t) {
    switch (t) {
    case CUDA_R_16F: return "f16";
    case CUDA_R_16BF: return "bf16";
    case CUDA_R_32F: return "f32";
    case CUDA_R_64F: return "f64";
    case CUDA_C_32F: return "c64";
    case CUDA_C_64F: return "c128";
    case CUDA_R_8I: return "i8";
    case CUDA_R_32I: return "i32";
    case CUDA_R_8F_E4M3: return "f8e4m3";
    case CUDA_R_8F_E5M2: return "f8e5m2";
    default: return "other";
    }
}

static int type_size(cudaDataType t) {
    switch (t) {
    case CUDA_R_8I: case CUDA_R_8U: case CUDA_R_8F_E4M3: case CUDA_R_8F_E5M2: return 1;
    case CUDA_R_16F: case CUDA_R_16BF: return 2;
    case CUDA_R_32F: case CUDA_R_32I: return 4;
    case CUDA_R_64F: case CUDA_C_32F: return 8;
    case CUDA_C_64F: return 16;
    default: return 4;
    }
}

/* Complex multiply-adds are four real ones. */
static int complex_factor(cudaDataType t) { return t == CUDA_C_32F || t == CUDA_C_64F ? 4 : 1; }

cublasStatus_t simblas_launch(const char *name, int64_t items, int64_t batch, double flops, double bytes,
                              int tensor_cores, cudaStream_t stream) {
    int64_t blocks = (items + 255) / 256;
    if (blocks < 1)
        blocks = 1;
    if (blocks > 0x7fffffff)
        blocks = 0x7fffffff;
    if (batch < 1)
        batch = 1;
    dim3 grid = {(unsigned)blocks, 1, (unsigned)(batch > 65535 ? 65535 : batch)};
    dim3 block = {256, 1, 1};
    cudaError_t e = gpusim_launch_named(name, grid, block, stream, gpusim_math_cost(flops, bytes, tensor_cores));
    return e == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}

cublasStatus_t simblas_launch_gemm(const char *name, int64_t m, int64_t n, int64_t k, int64_t batch,
                                   cudaDataType type, cudaStream_t stream) {
    double es = type_size(type);
    double flops = 2.0 * complex_factor(type) * (double)m * (double)n * (double)k * (double)batch;
    double bytes = es * ((double)m * k + (double)k * n + 2.0 * (double)m * n) * (double)batch;
    int tensor = type_size(type) <= 2;
    /* One 128 x 128 tile of the output per block of 256 threads. */
    int64_t tiles = ((m + 127) / 128) * ((n + 127) / 128);
    int64_t blocks = tiles < 1 ? 1 : tiles;
    if (blocks > 0x7fffffff)
        blocks = 0x7fffffff;
    if (batch < 1)
        batch = 1;
    dim3 grid = {(unsigned)blocks, 1, (unsigned)(batch > 65535 ? 65535 : batch)};
    dim3 block = {256, 1, 1};
    cudaError_t e = gpusim_launch_named(name, grid, block, stream, gpusim_math_cost(flops, bytes, tensor));
    return e == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}
