/* Stacks taken in a signal handler: a timer signal interrupts a loop in
 * `interrupted` (called by `outer`, called by main), and the handler takes
 * its stack with the probe. Once with the handler on the thread's stack,
 * once on an alternate signal stack (sigaltstack).
 * usage: signals PROBE.so */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

typedef int (*capture_fn)(char *, size_t);
static capture_fn capture;
static char buf[65536];
static volatile sig_atomic_t taken;
volatile unsigned long spins;

__attribute__((noinline)) void handler_take(void) {
    if (capture(buf, sizeof buf) < 0) buf[0] = 0;
    taken = 1;
}

void handler(int sig) {
    (void)sig;
    handler_take();
    __asm__ volatile("" ::: "memory");
}

/* The interrupted code: a loop that only the handler ends. */
__attribute__((noinline)) void interrupted(void) {
    while (!taken) spins++;
}

__attribute__((noinline)) void outer(void) {
    interrupted();
    __asm__ volatile("" ::: "memory");
}

static void run(const char *name, int on_altstack) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = handler;
    sa.sa_flags = on_altstack ? SA_ONSTACK : 0;
    sigaction(SIGALRM, &sa, NULL);
    taken = 0;
    struct itimerval t = {{0, 0}, {0, 2000}};
    setitimer(ITIMER_REAL, &t, NULL);
    outer();
    printf("== %s\n%s", name, buf);
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    void *h = dlopen(argv[1], RTLD_NOW);
    if (!h) { fprintf(stderr, "%s\n", dlerror()); return 1; }
    capture = (capture_fn)dlsym(h, "gpuperf_probe_capture");
    ((void (*)(void))dlsym(h, "gpuperf_probe_init"))();
    run("thread stack", 0);
    stack_t ss;
    ss.ss_size = 256 << 10;
    ss.ss_sp = malloc(ss.ss_size);
    ss.ss_flags = 0;
    if (!ss.ss_sp || sigaltstack(&ss, NULL) != 0) return 1;
    run("alternate stack", 1);
    fflush(stdout);
    return 0;
}
