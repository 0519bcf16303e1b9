// Unit tests of the wire format (lib/net/wire.hpp, frame.*) and of node sets
// and the tree over them (lib/net/rangeset.*): every malformed input is
// rejected with an error, never read past its end.
#include "tests/unit/cmocka.hpp"

#include <random>
#include <set>
#include <stdexcept>
#include <string>

#include "lib/net/frame.hpp"
#include "lib/net/rangeset.hpp"
#include "lib/prim/checksum.hpp"
#include "tests/unit/helpers.hpp"

using namespace storm::net;

namespace {

using test_helpers::contains;
using test_helpers::error_of;

void test_reader_writer_roundtrip(void **)
{
    Writer w;
    w.u8(0xab);
    w.u16(0xbeef);
    w.u32(0xdeadbeef);
    w.u64(0x0123456789abcdefULL);
    w.bytes("hello");
    std::string b = w.take();
    assert_int_equal(b.size(), 1 + 2 + 4 + 8 + 4 + 5);
    assert_int_equal(static_cast<unsigned char>(b[1]), 0xbe); // network byte order
    Reader r(b);
    assert_int_equal(r.u8(), 0xab);
    assert_int_equal(r.u16(), 0xbeef);
    assert_int_equal(r.u32(), 0xdeadbeef);
    assert_true(r.u64() == 0x0123456789abcdefULL);
    assert_true(r.bytes(16) == "hello");
    r.finish();
}

void test_reader_rejects_overruns(void **)
{
    Writer w;
    w.bytes("0123456789");
    std::string b = w.take();
    // Every truncation of a valid message is an error, not a short read.
    for (size_t n = 0; n < b.size(); ++n) {
        std::string e = error_of<DecodeError>([&] {
            Reader r(b.data(), n);
            r.bytes(64);
        });
        assert_true(contains(e, "truncated"));
    }
    assert_true(contains(error_of<DecodeError>([&] { Reader(b).bytes(4); }), "exceeds its limit"));
    // A length field that claims more than the buffer holds.
    std::string lie = b;
    lie[0] = '\x7f';
    assert_true(contains(error_of<DecodeError>([&] { Reader(lie).bytes(UINT32_MAX); }), "truncated"));
    assert_true(contains(error_of<DecodeError>([&] {
                             Reader r(b);
                             r.u32();
                             r.finish();
                         }),
                         "10 unexpected trailing bytes"));
}

void test_frame_roundtrip(void **)
{
    std::string out;
    encode_frame(out, MsgType::xfer, 42, "payload");
    assert_int_equal(out.size(), kHeaderSize + 7);
    FrameHeader h = decode_header(out.data());
    assert_int_equal(static_cast<int>(h.type), static_cast<int>(MsgType::xfer));
    assert_int_equal(h.length, 7);
    assert_int_equal(h.op, 42);
    assert_true(out.substr(kHeaderSize) == "payload");
}

void test_frame_rejects_bad_headers(void **)
{
    std::string good;
    encode_frame(good, MsgType::caw, 7, "");
    auto bad = [&](size_t off, char v) {
        std::string b = good;
        b[off] = v;
        return error_of<FrameError>([&] { decode_header(b.data()); });
    };
    assert_true(contains(bad(0, 'X'), "bad magic"));
    assert_true(contains(bad(4, 2), "protocol version 2 (this agent speaks 3)")); // the old one too
    assert_true(contains(bad(5, 0), "unknown message type 0"));
    assert_true(contains(bad(5, 99), "unknown message type 99"));
    assert_true(contains(bad(7, 1), "reserved flags"));
    // A control frame may not claim a data-sized payload.
    assert_true(contains(bad(9, 2), "caw frame of 131072 bytes exceeds the limit"));
    // Random headers: never accepted unless magic/version/type/flags/length are all valid.
    std::mt19937 rng(1);
    for (int i = 0; i < 100000; ++i) {
        char b[kHeaderSize];
        for (char &c : b)
            c = static_cast<char>(rng());
        try {
            FrameHeader h = decode_header(b);
            assert_true(h.length <= max_payload(h.type));
        } catch (const FrameError &) {
        }
    }
    std::string big(kMaxControlPayload + 1, 'x');
    std::string out;
    assert_true(contains(error_of<FrameError>([&] { encode_frame(out, MsgType::heartbeat, 1, big); }),
                         "exceeds the limit"));
    encode_frame(out, MsgType::xfer, 1, big); // data frames may be larger
}

// The service frames: a reserved range whose types net carries without
// knowing whose they are, data-class payloads below, control-class above.
void test_service_frames(void **)
{
    assert_int_equal(static_cast<int>(service_data(0)), 32);
    assert_int_equal(static_cast<int>(service_data(15)), 47);
    assert_int_equal(static_cast<int>(service_control(0)), 48);
    assert_int_equal(static_cast<int>(service_control(15)), 63);
    assert_true(contains(error_of<std::out_of_range>([] { (void)service_data(16); }), "0 to 15"));
    assert_true(contains(error_of<std::out_of_range>([] { (void)service_control(16); }), "0 to 15"));
    assert_true(is_service_frame(service_data(0)) && is_service_frame(service_control(15)));
    assert_false(is_service_frame(MsgType::xfer) || is_service_frame(static_cast<MsgType>(31)) ||
                 is_service_frame(static_cast<MsgType>(64)));
    assert_string_equal(msg_type_name(service_data(0)), "service#32");
    assert_string_equal(msg_type_name(service_control(15)), "service#63");
    // Every type of the range is decoded; none around it.
    auto header = [](uint8_t type, uint32_t length) {
        std::string f;
        encode_frame(f, MsgType::caw, 9, "");
        f[5] = static_cast<char>(type);
        f[8] = static_cast<char>(length >> 24);
        f[9] = static_cast<char>(length >> 16);
        f[10] = static_cast<char>(length >> 8);
        f[11] = static_cast<char>(length);
        return f;
    };
    for (unsigned t = 32; t <= 63; ++t) {
        FrameHeader h = decode_header(header(static_cast<uint8_t>(t), 0).data());
        assert_int_equal(static_cast<int>(h.type), t);
        assert_int_equal(h.op, 9);
    }
    for (unsigned t : {9u, 11u, 14u, 31u, 64u, 255u})
        assert_true(
            contains(error_of<FrameError>([&] { decode_header(header(static_cast<uint8_t>(t), 0).data()); }),
                     "unknown message type " + std::to_string(t)));
    // The limits: data's for 32-47, control's for 48-63, both ways.
    for (unsigned n = 0; n < kServiceTypes; ++n) {
        assert_int_equal(max_payload(service_data(n)), kMaxDataPayload);
        assert_int_equal(max_payload(service_control(n)), kMaxControlPayload);
    }
    decode_header(header(47, kMaxDataPayload).data());
    decode_header(header(48, kMaxControlPayload).data());
    assert_true(contains(error_of<FrameError>([&] { decode_header(header(47, kMaxDataPayload + 1).data()); }),
                         "service#47 frame of 16777217 bytes exceeds the limit of 16777216"));
    assert_true(
        contains(error_of<FrameError>([&] { decode_header(header(48, kMaxControlPayload + 1).data()); }),
                 "service#48 frame of 65537 bytes exceeds the limit of 65536"));
    std::string big(kMaxControlPayload + 1, 'x'), out;
    encode_frame(out, service_data(3), 1, big);
    assert_true(contains(error_of<FrameError>([&] { encode_frame(out, service_control(3), 1, big); }),
                         "service#51 payload of 65537 bytes exceeds the limit of 65536"));
}

void test_rangeset_basics(void **)
{
    RangeSet s = RangeSet::parse("0-63,70,72-80");
    // From members in any order, with repeats: the same normalised set.
    assert_true(RangeSet::of({80, 70, 5, 72, 0, 63, 1, 2, 3, 4, 70}) == RangeSet::parse("0-5,63,70,72,80"));
    assert_true(RangeSet::of({}).empty());
    assert_int_equal(s.size(), 64 + 1 + 9);
    assert_string_equal(s.str().c_str(), "0-63,70,72-80");
    assert_true(s.contains(0) && s.contains(63) && s.contains(70) && s.contains(80));
    assert_false(s.contains(64) || s.contains(71) || s.contains(81));
    assert_int_equal(s.nth(64), 70);
    assert_int_equal(s.nth(65), 72);
    assert_string_equal(s.slice(60, 67).str().c_str(), "60-63,70,72-73");
    assert_string_equal(RangeSet::parse("3,4,5").str().c_str(), "3-5"); // adjacent ranges merge
    for (const char *bad : {"", "a", "5-3", "4,2", "1,,2", "1,", "-3", "1-", "3,3", "99999999"}) {
        bool threw = false;
        try {
            RangeSet::parse(bad);
        } catch (const std::invalid_argument &) {
            threw = true;
        }
        assert_true(threw || std::string(bad).empty());
    }
    assert_true(RangeSet::parse("").empty());
}

void test_rangeset_wire(void **)
{
    RangeSet s = RangeSet::parse("0-255,1000-1999");
    Writer w;
    s.encode(w);
    assert_int_equal(w.data().size(), 4 + 2 * 8); // compact: independent of the node count
    Reader r(w.data());
    assert_true(RangeSet::decode(r) == s);
    r.finish();
    auto decode_ranges = [](std::initializer_list<uint32_t> words) {
        Writer x;
        x.u32(static_cast<uint32_t>(words.size() / 2));
        for (uint32_t v : words)
            x.u32(v);
        Reader rr(x.data());
        return error_of<DecodeError>([&] { RangeSet::decode(rr); });
    };
    assert_true(contains(decode_ranges({5, 5}), "empty"));              // empty range
    assert_true(contains(decode_ranges({5, 9, 2, 4}), "out of order")); // decreasing
    assert_true(contains(decode_ranges({0, 4, 4, 8}), "adjacent"));     // not normalised
    assert_true(contains(decode_ranges({0, RangeSet::kMaxIndex + 1}), "out of bounds"));
    Writer huge;
    huge.u32(RangeSet::kMaxRanges + 1);
    Reader hr(huge.data());
    assert_true(contains(error_of<DecodeError>([&] { RangeSet::decode(hr); }), "exceeds"));
}

// Walks the tree from the root of `set`: every member is reached exactly
// once, no node has more than `fanout` children, and the depth is bounded.
void check_tree(const RangeSet &set, unsigned fanout)
{
    std::multiset<uint32_t> reached;
    unsigned max_depth = 0;
    std::vector<std::pair<RangeSet, unsigned>> stack{{set, 0}};
    while (!stack.empty()) {
        auto [sub, depth] = stack.back();
        stack.pop_back();
        reached.insert(sub.nth(0));
        max_depth = std::max(max_depth, depth);
        auto kids = split_children(sub, fanout);
        assert_true(kids.size() <= fanout);
        uint32_t total = 1;
        for (auto &k : kids) {
            assert_false(k.empty());
            total += k.size();
            stack.push_back({k, depth + 1});
        }
        assert_int_equal(total, sub.size());
    }
    auto m = set.members();
    assert_int_equal(reached.size(), m.size());
    for (uint32_t v : m)
        assert_int_equal(reached.count(v), 1);
    unsigned bound = 1; // ceil(log_F(N)) + 1 levels at most
    for (uint64_t cap = 1; cap < set.size(); cap = cap * fanout + 1)
        ++bound;
    assert_true(max_depth <= bound);
}

void test_tree_split(void **)
{
    assert_true(split_children(RangeSet::range(5, 6), 8).empty());
    auto kids = split_children(RangeSet::range(0, 17), 4); // 16 below the root
    assert_int_equal(kids.size(), 4);
    assert_string_equal(kids[0].str().c_str(), "1-4");
    assert_string_equal(kids[3].str().c_str(), "13-16");
    for (unsigned f : {1u, 2u, 3u, 8u, 16u, 64u})
        for (uint32_t n : {1u, 2u, 7u, 64u, 256u, 1000u})
            check_tree(RangeSet::range(0, n), f);
    check_tree(RangeSet::parse("3,7-9,20-90,200,300-301"), 4);
}

} // namespace

