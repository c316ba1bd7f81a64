/* Simulated cuBLAS, libcublas.so.13 (no GPU): each BLAS call launches one simulated kernel named after it; nothing is computed.
 *
 * What it does: handles, streams, workspaces, math, pointer and atomics modes,
 * the GEMM families (S/D/C/Z, batched, strided-batched, GemmEx and its batched
 * forms, SgemmEx/CgemmEx, and every `_64` variant), the level-2 and level-1
 * routines PyTorch calls (gemv, ger, dot, axpy, scal, nrm2, asum, copy, swap,
 * amax/amin), and host<->device vector and matrix copies (real copies, through
 * the simulated runtime). Each operation launches one kernel through the
 * simulated runtime's cudaLaunchKernel, on the handle's stream, named
 * `simulated_cublas_<operation>` and costed from its FLOPs and bytes (the cost
 * model of sim/README.md).
 *
 * What it does not do: compute anything (results are whatever the output memory
 * held), read alpha or beta, check leading dimensions beyond their sign; every
 * other function of cublas_api.h (solvers such as getrf/trsm, symmetric and
 * triangular routines, ...) returns CUBLAS_STATUS_NOT_SUPPORTED. It prints
 * nothing. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "gpusim.h"
#include "simblas.h"

#define MAGIC_HANDLE 0x63626c73u

struct cublasContext {
    uint32_t magic;
    int device;
    cudaStream_t stream;
    void *workspace;
    size_t workspace_bytes;
    cublasMath_t math;
    cublasPointerMode_t pointer_mode;
    cublasAtomicsMode_t atomics;
    int sm_target;
    cublasEmulationStrategy_t emulation;
};

static struct cublasContext *ctx(cublasHandle_t h) {
    return h && h->magic == MAGIC_HANDLE ? h : NULL;
}

#define HANDLE(h)                                                                      \
    struct cublasContext *c_ = ctx(h);                                                 \
    if (!c_)                                                                           \
        return CUBLAS_STATUS_NOT_INITIALIZED

/* ------------------------------------------------------------------ helpers */

GPUSIM_EXPORT cublasStatus_t cublasCreate_v2(cublasHandle_t *handle) {
    if (!handle)
        return CUBLAS_STATUS_INVALID_VALUE;
    int dev = 0;
    /* As cuBLAS does: the handle belongs to the current device, whose context
     * this makes. */
    if (cudaGetDevice(&dev) != cudaSuccess || cudaFree(NULL) != cudaSuccess)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    struct cublasContext *c = calloc(1, sizeof *c);
    if (!c)
        return CUBLAS_STATUS_ALLOC_FAILED;
    c->magic = MAGIC_HANDLE;
    c->device = dev;
    c->math = CUBLAS_DEFAULT_MATH;
    c->pointer_mode = CUBLAS_POINTER_MODE_HOST;
    c->atomics = CUBLAS_ATOMICS_NOT_ALLOWED;
    *handle = c;
    return CUBLAS_STATUS_SUCCESS;
}

GPUSIM_EXPORT cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
    HANDLE(handle);
    c_->magic = 0;
    free(c_);
    return CUBLAS_STATUS_SUCCESS;
}

GPUSIM_EXPORT cublasStatus_t cublasGetVersion_v2(cublasHandle_t handle, int *version) {
    if (!version)
        return CUBLAS_STATUS_INVALID_VALUE;
    *version = CUBLAS_VERSION;
    return CUBLAS_STATUS_SUCCESS;
}

GPUSIM_EXPORT cublasStatus_t cublasGetProperty(libraryPropertyType type, int *value) {
    if (!value)
        return CUBLAS_STATUS_INVALID_VALUE;
    switch (type) {
    case MAJOR_VERSION: *value = CUBLAS_VER_MAJOR; break;
    case MINOR_VERSION: *value = CUBLAS_VER_MINOR; break;
    case PATCH_LEVEL: *value = CUBLAS_VER_PATCH; break;
    default: return CUBLAS_STATUS_INVALID_VALUE;
    }
    return CUBLAS_STATUS_SUCCESS;
}

GPUSIM_EXPORT size_t cublasGetCudartVersion(void) { return 13000; }

GPUSIM_EXPORT const char *cublasGetStatusName(cublasStatus_t status) { return simblas_status_name(status); }

GPUSIM_EXPORT const char *cublasGetStatusString(cublasStatus_t status) {
    return simblas_status_string(status);
}

