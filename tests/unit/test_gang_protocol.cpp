// Unit tests of the gang wire format (sched_gang/protocol.cpp): tables and
// strobes round trip, and what decoding refuses (truncated, trailing
// bytes, bad magic, a slot out of range, no fail-safe, another version).

#include <string>

#include "lib/net/rangeset.hpp"
#include "lib/net/wire.hpp"
#include "sched_gang/protocol.hpp"
#include "tests/unit/cmocka.hpp"
#include "tests/unit/helpers.hpp"

using namespace storm;
using namespace storm::gang;
using net::RangeSet;
using test_helpers::contains;
using test_helpers::error_of;

namespace {

void test_protocol(void **)
{
    Table t;
    t.epoch = 77;
    t.slots = 2;
    t.quantum_us = 2000;
    t.failsafe_ms = 500;
    t.jobs = {{10, 1, RangeSet::range(0, 4)}, {11, 3, RangeSet::parse("2,5-7")}};
    t.hands_off = {12};
    Table u = Table::decode(t.encode());
    assert_true(u.epoch == 77 && u.slots == 2 && u.quantum_us == 2000 && u.failsafe_ms == 500);
    assert_true(u.jobs == t.jobs);
    assert_true(u.hands_off == t.hands_off);
    Strobe s{77, 1, 9, 123456789};
    Strobe r = Strobe::decode(s.encode());
    assert_true(r.epoch == 77 && r.slot == 1 && r.seq == 9 && r.sent_ns == 123456789);

    std::string e = t.encode();
    assert_false(error_of<net::DecodeError>([&] { Table::decode(e.substr(0, e.size() - 3)); }).empty());
    assert_true(contains(error_of<net::DecodeError>([&] { Table::decode(e + "x"); }), "trailing"));
    assert_true(contains(error_of<net::DecodeError>([&] { Table::decode("junk-junk-junk"); }), "magic"));
    assert_true(contains(error_of<net::DecodeError>([&] { Strobe::decode(e); }), "magic"));
    Strobe bad{1, 64, 1, 1};
    assert_true(contains(error_of<net::DecodeError>([&] { Strobe::decode(bad.encode()); }), "slot 64"));
    Table zero = t;
    zero.failsafe_ms = 0;
    assert_true(contains(error_of<net::DecodeError>([&] { Table::decode(zero.encode()); }), "fail-safe"));
    std::string v = s.encode();
    v[4] = 9; // version
    assert_true(contains(error_of<net::DecodeError>([&] { Strobe::decode(v); }), "version 9"));
}

} // namespace

int main()
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_protocol),
    };
    return cmocka_run_group_tests_name("gang_protocol", tests, nullptr, nullptr);
}
