#include "lib/prim/checksum.hpp"

#include <array>
#if defined(__x86_64__)
#include <cpuid.h>
#endif
#include <cstring>

namespace storm::prim {

namespace {

// CRC-32C (Castagnoli): in hardware where the CPU has SSE 4.2 (about twice
// as fast as zlib's CRC-32 here), by table otherwise.
uint32_t crc32c_table(uint32_t crc, const unsigned char *p, size_t n)
{
    static const auto table = [] {
        std::array<uint32_t, 256> t{};
        for (uint32_t i = 0; i < 256; ++i) {
            uint32_t c = i;
            for (int k = 0; k < 8; ++k)
                c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
            t[i] = c;
        }
        return t;
    }();
    while (n--)
        crc = table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return crc;
}

#if defined(__x86_64__)
// The crc32 instruction takes 3 cycles and issues one per cycle: three
// independent streams over three adjacent blocks keep it busy, and the
// three CRCs are joined by shifting the first two over the bytes that
// follow them (a multiplication by x^(8 * kBlock) modulo the polynomial,
// by table), as in Mark Adler's crc32c.c.
constexpr size_t kBlock = 4096; // bytes per stream and round: a power of two

uint32_t gf2_times(const uint32_t *mat, uint32_t vec)
{
    uint32_t sum = 0;
    for (; vec; vec >>= 1, ++mat)
        if (vec & 1)
            sum ^= *mat;
    return sum;
}

void gf2_square(uint32_t *square, const uint32_t *mat)
{
    for (int n = 0; n < 32; ++n)
        square[n] = gf2_times(mat, mat[n]);
}

// Tables that append kBlock zero bytes to a CRC register.
struct Shift {
    uint32_t t[4][256];
    Shift()
    {
        uint32_t odd[32], even[32];
        odd[0] = 0x82f63b78u; // one zero bit
        for (int n = 1; n < 32; ++n)
            odd[n] = 1u << (n - 1);
        gf2_square(even, odd); // two zero bits
        gf2_square(odd, even); // four
        const uint32_t *op = odd;
        for (size_t len = kBlock;;) { // one zero byte, two, four, ... kBlock
            gf2_square(even, odd);
            op = even;
            if ((len >>= 1) == 0)
                break;
            gf2_square(odd, even);
            op = odd;
            if ((len >>= 1) == 0)
                break;
        }
        for (uint32_t n = 0; n < 256; ++n)
            for (int b = 0; b < 4; ++b)
                t[b][n] = gf2_times(op, n << (8 * b));
    }
    uint32_t operator()(uint32_t crc) const
    {
        return t[0][crc & 0xff] ^ t[1][(crc >> 8) & 0xff] ^ t[2][(crc >> 16) & 0xff] ^ t[3][crc >> 24];
    }
};

__attribute__((target("sse4.2"))) uint32_t crc32c_sse42(uint32_t crc, const unsigned char *p, size_t n)
{
    static const Shift shift;
    uint64_t c = crc;
    for (; n >= 3 * kBlock; n -= 3 * kBlock, p += 3 * kBlock) {
        uint64_t c1 = 0, c2 = 0;
        for (size_t i = 0; i < kBlock; i += 8) {
            uint64_t v0, v1, v2;
            std::memcpy(&v0, p + i, 8);
            std::memcpy(&v1, p + kBlock + i, 8);
            std::memcpy(&v2, p + 2 * kBlock + i, 8);
            c = __builtin_ia32_crc32di(c, v0);
            c1 = __builtin_ia32_crc32di(c1, v1);
            c2 = __builtin_ia32_crc32di(c2, v2);
        }
        c = shift(static_cast<uint32_t>(c)) ^ static_cast<uint32_t>(c1);
        c = shift(static_cast<uint32_t>(c)) ^ static_cast<uint32_t>(c2);
    }
    for (; n >= 8; n -= 8, p += 8) {
        uint64_t v;
        std::memcpy(&v, p, 8);
        c = __builtin_ia32_crc32di(c, v);
    }
    uint32_t c32 = static_cast<uint32_t>(c);
    for (; n > 0; --n)
        c32 = __builtin_ia32_crc32qi(c32, *p++);
    return c32;
}
#endif

} // namespace

uint32_t crc32c(std::string_view data) noexcept
{
    const auto *p = reinterpret_cast<const unsigned char *>(data.data());
#if defined(__x86_64__)
    // CPUID on first use: __builtin_cpu_supports() would link libgcc's
    // CPU probe, run as a constructor in every process that loads a Storm
    // plugin (each slurmstepd), where CPUID traps to the hypervisor.
    static const bool hw = [] {
        unsigned a, b, c, d;
        return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_SSE4_2);
    }();
    if (hw)
        return ~crc32c_sse42(~0u, p, data.size());
#endif
    return ~crc32c_table(~0u, p, data.size());
}

} // namespace storm::prim
