// Unit tests of a chunk's compression (launch_bcast/codec.cpp): both
// codecs give back the bytes; what would not shrink is sent as it is; a
// hostile chunk (garbage, truncated, inflating to more or less than its
// header says) is refused with a reason and never writes past raw_len;
// the names -C takes; and the chunk header's flags byte carries the codec
// and refuses two at once.

#include <cstdint>
#include <stdexcept>
#include <string>

#include "launch_bcast/codec.hpp"
#include "launch_bcast/protocol.hpp"
#include "lib/net/wire.hpp"
#include "tests/unit/cmocka.hpp"
#include "tests/unit/helpers.hpp"

using namespace storm;
using namespace storm::bcast;
using test_helpers::contains;

namespace {

std::string text(size_t n)
{
    std::string s;
    while (s.size() < n)
        s += "def f(x):\n    return x * " + std::to_string(s.size() % 97) + "\n";
    s.resize(n);
    return s;
}

std::string noise(size_t n)
{
    std::string s(n, '\0');
    uint64_t x = 88172645463325252ull;
    for (auto &c : s) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        c = static_cast<char>(x);
    }
    return s;
}

void test_round_trip(void **)
{
    for (Codec c : {Codec::lz4, Codec::zstd, Codec::zlib}) {
        std::string raw = text(300000), packed, out;
        assert_true(compress(c, raw, packed));
        assert_true(packed.size() * (c == Codec::lz4 ? 2 : 3) < raw.size());
        assert_string_equal(decompress(c, packed, static_cast<uint32_t>(raw.size()), out).c_str(), "");
        assert_true(out == raw);
        // What does not shrink is not compressed.
        assert_false(compress(c, noise(65536), packed));
    }
    std::string packed;
    assert_false(compress(Codec::none, text(1000), packed));
}

void test_hostile_chunks(void **)
{
    for (Codec c : {Codec::lz4, Codec::zstd, Codec::zlib}) {
        std::string raw = text(100000), packed, out;
        assert_true(compress(c, raw, packed));
        // Inflating to more than raw_len: refused, and out stays raw_len.
        assert_true(contains(decompress(c, packed, 1000, out), "does not decompress"));
        assert_int_equal(out.size(), 1000);
        // To fewer bytes than it says.
        assert_true(contains(decompress(c, packed, 100001, out), "does not decompress"));
        // Truncated, and garbage.
        assert_true(contains(decompress(c, packed.substr(0, packed.size() / 2), 100000, out), "does not decompress"));
        assert_true(contains(decompress(c, noise(5000), 100000, out), "does not decompress"));
        assert_true(contains(decompress(c, "", 10, out), "does not decompress"));
    }
    // A block of one codec said to be of another.
    std::string raw = text(10000), z, l, out;
    assert_true(compress(Codec::zstd, raw, z));
    assert_true(compress(Codec::lz4, raw, l));
    assert_true(contains(decompress(Codec::zlib, z, 10000, out), "does not decompress"));
    assert_true(contains(decompress(Codec::lz4, z, 10000, out), "does not decompress"));
    assert_true(contains(decompress(Codec::zstd, l, 10000, out), "does not decompress (zstd)"));
}

void test_names_and_header(void **)
{
    assert_true(codec_named("zstd") == Codec::zstd);
    assert_true(codec_named("LZ4") == Codec::lz4); // as sbcast spells it too
    assert_true(kDefaultCodec == Codec::lz4);
    assert_true(codec_named("zlib") == Codec::zlib);
    assert_true(codec_named("none") == Codec::none);
    assert_true(contains(test_helpers::error_of<std::invalid_argument>([] { codec_named("bzip2"); }),
                         "unknown compression \"bzip2\" (lz4, zstd, zlib or none)"));
    assert_string_equal(codec_name(Codec::zstd), "zstd");
    assert_string_equal(codec_name(Codec::lz4), "lz4");
    for (Codec c : {Codec::none, Codec::zlib, Codec::zstd, Codec::lz4}) {
        ChunkHeader h;
        h.codec = c;
        h.raw_len = 5;
        net::Writer w;
        h.encode(w);
        net::Reader r(w.data());
        assert_true(ChunkHeader::decode(r).codec == c);
    }
    // Two codecs' bits together (0 zlib, 2 zstd, 3 lz4), and a bit beyond:
    // refused.
    for (uint8_t flags : {uint8_t{5}, uint8_t{9}, uint8_t{12}, uint8_t{13}, uint8_t{16}}) {
        net::Writer w;
        w.u32(0);
        w.u64(0);
        w.u32(5);
        w.u32(0);
        w.u8(flags);
        net::Reader r(w.data());
        assert_true(contains(test_helpers::error_of<net::DecodeError>([&] { ChunkHeader::decode(r); }),
                             "bad chunk header"));
    }
}

} // namespace

int main()
{
    const CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_hostile_chunks),
        cmocka_unit_test(test_names_and_header),
    };
    return cmocka_run_group_tests_name("bcast_codec", tests, nullptr, nullptr);
}
