/* Two ucontext coroutines, each on its own mapped stack, that take stacks with
 * the probe in turn with the main thread, ROUNDS times. Prints the last stack
 * of each and then the unwinder's counters.
 * usage: coroutines PROBE.so */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <sys/mman.h>
#include <ucontext.h>

enum { ROUNDS = 100, STACK = 256 << 10 };
typedef int (*capture_fn)(char *, size_t);
static capture_fn capture;
static ucontext_t main_ctx, co_ctx[2];
static char buf[65536];
static volatile int sink;

__attribute__((noinline)) static void take(const char *name, int print) {
    int n = capture(buf, sizeof buf);
    if (print && n >= 0) printf("== %s\n%s", name, buf);
    sink++;
}

static void coroutine(int i) {
    for (int r = 0; r < ROUNDS; r++) {
        take(i ? "coroutine 1" : "coroutine 0", r == ROUNDS - 1);
        swapcontext(&co_ctx[i], &main_ctx);
    }
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    void *h = dlopen(argv[1], RTLD_NOW);
    if (!h) { fprintf(stderr, "%s\n", dlerror()); return 1; }
    capture = (capture_fn)dlsym(h, "gpuperf_probe_capture");
    int (*stats)(char *, size_t) = (int (*)(char *, size_t))dlsym(h, "gpuperf_probe_stats");
    ((void (*)(void))dlsym(h, "gpuperf_probe_init"))();
    for (int i = 0; i < 2; i++) {
        void *stack = mmap(NULL, STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (stack == MAP_FAILED) return 1;
        getcontext(&co_ctx[i]);
        co_ctx[i].uc_stack.ss_sp = stack;
        co_ctx[i].uc_stack.ss_size = STACK;
        co_ctx[i].uc_link = &main_ctx;
        makecontext(&co_ctx[i], (void (*)(void))coroutine, 1, i);
    }
    for (int r = 0; r < ROUNDS; r++) {
        take("main", r == ROUNDS - 1);
        for (int i = 0; i < 2; i++) swapcontext(&main_ctx, &co_ctx[i]);
    }
    fflush(stdout);
    if (stats(buf, sizeof buf) >= 0) printf("stats %s", buf);
    return 0;
}
