// Unit tests of slurmctld's fault detection (lib/prim/fault_tracker.*,
// fault_guard.*, fault_monitor.*): the tracker's timing on made-up times (a
// suspect reported once after the timeout and never again while watched,
// healthy nodes never reported, readmission only through watch(), the
// monitor's own stalls and waits for a CPU not counted against the nodes); the mass-silence
// guard's episodes; which silent nodes a tree blames; and the monitor
// beating agents in one process: a killed agent and a silent one (accepts,
// never answers) each reported once within the timeout and a little, no
// other, and a restarted agent watched again stays healthy; a silent
// interior agent whose subtree answers through the re-planned tree while
// this controller can open no new connection (only the agent is
// reported); mass silence holding the reports until it ends or for the
// bound; one silent agent among 32 reported in time.
#include <sys/socket.h>
#include <unistd.h>

#include "lib/common/run_delay.hpp"
#include "lib/common/signals.hpp"
#include "lib/prim/fault_guard.hpp"
#include "lib/prim/fault_monitor.hpp"
#include "lib/prim/fault_tracker.hpp"
#include "tests/unit/prim_fixture.hpp"

namespace {

using namespace prim_fixture;
using State = FaultTracker::State;
using Clock = FaultTracker::Clock;

// expire() at `at` reports `node` alone, silent for `silent_ms` since it
// last answered; it is failed from then on.
void expect_reported(FaultTracker &t, Clock::time_point at, uint32_t node, long silent_ms)
{
    auto f = t.expire(at);
    assert_int_equal(f.size(), 1);
    assert_int_equal(f[0].node, node);
    assert_int_equal(f[0].silent.count(), silent_ms);
    assert_true(t.state(node) == State::failed);
}

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
    expect_reported(t, t0 + 1000ms, 1, 1000);
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
    expect_reported(t, t0 + 4000ms, 0, 1000);
}

// Starved in many short waits, never one long gap: the time the caller
// waited for a CPU is not counted, the rest is.
void test_tracker_own_wait_not_counted(void **)
{
    FaultTracker t(1000ms, 500ms);
    auto t0 = Clock::now();
    t.watch({0, 1}, t0);
    t.tick(t0);
    t.suspect(0);
    // 10 ticks 300 ms apart, 250 ms of each waited for a CPU: 3 s of wall
    // time, 500 ms of it ran.
    for (int i = 1; i <= 10; ++i) {
        t.tick(t0 + i * 300ms, 250ms);
        assert_true(t.expire(t0 + i * 300ms).empty());
    }
    assert_int_equal(std::chrono::duration_cast<std::chrono::milliseconds>(t.forgiven()).count(), 2500);
    // A wait longer than the gap forgives the gap, no more.
    t.tick(t0 + 3300ms, 900ms);
    assert_true(t.expire(t0 + 3300ms).empty());
    // Running freely again: reported once 1 s of its own time has passed.
    t.tick(t0 + 3600ms);
    assert_true(t.expire(t0 + 3600ms).empty());
    t.tick(t0 + 3800ms);
    expect_reported(t, t0 + 3800ms, 0, 1000);
    // Node 1 answers at 3.8 s and goes silent: 200 ms waited after that
    // are forgiven, so it is due at 5.0 s.
    t.alive(1, t0 + 3800ms);
    t.suspect(1);
    t.tick(t0 + 4100ms, 200ms);
    t.tick(t0 + 4500ms);
    t.tick(t0 + 4900ms);
    assert_true(t.expire(t0 + 4900ms).empty());
    t.tick(t0 + 5000ms);
    expect_reported(t, t0 + 5000ms, 1, 1000);
}

// A mass silence ended: the suspects' silence counts from then on, the
// healthy nodes' clocks are left alone, and a failed node stays failed.
void test_tracker_restart_silence(void **)
{
    FaultTracker t(1000ms, 500ms);
    auto t0 = Clock::now();
    t.watch({0, 1, 2}, t0);
    t.suspect(0);
    t.suspect(2);
    for (int i = 1; i <= 3; ++i)
        t.tick(t0 + i * 300ms);
    auto f = t.expire(t0 + 1000ms);
    assert_int_equal(f.size(), 2); // 0 and 2, silent for the timeout
    t.alive(1, t0 + 1000ms);
    t.watch({0, 1, 2, 3}, t0 + 1000ms);
    t.suspect(3);
    t.tick(t0 + 1200ms);
    t.tick(t0 + 1500ms);
    t.restart_silence(t0 + 1500ms);
    t.tick(t0 + 1900ms);
    t.tick(t0 + 2400ms);
    assert_true(t.expire(t0 + 2400ms).empty()); // 3: silent 1.4 s, but only 0.9 s since the restart
    t.tick(t0 + 2500ms);
    expect_reported(t, t0 + 2500ms, 3, 1000);
    assert_true(t.state(0) == State::failed);
    assert_true(t.state(1) == State::healthy);
}

