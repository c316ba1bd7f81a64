/* A CUDA application without a GPU, for end-to-end tests of `gpuperf record`.
 * It plays the CUDA driver: it loads the library named by
 * CUDA_INJECTION64_PATH and calls InitializeInjection, as cuInit does. Each
 * launch goes through a statically linked stand-in for cudart's
 * cudaLaunchKernel (frame pointers, `push %rbp` first, like the real one),
 * whose API callback and kernel record are played through the MOCK libcupti
 * that the injection library loaded (GPUPERF_CUPTI_PATH).
 *
 * usage: cuda_app LAUNCHES EXIT_CODE [fork|wait-signal]
 *   fork:        a child process makes the same launches too
 *   wait-signal: after the launches print "ready" and wait for SIGINT, then
 *                leave through exit(130), as a program with a handler would
 * Stack shape: main -> run_layer -> launch_kernel -> cudaLaunchKernel. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

int cudaLaunchKernel(uint32_t corr);
extern void (*fake_cupti_callback)(uint32_t corr);

static void (*mock_api)(int, int, uint32_t, int);
static void (*mock_kernel)(uint32_t, uint64_t, uint64_t, const char *, uint32_t, uint64_t,
                           uint32_t);
static uint64_t (*mock_now)(void);
static uint32_t next_corr = 1;
static volatile sig_atomic_t interrupted;

static void callback(uint32_t corr) {
    mock_api(2, 211, corr, 1); /* runtime domain, cudaLaunchKernel_v7000 */
    mock_api(2, 211, corr, 0);
    uint64_t t = mock_now();
    mock_kernel(corr, t + 1000, t + 1000 + 2000 * (corr % 3 + 1),
                corr % 2 ? "_Z6gemv_fPKfPf" : "_Z8rms_normPf", 0, 0, 7);
}

__attribute__((noinline)) static void launch_kernel(void) { cudaLaunchKernel(next_corr++); }

__attribute__((noinline)) static void run_layer(int n) {
    for (int i = 0; i < n; i++)
        launch_kernel();
}

static int load_driver_side(void) {
    const char *inj = getenv("CUDA_INJECTION64_PATH");
    if (!inj)
        return 0; /* not injected: launches still go through cudaLaunchKernel */
    void *h = dlopen(inj, RTLD_NOW | RTLD_LOCAL);
    int (*init)(void) = h ? (int (*)(void))dlsym(h, "InitializeInjection") : NULL;
    if (!init || init() != 1) {
        fprintf(stderr, "cuda_app: cannot load %s\n", inj);
        return -1;
    }
    void *mock = dlopen(getenv("GPUPERF_CUPTI_PATH"), RTLD_NOW | RTLD_NOLOAD);
    if (!mock)
        return -1;
    *(void **)&mock_api = dlsym(mock, "mock_api");
    *(void **)&mock_kernel = dlsym(mock, "mock_kernel");
    *(void **)&mock_now = dlsym(mock, "mock_now");
    if (!mock_api || !mock_kernel || !mock_now)
        return -1;
    fake_cupti_callback = callback;
    return 0;
}

static void on_sigint(int sig) {
    (void)sig;
    interrupted = 1;
}

int main(int argc, char **argv) {
    if (argc < 3)
        return 2;
    int launches = atoi(argv[1]);
    int code = atoi(argv[2]);
    const char *mode = argc > 3 ? argv[3] : "";
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    if (strcmp(mode, "wait-signal") == 0) {
        signal(SIGINT, on_sigint);
        sigprocmask(SIG_BLOCK, &block, &old); /* no lost wake-up before sigsuspend */
    }
    pid_t child = strcmp(mode, "fork") == 0 ? fork() : -1;
    if (load_driver_side() != 0)
        return 3;
    run_layer(launches);
    printf("pid %d uid %d gid %d launched %d\n", getpid(), getuid(), getgid(), launches);
    fflush(stdout);
    if (child == 0)
        return 0; /* exit runs the injection library's flush */
    if (child > 0)
        waitpid(child, NULL, 0);
    if (strcmp(mode, "wait-signal") == 0) {
        printf("ready\n");
        fflush(stdout);
        while (!interrupted)
            sigsuspend(&old);
        printf("interrupted\n");
        exit(130);
    }
    return code;
}
