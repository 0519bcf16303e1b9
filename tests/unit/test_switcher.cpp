// Unit tests of the node-side gang switcher (sched_gang/switcher.cpp) on
// real processes: stop/continue per slot, stale strobes, the fail-safe,
// jobs leaving the table, Slurm-suspended jobs, strobes by multicast, the
// switch hook of communication contexts, lending an idle slot, rescans,
// the journal a restarted agent recovers from, and the cgroup v2 freezer
// as the switcher's way to stop jobs.

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <sys/stat.h>
#include <sys/wait.h>
#include <thread>
#include <vector>

#include "lib/common/realtime.hpp"
#include "lib/common/signals.hpp"
#include "sched_gang/protocol.hpp"
#include "sched_gang/step_guard.hpp"
#include "sched_gang/switcher.hpp"
#include "tests/unit/gang_fixture.hpp"
#include "tests/unit/helpers.hpp"
#include "tests/unit/prim_fixture.hpp"

using namespace prim_fixture;
using namespace gang_fixture;
using namespace storm::gang;
using test_helpers::contains;

namespace {

struct SwitchBench {
    event_base *base = event_base_new();
    FakeAuth auth;
    std::unique_ptr<Engine> engine;
    std::map<uint32_t, std::vector<pid_t>> procs; // what the lister reports
    std::atomic<int> listings{0};                 // the lister's calls
    storm::node::HeldTest held; // the switcher's, as of its last listing
    std::mutex mu;
    std::string journal;

