// Shared by the fuzz targets (libFuzzer; `make fuzz`, tests/fuzz/README.md).
//
// Each target feeds arbitrary bytes to one decoder a peer, a task or a user
// can reach, and lets through only the refusal that decoder documents (its
// contract's exception).  Anything else -- another exception, a crash, a
// sanitizer report, a hang past libFuzzer's -timeout -- is a finding.
// Where a decode succeeds, the target encodes the result again and checks
// that decoding that gives the same encoding: a decoder that accepts what
// its encoder cannot reproduce is a finding too.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#define FUZZ_REQUIRE(cond)                                                                                   \
    do {                                                                                                     \
        if (!(cond)) {                                                                                       \
            std::fprintf(stderr, "fuzz: %s:%d: %s does not hold\n", __FILE__, __LINE__, #cond);              \
            std::abort();                                                                                    \
        }                                                                                                    \
    } while (0)

namespace fuzz {

inline std::string_view bytes(const uint8_t *data, size_t size)
{
    return std::string_view(reinterpret_cast<const char *>(data), size);
}

// Splits the input: its first byte picks what to decode, the rest is the
// input to decode.
struct Pick {
    uint8_t which = 0;
    std::string_view rest;
    Pick(const uint8_t *data, size_t size)
    {
        if (size > 0) {
            which = data[0];
            rest = bytes(data + 1, size - 1);
        }
    }
};

} // namespace fuzz
