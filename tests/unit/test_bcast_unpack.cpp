// Unit tests of storm-bcast's relocation step (tools/bcast_unpack.cpp)
// against a stand-in for srun (first in PATH) that records its arguments
// and runs the task's command once per node with SLURMD_NODENAME set, as
// srun's tasks have it: a node whose command fails is named with its
// status, a node that never reports is named too, the command runs with
// STORM_BCAST_DEST, and srun is asked for one task per node of the
// broadcast's nodes, overlapping the job's other steps, in the directory;
// a step past its timeout is cancelled, naming the nodes still running.
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/unit/cmocka.hpp"
#include "tests/unit/helpers.hpp"
#include "tools/bcast_unpack.hpp"

using namespace storm::tools;
using test_helpers::contains;
using test_helpers::slurp;
using test_helpers::TempDir;

namespace {

TempDir *g_tmp;
std::string g_dir;

int setup(void **)
{
    g_tmp = new TempDir("storm-unpack");
    g_dir = g_tmp->path;
    if (g_dir.empty())
        return -1;
    std::ofstream srun(g_dir + "/srun");
    srun << "#!/bin/sh\n"
            "printf '%s\\n' \"$@\" > \"$STORM_TEST_ARGS\"\n"
            "while [ \"$1\" != /bin/sh ]; do shift; done\n"
            // as srun: SIGTERM kills the tasks and ends it
            "trap 'kill -KILL $task 2> /dev/null; exit 143' TERM\n"
            "for n in vn1 vn2; do SLURMD_NODENAME=$n \"$@\" & task=$!; wait $task; done\n"
            "exit \"${STORM_TEST_RC:-0}\"\n";
    srun.close();
    chmod((g_dir + "/srun").c_str(), 0755);
    std::string path = g_dir + ":" + (getenv("PATH") ? getenv("PATH") : "/usr/bin:/bin");
    setenv("PATH", path.c_str(), 1);
    setenv("STORM_TEST_ARGS", (g_dir + "/args").c_str(), 1);
    return 0;
}

int teardown(void **)
{
    delete g_tmp;
    return 0;
}

void test_failed_and_silent_nodes(void **)
{
    const std::string out = g_dir + "/out";
    auto r = run_on_nodes(
        42, {"vn1", "vn2", "vn3"}, "vn[1-3]", "/tmp", "/tmp/env",
        "[ \"$SLURMD_NODENAME\" != vn2 ] || exit 3; echo \"$SLURMD_NODENAME $PWD $STORM_BCAST_DEST\" >> " +
            sh_quote(out));
    assert_int_equal(r.srun_status, 0);
    assert_int_equal(r.failed.size(), 2);
    assert_string_equal(r.failed[0].c_str(), "vn2 (exit 3)");
    assert_string_equal(r.failed[1].c_str(), "vn3 (no answer)");
    char cwd[4096];
    assert_non_null(getcwd(cwd, sizeof cwd)); // (the stand-in runs where it is started)
    assert_string_equal(slurp(out).c_str(), ("vn1 " + std::string(cwd) + " /tmp/env\n").c_str());
    const std::string args = slurp(g_dir + "/args");
    for (const char *a : {"--jobid=42\n", "--overlap\n", "--nodes=3\n", "--ntasks=3\n",
                          "--ntasks-per-node=1\n", "--nodelist=vn[1-3]\n", "--chdir=/tmp\n"})
        assert_true(contains(args, a));
}

void test_all_well(void **)
{
    auto r = run_on_nodes(7, {"vn1", "vn2"}, "vn[1-2]", "/tmp", "/tmp/env", "true");
    assert_int_equal(r.failed.size(), 0);
    assert_int_equal(r.srun_status, 0);
    setenv("STORM_TEST_RC", "9", 1);
    r = run_on_nodes(7, {"vn1", "vn2"}, "vn[1-2]", "/tmp", "/tmp/env", "true");
    unsetenv("STORM_TEST_RC");
    assert_int_equal(r.failed.size(), 0);
    assert_int_equal(r.srun_status, 9);
}

// A step that outlives its timeout is cancelled (srun gets SIGTERM), and
// the nodes that had not ended it are named as still running it.
void test_timeout(void **)
{
    auto t0 = std::chrono::steady_clock::now();
    auto r = run_on_nodes(7, {"vn1", "vn2", "vn3"}, "vn[1-3]", "/tmp", "/tmp/env",
                          "[ \"$SLURMD_NODENAME\" != vn2 ] || exec sleep 5", std::chrono::seconds(1));
    double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    assert_true(r.timed_out);
    assert_int_equal(r.srun_status, 143);
    assert_int_equal(r.failed.size(), 2);
    assert_string_equal(r.failed[0].c_str(), "vn2 (still running)");
    assert_string_equal(r.failed[1].c_str(), "vn3 (still running)");
    assert_true(took >= 1 && took < 4);
    // within the limit: as without one
    r = run_on_nodes(7, {"vn1", "vn2"}, "vn[1-2]", "/tmp", "/tmp/env", "sleep 0.2", std::chrono::seconds(5));
    assert_false(r.timed_out);
    assert_int_equal(r.failed.size(), 0);
    assert_int_equal(r.srun_status, 0);
}

void test_quoting(void **)
{
    assert_string_equal(sh_quote("a'b c").c_str(), "'a'\\''b c'");
    assert_true(contains(venv_relocate_command("print('x y')\n"),
                         "\"$STORM_BCAST_DEST/bin/python3\" -c 'print('\\''x y'\\'')\n' \"$STORM_BCAST_DEST\""));
}

// The venv step's command carries the program's text (python3 -c), quotes
// and newlines kept, and gives it DEST as its first argument: the nodes
// need no copy of the program.
void test_venv_command_runs(void **)
{
    if (access("/usr/bin/python3", X_OK) != 0)
        skip();
    const std::string venv = g_dir + "/venv";
    assert_int_equal(mkdir(venv.c_str(), 0755), 0);
    assert_int_equal(mkdir((venv + "/bin").c_str(), 0755), 0);
    assert_int_equal(symlink("/usr/bin/python3", (venv + "/bin/python3").c_str()), 0);
    const std::string program = "import sys\n"
                                "# it's 'quoted' and \"double-quoted\"\n"
                                "open(sys.argv[1] + '/ran', 'a').write('%s %s\\n' % (sys.argv[0], sys.argv[1]))\n";
    auto r = run_on_nodes(7, {"vn1", "vn2"}, "vn[1-2]", "/tmp", venv, venv_relocate_command(program));
    assert_int_equal(r.srun_status, 0);
    assert_int_equal(r.failed.size(), 0);
    assert_string_equal(slurp(venv + "/ran").c_str(), ("-c " + venv + "\n-c " + venv + "\n").c_str());
}

} // namespace

int main()
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_failed_and_silent_nodes),
        cmocka_unit_test(test_all_well),
        cmocka_unit_test(test_venv_command_runs),
        cmocka_unit_test(test_timeout),
        cmocka_unit_test(test_quoting),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
