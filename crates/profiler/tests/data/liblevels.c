/* Four levels of a shared library built with plain -O2 (no frame pointers),
 * between levels.c and the cudaLaunchKernel stand-in. */
int cudaLaunchKernel(unsigned corr);

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
