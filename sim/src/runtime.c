/* Simulated CUDA runtime, libcudart.so.13 (no GPU): the runtime API with NVIDIA's signatures on the simulated driver; kernels never run.
 *
 * What it does: nvcc's registration and launch ABI (nvcc 13 launches through
 * __cudaGetKernel + __cudaLaunchKernel, which tail-jumps to cudaLaunchKernel as in
 * NVIDIA's library), launches, memory, copies, memsets, streams, events, stream
 * capture, graphs (captured, or built from kernel nodes), device queries for 2 simulated devices, and the error state.
 * Every runtime function reports a RUNTIME API call, and makes the nested DRIVER
 * call (cudaLaunchKernel -> cuLaunchKernel, cudaMemcpy -> cuMemcpyHtoD_v2, ...)
 * through the driver's internal entry points, as NVIDIA's runtime does.
 *
 * Also what PyTorch 2.11-2.14 imports: capture info, pointer attributes,
 * occupancy, host functions and stream callbacks, memory pools, user objects,
 * libraries, driver entry points, and refusals (cudaErrorNotSupported) for IPC.
 *
 * What it does not do: run kernels, texture/surface/array APIs, IPC, multi-device
 * cooperative launches, user-built graphs other than kernel nodes; the runtime
 * always works in the primary context of the thread's current device. It prints
 * nothing. */
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

static __thread int tls_device;
static __thread cudaError_t tls_last_error;

/* Simulated: with GPUSIM_TEARDOWN_AT_EXIT=1 the runtime destroys its contexts at
 * process exit, in an atexit handler registered once the driver is initialized,
 * so after the one a CUPTI tool registers from InitializeInjection: it runs
 * first (atexit handlers run in reverse order), as a real runtime's teardown
 * may. The tool sees CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING for each
 * context, then its exit handler runs with no context left. */
static void teardown_at_exit(void) { gpusim_teardown_contexts(); }

static void register_teardown(void) {
    const char *e = getenv("GPUSIM_TEARDOWN_AT_EXIT");
    if (e && strcmp(e, "1") == 0)
        atexit(teardown_at_exit);
}

static void rt_init(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    gpusim_init();
    if (gpusim_initialized())
        pthread_once(&once, register_teardown);
}

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

/* Driver and runtime error codes share their numbers for everything the
 * simulated driver returns. */
static cudaError_t rt(CUresult r) { return (cudaError_t)r; }

/* ------------------------------------------------------------------ registration */

struct fatbin {
    void *image;
};

GPUSIM_EXPORT void **__cudaRegisterFatBinary(void *fatCubin) {
    struct fatbin *f = calloc(1, sizeof *f);
    if (!f)
        return NULL;
    f->image = fatCubin;
    return &f->image;
}

GPUSIM_EXPORT void __cudaRegisterFatBinaryEnd(void **handle) { (void)handle; }

/* Kernels stay registered: activity records delivered at exit name them. */
GPUSIM_EXPORT void __cudaUnregisterFatBinary(void **handle) { (void)handle; }

GPUSIM_EXPORT void __cudaRegisterFunction(void **handle, const char *hostFun, char *deviceFun,
                                          const char *deviceName, int thread_limit, uint3 *tid,
                                          uint3 *bid, dim3 *bDim, dim3 *gDim, int *wSize) {
    gpusim_register_function(hostFun, deviceFun ? deviceFun : deviceName);
}

/* __device__ and __constant__ variables: host shadow -> simulated device storage. */
struct var {
    const void *host;
    void *dev;
    size_t size;
};
static pthread_mutex_t g_var_mu = PTHREAD_MUTEX_INITIALIZER;
static struct var *g_vars;
static size_t g_nvars;

static void register_var(const void *host, size_t size) {
    pthread_mutex_lock(&g_var_mu);
    struct var *v = realloc(g_vars, (g_nvars + 1) * sizeof *v);
    if (v) {
        g_vars = v;
        g_vars[g_nvars++] = (struct var){host, gpusim_static_alloc(size), size};
    }
    pthread_mutex_unlock(&g_var_mu);
}

static struct var *find_var(const void *host) {
    struct var *r = NULL;
    pthread_mutex_lock(&g_var_mu);
    for (size_t i = 0; i < g_nvars; i++)
        if (g_vars[i].host == host)
            r = &g_vars[i];
    pthread_mutex_unlock(&g_var_mu);
    return r;
}

GPUSIM_EXPORT void __cudaRegisterVar(void **handle, char *hostVar, char *deviceAddress,
                                     const char *deviceName, int ext, size_t size, int constant,
                                     int global) {
    register_var(hostVar, size);
}

GPUSIM_EXPORT void __cudaRegisterManagedVar(void **handle, void **hostVarPtrAddress,
                                            char *deviceAddress, const char *deviceName, int ext,
                                            size_t size, int constant, int global) {
    register_var(hostVarPtrAddress, size);
    struct var *v = find_var(hostVarPtrAddress);
    if (v && hostVarPtrAddress)
        *hostVarPtrAddress = v->dev;
}

GPUSIM_EXPORT char __cudaInitModule(void **handle) { return 1; }

/* <<<grid, block, shared, stream>>> pushes a configuration that the launch stub
 * pops; nesting is allowed (a launch inside argument evaluation). */
struct config {
    dim3 grid, block;
    size_t shared;
    void *stream;
};
static __thread struct config tls_configs[16];
static __thread int tls_nconfigs;

GPUSIM_EXPORT unsigned __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem,
                                                   struct CUstream_st *stream) {
    if (tls_nconfigs == 16)
        return 1;
    tls_configs[tls_nconfigs++] = (struct config){gridDim, blockDim, sharedMem, stream};
    if (gpusim_initialized()) {
        ENTER_(__cudaPushCallConfiguration, NULL, gridDim, blockDim, sharedMem, stream);
        ret_ = cudaSuccess;
        gpusim_api_end(&call_);
    }
    return 0;
}

GPUSIM_EXPORT cudaError_t __cudaPopCallConfiguration(dim3 *gridDim, dim3 *blockDim,
                                                     size_t *sharedMem, void *stream) {
    if (tls_nconfigs == 0)
        return cudaErrorMissingConfiguration;
    struct config c = tls_configs[--tls_nconfigs];
    *gridDim = c.grid;
    *blockDim = c.block;
    *sharedMem = c.shared;
    *(void **)stream = c.stream;
    if (gpusim_initialized()) {
        ENTER_(__cudaPopCallConfiguration, NULL, gridDim, blockDim, sharedMem, stream);
        ret_ = cudaSuccess;
        gpusim_api_end(&call_);
    }
    return cudaSuccess;
}

GPUSIM_EXPORT cudaError_t __cudaGetKernel(cudaKernel_t *kernelPtr, const void *entryFuncAddr) {
    ENTER_NOCTX(__cudaGetKernel, kernelPtr, entryFuncAddr);
    CUfunction f = gpusim_resolve_function(entryFuncAddr);
    if (!kernelPtr || !f)
        RETURN(cudaErrorInvalidDeviceFunction);
    *kernelPtr = (cudaKernel_t)f;
    RETURN(cudaSuccess);
}

GPUSIM_EXPORT cudaError_t cudaGetKernel(cudaKernel_t *kernelPtr, const void *entryFuncAddr) {
    ENTER_NOCTX(cudaGetKernel, kernelPtr, entryFuncAddr);
    CUfunction f = gpusim_resolve_function(entryFuncAddr);
    if (!kernelPtr || !f)
        RETURN(cudaErrorInvalidDeviceFunction);
    *kernelPtr = (cudaKernel_t)f;
    RETURN(cudaSuccess);
}

/* ------------------------------------------------------------------ launches */

static cudaError_t launch(const void *func, dim3 g, dim3 b, void **args, size_t shared,
                          cudaStream_t s, CUfunction f) {
    if (!f)
        return cudaErrorInvalidDeviceFunction;
    return rt(DRV(cuLaunchKernel)(f, g.x, g.y, g.z, b.x, b.y, b.z, (unsigned)shared, (CUstream)s,
                                    args, NULL));
}

GPUSIM_EXPORT cudaError_t cudaLaunchKernel(const void *func, dim3 gridDim, dim3 blockDim,
                                           void **args, size_t sharedMem, cudaStream_t stream) {
    CUfunction f = gpusim_resolve_function(func);
    ENTER_SYM(cudaLaunchKernel, gpusim_function_name(f), func, gridDim, blockDim, args, sharedMem,
              stream);
    RETURN(launch(func, gridDim, blockDim, args, sharedMem, stream, f));
}

GPUSIM_EXPORT cudaError_t cudaLaunchKernel_ptsz(const void *func, dim3 gridDim, dim3 blockDim,
                                                void **args, size_t sharedMem,
                                                cudaStream_t stream) {
    CUfunction f = gpusim_resolve_function(func);
    ENTER_SYM(cudaLaunchKernel_ptsz, gpusim_function_name(f), func, gridDim, blockDim, args,
              sharedMem, stream);
    RETURN(launch(func, gridDim, blockDim, args, sharedMem,
                  stream ? stream : (cudaStream_t)CU_STREAM_PER_THREAD, f));
}

