/* Launches through five levels of an executable and four of a shared library,
 * all built with plain -O2 (no frame pointers, %rbp a general register):
 *   main|worker -> run -> exe_level1..exe_level4 -> lib_level1..lib_level4
 *     -> cudaLaunchKernel (libfakecudart.so, push %rbp first)
 * usage: levels LAUNCHES THREADS [DEEP]
 * Each launching thread prints "tid N", launches once, waits at a gate
 * until a line (or the end) comes on stdin, then launches the rest from the
 * same call site. The test writes that line once the profiler has answered
 * every first launch's stack copy, so the rest find its recipe.
 * With DEEP > 0 each launch is made DEEP recursions of 2 KiB frames further
 * down, deeper than a stack copy reaches. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

unsigned lib_level1(unsigned x);

static int launches, deep;
static pthread_mutex_t print_lock = PTHREAD_MUTEX_INITIALIZER;

/* The gate: launchers threads launch; firsts of them made their first. */
static int launchers, firsts, gate_open;
static pthread_mutex_t gate_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_opened = PTHREAD_COND_INITIALIZER;

/* The last thread to make its first launch reads the line; all wait for it. */
static void gate(void) {
    pthread_mutex_lock(&gate_lock);
    if (++firsts == launchers) {
        char line[16];
        char *got = fgets(line, sizeof line, stdin);
        (void)got; /* the end of stdin opens the gate too */
        gate_open = 1;
        pthread_cond_broadcast(&gate_opened);
    }
    while (!gate_open)
        pthread_cond_wait(&gate_opened, &gate_lock);
    pthread_mutex_unlock(&gate_lock);
}
volatile unsigned sink;

/* Each level keeps values live across its call (so gcc spends callee-saved
 * registers, %rbp among them) and works after it (so the call is no tail
 * call). */
__attribute__((noinline)) static unsigned exe_level4(unsigned x) {
    unsigned a = x * 3, b = x ^ 0x55, c = x + 7, d = x * x;
    unsigned r = lib_level1(a + b);
    return r + a + b + c + d;
}

__attribute__((noinline)) static unsigned exe_level3(unsigned x) {
    unsigned a = x + 1, b = x * 5;
    unsigned r = exe_level4(a ^ b);
    return r * a + b;
}

__attribute__((noinline)) static unsigned exe_level2(unsigned x) {
    volatile char pad[200];
    pad[x % 200] = (char)x;
    unsigned r = exe_level3(x + pad[x % 200]);
    return r + pad[0];
}

__attribute__((noinline)) static unsigned exe_level1(unsigned x) {
    unsigned r = exe_level2(x * 7);
    return r ^ x;
}

__attribute__((noinline)) static unsigned recurse(int depth, unsigned x) {
    volatile char frame[2048];
    frame[depth % 2048] = (char)x;
    unsigned r = depth > 0 ? recurse(depth - 1, x + 1) : exe_level1(x);
    return r + frame[depth % 2048];
}

/* One call site for every launch of a thread, so that all of them share one
 * stack (and one recipe); the first is followed by the gate. */
__attribute__((noinline)) static void run(int n) {
    for (int i = 0; i < n; i++) {
        sink += deep > 0 ? recurse(deep, (unsigned)i) : exe_level1((unsigned)i);
        if (i == 0)
            gate();
    }
}

__attribute__((noinline)) static void launch_all(void) {
    pthread_mutex_lock(&print_lock);
    printf("tid %d\n", gettid());
    pthread_mutex_unlock(&print_lock);
    run(launches);
    sink += 1; /* not a tail call: launch_all keeps its frame */
}

static void *worker(void *arg) {
    (void)arg;
    launch_all();
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 3)
        return 2;
    launches = atoi(argv[1]);
    int threads = atoi(argv[2]);
    deep = argc > 3 ? atoi(argv[3]) : 0;
    launchers = threads > 0 ? threads : 1;
    if (threads == 0) {
        launch_all();
    } else {
        pthread_t t[64];
        for (int i = 0; i < threads && i < 64; i++)
            pthread_create(&t[i], NULL, worker, NULL);
        for (int i = 0; i < threads && i < 64; i++)
            pthread_join(t[i], NULL);
    }
    printf("done\n");
    return 0;
}