GPUSIM_EXPORT cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
    HANDLE(handle);
    c_->stream = stream;
    /* As documented: a new stream resets the workspace to the default pool. */
    c_->workspace = NULL;
    c_->workspace_bytes = 0;
    return CUBLAS_STATUS_SUCCESS;
}

GPUSIM_EXPORT cublasStatus_t cublasGetStream_v2(cublasHandle_t handle, cudaStream_t *stream) {
    HANDLE(handle);
    if (!stream)
        return CUBLAS_STATUS_INVALID_VALUE;
    *stream = c_->stream;
    return CUBLAS_STATUS_SUCCESS;
}

GPUSIM_EXPORT cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t handle, void *workspace, size_t bytes) {
    HANDLE(handle);
    if (bytes && !workspace)
        return CUBLAS_STATUS_INVALID_VALUE;
    c_->workspace = workspace;
    c_->workspace_bytes = bytes;
    return CUBLAS_STATUS_SUCCESS;
}

GPUSIM_EXPORT cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
    HANDLE(handle);
    c_->math = mode;
    return CUBLAS_STATUS_SUCCESS;
}

GPUSIM_EXPORT cublasStatus_t cublasGetMathMode(cublasHandle_t handle, cublasMath_t *mode) {
    HANDLE(handle);
    if (!mode)
        return CUBLAS_STATUS_INVALID_VALUE;
    *mode = c_->math;
    return CUBLAS_STATUS_SUCCESS;
}

GPUSIM_EXPORT cublasStatus_t cublasSetPointerMode_v2(cublasHandle_t handle, cublasPointerMode_t mode) {
    HANDLE(handle);
    if (mode != CUBLAS_POINTER_MODE_HOST && mode != CUBLAS_POINTER_MODE_DEVICE)
        return CUBLAS_STATUS_INVALID_VALUE;
    c_->pointer_mode = mode;
    return CUBLAS_STATUS_SUCCESS;
}

GPUSIM_EXPORT cublasStatus_t cublasGetPointerMode_v2(cublasHandle_t handle, cublasPointerMode_t *mode) {
    HANDLE(handle);
    if (!mode)
        return CUBLAS_STATUS_INVALID_VALUE;
    *mode = c_->pointer_mode;
    return CUBLAS_STATUS_SUCCESS;
}

GPUSIM_EXPORT cublasStatus_t cublasSetAtomicsMode(cublasHandle_t handle, cublasAtomicsMode_t mode) {
    HANDLE(handle);
    c_->atomics = mode;
    return CUBLAS_STATUS_SUCCESS;
}

GPUSIM_EXPORT cublasStatus_t cublasGetAtomicsMode(cublasHandle_t handle, cublasAtomicsMode_t *mode) {
    HANDLE(handle);
    if (!mode)
        return CUBLAS_STATUS_INVALID_VALUE;
    *mode = c_->atomics;
    return CUBLAS_STATUS_SUCCESS;
}

GPUSIM_EXPORT cublasStatus_t cublasSetSmCountTarget(cublasHandle_t handle, int count) {
    HANDLE(handle);
    if (count < 0)
        return CUBLAS_STATUS_INVALID_VALUE;
    c_->sm_target = count;
    return CUBLAS_STATUS_SUCCESS;
}

GPUSIM_EXPORT cublasStatus_t cublasGetSmCountTarget(cublasHandle_t handle, int *count) {
    HANDLE(handle);
    if (!count)
        return CUBLAS_STATUS_INVALID_VALUE;
    *count = c_->sm_target;
    return CUBLAS_STATUS_SUCCESS;
}

GPUSIM_EXPORT cublasStatus_t cublasSetEmulationStrategy(cublasHandle_t handle, cublasEmulationStrategy_t s) {
    HANDLE(handle);
    c_->emulation = s;
    return CUBLAS_STATUS_SUCCESS;
}

GPUSIM_EXPORT cublasStatus_t cublasGetEmulationStrategy(cublasHandle_t handle, cublasEmulationStrategy_t *s) {
    HANDLE(handle);
    if (!s)
        return CUBLAS_STATUS_INVALID_VALUE;
    *s = c_->emulation;
    return CUBLAS_STATUS_SUCCESS;
}

GPUSIM_EXPORT cublasStatus_t cublasLoggerConfigure(int logIsOn, int logToStdOut, int logToStdErr,
                                                   const char *logFileName) {
    return CUBLAS_STATUS_SUCCESS;
}

