// Unit tests of the client's window (launch_bcast/send_window.cpp): it
// starts where told, grows by one chunk per quick answer up to its most,
// halves once for a slow answer and not again for the chunks sent before
// that cut, and stays within [2, its most].

#include <chrono>

#include "launch_bcast/send_window.hpp"
#include "tests/unit/cmocka.hpp"

using storm::bcast::SendWindow;
using namespace std::chrono_literals;

namespace {

const SendWindow::clock::time_point t0{std::chrono::seconds(1000)};

void test_grows_on_quick_answers(void **)
{
    SendWindow w(10, 4, 10000ms); // grows below 1.25 s, cuts above 2.5 s
    assert_int_equal(w.size(), 4);
    w.answered(t0, t0 + 1s);
    assert_int_equal(w.size(), 5);
    for (int i = 0; i < 20; ++i)
        w.answered(t0, t0 + 10ms);
    assert_int_equal(w.size(), 10); // its most
    w.answered(t0, t0 + 2s);        // neither quick nor slow
    assert_int_equal(w.size(), 10);
}

void test_halves_once_per_cut(void **)
{
    SendWindow w(64, 64, 10000ms);
    // Chunks sent at t0 answered late: one cut, not one per chunk.
    w.answered(t0, t0 + 3s);
    assert_int_equal(w.size(), 32);
    w.answered(t0, t0 + 3100ms);
    w.answered(t0 + 1s, t0 + 3200ms);
    assert_int_equal(w.size(), 32);
    // A chunk sent after the cut and still late cuts again.
    w.answered(t0 + 4s, t0 + 7s);
    assert_int_equal(w.size(), 16);
    for (int i = 0; i < 10; ++i)
        w.answered(t0 + 8s + std::chrono::seconds(i * 4), t0 + 11s + std::chrono::seconds(i * 4) + 100ms);
    assert_int_equal(w.size(), 2); // never below 2
}

void test_bounds(void **)
{
    assert_int_equal(SendWindow(0, 0, 10000ms).size(), 2);
    assert_int_equal(SendWindow(8, 100, 10000ms).size(), 8);
    SendWindow w(2, 2, 10000ms);
    w.answered(t0, t0 + 10ms);
    assert_int_equal(w.size(), 2);
    w.answered(t0, t0 + 60s);
    assert_int_equal(w.size(), 2);
}

} // namespace

int main()
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grows_on_quick_answers),
        cmocka_unit_test(test_halves_once_per_cut),
        cmocka_unit_test(test_bounds),
    };
    return cmocka_run_group_tests(tests, nullptr, nullptr);
}
