// Fuzz target: what a peer's hello carries once munge verified it (the
// credential's payload, lib/net/connection.hpp parse_hello), and the
// server's challenge as a client decodes it (a wire string of at most 64
// bytes, lowercase hex).  A payload accepted must be the one its fields
// make again.
#include "lib/net/connection.hpp"
#include "lib/net/wire.hpp"
#include "tests/fuzz/fuzz.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    using namespace storm::net;
    fuzz::Pick in(data, size);
    if (in.which % 2 == 0) {
        std::string payload(in.rest);
        uint32_t to = 0, from = 0;
        std::string nonce, challenge;
        if (parse_hello(payload, to, from, nonce, challenge)) {
            FUZZ_REQUIRE(nonce.size() <= 64 && challenge.size() <= 64);
            std::string again =
                "storm:v2:" + std::to_string(to) + ":" + std::to_string(from) + ":" + nonce + ":" + challenge;
            uint32_t to2 = 0, from2 = 0;
            std::string n2, c2;
            FUZZ_REQUIRE(parse_hello(again, to2, from2, n2, c2));
            FUZZ_REQUIRE(to2 == to && from2 == from && n2 == nonce && c2 == challenge);
        }
    } else {
        Reader r(in.rest);
        try {
            std::string challenge(r.bytes(64));
            r.finish();
        } catch (const DecodeError &) {
        }
    }
    return 0;
}
