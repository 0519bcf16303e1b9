// Fuzz target: gang scheduling's messages as a node agent receives them
// (sched_gang/protocol.hpp): tables down the tree, strobes down the tree
// or by multicast datagram (whose seal is checked before decode, but a
// forged datagram's decode must be as safe).
#include "sched_gang/protocol.hpp"
#include "tests/fuzz/fuzz.hpp"

using namespace storm;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz::Pick in(data, size);
    try {
        switch (in.which % 3) {
        case 0: {
            auto t = gang::Table::decode(in.rest);
            auto again = t.encode();
            FUZZ_REQUIRE(gang::Table::decode(again).encode() == again);
            break;
        }
        case 1: {
            auto s = gang::Strobe::decode(in.rest);
            auto again = s.encode();
            FUZZ_REQUIRE(gang::Strobe::decode(again).encode() == again);
            break;
        }
        default: {
            // A datagram of the strobe group: anyone on the network can send
            // one.  Only a strobe sealed under the table's key opens.
            gang::StrobeKey key{};
            key[0] = 0x5a;
            gang::strobe_datagram_epoch(in.rest);
            gang::open_strobe(in.rest, key);
            break;
        }
        }
    } catch (const net::DecodeError &) {
    }
    return 0;
}
