// Unit tests of the process tree (lib/common/process_tree.hpp): a real
// tree of this test's own processes, and made-up /proc trees for cycles,
// threads, long children files, the limit and a kernel without children
// files.
#include <fstream> // before cmocka's fail() macro
#include <stdexcept>

#include "tests/unit/cmocka.hpp"

#include <algorithm>
#include <csignal>
#include <string>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include "lib/common/process_tree.hpp"
#include "tests/unit/helpers.hpp"

using storm::process_tree;

namespace {

bool has(const std::vector<pid_t> &v, pid_t p) { return std::find(v.begin(), v.end(), p) != v.end(); }

// A made-up /proc: thread `tid` of process `pid` with these children
// (written as the kernel does: "PID PID ").
void thread(const std::string &proc, pid_t pid, pid_t tid, const std::vector<pid_t> &children,
            bool with_file = true)
{
    std::string dir = proc + "/" + std::to_string(pid) + "/task/" + std::to_string(tid);
    assert_int_equal(std::system(("mkdir -p '" + dir + "'").c_str()), 0);
    if (!with_file)
        return;
    std::ofstream f(dir + "/children");
    for (pid_t c : children)
        f << c << ' ';
}

// This process's child, which started a grandchild: both found from the
// child, and from this process; the child first, each once.  A root that
// does not exist adds nothing.
void test_real_tree(void **)
{
    int ready[2];
    assert_int_equal(pipe(ready), 0);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        pid_t grand = fork();
        if (grand == 0) {
            pause();
            _exit(0);
        }
        if (write(ready[1], &grand, sizeof grand) != sizeof grand)
            _exit(1);
        pause();
        _exit(0);
    }
    pid_t grand = 0;
    assert_int_equal(read(ready[0], &grand, sizeof grand), sizeof grand);
    auto tree = process_tree({child}, 100);
    assert_true(tree.has_value());
    assert_false(tree->truncated);
    assert_int_equal(tree->pids.size(), 2);
    assert_int_equal(tree->pids[0], child);
    assert_int_equal(tree->pids[1], grand);
    auto mine = process_tree({getpid(), child, 0x7ffffff0}, 100);
    assert_true(mine.has_value());
    assert_int_equal(mine->pids[0], getpid());
    assert_true(has(mine->pids, child) && has(mine->pids, grand));
    assert_int_equal(std::count(mine->pids.begin(), mine->pids.end(), child), 1);
    assert_false(has(mine->pids, 0x7ffffff0));
    // Over the limit: said, and no more than the limit listed.
    auto cut = process_tree({child}, 1);
    assert_true(cut.has_value());
    assert_true(cut->truncated);
    assert_true(cut->pids.size() <= 1);
    kill(grand, SIGKILL);
    kill(child, SIGKILL);
    waitpid(child, nullptr, 0);
    close(ready[0]);
    close(ready[1]);
    auto gone = process_tree({child}, 100);
    assert_true(gone.has_value());
    assert_int_equal(gone->pids.size(), 0);
}

// Children of every thread; a cycle (a pid reused while the tree is read)
// listed once; a child whose directory is gone left out.
void test_threads_and_cycles(void **)
{
    test_helpers::TempDir proc("storm-proc");
    assert_false(proc.path.empty());
    thread(proc.path, 10, 10, {11, 12});
    thread(proc.path, 11, 11, {10}); // a cycle
    thread(proc.path, 11, 13, {14}); // a second thread of 11
    thread(proc.path, 12, 12, {99}); // 99 is gone
    thread(proc.path, 14, 14, {});
    auto tree = process_tree({10}, 100, proc.path);
    assert_true(tree.has_value());
    assert_false(tree->truncated);
    assert_true((tree->pids == std::vector<pid_t>{10, 11, 12, 14}));
}

// A children file longer than one read (numbers straddle the reads), and
// the limit counting the processes still to read.
void test_long_children_file(void **)
{
    test_helpers::TempDir proc("storm-proc");
    assert_false(proc.path.empty());
    std::vector<pid_t> kids;
    for (pid_t p = 1000000; p < 1001500; ++p)
        kids.push_back(p);
    thread(proc.path, 7, 7, kids);
    for (pid_t p : kids)
        assert_int_equal(mkdir((proc.path + "/" + std::to_string(p)).c_str(), 0755) == 0 &&
                             mkdir((proc.path + "/" + std::to_string(p) + "/task").c_str(), 0755) == 0,
                         1);
    auto tree = process_tree({7}, 2000, proc.path);
    assert_true(tree.has_value());
    assert_false(tree->truncated);
    assert_int_equal(tree->pids.size(), 1501);
    assert_int_equal(tree->pids[1], 1000000);
    assert_int_equal(tree->pids[1500], 1001499);
    auto cut = process_tree({7}, 1500, proc.path);
    assert_true(cut.has_value());
    assert_true(cut->truncated);
    assert_true(cut->pids.size() <= 1500);
}

// A kernel without children files: nullopt, so that the caller lists
// another way; a thread that ended meanwhile (its directory gone) is not
// that.
void test_no_children_files(void **)
{
    test_helpers::TempDir proc("storm-proc");
    assert_false(proc.path.empty());
    thread(proc.path, 20, 20, {}, false);
    assert_false(process_tree({20}, 100, proc.path).has_value());
    thread(proc.path, 21, 21, {});
    auto tree = process_tree({21}, 100, proc.path);
    assert_true(tree.has_value());
    assert_int_equal(tree->pids.size(), 1);
}

} // namespace

int main()
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_real_tree),
        cmocka_unit_test(test_threads_and_cycles),
        cmocka_unit_test(test_long_children_file),
        cmocka_unit_test(test_no_children_files),
    };
    return cmocka_run_group_tests(tests, nullptr, nullptr);
}
