/* Simulated cuBLAS and cuBLASLt (no GPU): what the two stand-ins share, the
 * launch of one simulated kernel per operation. Not part of any NVIDIA interface. */
#ifndef SIMBLAS_H
#define SIMBLAS_H

#include <stdint.h>

#include <cublas_api.h>
#include <cuda_runtime_api.h>

/* CUBLAS_STATUS_* as cublasGetStatusName and cublasGetStatusString give them. */
const char *simblas_status_name(cublasStatus_t status);
const char *simblas_status_string(cublasStatus_t status);
/* "f32", "bf16", ... for kernel names. */
const char *simblas_type_name(cudaDataType type);
/* Launches the simulated kernel `name` for m x n x k multiply-adds, `batch`
 * times, of `type` elements, on `stream`. */
cublasStatus_t simblas_launch_gemm(const char *name, int64_t m, int64_t n, int64_t k, int64_t batch,
                                   cudaDataType type, cudaStream_t stream);
/* Launches the simulated kernel `name` over `items` x `batch` elements, costed
 * from `flops` and `bytes`. */
cublasStatus_t simblas_launch(const char *name, int64_t items, int64_t batch, double flops, double bytes,
                              int tensor_cores, cudaStream_t stream);

#endif