/* nvcc 13's launch stubs call these; NVIDIA's library makes them frame set-up
 * plus a tail jump into cudaLaunchKernel(_ptsz), so the launch is reported (and
 * probed) as cudaLaunchKernel. The same bytes here. */
extern __typeof__(cudaLaunchKernel) gpusim_rt_launch __attribute__((alias("cudaLaunchKernel"), visibility("hidden")));
extern __typeof__(cudaLaunchKernel_ptsz) gpusim_rt_launch_ptsz __attribute__((alias("cudaLaunchKernel_ptsz"), visibility("hidden")));
__asm__(".text\n"
        ".globl __cudaLaunchKernel\n.type __cudaLaunchKernel,@function\n.p2align 4\n"
        "__cudaLaunchKernel:\n"
        "  push %rbp\n  mov %rsp,%rbp\n  pop %rbp\n  jmp gpusim_rt_launch\n"
        ".size __cudaLaunchKernel, .-__cudaLaunchKernel\n"
        ".globl __cudaLaunchKernel_ptsz\n.type __cudaLaunchKernel_ptsz,@function\n.p2align 4\n"
        "__cudaLaunchKernel_ptsz:\n"
        "  push %rbp\n  mov %rsp,%rbp\n  pop %rbp\n  jmp gpusim_rt_launch_ptsz\n"
        ".size __cudaLaunchKernel_ptsz, .-__cudaLaunchKernel_ptsz\n");

_Static_assert(sizeof(cudaLaunchAttribute) == sizeof(CUlaunchAttribute), "launch attribute layouts");

GPUSIM_EXPORT cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t *config, const void *func,
                                              void **args) {
    CUfunction f = gpusim_resolve_function(func);
    ENTER_SYM(cudaLaunchKernelExC, gpusim_function_name(f), config, func, args);
    if (!config)
        RETURN(cudaErrorInvalidValue);
    if (!f)
        RETURN(cudaErrorInvalidDeviceFunction);
    /* The runtime's and the driver's launch attributes share ids and layout. */
    CUlaunchConfig c = {
        .gridDimX = config->gridDim.x, .gridDimY = config->gridDim.y, .gridDimZ = config->gridDim.z,
        .blockDimX = config->blockDim.x, .blockDimY = config->blockDim.y, .blockDimZ = config->blockDim.z,
        .sharedMemBytes = (unsigned)config->dynamicSmemBytes,
        .hStream = (CUstream)config->stream,
        .attrs = (CUlaunchAttribute *)config->attrs,
        .numAttrs = config->numAttrs,
    };
    RETURN(rt(DRV(cuLaunchKernelEx)(&c, f, args, NULL)));
}

GPUSIM_EXPORT cudaError_t cudaLaunchCooperativeKernel(const void *func, dim3 g, dim3 b, void **args,
                                                      size_t sharedMem, cudaStream_t stream) {
    CUfunction f = gpusim_resolve_function(func);
    ENTER_SYM(cudaLaunchCooperativeKernel, gpusim_function_name(f), func, g, b, args, sharedMem,
              stream);
    if (!f)
        RETURN(cudaErrorInvalidDeviceFunction);
    RETURN(rt(DRV(cuLaunchCooperativeKernel)(f, g.x, g.y, g.z, b.x, b.y, b.z, (unsigned)sharedMem,
                                               (CUstream)stream, args)));
}

GPUSIM_EXPORT cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes *attr, const void *func) {
    ENTER(cudaFuncGetAttributes, attr, func);
    CUfunction f = gpusim_resolve_function(func);
    if (!attr)
        RETURN(cudaErrorInvalidValue);
    if (!f)
        RETURN(cudaErrorInvalidDeviceFunction);
    memset(attr, 0, sizeof *attr);
    attr->maxThreadsPerBlock = 1024;
    attr->ptxVersion = 90;
    attr->binaryVersion = 90;
    int v = 0;
    DRV(cuFuncGetAttribute)(&v, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, f);
    attr->maxDynamicSharedSizeBytes = v;
    RETURN(cudaSuccess);
}

GPUSIM_EXPORT cudaError_t cudaFuncSetAttribute(const void *func, enum cudaFuncAttribute attr, int value) {
    ENTER(cudaFuncSetAttribute, func, attr, value);
    CUfunction f = gpusim_resolve_function(func);
    if (!f)
        RETURN(cudaErrorInvalidDeviceFunction);
    RETURN(rt(DRV(cuFuncSetAttribute)(f, (CUfunction_attribute)attr, value)));
}

GPUSIM_EXPORT cudaError_t cudaFuncSetCacheConfig(const void *func, enum cudaFuncCache c) {
    ENTER(cudaFuncSetCacheConfig, func, c);
    RETURN(gpusim_resolve_function(func) ? cudaSuccess : cudaErrorInvalidDeviceFunction);
}

/* ------------------------------------------------------------------ devices */

GPUSIM_EXPORT cudaError_t cudaGetDeviceCount(int *count) {
    ENTER_NOCTX(cudaGetDeviceCount, count);
    RETURN(rt(DRV(cuDeviceGetCount)(count)));
}

GPUSIM_EXPORT cudaError_t cudaGetDevice(int *device) {
    ENTER_NOCTX(cudaGetDevice, device);
    if (!device)
        RETURN(cudaErrorInvalidValue);
    *device = tls_device;
    RETURN(cudaSuccess);
}

GPUSIM_EXPORT cudaError_t cudaSetDevice(int device) {
    ENTER_NOCTX(cudaSetDevice, device);
    if (device < 0 || device >= GPUSIM_DEVICES)
        RETURN(cudaErrorInvalidDevice);
    tls_device = device;
    RETURN(gpusim_runtime_device(device) == 0 ? cudaSuccess : cudaErrorInvalidDevice);
}

GPUSIM_EXPORT cudaError_t cudaInitDevice(int device, unsigned int deviceFlags, unsigned int flags) {
    ENTER_NOCTX(cudaInitDevice, device, deviceFlags, flags);
    if (device < 0 || device >= GPUSIM_DEVICES)
        RETURN(cudaErrorInvalidDevice);
    RETURN(gpusim_runtime_device(device) == 0 ? cudaSuccess : cudaErrorInvalidDevice);
}

GPUSIM_EXPORT cudaError_t cudaSetDeviceFlags(unsigned int flags) {
    ENTER(cudaSetDeviceFlags, flags);
    RETURN(cudaSuccess);
}

GPUSIM_EXPORT cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device) {
    ENTER_NOCTX(cudaDeviceGetAttribute, value, attr, device);
    /* cudaDevAttr* and CU_DEVICE_ATTRIBUTE_* share their numbers. */
    RETURN(rt(DRV(cuDeviceGetAttribute)(value, (CUdevice_attribute)attr, device)));
}

GPUSIM_EXPORT cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device) {
    ENTER_NOCTX(cudaGetDeviceProperties, prop, device);
    const struct gpusim_device_info *f = gpusim_device_info(device);
    if (!prop)
        RETURN(cudaErrorInvalidValue);
    if (!f)
        RETURN(cudaErrorInvalidDevice);
    memset(prop, 0, sizeof *prop);
#define A(x) gpusim_device_attribute(CU_DEVICE_ATTRIBUTE_##x, device)
    snprintf(prop->name, sizeof prop->name, "%s", f->name);
    memcpy(prop->uuid.bytes, f->uuid, 16);
    prop->totalGlobalMem = f->global_memory;
    prop->sharedMemPerBlock = f->shared_per_block;
    prop->regsPerBlock = (int)f->regs_per_block;
    prop->warpSize = 32;
    prop->memPitch = 0x7fffffff;
    prop->maxThreadsPerBlock = 1024;
    prop->maxThreadsDim[0] = A(MAX_BLOCK_DIM_X);
    prop->maxThreadsDim[1] = A(MAX_BLOCK_DIM_Y);
    prop->maxThreadsDim[2] = A(MAX_BLOCK_DIM_Z);
    prop->maxGridSize[0] = A(MAX_GRID_DIM_X);
    prop->maxGridSize[1] = A(MAX_GRID_DIM_Y);
    prop->maxGridSize[2] = A(MAX_GRID_DIM_Z);
    prop->totalConstMem = f->constant_memory;
    prop->major = f->cc_major;
    prop->minor = f->cc_minor;
    prop->textureAlignment = 512;
    prop->multiProcessorCount = (int)f->multiprocessors;
    prop->canMapHostMemory = 1;
    prop->concurrentKernels = 1;
    prop->pciBusID = A(PCI_BUS_ID);
    prop->asyncEngineCount = (int)f->copy_engines;
    prop->unifiedAddressing = 1;
    prop->memoryBusWidth = A(GLOBAL_MEMORY_BUS_WIDTH);
    prop->l2CacheSize = (int)f->l2_cache;
    prop->maxThreadsPerMultiProcessor = A(MAX_THREADS_PER_MULTIPROCESSOR);
    prop->streamPrioritiesSupported = 1;
    prop->globalL1CacheSupported = 1;
    prop->localL1CacheSupported = 1;
    prop->sharedMemPerMultiprocessor = f->shared_per_sm;
    prop->regsPerMultiprocessor = (int)f->regs_per_sm;
    prop->managedMemory = 1;
    prop->concurrentManagedAccess = 1;
    prop->computePreemptionSupported = 1;
    prop->cooperativeLaunch = 1;
    prop->sharedMemPerBlockOptin = (size_t)A(MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
    prop->maxBlocksPerMultiProcessor = (int)f->max_blocks_per_sm;
    prop->hostRegisterSupported = 1;
    prop->memoryPoolsSupported = 1;
    prop->clusterLaunch = 1;
#undef A
    RETURN(cudaSuccess);
}

GPUSIM_EXPORT cudaError_t cudaDeviceCanAccessPeer(int *can, int device, int peer) {
    ENTER_NOCTX(cudaDeviceCanAccessPeer, can, device, peer);
    RETURN(rt(DRV(cuDeviceCanAccessPeer)(can, device, peer)));
}

GPUSIM_EXPORT cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned int flags) {
    ENTER(cudaDeviceEnablePeerAccess, peer, flags);
    RETURN(peer >= 0 && peer < GPUSIM_DEVICES && peer != tls_device ? cudaSuccess
                                                                     : cudaErrorInvalidDevice);
}

