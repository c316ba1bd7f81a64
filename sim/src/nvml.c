/* Simulated NVML, libnvidia-ml.so.1 (no GPU): just enough for PyTorch to learn that the simulated devices have no NVML data; it reports nothing.
 *
 * What it does: nvmlInit_v2/nvmlShutdown succeed; a device looked up by PCI bus
 * id is found as no handle (NULL), so PyTorch's fabric check answers "no
 * fabric"; nvmlSystemGetCudaDriverVersion(_v2) gives the simulated driver's
 * 13.0; a device lists no running processes. Every other query returns
 * NVML_ERROR_NOT_SUPPORTED. (PyTorch calls nvmlInit_v2 without checking that
 * NVML loaded when expandable segments map memory; without any libnvidia-ml it
 * would call a null pointer.) It prints nothing. */
#include <stddef.h>

#define EXPORT __attribute__((visibility("default")))
#define NVML_SUCCESS 0
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_NOT_SUPPORTED 3

EXPORT int nvmlInit_v2(void) { return NVML_SUCCESS; }
EXPORT int nvmlInit(void) { return NVML_SUCCESS; }
EXPORT int nvmlInitWithFlags(unsigned int flags) { return NVML_SUCCESS; }
EXPORT int nvmlShutdown(void) { return NVML_SUCCESS; }

EXPORT int nvmlDeviceGetHandleByPciBusId_v2(const char *bus_id, void **device) {
    if (!bus_id || !device)
        return NVML_ERROR_INVALID_ARGUMENT;
    *device = NULL;
    return NVML_SUCCESS;
}

EXPORT int nvmlSystemGetCudaDriverVersion_v2(int *version) {
    if (!version)
        return NVML_ERROR_INVALID_ARGUMENT;
    *version = 13000;
    return NVML_SUCCESS;
}

EXPORT int nvmlSystemGetCudaDriverVersion(int *version) { return nvmlSystemGetCudaDriverVersion_v2(version); }

EXPORT const char *nvmlErrorString(int result) {
    return result == NVML_SUCCESS ? "Success" : "Not Supported (simulated NVML)";
}

/* No process is listed, as NVML answers in a container whose PID namespace
 * hides them: torch 2.11-2.13 assert success here when they word an
 * out-of-memory error (2.14 tolerates a failure). */
EXPORT int nvmlDeviceGetComputeRunningProcesses(void *device, unsigned int *count, void *infos) {
    if (!count)
        return NVML_ERROR_INVALID_ARGUMENT;
    *count = 0;
    return NVML_SUCCESS;
}
EXPORT int nvmlDeviceGetComputeRunningProcesses_v3(void *device, unsigned int *count, void *infos) {
    return nvmlDeviceGetComputeRunningProcesses(device, count, infos);
}
EXPORT int nvmlDeviceGetGpuFabricInfoV(void *device, void *info) { return NVML_ERROR_NOT_SUPPORTED; }
EXPORT int nvmlDeviceGetNvLinkRemoteDeviceType(void *device, unsigned int link, int *type) {
    return NVML_ERROR_NOT_SUPPORTED;
}
EXPORT int nvmlDeviceGetNvLinkRemotePciInfo_v2(void *device, unsigned int link, void *pci) {
    return NVML_ERROR_NOT_SUPPORTED;
}
EXPORT int nvmlDeviceGetCount_v2(unsigned int *count) { return NVML_ERROR_NOT_SUPPORTED; }

/* A marker for tools: this libnvidia-ml simulates. */
EXPORT const char gpusim_nvml[] = "gpusim: simulated NVML, no GPU";