GPUSIM_EXPORT cublasStatus_t cublasSetLoggerCallback(cublasLogCallback userCallback) {
    return CUBLAS_STATUS_SUCCESS;
}

GPUSIM_EXPORT cublasStatus_t cublasGetLoggerCallback(cublasLogCallback *userCallback) {
    if (!userCallback)
        return CUBLAS_STATUS_INVALID_VALUE;
    *userCallback = NULL;
    return CUBLAS_STATUS_SUCCESS;
}

/* ------------------------------------------------------------------ vector and matrix copies */

static cublasStatus_t copy_2d(void *dst, int64_t ldd, const void *src, int64_t lds, int64_t rows, int64_t cols,
                              int64_t elem, enum cudaMemcpyKind kind, cudaStream_t stream, int async) {
    if (rows < 0 || cols < 0 || elem <= 0 || ldd < rows || lds < rows || !dst || !src)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (!rows || !cols)
        return CUBLAS_STATUS_SUCCESS;
    cudaError_t e = async ? cudaMemcpy2DAsync(dst, (size_t)(ldd * elem), src, (size_t)(lds * elem),
                                              (size_t)(rows * elem), (size_t)cols, kind, stream)
                          : cudaMemcpy2D(dst, (size_t)(ldd * elem), src, (size_t)(lds * elem),
                                         (size_t)(rows * elem), (size_t)cols, kind);
    return e == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_MAPPING_ERROR;
}

/* A vector with increment inc is a rows=1 matrix of n columns with ld = inc. */
#define VECTOR_COPY(name, kind)                                                                    \
    GPUSIM_EXPORT cublasStatus_t name##_64(int64_t n, int64_t elemSize, const void *x, int64_t incx, \
                                           void *y, int64_t incy) {                                \
        if (incx <= 0 || incy <= 0)                                                                \
            return CUBLAS_STATUS_INVALID_VALUE;                                                    \
        return copy_2d(y, incy, x, incx, 1, n, elemSize, kind, NULL, 0);                           \
    }                                                                                              \
    GPUSIM_EXPORT cublasStatus_t name(int n, int elemSize, const void *x, int incx, void *y, int incy) { \
        return name##_64(n, elemSize, x, incx, y, incy);                                           \
    }                                                                                              \
    GPUSIM_EXPORT cublasStatus_t name##Async_64(int64_t n, int64_t elemSize, const void *x,        \
                                                int64_t incx, void *y, int64_t incy, cudaStream_t s) { \
        if (incx <= 0 || incy <= 0)                                                                \
            return CUBLAS_STATUS_INVALID_VALUE;                                                    \
        return copy_2d(y, incy, x, incx, 1, n, elemSize, kind, s, 1);                              \
    }                                                                                              \
    GPUSIM_EXPORT cublasStatus_t name##Async(int n, int elemSize, const void *x, int incx, void *y, \
                                             int incy, cudaStream_t s) {                           \
        return name##Async_64(n, elemSize, x, incx, y, incy, s);                                   \
    }
VECTOR_COPY(cublasSetVector, cudaMemcpyHostToDevice)
VECTOR_COPY(cublasGetVector, cudaMemcpyDeviceToHost)

#define MATRIX_COPY(name, kind)                                                                    \
    GPUSIM_EXPORT cublasStatus_t name##_64(int64_t rows, int64_t cols, int64_t elemSize, const void *A, \
                                           int64_t lda, void *B, int64_t ldb) {                    \
        return copy_2d(B, ldb, A, lda, rows, cols, elemSize, kind, NULL, 0);                       \
    }                                                                                              \
    GPUSIM_EXPORT cublasStatus_t name(int rows, int cols, int elemSize, const void *A, int lda, void *B, \
                                      int ldb) {                                                   \
        return copy_2d(B, ldb, A, lda, rows, cols, elemSize, kind, NULL, 0);                       \
    }                                                                                              \
    GPUSIM_EXPORT cublasStatus_t name##Async_64(int64_t rows, int64_t cols, int64_t elemSize,      \
                                                const void *A, int64_t lda, void *B, int64_t ldb,  \
                                                cudaStream_t s) {                                  \
        return copy_2d(B, ldb, A, lda, rows, cols, elemSize, kind, s, 1);                          \
    }                                                                                              \
    GPUSIM_EXPORT cublasStatus_t name##Async(int rows, int cols, int elemSize, const void *A, int lda, \
                                             void *B, int ldb, cudaStream_t s) {                   \
        return copy_2d(B, ldb, A, lda, rows, cols, elemSize, kind, s, 1);                          \
    }