GPUSIM_EXPORT cudaError_t cudaDeviceGetStreamPriorityRange(int *least, int *greatest) {
    ENTER(cudaDeviceGetStreamPriorityRange, least, greatest);
    if (least)
        *least = 0;
    if (greatest)
        *greatest = -5;
    RETURN(cudaSuccess);
}

GPUSIM_EXPORT cudaError_t cudaDeviceGetLimit(size_t *value, enum cudaLimit limit) {
    ENTER(cudaDeviceGetLimit, value, limit);
    RETURN(rt(DRV(cuCtxGetLimit)(value, (CUlimit)limit)));
}

GPUSIM_EXPORT cudaError_t cudaDeviceSetLimit(enum cudaLimit limit, size_t value) {
    ENTER(cudaDeviceSetLimit, limit, value);
    RETURN(rt(DRV(cuCtxSetLimit)((CUlimit)limit, value)));
}

GPUSIM_EXPORT cudaError_t cudaDeviceSynchronize(void) {
    ENTER(cudaDeviceSynchronize, 0);
    RETURN(rt(DRV(cuCtxSynchronize)()));
}

GPUSIM_EXPORT cudaError_t cudaDeviceReset(void) {
    ENTER(cudaDeviceReset, 0);
    RETURN(rt(DRV(cuDevicePrimaryCtxReset)(tls_device)));
}

GPUSIM_EXPORT cudaError_t cudaDriverGetVersion(int *v) {
    ENTER_NOCTX(cudaDriverGetVersion, v);
    if (!v)
        RETURN(cudaErrorInvalidValue);
    *v = 13000;
    RETURN(cudaSuccess);
}

GPUSIM_EXPORT cudaError_t cudaRuntimeGetVersion(int *v) {
    ENTER_NOCTX(cudaRuntimeGetVersion, v);
    if (!v)
        RETURN(cudaErrorInvalidValue);
    *v = 13000;
    RETURN(cudaSuccess);
}

/* ------------------------------------------------------------------ errors */

GPUSIM_EXPORT cudaError_t cudaGetLastError(void) {
    cudaError_t e = tls_last_error;
    tls_last_error = cudaSuccess;
    ENTER_NOCTX(cudaGetLastError, 0);
    ret_ = e;
    gpusim_api_end(&call_);
    return e;
}

GPUSIM_EXPORT cudaError_t cudaPeekAtLastError(void) {
    cudaError_t e = tls_last_error;
    ENTER_NOCTX(cudaPeekAtLastError, 0);
    ret_ = e;
    gpusim_api_end(&call_);
    return e;
}

static const struct {
    cudaError_t e;
    const char *name, *text;
} g_errors[] = {
    {cudaSuccess, "cudaSuccess", "no error"},
    {cudaErrorInvalidValue, "cudaErrorInvalidValue", "invalid argument"},
    {cudaErrorMemoryAllocation, "cudaErrorMemoryAllocation", "out of memory"},
    {cudaErrorInitializationError, "cudaErrorInitializationError", "initialization error"},
    {cudaErrorMissingConfiguration, "cudaErrorMissingConfiguration", "__global__ function call is not configured"},
    {cudaErrorInvalidDevice, "cudaErrorInvalidDevice", "invalid device ordinal"},
    {cudaErrorInvalidDeviceFunction, "cudaErrorInvalidDeviceFunction", "invalid device function"},
    {cudaErrorInvalidConfiguration, "cudaErrorInvalidConfiguration", "invalid configuration argument"},
    {cudaErrorInvalidResourceHandle, "cudaErrorInvalidResourceHandle", "invalid resource handle"},
    {cudaErrorIllegalState, "cudaErrorIllegalState", "the operation cannot be performed in the present state"},
    {cudaErrorSymbolNotFound, "cudaErrorSymbolNotFound", "named symbol not found"},
    {cudaErrorNotReady, "cudaErrorNotReady", "device not ready"},
    {cudaErrorHostMemoryNotRegistered, "cudaErrorHostMemoryNotRegistered", "part or all of the requested memory range is not registered"},
    {cudaErrorStreamCaptureUnsupported, "cudaErrorStreamCaptureUnsupported", "operation not permitted when stream is capturing"},
    {cudaErrorInvalidSymbol, "cudaErrorInvalidSymbol", "invalid device symbol"},
    {cudaErrorNotSupported, "cudaErrorNotSupported", "operation not supported"},
    {cudaErrorStreamCaptureUnmatched, "cudaErrorStreamCaptureUnmatched", "the capture was not initiated in this stream"},
    {cudaErrorUnknown, "cudaErrorUnknown", "unknown error"},
};

GPUSIM_EXPORT const char *cudaGetErrorString(cudaError_t error) {
    const char *text = "unrecognized error code";
    for (size_t i = 0; i < sizeof g_errors / sizeof g_errors[0]; i++)
        if (g_errors[i].e == error)
            text = g_errors[i].text;
    if (gpusim_initialized()) {
        ENTER_(cudaGetErrorString, NULL, error);
        gpusim_api_end(&call_);
        (void)ret_;
    }
    return text;
}

GPUSIM_EXPORT const char *cudaGetErrorName(cudaError_t error) {
    const char *name = "cudaErrorUnknown";
    for (size_t i = 0; i < sizeof g_errors / sizeof g_errors[0]; i++)
        if (g_errors[i].e == error)
            name = g_errors[i].name;
    if (gpusim_initialized()) {
        ENTER_(cudaGetErrorName, NULL, error);
        gpusim_api_end(&call_);
        (void)ret_;
    }
    return name;
}

/* ------------------------------------------------------------------ memory */

GPUSIM_EXPORT cudaError_t cudaMalloc(void **devPtr, size_t size) {
    ENTER(cudaMalloc, devPtr, size);
    RETURN(rt(DRV(cuMemAlloc)((CUdeviceptr *)devPtr, size)));
}

GPUSIM_EXPORT cudaError_t cudaMallocManaged(void **devPtr, size_t size, unsigned int flags) {
    ENTER(cudaMallocManaged, devPtr, size, flags);
    RETURN(rt(DRV(cuMemAllocManaged)((CUdeviceptr *)devPtr, size, flags)));
}

GPUSIM_EXPORT cudaError_t cudaMallocAsync(void **devPtr, size_t size, cudaStream_t stream) {
    ENTER(cudaMallocAsync, devPtr, size, stream);
    RETURN(rt(DRV(cuMemAllocAsync)((CUdeviceptr *)devPtr, size, (CUstream)stream)));
}

GPUSIM_EXPORT cudaError_t cudaFree(void *devPtr) {
    ENTER(cudaFree, devPtr);
    /* cudaFree(0) is the usual way to create the context, done above. */
    RETURN(devPtr ? rt(DRV(cuMemFree)((CUdeviceptr)devPtr)) : cudaSuccess);
}

GPUSIM_EXPORT cudaError_t cudaFreeAsync(void *devPtr, cudaStream_t stream) {
    ENTER(cudaFreeAsync, devPtr, stream);
    RETURN(rt(DRV(cuMemFreeAsync)((CUdeviceptr)devPtr, (CUstream)stream)));
}

GPUSIM_EXPORT cudaError_t cudaMallocHost(void **ptr, size_t size) {
    ENTER(cudaMallocHost, ptr, size);
    RETURN(rt(DRV(cuMemAllocHost)(ptr, size)));
}

GPUSIM_EXPORT cudaError_t cudaHostAlloc(void **pHost, size_t size, unsigned int flags) {
    ENTER(cudaHostAlloc, pHost, size, flags);
    RETURN(rt(DRV(cuMemHostAlloc)(pHost, size, flags)));
}

