// Unit tests of the node agent's life cycle (agent/node_agent.*): the
// thread starts, its event loop answers, and stop() ends it cleanly, in
// any order and any number of times; with storm_cosched_partitions it
// serves coscheduling's request socket, where a job may register only while
// slurmstepd has a coscheduled context of it open on the agent's pool.
// The loop thread runs at its own nice value (storm_agent_nice), and the
// file workers it starts at the process's.
#include <fstream>

#include "tests/unit/cmocka.hpp"

#include <chrono>
#include <cstring>
#include <dirent.h>
#include <atomic>
#include <event2/event.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <poll.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "lib/node/cosched_protocol.h"
#include "agent/node_agent.hpp"
#include "launch_bcast/fs_worker.hpp"
#include "lib/common/thread_nice.hpp"
#include "switch_rdma/control.hpp"
#include "tests/unit/prim_fixture.hpp"

using storm::agent::AgentConfig;
using storm::agent::NodeAgent;

namespace {

std::vector<std::string> g_lines;
void capture_sink(storm::LogLevel, const char *line) { g_lines.emplace_back(line); }

// The thread ids of this process.
std::set<std::string> tasks()
{
    std::set<std::string> ids;
    if (DIR *d = opendir("/proc/self/task")) {
        while (dirent *e = readdir(d))
            if (e->d_name[0] != '.')
                ids.insert(e->d_name);
        closedir(d);
    }
    return ids;
}

// The threads running now that were not running at `before`. Counting by
// id, not by number: a thread an earlier test joined can still be listed
// when `before` is taken and be gone by the time this is.
int new_threads(const std::set<std::string> &before)
{
    int n = 0;
    for (const auto &t : tasks())
        n += before.count(t) == 0;
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

// Whether every thread started since `before` is gone, within 2 s. A
// joined thread can stay listed in /proc/self/task for a moment: the kernel
// wakes the joiner before it has finished reaping the thread.
bool no_new_threads(const std::set<std::string> &before)
{
    for (int i = 0; i < 2000; ++i) {
        if (new_threads(before) == 0)
            return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return false;
}

void test_start_ping_stop(void **)
{
    g_lines.clear();
    const auto before = tasks();
    AgentConfig config;
    if (geteuid() != 0)
        config.nice = 0; // raising it needs CAP_SYS_NICE: a warning line
    NodeAgent a(config, storm::Logger("switch/rdma"));
    assert_false(a.running());
    assert_false(a.ping());
    a.start();
    assert_true(a.running());
    assert_int_equal(new_threads(before), 1);
    for (int i = 0; i < 100; ++i)
        assert_true(a.ping());
    assert_true(wait_for_wakeups(a, 100));
    a.stop();
    assert_false(a.running());
    assert_true(no_new_threads(before));
    assert_false(a.ping());
    // One started line and one stopped line, both prefixed with the plugin.
    assert_int_equal(g_lines.size(), 2);
    assert_true(g_lines[0].rfind("switch/rdma: node agent started (port 6830, fanout 8", 0) == 0);
    assert_string_equal(g_lines[1].c_str(), "switch/rdma: node agent stopped");
}

// The agent's loop thread runs at the configured nice value, the rest of
// the process at its own; where the value cannot be set, a warning says so
// and the agent runs all the same.
void test_agent_thread_nice(void **)
{
    g_lines.clear();
    errno = 0;
    int process_nice = getpriority(PRIO_PROCESS, static_cast<id_t>(getpid()));
    assert_int_equal(errno, 0);
    AgentConfig config;
    config.nice = geteuid() == 0 ? -7 : process_nice - 1; // lower than the process's: EACCES unless root
    NodeAgent a(config, storm::Logger("switch/rdma"));
    a.start();
    int agent_nice = 99;
    for (const auto &t : tasks()) {
        std::ifstream comm("/proc/self/task/" + t + "/comm");
        std::string name;
        std::getline(comm, name);
        if (name == "storm-agent")
            agent_nice = getpriority(PRIO_PROCESS, static_cast<id_t>(std::stoi(t)));
    }
    a.stop();
    assert_int_equal(getpriority(PRIO_PROCESS, static_cast<id_t>(getpid())), process_nice);
    if (geteuid() == 0) {
        assert_int_equal(agent_nice, -7);
        assert_int_equal(g_lines.size(), 2);
    } else {
        assert_int_equal(agent_nice, process_nice);
        assert_int_equal(g_lines.size(), 3);
        assert_true(g_lines[0].find("the node agent runs at slurmd's priority, not at nice " +
                                    std::to_string(process_nice - 1) + ": Permission denied") != std::string::npos);
    }
}

// A thread the raised agent starts for a user's work (a broadcast's file
// worker) runs at the process's nice value, not at the agent's.
void test_worker_at_process_nice(void **)
{
    if (geteuid() != 0)
        skip(); // raising a thread needs CAP_SYS_NICE
    int process_nice = getpriority(PRIO_PROCESS, static_cast<id_t>(getpid()));
    std::atomic<int> raised{99}, worker{99};
    std::thread agent([&] { // not the process's first thread, whose value is the process's
        assert_string_equal(storm::set_thread_nice(process_nice - 5).c_str(), "");
        raised = getpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)));
        event_base *base = event_base_new();
        {
            storm::bcast::FsWorker w(std::make_shared<storm::bcast::Inbox>(base));
            std::atomic<bool> done{false};
            w.submit("its nice value", [&] {
                worker = getpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)));
                done = true;
                return storm::bcast::FsWorker::Done();
            });
            while (!done)
                std::this_thread::sleep_for(std::chrono::milliseconds(1));
            assert_true(w.stop(std::chrono::milliseconds(2000)));
        }
        event_base_free(base);
    });
    agent.join();
    assert_int_equal(raised.load(), process_nice - 5);
    assert_int_equal(worker.load(), process_nice);
}

