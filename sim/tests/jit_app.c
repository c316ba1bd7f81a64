/* Test program for the simulated CUDA runtime (no GPU: the kernels never run there): kernel launches made from "JIT" code, as Python JITs, Triton's launchers or LuaJIT FFI make them.
 *
 * usage: jit_app N
 *   N x cudaLaunchKernel called through a stub copied into an anonymous
 *   executable mapping (no module, no unwind info), then N x cudaLaunchKernel
 *   from ordinary code, on one stream. */
#define APP_NAME "jit_app"
#include "runtime_app.h"
#include <string.h>
#include <sys/mman.h>

static void jitted_stub(void) {}
static void direct_stub(void) {}

static void launch(const void *stub, cudaStream_t s) {
    dim3 g = {8, 1, 1}, b = {128, 1, 1};
    CHECK(cudaLaunchKernel(stub, g, b, NULL, 0, s));
}

NOINLINE void launch_from_jit(cudaStream_t s) {
    launch((const void *)jitted_stub, s);
    __asm__ volatile("" ::: "memory"); /* a real frame, not a tail call */
}

NOINLINE void launch_direct(cudaStream_t s) {
    launch((const void *)direct_stub, s);
    __asm__ volatile("" ::: "memory");
}

typedef void (*jit_fn)(void (*)(cudaStream_t), cudaStream_t);

/* x86-64: sub rsp,8; mov rax,rdi; mov rdi,rsi; call rax; add rsp,8; ret. It calls
 * its first argument with its second, from a mapping no unwinder has tables for. */
static jit_fn make_jit(void) {
    static const unsigned char code[] = {0x48, 0x83, 0xec, 0x08, 0x48, 0x89, 0xf8, 0x48, 0x89, 0xf7,
                                         0xff, 0xd0, 0x48, 0x83, 0xc4, 0x08, 0xc3};
    void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        perror("jit_app: mmap");
        exit(3);
    }
    memcpy(p, code, sizeof code);
    if (mprotect(p, 4096, PROT_READ | PROT_EXEC) != 0) {
        perror("jit_app: mprotect");
        exit(3);
    }
    return (jit_fn)p;
}

NOINLINE void run_jit(int n) {
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    jit_fn jit = make_jit();
    for (int i = 0; i < n; i++)
        jit(launch_from_jit, s);
    for (int i = 0; i < n; i++)
        launch_direct(s);
    CHECK(cudaStreamSynchronize(s));
}

int main(int argc, char **argv) {
    if (argc < 2)
        return 2;
    static int image;
    void **h = __cudaRegisterFatBinary(&image);
    __cudaRegisterFunction(h, (const char *)jitted_stub, "_Z6jittedv", "jitted", -1, 0, 0, 0, 0, 0);
    __cudaRegisterFunction(h, (const char *)direct_stub, "_Z6directv", "direct", -1, 0, 0, 0, 0, 0);
    run_jit(atoi(argv[1]));
    printf("launched %d\n", 2 * atoi(argv[1]));
    return 0;
}
