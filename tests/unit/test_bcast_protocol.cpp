// Unit tests of the broadcast's wire format (launch_bcast/protocol.cpp):
// the CRC-32C, and what decoding an open request refuses (paths leaving
// the destination, a relative destination); symbolic and hard links
// round-trip, and what a node relies on of them is checked (a target,
// a hard link to an earlier file); a request of another version is refused.
// Packed chunks: how a tree's files are cut into them (a file exactly
// filling one, empty files and links carrying nothing, a large file
// between small ones), and what decoding and checking a pack's records
// refuses (a truncated or empty record, entries out of order, a record
// for what is not a file, bytes past a file's size or already received).

#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "launch_bcast/protocol.hpp"
#include "lib/net/frame.hpp"
#include "lib/net/wire.hpp"
#include "tests/unit/cmocka.hpp"
#include "tests/unit/helpers.hpp"

using namespace storm;
using namespace storm::bcast;
using test_helpers::contains;

namespace {

void test_protocol_decoding(void **)
{
    // The frames' payload limits, as in protocol version 1: open and data
    // a chunk's, close and reply a control frame's.
    assert_int_equal(net::max_payload(kOpenFrame), net::kMaxDataPayload);
    assert_int_equal(net::max_payload(kDataFrame), net::kMaxDataPayload);
    assert_int_equal(net::max_payload(kCloseFrame), net::kMaxControlPayload);
    assert_int_equal(net::max_payload(kReplyFrame), net::kMaxControlPayload);
    assert_true(net::is_service_frame(kOpenFrame) && net::is_service_frame(kDataFrame) &&
                net::is_service_frame(kCloseFrame) && net::is_service_frame(kReplyFrame));
    assert_int_equal(crc32("123456789"), 0xe3069283u); // the CRC-32C check value
    assert_int_equal(crc32(""), 0u);
    OpenRequest q;
    q.cred = "c";
    q.dest = "/tmp/x";
    q.entries.push_back(Entry{"", Entry::directory, 0755, 0, 0, 0, {}, 0});
    q.entries.push_back(Entry{"a/b", Entry::file, 0644, 3, 0, 0, {}, 0});
    OpenRequest d = OpenRequest::decode(q.encode());
    assert_int_equal(d.entries.size(), 2);
    assert_string_equal(d.entries[1].path.c_str(), "a/b");
    for (const char *p : {"../x", "a/../b", "/abs", "a//b", "a/", ".", ""}) {
        q.entries[1].path = p;
        assert_true(
            contains(test_helpers::error_of<net::DecodeError>([&] { OpenRequest::decode(q.encode()); }),
                     "is not allowed"));
    }
    q.entries[1].path = "ok";
    q.dest = "relative";
    assert_true(contains(test_helpers::error_of<net::DecodeError>([&] { OpenRequest::decode(q.encode()); }),
                         "not an absolute path"));
}

void test_links_and_version(void **)
{
    OpenRequest q;
    q.cred = "c";
    q.dest = "/tmp/x";
    q.entries.push_back(Entry{"", Entry::directory, 0755, 0, 0, 0, {}, 0});
    q.entries.push_back(Entry{"f", Entry::file, 0644, 3, 0, 0, {}, 0});
    Entry l{"l", Entry::symlink, 0, 0, 5, 6, {}, 0};
    l.target = "../../outside/ name\n\xff";
    q.entries.push_back(l);
    Entry h{"d/h", Entry::hardlink, 0, 0, 0, 0, {}, 0};
    h.link = 1;
    q.entries.push_back(Entry{"d", Entry::directory, 0700, 0, 0, 0, {}, 0});
    q.entries.push_back(h);
    std::string wire = q.encode();
    OpenRequest d = OpenRequest::decode(wire);
    assert_int_equal(d.entries.size(), 5);
    assert_int_equal(d.entries[2].kind, Entry::symlink);
    assert_true(d.entries[2].target == l.target);
    assert_int_equal(d.entries[2].mtime, 6);
    assert_int_equal(d.entries[4].kind, Entry::hardlink);
    assert_int_equal(d.entries[4].link, 1);
    assert_true(d.encode() == wire);
    auto refused = [&](const char *why) {
        std::string e = test_helpers::error_of<net::DecodeError>([&] { OpenRequest::decode(q.encode()); });
        if (!contains(e, why))
            fprintf(stderr, "expected \"%s\", got \"%s\"\n", why, e.c_str());
        assert_true(contains(e, why));
    };
    // A hard link to itself, to a later entry, to a directory, to a link.
    for (uint32_t to : {4u, 5u, 0u, 3u, 2u}) {
        q.entries[4].link = to;
        refused("does not name an earlier file");
    }
    q.entries[4].link = 1;
    q.entries[2].target = "";
    refused("has a bad target");
    q.entries[2].target = std::string("a\0b", 3);
    refused("has a bad target");
    q.entries[2].target = "t";
    q.entries[2].size = 1; // a link carries no bytes
    refused("bad mode or size");
    q.entries[2].size = 0;
    q.entries[0].kind = Entry::symlink; // the destination itself a link
    q.entries[0].target = "t";
    refused("a broadcast of a link");
    q.entries[0].kind = Entry::directory;
    OpenRequest::decode(q.encode());
    std::string k = q.encode();
    // The first entry's kind: after version, cred, dest, flags, fanout,
    // timeout, count and the first path (empty).
    size_t at = 4 + 4 + 1 + 4 + 6 + 4 + 1 + 4 + 4 + 4;
    assert_int_equal(k[at], Entry::directory);
    k[at] = 9;
    assert_true(contains(test_helpers::error_of<net::DecodeError>([&] { OpenRequest::decode(k); }),
                         "of unknown kind 9"));
    // A request of the version before (it began with the credential).
    k = q.encode().substr(4);
    assert_true(contains(test_helpers::error_of<net::DecodeError>([&] { OpenRequest::decode(k); }),
                         "another version"));
}

// The bytes of `entries` (file i holds bytes of value i) packed as the
// client packs them, decoded again: every piece in order, nothing lost.
std::vector<std::string> packs_of(const std::vector<Entry> &entries, uint32_t chunk)
{
    std::vector<std::string> out;
    PackPlan plan(entries, chunk);
    for (auto pieces = plan.next(); !pieces.empty(); pieces = plan.next()) {
        std::string raw;
        for (const auto &p : pieces) {
            encode_record_header(raw, p.entry, p.offset, p.len);
            raw.append(p.len, static_cast<char>(p.entry));
        }
        assert_true(raw.size() <= chunk);
        out.push_back(raw);
    }
    return out;
}

Entry file_of(uint64_t size) { return Entry{"f", Entry::file, 0644, size, 0, 0, {}, 0}; }

void test_packs(void **)
{
    const uint32_t chunk = 1000, room = chunk - PackRecord::kHeader;
    std::vector<Entry> e;
    e.push_back(Entry{"", Entry::directory, 0755, 0, 0, 0, {}, 0});
    e.push_back(file_of(room)); // exactly one chunk
    e.push_back(file_of(0));    // empty: no record
    Entry link{"l", Entry::symlink, 0, 0, 0, 0, "t", 0};
    e.push_back(link);
    Entry hard{"h", Entry::hardlink, 0, 0, 0, 0, {}, 1};
    e.push_back(hard);
    e.push_back(file_of(10));       // 5: small
    e.push_back(file_of(2500));     // 6: large, between small ones
    e.push_back(file_of(1));        // 7
    e.push_back(file_of(room - 1)); // 8: does not fit after 7 whole
    std::vector<std::string> packs = packs_of(e, chunk);
    std::vector<uint64_t> received(e.size(), 0);
    std::vector<std::vector<uint32_t>> entries;
    for (const auto &p : packs) {
        entries.emplace_back();
        for (const auto &r : decode_pack(p)) {
            const Entry &f = e[r.entry];
            assert_string_equal(check_record(r, f.kind == Entry::file, f.size, received[r.entry]).c_str(),
                                "");
            assert_true(r.bytes == std::string(r.bytes.size(), static_cast<char>(r.entry)));
            received[r.entry] += r.bytes.size();
            entries.back().push_back(r.entry);
        }
    }
    for (size_t i = 0; i < e.size(); ++i)
        assert_int_equal(received[i], e[i].size);
    // 1 alone; 5 and the start of 6; 6 goes on; the end of 6, 7 and the
    // start of 8; the rest of 8.
    const std::vector<std::vector<uint32_t>> want{{1}, {5, 6}, {6}, {6, 7, 8}, {8}};
    assert_true(entries == want);
    assert_int_equal(packs[0].size(), chunk);
    assert_int_equal(packs[1].size(), chunk);
    // A tree without bytes: no chunk at all.
    std::vector<Entry> empty{e[0], file_of(0), link};
    assert_true(packs_of(empty, chunk).empty());
    assert_true(
        contains(test_helpers::error_of<std::invalid_argument>([&] { PackPlan(e, 16); }), "16 bytes"));

    // Decoding refuses what the client never sends.
    auto refused = [](const std::string &raw, const char *why) {
        std::string err = test_helpers::error_of<net::DecodeError>([&] { decode_pack(raw); });
        if (!contains(err, why))
            fprintf(stderr, "expected \"%s\", got \"%s\"\n", why, err.c_str());
        assert_true(contains(err, why));
    };
    std::string good;
    encode_record_header(good, 3, 0, 4);
    good += "abcd";
    assert_int_equal(decode_pack(good).size(), 1);
    refused(good.substr(0, good.size() - 1), "4 bytes, 3 left");     // bytes cut short
    refused(good + std::string(5, '\0'), "record header cut short"); // a header cut short
    std::string empty_record;
    encode_record_header(empty_record, 4, 0, 0);
    refused(good + empty_record, "of 0 bytes");
    std::string again;
    encode_record_header(again, 3, 4, 1);
    refused(good + again + "e", "names entry 3 after entry 3"); // one entry twice in a chunk
    std::string earlier;
    encode_record_header(earlier, 2, 0, 1);
    refused(good + earlier + "e", "names entry 2 after entry 3");
    // Checking against a node's files: not a file, past its size, bytes
    // already received (a duplicate) or a gap.
    PackRecord r = decode_pack(good).front();
    assert_true(contains(check_record(r, false, 0, 0), "entry 3, which is not a file"));
    assert_true(contains(check_record(r, true, 3, 0), "beyond its 3 bytes"));
    assert_true(contains(check_record(r, true, 8, 4), "out of order"));
    r.offset = 4;
    assert_true(contains(check_record(r, true, 8, 0), "out of order"));
    assert_string_equal(check_record(r, true, 8, 4).c_str(), "");
    // The chunk header marks a pack, whose entry and offset are 0.
    net::Writer w;
    ChunkHeader h;
    h.packed = true;
    h.codec = Codec::zstd;
    h.raw_len = 10;
    h.encode(w);
    net::Reader rd(w.data());
    ChunkHeader d = ChunkHeader::decode(rd);
    assert_true(d.packed && d.codec == Codec::zstd && d.raw_len == 10);
    h.offset = 1;
    net::Writer w2;
    h.encode(w2);
    net::Reader rd2(w2.data());
    assert_true(contains(test_helpers::error_of<net::DecodeError>([&] { ChunkHeader::decode(rd2); }),
                         "bad chunk header"));
}

} // namespace

int main()
{
    const CMUnitTest tests[] = {
        cmocka_unit_test(test_protocol_decoding),
        cmocka_unit_test(test_links_and_version),
        cmocka_unit_test(test_packs),
    };
    return cmocka_run_group_tests_name("bcast_protocol", tests, nullptr, nullptr);
}
