// Unit tests of the gang machine manager (sched_gang/manager.cpp)
// strobing switchers over loopback agents on real processes: jobs sharing
// cores switched in turn, the time each was stopped, the status file, a
// restarted agent sent the table again, a job alone left running, the
// nodes' fail-safe when the manager dies, and the strobe rate with one
// slot (the heartbeat's) and two (every quantum).

#include <chrono>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "lib/common/files.hpp"
#include "lib/common/signals.hpp"
#include "sched_gang/manager.hpp"
#include "sched_gang/switcher.hpp"
#include "tests/unit/gang_fixture.hpp"
#include "tests/unit/helpers.hpp"
#include "tests/unit/prim_fixture.hpp"

using namespace prim_fixture;
using namespace gang_fixture;
using namespace storm::gang;
using test_helpers::contains;

namespace {

// A started machine manager over `cl`'s nodes (fanout 2) that writes its
// status to a temporary file, removed with it.
struct TestManager {
    char status[32] = "/tmp/storm-gang-status.XXXXXX";
    std::unique_ptr<MachineManager> mm;
    TestManager(const Cluster &cl, Timing timing)
    {
        close(mkstemp(status));
        ManagerConfig mc;
        mc.nodes = cl.table;
        mc.fanout = 2;
        mc.timing = timing;
        mc.status_path = status;
        mm = std::make_unique<MachineManager>(mc, std::make_unique<FakeAuth>(), Logger("manager"));
        mm->start();
    }
    ~TestManager()
    {
        mm.reset();
        remove_file(status); // and the spare the manager keeps beside it
    }
};

// Core 0 of nodes 0 to n-1.
std::vector<uint64_t> first_cores(unsigned n)
{
    std::vector<uint64_t> cells;
    for (uint64_t i = 0; i < n; ++i)
        cells.push_back(i << 20);
    return cells;
}

void test_manager_end_to_end(void **)
{
    const unsigned n = 3;
    Cluster cl(n, 2);
    // procs[node][job]
    std::vector<std::map<uint32_t, std::vector<pid_t>>> procs(n);
    std::vector<pid_t> all;
    for (unsigned i = 0; i < n; ++i)
        for (uint32_t job : {1u, 2u}) {
            pid_t p = sleeper();
            procs[i][job] = {p};
            all.push_back(p);
        }
    std::vector<std::unique_ptr<Switcher>> sw;
    for (unsigned i = 0; i < n; ++i) {
        StepLister l = [&procs, i](const std::set<uint32_t> &jobs, const storm::node::HeldTest &) {
            std::map<uint32_t, std::vector<pid_t>> out;
            for (auto &[j, p] : procs[i])
                if (jobs.count(j))
                    out[j] = p;
            return out;
        };
        sw.push_back(std::make_unique<Switcher>(cl.base, *cl.agents[i], l,
                                                SwitcherConfig{i, "", 20ms, 0, {}, {}, false},
                                                Logger("gang" + std::to_string(i))));
        cl.agents[i]->add_sink("gang:", [&sw, i](const std::string &ev, uint64_t o, uint64_t off, uint64_t t,
                                                 std::string_view d,
                                                 bool) { return sw[i]->on_chunk(ev, o, off, t, d); });
    }
    TestManager tm(cl, {20000us, 300ms, 2});
    auto &mm = tm.mm;
    // Both jobs on all three nodes, on the same cores.
    RangeSet nodes = RangeSet::range(0, n);
    std::vector<uint64_t> cells = first_cores(n);
    mm->submit({{{1, cells, nodes}, {2, cells, nodes}}, {}});
    // Watch the processes: each job's are stopped and continued in turn,
    // and on a node the two jobs are never both running.
    std::map<pid_t, std::set<char>> seen;
    int both_running = 0, samples = 0;
    auto deadline = std::chrono::steady_clock::now() + 1500ms;
    cl.initiator->run_until(
        [&] {
            for (unsigned i = 0; i < n; ++i) {
                char a = state(procs[i][1][0]), c = state(procs[i][2][0]);
                seen[procs[i][1][0]].insert(a);
                seen[procs[i][2][0]].insert(c);
                both_running += (a == 'S' && c == 'S');
                ++samples;
            }
            return std::chrono::steady_clock::now() > deadline;
        },
        3000ms);
    for (pid_t p : all)
        assert_true(seen[p].count('S') && seen[p].count('T'));
    // Signals land asynchronously, so a sample can catch the moment between
    // one job's SIGCONT being sent and the other's SIGSTOP landing; rare.
    assert_true(both_running * 10 < samples);
    for (auto &s : sw) {
        assert_true(s->applied() >= 20);
        assert_int_equal(s->failsafes(), 0);
    }
    assert_true(mm->strobes() >= 20);
    // Each job was stopped while the other's slot ran: about half of the
    // 1.5 s (what slurmctld adds to its end time); none since taken.
    auto stopped = mm->take_stopped();
    assert_int_equal(stopped.size(), 2);
    for (uint32_t job : {1u, 2u})
        assert_in_range(std::chrono::duration_cast<std::chrono::milliseconds>(stopped[job]).count(), 400,
                        1200);
    for (auto &[job, t] : mm->take_stopped()) // only what accrued since
        assert_true(t < 200ms);
    // The status file shows the matrix.
    std::ifstream st(tm.status);
    std::string text((std::istreambuf_iterator<char>(st)), std::istreambuf_iterator<char>());
    assert_true(contains(text, "slots: 2"));
    assert_true(contains(text, "slot 0: jobs 1;"));
    assert_true(contains(text, "slot 1: jobs 2;"));
    assert_true(contains(text, "quantum: 20ms"));
    // Node 1's agent restarts (a new switcher, no table): it fails the
    // strobes as stale, the manager sends it the table again, it switches.
    {
        StepLister l = [&procs](const std::set<uint32_t> &jobs, const storm::node::HeldTest &) {
            std::map<uint32_t, std::vector<pid_t>> out;
            for (auto &[j, p] : procs[1])
                if (jobs.count(j))
                    out[j] = p;
            return out;
        };
        uint64_t epoch = sw[1]->epoch();
        sw[1] = std::make_unique<Switcher>(cl.base, *cl.agents[1], l,
                                           SwitcherConfig{1, "", 20ms, 0, {}, {}, false}, Logger("gang1b"));
        bool ok =
            cl.initiator->run_until([&] { return sw[1]->epoch() == epoch && sw[1]->applied() > 5; }, 3000ms);
        assert_true(ok);
    }
    // Job 1 ends: its processes are continued, job 2 runs alone, unswitched.
    mm->submit({{{2, cells, nodes}}, {}});
    assert_true(cl.initiator->run_until(
        [&] {
            for (unsigned i = 0; i < n; ++i)
                if (state(procs[i][1][0]) != 'S' || state(procs[i][2][0]) != 'S')
                    return false;
            return true;
        },
        2000ms));
    cl.initiator->run_until([] { return false; }, 200ms);
    for (unsigned i = 0; i < n; ++i)
        assert_int_equal(state(procs[i][2][0]), 'S');
    // The manager dies with two jobs switched: the nodes' fail-safe
    // continues them.
    mm->submit({{{1, cells, nodes}, {2, cells, nodes}}, {}});
    cl.initiator->run_until([] { return false; }, 300ms);
    mm.reset();
    assert_true(cl.initiator->run_until(
        [&] {
            for (pid_t p : all)
                if (state(p) != 'S')
                    return false;
            return true;
        },
        3000ms));
    for (auto &s : sw)
        assert_true(s->failsafes() >= 1);
    sw.clear();
    reap(all);
}

// With one slot there is nothing to switch: the manager strobes at the
// heartbeat's pace (every 20 ms down the tree), not every quantum; a second
// slot brings back a strobe every quantum.
void test_manager_one_slot(void **)
{
    const unsigned n = 2;
    Cluster cl(n, 2);
    TestManager tm(cl, {2000us, 1000ms, 2});
    auto &mm = tm.mm;
    RangeSet nodes = RangeSet::range(0, n);
    std::vector<uint64_t> cells = first_cores(n);
    auto strobes_in = [&](std::chrono::milliseconds t) {
        uint64_t before = mm->strobes();
        cl.initiator->run_until([] { return false; }, t);
        return mm->strobes() - before;
    };
    mm->submit({{{1, cells, nodes}}, {}});
    strobes_in(100ms); // the table goes out
    uint64_t one = strobes_in(1000ms);
    mm->submit({{{1, cells, nodes}, {2, cells, nodes}}, {}});
    strobes_in(100ms);
    uint64_t two = strobes_in(1000ms);
    // 50 heartbeats in a second; 500 quanta (the timers may run late on a
    // loaded machine, but not ten times late).
    print_message("one slot: %llu strobes in 1 s; two slots: %llu\n", static_cast<unsigned long long>(one),
                  static_cast<unsigned long long>(two));
    assert_true(one >= 10 && one <= 60);
    assert_true(two >= 150);
}

} // namespace

int main()
{
    storm::block_sigpipe();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_manager_end_to_end),
        cmocka_unit_test(test_manager_one_slot),
    };
    return cmocka_run_group_tests_name("manager", tests, nullptr, nullptr);
}
