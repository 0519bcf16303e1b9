// Unit tests of a step's own fail-safe (sched_gang/step_guard.cpp, run in
// slurmstepd): the agent's record and whether that agent is alive, the
// journal's job list, when the guard decides to resume its job, the guard
// thread on an agent's files, and the marks of steps Slurm suspended.

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <sys/stat.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

#include "lib/common/log.hpp"
#include "lib/common/procs.hpp"
#include "lib/common/signals.hpp"
#include "sched_gang/step_guard.hpp"
#include "tests/unit/cmocka.hpp"

namespace {

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

} // namespace

int main()
{
    storm::block_sigpipe();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_step_guard),
    };
    return cmocka_run_group_tests_name("step_guard", tests, nullptr, nullptr);
}