GPUSIM_EXPORT cudaError_t cudaFreeHost(void *ptr) {
    ENTER(cudaFreeHost, ptr);
    RETURN(rt(DRV(cuMemFreeHost)(ptr)));
}

GPUSIM_EXPORT cudaError_t cudaHostRegister(void *ptr, size_t size, unsigned int flags) {
    ENTER(cudaHostRegister, ptr, size, flags);
    RETURN(rt(DRV(cuMemHostRegister)(ptr, size, flags)));
}

GPUSIM_EXPORT cudaError_t cudaHostUnregister(void *ptr) {
    ENTER(cudaHostUnregister, ptr);
    RETURN(rt(DRV(cuMemHostUnregister)(ptr)));
}

GPUSIM_EXPORT cudaError_t cudaMemGetInfo(size_t *free_, size_t *total) {
    ENTER(cudaMemGetInfo, free_, total);
    RETURN(rt(DRV(cuMemGetInfo)(free_, total)));
}

/* The driver call a runtime copy makes depends on its direction, as in NVIDIA's
 * runtime; the simulated driver itself classifies copies by their pointers. */
GPUSIM_EXPORT cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind) {
    ENTER(cudaMemcpy, dst, src, count, kind);
    CUresult r;
    switch (kind) {
    case cudaMemcpyHostToDevice: r = DRV(cuMemcpyHtoD)((CUdeviceptr)dst, src, count); break;
    case cudaMemcpyDeviceToHost: r = DRV(cuMemcpyDtoH)(dst, (CUdeviceptr)src, count); break;
    case cudaMemcpyDeviceToDevice: r = DRV(cuMemcpyDtoD)((CUdeviceptr)dst, (CUdeviceptr)src, count); break;
    case cudaMemcpyHostToHost:
    case cudaMemcpyDefault: r = DRV(cuMemcpy)((CUdeviceptr)dst, (CUdeviceptr)src, count); break;
    default: r = CUDA_ERROR_INVALID_VALUE; break;
    }
    RETURN(rt(r));
}

GPUSIM_EXPORT cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count,
                                          enum cudaMemcpyKind kind, cudaStream_t stream) {
    ENTER(cudaMemcpyAsync, dst, src, count, kind, stream);
    CUstream s = (CUstream)stream;
    CUresult r;
    switch (kind) {
    case cudaMemcpyHostToDevice: r = DRV(cuMemcpyHtoDAsync)((CUdeviceptr)dst, src, count, s); break;
    case cudaMemcpyDeviceToHost: r = DRV(cuMemcpyDtoHAsync)(dst, (CUdeviceptr)src, count, s); break;
    case cudaMemcpyDeviceToDevice: r = DRV(cuMemcpyDtoDAsync)((CUdeviceptr)dst, (CUdeviceptr)src, count, s); break;
    case cudaMemcpyHostToHost:
    case cudaMemcpyDefault: r = DRV(cuMemcpyAsync)((CUdeviceptr)dst, (CUdeviceptr)src, count, s); break;
    default: r = CUDA_ERROR_INVALID_VALUE; break;
    }
    RETURN(rt(r));
}

static CUDA_MEMCPY2D copy2d(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                            size_t height, enum cudaMemcpyKind kind) {
    int src_dev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    int dst_dev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    CUDA_MEMCPY2D c = {
        .srcMemoryType = src_dev ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST,
        .srcHost = src,
        .srcDevice = (CUdeviceptr)src,
        .srcPitch = spitch,
        .dstMemoryType = dst_dev ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST,
        .dstHost = dst,
        .dstDevice = (CUdeviceptr)dst,
        .dstPitch = dpitch,
        .WidthInBytes = width,
        .Height = height,
    };
    return c;
}

GPUSIM_EXPORT cudaError_t cudaMemcpy2D(void *dst, size_t dpitch, const void *src, size_t spitch,
                                       size_t width, size_t height, enum cudaMemcpyKind kind) {
    ENTER(cudaMemcpy2D, dst, dpitch, src, spitch, width, height, kind);
    CUDA_MEMCPY2D c = copy2d(dst, dpitch, src, spitch, width, height, kind);
    RETURN(rt(DRV(cuMemcpy2D)(&c)));
}

GPUSIM_EXPORT cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch,
                                            size_t width, size_t height, enum cudaMemcpyKind kind,
                                            cudaStream_t stream) {
    ENTER(cudaMemcpy2DAsync, dst, dpitch, src, spitch, width, height, kind, stream);
    CUDA_MEMCPY2D c = copy2d(dst, dpitch, src, spitch, width, height, kind);
    RETURN(rt(DRV(cuMemcpy2DAsync)(&c, (CUstream)stream)));
}

GPUSIM_EXPORT cudaError_t cudaMemcpyPeer(void *dst, int dstDevice, const void *src, int srcDevice,
                                         size_t count) {
    ENTER(cudaMemcpyPeer, dst, dstDevice, src, srcDevice, count);
    CUcontext dc = gpusim_runtime_context(dstDevice), sc = gpusim_runtime_context(srcDevice);
    if (!dc || !sc)
        RETURN(cudaErrorInvalidDevice);
    RETURN(rt(DRV(cuMemcpyPeer)((CUdeviceptr)dst, dc, (CUdeviceptr)src, sc, count)));
}

GPUSIM_EXPORT cudaError_t cudaMemcpyPeerAsync(void *dst, int dstDevice, const void *src,
                                              int srcDevice, size_t count, cudaStream_t stream) {
    ENTER(cudaMemcpyPeerAsync, dst, dstDevice, src, srcDevice, count, stream);
    CUcontext dc = gpusim_runtime_context(dstDevice), sc = gpusim_runtime_context(srcDevice);
    if (!dc || !sc)
        RETURN(cudaErrorInvalidDevice);
    RETURN(rt(DRV(cuMemcpyPeerAsync)((CUdeviceptr)dst, dc, (CUdeviceptr)src, sc, count,
                                       (CUstream)stream)));
}

GPUSIM_EXPORT cudaError_t cudaMemcpyToSymbol(const void *symbol, const void *src, size_t count,
                                             size_t offset, enum cudaMemcpyKind kind) {
    ENTER(cudaMemcpyToSymbol, symbol, src, count, offset, kind);
    struct var *v = find_var(symbol);
    if (!v)
        RETURN(cudaErrorInvalidSymbol);
    if (offset + count > v->size)
        RETURN(cudaErrorInvalidValue);
    RETURN(rt(DRV(cuMemcpy)((CUdeviceptr)((char *)v->dev + offset), (CUdeviceptr)src, count)));
}

GPUSIM_EXPORT cudaError_t cudaMemcpyFromSymbol(void *dst, const void *symbol, size_t count,
                                               size_t offset, enum cudaMemcpyKind kind) {
    ENTER(cudaMemcpyFromSymbol, dst, symbol, count, offset, kind);
    struct var *v = find_var(symbol);
    if (!v)
        RETURN(cudaErrorInvalidSymbol);
    if (offset + count > v->size)
        RETURN(cudaErrorInvalidValue);
    RETURN(rt(DRV(cuMemcpy)((CUdeviceptr)dst, (CUdeviceptr)((char *)v->dev + offset), count)));
}

GPUSIM_EXPORT cudaError_t cudaGetSymbolAddress(void **devPtr, const void *symbol) {
    ENTER(cudaGetSymbolAddress, devPtr, symbol);
    struct var *v = find_var(symbol);
    if (!v || !devPtr)
        RETURN(cudaErrorInvalidSymbol);
    *devPtr = v->dev;
    RETURN(cudaSuccess);
}

GPUSIM_EXPORT cudaError_t cudaMemset(void *devPtr, int value, size_t count) {
    ENTER(cudaMemset, devPtr, value, count);
    RETURN(rt(DRV(cuMemsetD8)((CUdeviceptr)devPtr, (unsigned char)value, count)));
}

GPUSIM_EXPORT cudaError_t cudaMemsetAsync(void *devPtr, int value, size_t count, cudaStream_t stream) {
    ENTER(cudaMemsetAsync, devPtr, value, count, stream);
    RETURN(rt(DRV(cuMemsetD8Async)((CUdeviceptr)devPtr, (unsigned char)value, count, (CUstream)stream)));
}

/* ------------------------------------------------------------------ streams */

GPUSIM_EXPORT cudaError_t cudaStreamCreate(cudaStream_t *pStream) {
    ENTER(cudaStreamCreate, pStream);
    RETURN(rt(DRV(cuStreamCreate)((CUstream *)pStream, 0)));
}

GPUSIM_EXPORT cudaError_t cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags) {
    ENTER(cudaStreamCreateWithFlags, pStream, flags);
    RETURN(rt(DRV(cuStreamCreate)((CUstream *)pStream, flags)));
}

GPUSIM_EXPORT cudaError_t cudaStreamCreateWithPriority(cudaStream_t *pStream, unsigned int flags,
                                                       int priority) {
    ENTER(cudaStreamCreateWithPriority, pStream, flags, priority);
    RETURN(rt(DRV(cuStreamCreateWithPriority)((CUstream *)pStream, flags, priority)));
}

