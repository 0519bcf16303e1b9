// FNV-1a, 64 bit: the integrity check agents publish for received data.
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

} // namespace storm::prim
