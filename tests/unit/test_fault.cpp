// Unit tests of slurmctld's fault detection (lib/prim/fault_tracker.*,
// fault_monitor.*): the tracker's timing on made-up times (a suspect
// reported once after the timeout and never again while watched, healthy
// nodes never reported, readmission only through watch(), the monitor's
// own stalls not counted against the nodes), and the monitor beating
// agents in one process: a killed agent and a silent one (accepts, never
// answers) each reported once within the timeout and a little, no other,
// and a restarted agent watched again stays healthy.
#include <sys/socket.h>
#include <unistd.h>

#include "lib/common/signals.hpp"
#include "lib/prim/fault_monitor.hpp"
#include "lib/prim/fault_tracker.hpp"
#include "tests/unit/prim_fixture.hpp"

namespace {

using namespace prim_fixture;
using State = FaultTracker::State;
using Clock = FaultTracker::Clock;

void test_tracker_reports_once(void **)
{
    FaultTracker t(1000ms, 500ms);
    auto t0 = Clock::now();
    auto added = t.watch({0, 1, 2}, t0);
    assert_int_equal(added.size(), 3);
    t.tick(t0);
    assert_true(t.suspect(1));
    assert_false(t.suspect(1)); // already
    t.tick(t0 + 400ms);
    t.tick(t0 + 800ms);
    assert_true(t.expire(t0 + 999ms).empty());
    t.tick(t0 + 1000ms);
    auto f = t.expire(t0 + 1000ms);
    assert_int_equal(f.size(), 1);
    assert_int_equal(f[0].node, 1);
    assert_int_equal(f[0].silent.count(), 1000);
    assert_true(t.state(1) == State::failed);
    // Never again, whatever it answers, while watched.
    t.tick(t0 + 1400ms);
    assert_true(t.expire(t0 + 1400ms).empty());
    assert_false(t.alive(1, t0 + 1400ms));
    assert_false(t.suspect(1));
    assert_true(t.state(1) == State::failed);
    t.watch({0, 1, 2}, t0 + 1400ms);
    assert_true(t.state(1) == State::failed);
    // Out of service, then back (an administrator resumed it): afresh.
    t.watch({0, 2}, t0 + 1500ms);
    assert_false(t.watched(1));
    added = t.watch({0, 1, 2}, t0 + 1600ms);
    assert_int_equal(added.size(), 1);
    assert_true(t.state(1) == State::healthy);
    // forget(): the same at its next watch().
    t.suspect(2);
    t.tick(t0 + 2000ms);
    t.tick(t0 + 2400ms);
    t.tick(t0 + 2800ms);
    assert_int_equal(t.expire(t0 + 2800ms).size(), 1);
    t.forget(2);
    assert_int_equal(t.watch({0, 1, 2}, t0 + 2900ms).size(), 1);
    assert_true(t.state(2) == State::healthy);
}

void test_tracker_suspect_answers(void **)
{
    FaultTracker t(1000ms, 500ms);
    auto t0 = Clock::now();
    t.watch({0, 1}, t0);
    t.tick(t0);
    t.suspect(0);
    t.tick(t0 + 400ms);
    t.tick(t0 + 800ms);
    assert_true(t.alive(0, t0 + 900ms)); // back
    assert_true(t.state(0) == State::healthy);
    assert_false(t.alive(0, t0 + 950ms)); // was not a suspect
    t.suspect(0);
    t.tick(t0 + 1300ms);
    t.tick(t0 + 1700ms);
    t.tick(t0 + 1900ms);
    assert_true(t.expire(t0 + 1900ms).empty()); // silent since 950 ms only
    t.tick(t0 + 1950ms);
    assert_int_equal(t.expire(t0 + 1950ms).size(), 1);
    // A healthy node is never reported, however long ago it answered: only
    // a missed beat makes it a suspect.
    t.tick(t0 + 2350ms);
    t.tick(t0 + 2750ms);
    t.tick(t0 + 3150ms);
    assert_true(t.expire(t0 + 3150ms).empty());
    assert_true(t.state(1) == State::healthy);
}

void test_tracker_own_stall_not_counted(void **)
{
    FaultTracker t(1000ms, 500ms);
    auto t0 = Clock::now();
    t.watch({0}, t0);
    t.tick(t0);
    t.suspect(0);
    // The caller did not run for 3 s (starved): no one is blamed for it.
    t.tick(t0 + 3000ms);
    assert_true(t.expire(t0 + 3000ms).empty());
    t.tick(t0 + 3400ms);
    t.tick(t0 + 3800ms);
    assert_true(t.expire(t0 + 3800ms).empty());
    t.tick(t0 + 4000ms);
    auto f = t.expire(t0 + 4000ms);
    assert_int_equal(f.size(), 1);
    assert_int_equal(f[0].silent.count(), 1000);
}

// An agent replaced by a socket that accepts and never answers.
int silent_listener(const sockaddr_in &a)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    assert_int_equal(bind(s, reinterpret_cast<const sockaddr *>(&a), sizeof a), 0);
    listen(s, 8);
    return s;
}