GPUSIM_EXPORT cudaError_t cudaStreamDestroy(cudaStream_t stream) {
    ENTER(cudaStreamDestroy, stream);
    RETURN(rt(DRV(cuStreamDestroy)((CUstream)stream)));
}

GPUSIM_EXPORT cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
    ENTER(cudaStreamSynchronize, stream);
    RETURN(rt(DRV(cuStreamSynchronize)((CUstream)stream)));
}

GPUSIM_EXPORT cudaError_t cudaStreamQuery(cudaStream_t stream) {
    ENTER(cudaStreamQuery, stream);
    RETURN(rt(DRV(cuStreamQuery)((CUstream)stream)));
}

GPUSIM_EXPORT cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
    ENTER(cudaStreamWaitEvent, stream, event, flags);
    RETURN(rt(DRV(cuStreamWaitEvent)((CUstream)stream, (CUevent)event, flags)));
}

GPUSIM_EXPORT cudaError_t cudaStreamGetPriority(cudaStream_t stream, int *priority) {
    ENTER(cudaStreamGetPriority, stream, priority);
    RETURN(rt(DRV(cuStreamGetPriority)((CUstream)stream, priority)));
}

GPUSIM_EXPORT cudaError_t cudaStreamGetFlags(cudaStream_t stream, unsigned int *flags) {
    ENTER(cudaStreamGetFlags, stream, flags);
    RETURN(rt(DRV(cuStreamGetFlags)((CUstream)stream, flags)));
}

GPUSIM_EXPORT cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode) {
    ENTER(cudaStreamBeginCapture, stream, mode);
    RETURN(rt(DRV(cuStreamBeginCapture)((CUstream)stream, (CUstreamCaptureMode)mode)));
}

GPUSIM_EXPORT cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *pGraph) {
    ENTER(cudaStreamEndCapture, stream, pGraph);
    RETURN(rt(DRV(cuStreamEndCapture)((CUstream)stream, (CUgraph *)pGraph)));
}

GPUSIM_EXPORT cudaError_t cudaStreamIsCapturing(cudaStream_t stream,
                                                enum cudaStreamCaptureStatus *pCaptureStatus) {
    ENTER(cudaStreamIsCapturing, stream, pCaptureStatus);
    RETURN(rt(DRV(cuStreamIsCapturing)((CUstream)stream, (CUstreamCaptureStatus *)pCaptureStatus)));
}

/* ------------------------------------------------------------------ events */

GPUSIM_EXPORT cudaError_t cudaEventCreate(cudaEvent_t *event) {
    ENTER(cudaEventCreate, event);
    RETURN(rt(DRV(cuEventCreate)((CUevent *)event, 0)));
}

GPUSIM_EXPORT cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags) {
    ENTER(cudaEventCreateWithFlags, event, flags);
    RETURN(rt(DRV(cuEventCreate)((CUevent *)event, flags)));
}

GPUSIM_EXPORT cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
    ENTER(cudaEventRecord, event, stream);
    RETURN(rt(DRV(cuEventRecord)((CUevent)event, (CUstream)stream)));
}

GPUSIM_EXPORT cudaError_t cudaEventRecordWithFlags(cudaEvent_t event, cudaStream_t stream,
                                                   unsigned int flags) {
    ENTER(cudaEventRecordWithFlags, event, stream, flags);
    RETURN(rt(DRV(cuEventRecordWithFlags)((CUevent)event, (CUstream)stream, flags)));
}

GPUSIM_EXPORT cudaError_t cudaEventQuery(cudaEvent_t event) {
    ENTER(cudaEventQuery, event);
    RETURN(rt(DRV(cuEventQuery)((CUevent)event)));
}

GPUSIM_EXPORT cudaError_t cudaEventSynchronize(cudaEvent_t event) {
    ENTER(cudaEventSynchronize, event);
    RETURN(rt(DRV(cuEventSynchronize)((CUevent)event)));
}

GPUSIM_EXPORT cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end) {
    ENTER(cudaEventElapsedTime, ms, start, end);
    RETURN(rt(DRV(cuEventElapsedTime)(ms, (CUevent)start, (CUevent)end)));
}

GPUSIM_EXPORT cudaError_t cudaEventDestroy(cudaEvent_t event) {
    ENTER(cudaEventDestroy, event);
    RETURN(rt(DRV(cuEventDestroy)((CUevent)event)));
}

/* ------------------------------------------------------------------ graphs */

GPUSIM_EXPORT cudaError_t cudaGraphCreate(cudaGraph_t *pGraph, unsigned int flags) {
    ENTER(cudaGraphCreate, pGraph, flags);
    RETURN(rt(DRV(cuGraphCreate)((CUgraph *)pGraph, flags)));
}

/* The node runs in the current device's primary context; kernel arguments are
 * not kept (kernels never run). */
GPUSIM_EXPORT cudaError_t cudaGraphAddKernelNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                                 const cudaGraphNode_t *pDependencies,
                                                 size_t numDependencies,
                                                 const struct cudaKernelNodeParams *pNodeParams) {
    CUfunction f = pNodeParams ? gpusim_resolve_function(pNodeParams->func) : NULL;
    ENTER_SYM(cudaGraphAddKernelNode, gpusim_function_name(f), pGraphNode, graph, pDependencies,
              numDependencies, pNodeParams);
    if (!pNodeParams)
        RETURN(cudaErrorInvalidValue);
    if (!f)
        RETURN(cudaErrorInvalidDeviceFunction);
    CUDA_KERNEL_NODE_PARAMS p = {
        .func = f,
        .gridDimX = pNodeParams->gridDim.x,
        .gridDimY = pNodeParams->gridDim.y,
        .gridDimZ = pNodeParams->gridDim.z,
        .blockDimX = pNodeParams->blockDim.x,
        .blockDimY = pNodeParams->blockDim.y,
        .blockDimZ = pNodeParams->blockDim.z,
        .sharedMemBytes = pNodeParams->sharedMemBytes,
        .kernelParams = pNodeParams->kernelParams,
        .extra = pNodeParams->extra,
    };
    RETURN(rt(DRV(cuGraphAddKernelNode)((CUgraphNode *)pGraphNode, (CUgraph)graph,
                                        (const CUgraphNode *)pDependencies, numDependencies, &p)));
}

GPUSIM_EXPORT cudaError_t cudaGraphInstantiate(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                                               unsigned long long flags) {
    ENTER(cudaGraphInstantiate, pGraphExec, graph, flags);
    RETURN(rt(DRV(cuGraphInstantiateWithFlags)((CUgraphExec *)pGraphExec, (CUgraph)graph, flags)));
}

GPUSIM_EXPORT cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t *pGraphExec,
                                                        cudaGraph_t graph, unsigned long long flags) {
    ENTER(cudaGraphInstantiateWithFlags, pGraphExec, graph, flags);
    RETURN(rt(DRV(cuGraphInstantiateWithFlags)((CUgraphExec *)pGraphExec, (CUgraph)graph, flags)));
}

GPUSIM_EXPORT cudaError_t cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream) {
    ENTER(cudaGraphLaunch, graphExec, stream);
    RETURN(rt(DRV(cuGraphLaunch)((CUgraphExec)graphExec, (CUstream)stream)));
}

GPUSIM_EXPORT cudaError_t cudaGraphUpload(cudaGraphExec_t graphExec, cudaStream_t stream) {
    ENTER(cudaGraphUpload, graphExec, stream);
    RETURN(rt(DRV(cuGraphUpload)((CUgraphExec)graphExec, (CUstream)stream)));
}

GPUSIM_EXPORT cudaError_t cudaGraphExecDestroy(cudaGraphExec_t graphExec) {
    ENTER(cudaGraphExecDestroy, graphExec);
    RETURN(rt(DRV(cuGraphExecDestroy)((CUgraphExec)graphExec)));
}

GPUSIM_EXPORT cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
    ENTER(cudaGraphDestroy, graph);
    RETURN(rt(DRV(cuGraphDestroy)((CUgraph)graph)));
}

/* ------------------------------------------------------------------ for PyTorch and NVIDIA's samples */

/* As NVIDIA's runtime, each calls the driver's, inside its own callbacks. */
GPUSIM_EXPORT cudaError_t cudaProfilerStart(void) {
    ENTER_NOCTX(cudaProfilerStart, 0);
    RETURN(rt(DRV(cuProfilerStart)()));
}

GPUSIM_EXPORT cudaError_t cudaProfilerStop(void) {
    ENTER_NOCTX(cudaProfilerStop, 0);
    RETURN(rt(DRV(cuProfilerStop)()));
}

/* The driver's functions by name, as NVIDIA's runtime hands them out: the
 * simulated libcuda's own. */
