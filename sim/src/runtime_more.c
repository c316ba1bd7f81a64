/* Simulated CUDA runtime, libcudart.so.13 (no GPU): what PyTorch and NVIDIA's
 * samples use besides, and user-built graph nodes. See runtime_internal.h for
 * the other runtime_*.c files. */
#include "runtime_internal.h"

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
