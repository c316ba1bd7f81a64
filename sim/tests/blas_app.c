/* Simulated CUDA (no GPU): a C program, linked against the simulated cuBLAS and
 * cuBLASLt alone, that makes one call of each kind PyTorch makes and prints each
 * status: an SGEMM, a bf16 GemmEx, a strided-batched GEMM, a cuBLASLt matmul
 * with a bias epilogue on a cuBLAS handle, and a function the stand-in does not
 * implement (a triangular solve). Each implemented call launches one simulated
 * kernel; sim.rs checks their names and costs in a recording. */
#include <stdio.h>
#include <stdlib.h>

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

int main(void) {
    cublasHandle_t h;
    printf("create %s\n", cublasGetStatusName(cublasCreate(&h)));
    cudaStream_t s;
    cudaStreamCreate(&s);
    printf("set stream %s\n", cublasGetStatusName(cublasSetStream(h, s)));
    float *a, *b, *c;
    cudaMalloc((void **)&a, 1024 * 1024 * 4);
    cudaMalloc((void **)&b, 1024 * 1024 * 4);
    cudaMalloc((void **)&c, 1024 * 1024 * 4);
    float one = 1, zero = 0;
    printf("sgemm %s\n", cublasGetStatusName(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_T, 1024, 1024, 1024, &one,
                                                         a, 1024, b, 1024, &zero, c, 1024)));
    printf("gemmex %s\n",
           cublasGetStatusName(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, 512, 256, 128, &one, a, CUDA_R_16BF, 128,
                                            b, CUDA_R_16BF, 128, &zero, c, CUDA_R_16BF, 512,
                                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT)));
    printf("strided batched %s\n",
           cublasGetStatusName(cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, 64, 64, 64, &one, a, 64,
                                                         4096, b, 64, 4096, &zero, c, 64, 4096, 8)));
    /* cuBLASLt on the cuBLAS handle, as PyTorch does: D = A^T B + bias. */
    cublasLtHandle_t lt = (cublasLtHandle_t)h;
    cublasLtMatmulDesc_t desc;
    cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    cublasOperation_t t = CUBLAS_OP_T;
    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t);
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, 256, 128, 256); /* A is k x m, transposed */
    cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, 256, 64, 256);
    cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, 128, 64, 128);
    cublasLtMatmulPreference_t pref;
    cublasLtMatmulPreferenceCreate(&pref);
    cublasLtMatmulHeuristicResult_t r;
    int found = 0;
    cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, lc, lc, pref, 1, &r, &found);
    printf("heuristic %s %d\n", cublasGetStatusName(hs), found);
    printf("lt matmul %s\n", cublasGetStatusName(cublasLtMatmul(lt, desc, &one, a, la, b, lb, &zero, c, lc, c, lc,
                                                                &r.algo, NULL, 0, s)));
    printf("strsm %s\n", cublasGetStatusName(cublasStrsm(h, CUBLAS_SIDE_LEFT, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_N,
                                                         CUBLAS_DIAG_NON_UNIT, 16, 16, &one, a, 16, b, 16)));
    cudaStreamSynchronize(s);
    printf("destroy %s\n", cublasGetStatusName(cublasDestroy(h)));
    return 0;
}