GPUSIM_EXPORT cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **funcPtr,
                                                           unsigned int cudaVersion,
                                                           unsigned long long flags,
                                                           enum cudaDriverEntryPointQueryResult *driverStatus) {
    ENTER_NOCTX(cudaGetDriverEntryPointByVersion, symbol, funcPtr, cudaVersion, flags, driverStatus);
    if (!symbol || !funcPtr)
        RETURN(cudaErrorInvalidValue);
    *funcPtr = gpusim_driver_symbol(symbol);
    if (driverStatus)
        *driverStatus = *funcPtr ? cudaDriverEntryPointSuccess : cudaDriverEntryPointSymbolNotFound;
    RETURN(cudaSuccess);
}

GPUSIM_EXPORT cudaError_t cudaDeviceGetPCIBusId(char *pciBusId, int len, int device) {
    ENTER_NOCTX(cudaDeviceGetPCIBusId, pciBusId, len, device);
    RETURN(rt(DRV(cuDeviceGetPCIBusId)(pciBusId, len, device)));
}

GPUSIM_EXPORT cudaError_t cudaDeviceDisablePeerAccess(int peerDevice) {
    ENTER(cudaDeviceDisablePeerAccess, peerDevice);
    CUcontext peer = gpusim_runtime_context(peerDevice);
    if (!peer || peerDevice == tls_device)
        RETURN(cudaErrorInvalidDevice);
    RETURN(rt(DRV(cuCtxDisablePeerAccess)(peer)));
}

/* As CUDA 11+ documents: memory CUDA does not know is cudaMemoryTypeUnregistered,
 * with success. */
GPUSIM_EXPORT cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *attributes, const void *ptr) {
    ENTER(cudaPointerGetAttributes, attributes, ptr);
    if (!attributes)
        RETURN(cudaErrorInvalidValue);
    unsigned type = 0, managed = 0;
    int ordinal = -2;
    void *dptr = NULL, *hptr = NULL;
    CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_IS_MANAGED,
                                   CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, CU_POINTER_ATTRIBUTE_DEVICE_POINTER,
                                   CU_POINTER_ATTRIBUTE_HOST_POINTER};
    void *data[] = {&type, &managed, &ordinal, &dptr, &hptr};
    CUresult r = DRV(cuPointerGetAttributes)(5, attrs, data, (CUdeviceptr)ptr);
    if (r != CUDA_SUCCESS)
        RETURN(rt(r));
    memset(attributes, 0, sizeof *attributes);
    if (type == 0) {
        attributes->type = cudaMemoryTypeUnregistered;
        attributes->device = -2;
        RETURN(cudaSuccess);
    }
    attributes->type = managed ? cudaMemoryTypeManaged
                       : type == CU_MEMORYTYPE_DEVICE ? cudaMemoryTypeDevice
                                                      : cudaMemoryTypeHost;
    attributes->device = ordinal;
    attributes->devicePointer = dptr;
    attributes->hostPointer = type == CU_MEMORYTYPE_DEVICE && !managed ? NULL : hptr;
    RETURN(cudaSuccess);
}

GPUSIM_EXPORT cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void *userData) {
    ENTER(cudaLaunchHostFunc, stream, fn, userData);
    RETURN(rt(DRV(cuLaunchHostFunc)((CUstream)stream, (CUhostFn)fn, userData)));
}

/* The runtime's callback gets a cudaError_t where the driver's gets a CUresult:
 * the same numbers, so the callback is passed through. */
GPUSIM_EXPORT cudaError_t cudaStreamAddCallback(cudaStream_t stream, cudaStreamCallback_t callback,
                                                void *userData, unsigned int flags) {
    ENTER(cudaStreamAddCallback, stream, callback, userData, flags);
    RETURN(rt(DRV(cuStreamAddCallback)((CUstream)stream, (CUstreamCallback)callback, userData, flags)));
}

GPUSIM_EXPORT cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *numBlocks, const void *func,
                                                                         int blockSize, size_t dynamicSMemSize) {
    ENTER(cudaOccupancyMaxActiveBlocksPerMultiprocessor, numBlocks, func, blockSize, dynamicSMemSize);
    CUfunction f = gpusim_resolve_function(func);
    if (!f)
        RETURN(cudaErrorInvalidDeviceFunction);
    RETURN(rt(DRV(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags)(numBlocks, f, blockSize,
                                                                           dynamicSMemSize, 0)));
}

GPUSIM_EXPORT cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *numBlocks, const void *func,
                                                                                  int blockSize,
                                                                                  size_t dynamicSMemSize,
                                                                                  unsigned int flags) {
    ENTER(cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags, numBlocks, func, blockSize,
          dynamicSMemSize, flags);
    CUfunction f = gpusim_resolve_function(func);
    if (!f)
        RETURN(cudaErrorInvalidDeviceFunction);
    RETURN(rt(DRV(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags)(numBlocks, f, blockSize,
                                                                           dynamicSMemSize, flags)));
}

GPUSIM_EXPORT cudaError_t cudaStreamGetCaptureInfo(cudaStream_t stream,
                                                   enum cudaStreamCaptureStatus *captureStatus_out,
                                                   unsigned long long *id_out, cudaGraph_t *graph_out,
                                                   const cudaGraphNode_t **dependencies_out,
                                                   const cudaGraphEdgeData **edgeData_out,
                                                   size_t *numDependencies_out) {
    ENTER(cudaStreamGetCaptureInfo, stream, captureStatus_out, id_out, graph_out, dependencies_out,
          edgeData_out, numDependencies_out);
    RETURN(rt(DRV(cuStreamGetCaptureInfo)((CUstream)stream, (CUstreamCaptureStatus *)captureStatus_out,
                                            (cuuint64_t *)id_out, (CUgraph *)graph_out,
                                            (const CUgraphNode **)dependencies_out,
                                            (const CUgraphEdgeData **)edgeData_out, numDependencies_out)));
}

GPUSIM_EXPORT cudaError_t cudaStreamBeginCaptureToGraph(cudaStream_t stream, cudaGraph_t graph,
                                                        const cudaGraphNode_t *dependencies,
                                                        const cudaGraphEdgeData *dependencyData,
                                                        size_t numDependencies,
                                                        enum cudaStreamCaptureMode mode) {
    ENTER(cudaStreamBeginCaptureToGraph, stream, graph, dependencies, dependencyData, numDependencies, mode);
    RETURN(rt(DRV(cuStreamBeginCaptureToGraph)((CUstream)stream, (CUgraph)graph,
                                                 (const CUgraphNode *)dependencies,
                                                 (const CUgraphEdgeData *)dependencyData, numDependencies,
                                                 (CUstreamCaptureMode)mode)));
}

GPUSIM_EXPORT cudaError_t cudaStreamUpdateCaptureDependencies(cudaStream_t stream, cudaGraphNode_t *dependencies,
                                                              const cudaGraphEdgeData *dependencyData,
                                                              size_t numDependencies, unsigned int flags) {
    ENTER(cudaStreamUpdateCaptureDependencies, stream, dependencies, dependencyData, numDependencies, flags);
    RETURN(rt(DRV(cuStreamUpdateCaptureDependencies)((CUstream)stream, (CUgraphNode *)dependencies,
                                                       (const CUgraphEdgeData *)dependencyData,
                                                       numDependencies, flags)));
}

GPUSIM_EXPORT cudaError_t cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode *mode) {
    ENTER_NOCTX(cudaThreadExchangeStreamCaptureMode, mode);
    RETURN(rt(DRV(cuThreadExchangeStreamCaptureMode)((CUstreamCaptureMode *)mode)));
}

GPUSIM_EXPORT cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t *nodes, size_t *numNodes) {
    ENTER(cudaGraphGetNodes, graph, nodes, numNodes);
    RETURN(rt(DRV(cuGraphGetNodes)((CUgraph)graph, (CUgraphNode *)nodes, numNodes)));
}

/* Writes the graph's nodes and edges as Graphviz DOT, as CUDA does for
 * debugging (torch's CUDAGraph.debug_dump). The labels are the simulation's
 * (node index), not CUDA's detailed ones; `flags` only chooses detail. */
GPUSIM_EXPORT cudaError_t cudaGraphDebugDotPrint(cudaGraph_t graph, const char *path, unsigned int flags) {
    ENTER(cudaGraphDebugDotPrint, graph, path, flags);
    if (!graph || !path)
        RETURN(cudaErrorInvalidValue);
    size_t n = 0;
    cudaError_t e = rt(DRV(cuGraphGetNodes)((CUgraph)graph, NULL, &n));
    if (e != cudaSuccess)
        RETURN(e);
    CUgraphNode *nodes = calloc(n ? n : 1, sizeof *nodes);
    if (!nodes)
        RETURN(cudaErrorMemoryAllocation);
    e = rt(DRV(cuGraphGetNodes)((CUgraph)graph, nodes, &n));
    FILE *f = e == cudaSuccess ? fopen(path, "w") : NULL;
    if (e == cudaSuccess && !f)
        e = cudaErrorInvalidValue;
    if (f) {
        fprintf(f, "digraph cudaGraph {\n");
        for (size_t i = 0; i < n; i++)
            fprintf(f, "  n%zu [label=\"node %zu\"];\n", i, i);
        for (size_t i = 0; i < n && e == cudaSuccess; i++) {
            size_t d = 0;
            e = rt(DRV(cuGraphNodeGetDependencies)(nodes[i], NULL, NULL, &d));
            CUgraphNode *deps = e == cudaSuccess ? calloc(d ? d : 1, sizeof *deps) : NULL;
            if (e == cudaSuccess && !deps)
                e = cudaErrorMemoryAllocation;
            if (deps && (e = rt(DRV(cuGraphNodeGetDependencies)(nodes[i], deps, NULL, &d))) == cudaSuccess)
                for (size_t k = 0; k < d; k++)
                    for (size_t j = 0; j < n; j++)
                        if (nodes[j] == deps[k])
                            fprintf(f, "  n%zu -> n%zu;\n", j, i);
            free(deps);
        }
        fprintf(f, "}\n");
        if (fclose(f) != 0 && e == cudaSuccess)
            e = cudaErrorInvalidValue;
    }
    free(nodes);
    RETURN(e);
}

