// Fuzz target: the broadcast protocol (launch_bcast/protocol.hpp) as a
// head agent reads it from a user's client (open, with its entries:
// files, directories, symbolic and hard links; chunk headers), a node
// reads it from the head (a chunk's compressed bytes; a packed chunk's
// records, checked against a
// session's files), and a client reads it from an agent (replies), and the
// launch gate's list of
// sessions as slurmstepd passes it from a step's environment (gate.hpp).
#include <stdexcept>
#include <string>

#include "launch_bcast/gate.hpp"
#include "launch_bcast/protocol.hpp"
#include "tests/fuzz/fuzz.hpp"

using namespace storm;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz::Pick in(data, size);
    try {
        switch (in.which % 6) {
        case 0: {
            auto o = bcast::OpenRequest::decode(in.rest);
            // What a node relies on: links carry no bytes, a hard link
            // names an earlier file, a symbolic link has a target.
            for (size_t i = 0; i < o.entries.size(); ++i) {
                const auto &e = o.entries[i];
                FUZZ_REQUIRE(e.kind == bcast::Entry::file || e.size == 0);
                FUZZ_REQUIRE(e.kind != bcast::Entry::hardlink ||
                             (e.link > 0 && e.link < i && o.entries[e.link].kind == bcast::Entry::file));
                FUZZ_REQUIRE(e.kind != bcast::Entry::symlink || (i > 0 && !e.target.empty()));
            }
            auto again = o.encode();
            FUZZ_REQUIRE(bcast::OpenRequest::decode(again).encode() == again);
            break;
        }
        case 1: {
            auto r = bcast::Reply::decode(in.rest);
            auto again = r.encode();
            FUZZ_REQUIRE(bcast::Reply::decode(again).encode() == again);
            break;
        }
        case 2: {
            net::Reader r(in.rest);
            auto h = bcast::ChunkHeader::decode(r);
            net::Writer w;
            h.encode(w);
            net::Reader r2(w.data());
            auto h2 = bcast::ChunkHeader::decode(r2);
            FUZZ_REQUIRE(h2.entry == h.entry && h2.offset == h.offset && h2.raw_len == h.raw_len &&
                         h2.crc == h.crc && h2.codec == h.codec);
            // The bytes after the header, as a node inflates them: never
            // more than the header's raw_len, and exactly that or a reason.
            if (h.codec != bcast::Codec::none) {
                std::string out;
                std::string why = bcast::decompress(h.codec, r.rest(), h.raw_len, out);
                FUZZ_REQUIRE(out.size() == h.raw_len && (why.empty() || why.find("decompress") != std::string::npos));
            }
            break;
        }
        case 3:
            bcast::safe_relative_path(in.rest);
            break;
        case 5: {
            // The records as a node checks them against a session of 8
            // entries, the odd ones files of 64 bytes: what check_record
            // accepts continues its file within its size, and the records
            // encode back to the chunk.
            auto records = bcast::decode_pack(in.rest);
            uint64_t received[8] = {};
            std::string again;
            for (size_t i = 0; i < records.size(); ++i) {
                const auto &r = records[i];
                FUZZ_REQUIRE(!r.bytes.empty() && (i == 0 || r.entry > records[i - 1].entry));
                bcast::encode_record_header(again, r.entry, r.offset, static_cast<uint32_t>(r.bytes.size()));
                again.append(r.bytes.data(), r.bytes.size());
                bool file = r.entry < 8 && r.entry % 2 == 1;
                uint64_t &got = received[r.entry % 8];
                if (bcast::check_record(r, file, 64, file ? got : 0).empty()) {
                    FUZZ_REQUIRE(file && r.offset == got && got + r.bytes.size() <= 64);
                    got += r.bytes.size();
                }
            }
            FUZZ_REQUIRE(again == in.rest);
            break;
        }
        default:
            try {
                auto sids = bcast::gate::parse(in.rest);
                FUZZ_REQUIRE(!sids.empty() && sids.size() <= bcast::gate::max_sids);
                FUZZ_REQUIRE(bcast::gate::parse(bcast::gate::format(sids)) == sids);
            } catch (const std::invalid_argument &) {
            }
            break;
        }
    } catch (const net::DecodeError &) {
    }
    return 0;
}