// CRC-32C: the check value, and the three-stream hardware path (from 12 KiB
// on) against a bit-by-bit reference, for lengths and offsets around its
// block boundaries.
void test_crc32c(void **)
{
    assert_int_equal(storm::prim::crc32c("123456789"), 0xe3069283u);
    assert_int_equal(storm::prim::crc32c(""), 0u);
    auto reference = [](const std::string &s, size_t off, size_t n) {
        uint32_t c = ~0u;
        for (size_t i = 0; i < n; ++i) {
            c ^= static_cast<unsigned char>(s[off + i]);
            for (int k = 0; k < 8; ++k)
                c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
        }
        return ~c;
    };
    std::mt19937 rng(7);
    std::string data(5 * 12288 + 200, '\0');
    for (auto &ch : data)
        ch = static_cast<char>(rng());
    for (size_t n : {1ul, 7ul, 8ul, 4095ul, 12287ul, 12288ul, 12289ul, 12295ul, 24576ul, 3 * 12288ul + 17ul,
                     5 * 12288ul + 99ul})
        for (size_t off : {0ul, 1ul, 3ul})
            assert_int_equal(storm::prim::crc32c(std::string_view(data).substr(off, n)),
                             reference(data, off, n));
}

int main()
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reader_writer_roundtrip),
        cmocka_unit_test(test_reader_rejects_overruns),
        cmocka_unit_test(test_frame_roundtrip),
        cmocka_unit_test(test_frame_rejects_bad_headers),
        cmocka_unit_test(test_service_frames),
        cmocka_unit_test(test_rangeset_basics),
        cmocka_unit_test(test_rangeset_wire),
        cmocka_unit_test(test_tree_split),
        cmocka_unit_test(test_crc32c),
    };
    return cmocka_run_group_tests_name("wire", tests, nullptr, nullptr);
}
