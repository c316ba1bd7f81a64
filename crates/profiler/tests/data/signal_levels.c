/* Launches from a signal handler: a timer signal interrupts a loop in
 * `interrupted` (called by `outer`, called by main), and the handler
 * launches through liblevels.so's four levels:
 *   main -> outer -> interrupted | signal frame (__restore_rt) | handler
 *     -> lib_level1..lib_level4 -> cudaLaunchKernel (libfakecudart.so)
 * Built with -O2 -fomit-frame-pointer, so only the unwind information (and
 * the signal frame's saved registers) lead past the handler.
 * usage: signal_levels SIGNALS ALTSTACK
 * With ALTSTACK 1 the handler runs on an alternate signal stack, so a copy
 * of the handler's stack holds the signal frame but not the interrupted
 * code's stack. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

unsigned lib_level1(unsigned x);

static volatile sig_atomic_t taken, spinning;
static const struct itimerval soon = {{0, 0}, {0, 1000}};
volatile unsigned long spins;
volatile unsigned sink;

void handler(int sig) {
    if (!spinning) {
        /* Early (a slow machine): still arming the timer, not in the loop. */
        setitimer(ITIMER_REAL, &soon, NULL);
        return;
    }
    sink += lib_level1((unsigned)sig);
    taken = 1;
    __asm__ volatile("" ::: "memory");
}

/* The interrupted code: a loop that only the handler ends. */
__attribute__((noinline)) void interrupted(void) {
    spinning = 1;
    while (!taken)
        spins++;
    spinning = 0;
}

__attribute__((noinline)) void outer(void) {
    interrupted();
    __asm__ volatile("" ::: "memory");
}

int main(int argc, char **argv) {
    if (argc < 3)
        return 2;
    int signals = atoi(argv[1]);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = handler;
    if (atoi(argv[2])) {
        stack_t ss = {.ss_size = 256 << 10};
        ss.ss_sp = malloc(ss.ss_size);
        if (!ss.ss_sp || sigaltstack(&ss, NULL) != 0)
            return 1;
        sa.sa_flags = SA_ONSTACK;
    }
    sigaction(SIGALRM, &sa, NULL);
    for (int i = 0; i < signals; i++) {
        taken = 0;
        setitimer(ITIMER_REAL, &soon, NULL);
        outer();
    }
    printf("done\n");
    return 0;
}
