/* Simulated CUDA runtime, libcudart.so.13 (no GPU): what its source files share.
 * The runtime is built from runtime.c (the thread's state, registration,
 * launches, devices, errors), runtime_memory.c (memory, copies, memsets),
 * runtime_streams.c (streams, events, graphs) and runtime_more.c (what PyTorch
 * and NVIDIA's samples use besides, user-built graph nodes). Not a public
 * header: the symbols below are hidden inside libcudart.so.13 (cudart.map). */
#ifndef GPUSIM_RUNTIME_INTERNAL_H
#define GPUSIM_RUNTIME_INTERNAL_H

#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <generated_cuda_runtime_api_meta.h>

#include "runtime_cbids.h"
#include "gpusim.h"

#define CAT(a, b) CAT_(a, b)
#define CAT_(a, b) a##b

/* The driver's internal entry points (see gpusim.h): same types as the public
 * ones, named after cuda.h's versioned names (DRV(cuMemAlloc) is
 * gpusim_cuMemAlloc_v2). */
#define DRV(name) CAT(gpusim_, name)
#define DRIVER_FN(name) extern __typeof__(name) CAT(gpusim_, name);
DRIVER_FN(cuDeviceGetCount)
DRIVER_FN(cuDeviceGetAttribute)
DRIVER_FN(cuDeviceGetName)
DRIVER_FN(cuDeviceCanAccessPeer)
DRIVER_FN(cuDevicePrimaryCtxReset)
DRIVER_FN(cuCtxSynchronize)
/* cuda.h does not declare these (NVIDIA's cudaProfiler.h, absent from the wheels, does). */
extern CUresult CUDAAPI gpusim_cuProfilerStart(void);
extern CUresult CUDAAPI gpusim_cuProfilerStop(void);
DRIVER_FN(cuCtxGetLimit)
DRIVER_FN(cuCtxSetLimit)
DRIVER_FN(cuMemAlloc)
DRIVER_FN(cuMemAllocManaged)
DRIVER_FN(cuMemAllocAsync)
DRIVER_FN(cuMemFree)
DRIVER_FN(cuMemFreeAsync)
DRIVER_FN(cuMemAllocHost)
DRIVER_FN(cuMemHostAlloc)
DRIVER_FN(cuMemFreeHost)
DRIVER_FN(cuMemHostRegister)
DRIVER_FN(cuMemHostUnregister)
DRIVER_FN(cuMemGetInfo)
DRIVER_FN(cuMemcpy)
DRIVER_FN(cuMemcpyAsync)
DRIVER_FN(cuMemcpyHtoD)
DRIVER_FN(cuMemcpyDtoH)
DRIVER_FN(cuMemcpyDtoD)
DRIVER_FN(cuMemcpyHtoDAsync)
DRIVER_FN(cuMemcpyDtoHAsync)
DRIVER_FN(cuMemcpyDtoDAsync)
DRIVER_FN(cuMemcpyPeer)
DRIVER_FN(cuMemcpyPeerAsync)
DRIVER_FN(cuMemcpy2D)
DRIVER_FN(cuMemcpy2DAsync)
DRIVER_FN(cuMemsetD8)
DRIVER_FN(cuMemsetD8Async)
DRIVER_FN(cuStreamCreate)
DRIVER_FN(cuStreamCreateWithPriority)
DRIVER_FN(cuStreamDestroy)
DRIVER_FN(cuStreamSynchronize)
DRIVER_FN(cuStreamQuery)
DRIVER_FN(cuStreamWaitEvent)
DRIVER_FN(cuStreamGetPriority)
DRIVER_FN(cuStreamGetFlags)
DRIVER_FN(cuStreamBeginCapture)
DRIVER_FN(cuStreamEndCapture)
DRIVER_FN(cuStreamIsCapturing)
DRIVER_FN(cuEventCreate)
DRIVER_FN(cuEventRecord)
DRIVER_FN(cuEventRecordWithFlags)
DRIVER_FN(cuEventQuery)
DRIVER_FN(cuEventSynchronize)
DRIVER_FN(cuEventElapsedTime)
DRIVER_FN(cuEventDestroy)
DRIVER_FN(cuLaunchKernel)
DRIVER_FN(cuLaunchKernelEx)
DRIVER_FN(cuLaunchCooperativeKernel)
DRIVER_FN(cuFuncSetAttribute)
DRIVER_FN(cuFuncGetAttribute)
DRIVER_FN(cuGraphCreate)
DRIVER_FN(cuGraphAddKernelNode)
DRIVER_FN(cuGraphInstantiateWithFlags)
DRIVER_FN(cuGraphLaunch)
DRIVER_FN(cuGraphUpload)
DRIVER_FN(cuGraphExecDestroy)
DRIVER_FN(cuGraphDestroy)
DRIVER_FN(cuMemGetAddressRange)
DRIVER_FN(cuPointerGetAttributes)
DRIVER_FN(cuLaunchHostFunc)
DRIVER_FN(cuStreamAddCallback)
DRIVER_FN(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags)
DRIVER_FN(cuStreamGetCaptureInfo)
DRIVER_FN(cuStreamBeginCaptureToGraph)
DRIVER_FN(cuStreamUpdateCaptureDependencies)
DRIVER_FN(cuThreadExchangeStreamCaptureMode)
DRIVER_FN(cuGraphGetNodes)
DRIVER_FN(cuGraphNodeGetDependencies)
DRIVER_FN(cuGraphRetainUserObject)
DRIVER_FN(cuUserObjectCreate)
DRIVER_FN(cuUserObjectRelease)
DRIVER_FN(cuDeviceGetPCIBusId)
DRIVER_FN(cuDeviceGetDefaultMemPool)
DRIVER_FN(cuMemPoolGetAttribute)
DRIVER_FN(cuMemPoolSetAttribute)
DRIVER_FN(cuMemPoolSetAccess)
DRIVER_FN(cuMemPoolTrimTo)
DRIVER_FN(cuDeviceGetGraphMemAttribute)
DRIVER_FN(cuDeviceSetGraphMemAttribute)
DRIVER_FN(cuLibraryLoadData)
DRIVER_FN(cuLibraryGetKernel)
DRIVER_FN(cuLibraryUnload)
DRIVER_FN(cuKernelSetAttribute)
DRIVER_FN(cuCtxDisablePeerAccess)
DRIVER_FN(cuGraphAddHostNode)
DRIVER_FN(cuGraphAddMemcpyNode)
DRIVER_FN(cuGraphAddMemsetNode)
DRIVER_FN(cuGraphAddMemAllocNode)
DRIVER_FN(cuGraphAddMemFreeNode)
DRIVER_FN(cuGraphClone)

