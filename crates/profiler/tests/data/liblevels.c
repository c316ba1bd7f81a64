/* Four levels of a shared library built with plain -O2 (no frame pointers),
 * between levels.c and the cudaLaunchKernel stand-in. Built with
 * -DANOTHER_BUILD it is another build of the same library: other code
 * first, so every level sits elsewhere, with other unwind rules at the
 * first build's addresses. */
int cudaLaunchKernel(unsigned corr);

#ifdef ANOTHER_BUILD
__attribute__((noinline)) unsigned another_build(unsigned x) {
    volatile char pad[4096];
    for (unsigned i = 0; i < x % 64; i++)
        pad[(x * i) % 4096] = (char)i;
    return pad[x % 4096] + x * 17;
}
#endif

__attribute__((noinline)) static unsigned lib_level4(unsigned x) {
    unsigned a = x + 11, b = x * 13;
    unsigned r = (unsigned)cudaLaunchKernel(a ^ b);
    return r + a * b;
}

__attribute__((noinline)) static unsigned lib_level3(unsigned x) {
    volatile char pad[64];
    pad[x % 64] = (char)x;
    unsigned r = lib_level4(x + pad[x % 64]);
    return r + pad[1];
}

__attribute__((noinline)) static unsigned lib_level2(unsigned x) {
    unsigned a = x * 3, b = x - 9, c = x | 1;
    unsigned r = lib_level3(a + b + c);
    return r * c + a + b;
}

__attribute__((noinline)) unsigned lib_level1(unsigned x) {
    unsigned r = lib_level2(x ^ 0xabc);
    return r + x;
}
