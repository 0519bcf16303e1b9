// Unit tests of the coscheduling enforcers (cosched/enforcer.cpp) on a
// real child process: the nice one (needs root to raise the priority
// back) and the cgroup v1 cpu one (skipped when no writable cpu hierarchy
// is mounted), each releasing what it holds, and a crashed agent's groups
// emptied and removed by the next one.
// <fstream> before cmocka.h, whose fail() macro breaks it.
#include <fstream>

#include "tests/unit/cmocka.hpp"

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <string>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cosched/enforcer.hpp"
#include "tests/unit/cosched_fixture.hpp"
#include "tests/unit/helpers.hpp"

using namespace cosched_fixture;
using test_helpers::contains;

namespace {

// The sleeping child a test works on: forked by the setup, killed and
// reaped by the teardown, which cmocka runs after a failed assertion too.
pid_t g_sleeper = -1;

int fork_sleeper(void **)
{
    g_sleeper = fork();
    if (g_sleeper == 0) {
        pause();
        _exit(0);
    }
    return g_sleeper > 0 ? 0 : -1;
}

int reap_sleeper(void **)
{
    if (g_sleeper > 0) {
        kill(g_sleeper, SIGKILL);
        waitpid(g_sleeper, nullptr, 0);
    }
    g_sleeper = -1;
    return 0;
}

void test_nice_enforcer(void **)
{
    if (geteuid() != 0)
        skip(); // raising the priority back needs CAP_SYS_NICE
    // The child's nice before it is throttled is this process's (it
    // inherited it): whatever `nice` the tests run under.
    errno = 0;
    int before = getpriority(PRIO_PROCESS, 0);
    assert_int_equal(errno, 0);
    if (before == 19)
        skip(); // throttled would look the same as scheduled
    pid_t p = g_sleeper;
    {
        NiceEnforcer e(EnforcerSetup{}, Logger("t"));
        e.attach(5, {p}, false);
        assert_int_equal(getpriority(PRIO_PROCESS, static_cast<id_t>(p)), 19);
        e.set_scheduled(5, true);
        assert_int_equal(getpriority(PRIO_PROCESS, static_cast<id_t>(p)), before);
        e.set_scheduled(5, false);
        assert_int_equal(getpriority(PRIO_PROCESS, static_cast<id_t>(p)), 19);
    } // the destructor releases: nobody stays throttled
    assert_int_equal(getpriority(PRIO_PROCESS, static_cast<id_t>(p)), before);
}

std::string read_line(const std::string &path)
{
    std::ifstream in(path);
    std::string s;
    std::getline(in, s);
    return s;
}

std::string cpu_cgroup(pid_t p)
{
    std::ifstream in("/proc/" + std::to_string(p) + "/cgroup");
    std::string line;
    while (std::getline(in, line))
        if (contains(line, ":cpu,") || contains(line, ":cpu:") || contains(line, ",cpu:"))
            return line.substr(line.rfind(':') + 1);
    return "";
}

void test_cgroup_enforcer(void **)
{
    std::string root = CgroupEnforcer::find_cpu_mount("/proc/self/mountinfo");
    if (geteuid() != 0 || root.empty() || access((root + "/cgroup.procs").c_str(), W_OK) != 0)
        skip();
    pid_t p = g_sleeper;
    std::string before = cpu_cgroup(p);
    EnforcerSetup s;
    s.share_percent = 1;
    s.group = "storm-cosched-unit-" + std::to_string(getpid());
    {
        CgroupEnforcer e(s, Logger("t"));
        e.attach(5, {p}, false);
        assert_string_equal(cpu_cgroup(p).c_str(), ("/" + s.group + "/job_5").c_str());
        assert_string_equal(read_line(e.job_dir(5) + "/cpu.shares").c_str(), "1024");
        e.set_scheduled(5, true);
        assert_string_equal(read_line(e.job_dir(5) + "/cpu.shares").c_str(), "101376");
        e.release(5);
        assert_string_equal(cpu_cgroup(p).c_str(), before.c_str());
        assert_int_equal(access(e.job_dir(5).c_str(), F_OK), -1);
        e.attach(6, {p}, true);
    } // the destructor releases job 6 and removes its group
    assert_string_equal(cpu_cgroup(p).c_str(), before.c_str());
    assert_int_equal(access((root + "/" + s.group).c_str(), F_OK), -1);
    // A crashed agent's leftovers are emptied and removed by the next one.
    std::string left = root + "/" + s.group + "/job_77";
    assert_int_equal(system(("mkdir -p " + left).c_str()), 0);
    std::ofstream(left + "/cgroup.procs") << p;
    {
        g_log.clear();
        CgroupEnforcer e(s, Logger("t"));
        assert_int_equal(access(left.c_str(), F_OK), -1);
        assert_true(logged("left by an earlier node agent"));
    }
    assert_string_equal(cpu_cgroup(p).c_str(), "/");
}

} // namespace

int main()
{
    set_log_sink(capture_sink);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_nice_enforcer, fork_sleeper, reap_sleeper),
        cmocka_unit_test_setup_teardown(test_cgroup_enforcer, fork_sleeper, reap_sleeper),
    };
    return cmocka_run_group_tests_name("cosched_enforcer", tests, nullptr, nullptr);
}