GPUSIM_EXPORT cudaError_t cudaGraphNodeGetDependencies(cudaGraphNode_t node, cudaGraphNode_t *pDependencies,
                                                       cudaGraphEdgeData *edgeData, size_t *pNumDependencies) {
    ENTER(cudaGraphNodeGetDependencies, node, pDependencies, edgeData, pNumDependencies);
    RETURN(rt(DRV(cuGraphNodeGetDependencies)((CUgraphNode)node, (CUgraphNode *)pDependencies,
                                                (CUgraphEdgeData *)edgeData, pNumDependencies)));
}

GPUSIM_EXPORT cudaError_t cudaGraphAddNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                           const cudaGraphNode_t *pDependencies,
                                           const cudaGraphEdgeData *dependencyData, size_t numDependencies,
                                           struct cudaGraphNodeParams *nodeParams) {
    ENTER(cudaGraphAddNode, pGraphNode, graph, pDependencies, dependencyData, numDependencies, nodeParams);
    RETURN(cudaErrorNotSupported);
}

GPUSIM_EXPORT cudaError_t cudaGraphConditionalHandleCreate(cudaGraphConditionalHandle *pHandle_out,
                                                           cudaGraph_t graph, unsigned int defaultLaunchValue,
                                                           unsigned int flags) {
    ENTER(cudaGraphConditionalHandleCreate, pHandle_out, graph, defaultLaunchValue, flags);
    RETURN(cudaErrorNotSupported);
}

GPUSIM_EXPORT cudaError_t cudaUserObjectCreate(cudaUserObject_t *object_out, void *ptr, cudaHostFn_t destroy,
                                               unsigned int initialRefcount, unsigned int flags) {
    ENTER(cudaUserObjectCreate, object_out, ptr, destroy, initialRefcount, flags);
    RETURN(rt(DRV(cuUserObjectCreate)((CUuserObject *)object_out, ptr, (CUhostFn)destroy, initialRefcount,
                                        flags)));
}

GPUSIM_EXPORT cudaError_t cudaUserObjectRelease(cudaUserObject_t object, unsigned int count) {
    ENTER(cudaUserObjectRelease, object, count);
    RETURN(rt(DRV(cuUserObjectRelease)((CUuserObject)object, count)));
}

GPUSIM_EXPORT cudaError_t cudaGraphRetainUserObject(cudaGraph_t graph, cudaUserObject_t object, unsigned int count,
                                                    unsigned int flags) {
    ENTER(cudaGraphRetainUserObject, graph, object, count, flags);
    RETURN(rt(DRV(cuGraphRetainUserObject)((CUgraph)graph, (CUuserObject)object, count, flags)));
}

GPUSIM_EXPORT cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *memPool, int device) {
    ENTER_NOCTX(cudaDeviceGetDefaultMemPool, memPool, device);
    RETURN(rt(DRV(cuDeviceGetDefaultMemPool)((CUmemoryPool *)memPool, device)));
}

GPUSIM_EXPORT cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr, void *value) {
    ENTER(cudaMemPoolGetAttribute, memPool, attr, value);
    RETURN(rt(DRV(cuMemPoolGetAttribute)((CUmemoryPool)memPool, (CUmemPool_attribute)attr, value)));
}

GPUSIM_EXPORT cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr, void *value) {
    ENTER(cudaMemPoolSetAttribute, memPool, attr, value);
    RETURN(rt(DRV(cuMemPoolSetAttribute)((CUmemoryPool)memPool, (CUmemPool_attribute)attr, value)));
}

GPUSIM_EXPORT cudaError_t cudaMemPoolSetAccess(cudaMemPool_t memPool, const struct cudaMemAccessDesc *descList,
                                               size_t count) {
    ENTER(cudaMemPoolSetAccess, memPool, descList, count);
    RETURN(rt(DRV(cuMemPoolSetAccess)((CUmemoryPool)memPool, (const CUmemAccessDesc *)descList, count)));
}

GPUSIM_EXPORT cudaError_t cudaMemPoolTrimTo(cudaMemPool_t memPool, size_t minBytesToKeep) {
    ENTER(cudaMemPoolTrimTo, memPool, minBytesToKeep);
    RETURN(rt(DRV(cuMemPoolTrimTo)((CUmemoryPool)memPool, minBytesToKeep)));
}

GPUSIM_EXPORT cudaError_t cudaDeviceGetGraphMemAttribute(int device, enum cudaGraphMemAttributeType attr,
                                                         void *value) {
    ENTER_NOCTX(cudaDeviceGetGraphMemAttribute, device, attr, value);
    RETURN(rt(DRV(cuDeviceGetGraphMemAttribute)(device, (CUgraphMem_attribute)attr, value)));
}

GPUSIM_EXPORT cudaError_t cudaDeviceSetGraphMemAttribute(int device, enum cudaGraphMemAttributeType attr,
                                                         void *value) {
    ENTER_NOCTX(cudaDeviceSetGraphMemAttribute, device, attr, value);
    RETURN(rt(DRV(cuDeviceSetGraphMemAttribute)(device, (CUgraphMem_attribute)attr, value)));
}

/* Sharing memory and events with other processes cannot be simulated. */
GPUSIM_EXPORT cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t *handle, void *devPtr) {
    ENTER(cudaIpcGetMemHandle, handle, devPtr);
    RETURN(cudaErrorNotSupported);
}

GPUSIM_EXPORT cudaError_t cudaIpcOpenMemHandle(void **devPtr, cudaIpcMemHandle_t handle, unsigned int flags) {
    ENTER(cudaIpcOpenMemHandle, devPtr, handle, flags);
    RETURN(cudaErrorNotSupported);
}

GPUSIM_EXPORT cudaError_t cudaIpcCloseMemHandle(void *devPtr) {
    ENTER(cudaIpcCloseMemHandle, devPtr);
    RETURN(cudaErrorNotSupported);
}

GPUSIM_EXPORT cudaError_t cudaIpcGetEventHandle(cudaIpcEventHandle_t *handle, cudaEvent_t event) {
    ENTER(cudaIpcGetEventHandle, handle, event);
    RETURN(cudaErrorNotSupported);
}

GPUSIM_EXPORT cudaError_t cudaIpcOpenEventHandle(cudaEvent_t *event, cudaIpcEventHandle_t handle) {
    ENTER(cudaIpcOpenEventHandle, event, handle);
    RETURN(cudaErrorNotSupported);
}

GPUSIM_EXPORT cudaError_t cudaLibraryLoadData(cudaLibrary_t *library, const void *code,
                                              enum cudaJitOption *jitOptions, void **jitOptionsValues,
                                              unsigned int numJitOptions, enum cudaLibraryOption *libraryOptions,
                                              void **libraryOptionValues, unsigned int numLibraryOptions) {
    ENTER(cudaLibraryLoadData, library, code, jitOptions, jitOptionsValues, numJitOptions, libraryOptions,
          libraryOptionValues, numLibraryOptions);
    RETURN(rt(DRV(cuLibraryLoadData)((CUlibrary *)library, code, (CUjit_option *)jitOptions, jitOptionsValues,
                                       numJitOptions, (CUlibraryOption *)libraryOptions, libraryOptionValues,
                                       numLibraryOptions)));
}

GPUSIM_EXPORT cudaError_t cudaLibraryGetKernel(cudaKernel_t *pKernel, cudaLibrary_t library, const char *name) {
    ENTER(cudaLibraryGetKernel, pKernel, library, name);
    RETURN(rt(DRV(cuLibraryGetKernel)((CUkernel *)pKernel, (CUlibrary)library, name)));
}

GPUSIM_EXPORT cudaError_t cudaLibraryUnload(cudaLibrary_t library) {
    ENTER(cudaLibraryUnload, library);
    RETURN(rt(DRV(cuLibraryUnload)((CUlibrary)library)));
}