MATRIX_COPY(cublasSetMatrix, cudaMemcpyHostToDevice)
MATRIX_COPY(cublasGetMatrix, cudaMemcpyDeviceToHost)

/* ------------------------------------------------------------------ GEMM */

static char op_letter(cublasOperation_t op) {
    return op == CUBLAS_OP_N ? 'n' : op == CUBLAS_OP_T ? 't' : 'c';
}

/* One GEMM (or a batch of them) as one simulated kernel on the handle's stream. */
static cublasStatus_t gemm(struct cublasContext *c, const char *what, cublasOperation_t ta, cublasOperation_t tb,
                           int64_t m, int64_t n, int64_t k, int64_t batch, const void *A, const void *B,
                           const void *C, int64_t lda, int64_t ldb, int64_t ldc, cudaDataType type) {
    if (m < 0 || n < 0 || k < 0 || batch < 0 || lda < 0 || ldb < 0 || ldc < 0)
        return CUBLAS_STATUS_INVALID_VALUE;
    if ((ta != CUBLAS_OP_N && ta != CUBLAS_OP_T && ta != CUBLAS_OP_C) ||
        (tb != CUBLAS_OP_N && tb != CUBLAS_OP_T && tb != CUBLAS_OP_C))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (!m || !n || !batch)
        return CUBLAS_STATUS_SUCCESS;
    char name[96];
    snprintf(name, sizeof name, "simulated_cublas_%s_%c%c", what, op_letter(ta), op_letter(tb));
    return simblas_launch_gemm(name, m, n, k, batch, type, c->stream);
}

#define GEMM(prefix, T, type)                                                                      \
    GPUSIM_EXPORT cublasStatus_t cublas##prefix##gemm_v2_64(                                       \
        cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n, int64_t k, \
        const T *alpha, const T *A, int64_t lda, const T *B, int64_t ldb, const T *beta, T *C,       \
        int64_t ldc) {                                                                             \
        HANDLE(h);                                                                                 \
        return gemm(c_, #prefix "gemm", ta, tb, m, n, k, 1, A, B, C, lda, ldb, ldc, type);          \
    }                                                                                              \
    GPUSIM_EXPORT cublasStatus_t cublas##prefix##gemm_v2(                                          \
        cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,         \
        const T *alpha, const T *A, int lda, const T *B, int ldb, const T *beta, T *C, int ldc) {  \
        return cublas##prefix##gemm_v2_64(h, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc); \
    }                                                                                              \
    GPUSIM_EXPORT cublasStatus_t cublas##prefix##gemmStridedBatched_64(                            \
        cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n, int64_t k, \
        const T *alpha, const T *A, int64_t lda, long long sa, const T *B, int64_t ldb, long long sb, \
        const T *beta, T *C, int64_t ldc, long long sc, int64_t batch) {                           \
        HANDLE(h);                                                                                 \
        return gemm(c_, #prefix "gemm_strided_batched", ta, tb, m, n, k, batch, A, B, C, lda, ldb, \
                    ldc, type);                                                                    \
    }                                                                                              \
    GPUSIM_EXPORT cublasStatus_t cublas##prefix##gemmStridedBatched(                               \
        cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,         \
        const T *alpha, const T *A, int lda, long long sa, const T *B, int ldb, long long sb,      \
        const T *beta, T *C, int ldc, long long sc, int batch) {                                   \
        return cublas##prefix##gemmStridedBatched_64(h, ta, tb, m, n, k, alpha, A, lda, sa, B, ldb, \
                                                     sb, beta, C, ldc, sc, batch);                 \
    }                                                                                              \
    GPUSIM_EXPORT cublasStatus_t cublas##prefix##gemmBatched_64(                                   \
        cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n, int64_t k, \
        const T *alpha, const T *const A[], int64_t lda, const T *const B[], int64_t ldb,          \
        const T *beta, T *const C[], int64_t ldc, int64_t batch) {                                 \
        HANDLE(h);                                                                                 \
        if (batch > 0 && (!A || !B || !C))                                                         \
            return CUBLAS_STATUS_INVALID_VALUE;                                                    \
        return gemm(c_, #prefix "gemm_batched", ta, tb, m, n, k, batch, A, B, C, lda, ldb, ldc,    \
                    type);                                                                         \
    }                                                                                              \
    GPUSIM_EXPORT cublasStatus_t cublas##prefix##gemmBatched(                                      \
        cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,         \
        const T *alpha, const T *const A[], int lda, const T *const B[], int ldb, const T *beta,   \
        T *const C[], int ldc, int batch) {                                                        \
        return cublas##prefix##gemmBatched_64(h, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C,  \
                                              ldc, batch);                                         \
    }
