// The PMPI library (cosched/pmpi) end to end, without a cluster: two
// unmodified MPI singletons (tests/unit/cosched_ping.c) with the library
// preloaded, as --storm-cosched does, against the local scheduler on a
// real socket (fake enforcer, the agent's verifier on the real /proc, the
// jobs admitted as the pool does when slurmstepd opens their coscheduled
// contexts).  They register at MPI_Init, their arrivals switch the node
// between their jobs, and they unregister at MPI_Finalize; a third one,
// killed, is unregistered by its connection closing; one of a job outside
// the coscheduled partitions, and one whose environment claims a
// coscheduled partition without a coscheduled context, are refused; one
// whose step slurmstepd did not give the socket says why
// (STORM_COSCHED_REFUSED).  Against a fake agent that counts:
// every receive path the library hooks reports each receive exactly once,
// and sends never.
#include <fstream>

#include "tests/unit/cmocka.hpp"

#include <csignal>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include <event2/event.h>

#include "cosched/local.hpp"
#include "lib/node/cosched_protocol.h"
#include "tests/unit/helpers.hpp"

using namespace storm;
using namespace storm::cosched;
using namespace std::chrono_literals;
using test_helpers::contains;

namespace {

std::vector<std::string> g_log;
void capture_sink(LogLevel, const char *line) { g_log.emplace_back(line); }

struct FakeEnforcer : Enforcer {
    std::vector<std::string> *calls;
    explicit FakeEnforcer(std::vector<std::string> *c) : calls(c) {}
    const char *name() const noexcept override { return "fake"; }
    void attach(uint32_t job, const std::vector<pid_t> &, bool) override
    {
        calls->push_back("attach " + std::to_string(job));
    }
    void set_scheduled(uint32_t job, bool on) override
    {
        calls->push_back((on ? "on " : "off ") + std::to_string(job));
    }
    void release(uint32_t job) override { calls->push_back("release " + std::to_string(job)); }
};

// `sock` empty: no STORM_COSCHED_SOCKET, and `refused` (if any) in
// STORM_COSCHED_REFUSED, as slurmstepd does in a step not coscheduled.
pid_t run_ping(const std::string &sock, uint32_t job, const char *partition, int rounds,
               const std::string &err, const char *refused = nullptr)
{
    pid_t p = fork();
    if (p == 0) {
        std::string j = std::to_string(job);
        setenv("SLURM_JOB_ID", j.c_str(), 1);
        setenv("SLURM_JOB_PARTITION", partition, 1);
        setenv("SLURM_PROCID", "0", 1);
        if (!sock.empty())
            setenv(STORM_COSCHED_SOCKET_ENV, sock.c_str(), 1);
        if (refused)
            setenv(STORM_COSCHED_REFUSED_ENV, refused, 1);
        setenv("STORM_COSCHED_INTERVAL_US", "1000", 1);
        setenv("OMPI_MCA_ess_singleton_isolated", "1", 1); // no orted
        setenv("LD_PRELOAD", STORM_PMPI_SO, 1);
        if (!freopen(err.c_str(), "w", stderr))
            _exit(126);
        std::string n = std::to_string(rounds);
        execl(STORM_PING, STORM_PING, n.c_str(), static_cast<char *>(nullptr));
        _exit(127);
    }
    return p;
}

std::string slurp(const std::string &path)
{
    std::ifstream in(path);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void test_pmpi_end_to_end(void **)
{
    if (access(STORM_PMPI_SO, R_OK) != 0 || access(STORM_PING, X_OK) != 0)
        skip();
    event_base *base = event_base_new();
    char tmpl[] = "/tmp/storm-cosched-pmpi.XXXXXX";
    std::string dir = mkdtemp(tmpl);
    std::vector<std::string> calls;
    LocalSetup s;
    s.socket_path = dir + "/" STORM_COSCHED_SOCKET_NAME;
    s.config.partitions = {"work"};
    s.config.slice = 10s;
    s.config.gmet = 0us;
    auto admissions = std::make_shared<Admissions>();
    for (uint32_t j : {41, 42, 43})
        admissions->open(j, getuid());
    s.verifier = make_verifier(nullptr, admissions, {"work"});
    s.make_enforcer = [&calls] { return std::make_unique<FakeEnforcer>(&calls); };
    auto local = std::make_unique<Local>(base, std::move(s), Logger("cosched-test"));
    local->start();
    auto spin = [&] {
        timeval tv{0, 10000};
        event_base_loopexit(base, &tv);
        event_base_dispatch(base);
    };
    std::string sock = dir + "/" STORM_COSCHED_SOCKET_NAME;
    pid_t a = run_ping(sock, 41, "work", 40, dir + "/a.err");
    pid_t b = run_ping(sock, 42, "work", 40, dir + "/b.err");
    pid_t c = run_ping(sock, 43, "work", 100000, dir + "/c.err");
    pid_t d = run_ping(sock, 44, "debug", 5, dir + "/d.err");
    pid_t e = run_ping(sock, 45, "work", 5, dir + "/e.err");
    pid_t f = run_ping("", 46, "debug", 5, dir + "/f.err", "job 46's partition \"debug\" is not coscheduled");
    std::vector<pid_t> live = {a, b, d, e, f};
    std::map<pid_t, int> st;
    bool c_registered = false;
    for (int i = 0; i < 3000 && !live.empty(); ++i) {
        spin();
        if (!c_registered && local->tasks(43) == 1) {
            c_registered = true;
            kill(c, SIGKILL); // dies without MPI_Finalize
            live.push_back(c);
        }
        for (auto it = live.begin(); it != live.end();) {
            int x = 0;
            if (waitpid(*it, &x, WNOHANG) == *it) {
                st[*it] = x;
                it = live.erase(it);
            } else
                ++it;
        }
    }
    for (int i = 0; i < 20; ++i)
        spin();
    assert_true(live.empty());
    assert_true(c_registered);
    for (pid_t p : {a, b, d, e, f})
        assert_true(WIFEXITED(st[p]) && WEXITSTATUS(st[p]) == 0);
    auto has = [&](const std::string &x) { return std::find(calls.begin(), calls.end(), x) != calls.end(); };
    for (const char *x : {"attach 41", "attach 42", "attach 43", "release 41", "release 42", "release 43"})
        if (!has(x))
            fail_msg("no \"%s\" among the enforcer's calls", x);
    for (const char *x : {"attach 44", "attach 45", "attach 46"})
        assert_false(has(x));
    // The two jobs' arrivals reached the local scheduler as requests of
    // unknown status (which do not move a job picked at an aligned instant).
    const auto &stats = local->scheduler().stats();
    assert_true(stats.tick_held + stats.request_switches >= 2);
    assert_int_equal(stats.false_requests, 0);
    assert_int_equal(local->scheduler().jobs(), 0);
    // What t0009 looks for: "refused coscheduling.*partition "debug" is
    // not coscheduled".
    assert_true(
        contains(slurp(dir + "/d.err"),
                 "the node agent refused coscheduling: cannot register for job 44: "
                 "job 44 is not coscheduled on this node (its partition \"debug\" is not coscheduled)"));
    assert_true(contains(slurp(dir + "/e.err"),
                         "the node agent refused coscheduling: cannot register for job 45: "
                         "job 45 is not coscheduled on this node: slurmstepd opened no "
                         "coscheduled step of it here"));
    assert_true(contains(slurp(dir + "/f.err"),
                         "storm-cosched: rank 0 of job 46: slurmstepd refused "
                         "coscheduling: job 46's partition \"debug\" is not coscheduled"));
    local.reset();
    event_base_free(base);
    std::system(("rm -rf " + dir).c_str());
}

uint32_t be32(const unsigned char *p)
{
    return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

void test_pmpi_counts_every_receive(void **)
{
    if (access(STORM_PMPI_SO, R_OK) != 0 || access(STORM_PING, X_OK) != 0)
        skip();
    char tmpl[] = "/tmp/storm-cosched-pmpi.XXXXXX";
    std::string dir = mkdtemp(tmpl), sock = dir + "/agent.sock";
    int lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    std::memcpy(sa.sun_path, sock.c_str(), sock.size() + 1);
    assert_int_equal(bind(lfd, reinterpret_cast<sockaddr *>(&sa), sizeof sa), 0);
    assert_int_equal(listen(lfd, 4), 0);
    pid_t child = fork();
    if (child == 0) {
        setenv("SLURM_JOB_ID", "51", 1);
        setenv("SLURM_PROCID", "3", 1);
        setenv(STORM_COSCHED_SOCKET_ENV, sock.c_str(), 1);
        setenv("STORM_COSCHED_INTERVAL_US", "0", 1); // one request per completion call
        setenv("OMPI_MCA_ess_singleton_isolated", "1", 1);
        setenv("LD_PRELOAD", STORM_PMPI_SO, 1);
        if (!freopen((dir + "/out").c_str(), "w", stdout))
            _exit(126);
        execl(STORM_PING, STORM_PING, "all", "6", static_cast<char *>(nullptr));
        _exit(127);
    }
    pollfd p{lfd, POLLIN, 0};
    assert_int_equal(poll(&p, 1, 20000), 1);
    int fd = accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
    assert_true(fd >= 0);
    unsigned char m[STORM_COSCHED_MAX_MSG];
    assert_int_equal(recv(fd, m, sizeof m, 0), STORM_COSCHED_MSG_SIZE);
    assert_int_equal(m[1], STORM_COSCHED_REGISTER);
    assert_int_equal(be32(m + 4), 51);
    assert_int_equal(be32(m + 8), 3);
    unsigned char ok[STORM_COSCHED_MSG_SIZE] = {STORM_COSCHED_VERSION, STORM_COSCHED_OK, 0}; // not scheduled
    assert_int_equal(send(fd, ok, sizeof ok, 0), static_cast<ssize_t>(sizeof ok));
    uint64_t counted = 0, requests = 0;
    bool unregistered = false, bad = false;
    for (;;) {
        pollfd q{fd, POLLIN, 0};
        if (poll(&q, 1, 30000) != 1)
            break;
        ssize_t n = recv(fd, m, sizeof m, 0);
        if (n <= 0)
            break;
        if (n != STORM_COSCHED_MSG_SIZE || be32(m + 4) != 51)
            bad = true;
        else if (m[1] == STORM_COSCHED_SCHEDULE && m[2] == STORM_COSCHED_UNKNOWN) {
            counted += be32(m + 12);
            ++requests;
        } else if (m[1] == STORM_COSCHED_UNREGISTER)
            unregistered = true;
        else
            bad = true;
    }
    int st = 0;
    waitpid(child, &st, 0);
    close(fd);
    close(lfd);
    std::string out = slurp(dir + "/out");
    std::system(("rm -rf " + dir).c_str());
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    assert_false(bad);
    assert_true(unregistered);
    unsigned long made = 0;
    assert_int_equal(sscanf(out.c_str(), "receives %lu", &made), 1);
    if (counted != made)
        fail_msg("the library reported %llu arrivals in %llu requests; the program made %lu receives",
                 static_cast<unsigned long long>(counted), static_cast<unsigned long long>(requests), made);
}

} // namespace

int main()
{
    set_log_sink(capture_sink);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pmpi_end_to_end),
        cmocka_unit_test(test_pmpi_counts_every_receive),
    };
    return cmocka_run_group_tests_name("cosched_pmpi", tests, nullptr, nullptr);
}
