/* Calls the unwinder probe through five levels of this program and a shared
 * library (liblevels.so), on the main thread and on a pthread, and prints each
 * stack. Built with plain -O2 and with -fomit-frame-pointer by the tests.
 * usage: levels PROBE.so */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

typedef int (*capture_fn)(char *, size_t);
int lib_enter(capture_fn capture, int depth); /* liblevels.so */

static capture_fn capture;
static volatile int sink;

#define LEVEL(name, next)                                                      \
    __attribute__((noinline)) int name(int x) {                                \
        int r = next(x + 1);                                                   \
        sink += r; /* no tail call: the frame stays on the stack */            \
        return r + 1;                                                          \
    }

__attribute__((noinline)) int level5(int x) {
    int r = lib_enter(capture, x);
    sink += r;
    return r + 1;
}
LEVEL(level4, level5)
LEVEL(level3, level4)
LEVEL(level2, level3)
LEVEL(level1, level2)

static void *thread_main(void *arg) {
    (void)arg;
    level1(0);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    void *h = dlopen(argv[1], RTLD_NOW);
    if (!h) { fprintf(stderr, "%s\n", dlerror()); return 1; }
    void (*init)(void) = (void (*)(void))dlsym(h, "gpuperf_probe_init");
    capture = (capture_fn)dlsym(h, "gpuperf_probe_capture");
    init();
    printf("== main\n");
    level1(0);
    printf("== thread\n");
    fflush(stdout);
    pthread_t t;
    pthread_create(&t, NULL, thread_main, NULL);
    pthread_join(t, NULL);
    printf("== main again\n");
    level1(0);
    return 0;
}
