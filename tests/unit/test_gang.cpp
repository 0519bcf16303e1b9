// Unit tests of gang scheduling (sched_gang/): the matrix's packing and
// alternative scheduling, the wire format, the settings, the node-side
// switcher on real processes (stop/continue per slot, stale strobes, the
// fail-safe, jobs leaving the table, Slurm-suspended jobs, the journal a
// restarted agent recovers from), the cgroup v2 freezer alone and as the
// switcher's way to stop jobs, and the machine manager strobing switchers
// over loopback agents.

#include <atomic>
#include <cerrno>
#include <csignal>
#include <dirent.h>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <thread>

#include "agent/agent_config.hpp"
#include "lib/common/cgroupfs.hpp"
#include "lib/common/files.hpp"
#include "lib/common/procs.hpp"
#include "lib/common/signals.hpp"
#include "sched_gang/config.hpp"
#include "sched_gang/manager.hpp"
#include "sched_gang/matrix.hpp"
#include "sched_gang/protocol.hpp"
#include "sched_gang/step_guard.hpp"
#include "sched_gang/switcher.hpp"
#include "tests/unit/helpers.hpp"
#include "tests/unit/prim_fixture.hpp"

using namespace prim_fixture;
using namespace storm::gang;
using test_helpers::contains;
using test_helpers::error_of;

