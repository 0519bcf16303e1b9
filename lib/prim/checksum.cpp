#include "lib/prim/checksum.hpp"

#include <array>
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
__attribute__((target("sse4.2"))) uint32_t crc32c_sse42(uint32_t crc, const unsigned char *p, size_t n)
{
    uint64_t c = crc;
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
    static const bool hw = __builtin_cpu_supports("sse4.2");
    if (hw)
        return ~crc32c_sse42(~0u, p, data.size());
#endif
    return ~crc32c_table(~0u, p, data.size());
}

} // namespace storm::prim