GPUSIM_EXPORT cudaError_t cudaKernelSetAttributeForDevice(cudaKernel_t kernel, enum cudaFuncAttribute attr,
                                                          int value, int device) {
    ENTER_NOCTX(cudaKernelSetAttributeForDevice, kernel, attr, value, device);
    RETURN(rt(DRV(cuKernelSetAttribute)((CUfunction_attribute)attr, value, (CUkernel)kernel, device)));
}

/* For the math-library stand-ins: launches the kernel `name` as their own copy
 * of the runtime would, through cudaLaunchKernel, costing `cost_ns` (before
 * GPUSIM_TIME_SCALE). */
GPUSIM_EXPORT cudaError_t gpusim_launch_named(const char *name, dim3 grid, dim3 block, cudaStream_t stream,
                                              uint64_t cost_ns) {
    CUfunction f = gpusim_named_kernel(name);
    if (!f)
        return cudaErrorInvalidDeviceFunction;
    gpusim_set_next_kernel_cost(cost_ns ? cost_ns : 1);
    cudaError_t e = cudaLaunchKernel((const void *)f, grid, block, NULL, 0, stream);
    gpusim_set_next_kernel_cost(0);
    return e;
}

/* ------------------------------------------------------------------ user-built graph nodes */

GPUSIM_EXPORT cudaError_t cudaGraphAddHostNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                               const cudaGraphNode_t *pDependencies, size_t numDependencies,
                                               const struct cudaHostNodeParams *pNodeParams) {
    ENTER(cudaGraphAddHostNode, pGraphNode, graph, pDependencies, numDependencies, pNodeParams);
    if (!pNodeParams)
        RETURN(cudaErrorInvalidValue);
    CUDA_HOST_NODE_PARAMS p = {.fn = (CUhostFn)pNodeParams->fn, .userData = pNodeParams->userData};
    RETURN(rt(DRV(cuGraphAddHostNode)((CUgraphNode *)pGraphNode, (CUgraph)graph,
                                      (const CUgraphNode *)pDependencies, numDependencies, &p)));
}

static CUmemorytype memory_type(enum cudaMemcpyKind kind, int src) {
    switch (kind) {
    case cudaMemcpyHostToHost: return CU_MEMORYTYPE_HOST;
    case cudaMemcpyHostToDevice: return src ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
    case cudaMemcpyDeviceToHost: return src ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
    case cudaMemcpyDeviceToDevice: return CU_MEMORYTYPE_DEVICE;
    default: return CU_MEMORYTYPE_UNIFIED;
    }
}

/* The driver's form of a runtime 3D copy of linear memory (arrays are refused). */
static cudaError_t memcpy3d(const struct cudaMemcpy3DParms *c, CUDA_MEMCPY3D *p) {
    if (!c)
        return cudaErrorInvalidValue;
    if (c->srcArray || c->dstArray)
        return cudaErrorNotSupported;
    CUmemorytype st = memory_type(c->kind, 1), dt = memory_type(c->kind, 0);
    *p = (CUDA_MEMCPY3D){
        .srcXInBytes = c->srcPos.x, .srcY = c->srcPos.y, .srcZ = c->srcPos.z,
        .srcMemoryType = st, .srcHost = c->srcPtr.ptr, .srcDevice = (CUdeviceptr)c->srcPtr.ptr,
        .srcPitch = c->srcPtr.pitch, .srcHeight = c->srcPtr.ysize,
        .dstXInBytes = c->dstPos.x, .dstY = c->dstPos.y, .dstZ = c->dstPos.z,
        .dstMemoryType = dt, .dstHost = c->dstPtr.ptr, .dstDevice = (CUdeviceptr)c->dstPtr.ptr,
        .dstPitch = c->dstPtr.pitch, .dstHeight = c->dstPtr.ysize,
        .WidthInBytes = c->extent.width, .Height = c->extent.height, .Depth = c->extent.depth,
    };
    return cudaSuccess;
}

GPUSIM_EXPORT cudaError_t cudaGraphAddMemcpyNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                                 const cudaGraphNode_t *pDependencies, size_t numDependencies,
                                                 const struct cudaMemcpy3DParms *pCopyParams) {
    ENTER(cudaGraphAddMemcpyNode, pGraphNode, graph, pDependencies, numDependencies, pCopyParams);
    CUDA_MEMCPY3D p;
    cudaError_t e = memcpy3d(pCopyParams, &p);
    if (e != cudaSuccess)
        RETURN(e);
    RETURN(rt(DRV(cuGraphAddMemcpyNode)((CUgraphNode *)pGraphNode, (CUgraph)graph,
                                        (const CUgraphNode *)pDependencies, numDependencies, &p,
                                        gpusim_runtime_context(tls_device))));
}

GPUSIM_EXPORT cudaError_t cudaGraphAddMemcpyNode1D(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                                   const cudaGraphNode_t *pDependencies, size_t numDependencies,
                                                   void *dst, const void *src, size_t count,
                                                   enum cudaMemcpyKind kind) {
    ENTER(cudaGraphAddMemcpyNode1D, pGraphNode, graph, pDependencies, numDependencies, dst, src, count, kind);
    CUDA_MEMCPY3D p = {
        .srcMemoryType = memory_type(kind, 1), .srcHost = src, .srcDevice = (CUdeviceptr)src,
        .dstMemoryType = memory_type(kind, 0), .dstHost = dst, .dstDevice = (CUdeviceptr)dst,
        .WidthInBytes = count, .Height = 1, .Depth = 1,
    };
    RETURN(rt(DRV(cuGraphAddMemcpyNode)((CUgraphNode *)pGraphNode, (CUgraph)graph,
                                        (const CUgraphNode *)pDependencies, numDependencies, &p,
                                        gpusim_runtime_context(tls_device))));
}

GPUSIM_EXPORT cudaError_t cudaGraphAddMemsetNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                                 const cudaGraphNode_t *pDependencies, size_t numDependencies,
                                                 const struct cudaMemsetParams *pMemsetParams) {
    ENTER(cudaGraphAddMemsetNode, pGraphNode, graph, pDependencies, numDependencies, pMemsetParams);
    if (!pMemsetParams)
        RETURN(cudaErrorInvalidValue);
    CUDA_MEMSET_NODE_PARAMS p = {
        .dst = (CUdeviceptr)pMemsetParams->dst, .pitch = pMemsetParams->pitch, .value = pMemsetParams->value,
        .elementSize = pMemsetParams->elementSize, .width = pMemsetParams->width, .height = pMemsetParams->height,
    };
    RETURN(rt(DRV(cuGraphAddMemsetNode)((CUgraphNode *)pGraphNode, (CUgraph)graph,
                                        (const CUgraphNode *)pDependencies, numDependencies, &p,
                                        gpusim_runtime_context(tls_device))));
}

_Static_assert(sizeof(struct cudaMemPoolProps) == sizeof(CUmemPoolProps), "pool property layouts");

GPUSIM_EXPORT cudaError_t cudaGraphAddMemAllocNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                                   const cudaGraphNode_t *pDependencies, size_t numDependencies,
                                                   struct cudaMemAllocNodeParams *nodeParams) {
    ENTER(cudaGraphAddMemAllocNode, pGraphNode, graph, pDependencies, numDependencies, nodeParams);
    if (!nodeParams)
        RETURN(cudaErrorInvalidValue);
    CUDA_MEM_ALLOC_NODE_PARAMS p;
    memset(&p, 0, sizeof p);
    /* The runtime's and the driver's pool properties share their layout. */
    memcpy(&p.poolProps, &nodeParams->poolProps, sizeof p.poolProps);
    p.accessDescs = (const CUmemAccessDesc *)nodeParams->accessDescs;
    p.accessDescCount = nodeParams->accessDescCount;
    p.bytesize = nodeParams->bytesize;
    cudaError_t e = rt(DRV(cuGraphAddMemAllocNode)((CUgraphNode *)pGraphNode, (CUgraph)graph,
                                                   (const CUgraphNode *)pDependencies, numDependencies, &p));
    if (e == cudaSuccess)
        nodeParams->dptr = (void *)p.dptr;
    RETURN(e);
}

GPUSIM_EXPORT cudaError_t cudaGraphAddMemFreeNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                                  const cudaGraphNode_t *pDependencies, size_t numDependencies,
                                                  void *dptr) {
    ENTER(cudaGraphAddMemFreeNode, pGraphNode, graph, pDependencies, numDependencies, dptr);
    RETURN(rt(DRV(cuGraphAddMemFreeNode)((CUgraphNode *)pGraphNode, (CUgraph)graph,
                                         (const CUgraphNode *)pDependencies, numDependencies, (CUdeviceptr)dptr)));
}

GPUSIM_EXPORT cudaError_t cudaGraphClone(cudaGraph_t *pGraphClone, cudaGraph_t originalGraph) {
    ENTER(cudaGraphClone, pGraphClone, originalGraph);
    RETURN(rt(DRV(cuGraphClone)((CUgraph *)pGraphClone, (CUgraph)originalGraph)));
}

/* A marker for tools: this libcudart simulates. */
GPUSIM_EXPORT const char gpusim_runtime[] = "gpusim: simulated CUDA runtime, no GPU";