/* Also the driver's, for the runtime alone. */
extern CUfunction gpusim_register_function(const void *host_fun, const char *device_name);
extern CUfunction gpusim_resolve_function(const void *func);
extern const char *gpusim_function_name(CUfunction f);
extern int gpusim_device_attribute(int attr, int dev);
extern int gpusim_runtime_device(int dev);
extern CUcontext gpusim_runtime_context(int dev);
extern void *gpusim_static_alloc(size_t bytes);
extern void *gpusim_driver_symbol(const char *symbol);
extern CUfunction gpusim_named_kernel(const char *name);
extern void gpusim_set_next_kernel_cost(uint64_t ns);

/* Functions without parameters, and the internal ones, have no parameter struct
 * in CUPTI's generated header. */
typedef struct { int none; } cudaDeviceSynchronize_v3020_params;
typedef struct { int none; } cudaDeviceReset_v3020_params;
typedef struct { int none; } cudaGetLastError_v3020_params;
typedef struct { int none; } cudaPeekAtLastError_v3020_params;
typedef struct { int none; } cudaThreadSynchronize_v3020_params;
typedef struct { int none; } cudaProfilerStart_v4000_params;
typedef struct { int none; } cudaProfilerStop_v4000_params;
typedef struct { dim3 gridDim, blockDim; size_t sharedMem; void *stream; } __cudaPushCallConfiguration_v13000_params;
typedef struct { dim3 *gridDim, *blockDim; size_t *sharedMem; void *stream; } __cudaPopCallConfiguration_v13000_params;
typedef struct { cudaKernel_t *kernelPtr; const void *entryFuncAddr; } __cudaGetKernel_v13000_params;

/* ------------------------------------------------------------------ state */

/* The thread's current device and last error (runtime.c). */
extern __thread int tls_device;
extern __thread cudaError_t tls_last_error;

/* Initializes the driver and registers the teardown at exit, once (runtime.c). */
void rt_init(void);

#define ENTER_(name, sym, ...)                                                         \
    cudaError_t ret_ = cudaSuccess;                                                    \
    CAT(RT_PARAMS_, name) params_ = {__VA_ARGS__};                                     \
    struct gpusim_api call_;                                                           \
    gpusim_api_begin(&call_, GPUSIM_DOMAIN_RUNTIME, CAT(RT_CBID_, name), #name,        \
                     &params_, &ret_, sym)
/* Initializes the driver (cuInit's work, injection included) and makes the
 * primary context of the thread's device current, then reports the call. */
#define ENTER_SYM(name, sym, ...)                                                      \
    rt_init();                                                                         \
    int ctx_ok_ = gpusim_runtime_device(tls_device) == 0;                              \
    ENTER_(name, sym, __VA_ARGS__);                                                    \
    if (!ctx_ok_)                                                                      \
        RETURN(cudaErrorInvalidDevice)
#define ENTER(name, ...) ENTER_SYM(name, NULL, __VA_ARGS__)
/* For calls that need no device. */
#define ENTER_NOCTX(name, ...)                                                         \
    rt_init();                                                                         \
    ENTER_(name, NULL, __VA_ARGS__)
#define RETURN(e)                                                                      \
    do {                                                                               \
        ret_ = (e);                                                                    \
        if (ret_ != cudaSuccess)                                                       \
            tls_last_error = ret_;                                                     \
        gpusim_api_end(&call_);                                                        \
        return ret_;                                                                   \
    } while (0)

/* A __device__ or __constant__ variable: its host shadow and its simulated device
 * storage. */
struct var {
    const void *host;
    void *dev;
    size_t size;
};
/* The variable registered for a host shadow, or NULL (runtime.c). */
struct var *find_var(const void *host);

/* Driver and runtime error codes share their numbers for everything the
 * simulated driver returns. */
static inline cudaError_t rt(CUresult r) { return (cudaError_t)r; }

#endif