void test_monitor_finds_dead_and_silent(void **)
{
    Cluster cl(12, 3, 300ms);
    auto fc = FaultConfig::for_timeout(1000ms);
    assert_int_equal(fc.interval.count(), 100);
    assert_int_equal(fc.answer.count(), 333);
    FaultMonitor mon(*cl.initiator, cl.base, fc, Logger("fault"));
    std::map<uint32_t, std::vector<std::chrono::milliseconds>> failed;
    std::map<uint32_t, Clock::time_point> when;
    mon.on_failed([&](uint32_t n, std::chrono::milliseconds silent) {
        failed[n].push_back(silent);
        when[n] = Clock::now();
    });
    std::set<uint32_t> all;
    for (uint32_t i = 0; i < 12; ++i)
        all.insert(i);
    mon.watch(all);
    // Healthy: beats flow, nothing reported.
    cl.initiator->run_until([] { return false; }, 1500ms);
    assert_true(failed.empty());
    assert_true(mon.rounds() >= 8);
    // Agent 5 dies, agent 4 (an inner node of the tree) goes silent.
    auto t0 = Clock::now();
    cl.agents[5].reset();
    cl.agents[4].reset();
    int s = silent_listener(cl.table[4]);
    assert_true(cl.initiator->run_until([&] { return failed.size() == 2; }, 5000ms));
    for (uint32_t n : {4u, 5u}) {
        assert_int_equal(failed[n].size(), 1);
        assert_true(failed[n][0] >= 1000ms);
        assert_true(when[n] - t0 < 1800ms); // the timeout and a little
    }
    // Nothing more, no other node, and the others stay healthy.
    cl.initiator->run_until([] { return false; }, 1500ms);
    assert_int_equal(failed.size(), 2);
    assert_int_equal(failed[4].size(), 1);
    assert_int_equal(failed[5].size(), 1);
    assert_int_equal(mon.tracker().in_state(State::healthy).size(), 10);
    // Taken out of service; agent 5 restarts and is put back: beaten
    // afresh, healthy, never reported.
    mon.forget(5);
    all.erase(4);
    mon.watch(all);
    cl.restart(5);
    cl.initiator->run_until([] { return false; }, 2000ms);
    assert_int_equal(failed[5].size(), 1);
    assert_true(mon.tracker().state(5) == State::healthy);
    assert_false(mon.tracker().watched(4));
    close(s);
}

} // namespace

int main()
{
    storm::block_sigpipe();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tracker_reports_once),
        cmocka_unit_test(test_tracker_suspect_answers),
        cmocka_unit_test(test_tracker_own_stall_not_counted),
        cmocka_unit_test(test_monitor_finds_dead_and_silent),
    };
    return cmocka_run_group_tests_name("fault", tests, nullptr, nullptr);
}
