// Unit tests of the broadcast's wire format (launch_bcast/protocol.cpp):
// the CRC-32C, and what decoding an open request refuses (paths leaving
// the destination, a relative destination).

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
    q.entries.push_back(Entry{"", true, 0755, 0, 0, 0});
    q.entries.push_back(Entry{"a/b", false, 0644, 3, 0, 0});
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

} // namespace

int main()
{
    const CMUnitTest tests[] = {
        cmocka_unit_test(test_protocol_decoding),
    };
    return cmocka_run_group_tests_name("bcast_protocol", tests, nullptr, nullptr);
}
