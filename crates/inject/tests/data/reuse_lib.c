/* A library that host_safety's dlopen-reuse mode loads, unloads and replaces
 * by another build of it, which the loader maps where the first one was:
 * built twice, with LIB_FN naming its inner function (in_liba, in_libb), so
 * that both have one size and one layout. */
__attribute__((noinline)) void LIB_FN(void (*f)(void)) {
    f();
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void late_call(void (*f)(void)) {
    LIB_FN(f);
    __asm__ volatile("" ::: "memory");
}