GEMM(S, float, CUDA_R_32F)
GEMM(D, double, CUDA_R_64F)
GEMM(C, cuComplex, CUDA_C_32F)
GEMM(Z, cuDoubleComplex, CUDA_C_64F)

GPUSIM_EXPORT cublasStatus_t cublasGemmEx_64(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb,
                                             int64_t m, int64_t n, int64_t k, const void *alpha, const void *A,
                                             cudaDataType Atype, int64_t lda, const void *B, cudaDataType Btype,
                                             int64_t ldb, const void *beta, void *C, cudaDataType Ctype,
                                             int64_t ldc, cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
    HANDLE(h);
    char what[48];
    snprintf(what, sizeof what, "gemmex_%s", simblas_type_name(Atype));
    return gemm(c_, what, ta, tb, m, n, k, 1, A, B, C, lda, ldb, ldc, Atype);
}

GPUSIM_EXPORT cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                                          int n, int k, const void *alpha, const void *A, cudaDataType Atype,
                                          int lda, const void *B, cudaDataType Btype, int ldb, const void *beta,
                                          void *C, cudaDataType Ctype, int ldc, cublasComputeType_t computeType,
                                          cublasGemmAlgo_t algo) {
    return cublasGemmEx_64(h, ta, tb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb, beta, C, Ctype, ldc,
                           computeType, algo);
}

GPUSIM_EXPORT cublasStatus_t cublasGemmStridedBatchedEx_64(
    cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n, int64_t k,
    const void *alpha, const void *A, cudaDataType Atype, int64_t lda, long long sa, const void *B,
    cudaDataType Btype, int64_t ldb, long long sb, const void *beta, void *C, cudaDataType Ctype, int64_t ldc,
    long long sc, int64_t batch, cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
    HANDLE(h);
    char what[64];
    snprintf(what, sizeof what, "gemmex_strided_batched_%s", simblas_type_name(Atype));
    return gemm(c_, what, ta, tb, m, n, k, batch, A, B, C, lda, ldb, ldc, Atype);
}

GPUSIM_EXPORT cublasStatus_t cublasGemmStridedBatchedEx(
    cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void *alpha,
    const void *A, cudaDataType Atype, int lda, long long sa, const void *B, cudaDataType Btype, int ldb,
    long long sb, const void *beta, void *C, cudaDataType Ctype, int ldc, long long sc, int batch,
    cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
    return cublasGemmStridedBatchedEx_64(h, ta, tb, m, n, k, alpha, A, Atype, lda, sa, B, Btype, ldb, sb, beta,
                                         C, Ctype, ldc, sc, batch, computeType, algo);
}

GPUSIM_EXPORT cublasStatus_t cublasGemmBatchedEx_64(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb,
                                                    int64_t m, int64_t n, int64_t k, const void *alpha,
                                                    const void *const A[], cudaDataType Atype, int64_t lda,
                                                    const void *const B[], cudaDataType Btype, int64_t ldb,
                                                    const void *beta, void *const C[], cudaDataType Ctype,
                                                    int64_t ldc, int64_t batch, cublasComputeType_t computeType,
                                                    cublasGemmAlgo_t algo) {
    HANDLE(h);
    char what[64];
    snprintf(what, sizeof what, "gemmex_batched_%s", simblas_type_name(Atype));
    return gemm(c_, what, ta, tb, m, n, k, batch, A, B, C, lda, ldb, ldc, Atype);
}

GPUSIM_EXPORT cublasStatus_t cublasGemmBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb,
                                                 int m, int n, int k, const void *alpha, const void *const A[],
                                                 cudaDataType Atype, int lda, const void *const B[],
                                                 cudaDataType Btype, int ldb, const void *beta, void *const C[],
                                                 cudaDataType Ctype, int ldc, int batch,
                                                 cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
    return cublasGemmBatchedEx_64(h, ta, tb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb, beta, C, Ctype, ldc,
                                  batch, computeType, algo);
}

