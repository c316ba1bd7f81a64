/* A library the host loads after CUDA started (sim_host.c, mode dlopen): it calls back,
 * so that the host's launch has a frame in it. */
__attribute__((noinline)) void late_call(void (*f)(void)) {
    f();
    __asm__ volatile("" ::: "memory");
}
