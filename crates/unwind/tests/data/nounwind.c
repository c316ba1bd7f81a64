/* Stacks through code without unwind info: (1) "JIT" code copied into an
 * anonymous executable mapping, (2) libnocfi.so, built without unwind tables,
 * (3) a library dlopened after the unwinder read the module table, before and
 * after a refresh, and after it is closed again; (4) another library
 * (LIBLATE2.so, same code, another file) loaded where the closed one was.
 * usage: nounwind PROBE.so LIBNOCFI.so LIBLATE.so [LIBLATE2.so] */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

typedef int (*capture_fn)(char *, size_t);
static capture_fn capture;
static volatile int sink;

__attribute__((noinline)) static void leaf(void) {
    static char buf[65536];
    if (capture(buf, sizeof buf) >= 0) fputs(buf, stdout);
    fflush(stdout);
    sink++;
}

int main(int argc, char **argv) {
    if (argc < 4) return 2;
    void *h = dlopen(argv[1], RTLD_NOW);
    if (!h) { fprintf(stderr, "%s\n", dlerror()); return 1; }
    capture = (capture_fn)dlsym(h, "gpuperf_probe_capture");
    int (*refresh)(void) = (int (*)(void))dlsym(h, "gpuperf_probe_refresh");
    ((void (*)(void))dlsym(h, "gpuperf_probe_init"))();

    /* sub rsp,8; call rdi; add rsp,8; ret */
    static const unsigned char code[] = {0x48, 0x83, 0xec, 0x08, 0xff, 0xd7,
                                         0x48, 0x83, 0xc4, 0x08, 0xc3};
    void *jit = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    memcpy(jit, code, sizeof code);
    mprotect(jit, 4096, PROT_READ | PROT_EXEC);
    printf("== jit\n");
    ((void (*)(void (*)(void)))jit)(leaf);

    void *nocfi = dlopen(argv[2], RTLD_NOW);
    if (!nocfi) { fprintf(stderr, "%s\n", dlerror()); return 1; }
    refresh();
    printf("== nocfi\n");
    ((int (*)(void (*)(void)))dlsym(nocfi, "nocfi_call"))(leaf);

    void *late = dlopen(argv[3], RTLD_NOW);
    if (!late) { fprintf(stderr, "%s\n", dlerror()); return 1; }
    int (*late_call)(void (*)(void)) = (int (*)(void (*)(void)))dlsym(late, "late_call");
    printf("== late before refresh\n");
    late_call(leaf);
    printf("refreshed %d\n", refresh());
    printf("== late after refresh\n");
    late_call(leaf);
    Dl_info first;
    dladdr((void *)late_call, &first);
    dlclose(late);
    printf("== after dlclose\n");
    leaf();
    printf("refreshed %d\n", refresh());
    if (argc < 5) return 0;
    void *again = dlopen(argv[4], RTLD_NOW);
    if (!again) { fprintf(stderr, "%s\n", dlerror()); return 1; }
    late_call = (int (*)(void (*)(void)))dlsym(again, "late_call");
    Dl_info second;
    dladdr((void *)late_call, &second);
    printf("same address %d\n", first.dli_fbase == second.dli_fbase);
    printf("refreshed %d\n", refresh());
    printf("== reused address\n");
    late_call(leaf);
    return 0;
}