GPUSIM_EXPORT cublasStatus_t cublasSgemmEx_64(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb,
                                              int64_t m, int64_t n, int64_t k, const float *alpha, const void *A,
                                              cudaDataType Atype, int64_t lda, const void *B, cudaDataType Btype,
                                              int64_t ldb, const float *beta, void *C, cudaDataType Ctype,
                                              int64_t ldc) {
    HANDLE(h);
    char what[48];
    snprintf(what, sizeof what, "sgemmex_%s", simblas_type_name(Atype));
    return gemm(c_, what, ta, tb, m, n, k, 1, A, B, C, lda, ldb, ldc, Atype);
}

GPUSIM_EXPORT cublasStatus_t cublasSgemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                                           int n, int k, const float *alpha, const void *A, cudaDataType Atype,
                                           int lda, const void *B, cudaDataType Btype, int ldb, const float *beta,
                                           void *C, cudaDataType Ctype, int ldc) {
    return cublasSgemmEx_64(h, ta, tb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb, beta, C, Ctype, ldc);
}

/* ------------------------------------------------------------------ levels 1 and 2 */

/* A routine that streams `bytes` and does `flops` as one small kernel. */
static cublasStatus_t vector_op(struct cublasContext *c, const char *what, int64_t n, double flops, double bytes) {
    if (n < 0)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (!n)
        return CUBLAS_STATUS_SUCCESS;
    char name[96];
    snprintf(name, sizeof name, "simulated_cublas_%s", what);
    return simblas_launch(name, n, 1, flops, bytes, 0, c->stream);
}

#define GEMV(prefix, T, size)                                                                      \
    GPUSIM_EXPORT cublasStatus_t cublas##prefix##gemv_v2_64(                                       \
        cublasHandle_t h, cublasOperation_t trans, int64_t m, int64_t n, const T *alpha, const T *A, \
        int64_t lda, const T *x, int64_t incx, const T *beta, T *y, int64_t incy) {                \
        HANDLE(h);                                                                                 \
        if (m < 0 || n < 0 || lda < m || !incx || !incy)                                          \
            return CUBLAS_STATUS_INVALID_VALUE;                                                    \
        char what[32];                                                                             \
        snprintf(what, sizeof what, #prefix "gemv_%c", op_letter(trans));                          \
        return vector_op(c_, what, m && n ? m * n : 0, 2.0 * m * n, (double)size * (m * n + m + n)); \
    }                                                                                              \
    GPUSIM_EXPORT cublasStatus_t cublas##prefix##gemv_v2(                                          \
        cublasHandle_t h, cublasOperation_t trans, int m, int n, const T *alpha, const T *A, int lda, \
        const T *x, int incx, const T *beta, T *y, int incy) {                                     \
        return cublas##prefix##gemv_v2_64(h, trans, m, n, alpha, A, lda, x, incx, beta, y, incy);  \
    }
GEMV(S, float, 4)
GEMV(D, double, 8)
GEMV(C, cuComplex, 8)
GEMV(Z, cuDoubleComplex, 16)

#define GER(name, T, size)                                                                         \
    GPUSIM_EXPORT cublasStatus_t cublas##name##_v2_64(cublasHandle_t h, int64_t m, int64_t n,      \
                                                      const T *alpha, const T *x, int64_t incx,    \
                                                      const T *y, int64_t incy, T *A, int64_t lda) { \
        HANDLE(h);                                                                                 \
        if (m < 0 || n < 0 || lda < m || !incx || !incy)                                          \
            return CUBLAS_STATUS_INVALID_VALUE;                                                    \
        return vector_op(c_, #name, m && n ? m * n : 0, 2.0 * m * n, (double)size * 2 * m * n);    \
    }                                                                                              \
    GPUSIM_EXPORT cublasStatus_t cublas##name##_v2(cublasHandle_t h, int m, int n, const T *alpha, \
                                                   const T *x, int incx, const T *y, int incy, T *A, \
                                                   int lda) {                                      \
        return cublas##name##_v2_64(h, m, n, alpha, x, incx, y, incy, A, lda);                     \
    }
GER(Sger, float, 4)
GER(Dger, double, 8)
GER(Cgeru, cuComplex, 8)
GER(Cgerc, cuComplex, 8)
GER(Zgeru, cuDoubleComplex, 16)
GER(Zgerc, cuDoubleComplex, 16)

