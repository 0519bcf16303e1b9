// Unit tests of the broadcast's wire format (launch_bcast/protocol.cpp):
// the CRC-32C, and what decoding an open request refuses (paths leaving
// the destination, a relative destination); symbolic and hard links
// round-trip, and what a node relies on of them is checked (a target,
// a hard link to an earlier file); a request of another version is refused.

#include <cstdio>
#include <string>

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

} // namespace

int main()
{
    const CMUnitTest tests[] = {
        cmocka_unit_test(test_protocol_decoding),
        cmocka_unit_test(test_links_and_version),
    };
    return cmocka_run_group_tests_name("bcast_protocol", tests, nullptr, nullptr);
}
