/* A CUDA program stand-in for in-process stack tests (no GPU): launches through
 * five levels of its own and two of liblauncher.so (launcher.c), on the main
 * thread and on a pthread. Built with plain -O2, and with -fomit-frame-pointer.
 *
 * usage: levels_app LAUNCHES [deep|graph]
 *   deep:  one more launch under a 300-deep recursion, deeper than the depth cap
 *   graph: a CUDA graph captured, instantiated and launched (launcher_graph)
 * Stack: main -> level1 ... level5 -> lib_enter -> lib_inner -> cudaLaunchKernel */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int launcher_init(void);
int launcher_launch(void);
int launcher_graph(void);

static volatile int sink;
static int launches;

__attribute__((noinline)) int level5(int x) {
    int r = 0;
    for (int i = 0; i < launches; i++)
        r += launcher_launch();
    sink += r + x;
    return r + 1;
}

#define LEVEL(name, next)                                                      \
    __attribute__((noinline)) int name(int x) {                                \
        int r = next(x + 1);                                                   \
        sink += r; /* no tail call: the frame stays on the stack */            \
        return r + 1;                                                          \
    }
LEVEL(level4, level5)
LEVEL(level3, level4)
LEVEL(level2, level3)
LEVEL(level1, level2)

__attribute__((noinline)) int recurse(int n) {
    int r = n == 0 ? launcher_launch() : recurse(n - 1);
    sink += r;
    return r + 1;
}

__attribute__((noinline)) int graph_site(void) {
    int r = launcher_graph();
    sink += r;
    return r + 1;
}

static void *thread_main(void *arg) {
    (void)arg;
    level1(0);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2)
        return 2;
    launches = atoi(argv[1]);
    if (launcher_init() != 0)
        return 3;
    level1(0);
    pthread_t t;
    pthread_create(&t, NULL, thread_main, NULL);
    pthread_join(t, NULL);
    if (argc > 2 && strcmp(argv[2], "deep") == 0)
        recurse(300);
    if (argc > 2 && strcmp(argv[2], "graph") == 0)
        graph_site();
    printf("pid %d uid %d launched %d\n", getpid(), getuid(), 2 * launches);
    return 0;
}