/* x·y into a host or device scalar: the simulated result is 0. */
#define DOT(name, T, R, size)                                                                      \
    GPUSIM_EXPORT cublasStatus_t cublas##name##_v2_64(cublasHandle_t h, int64_t n, const T *x,     \
                                                      int64_t incx, const T *y, int64_t incy, R *result) { \
        HANDLE(h);                                                                                 \
        if (!result)                                                                               \
            return CUBLAS_STATUS_INVALID_VALUE;                                                    \
        if (c_->pointer_mode == CUBLAS_POINTER_MODE_HOST)                                          \
            memset(result, 0, sizeof *result);                                                     \
        return vector_op(c_, #name, n, 2.0 * n, 2.0 * size * n);                                   \
    }                                                                                              \
    GPUSIM_EXPORT cublasStatus_t cublas##name##_v2(cublasHandle_t h, int n, const T *x, int incx,  \
                                                   const T *y, int incy, R *result) {              \
        return cublas##name##_v2_64(h, n, x, incx, y, incy, result);                               \
    }
DOT(Sdot, float, float, 4)
DOT(Ddot, double, double, 8)
DOT(Cdotu, cuComplex, cuComplex, 8)
DOT(Cdotc, cuComplex, cuComplex, 8)
DOT(Zdotu, cuDoubleComplex, cuDoubleComplex, 16)
DOT(Zdotc, cuDoubleComplex, cuDoubleComplex, 16)

/* ‖x‖ and Σ|x| into a scalar (0 here). */
#define REDUCE(name, T, R, size)                                                                   \
    GPUSIM_EXPORT cublasStatus_t cublas##name##_v2_64(cublasHandle_t h, int64_t n, const T *x,     \
                                                      int64_t incx, R *result) {                   \
        HANDLE(h);                                                                                 \
        if (!result)                                                                               \
            return CUBLAS_STATUS_INVALID_VALUE;                                                    \
        if (c_->pointer_mode == CUBLAS_POINTER_MODE_HOST)                                          \
            memset(result, 0, sizeof *result);                                                     \
        return vector_op(c_, #name, n, 2.0 * n, (double)size * n);                                 \
    }                                                                                              \
    GPUSIM_EXPORT cublasStatus_t cublas##name##_v2(cublasHandle_t h, int n, const T *x, int incx,  \
                                                   R *result) {                                    \
        return cublas##name##_v2_64(h, n, x, incx, result);                                        \
    }
REDUCE(Snrm2, float, float, 4)
REDUCE(Dnrm2, double, double, 8)
REDUCE(Scnrm2, cuComplex, float, 8)
REDUCE(Dznrm2, cuDoubleComplex, double, 16)
REDUCE(Sasum, float, float, 4)
REDUCE(Dasum, double, double, 8)
REDUCE(Scasum, cuComplex, float, 8)
REDUCE(Dzasum, cuDoubleComplex, double, 16)

/* The index of the largest or smallest |x| (1 here, a valid index). */
#define IAMAX(name, T, size)                                                                       \
    GPUSIM_EXPORT cublasStatus_t cublas##name##_v2_64(cublasHandle_t h, int64_t n, const T *x,     \
                                                      int64_t incx, int64_t *result) {             \
        HANDLE(h);                                                                                 \
        if (!result)                                                                               \
            return CUBLAS_STATUS_INVALID_VALUE;                                                    \
        if (c_->pointer_mode == CUBLAS_POINTER_MODE_HOST)                                          \
            *result = n > 0 ? 1 : 0;                                                               \
        return vector_op(c_, #name, n, (double)n, (double)size * n);                               \
    }                                                                                              \
    GPUSIM_EXPORT cublasStatus_t cublas##name##_v2(cublasHandle_t h, int n, const T *x, int incx,  \
                                                   int *result) {                                  \
        HANDLE(h);                                                                                 \
        if (!result)                                                                               \
            return CUBLAS_STATUS_INVALID_VALUE;                                                    \
        if (c_->pointer_mode == CUBLAS_POINTER_MODE_HOST)                                          \
            *result = n > 0 ? 1 : 0;                                                               \
        return vector_op(c_, #name, n, (double)n, (double)size * n);                               \
    }
IAMAX(Isamax, float, 4)
IAMAX(Idamax, double, 8)
IAMAX(Icamax, cuComplex, 8)
IAMAX(Izamax, cuDoubleComplex, 16)
IAMAX(Isamin, float, 4)
IAMAX(Idamin, double, 8)
IAMAX(Icamin, cuComplex, 8)
IAMAX(Izamin, cuDoubleComplex, 16)

#define AXPY(name, T, size)                                                                        \
    GPUSIM_EXPORT cublasStatus_t cublas##name##_v2_64(cublasHandle_t h, int64_t n, const T *alpha, \
                                                      const T *x, int64_t incx, T *y, int64_t incy) { \
        HANDLE(h);                                                                                 \
        return vector_op(c_, #name, n, 2.0 * n, 3.0 * size * n);                                   \
    }                                                                                              \
    GPUSIM_EXPORT cublasStatus_t cublas##name##_v2(cublasHandle_t h, int n, const T *alpha,        \
                                                   const T *x, int incx, T *y, int incy) {         \
        return cublas##name##_v2_64(h, n, alpha, x, incx, y, incy);                                \
    }
