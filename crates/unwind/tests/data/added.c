/* Libraries dlopened after the unwinder read the module table, added to it
 * without a rebuild (add_loaded), then folded in by a refresh.
 * usage: added PROBE.so LIBLATE.so LIBLATE2.so */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>

typedef int (*capture_fn)(char *, size_t);
static capture_fn capture;
static int (*stats)(char *, size_t);
static char buf[65536];
static volatile int sink;

__attribute__((noinline)) static void leaf(void) {
    if (capture(buf, sizeof buf) >= 0) fputs(buf, stdout);
    fflush(stdout);
    sink++;
}

static void print_stats(const char *when) {
    if (stats(buf, sizeof buf) >= 0) printf("stats %s: %s", when, buf);
}

typedef int (*late_fn)(void (*)(void));

static late_fn open_late(const char *path) {
    void *h = dlopen(path, RTLD_NOW);
    if (!h) { fprintf(stderr, "%s\n", dlerror()); return NULL; }
    return (late_fn)dlsym(h, "late_call");
}

int main(int argc, char **argv) {
    if (argc < 4) return 2;
    void *h = dlopen(argv[1], RTLD_NOW);
    if (!h) { fprintf(stderr, "%s\n", dlerror()); return 1; }
    capture = (capture_fn)dlsym(h, "gpuperf_probe_capture");
    stats = (int (*)(char *, size_t))dlsym(h, "gpuperf_probe_stats");
    int (*refresh)(void) = (int (*)(void))dlsym(h, "gpuperf_probe_refresh");
    int (*add_loaded)(void) = (int (*)(void))dlsym(h, "gpuperf_probe_add_loaded");
    if (!add_loaded) { fprintf(stderr, "no gpuperf_probe_add_loaded\n"); return 1; }
    ((void (*)(void))dlsym(h, "gpuperf_probe_init"))();

    late_fn late = open_late(argv[2]);
    if (!late) return 1;
    printf("== late before\n");
    late(leaf);
    printf("added %d\n", add_loaded());
    printf("== late added\n");
    late(leaf);
    late_fn late2 = open_late(argv[3]);
    if (!late2) return 1;
    printf("added %d\n", add_loaded());
    printf("== late2 added\n");
    late2(leaf);
    printf("== late again\n");
    late(leaf);
    print_stats("added");
    printf("refreshed %d\n", refresh());
    printf("== late refreshed\n");
    late(leaf);
    print_stats("refreshed");
    return 0;
}
