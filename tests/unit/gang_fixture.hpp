// Shared fixture of the gang scheduling tests (sched_gang/): real processes
// to stop and continue (sleepers that pause, spinners that use the CPU, both
// killed with the test), their state as /proc shows it, and the cgroup v2
// freezer's setup for this test process where one can be used.  A test
// reaps the processes it starts (reap()), also on its way out.
#pragma once

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <dirent.h>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include "lib/common/cgroupfs.hpp"
#include "lib/common/log.hpp"
#include "sched_gang/freezer.hpp"

namespace gang_fixture {

using namespace storm;
using namespace storm::gang;
using namespace std::chrono_literals;

// 'S' (sleeping), 'T' (stopped), ...
inline char state(pid_t pid)
{
    std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
    std::string s;
    std::getline(f, s);
    size_t r = s.rfind(')');
    return r == std::string::npos || r + 2 >= s.size() ? '?' : s[r + 2];
}

// A child asleep in pause(), returned once it sleeps there (10 s at most):
// on a loaded machine a child not yet run reads 'R', and the tests' checks
// that a process the switcher left alone is 'S' would fail for that alone.
inline pid_t sleeper()
{
    pid_t p = fork();
    if (p == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); // a failed test leaves none behind
        for (;;)
            pause();
    }
    for (int i = 0; p > 0 && i < 1000 && state(p) != 'S'; ++i)
        usleep(10000);
    return p;
}

inline void reap(std::vector<pid_t> pids)
{
    for (pid_t p : pids) {
        kill(p, SIGKILL);
        waitpid(p, nullptr, 0);
    }
}

inline pid_t spinner()
{
    pid_t p = fork();
    if (p == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        for (;;)
            asm volatile("" ::: "memory");
    }
    return p;
}

inline std::string cgroup2_root()
{
    return storm::cgroupfs::find_mount("/proc/self/mountinfo", "cgroup2", "");
}
inline std::string cgroup2_of(pid_t p) { return storm::cgroupfs::cgroup_of("/proc", p, ""); }

// A freezer's setup for this test process, or none where the freezer
// cannot be used (not root, no cgroup v2 mounted: the test never mounts
// one on the host).
inline std::optional<FreezerSetup> freezer_setup()
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

inline bool within(const std::function<bool()> &f, std::chrono::milliseconds t = 2000ms)
{
    auto until = std::chrono::steady_clock::now() + t;
    while (!f()) {
        if (std::chrono::steady_clock::now() > until)
            return false;
        std::this_thread::sleep_for(1ms);
    }
    return true;
}

inline bool reaped(pid_t p)
{
    return within([p] { return waitpid(p, nullptr, WNOHANG) == p; });
}

} // namespace gang_fixture