namespace {

JobShape shape(uint32_t id, std::vector<uint64_t> cells, RangeSet nodes = RangeSet::single(0))
{
    return {id, std::move(cells), nodes};
}

void test_matrix_packing(void **)
{
    Matrix m(4);
    // A and B share cells: two slots; C fits beside A.
    assert_true(m.update({shape(1, {1, 2}), shape(2, {1, 2}), shape(3, {3})}));
    assert_int_equal(m.slots(), 2);
    auto h = m.homes();
    assert_int_equal(h[1], 0);
    assert_int_equal(h[2], 1);
    assert_int_equal(h[3], 0);
    // Alternative scheduling: C's cell is idle in slot 1, so C runs there too.
    assert_int_equal(m.masks().at(3), 0x3);
    assert_int_equal(m.masks().at(1), 0x1);
    assert_int_equal(m.masks().at(2), 0x2);
    assert_int_equal(m.idle_cells(0), 0);
    assert_int_equal(m.idle_cells(1), 0); // B holds 1 and 2, C 3
    // The same jobs again: nothing changes.
    assert_false(m.update({shape(1, {1, 2}), shape(2, {1, 2}), shape(3, {3})}));
    // A ends: B and C keep their slots (nobody is disturbed) and B, whose
    // cells are now idle in slot 0, runs there as well.
    assert_true(m.update({shape(2, {1, 2}), shape(3, {3})}));
    h = m.homes();
    assert_int_equal(h[2], 1);
    assert_int_equal(h[3], 0);
    assert_int_equal(m.masks().at(2), 0x3);
    // C ends: slot 0 empties and goes; B moves down with its slot.
    assert_true(m.update({shape(2, {1, 2})}));
    assert_int_equal(m.slots(), 1);
    assert_int_equal(m.homes()[2], 0);
    // A new job goes to the first slot it fits.
    m.update({shape(2, {1, 2}), shape(4, {5}), shape(5, {2})});
    h = m.homes();
    assert_int_equal(h[4], 0);
    assert_int_equal(h[5], 1);
    assert_false(m.overflowed());
    // A job too big for slot 1's idle cells stays out of it: idle cells remain.
    Matrix k(2);
    k.update({shape(1, {1, 2}), shape(2, {1}), shape(3, {2, 3})});
    assert_int_equal(k.homes()[3], 1);
    assert_int_equal(k.masks().at(3), 0x2);
    assert_int_equal(k.idle_cells(1), 0); // 1: job 2; 2, 3: job 3
    assert_int_equal(k.idle_cells(0), 1); // 3
}

void test_matrix_overflow(void **)
{
    Matrix m(2);
    m.update({shape(1, {1}), shape(2, {1}), shape(3, {1})});
    assert_int_equal(m.slots(), 3);
    assert_true(m.overflowed());
    // Every job still runs somewhere.
    for (auto &[id, mask] : m.masks())
        assert_true(mask != 0);
}

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

void test_config(void **)
{
    // The node side: how jobs are stopped (SwitchParameters).
    assert_true(storm::agent::AgentConfig::from_switch_parameters(nullptr).gang_freeze);
    assert_false(storm::agent::AgentConfig::from_switch_parameters("storm_gang_stop=signal").gang_freeze);
    assert_true(storm::agent::AgentConfig::from_switch_parameters(nullptr).gang_lend);
    assert_false(storm::agent::AgentConfig::from_switch_parameters("storm_gang_lend=no").gang_lend);
    assert_true(contains(error_of<storm::ConfigError>([] {
                             storm::agent::AgentConfig::from_switch_parameters("storm_gang_lend=maybe");
                         }),
                         "invalid value \"maybe\" for storm_gang_lend (allowed: yes or no)"));
    assert_true(contains(error_of<ConfigError>([] {
                             storm::agent::AgentConfig::from_switch_parameters("storm_gang_stop=thaw");
                         }),
                         "invalid value \"thaw\" for storm_gang_stop (allowed: freeze or signal)"));
    std::vector<PartitionInfo> parts = {{"debug", false, 1}, {"gang", true, 2}};
    auto c = GangConfig::parse(nullptr, parts, false, true);
    assert_int_equal(c.quantum.count(), 50000);
    assert_int_equal(c.failsafe.count(), 5000);
    assert_int_equal(c.mpl, 2);
    assert_int_equal(c.partitions.size(), 1);
    c = GangConfig::parse("bf_interval=30,storm_gang_quantum=2ms,storm_gang_mpl=1", parts, false, true);
    assert_int_equal(c.quantum.count(), 2000);
    assert_int_equal(c.mpl, 1);
    c = GangConfig::parse("storm_gang_quantum=1s", parts, false, true);
    assert_int_equal(c.failsafe.count(), 10000); // 10 quanta
    auto err = [&](const char *p, bool stock = false, bool sw = true) {
        return error_of<ConfigError>([&] { GangConfig::parse(p, parts, stock, sw); });
    };
    assert_true(contains(err("storm_gang_quantum=0"), "storm_gang_quantum"));
    assert_true(contains(err("storm_gang_quantum=0ms"), "storm_gang_quantum"));
    assert_true(contains(err("storm_gang_quantum=2"), "storm_gang_quantum"));
    assert_true(contains(err("storm_gang_mpl=3"), "exceeds the 2 jobs per core that partition gang allows"));
    assert_true(contains(err("storm_gang_mpl=0"), "storm_gang_mpl"));
    assert_true(contains(err("storm_gang_quantum=100ms,storm_gang_failsafe=200ms"), "storm_gang_failsafe"));
    assert_true(contains(err("storm_gang_slots=2"), "storm_gang_slots"));
    assert_true(contains(err(nullptr, true), "PreemptMode includes GANG"));
    assert_true(contains(err(nullptr, false, false), "switch/rdma"));
    std::vector<PartitionInfo> none = {{"debug", false, 1}, {"shared", false, 4}};
    assert_true(
        contains(error_of<ConfigError>([&] { GangConfig::parse("storm_gang_mpl=2", none, false, true); }),
                 "no partition"));
    assert_true(GangConfig::parse(nullptr, none, true, false).partitions.empty());
    std::vector<PartitionInfo> big = {{"huge", true, 65}};
    assert_true(
        contains(error_of<ConfigError>([&] { GangConfig::parse(nullptr, big, false, true); }), "FORCE:65"));
}

// ---- the switcher on real processes ------------------------------------

pid_t sleeper()
{
    pid_t p = fork();
    if (p == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); // a failed test leaves none behind
        for (;;)
            pause();
    }
    return p;
}

// 'S' (sleeping), 'T' (stopped), ...
char state(pid_t pid)
{
    std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
    std::string s;
    std::getline(f, s);
    size_t r = s.rfind(')');
    return r == std::string::npos || r + 2 >= s.size() ? '?' : s[r + 2];
}

void reap(std::vector<pid_t> pids)
{
    for (pid_t p : pids) {
        kill(p, SIGKILL);
        waitpid(p, nullptr, 0);
    }
}

