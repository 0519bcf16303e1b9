// Fuzz target: libstormmsg's handshake (switch_rdma/msg/handshake.hpp) as
// a task reads it from whoever connects to its port: the first bytes of a
// hello, however many arrived (the acceptor decides on each read), against
// a fixed context, key and challenge; the challenge and the answer as the
// connecting task reads them.  Nothing without the key is accepted: a
// hello that passes must carry the MAC its own fields and the challenge
// give.
#include <algorithm>
#include <cstring>

#include "switch_rdma/context.hpp"
#include "switch_rdma/msg/handshake.hpp"
#include "tests/fuzz/fuzz.hpp"

using namespace storm;
using namespace storm::rdma::msg;

namespace {

const rdma::Context &context()
{
    static const rdma::Context c = [] {
        rdma::Context c;
        c.id = 3;
        c.job_id = 4242;
        c.step_id = 7;
        c.uid = 1000;
        c.key = std::string(rdma::context_key_bytes, 'k');
        c.divisions = 1;
        c.port_base = 40000;
        c.ntasks = 2;
        c.nodes = {{0x0100007f, {0, 1}}};
        return c;
    }();
    return c;
}

// A fixed challenge (the fuzzer plays the peer that answers it).
Challenge challenge()
{
    Challenge c{hello_magic, byte_order, {}};
    std::memset(c.nonce, 0x5a, sizeof c.nonce);
    return c;
}

template <typename T> size_t fill(T &out, std::string_view in)
{
    size_t n = std::min(sizeof out, in.size());
    if (n) // an empty input's data() may be null
        std::memcpy(&out, in.data(), n);
    return n;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz::Pick in(data, size);
    const rdma::Context &ctx = context();
    Challenge c = challenge();
    switch (in.which % 3) {
    case 0: {
        Hello h{};
        size_t got = fill(h, in.rest);
        Verdict v = check_hello(h, got, c, ctx, 0, 1024);
        FUZZ_REQUIRE(v.what != Verdict::more || got < sizeof h);
        FUZZ_REQUIRE(v.what != Verdict::refused || !v.why.empty());
        if (v.what == Verdict::accepted) {
            FUZZ_REQUIRE(got == sizeof h && h.id == ctx.id && h.job == ctx.job_id && h.step == ctx.step_id &&
                         h.dst == 0 && h.packet_size == 1024);
            // The answer to it proves the key back.
            FUZZ_REQUIRE(check_ack(make_ack(ctx.key, c, h), ctx.key, c, h));
        }
        break;
    }
    case 1: {
        Challenge got{};
        fill(got, in.rest);
        std::string why = check_challenge(got);
        FUZZ_REQUIRE(why.empty() == (got.magic == hello_magic && got.order == byte_order));
        break;
    }
    default: {
        HelloAck a{};
        fill(a, in.rest);
        Hello h = make_hello(ctx, 1, 0, 1024, c);
        check_ack(a, ctx.key, c, h);
        break;
    }
    }
    return 0;
}
