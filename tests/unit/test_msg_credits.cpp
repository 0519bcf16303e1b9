// Unit tests of libstormmsg's credit accounting (switch_rdma/msg/credits.hpp):
// FM's flow control between a sender and a receiver simulated in memory.
#include "tests/unit/cmocka.hpp"

#include <deque>
#include <random>

#include "switch_rdma/msg/credits.hpp"
#include "tests/unit/helpers.hpp"

using namespace storm::rdma::msg;
using test_helpers::contains;
using test_helpers::error_of;

namespace {

void test_initial(void **)
{
    Credits c(4, 8);
    assert_int_equal(c.initial(), 8);
    assert_int_equal(c.threshold(), 4);
    for (uint32_t p = 1; p < 4; ++p) {
        assert_int_equal(c.available(p), 8);
        assert_int_equal(c.receivable(p), 8);
    }
    assert_true(c.at_initial(0));
    assert_true(contains(error_of<std::invalid_argument>([] { Credits(4, 0); }), "too small"));
    assert_int_equal(Credits(2, 1).threshold(), 1); // at least one
}

void test_spend_and_refill(void **)
{
    Credits c(2, 4);
    for (int i = 0; i < 4; ++i) {
        assert_true(c.can_send(1));
        c.spend(1);
    }
    assert_false(c.can_send(1));
    assert_int_equal(c.short_total(0), 4);
    assert_true(contains(error_of<std::logic_error>([&] { c.spend(1); }), "no credit left"));
    c.refilled(1, 3);
    assert_int_equal(c.available(1), 3);
    // More than was spent: the peer's accounting is broken.
    assert_true(contains(error_of<CreditError>([&] { c.refilled(1, 2); }), "returned 2 credits"));
    c.refilled(1, 1);
    assert_true(c.at_initial(0));
}

void test_refill_at_half(void **)
{
    Credits rx(2, 8);
    for (int i = 0; i < 8; ++i)
        rx.arrived(1);
    rx.consumed(1, 3);
    assert_false(rx.refill_due(1));
    assert_true(rx.refill_due(1, true)); // at finalize every count goes back
    rx.consumed(1, 1);
    assert_true(rx.refill_due(1)); // half of 8
    assert_int_equal(rx.take_refill(1), 4);
    assert_int_equal(rx.unreported(1), 0);
    assert_int_equal(rx.receivable(1), 4);
    assert_int_equal(rx.take_refill(1), 0);
    // Consuming what never arrived is an error.
    assert_true(contains(error_of<CreditError>([&] { rx.consumed(1, 5); }), "only 4 arrived"));
}

void test_packet_without_credit_rejected(void **)
{
    Credits rx(3, 2);
    rx.arrived(2);
    rx.arrived(2);
    std::string e = error_of<CreditError>([&] { rx.arrived(2); });
    assert_true(contains(e, "rank 2 sent a packet without credit"));
    // Another sender's credits are its own.
    rx.arrived(1);
    // Once consumed and reported, the sender may send again.
    rx.consumed(2, 1);
    assert_int_equal(rx.take_refill(2), 1);
    rx.arrived(2);
}

// A sender and a receiver exchanging many packets with random consumption
// and refill timing (refills delayed in flight, some piggybacked): no
// credit leaks, the receiver never holds more than `initial` of the
// sender's packets, and both end at their initial values.
void test_no_leak_over_many(void **)
{
    std::mt19937 rng(7);
    const uint32_t initial = 6;
    Credits tx(2, initial), rx(2, initial);
    std::deque<uint32_t> refills_in_flight;
    uint32_t queued = 0; // sender's packets in the receiver's queue
    uint64_t sent = 0;
    while (sent < 100000 || queued || !refills_in_flight.empty() || rx.unreported(0)) {
        switch (rng() % 4) {
        case 0:
        case 1:
            if (sent < 100000 && tx.can_send(1)) {
                tx.spend(1);
                rx.arrived(0);
                ++queued;
                ++sent;
            }
            break;
        case 2:
            if (queued) {
                uint32_t n = 1 + rng() % queued;
                rx.consumed(0, n);
                queued -= n;
            }
            if (rx.refill_due(0, sent == 100000))
                refills_in_flight.push_back(rx.take_refill(0));
            break;
        case 3:
            if (!refills_in_flight.empty()) {
                tx.refilled(1, refills_in_flight.front());
                refills_in_flight.pop_front();
            }
            break;
        }
        assert_true(queued <= initial);
    }
    assert_int_equal(tx.available(1), initial);
    assert_int_equal(rx.receivable(0), initial);
}

} // namespace

int main()
{
    const CMUnitTest tests[] = {
        cmocka_unit_test(test_initial),           cmocka_unit_test(test_spend_and_refill),
        cmocka_unit_test(test_refill_at_half),    cmocka_unit_test(test_packet_without_credit_rejected),
        cmocka_unit_test(test_no_leak_over_many),
    };
    return cmocka_run_group_tests_name("msg_credits", tests, nullptr, nullptr);
}
