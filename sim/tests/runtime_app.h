/* Shared by the test programs that use the runtime API without nvcc: error checks,
 * and nvcc's kernel registration done by hand (a host stub names a device function).
 * A program defines APP_NAME (its name in error messages) before including this. */
#ifndef GPUPERF_SIM_TESTS_RUNTIME_APP_H
#define GPUPERF_SIM_TESTS_RUNTIME_APP_H
#include <stdio.h>
#include <stdlib.h>
#include <cuda_runtime_api.h>

#define CHECK(call)                                                                    \
    do {                                                                               \
        cudaError_t e_ = (call);                                                       \
        if (e_ != cudaSuccess) {                                                       \
            fprintf(stderr, APP_NAME ": %s: %s\n", #call, cudaGetErrorString(e_));     \
            exit(3);                                                                   \
        }                                                                              \
    } while (0)
#define NOINLINE __attribute__((noinline))

void **__cudaRegisterFatBinary(void *fatCubin);
void __cudaRegisterFunction(void **h, const char *hostFun, char *deviceFun, const char *deviceName,
                            int thread_limit, void *tid, void *bid, void *bDim, void *gDim, int *wSize);
#endif
