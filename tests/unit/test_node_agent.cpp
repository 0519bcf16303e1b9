// Unit tests of the node agent's life cycle (lib/agent/node_agent.*): the
// thread starts, its event loop answers, and stop() ends it cleanly, in
// any order and any number of times.
#include "tests/unit/cmocka.hpp"

#include <chrono>
#include <dirent.h>
#include <unistd.h>
#include <string>
#include <thread>
#include <vector>

#include "lib/agent/node_agent.hpp"

using storm::agent::AgentConfig;
using storm::agent::NodeAgent;

namespace {

std::vector<std::string> g_lines;
void capture_sink(storm::LogLevel, const char *line) { g_lines.emplace_back(line); }

int count_threads()
{
    int n = 0;
    if (DIR *d = opendir("/proc/self/task")) {
        while (dirent *e = readdir(d))
            if (e->d_name[0] != '.')
                ++n;
        closedir(d);
    }
    return n;
}

bool wait_for_wakeups(const NodeAgent &a, uint64_t n)
{
    for (int i = 0; i < 2000; ++i) {
        if (a.wakeups() >= n)
            return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return false;
}

// A joined thread can stay listed in /proc/self/task for a moment: the
// kernel wakes the joiner before it has finished reaping the thread.
bool threads_become(int n)
{
    for (int i = 0; i < 1000; ++i) {
        if (count_threads() == n)
            return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return false;
}

void test_start_ping_stop(void **)
{
    g_lines.clear();
    int before = count_threads();
    NodeAgent a(AgentConfig{}, storm::Logger("switch/rdma"));
    assert_false(a.running());
    assert_false(a.ping());
    a.start();
    assert_true(a.running());
    assert_int_equal(count_threads(), before + 1);
    for (int i = 0; i < 100; ++i)
        assert_true(a.ping());
    assert_true(wait_for_wakeups(a, 100));
    a.stop();
    assert_false(a.running());
    assert_true(threads_become(before));
    assert_false(a.ping());
    // One started line and one stopped line, both prefixed with the plugin.
    assert_int_equal(g_lines.size(), 2);
    assert_true(g_lines[0].rfind("switch/rdma: node agent started (port 6830, fanout 8", 0) == 0);
    assert_string_equal(g_lines[1].c_str(), "switch/rdma: node agent stopped");
}

void test_stop_is_idempotent_and_destructor_joins(void **)
{
    int before = count_threads();
    {
        NodeAgent a(AgentConfig{}, storm::Logger("t"));
        a.stop(); // never started
        a.start();
        a.stop();
        a.stop();
    }
    {
        NodeAgent b(AgentConfig{}, storm::Logger("t"));
        b.start(); // destroyed while running
    }
    assert_true(threads_become(before));
}

void test_double_start_refused(void **)
{
    NodeAgent a(AgentConfig{}, storm::Logger("t"));
    a.start();
    bool threw = false;
    try {
        a.start();
    } catch (const std::logic_error &) {
        threw = true;
    }
    assert_true(threw);
    assert_true(a.running());
    a.stop();
}

void test_many_cycles(void **)
{
    int before = count_threads();
    for (int i = 0; i < 50; ++i) {
        NodeAgent a(AgentConfig{}, storm::Logger("t"));
        a.start();
        assert_true(a.ping());
        a.stop();
    }
    // A joined thread may linger in /proc/self/task for a moment under load.
    for (int i = 0; i < 100 && count_threads() != before; ++i)
        usleep(10000);
    assert_int_equal(count_threads(), before);
}

} // namespace

int main()
{
    storm::set_log_sink(capture_sink);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_start_ping_stop),
        cmocka_unit_test(test_stop_is_idempotent_and_destructor_joins),
        cmocka_unit_test(test_double_start_refused),
        cmocka_unit_test(test_many_cycles),
    };
    return cmocka_run_group_tests_name("node_agent", tests, nullptr, nullptr);
}
