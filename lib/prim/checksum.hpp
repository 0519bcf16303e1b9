// Checksums: CRC-32C, the integrity check agents publish for received data
// and broadcasts carry per chunk; FNV-1a, 64 bit, for short strings.
#pragma once

#include <cstdint>
#include <string_view>

namespace storm::prim {

inline uint64_t fnv1a64(std::string_view data) noexcept
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (unsigned char c : data) {
        h ^= c;
        h *= 0x100000001b3ULL;
    }
    return h;
}

// CRC-32C (Castagnoli) of `data`; the check value of "123456789" is
// 0xe3069283.
uint32_t crc32c(std::string_view data) noexcept;

} // namespace storm::prim
