/* Loaded by nounwind.c after the unwinder read the module table. */
static volatile int sink;
__attribute__((noinline)) int late_call(void (*f)(void)) {
    f();
    sink++;
    return sink;
}