// The kernel's count of this thread's waits for a CPU: present on Linux,
// and never going back.
void test_thread_run_delay(void **)
{
    auto a = storm::thread_run_delay();
    assert_true(a.has_value());
    volatile unsigned long spin = 0;
    for (unsigned long i = 0; i < 10000000; ++i)
        spin = spin + i;
    auto b = storm::thread_run_delay();
    assert_true(b.has_value());
    assert_true(b->count() >= a->count());
}

void test_tracker_not_before(void **)
{
    FaultTracker t(1000ms, 500ms);
    auto t0 = Clock::now();
    t.watch({0, 1}, t0);
    t.tick(t0);
    // Seen silent late (a round that lasted 1.5 s): 0 has until 1.8 s.
    t.tick(t0 + 400ms);
    t.tick(t0 + 800ms);
    t.tick(t0 + 1200ms);
    t.tick(t0 + 1500ms);
    assert_true(t.suspect(0, t0 + 1800ms));
    assert_false(t.suspect(0)); // keeps its own
    assert_true(t.suspect(1, t0 + 1600ms));
    assert_false(t.suspect(1, t0 + 2500ms)); // the later one
    assert_int_equal(t.due(t0 + 1700ms), 0);
    assert_int_equal(t.due(t0 + 1800ms), 1);
    assert_true(t.expire(t0 + 1500ms).empty());
    t.tick(t0 + 1800ms);
    expect_reported(t, t0 + 1800ms, 0, 1800);
    t.tick(t0 + 2200ms);
    assert_true(t.expire(t0 + 2200ms).empty());
    t.tick(t0 + 2500ms);
    assert_int_equal(t.expire(t0 + 2500ms).size(), 1);
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

void test_guard_episodes(void **)
{
    MassSilenceGuard g(0.25, 4, 3000ms);
    using C = MassSilenceGuard::Change;
    auto t0 = MassSilenceGuard::Clock::now();
    assert_int_equal(g.threshold(24), 6);
    assert_int_equal(g.threshold(8), 4);         // the minimum
    assert_true(g.update(6, 24, t0) == C::none); // 6 is not more than 6
    assert_false(g.holding());
    assert_true(g.update(7, 24, t0 + 100ms) == C::held);
    assert_true(g.holding());
    assert_true(g.update(20, 24, t0 + 2000ms) == C::none);
    assert_true(g.holding());
    assert_true(g.update(5, 24, t0 + 2500ms) == C::fell);
    assert_false(g.holding());
    // A new episode: the bound counts from its start, not re-armed while
    // it lasts.
    assert_true(g.update(10, 24, t0 + 4000ms) == C::held);
    assert_true(g.update(10, 24, t0 + 6999ms) == C::none);
    assert_true(g.holding());
    assert_true(g.update(10, 24, t0 + 7000ms) == C::released);
    assert_false(g.holding());
    assert_true(g.update(12, 24, t0 + 20000ms) == C::none);
    assert_false(g.holding());
    assert_true(g.update(1, 24, t0 + 21000ms) == C::none); // over, quietly: nothing was held
    assert_true(g.update(9, 24, t0 + 22000ms) == C::held);
    // The bound runs on the observer's own time: what it could not run
    // (forgiven) is left out.  Here it waited 2 s of the first 3.
    MassSilenceGuard own(0.25, 4, 3000ms);
    assert_true(own.update(10, 24, t0, 500ms) == C::held);
    assert_true(own.update(10, 24, t0 + 3000ms, 2500ms) == C::none);
    assert_true(own.holding());
    assert_true(own.lasted(t0 + 3000ms, 2500ms) == 1000ms);
    assert_true(own.update(10, 24, t0 + 4999ms, 2500ms) == C::none);
    assert_true(own.update(10, 24, t0 + 5000ms, 2500ms) == C::released);
    assert_false(own.holding());
    // No hold at all: the episode is released at once.
    MassSilenceGuard off(0.25, 4, 0ms);
    assert_true(off.update(10, 24, t0) == C::released);
    assert_false(off.holding());
}

void test_blamed_roots(void **)
{
    // 0..11 at fanout 3: 0 heads; 1 (2 3 4), 5 (6 7 8), 9 (10 11).
    RangeSet all = RangeSet::range(0, 12);
    assert_true(blamed_roots(all, RangeSet{}, 3).empty());
    // 5 timed out: its slice failed with it; only 5 is to blame.
    auto b = blamed_roots(all, RangeSet::range(5, 9), 3);
    assert_true(b == std::set<uint32_t>{5});
    // 5 answered but 7 did not, and 10 did not.
    b = blamed_roots(all, RangeSet::of({7, 10}), 3);
    assert_true((b == std::set<uint32_t>{7, 10}));
    // The head failed: everything failed, the head alone is to blame.
    b = blamed_roots(all, all, 3);
    assert_true(b == std::set<uint32_t>{0});
    // 1 and 2 failed: 2 is 1's child, hidden by it.
    b = blamed_roots(all, RangeSet::of({1, 2}), 3);
    assert_true(b == std::set<uint32_t>{1});
    // The same tree as the engine's: every slice root is blamed alone.
    RangeSet odd = RangeSet::of({3, 4, 8, 9, 10, 20, 21, 22, 40, 41, 42, 43, 44});
    for (const auto &slice : net::split_children(odd, 4)) {
        b = blamed_roots(odd, slice, 4);
        assert_true(b == std::set<uint32_t>{slice.nth(0)});
    }
}

// This controller's credentials fail once `refuse` is set (munged
// overloaded): no new connection of its own opens.
struct FlakyAuth : FakeAuth {
    bool refuse = false;
    std::string credential(std::string_view payload) override
    {
        if (refuse)
            throw net::AuthError("munge: timed out");
        return FakeAuth::credential(payload);
    }
};

std::set<uint32_t> range_set(uint32_t lo, uint32_t hi)
{
    std::set<uint32_t> s;
    for (uint32_t i = lo; i < hi; ++i)
        s.insert(i);
    return s;
}

void test_monitor_subtree_through_the_tree(void **)
{
    Cluster cl(12, 3, 300ms);
    FlakyAuth auth;
    EngineConfig c;
    c.nodes = cl.table;
    c.fanout = 3;
    c.timeout = 300ms;
    Engine ctld(cl.base, c, auth, Logger("controller"));
    // This controller holds its connection to the head, agent 0 (a
    // COMPARE-AND-WRITE there); then no new connection of its own can
    // authenticate any more, and agent 5, which serves 6, 7 and 8 in the
    // tree, is silent: its parent's connection to it opens and is never
    // answered (a frozen slurmd).
    bool done = false;
    ctld.compare_and_write(RangeSet::single(0), "fault:beat", Relation::ge, 0, std::nullopt,
                           [&](const CawResult &r) { done = r.ok; });
    assert_true(ctld.run_until([&] { return done; }, 2000ms));
    auth.refuse = true;
    cl.agents[5].reset();
    int s = silent_listener(cl.table[5]);
    FaultMonitor mon(ctld, cl.base, FaultConfig::for_timeout(1000ms), Logger("fault"));
    std::map<uint32_t, int> failed;
    std::map<uint32_t, Clock::time_point> when;
    mon.on_failed([&](uint32_t n, std::chrono::milliseconds) {
        failed[n]++;
        when[n] = Clock::now();
    });
    auto t0 = Clock::now();
    mon.watch(range_set(0, 12));
    assert_true(ctld.run_until([&] { return !failed.empty(); }, 4000ms));
    assert_int_equal(failed.size(), 1);
    assert_int_equal(failed.count(5), 1);
    assert_true(when[5] - t0 < 1800ms);
    // 6, 7 and 8 answered through the tree planned without 5, over the
    // agents' connections: never reported, healthy.
    ctld.run_until([] { return false; }, 2000ms);
    assert_int_equal(failed.size(), 1);
    assert_int_equal(failed[5], 1);
    for (uint32_t n : {6u, 7u, 8u})
        assert_true(mon.tracker().state(n) == State::healthy);
    assert_int_equal(mon.tracker().in_state(State::healthy).size(), 11);
    close(s);
}

void test_monitor_mass_silence_holds(void **)
{
    Cluster cl(24, 4, 300ms);
    auto fc = FaultConfig::for_timeout(1000ms);
    assert_int_equal(fc.mass_hold.count(), 60000);
    fc.mass_share = 0.25; // more than 6 of 24
    fc.mass_min = 4;
    // Long enough that a report when the hold lifts (at once) and one when
    // it runs out are apart by more than a loaded machine's delays: the
    // waits below are generous, the bounds on when apart (a CI run of
    // the 24.11 stage, compiling beside it, starved the loop for over 3 s
    // with a hold of 3 s and waits of 3 s).
    fc.mass_hold = 6000ms;
    FaultMonitor mon(*cl.initiator, cl.base, fc, Logger("fault"));
    std::map<uint32_t, int> failed;
    // When each was reported, by the clock and on the monitor's own time
    // (the time its thread could not run left out, as the tracker and
    // the guard leave it out: on a loaded machine both come that late).
    std::map<uint32_t, Clock::time_point> when, own_when;
    auto own_now = [&mon] { return Clock::now() - mon.tracker().forgiven(); };
    mon.on_failed([&](uint32_t n, std::chrono::milliseconds) {
        failed[n]++;
        when[n] = Clock::now();
        own_when[n] = own_now();
    });
    auto all = range_set(0, 24);
    mon.watch(all);
    cl.initiator->run_until([] { return false; }, 1000ms);
    assert_true(failed.empty());
    // Half the agents die at once: held, well past the timeout.
    for (uint32_t n = 12; n < 24; ++n)
        cl.agents[n].reset();
    auto t0 = Clock::now();
    cl.initiator->run_until([] { return false; }, 2500ms);
    assert_true(failed.empty());
    assert_true(mon.guard().holding());
    assert_int_equal(mon.tracker().in_state(State::suspect).size(), 12);
    // 8 come back: 4 silent, no longer massive; those 4 are reported a
    // timeout after that (their silence counts from the end of the mass
    // silence), not at once.
    for (uint32_t n = 12; n < 20; ++n)
        cl.restart(n);
    auto own_t1 = own_now();
    assert_true(cl.initiator->run_until([&] { return failed.size() == 4; }, 10000ms));
    cl.initiator->run_until([] { return false; }, 500ms);
    assert_int_equal(failed.size(), 4);
    for (uint32_t n = 20; n < 24; ++n) {
        assert_int_equal(failed[n], 1);
        assert_true(when[n] - t0 >= 2500ms);
        assert_true(own_when[n] - own_t1 >= 1000ms);
        assert_true(own_when[n] - own_t1 < 3000ms); // the hold runs out 3.5 s after t1 at the earliest
    }
    assert_false(mon.guard().holding());
    assert_int_equal(mon.tracker().in_state(State::healthy).size(), 20);
    // Taken out of service.  Then 8 of the 20 die for good: held for the
    // bound, then reported, each once.
    for (uint32_t n = 20; n < 24; ++n) {
        mon.forget(n);
        all.erase(n);
    }
    mon.watch(all);
    for (uint32_t n = 4; n < 12; ++n)
        cl.agents[n].reset();
    auto t2 = Clock::now(), own_t2 = own_now();
    cl.initiator->run_until([] { return false; }, 2500ms);
    assert_int_equal(failed.size(), 4);
    assert_true(mon.guard().holding());
    assert_true(cl.initiator->run_until([&] { return failed.size() == 12; }, 20000ms));
    for (uint32_t n = 4; n < 12; ++n) {
        assert_int_equal(failed[n], 1);
        assert_true(when[n] - t2 >= 5800ms);
        assert_true(own_when[n] - own_t2 >= 5800ms);
        assert_true(own_when[n] - own_t2 < 9000ms);
    }
    cl.initiator->run_until([] { return false; }, 500ms);
    assert_int_equal(failed.size(), 12);
}

void test_monitor_one_dead_among_many(void **)
{
    Cluster cl(32, 4, 300ms);
    FaultMonitor mon(*cl.initiator, cl.base, FaultConfig::for_timeout(1000ms), Logger("fault"));
    std::map<uint32_t, int> failed;
    std::map<uint32_t, Clock::time_point> when;
    mon.on_failed([&](uint32_t n, std::chrono::milliseconds silent) {
        failed[n]++;
        when[n] = Clock::now();
        assert_true(silent >= 1000ms);
    });
    mon.watch(range_set(0, 32));
    cl.initiator->run_until([] { return false; }, 1000ms);
    assert_true(failed.empty());
    // 9 heads 10..16 at fanout 4: it goes silent (a frozen daemon).
    auto t0 = Clock::now();
    cl.agents[9].reset();
    int s = silent_listener(cl.table[9]);
    assert_true(cl.initiator->run_until([&] { return !failed.empty(); }, 4000ms));
    assert_true(when[9] - t0 < 1800ms);
    cl.initiator->run_until([] { return false; }, 1500ms);
    assert_int_equal(failed.size(), 1);
    assert_int_equal(failed[9], 1);
    assert_false(mon.guard().holding());
    assert_int_equal(mon.tracker().in_state(State::healthy).size(), 31);
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
        cmocka_unit_test(test_tracker_own_wait_not_counted),
        cmocka_unit_test(test_thread_run_delay),
        cmocka_unit_test(test_tracker_restart_silence),
        cmocka_unit_test(test_tracker_not_before),
        cmocka_unit_test(test_monitor_finds_dead_and_silent),
        cmocka_unit_test(test_guard_episodes),
        cmocka_unit_test(test_blamed_roots),
        cmocka_unit_test(test_monitor_subtree_through_the_tree),
        cmocka_unit_test(test_monitor_mass_silence_holds),
        cmocka_unit_test(test_monitor_one_dead_among_many),
    };
    return cmocka_run_group_tests_name("fault", tests, nullptr, nullptr);
}