void test_stop_is_idempotent_and_destructor_joins(void **)
{
    const auto before = tasks();
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
    assert_true(no_new_threads(before));
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
    const auto before = tasks();
    for (int i = 0; i < 50; ++i) {
        NodeAgent a(AgentConfig{}, storm::Logger("t"));
        a.start();
        assert_true(a.ping());
        a.stop();
    }
    assert_true(no_new_threads(before));
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
        net.cosched.emplace();
        net.cosched->socket_path = sock;
        net.cosched->group = "storm-cosched-agent-test-" + std::to_string(getpid());
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

// A task of `job` (run as this program again, with SLURM_JOB_ID=<job> in
// the environment its /proc/<pid>/environ shows): registers on `sock`,
// prints "OK" or the agent's refusal, and exits (which unregisters it).
int task_main(const char *sock, const char *job)
{
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    std::snprintf(sa.sun_path, sizeof sa.sun_path, "%s", sock);
    if (connect(fd, reinterpret_cast<sockaddr *>(&sa), sizeof sa) != 0) {
        std::printf("cannot connect: %s", std::strerror(errno));
        return 1;
    }
    uint32_t j = static_cast<uint32_t>(std::strtoul(job, nullptr, 10));
    unsigned char m[STORM_COSCHED_MSG_SIZE] = {STORM_COSCHED_VERSION,
                                               STORM_COSCHED_REGISTER,
                                               0,
                                               0,
                                               static_cast<unsigned char>(j >> 24),
                                               static_cast<unsigned char>(j >> 16),
                                               static_cast<unsigned char>(j >> 8),
                                               static_cast<unsigned char>(j)};
    if (send(fd, m, sizeof m, 0) != static_cast<ssize_t>(sizeof m))
        return 1;
    pollfd p{fd, POLLIN, 0};
    char buf[512];
    ssize_t n = poll(&p, 1, 5000) == 1 ? recv(fd, buf, sizeof buf - 1, 0) : -1;
    if (n == STORM_COSCHED_MSG_SIZE && buf[1] == STORM_COSCHED_OK)
        std::printf("OK");
    else if (n > STORM_COSCHED_MSG_SIZE && buf[1] == STORM_COSCHED_ERROR)
        std::printf("%.*s", static_cast<int>(n - STORM_COSCHED_MSG_SIZE), buf + STORM_COSCHED_MSG_SIZE);
    else
        std::printf("no answer");
    return 0;
}

std::string register_as_task(const std::string &sock, uint32_t job)
{
    int p[2];
    assert_int_equal(pipe(p), 0);
    std::string j = std::to_string(job), env = "SLURM_JOB_ID=" + j;
    pid_t c = fork();
    if (c == 0) {
        dup2(p[1], 1);
        close(p[0]);
        char *envp[] = {env.data(), nullptr};
        execle("/proc/self/exe", "test_node_agent", "--register", sock.c_str(), j.c_str(),
               static_cast<char *>(nullptr), envp);
        _exit(127);
    }
    close(p[1]);
    std::string out;
    char buf[512];
    ssize_t n;
    while ((n = read(p[0], buf, sizeof buf)) > 0)
        out.append(buf, static_cast<size_t>(n));
    close(p[0]);
    int st = 0;
    waitpid(c, &st, 0);
    return out;
}

// The trust chain in the agent: its pool records the coscheduled contexts
// slurmstepd opens, and the local scheduler admits their jobs only, while
// they are open; a context that is not coscheduled admits nothing.
void test_cosched_admission(void **)
{
    char tmpl[] = "/tmp/storm-agent-test.XXXXXX";
    std::string dir = mkdtemp(tmpl), sock = dir + "/" STORM_COSCHED_SOCKET_NAME,
                pool = dir + "/" + storm::rdma::control::socket_name;
    storm::agent::AgentNetwork net;
    net.nodes = {prim_fixture::loopback(prim_fixture::free_port())};
    net.self = 0;
    net.auth = std::make_unique<prim_fixture::FakeAuth>();
    net.trusted = {getuid()}; // this test plays slurmstepd
    net.pool.emplace();
    net.pool->socket_path = pool;
    net.cosched.emplace();
    net.cosched->socket_path = sock;
    net.cosched->group = "storm-cosched-agent-test-" + std::to_string(getpid());
    NodeAgent a(AgentConfig::from_switch_parameters("storm_cosched_partitions=work"), storm::Logger("t"),
                std::move(net));
    a.start();
    storm::rdma::Context c;
    c.id = 2;
    c.job_id = 71;
    c.uid = getuid();
    c.divisions = 4; // a quarter of the pool each
    c.port_base = 40000;
    c.ntasks = 1;
    c.nodes = {{prim_fixture::loopback(0).sin_addr.s_addr, {0}}};
    c.cosched = true;
    std::string e = register_as_task(sock, 71);
    assert_true(std::strstr(e.c_str(), "job 71 is not coscheduled on this node: slurmstepd opened no "
                                       "coscheduled step of it here") != nullptr);
    // slurmstepd opens the step's coscheduled context: the job may register.
    storm::rdma::control::request(pool, storm::rdma::control::open(c));
    assert_int_equal(a.admissions().steps(71), 1);
    assert_string_equal(register_as_task(sock, 71).c_str(), "OK");
    // Its step ends: no more.
    storm::rdma::control::request(pool, storm::rdma::control::close(2, 71, 0));
    assert_false(a.admissions().admitted(71));
    assert_non_null(std::strstr(register_as_task(sock, 71).c_str(), "job 71 is not coscheduled"));
    // A context that is not coscheduled admits nothing.
    c.id = 3;
    c.job_id = 72;
    c.cosched = false;
    storm::rdma::control::request(pool, storm::rdma::control::open(c));
    assert_non_null(std::strstr(register_as_task(sock, 72).c_str(), "job 72 is not coscheduled"));
    // The agent's end ends every admission.
    c.id = 4;
    c.job_id = 73;
    c.cosched = true;
    storm::rdma::control::request(pool, storm::rdma::control::open(c));
    assert_true(a.admissions().admitted(73));
    a.stop();
    assert_int_equal(a.admissions().jobs(), 0);
    rmdir(dir.c_str());
}

} // namespace

int main(int argc, char **argv)
{
    if (argc == 4 && std::strcmp(argv[1], "--register") == 0)
        return task_main(argv[2], argv[3]);
    storm::set_log_sink(capture_sink);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_start_ping_stop),
        cmocka_unit_test(test_agent_thread_nice),
        cmocka_unit_test(test_worker_at_process_nice),
        cmocka_unit_test(test_stop_is_idempotent_and_destructor_joins),
        cmocka_unit_test(test_double_start_refused),
        cmocka_unit_test(test_many_cycles),
        cmocka_unit_test(test_cosched_socket),
        cmocka_unit_test(test_cosched_admission),
    };
    return cmocka_run_group_tests_name("node_agent", tests, nullptr, nullptr);
}
