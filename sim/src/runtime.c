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
#include "runtime_internal.h"

/* ------------------------------------------------------------------ state */

__thread int tls_device;
__thread cudaError_t tls_last_error;

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

void rt_init(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    gpusim_init();
    if (gpusim_initialized())
        pthread_once(&once, register_teardown);
}

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

/* __device__ and __constant__ variables: host shadow -> simulated device storage
 * (struct var in runtime_internal.h). */
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

struct var *find_var(const void *host) {
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
