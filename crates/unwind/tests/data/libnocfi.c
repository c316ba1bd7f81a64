/* Built with -fno-asynchronous-unwind-tables -fno-unwind-tables: no FDE covers it. */
static volatile int sink;
__attribute__((noinline)) int nocfi_call(void (*f)(void)) {
    f();
    sink++;
    return sink;
}
