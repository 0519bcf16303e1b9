// Unit tests of the cgroup v2 freezer alone (sched_gang/freezer.cpp), on
// real processes: frozen and thawed per job, a process of someone else's
// group handed back untouched, release and the destructor giving every
// process back, and a crashed agent's groups thawed and removed by the
// next one.  Skipped where no cgroup v2 can be used (not root, none
// mounted).

#include <csignal>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

#include "lib/common/cgroupfs.hpp"
#include "lib/common/signals.hpp"
#include "sched_gang/freezer.hpp"
// The fixture (its <fstream>) before cmocka.h, whose fail() macro breaks it.
#include "tests/unit/gang_fixture.hpp"
#include "tests/unit/cmocka.hpp"

using namespace gang_fixture;

namespace {

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

} // namespace

int main()
{
    storm::block_sigpipe();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_freezer),
    };
    return cmocka_run_group_tests_name("freezer", tests, nullptr, nullptr);
}
