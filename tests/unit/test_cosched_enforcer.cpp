// Unit tests of the coscheduling enforcers (cosched/enforcer.cpp) on a
// real child process: the nice one (needs root to raise the priority
// back) and the cgroup v1 cpu one (skipped when no writable cpu hierarchy
// is mounted), each releasing what it holds, and a crashed agent's groups
// emptied and removed by the next one.
// <fstream> before cmocka.h, whose fail() macro breaks it.
#include <fstream>

#include "tests/unit/cmocka.hpp"

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

pid_t sleeper()
{
    pid_t p = fork();
    if (p == 0) {
        pause();
        _exit(0);
    }
    return p;
}

void reap(pid_t p)
{
    kill(p, SIGKILL);
    waitpid(p, nullptr, 0);
}

void test_nice_enforcer(void **)
{
    if (geteuid() != 0)
        skip(); // raising the priority back needs CAP_SYS_NICE
    pid_t p = sleeper();
    {
        NiceEnforcer e(EnforcerSetup{}, Logger("t"));
        e.attach(5, {p}, false);
        assert_int_equal(getpriority(PRIO_PROCESS, static_cast<id_t>(p)), 19);
        e.set_scheduled(5, true);
        assert_int_equal(getpriority(PRIO_PROCESS, static_cast<id_t>(p)), 0);
        e.set_scheduled(5, false);
        assert_int_equal(getpriority(PRIO_PROCESS, static_cast<id_t>(p)), 19);
    } // the destructor releases: nobody stays throttled
    assert_int_equal(getpriority(PRIO_PROCESS, static_cast<id_t>(p)), 0);
    reap(p);
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
    pid_t p = sleeper();
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
    reap(p);
}

} // namespace

int main()
{
    set_log_sink(capture_sink);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nice_enforcer),
        cmocka_unit_test(test_cgroup_enforcer),
    };
    return cmocka_run_group_tests_name("cosched_enforcer", tests, nullptr, nullptr);
}
