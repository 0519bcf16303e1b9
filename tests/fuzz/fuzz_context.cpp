// Fuzz target: a step's communication context as its text form reaches
// slurmstepd and the tasks (switch_rdma/context.hpp): decode, then the
// consistency check the node agent applies before it opens one.
#include <stdexcept>

#include "lib/net/wire.hpp"
#include "switch_rdma/context.hpp"
#include "tests/fuzz/fuzz.hpp"

using namespace storm;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    try {
        auto c = rdma::Context::decode(fuzz::bytes(data, size));
        auto again = c.encode();
        FUZZ_REQUIRE(rdma::Context::decode(again).encode() == again);
        try {
            c.validate();
        } catch (const std::invalid_argument &) {
        }
    } catch (const net::DecodeError &) {
    }
    return 0;
}