struct SwitchBench {
    event_base *base = event_base_new();
    FakeAuth auth;
    std::unique_ptr<Engine> engine;
    std::map<uint32_t, std::vector<pid_t>> procs; // what the lister reports
    std::atomic<int> listings{0};                 // the lister's calls
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
        StepLister l = [this](const std::set<uint32_t> &jobs) {
            ++listings;
            std::lock_guard<std::mutex> lk(mu);
            std::map<uint32_t, std::vector<pid_t>> out;
            for (auto &[j, p] : procs)
                if (jobs.count(j))
                    out[j] = p;
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

// ---- the cgroup v2 freezer -------------------------------------------------

pid_t spinner()
{
    pid_t p = fork();
    if (p == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        for (;;)
            asm volatile("" ::: "memory");
    }
    return p;
}

std::string cgroup2_root() { return storm::cgroupfs::find_mount("/proc/self/mountinfo", "cgroup2", ""); }
std::string cgroup2_of(pid_t p) { return storm::cgroupfs::cgroup_of("/proc", p, ""); }

// A freezer's setup for this test process, or none where the freezer
// cannot be used (not root, no cgroup v2 mounted: the test never mounts
// one on the host).
std::optional<FreezerSetup> freezer_setup()
{
    if (geteuid() != 0 || cgroup2_root().empty())
        return std::nullopt;
    FreezerSetup s;
    s.group = "storm-gang-unit-" + std::to_string(getpid());
    std::string parent;
    try {
        Freezer probe(s, Logger("t"));
        parent = probe.base().substr(0, probe.base().rfind('/'));
    } catch (const std::exception &) {
        return std::nullopt;
    }
    // The groups of an earlier run that was killed (its pid is gone): a
    // freezer of that name thaws, empties and removes them.
    if (DIR *d = opendir(parent.c_str())) {
        const std::string prefix = "storm-gang-unit-";
        while (dirent *e = readdir(d)) {
            std::string name = e->d_name;
            if (name.rfind(prefix, 0) != 0)
                continue;
            long pid = std::atol(name.c_str() + prefix.size());
            if (pid <= 0 || kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH)
                continue;
            FreezerSetup old = s;
            old.group = name;
            try {
                Freezer sweep(old, Logger("t"));
            } catch (const std::exception &) {
            }
        }
        closedir(d);
    }
    return s;
}

bool within(const std::function<bool()> &f, std::chrono::milliseconds t = 2000ms)
{
    auto until = std::chrono::steady_clock::now() + t;
    while (!f()) {
        if (std::chrono::steady_clock::now() > until)
            return false;
        std::this_thread::sleep_for(1ms);
    }
    return true;
}

bool reaped(pid_t p)
{
    return within([p] { return waitpid(p, nullptr, WNOHANG) == p; });
}

void test_freezer(void **)
{
    auto s = freezer_setup();
    if (!s)
        skip();
    std::string root = cgroup2_root(), self = cgroup2_of(getpid());
    std::string self_dir = root + (self == "/" ? "" : self);
    pid_t p = spinner(), q = spinner(), r = spinner();
    // A group of someone else's (as Slurm's step groups are).
    std::string foreign = self_dir + "/storm-gang-unit-foreign-" + std::to_string(getpid());
    assert_int_equal(mkdir(foreign.c_str(), 0755), 0);
    assert_true(storm::cgroupfs::write_text(foreign + "/cgroup.procs", std::to_string(q)));
    std::string base;
    {
        Freezer f(*s, Logger("t"));
        base = f.base();
        assert_int_equal(access(base.c_str(), F_OK), -1); // made with the first job's group
        assert_true(f.attach(5, {p}, false).empty());
        assert_int_equal(f.held(5), 1);
        assert_string_equal((root + cgroup2_of(p)).c_str(), f.job_dir(5).c_str());
        f.set_frozen(5, true);
        assert_true(within([&] { return f.frozen(p); }));
        assert_int_equal(state(p), 'S'); // frozen tasks sleep: their parent gets no SIGCHLD
        f.set_frozen(5, false);
        assert_true(within([&] { return !f.frozen(p) && state(p) == 'R'; }));
        // A process in another cgroup is handed back, untouched.
        std::vector<pid_t> rest = f.attach(6, {q}, true);
        assert_true(rest.size() == 1 && rest[0] == q);
        assert_int_equal(f.held(6), 0);
        assert_int_equal(f.jobs(), 1);
        assert_string_equal((root + cgroup2_of(q)).c_str(), foreign.c_str());
        // A process moved into a stopped job's group stops at once.
        assert_true(f.attach(7, {r}, true).empty());
        assert_true(within([&] { return f.frozen(r); }));
        // A frozen task still dies of SIGKILL (scancel, time limits).
        f.set_frozen(5, true);
        assert_true(within([&] { return f.frozen(p); }));
        kill(p, SIGKILL);
        assert_true(reaped(p));
        // Released: thawed, back in this process's group, the group removed.
        f.release(7);
        assert_true(within([&] { return state(r) == 'R'; }));
        assert_string_equal(cgroup2_of(r).c_str(), self.c_str());
        assert_int_equal(access(f.job_dir(7).c_str(), F_OK), -1);
        assert_true(f.attach(8, {r}, true).empty());
        assert_true(within([&] { return f.frozen(r); }));
    } // the destructor thaws job 8, gives r back and removes every group
    assert_true(within([&] { return state(r) == 'R'; }));
    assert_string_equal(cgroup2_of(r).c_str(), self.c_str());
    assert_int_equal(access(base.c_str(), F_OK), -1);
    {
        Freezer f(*s, Logger("t"));
        assert_true(f.attach(3, {r}, false).empty());
        f.release(3);
        assert_int_equal(access(base.c_str(), F_OK), -1); // gone with its last job's group
        // Once gone, the retries (every second) leave its name alone: a
        // directory someone else made there stays.
        assert_int_equal(mkdir(base.c_str(), 0755), 0);
        f.retry();
        assert_int_equal(access(base.c_str(), F_OK), 0);
        assert_int_equal(rmdir(base.c_str()), 0);
    }
    // A crashed agent's frozen group is thawed, emptied and removed by the
    // next one.
    std::string left = base + "/job_77";
    assert_true(storm::cgroupfs::mkdirs(left));
    assert_true(storm::cgroupfs::write_text(left + "/cgroup.procs", std::to_string(r)));
    assert_true(storm::cgroupfs::write_text(left + "/cgroup.freeze", "1"));
    assert_true(within([&] { return state(r) == 'S'; }));
    {
        Freezer f(*s, Logger("t"));
        assert_int_equal(access(left.c_str(), F_OK), -1);
        assert_true(within([&] { return state(r) == 'R'; }));
        assert_string_equal(cgroup2_of(r).c_str(), self.c_str());
    }
    assert_true(storm::cgroupfs::write_text(self_dir + "/cgroup.procs", std::to_string(q)));
    assert_int_equal(rmdir(foreign.c_str()), 0);
    reap({q, r});
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

// ---- a step's own fail-safe (slurmstepd) -------------------------------

static void test_step_guard(void **)
{
    using namespace storm::gang;
    using std::chrono::milliseconds;
    // The record: round trip, and what is refused.
    AgentRecord me = own_agent_record(1500);
    auto back = parse_agent_record(format_agent_record(me));
    assert_true(back && back->pid == getpid() && back->start == me.start && back->failsafe_ms == 1500);
    for (const char *bad : {"", "12", "0 5 5", "-3 5 5", "12 5 5 x", "12 5 99999999999"})
        assert_false(parse_agent_record(bad).has_value());
    // Alive: the same pid and start time; not a pid that ended, nor the
    // same pid under another start time (reused).
    assert_true(agent_alive(me));
    AgentRecord reused = me;
    reused.start++;
    assert_false(agent_alive(reused));
    pid_t dead = fork();
    if (dead == 0)
        _exit(0);
    waitpid(dead, nullptr, 0);
    AgentRecord ended{dead, 1, 1000};
    assert_false(agent_alive(ended));
    // Nor a process that exited and is not reaped yet (a zombie keeps its
    // /proc entry and start time).
    pid_t zombie = fork();
    if (zombie == 0)
        _exit(0);
    char zpath[64];
    std::snprintf(zpath, sizeof zpath, "/proc/%d/stat", static_cast<int>(zombie));
    for (int i = 0; i < 200; ++i) {
        char zbuf[512];
        const char *zf = storm::stat_fields(zpath, zbuf);
        if (zf && zf[0] == 'Z')
            break;
        std::this_thread::sleep_for(milliseconds(5));
    }
    AgentRecord exited = own_agent_record(1000);
    exited.pid = zombie;
    {
        char zbuf[512];
        const char *zf = storm::stat_fields(zpath, zbuf);
        unsigned long long zstart = 0;
        assert_true(zf && zf[0] == 'Z');
        assert_int_equal(
            sscanf(zf, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu",
                   &zstart),
            1);
        exited.start = zstart; // its own start time: only its state says it is gone
    }
    assert_false(agent_alive(exited));
    waitpid(zombie, nullptr, 0);
    // The journal lists whole job ids.
    assert_true(journal_jobs("12\n3\n").count(3));
    assert_false(journal_jobs("12\n3\n").count(1));
    assert_false(journal_jobs("123\n").count(12));
    // The decision: once the agent is gone for the fail-safe time, once
    // per outage; never for a job the journal does not list.
    auto t0 = std::chrono::steady_clock::now();
    milliseconds fs(1000);
    GuardState g;
    assert_false(g.observe(t0, true, true, fs));
    assert_false(g.observe(t0 + milliseconds(100), true, false, fs));
    assert_false(g.observe(t0 + milliseconds(1099), true, false, fs));
    assert_true(g.observe(t0 + milliseconds(1100), true, false, fs));
    assert_false(g.observe(t0 + milliseconds(5000), true, false, fs));
    assert_false(g.observe(t0 + milliseconds(5100), true, true, fs)); // a new agent
    assert_false(g.observe(t0 + milliseconds(5200), true, false, fs));
    assert_true(g.observe(t0 + milliseconds(6200), true, false, fs)); // gone again
    GuardState unlisted;
    assert_false(unlisted.observe(t0, false, false, fs));
    assert_false(unlisted.observe(t0 + milliseconds(9000), false, false, fs));

    // The thread, on an agent's files: a dead agent that lists job 7.
    char tmpl[] = "/tmp/storm-guard-XXXXXX";
    std::string dir = mkdtemp(tmpl);
    auto put = [&](const std::string &name, const std::string &text) {
        std::ofstream(dir + "/" + name) << text;
    };
    put("jobs", "5\n7\n");
    put(kAgentRecord, format_agent_record(AgentRecord{dead, 1, 100}));
    std::atomic<int> calls{0};
    {
        StepGuard guard(
            {dir, 7, "7.0", milliseconds(10)}, [&] { return static_cast<size_t>(++calls); },
            storm::Logger("test"));
        for (int i = 0; i < 200 && calls == 0; ++i)
            std::this_thread::sleep_for(milliseconds(5));
        std::this_thread::sleep_for(milliseconds(200));
        assert_int_equal(calls.load(), 1); // once per outage
        assert_int_equal(guard.resumes(), 1u);
        // A live agent (this process) takes the job back: nothing more.
        put(kAgentRecord, format_agent_record(own_agent_record(100)));
        std::this_thread::sleep_for(milliseconds(300));
        assert_int_equal(calls.load(), 1);
    }
    // A guard of a job the journal does not list does nothing.
    put(kAgentRecord, format_agent_record(AgentRecord{dead, 1, 100}));
    {
        StepGuard guard(
            {dir, 8, "8.0", milliseconds(10)}, [&] { return static_cast<size_t>(++calls); },
            storm::Logger("test"));
        std::this_thread::sleep_for(milliseconds(300));
    }
    assert_int_equal(calls.load(), 1);

    // Marks of steps Slurm suspended: only a live slurmstepd's count, for
    // its own job only; a dead one's is removed.
    assert_string_equal(suspended_mark_name(12, 3).c_str(), "suspended.12.3");
    assert_false(suspended_by_slurm(dir).count(12));
    assert_true(mark_suspended(dir, 12, 3, true));
    assert_true(suspended_by_slurm(dir).count(12));
    assert_false(suspended_by_slurm(dir).count(1));
    assert_false(suspended_by_slurm(dir).count(123));
    assert_true(mark_suspended(dir, 12, 3, false));
    assert_false(suspended_by_slurm(dir).count(12));
    put(suspended_mark_name(14, 0), format_agent_record(AgentRecord{dead, 1, 0}));
    put(suspended_mark_name(15, 0), "garbage");
    assert_false(suspended_by_slurm(dir).count(14));
    assert_false(suspended_by_slurm(dir).count(15));
    struct stat st;
    assert_true(stat((dir + "/" + suspended_mark_name(14, 0)).c_str(), &st) < 0);
    assert_true(stat((dir + "/" + suspended_mark_name(15, 0)).c_str(), &st) < 0);
    assert_false(mark_suspended("/nonexistent/storm-gang", 12, 3, true));
    std::system(("rm -rf " + dir).c_str());
}

// ---- the machine manager strobing switchers over loopback --------------

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
        StepLister l = [&procs, i](const std::set<uint32_t> &jobs) {
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
        StepLister l = [&procs](const std::set<uint32_t> &jobs) {
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
        cmocka_unit_test(test_matrix_packing),     cmocka_unit_test(test_matrix_overflow),
        cmocka_unit_test(test_protocol),           cmocka_unit_test(test_config),
        cmocka_unit_test(test_switcher_slots),     cmocka_unit_test(test_switcher_multicast),
        cmocka_unit_test(test_switcher_hook),      cmocka_unit_test(test_switcher_never_leaves_stopped),
        cmocka_unit_test(test_manager_end_to_end), cmocka_unit_test(test_freezer),
        cmocka_unit_test(test_switcher_freezes),   cmocka_unit_test(test_switcher_lends),
        cmocka_unit_test(test_switcher_rescan),    cmocka_unit_test(test_switcher_rescan_held),
        cmocka_unit_test(test_manager_one_slot),   cmocka_unit_test(test_step_guard),
    };
    return cmocka_run_group_tests_name("gang", tests, nullptr, nullptr);
}
