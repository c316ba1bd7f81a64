/* Fills an activity buffer with one record of each kind gpuperf decodes, laid out
 * by the real CUPTI headers of the version it is compiled against. The values are
 * the ones tests/integration/decode.rs expects. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cupti.h>

#if CUPTI_API_VERSION >= 130000
typedef CUpti_ActivityKernel10 Kernel;
#else
typedef CUpti_ActivityKernel9 Kernel;
#endif

static const char kernel_name[] = "_Z9my_kernelPfi";
static const char device_name[] = "NVIDIA H100 80GB HBM3";

#define PUT(T, fill)                                  \
    do {                                              \
        T r;                                          \
        memset(&r, 0, sizeof r);                      \
        fill;                                         \
        if (n + sizeof r > cap) return 0;             \
        memcpy(buf + n, &r, sizeof r);                \
        n += sizeof r;                                \
    } while (0)

size_t gp_fill(uint8_t *buf, size_t cap) {
    size_t n = 0;
    PUT(Kernel, {
        r.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
        r.start = 1000; r.end = 3500; r.completed = 3500;
        r.deviceId = 1; r.contextId = 2; r.streamId = 7;
        r.gridX = 128; r.gridY = 2; r.gridZ = 1;
        r.blockX = 256; r.blockY = 1; r.blockZ = 1;
        r.correlationId = 42; r.name = kernel_name;
        r.graphNodeId = 0x1234567890ull; r.graphId = 9;
    });
    PUT(CUpti_ActivityMemcpy6, {
        r.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
        r.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_HTOD; r.bytes = 1 << 20;
        r.start = 4000; r.end = 4800; r.deviceId = 1; r.contextId = 2; r.streamId = 7;
        r.correlationId = 44; r.runtimeCorrelationId = 43;
    });
    PUT(CUpti_ActivityMemset4, {
        r.kind = CUPTI_ACTIVITY_KIND_MEMSET;
        r.value = 0xab; r.bytes = 4096; r.start = 5000; r.end = 5100;
        r.deviceId = 1; r.contextId = 2; r.streamId = 8; r.correlationId = 45;
    });
    PUT(CUpti_ActivitySynchronization2, {
        r.kind = CUPTI_ACTIVITY_KIND_SYNCHRONIZATION;
        r.type = CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE;
        r.start = 6000; r.end = 9000; r.correlationId = 46; r.contextId = 2; r.streamId = 7;
    });
    PUT(CUpti_ActivityOverhead3, {
        r.kind = CUPTI_ACTIVITY_KIND_OVERHEAD;
        r.overheadKind = CUPTI_ACTIVITY_OVERHEAD_CUPTI_BUFFER_FLUSH;
        r.start = 10000; r.end = 10250; r.correlationId = 48;
    });
    PUT(CUpti_ActivityDevice5, {
        r.kind = CUPTI_ACTIVITY_KIND_DEVICE;
        r.id = 1; r.computeCapabilityMajor = 9; r.computeCapabilityMinor = 0;
        r.name = device_name;
    });
    PUT(CUpti_ActivityContext3, {
        r.kind = CUPTI_ACTIVITY_KIND_CONTEXT;
        r.contextId = 2; r.deviceId = 1;
    });
    /* cudaMemcpyPeer from device 1 to device 3, run by device 1. */
    PUT(CUpti_ActivityMemcpyPtoP4, {
        r.kind = CUPTI_ACTIVITY_KIND_MEMCPY2;
        r.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_PTOP;
        r.srcKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
        r.dstKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
        r.bytes = 1 << 16; r.start = 11000; r.end = 11500;
        r.deviceId = 1; r.contextId = 2; r.streamId = 7;
        r.srcDeviceId = 1; r.srcContextId = 2; r.dstDeviceId = 3; r.dstContextId = 4;
        r.correlationId = 47; r.graphNodeId = 0x42; r.graphId = 5;
    });
    return n;
}
