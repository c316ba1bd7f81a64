/* Test program for the simulated CUDA runtime (no GPU: the kernels never run there): NVTX
 * ranges around launches, for gpuperf's NVTX frames and timeline slices. NVTX v3's
 * header-only API (nvtx3/nvToolsExt.h, from NVIDIA's nvidia-nvtx or CUDA wheels).
 *
 *   push "outer"   launch outer_kernel
 *     push "inner" launch inner_kernel x2
 *   start "async" .. end around launch async_kernel (start/end: no frame)
 *   domain "mylib": push "dom_range" (nvtxDomainRangePushEx) launch domain_kernel
 *   push "deep" 66 times, launch deep_kernel, pop 66 times (2 beyond the cap of 64)
 *   one pop too many
 *   launch plain_kernel outside every range
 *   push "never_closed", launch tail_kernel, exit without the pop
 *
 * usage: nvtx_app */
#define APP_NAME "nvtx_app"
#include "runtime_app.h"
#include <nvtx3/nvToolsExt.h>

static void outer_stub(void) {}
static void inner_stub(void) {}
static void async_stub(void) {}
static void domain_stub(void) {}
static void deep_stub(void) {}
static void plain_stub(void) {}
static void tail_stub(void) {}

NOINLINE void launch(const void *stub, cudaStream_t s) {
    dim3 g = {64, 1, 1}, b = {128, 1, 1};
    CHECK(cudaLaunchKernel(stub, g, b, NULL, 0, s));
    __asm__ volatile("" ::: "memory");
}

#define DEEP 66

int main(void) {
    static int image;
    void **h = __cudaRegisterFatBinary(&image);
#define REG(stub, name) __cudaRegisterFunction(h, (const char *)stub, name, name, -1, 0, 0, 0, 0, 0)
    REG(outer_stub, "outer_kernel");
    REG(inner_stub, "inner_kernel");
    REG(async_stub, "async_kernel");
    REG(domain_stub, "domain_kernel");
    REG(deep_stub, "deep_kernel");
    REG(plain_stub, "plain_kernel");
    REG(tail_stub, "tail_kernel");
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));

    nvtxRangePushA("outer");
    launch((const void *)outer_stub, s);
    nvtxRangePushA("inner");
    launch((const void *)inner_stub, s);
    launch((const void *)inner_stub, s);
    nvtxRangePop();
    nvtxRangePop();

    nvtxRangeId_t r = nvtxRangeStartA("async");
    launch((const void *)async_stub, s);
    nvtxRangeEnd(r);

    nvtxDomainHandle_t dom = nvtxDomainCreateA("mylib");
    nvtxEventAttributes_t a = {0};
    a.version = NVTX_VERSION;
    a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    a.messageType = NVTX_MESSAGE_TYPE_ASCII;
    a.message.ascii = "dom_range";
    nvtxDomainRangePushEx(dom, &a);
    launch((const void *)domain_stub, s);
    nvtxDomainRangePop(dom);

    for (int i = 0; i < DEEP; i++)
        nvtxRangePushA("deep");
    launch((const void *)deep_stub, s);
    for (int i = 0; i < DEEP; i++)
        nvtxRangePop();
    nvtxRangePop(); /* one too many */

    launch((const void *)plain_stub, s);

    nvtxRangePushA("never_closed");
    launch((const void *)tail_stub, s);
    CHECK(cudaStreamSynchronize(s));
    printf("nvtx_app: 8 kernels\n");
    return 0;
}