    SwitchBench()
    {
        char tmpl[] = "/tmp/storm-gang-test.XXXXXX";
        journal = mkdtemp(tmpl);
        EngineConfig c;
        c.self = 0;
        c.nodes = {loopback(free_port())};
        engine = std::make_unique<Engine>(base, c, auth, Logger("agent"));
    }
    ~SwitchBench()
    {
        engine.reset();
        event_base_free(base);
        std::system(("rm -rf " + journal).c_str());
    }
    std::unique_ptr<Switcher> make(std::chrono::milliseconds rescan = 20ms,
                                   std::optional<FreezerSetup> freeze = std::nullopt,
                                   bool signals_only = false, bool lend = true,
                                   std::optional<std::chrono::milliseconds> rescan_held = std::nullopt)
    {
        StepLister l = [this](const std::set<uint32_t> &jobs, const storm::node::HeldTest &held) {
            ++listings;
            std::lock_guard<std::mutex> lk(mu);
            std::map<uint32_t, std::vector<pid_t>> out;
            for (auto &[j, p] : procs)
                if (jobs.count(j))
                    out[j] = p;
            this->held = held;
            return out;
        };
        return std::make_unique<Switcher>(
            base, *engine, l,
            SwitcherConfig{
                0, journal, rescan, 0, {}, freeze, signals_only, lend, rescan_held.value_or(rescan)},
            Logger("gang"));
    }
    bool run_until(const std::function<bool()> &f, std::chrono::milliseconds t = 3000ms)
    {
        return engine->run_until(f, t);
    }
};

Table table(uint64_t epoch, std::vector<TableJob> jobs, std::vector<uint32_t> hands_off = {},
            uint32_t failsafe_ms = 400)
{
    Table t;
    t.epoch = epoch;
    t.slots = 2;
    t.quantum_us = 10000;
    t.failsafe_ms = failsafe_ms;
    t.jobs = std::move(jobs);
    t.hands_off = std::move(hands_off);
    return t;
}

uint64_t g_seq = 100; // strobes of one table apply once each, in increasing sequence

void strobe(Switcher &s, uint64_t epoch, uint16_t slot)
{
    assert_true(s.on_signal(kStrobeEvent, Strobe{epoch, slot, ++g_seq, realtime_ns()}.encode()));
}

std::string on_whole(Switcher &s, const std::string &ev, const std::string &data)
{
    return s.on_chunk(ev, 1, 0, data.size(), data);
}

bool eventually_state(SwitchBench &b, pid_t p, char want)
{
    return b.run_until([&] { return state(p) == want; }, 2000ms);
}

void test_switcher_slots(void **)
{
    SwitchBench b;
    pid_t p1 = sleeper(), p2 = sleeper(), p3 = sleeper();
    b.procs = {{1, {p1}}, {2, {p2}}, {3, {p3}}};
    auto sw = b.make();
    RangeSet me = RangeSet::single(0), other = RangeSet::single(1);
    assert_false(sw->on_signal("bcast:open:1", ""));
    assert_true(sw->on_signal(kTableEvent, table(5, {{1, 1, me}, {2, 2, me}, {3, 1, other}}).encode()));
    assert_int_equal(sw->jobs(), 2); // job 3 is not on this node
    assert_true(b.run_until([&] { return sw->processes(1) == 1 && sw->processes(2) == 1; }));
    strobe(*sw, 5, 0);
    assert_true(eventually_state(b, p2, 'T'));
    assert_int_equal(state(p1), 'S');
    assert_true(sw->stopped(2));
    strobe(*sw, 5, 1);
    assert_true(eventually_state(b, p1, 'T'));
    assert_true(eventually_state(b, p2, 'S'));
    // A strobe of another epoch changes nothing, and the node says why.
    assert_true(
        contains(on_whole(*sw, kStrobeEvent, Strobe{4, 0, 2, realtime_ns()}.encode()), "stale table"));
    assert_int_equal(sw->ignored(), 1);
    b.run_until([] { return false; }, 50ms);
    assert_int_equal(state(p1), 'T');
    // A malformed message is dropped, and fails the transfer on this node.
    assert_true(contains(sw->on_chunk(kStrobeEvent, 1, 0, 7, "garbage"), "malformed gang:strobe"));
    assert_true(contains(sw->on_chunk(kTableEvent, 1, 0, 7, "garbage"), "malformed gang:table"));
    assert_true(contains(sw->on_chunk(kTableEvent, 1, 3, 9, "garbage"), "out of order"));
    assert_int_equal(sw->epoch(), 5);
    // No strobe for the fail-safe time (400 ms): everything continues.
    assert_true(eventually_state(b, p1, 'S'));
    assert_int_equal(sw->failsafes(), 1);
    assert_false(sw->stopped(1));
    // Strobes resume: switching resumes.
    strobe(*sw, 5, 1);
    assert_true(eventually_state(b, p1, 'T'));
    // A process the stopped job starts meanwhile is stopped at the next scan.
    pid_t p1b = sleeper();
    {
        std::lock_guard<std::mutex> lk(b.mu);
        b.procs[1].push_back(p1b);
    }
    assert_true(eventually_state(b, p1b, 'T'));
    // Job 1 leaves the table (which arrives in two chunks): continued.
    std::string t6 = table(6, {{2, 2, me}}).encode();
    assert_string_equal(
        sw->on_chunk(kTableEvent, 8, 0, t6.size(), std::string_view(t6).substr(0, 10)).c_str(), "");
    assert_int_equal(sw->epoch(), 5);
    assert_string_equal(sw->on_chunk(kTableEvent, 8, 10, t6.size(), std::string_view(t6).substr(10)).c_str(),
                        "");
    assert_int_equal(sw->epoch(), 6);
    assert_true(eventually_state(b, p1, 'S'));
    assert_true(eventually_state(b, p1b, 'S'));
    // Job 2 alone, in slot 1: slot 0 has nothing to run here and lends the
    // node (test_switcher_lends); with job 1 back in slot 0, job 2 stops.
    assert_true(sw->on_signal(kTableEvent, table(7, {{2, 2, me}}).encode()));
    strobe(*sw, 7, 0);
    b.run_until([] { return false; }, 50ms);
    assert_int_equal(state(p2), 'S');
    assert_int_equal(sw->lent(), 1);
    assert_true(sw->on_signal(kTableEvent, table(8, {{1, 1, me}, {2, 2, me}}).encode()));
    assert_true(b.run_until([&] { return sw->processes(1) == 2; }));
    strobe(*sw, 8, 0);
    assert_true(eventually_state(b, p2, 'T'));
    // Job 2, stopped, is suspended by Slurm (hands off): left stopped.
    assert_true(sw->on_signal(kTableEvent, table(9, {}, {2}).encode()));
    b.run_until([] { return false; }, 100ms);
    assert_int_equal(state(p2), 'T');
    assert_int_equal(sw->jobs(), 0);
    assert_int_equal(sw->lent(), 1);
    reap({p1, p1b, p2, p3});
}

// The switcher stopping jobs with the freezer: frozen and thawed per slot,
// the fail-safe thaws, a job Slurm suspends is thawed into Slurm's stop and
// given back, and the switcher's end thaws the rest.
void test_switcher_freezes(void **)
{
    auto fs = freezer_setup();
    if (!fs)
        skip();
    std::string self = cgroup2_of(getpid());
    SwitchBench b;
    pid_t p1 = spinner(), p2 = spinner();
    b.procs = {{1, {p1}}, {2, {p2}}};
    auto sw = b.make(20ms, fs, false, false); // no lending: job 2 alone is frozen in slot 0
    assert_true(sw->freezing());
    RangeSet me = RangeSet::single(0);
    assert_true(sw->on_signal(kTableEvent, table(5, {{1, 1, me}, {2, 2, me}}).encode()));
    assert_true(b.run_until([&] { return sw->processes(1) == 1 && sw->processes(2) == 1; }));
    strobe(*sw, 5, 0);
    assert_true(b.run_until([&] { return sw->frozen(p2); }));
    assert_int_equal(state(p2), 'S');
    assert_false(sw->frozen(p1));
    assert_true(sw->stopped(2));
    strobe(*sw, 5, 1);
    assert_true(b.run_until([&] { return sw->frozen(p1) && !sw->frozen(p2); }));
    // No strobe for the fail-safe time (400 ms): thawed.
    assert_true(b.run_until([&] { return !sw->frozen(p1); }));
    assert_int_equal(sw->failsafes(), 1);
    // Job 1 frozen again; Slurm suspends it (its SIGSTOP waits while the
    // job is frozen) and the table hands it off: thawed into Slurm's stop.
    strobe(*sw, 5, 1);
    assert_true(b.run_until([&] { return sw->frozen(p1); }));
    kill(p1, SIGSTOP);
    assert_true(sw->on_signal(kTableEvent, table(6, {{2, 2, me}}, {1}).encode()));
    assert_true(eventually_state(b, p1, 'T'));
    assert_string_equal(cgroup2_of(p1).c_str(), self.c_str());
    strobe(*sw, 6, 0);
    assert_true(b.run_until([&] { return sw->frozen(p2); }));
    sw.reset(); // the node agent stops
    assert_true(within([&] { return state(p2) == 'R'; }));
    assert_string_equal(cgroup2_of(p2).c_str(), self.c_str());
    // An agent set to signals (storm_gang_stop=signal) after one that froze
    // and crashed: it thaws the group left behind.
    std::string left = Freezer(*fs, Logger("t")).job_dir(9);
    assert_true(storm::cgroupfs::mkdirs(left));
    assert_true(storm::cgroupfs::write_text(left + "/cgroup.procs", std::to_string(p2)));
    assert_true(storm::cgroupfs::write_text(left + "/cgroup.freeze", "1"));
    assert_true(within([&] { return state(p2) == 'S'; }));
    sw = b.make(20ms, fs, true);
    assert_false(sw->freezing());
    assert_true(within([&] { return state(p2) == 'R'; }));
    assert_string_equal(cgroup2_of(p2).c_str(), self.c_str());
    assert_int_equal(access(left.c_str(), F_OK), -1);
    reap({p1, p2});
}

// The switch hook (communication contexts): halt before the leaving job is
// stopped, the switch waits for halted(), swap with the leaving job stopped
// and before the running one continues, release after; strobes arriving
// meanwhile are applied afterwards (only the latest).
struct RecordingHook : SwitchHook {
    std::vector<std::string> calls;
    bool wait = true;
    std::function<char(void)> state_of_leaving;
    bool halt(const std::set<uint32_t> &leaving, uint64_t seq, uint32_t) override
    {
        calls.push_back("halt " + join(leaving) + " " + std::to_string(seq));
        return wait;
    }
    void swap(const std::set<uint32_t> &leaving, const std::set<uint32_t> &running, uint64_t) override
    {
        calls.push_back("swap " + join(leaving) + " / " + join(running) +
                        " leaving:" + (state_of_leaving ? std::string(1, state_of_leaving()) : "?"));
    }
    void release(const std::set<uint32_t> &running, uint64_t) override
    {
        calls.push_back("release " + join(running));
    }
    std::set<uint32_t> followed; // jobs with a context the halts follow
    bool follows(const std::set<uint32_t> &jobs) const override
    {
        return std::any_of(jobs.begin(), jobs.end(), [this](uint32_t j) { return followed.count(j) > 0; });
    }
    static std::string join(const std::set<uint32_t> &s)
    {
        std::string o;
        for (uint32_t v : s)
            o += (o.empty() ? "" : ",") + std::to_string(v);
        return o.empty() ? "-" : o;
    }
};

// Strobes by multicast: sealed under the table's key, applied once (a
// replayed datagram, or the same strobe down the tree, changes nothing);
// forged or altered ones are rejected and counted; another table's, or
// any when the table carries no key, are ignored.
void test_switcher_multicast(void **)
{
    SwitchBench b;
    pid_t p1 = sleeper(), p2 = sleeper();
    b.procs = {{1, {p1}}, {2, {p2}}};
    auto sw = b.make();
    RangeSet me = RangeSet::single(0);
    Table t = table(8, {{1, 1, me}, {2, 2, me}});
    t.has_key = true;
    for (size_t i = 0; i < t.strobe_key.size(); ++i)
        t.strobe_key[i] = static_cast<unsigned char>(0xa0 + i);
    assert_true(sw->on_signal(kTableEvent, t.encode()));
    assert_true(Table::decode(t.encode()).strobe_key == t.strobe_key);
    assert_true(b.run_until([&] { return sw->processes(1) == 1 && sw->processes(2) == 1; }));
    Strobe s0{8, 0, 50, realtime_ns()};
    std::string d0 = seal_strobe(s0, t.strobe_key);
    sw->on_datagram(d0);
    assert_true(eventually_state(b, p2, 'T'));
    assert_int_equal(sw->mcast_applied(), 1);
    // Replayed, or the same strobe down the tree: nothing more.
    sw->on_datagram(d0);
    assert_string_equal(on_whole(*sw, kStrobeEvent, s0.encode()).c_str(), "");
    assert_int_equal(sw->applied(), 1);
    // Forged (another key), altered, or junk: rejected, nothing applied.
    StrobeKey wrong = t.strobe_key;
    wrong[0] ^= 1;
    Strobe s1{8, 1, 51, realtime_ns()};
    sw->on_datagram(seal_strobe(s1, wrong));
    std::string altered = seal_strobe(s1, t.strobe_key);
    altered[altered.size() / 2] ^= 1;
    sw->on_datagram(altered);
    sw->on_datagram("junk");
    assert_int_equal(sw->mcast_rejected(), 3);
    assert_int_equal(sw->applied(), 1);
    b.run_until([] { return false; }, 50ms);
    assert_int_equal(state(p1), 'S');
    // Another epoch's: ignored, not counted as forged.
    sw->on_datagram(seal_strobe(Strobe{9, 1, 52, realtime_ns()}, t.strobe_key));
    assert_int_equal(sw->mcast_rejected(), 3);
    assert_int_equal(sw->applied(), 1);
    // The next one switches.
    sw->on_datagram(seal_strobe(s1, t.strobe_key));
    assert_true(eventually_state(b, p1, 'T'));
    assert_true(eventually_state(b, p2, 'S'));
    assert_int_equal(sw->mcast_applied(), 2);
    // An older strobe down the tree does not switch back.
    assert_string_equal(on_whole(*sw, kStrobeEvent, Strobe{8, 0, 49, realtime_ns()}.encode()).c_str(), "");
    b.run_until([] { return false; }, 50ms);
    assert_int_equal(state(p1), 'T');
    // A table without a key: datagrams are not applied.
    Table t2 = table(10, {{1, 1, me}, {2, 2, me}});
    assert_true(sw->on_signal(kTableEvent, t2.encode()));
    sw->on_datagram(seal_strobe(Strobe{10, 0, 1, realtime_ns()}, t.strobe_key));
    assert_int_equal(sw->mcast_applied(), 2);
    sw.reset(); // continues everything
    kill(p1, SIGKILL);
    kill(p2, SIGKILL);
    waitpid(p1, nullptr, 0);
    waitpid(p2, nullptr, 0);
}

void test_switcher_hook(void **)
{
    SwitchBench b;
    pid_t p1 = sleeper(), p2 = sleeper();
    b.procs = {{1, {p1}}, {2, {p2}}};
    auto sw = b.make();
    RecordingHook hook;
    sw->set_hook(&hook);
    RangeSet me = RangeSet::single(0);
    assert_true(sw->on_signal(kTableEvent, table(5, {{1, 1, me}, {2, 2, me}}).encode()));
    assert_true(b.run_until([&] { return sw->processes(1) == 1 && sw->processes(2) == 1; }));
    // Slot 0: job 2 leaves; the switch waits for the hook.
    assert_true(sw->on_signal(kStrobeEvent, Strobe{5, 0, 11, realtime_ns()}.encode()));
    assert_int_equal(hook.calls.size(), 1);
    assert_string_equal(hook.calls[0].c_str(), "halt 2 11");
    b.run_until([] { return false; }, 50ms);
    assert_int_equal(state(p2), 'S'); // not stopped before it halted
    assert_false(sw->stopped(2));
    // Two strobes meanwhile: applied afterwards, in order.
    assert_true(sw->on_signal(kStrobeEvent, Strobe{5, 1, 12, realtime_ns()}.encode()));
    assert_true(sw->on_signal(kStrobeEvent, Strobe{5, 0, 13, realtime_ns()}.encode()));
    assert_int_equal(hook.calls.size(), 1);
    hook.state_of_leaving = [&] { return state(p2); };
    hook.wait = false;
    sw->halted();
    // Switch 11: job 2 stopped before the swap, job 1 running; then 12
    // (job 1 leaves) and 13 (job 2 leaves again).
    assert_int_equal(hook.calls.size(), 9);
    assert_true(contains(hook.calls[1], "swap 2 / 1 leaving:"));
    assert_string_equal(hook.calls[2].c_str(), "release 1");
    assert_string_equal(hook.calls[3].c_str(), "halt 1 12");
    assert_true(contains(hook.calls[4], "swap 1 / 2 leaving:"));
    assert_string_equal(hook.calls[6].c_str(), "halt 2 13");
    assert_string_equal(hook.calls[8].c_str(), "release 1");
    assert_true(sw->stopped(2));
    assert_false(sw->stopped(1));
    assert_true(eventually_state(b, p2, 'T'));
    // Slot 1: job 1 leaves; the hook has nothing to halt: at once.
    hook.calls.clear();
    assert_true(sw->on_signal(kStrobeEvent, Strobe{5, 1, 14, realtime_ns()}.encode()));
    assert_int_equal(hook.calls.size(), 3);
    assert_string_equal(hook.calls[0].c_str(), "halt 1 14");
    assert_string_equal(hook.calls[1].c_str(), "swap 1 / 2 leaving:T");
    assert_string_equal(hook.calls[2].c_str(), "release 2");
    assert_true(eventually_state(b, p1, 'T'));
    assert_true(eventually_state(b, p2, 'S'));
    sw->set_hook(nullptr);
    sw.reset();
    reap({p1, p2});
}

// Lending: a slot whose jobs have no live process here (exited, even
// before they are reaped) stops nothing; a process the next scan finds makes
// the job busy again; never while the hook follows a job of the node, nor
// with lending off.
void test_switcher_lends(void **)
{
    SwitchBench b;
    pid_t p1 = sleeper(), p2 = sleeper();
    b.procs = {{1, {p1}}, {2, {p2}}};
    auto sw = b.make();
    RecordingHook hook;
    hook.wait = false;
    sw->set_hook(&hook);
    RangeSet me = RangeSet::single(0);
    assert_true(sw->on_signal(kTableEvent, table(5, {{1, 1, me}, {2, 2, me}}).encode()));
    assert_true(b.run_until([&] { return sw->processes(1) == 1 && sw->processes(2) == 1; }));
    strobe(*sw, 5, 0);
    assert_true(eventually_state(b, p2, 'T'));
    strobe(*sw, 5, 1);
    assert_true(eventually_state(b, p1, 'T'));
    assert_true(eventually_state(b, p2, 'S'));
    // Job 1's last process exits (a zombie: not reaped yet); the scan has
    // not seen it go.  Slot 0 lends the node: job 2 goes on.
    kill(p1, SIGKILL);
    assert_true(within([&] { return state(p1) == 'Z'; }));
    hook.calls.clear();
    strobe(*sw, 5, 0);
    b.run_until([] { return false; }, 50ms);
    assert_int_equal(state(p2), 'S');
    assert_false(sw->stopped(2));
    assert_int_equal(sw->lent(), 1);
    assert_true(sw->stopped(1));
    // The hook sees the switch every node makes: job 2 leaves, job 1 runs.
    assert_int_equal(hook.calls.size(), 3);
    assert_true(contains(hook.calls[0], "halt 2 "));
    assert_true(contains(hook.calls[1], "swap 2 / 1 "));
    assert_string_equal(hook.calls[2].c_str(), "release 1");
    hook.calls.clear();
    strobe(*sw, 5, 1); // job 2's own slot: it comes back; job 1 leaves
    assert_int_equal(hook.calls.size(), 3);
    assert_true(contains(hook.calls[0], "halt 1 "));
    assert_true(contains(hook.calls[1], "swap 1 / 2 "));
    strobe(*sw, 5, 0);
    assert_int_equal(sw->lent(), 2);
    assert_int_equal(state(p2), 'S');
    waitpid(p1, nullptr, 0);
    // Job 1 starts a step (found by the next scan: stopped at once, its
    // job being stopped), and its slot switches again.
    pid_t p3 = sleeper();
    {
        std::lock_guard<std::mutex> lk(b.mu);
        b.procs[1] = {p3};
    }
    assert_true(eventually_state(b, p3, 'T'));
    strobe(*sw, 5, 0);
    assert_true(eventually_state(b, p2, 'T'));
    assert_true(eventually_state(b, p3, 'S'));
    assert_int_equal(sw->lent(), 2);
    // The hook follows job 2 (a swapped context): job 2 is switched at
    // every strobe even when job 1 has nothing to run.
    strobe(*sw, 5, 1);
    assert_true(eventually_state(b, p2, 'S'));
    kill(p3, SIGKILL);
    waitpid(p3, nullptr, 0);
    hook.followed = {2};
    strobe(*sw, 5, 0);
    assert_true(eventually_state(b, p2, 'T'));
    assert_int_equal(sw->lent(), 2);
    sw->set_hook(nullptr);
    sw.reset();
    // Lending off (storm_gang_lend=no): the idle slot idles the node.
    pid_t p4 = sleeper();
    b.procs = {{1, {p4}}, {2, {p2}}};
    sw = b.make(20ms, std::nullopt, false, false);
    assert_true(sw->on_signal(kTableEvent, table(6, {{1, 1, me}, {2, 2, me}}).encode()));
    assert_true(b.run_until([&] { return sw->processes(1) == 1 && sw->processes(2) == 1; }));
    strobe(*sw, 6, 1);
    assert_true(eventually_state(b, p4, 'T'));
    kill(p4, SIGKILL);
    waitpid(p4, nullptr, 0);
    strobe(*sw, 6, 0);
    assert_true(eventually_state(b, p2, 'T'));
    assert_int_equal(sw->lent(), 0);
    sw.reset();
    reap({p2});
    // With the freezer: job 1's group empties when its task dies (frozen,
    // of SIGKILL), and its slot lends the node.
    auto fs = freezer_setup();
    if (!fs)
        return;
    pid_t q1 = spinner(), q2 = spinner();
    b.procs = {{1, {q1}}, {2, {q2}}};
    sw = b.make(20ms, fs);
    assert_true(sw->freezing());
    assert_true(sw->on_signal(kTableEvent, table(7, {{1, 1, me}, {2, 2, me}}).encode()));
    assert_true(b.run_until([&] { return sw->processes(1) == 1 && sw->processes(2) == 1; }));
    strobe(*sw, 7, 1);
    assert_true(b.run_until([&] { return sw->frozen(q1); }));
    kill(q1, SIGKILL);
    assert_true(reaped(q1));
    strobe(*sw, 7, 0);
    b.run_until([] { return false; }, 50ms);
    assert_false(sw->frozen(q2));
    assert_int_equal(state(q2), 'R');
    assert_int_equal(sw->lent(), 1);
    sw.reset();
    reap({q2});
}

// A step starting (the pool calls rescan() when slurmstepd opens its
// context) is scanned at once, not at the scanner's next interval.
void test_switcher_rescan(void **)
{
    SwitchBench b;
    pid_t p1 = sleeper(), p2 = sleeper();
    b.procs = {{1, {p1}}, {2, {}}};
    auto sw = b.make(10000ms);
    RangeSet me = RangeSet::single(0);
    assert_true(sw->on_signal(kTableEvent, table(5, {{1, 1, me}, {2, 2, me}}, {}, 60000).encode()));
    assert_true(b.run_until([&] { return sw->processes(1) == 1; }));
    // Scans at about 0, 50, 150, 350 and 750 ms; the next at 1.55 s.
    b.run_until([] { return false; }, 900ms);
    assert_int_equal(sw->processes(2), 0);
    {
        std::lock_guard<std::mutex> lk(b.mu);
        b.procs[2] = {p2};
    }
    auto t0 = std::chrono::steady_clock::now();
    sw->rescan();
    assert_true(b.run_until([&] { return sw->processes(2) == 1; }));
    assert_true(std::chrono::steady_clock::now() - t0 < 500ms);
    sw.reset();
    reap({p1, p2});
}

// While the freezer holds every process of the node's jobs, the scans
// space out to rescan_held (their children are born in the frozen group);
// a job left to signals keeps them at the rescan interval; and rescan()
// still scans at once.
void test_switcher_rescan_held(void **)
{
    auto fs = freezer_setup();
    if (!fs)
        skip();
    RangeSet me = RangeSet::single(0);
    auto listings_in = [](SwitchBench &b, std::chrono::milliseconds window) {
        int before = b.listings;
        b.run_until([] { return false; }, window);
        return b.listings - before;
    };
    for (bool held : {true, false}) {
        SwitchBench b;
        pid_t p1 = sleeper();
        b.procs = {{1, {p1}}};
        auto sw = b.make(100ms, fs, !held, true, 2000ms);
        assert_true(sw->on_signal(kTableEvent, table(5, {{1, 1, me}}, {}, 60000).encode()));
        assert_true(b.run_until([&] { return sw->processes(1) == 1; }));
        assert_true(sw->freezing() == held);
        // The scans after the table's: 50 ms, then doubling, to 100 ms
        // (signals) or to 2 s (held).
        b.run_until([] { return false; }, 1000ms);
        int n = listings_in(b, 1500ms);
        if (held)
            assert_in_range(n, 0, 2); // 0.8 s and 1.6 s apart by then
        else
            assert_in_range(n, 8, 20); // every 100 ms
        if (held) {
            pid_t p2 = sleeper();
            {
                std::lock_guard<std::mutex> lk(b.mu);
                b.procs[1].push_back(p2);
            }
            sw->rescan();
            assert_true(b.run_until([&] { return sw->processes(1) == 2; }, 500ms));
            sw.reset();
            reap({p2});
        }
        sw.reset();
        reap({p1});
    }
}

// The lister is told which processes the freezer holds (so that it need
// not list their steps again: step_lister.hpp): a process of job 1 once
// moved into job 1's group, not one of another group or none; with signals
// it is told nothing.
void test_switcher_tells_held(void **)
{
    auto fs = freezer_setup();
    if (!fs)
        skip();
    RangeSet me = RangeSet::single(0);
    for (bool freeze : {true, false}) {
        SwitchBench b;
        pid_t p1 = sleeper(), p2 = sleeper();
        b.procs = {{1, {p1}}};
        auto sw = b.make(20ms, fs, !freeze);
        assert_true(sw->freezing() == freeze);
        assert_true(sw->on_signal(kTableEvent, table(5, {{1, 1, me}}, {}, 60000).encode()));
        assert_true(b.run_until([&] { return sw->processes(1) == 1; }));
        storm::node::HeldTest held;
        {
            std::lock_guard<std::mutex> lk(b.mu);
            held = b.held;
        }
        if (freeze) {
            assert_true(static_cast<bool>(held));
            assert_true(held(1, p1));  // moved into job 1's group
            assert_false(held(2, p1)); // not job 2's
            assert_false(held(1, p2)); // in no group of the switcher
        } else {
            assert_false(static_cast<bool>(held));
        }
        sw.reset();
        reap({p1, p2});
    }
}

void test_switcher_never_leaves_stopped(void **)
{
    SwitchBench b;
    pid_t p1 = sleeper(), p2 = sleeper();
    b.procs = {{1, {p1}}, {2, {p2}}};
    RangeSet me = RangeSet::single(0);
    {
        auto sw = b.make();
        sw->on_signal(kTableEvent, table(9, {{1, 1, me}, {2, 2, me}}, {}, 60000).encode());
        assert_true(b.run_until([&] { return sw->processes(2) == 1; }));
        strobe(*sw, 9, 0);
        assert_true(eventually_state(b, p2, 'T'));
        // The journal names the switched jobs.
        std::ifstream j(b.journal + "/jobs");
        std::string text((std::istreambuf_iterator<char>(j)), std::istreambuf_iterator<char>());
        assert_string_equal(text.c_str(), "1\n2\n");
        // Beside it, who keeps it: this process, for the steps' guards.
        std::ifstream a(b.journal + "/" + storm::gang::kAgentRecord);
        std::string rec((std::istreambuf_iterator<char>(a)), std::istreambuf_iterator<char>());
        auto r = storm::gang::parse_agent_record(rec);
        assert_true(r && r->pid == getpid() && r->failsafe_ms == 60000 && storm::gang::agent_alive(*r));
    } // the agent stops: job 2 is continued
    struct stat gone;
    assert_true(stat((b.journal + "/" + storm::gang::kAgentRecord).c_str(), &gone) < 0);
    assert_true(eventually_state(b, p2, 'S'));
    // An agent that died (no destructor) left job 1 stopped and its
    // journal: the next agent continues it.
    kill(p1, SIGSTOP);
    assert_true(eventually_state(b, p1, 'T'));
    {
        std::ofstream j(b.journal + "/jobs");
        j << "1\n";
    }
    auto sw = b.make();
    sw->recover();
    assert_true(eventually_state(b, p1, 'S'));
    struct stat st;
    assert_true(stat((b.journal + "/jobs").c_str(), &st) < 0);
    sw.reset();
    // Unless Slurm suspended the job meanwhile (its step's slurmstepd
    // marked it; here this live process): the next agent leaves job 2
    // stopped for Slurm to resume, and continues job 1.
    kill(p1, SIGSTOP);
    kill(p2, SIGSTOP);
    assert_true(eventually_state(b, p1, 'T') && eventually_state(b, p2, 'T'));
    {
        std::ofstream j(b.journal + "/jobs");
        j << "1\n2\n";
    }
    assert_true(storm::gang::mark_suspended(b.journal, 2, 0, true));
    sw = b.make();
    sw->recover();
    assert_true(eventually_state(b, p1, 'S'));
    std::this_thread::sleep_for(100ms);
    assert_true(eventually_state(b, p2, 'T'));
    sw.reset();
    // Nor does an agent that stops, or whose strobes stop, continue a job
    // Slurm suspended after the agent had stopped it.
    kill(p2, SIGCONT);
    storm::gang::mark_suspended(b.journal, 2, 0, false);
    {
        auto sw2 = b.make();
        sw2->on_signal(kTableEvent, table(10, {{1, 1, me}, {2, 2, me}}, {}, 60000).encode());
        assert_true(b.run_until([&] { return sw2->processes(2) == 1; }));
        strobe(*sw2, 10, 0);
        assert_true(eventually_state(b, p2, 'T') && sw2->stopped(2));
        assert_true(storm::gang::mark_suspended(b.journal, 2, 0, true));
    }
    assert_true(eventually_state(b, p1, 'S'));
    std::this_thread::sleep_for(100ms);
    assert_true(eventually_state(b, p2, 'T'));
    storm::gang::mark_suspended(b.journal, 2, 0, false);
    kill(p2, SIGCONT);
    reap({p1, p2});
}

} // namespace

int main()
{
    storm::block_sigpipe();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_switcher_slots),   cmocka_unit_test(test_switcher_multicast),
        cmocka_unit_test(test_switcher_hook),    cmocka_unit_test(test_switcher_never_leaves_stopped),
        cmocka_unit_test(test_switcher_freezes), cmocka_unit_test(test_switcher_lends),
        cmocka_unit_test(test_switcher_rescan),  cmocka_unit_test(test_switcher_rescan_held),
        cmocka_unit_test(test_switcher_tells_held),
    };
    return cmocka_run_group_tests_name("switcher", tests, nullptr, nullptr);
}
