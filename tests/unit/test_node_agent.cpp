// Unit tests of the node agent's life cycle (lib/agent/node_agent.*): the
// thread starts, its event loop answers, and stop() ends it cleanly, in
// any order and any number of times; with storm_cosched_partitions it
// serves coscheduling's request socket.
#include "tests/unit/cmocka.hpp"

#include <chrono>
#include <cstring>
#include <dirent.h>
#include <poll.h>
#include <sys/un.h>
#include <unistd.h>
#include <string>
#include <thread>
#include <vector>

#include "cosched/protocol.h"
#include "lib/agent/node_agent.hpp"
#include "tests/unit/prim_fixture.hpp"

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

// With storm_cosched_partitions the agent serves the request socket (and
// refuses this process: it is no task of a Slurm job); without, it has none.
void test_cosched_socket(void **)
{
    char tmpl[] = "/tmp/storm-agent-test.XXXXXX";
    std::string dir = mkdtemp(tmpl), sock = dir + "/" STORM_COSCHED_SOCKET_NAME;
    for (const char *params : {"storm_cosched_partitions=work", ""}) {
        storm::agent::AgentNetwork net;
        net.nodes = {prim_fixture::loopback(prim_fixture::free_port())};
        net.self = 0;
        net.auth = std::make_unique<prim_fixture::FakeAuth>();
        net.cosched_socket = sock;
        net.cosched_group = "storm-cosched-agent-test-" + std::to_string(getpid());
        AgentConfig c = AgentConfig::from_switch_parameters(params);
        NodeAgent a(c, storm::Logger("t"), std::move(net));
        a.start();
        bool on = *params != 0;
        assert_int_equal(access(sock.c_str(), F_OK) == 0, on);
        if (on) {
            int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
            sockaddr_un sa{};
            sa.sun_family = AF_UNIX;
            std::memcpy(sa.sun_path, sock.c_str(), sock.size() + 1);
            assert_int_equal(connect(fd, reinterpret_cast<sockaddr *>(&sa), sizeof sa), 0);
            unsigned char m[STORM_COSCHED_MSG_SIZE] = {
                STORM_COSCHED_VERSION, STORM_COSCHED_REGISTER, 0, 0, 0, 0, 0, 5};
            assert_int_equal(send(fd, m, sizeof m, 0), static_cast<ssize_t>(sizeof m));
            pollfd p{fd, POLLIN, 0};
            assert_int_equal(poll(&p, 1, 5000), 1);
            char buf[512];
            ssize_t n = recv(fd, buf, sizeof buf - 1, 0);
            assert_true(n > STORM_COSCHED_MSG_SIZE && buf[1] == STORM_COSCHED_ERROR);
            buf[n] = 0;
            assert_non_null(std::strstr(buf + STORM_COSCHED_MSG_SIZE, "not a task of a Slurm job"));
            close(fd);
        }
        a.stop();
        assert_int_equal(access(sock.c_str(), F_OK), -1); // removed
    }
    rmdir(dir.c_str());
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
        cmocka_unit_test(test_cosched_socket),
    };
    return cmocka_run_group_tests_name("node_agent", tests, nullptr, nullptr);
}
