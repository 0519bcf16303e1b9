// Unit tests of the coscheduling decisions (cosched/scheduler.cpp) on a
// fake clock: the GMET honoured (a request during it dropped, a tick
// during it decided at its end), nodes agreeing with no message between
// them and healing after they differed, false requests never preempting,
// least-CPU fairness, no starvation under requests, jobs leaving.

#include <chrono>
#include <optional>

#include "cosched/scheduler.hpp"
#include "tests/unit/cmocka.hpp"
#include "tests/unit/cosched_fixture.hpp"

using namespace cosched_fixture;
using namespace std::chrono_literals;

namespace {

bool none(const std::optional<Scheduler::Switch> &s) { return !s.has_value(); }

void test_gmet_and_early_requests(void **)
{
    FakeClock c; // at a multiple of every period
    Scheduler s(10s, 2s, c.now());
    auto t0 = c.t;
    s.add(1);
    s.add(2);
    // Nothing is picked at registration: at the next multiple of 100 ms.
    assert_int_equal(s.scheduled(), 0);
    assert_true(s.next_deadline() == t0 + 100ms);
    assert_true(none(s.on_timer()));
    c.t += 100ms;
    auto sw = s.on_timer();
    assert_true(sw && sw->from == 0 && sw->to == 1); // equal CPU: the lowest id
    c.t += 1s;
    // During job 1's GMET: dropped, as in the paper (its arrivals were
    // sent before the switch); nothing is decided when the GMET ends.
    assert_true(none(s.on_request(2, Sender::scheduled)));
    assert_int_equal(s.stats().early, 1);
    assert_true(s.next_deadline() == t0 + 10s); // the next tick, not the GMET's end
    // After the GMET a request switches at once.
    c.t += 1500ms;
    sw = s.on_request(2, Sender::scheduled);
    assert_true(sw && sw->from == 1 && sw->to == 2);
    assert_int_equal(s.cpu_time(1).count(), 2500000);
    // Job 2's GMET protects it in turn.
    c.t += 1s;
    assert_true(none(s.on_request(1, Sender::scheduled)));
    assert_int_equal(s.stats().early, 2);
    // The tick at 10 s: job 1 has had 2.5 s, job 2 7.4 s, both less than a
    // slice: a tie, broken by the tick's number since the epoch (361, odd:
    // the second of jobs 1 and 2), the same on every node: 2 is kept.
    c.t = s.next_deadline();
    assert_true(c.t == t0 + 10s);
    assert_true(none(s.on_timer()));
    assert_int_equal(s.scheduled(), 2);
    assert_int_equal(s.stats().request_switches, 1);
    assert_int_equal(s.stats().timer_switches, 1); // the start pick
    // A request at 19.5 s: the tick at 20 s falls in job 1's GMET and is
    // decided at its end, at 21.5 s: job 2 has had 16.9 s (one whole slice),
    // job 1 4.5 s: 1 is kept.
    c.t = t0 + 19500ms;
    sw = s.on_request(1, Sender::scheduled);
    assert_true(sw && sw->to == 1);
    c.t = t0 + 20s;
    assert_true(none(s.on_timer()));
    assert_true(s.next_deadline() == t0 + 21500ms);
    c.t = s.next_deadline();
    assert_true(none(s.on_timer()));
    assert_int_equal(s.scheduled(), 1);
    assert_int_equal(s.cpu_time(2).count(), 16900000);
    assert_true(s.next_deadline() == t0 + 30s);
    // At 30 s: job 1 has had 13 s, one slice as job 2: the tick's number
    // (363, odd) gives job 2.
    c.t = s.next_deadline();
    sw = s.on_timer();
    assert_true(sw && sw->from == 1 && sw->to == 2);
}

// Two nodes whose counts differ (mirrored: each ran the other job longer)
// come back to the same decisions once the counts are equal in whole
// slices.
void test_nodes_heal(void **)
{
    FakeClock c;
    auto t0 = c.t;
    Scheduler a(1s, 0us, c.now()), b(1s, 0us, c.now());
    for (Scheduler *x : {&a, &b}) {
        x->add(1);
        x->add(2);
    }
    c.t = t0 + 100ms;
    a.on_timer();
    b.on_timer();
    assert_int_equal(a.scheduled(), b.scheduled());
    // A request (libstormmsg, scheduled sender) moves b alone; at the
    // tick at 1 s, a has given job 1 0.9 s and b job 2 0.85 s: each picks
    // the other job, and their counts are mirrored.
    c.t = t0 + 150ms;
    b.on_request(a.scheduled() == 1 ? 2 : 1, Sender::scheduled);
    assert_int_not_equal(a.scheduled(), b.scheduled());
    int agree = 0;
    for (int i = 0; i < 10; ++i) {
        c.t = a.next_deadline();
        a.on_timer();
        b.on_timer();
        agree += a.scheduled() == b.scheduled();
        if (i >= 2) // from 3 s on: equal in whole slices, the same tie-break
            assert_int_equal(a.scheduled(), b.scheduled());
    }
    assert_true(agree >= 8);
}

// Two nodes holding the same jobs, registered in different orders at
// different moments, with their wall clocks in step: they pick the same
// job at every instant, with no message between them.
void test_nodes_agree(void **)
{
    FakeClock c;
    auto t0 = c.t;
    Scheduler a(500ms, 100ms, c.now()), b(500ms, 100ms, c.now());
    c.t += 7ms;
    a.add(12);
    c.t += 3ms;
    b.add(11);
    a.add(11);
    c.t += 20ms;
    b.add(13);
    b.add(12);
    a.add(13);
    std::map<uint32_t, int> picked;
    for (int i = 0; i < 200; ++i) {
        // The timers fire late by different amounts on the two nodes.
        if (i < 100) // (a job leaving at different moments may shift one pick)
            assert_true(a.next_deadline() == b.next_deadline());
        c.t = std::max(a.next_deadline(), b.next_deadline()) + std::chrono::microseconds(137 * (i % 7));
        a.on_timer();
        c.t += std::chrono::microseconds(290);
        b.on_timer();
        assert_int_equal(a.scheduled(), b.scheduled());
        picked[a.scheduled()]++;
        if (i == 100) { // a job leaves, a bit later on b
            a.remove(12);
            c.t += 5ms;
            b.remove(12);
        }
        // Ranks of unscheduled jobs report arrivals (PMPI: status unknown).
        for (uint32_t j : {11u, 12u, 13u})
            if (a.registered(j) && j != a.scheduled())
                a.on_request(j, Sender::unknown);
    }
    assert_true(c.t > t0 + 90s);
    assert_int_equal(a.stats().request_switches, 0);
    assert_true(a.stats().tick_held > 100);
    assert_in_range(picked[11], 70, 120);
    assert_in_range(picked[13], 70, 120);
    assert_true(a.cpu_time(11) - a.cpu_time(13) < 1s && a.cpu_time(13) - a.cpu_time(11) < 1s);
}

void test_false_requests_never_preempt(void **)
{
    FakeClock c;
    Scheduler s(10s, 1s, c.now());
    s.add(1);
    s.add(2);
    c.t = s.next_deadline();
    s.on_timer();
    assert_int_equal(s.scheduled(), 1);
    c.t += 3s;
    assert_true(none(s.on_request(2, Sender::not_scheduled)));
    assert_true(none(s.on_request(2, Sender::not_scheduled)));
    assert_int_equal(s.stats().false_requests, 2);
    assert_int_equal(s.scheduled(), 1);
    assert_true(none(s.on_request(1, Sender::scheduled))); // already scheduled
    assert_true(none(s.on_request(9, Sender::scheduled))); // not registered
    assert_int_equal(s.stats().ignored, 2);
    // The PMPI hooks' requests (status unknown) do not move a job picked
    // at an aligned instant; a scheduled sender's do.
    assert_true(none(s.on_request(2, Sender::unknown)));
    assert_int_equal(s.stats().tick_held, 1);
    auto sw = s.on_request(2, Sender::scheduled);
    assert_true(sw && sw->to == 2);
    // Job 2 came by a request: an unknown sender's request may move it.
    c.t += 2s;
    sw = s.on_request(1, Sender::unknown);
    assert_true(sw && sw->to == 1);
}

void test_least_cpu_fairness(void **)
{
    FakeClock c;
    Scheduler s(1s, 200ms, c.now());
    for (uint32_t j = 1; j <= 3; ++j)
        s.add(j);
    std::map<uint32_t, int> picked;
    for (int i = 0; i < 300; ++i) {
        c.t = s.next_deadline();
        if (auto sw = s.on_timer())
            picked[sw->to]++;
    }
    for (uint32_t j = 1; j <= 3; ++j) {
        assert_in_range(picked[j], 99, 101);
        auto cpu = s.cpu_time(j);
        assert_in_range(cpu.count(), 99000000, 101000000);
    }
    // A job that arrives late starts with the least CPU time of the others,
    // not 0: it does not take the node for 100 slices.
    s.add(4);
    int runs4 = 0;
    for (int i = 0; i < 8; ++i) {
        c.t = s.next_deadline();
        s.on_timer();
        runs4 += s.scheduled() == 4;
    }
    assert_in_range(runs4, 1, 3);
}

void test_no_starvation_under_requests(void **)
{
    // Jobs 1 and 2 send each other requests all the time; job 3 never
    // does.  The timer still gives job 3 the node at every tick it is the
    // least served, for at least a GMET.
    FakeClock c;
    Scheduler s(10s, 2s, c.now());
    s.add(1);
    s.add(2);
    s.add(3);
    for (int ms = 0; ms < 1000 * 1000; ms += 100) {
        c.t += 100ms;
        s.on_timer();
        if (ms % 500 == 0)
            s.on_request(s.scheduled() == 1 ? 2 : 1, Sender::scheduled);
    }
    auto total = s.cpu_time(1) + s.cpu_time(2) + s.cpu_time(3);
    assert_true(s.cpu_time(3) * 100 >= total * 15);
    assert_true(s.stats().timer_switches >= 90);
}

void test_remove(void **)
{
    FakeClock c;
    Scheduler s(10s, 5s, c.now());
    s.add(1);
    c.t = s.next_deadline();
    s.on_timer();
    assert_int_equal(s.scheduled(), 1);
    c.t += 1s;
    s.add(2);
    s.add(3);
    auto sw = s.remove(1); // no GMET for a job that left
    assert_true(sw && sw->from == 1 && sw->to == 0);
    assert_int_equal(s.scheduled(), 0);
    assert_true(none(s.remove(1)));
    assert_true(s.next_deadline() == c.t + 100ms); // the next pick
    c.t += 100ms;
    sw = s.on_timer();
    assert_true(sw && sw->from == 0 && sw->to == 2);
    assert_true(none(s.remove(3))); // not scheduled: no switch
    sw = s.remove(2);
    assert_true(sw && sw->to == 0);
    assert_int_equal(s.jobs(), 0);
    c.t += 1s;
    assert_true(none(s.on_timer()));
}

} // namespace

int main()
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gmet_and_early_requests),
        cmocka_unit_test(test_nodes_agree),
        cmocka_unit_test(test_nodes_heal),
        cmocka_unit_test(test_false_requests_never_preempt),
        cmocka_unit_test(test_least_cpu_fairness),
        cmocka_unit_test(test_no_starvation_under_requests),
        cmocka_unit_test(test_remove),
    };
    return cmocka_run_group_tests_name("cosched_scheduler", tests, nullptr, nullptr);
}
