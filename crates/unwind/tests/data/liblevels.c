/* The shared library of levels.c: two more levels, then the probe. */
#include <stdio.h>

typedef int (*capture_fn)(char *, size_t);
static volatile int sink;

__attribute__((noinline)) int lib_inner(capture_fn capture, int depth) {
    static char buf[65536];
    int n = capture(buf, sizeof buf);
    if (n < 0) return -1;
    fputs(buf, stdout);
    fflush(stdout);
    sink += depth;
    return n;
}

__attribute__((noinline)) int lib_enter(capture_fn capture, int depth) {
    int r = lib_inner(capture, depth + 1);
    sink += r;
    return r + 1;
}