AXPY(Saxpy, float, 4)
AXPY(Daxpy, double, 8)
AXPY(Caxpy, cuComplex, 8)
AXPY(Zaxpy, cuDoubleComplex, 16)

#define SCAL(name, S, T, size)                                                                     \
    GPUSIM_EXPORT cublasStatus_t cublas##name##_v2_64(cublasHandle_t h, int64_t n, const S *alpha, \
                                                      T *x, int64_t incx) {                        \
        HANDLE(h);                                                                                 \
        return vector_op(c_, #name, n, (double)n, 2.0 * size * n);                                 \
    }                                                                                              \
    GPUSIM_EXPORT cublasStatus_t cublas##name##_v2(cublasHandle_t h, int n, const S *alpha, T *x,  \
                                                   int incx) {                                     \
        return cublas##name##_v2_64(h, n, alpha, x, incx);                                         \
    }
SCAL(Sscal, float, float, 4)
SCAL(Dscal, double, double, 8)
SCAL(Cscal, cuComplex, cuComplex, 8)
SCAL(Csscal, float, cuComplex, 8)
SCAL(Zscal, cuDoubleComplex, cuDoubleComplex, 16)
SCAL(Zdscal, double, cuDoubleComplex, 16)

#define COPY(name, T, size)                                                                        \
    GPUSIM_EXPORT cublasStatus_t cublas##name##_v2_64(cublasHandle_t h, int64_t n, const T *x,     \
                                                      int64_t incx, T *y, int64_t incy) {          \
        HANDLE(h);                                                                                 \
        return vector_op(c_, #name, n, 0, 2.0 * size * n);                                         \
    }                                                                                              \
    GPUSIM_EXPORT cublasStatus_t cublas##name##_v2(cublasHandle_t h, int n, const T *x, int incx,  \
                                                   T *y, int incy) {                               \
        return cublas##name##_v2_64(h, n, x, incx, y, incy);                                       \
    }
COPY(Scopy, float, 4)
COPY(Dcopy, double, 8)
COPY(Ccopy, cuComplex, 8)
COPY(Zcopy, cuDoubleComplex, 16)

#define SWAP(name, T, size)                                                                        \
    GPUSIM_EXPORT cublasStatus_t cublas##name##_v2_64(cublasHandle_t h, int64_t n, T *x,           \
                                                      int64_t incx, T *y, int64_t incy) {          \
        HANDLE(h);                                                                                 \
        return vector_op(c_, #name, n, 0, 4.0 * size * n);                                         \
    }                                                                                              \
    GPUSIM_EXPORT cublasStatus_t cublas##name##_v2(cublasHandle_t h, int n, T *x, int incx, T *y,  \
                                                   int incy) {                                     \
        return cublas##name##_v2_64(h, n, x, incx, y, incy);                                       \
    }
SWAP(Sswap, float, 4)
SWAP(Dswap, double, 8)
SWAP(Cswap, cuComplex, 8)
SWAP(Zswap, cuDoubleComplex, 16)

/* A marker for tools: this libcublas simulates. */
GPUSIM_EXPORT const char gpusim_cublas[] = "gpusim: simulated cuBLAS, no GPU";

/* Imported by NVIDIA's cuSOLVER (so that it loads), declared in no header. */
GPUSIM_EXPORT cublasStatus_t cublasSetEnvironmentMode(int mode) {
    (void)mode;
    return CUBLAS_STATUS_NOT_SUPPORTED;
}
