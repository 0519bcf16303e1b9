// Fuzz target: the requests the node agent's unix sockets read from any
// local process: the buffer pool's control messages (switch_rdma/control.hpp:
// header, then each type's reader, as Pool::handle routes them; an open
// carries a whole communication context), the coscheduling request, a
// fixed 16-byte message (lib/node/cosched_protocol.h), and the launch
// gate's hold request (launch_bcast/gate.hpp; first byte 3 mod 4).  A
// message decoded must be the one its fields encode again.
#include <cstring>

#include "launch_bcast/gate.hpp"
#include "lib/net/wire.hpp"
#include "lib/node/cosched_protocol.h"
#include "switch_rdma/control.hpp"
#include "tests/fuzz/fuzz.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    using namespace storm;
    using namespace storm::rdma;
    fuzz::Pick in(data, size);
    if (in.which % 2 == 0) {
        std::string msg(in.rest);
        net::Reader r(msg);
        try {
            control::Header h = control::header(r);
            switch (h.type) {
            case control::Type::open: {
                Context c = control::read_open(r);
                r.finish();
                std::string again = control::open(c);
                net::Reader r2(again);
                control::header(r2);
                FUZZ_REQUIRE(control::open(control::read_open(r2)) == again);
                break;
            }
            case control::Type::close: {
                auto ids = control::read_close(r);
                r.finish();
                FUZZ_REQUIRE(control::close(ids.id, ids.job, ids.step) == msg);
                break;
            }
            case control::Type::attach: {
                auto ids = control::read_attach(r);
                r.finish();
                FUZZ_REQUIRE(control::attach(ids.id, ids.job, ids.step, ids.rank) == msg);
                break;
            }
            case control::Type::attached:
                control::read_attached(r);
                break;
            case control::Type::error:
            case control::Type::failed:
                control::read_reason(r);
                break;
            case control::Type::halt:
            case control::Type::halted:
            case control::Type::release:
            case control::Type::ready:
                control::read_epoch(r);
                break;
            default:
                break;
            }
        } catch (const net::DecodeError &) {
        }
    } else if (in.which % 4 == 3) {
        // The launch gate's hold request (launch_bcast/gate.hpp), from
        // slurmstepd: what decodes encodes again the same.
        try {
            auto h = bcast::gate::read_hold(in.rest);
            FUZZ_REQUIRE(!h.sids.empty() && h.sids.size() <= bcast::gate::max_sids);
            FUZZ_REQUIRE(bcast::gate::hold(h.job, h.step, h.sids) == in.rest);
        } catch (const net::DecodeError &) {
        }
    } else if (in.rest.size() == STORM_COSCHED_MSG_SIZE) {
        // The coscheduling request's fields, as the channel reads them.
        const auto *m = reinterpret_cast<const unsigned char *>(in.rest.data());
        uint32_t job = storm_cosched_get32(m + 4), rank = storm_cosched_get32(m + 8),
                 count = storm_cosched_get32(m + 12);
        unsigned char again[STORM_COSCHED_MSG_SIZE];
        storm_cosched_encode(again, m[1], m[2], job, rank, count);
        if (m[0] == STORM_COSCHED_VERSION && m[3] == 0)
            FUZZ_REQUIRE(std::memcmp(again, m, STORM_COSCHED_MSG_SIZE) == 0);
    }
    return 0;
}
