// Fuzz target: a frame's header as a connection receives it from any peer
// (lib/net/frame.hpp), and the wire reader's primitives (lib/net/wire.hpp)
// over the payload that follows.
#include "lib/net/frame.hpp"
#include "lib/net/wire.hpp"
#include "tests/fuzz/fuzz.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    using namespace storm::net;
    if (size < kHeaderSize)
        return 0;
    try {
        FrameHeader h = decode_header(data);
        FUZZ_REQUIRE(h.length <= max_payload(h.type));
        FUZZ_REQUIRE(msg_type_name(h.type) != nullptr);
        char again[kHeaderSize];
        encode_header(again, h.type, h.op, h.length);
        FrameHeader h2 = decode_header(again);
        FUZZ_REQUIRE(h2.type == h.type && h2.length == h.length && h2.op == h.op);
    } catch (const FrameError &) {
    }
    // The payload through the reader, as decoders read it.
    Reader r(fuzz::bytes(data + kHeaderSize, size - kHeaderSize));
    try {
        while (r.remaining() > 0) {
            switch (r.u8() % 5) {
            case 0:
                r.u16();
                break;
            case 1:
                r.u32();
                break;
            case 2:
                r.u64();
                break;
            case 3:
                r.bytes(1u << 20);
                break;
            default:
                r.raw(r.u8());
                break;
            }
        }
    } catch (const DecodeError &) {
    }
    return 0;
}
