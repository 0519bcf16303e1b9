// Unit tests of the coscheduling request channel (cosched/channel.cpp) in
// the node agent's local scheduler (cosched/local.cpp), against fake tasks
// on its real socket: registration, status pushes and a task's death;
// malformed requests, a process registering for a job it is not part of,
// and a job without a coscheduled context whatever its environment
// claims, each refused with a log line.
// <fstream> before cmocka.h, whose fail() macro breaks it.
#include <fstream>

#include "tests/unit/cmocka.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <poll.h>
#include <set>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include <event2/event.h>

#include "cosched/channel.hpp"
#include "cosched/fair_queue.hpp"
#include "cosched/local.hpp"
#include "lib/node/cosched_protocol.h"
#include "tests/unit/cosched_fixture.hpp"
#include "tests/unit/helpers.hpp"

using namespace cosched_fixture;
using namespace std::chrono_literals;
using test_helpers::contains;

namespace {

struct FakeEnforcer : Enforcer {
    std::vector<std::string> *calls;
    explicit FakeEnforcer(std::vector<std::string> *c) : calls(c) {}
    const char *name() const noexcept override { return "fake"; }
    void attach(uint32_t job, const std::vector<pid_t> &pids, bool on) override
    {
        calls->push_back("attach " + std::to_string(job) + " n=" + std::to_string(pids.size()) +
                         (on ? " on" : " off"));
    }
    void set_scheduled(uint32_t job, bool on) override
    {
        calls->push_back((on ? "on " : "off ") + std::to_string(job));
    }
    void release(uint32_t job) override { calls->push_back("release " + std::to_string(job)); }
};

struct Bench {
    event_base *base = event_base_new();
    std::string dir;
    FakeClock clock;
    std::vector<std::string> calls;
    std::unique_ptr<Local> local;
    // The job step processes the fake StepLister reports, per job.
    std::map<uint32_t, std::vector<pid_t>> steps;
    int listings = 0; // how often the verifier asked the fake StepLister
    // The jobs whose coscheduled contexts "slurmstepd opened" (the pool's
    // part in the agent).
    std::shared_ptr<Admissions> admissions = std::make_shared<Admissions>();

    explicit Bench(std::chrono::microseconds gmet = 0us)
    {
        char tmpl[] = "/tmp/storm-cosched-test.XXXXXX";
        dir = mkdtemp(tmpl);
        mkdir((dir + "/proc").c_str(), 0755);
        mkdir((dir + "/proc/" + std::to_string(getpid())).c_str(), 0755);
        LocalSetup s;
        s.socket_path = dir + "/" STORM_COSCHED_SOCKET_NAME;
        s.stats_path = dir + "/storm-cosched.stats";
        s.config.partitions = {"work"};
        s.config.slice = 10s;
        s.config.gmet = gmet;
        s.verifier = make_verifier(
            [this](const std::set<uint32_t> &jobs, const storm::node::HeldTest &) {
                ++listings;
                std::map<uint32_t, std::vector<pid_t>> out;
                for (uint32_t j : jobs)
                    if (steps.count(j))
                        out[j] = steps[j];
                return out;
            },
            admissions, {"work"}, dir + "/proc");
        s.make_enforcer = [this] { return std::make_unique<FakeEnforcer>(&calls); };
        s.now = clock.now();
        local = std::make_unique<Local>(base, std::move(s), Logger("cosched-test"));
        local->start();
    }
    ~Bench()
    {
        local.reset();
        event_base_free(base);
        std::system(("rm -rf " + dir).c_str());
    }
    // What /proc/<this pid>/environ says (the fake tasks are this process).
    void environ_says(const std::string &job, const std::string &partition)
    {
        std::string env = std::string("HOME=/") + std::string(1, '\0') + "SLURM_JOB_ID=" + job +
                          std::string(1, '\0') + "SLURM_JOB_PARTITION=" + partition + std::string(1, '\0');
        std::ofstream(dir + "/proc/" + std::to_string(getpid()) + "/environ", std::ios::binary) << env;
    }
    void spin(int ms = 20)
    {
        timeval tv{0, ms * 1000};
        event_base_loopexit(base, &tv);
        event_base_dispatch(base);
    }
    // The next aligned instant (at most 100 ms away): the fake clock moves
    // there and the agent's timer, armed for at most 100 ms, fires.
    void pick()
    {
        clock.t += 100ms;
        spin(150);
    }
};

std::string msg(uint8_t type, uint8_t status, uint32_t job, uint32_t rank, uint32_t count)
{
    unsigned char m[STORM_COSCHED_MSG_SIZE] = {STORM_COSCHED_VERSION, type, status, 0};
    for (int i = 0; i < 4; ++i) {
        m[4 + i] = static_cast<unsigned char>(job >> (24 - 8 * i));
        m[8 + i] = static_cast<unsigned char>(rank >> (24 - 8 * i));
        m[12 + i] = static_cast<unsigned char>(count >> (24 - 8 * i));
    }
    return std::string(reinterpret_cast<char *>(m), sizeof m);
}

// A fake task: one connection to the channel.
struct Task {
    int fd = -1;
    explicit Task(Bench &b)
    {
        fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        sockaddr_un sa{};
        sa.sun_family = AF_UNIX;
        std::string p = b.dir + "/" STORM_COSCHED_SOCKET_NAME;
        std::memcpy(sa.sun_path, p.c_str(), p.size() + 1);
        assert_int_equal(connect(fd, reinterpret_cast<sockaddr *>(&sa), sizeof sa), 0);
        b.spin();
    }
    ~Task()
    {
        if (fd >= 0)
            close(fd);
    }
    void send_raw(Bench &b, const std::string &m)
    {
        assert_int_equal(send(fd, m.data(), m.size(), MSG_NOSIGNAL), static_cast<ssize_t>(m.size()));
        b.spin();
    }
    // The next message from the agent: "K1", "T0", "E:<text>", "closed" or "none".
    std::string next()
    {
        unsigned char buf[512];
        ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n == 0)
            return "closed";
        if (n < 0)
            return errno == EAGAIN ? "none" : "closed";
        if (buf[1] == STORM_COSCHED_ERROR)
            return "E:" + std::string(reinterpret_cast<char *>(buf) + STORM_COSCHED_MSG_SIZE,
                                      static_cast<size_t>(n) - STORM_COSCHED_MSG_SIZE);
        return std::string(1, static_cast<char>(buf[1])) + std::to_string(buf[2]);
    }
    std::string reg(Bench &b, uint32_t job, uint32_t rank = 0)
    {
        send_raw(b, msg(STORM_COSCHED_REGISTER, 0, job, rank, 0));
        return next();
    }
};

void test_channel_registration(void **)
{
    Bench b;
    b.steps[7] = {getpid(), 99999};
    b.admissions->open(7, getuid());
    b.admissions->open(8, getuid());
    b.environ_says("7", "work");
    Task t1(b), t2(b);
    // Not scheduled at registration: at the next aligned instant.
    assert_string_equal(t1.reg(b, 7, 0).c_str(), "K0");
    assert_string_equal(t2.reg(b, 7, 1).c_str(), "K0");
    assert_int_equal(b.local->tasks(7), 2);
    assert_int_equal(b.listings, 1); // the second task's check reused the first listing
    assert_int_equal(b.local->scheduler().scheduled(), 0);
    assert_string_equal(b.calls.at(0).c_str(), "attach 7 n=2 off"); // the step's processes
    b.pick();
    assert_int_equal(b.local->scheduler().scheduled(), 7);
    assert_string_equal(b.calls.back().c_str(), "on 7");
    assert_string_equal(t1.next().c_str(), "T1");
    assert_string_equal(t2.next().c_str(), "T1");
    // A second job; then a message arrival from a scheduled sender.
    b.steps[8] = {getpid()};
    b.environ_says("8", "work");
    Task t3(b);
    assert_string_equal(t3.reg(b, 8).c_str(), "K0");
    assert_string_equal(b.calls.back().c_str(), "attach 8 n=1 off");
    t3.send_raw(b, msg(STORM_COSCHED_SCHEDULE, STORM_COSCHED_NOT_SCHEDULED, 8, 3, 1));
    assert_int_equal(b.local->scheduler().scheduled(), 7); // a false request
    t3.send_raw(b, msg(STORM_COSCHED_SCHEDULE, STORM_COSCHED_SCHEDULED, 8, 3, 4));
    assert_int_equal(b.local->scheduler().scheduled(), 8);
    assert_string_equal(t1.next().c_str(), "T0");
    assert_string_equal(t2.next().c_str(), "T0");
    assert_string_equal(t3.next().c_str(), "T1");
    size_t n = b.calls.size();
    assert_string_equal(b.calls[n - 2].c_str(), "off 7");
    assert_string_equal(b.calls[n - 1].c_str(), "on 8");
    // The statistics file, rewritten by its 1 s timer.
    std::string stats;
    for (int i = 0; i < 80 && stats.find("request_switches 1") == std::string::npos; ++i) {
        b.spin();
        std::ifstream f(b.dir + "/storm-cosched.stats");
        stats.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
    }
    assert_non_null(std::strstr(stats.c_str(), "scheduled 8\n"));
    assert_non_null(std::strstr(stats.c_str(), "request_switches 1\n"));
    assert_non_null(std::strstr(stats.c_str(), "false_requests 1\n"));
    assert_non_null(std::strstr(stats.c_str(), "job 7 tasks 2 cpu_ms "));
    assert_non_null(std::strstr(stats.c_str(), "job 8 tasks 1 cpu_ms "));
    // Unregistering (8) and dying (7's tasks close): jobs released, the
    // node goes back to 7 (at the next instant) then idle.
    t3.send_raw(b, msg(STORM_COSCHED_UNREGISTER, 0, 8, 0, 0));
    assert_string_equal(t3.next().c_str(), "closed");
    assert_int_equal(b.local->scheduler().scheduled(), 0);
    b.pick();
    assert_int_equal(b.local->scheduler().scheduled(), 7);
    assert_string_equal(t1.next().c_str(), "T1");
    close(t1.fd);
    t1.fd = -1;
    b.spin();
    assert_int_equal(b.local->tasks(7), 1);
    close(t2.fd);
    t2.fd = -1;
    b.spin();
    assert_int_equal(b.local->scheduler().jobs(), 0);
    assert_string_equal(b.calls.back().c_str(), "release 7");
}

void test_channel_refusals(void **)
{
    Bench b;
    b.steps[7] = {getpid()};
    b.steps[9] = {12345}; // this process is not among job 9's
    b.admissions->open(7, getuid());
    b.admissions->open(9, getuid());
    b.environ_says("7", "work");
    g_log.clear();
    {
        Task t(b); // a process of job 7 registering for job 8
        assert_true(contains(t.reg(b, 8), "belongs to job 7, not to job 8"));
        assert_string_equal(t.next().c_str(), "closed");
        assert_true(logged("cosched: refused pid " + std::to_string(getpid())));
        assert_true(
            logged("cannot register for job 8: pid " + std::to_string(getpid()) + " belongs to job 7"));
    }
    {
        b.environ_says("9", "work"); // claims job 9 in its environment, but slurmstepd does not list it
        Task t(b);
        assert_true(contains(t.reg(b, 9), "is not a process of job 9's steps"));
        assert_true(logged("is not a process of job 9's steps"));
    }
    {
        // Job 10 has no coscheduled context here: its environment claiming
        // a coscheduled partition does not help.
        b.steps[10] = {getpid()};
        b.environ_says("10", "work");
        Task t(b);
        int listed = b.listings;
        std::string e = t.reg(b, 10);
        assert_true(contains(e, "cannot register for job 10: job 10 is not coscheduled on this node: "
                                "slurmstepd opened no coscheduled step of it here "
                                "(SLURM_JOB_PARTITION=\"work\" in its environment does not count)"));
        assert_int_equal(b.listings, listed); // refused before asking slurmstepd
        assert_true(logged("cannot register for job 10: job 10 is not coscheduled on this node"));
        // Without the variable: the same refusal, without the note.
        std::ofstream(b.dir + "/proc/" + std::to_string(getpid()) + "/environ", std::ios::binary)
            << std::string("SLURM_JOB_ID=10\0", 16);
        Task t2(b);
        e = t2.reg(b, 10);
        assert_true(contains(e, "slurmstepd opened no coscheduled step of it here") &&
                    !contains(e, "SLURM_JOB_PARTITION"));
    }
    {
        // Its environment naming another partition: the reason says so.
        b.environ_says("10", "debug");
        Task t(b);
        assert_true(
            contains(t.reg(b, 10),
                     "job 10 is not coscheduled on this node (its partition \"debug\" is not coscheduled)"));
    }
    {
        // Once slurmstepd opened a coscheduled context of job 10, it may
        // register, whatever its environment says of the partition; once
        // closed, no more.
        b.admissions->open(10, getuid());
        Task t(b);
        assert_string_equal(t.reg(b, 10).c_str(), "K0");
        assert_int_equal(b.local->tasks(10), 1);
        b.admissions->close(10);
        Task t2(b);
        assert_true(contains(t2.reg(b, 10), "job 10 is not coscheduled on this node"));
        assert_int_equal(b.local->tasks(10), 1); // the registered task stays
        close(t.fd);
        t.fd = -1;
        b.spin();
        assert_int_equal(b.local->scheduler().jobs(), 0);
    }
    {
        // Job 11 is another user's: a process of this uid, which slurmstepd
        // lists among job 11's and whose environment names job 11 (a pid
        // reused by another user), may not register for it.
        b.steps[11] = {getpid()};
        b.admissions->open(11, getuid() + 1);
        b.environ_says("11", "work");
        Task t(b);
        int listed = b.listings;
        assert_true(contains(t.reg(b, 11), "pid " + std::to_string(getpid()) + " runs as uid " +
                                               std::to_string(getuid()) + ", not as job 11's owner"));
        assert_int_equal(b.listings, listed); // refused before asking slurmstepd
        assert_int_equal(b.local->tasks(11), 0);
    }
    {
        // The owner is checked at every registration, against the
        // admission as it is now.
        b.admissions->close(7);
        b.admissions->open(7, getuid() + 1);
        b.environ_says("7", "work");
        Task t(b);
        assert_true(contains(t.reg(b, 7), "not as job 7's owner"));
        b.admissions->close(7);
        b.admissions->open(7, getuid());
    }
    {
        b.environ_says("7", "work");
        std::ofstream(b.dir + "/proc/" + std::to_string(getpid()) + "/environ") << "HOME=/";
        Task t(b);
        assert_true(contains(t.reg(b, 7), "not a task of a Slurm job"));
    }
    {
        unlink((b.dir + "/proc/" + std::to_string(getpid()) + "/environ").c_str());
        Task t(b); // a process gone, or one the agent may not read
        assert_true(contains(t.reg(b, 7), "/environ: No such file or directory"));
    }
    assert_int_equal(b.local->scheduler().jobs(), 0);
    b.environ_says("7", "work");
    struct Bad {
        std::string m;
        const char *logged;
        bool register_first;
    };
    std::string wrong_version = msg(STORM_COSCHED_REGISTER, 0, 7, 0, 0);
    wrong_version[0] = 9;
    std::string reserved = msg(STORM_COSCHED_REGISTER, 0, 7, 0, 0);
    reserved[3] = 1;
    std::vector<Bad> bad = {
        {"short", "malformed request: 5 bytes, not 16", false},
        {std::string(300, 'x'), "malformed request: 300 bytes, not 16", false},
        {wrong_version, "version 9, not 1", false},
        {reserved, "reserved byte is not zero", false},
        {msg('Z', 0, 7, 0, 0), "unknown type 90", false},
        {msg(STORM_COSCHED_REGISTER, 0, 0, 0, 0), "a registration with job 0", false},
        {msg(STORM_COSCHED_SCHEDULE, 1, 7, 0, 1), "a schedule request before registering", false},
        {msg(STORM_COSCHED_UNREGISTER, 0, 7, 0, 0), "unregistering job 7 without being registered", false},
        {msg(STORM_COSCHED_SCHEDULE, 1, 8, 0, 1), "a schedule request for job 8 from a task of job 7", true},
        {msg(STORM_COSCHED_SCHEDULE, 3, 7, 0, 1), "a schedule request with status 3", true},
        {msg(STORM_COSCHED_SCHEDULE, 1, 7, 0, 0), "count 0", true},
        {msg(STORM_COSCHED_REGISTER, 0, 7, 0, 0), "a second registration (already job 7)", true},
    };
    for (const auto &x : bad) {
        g_log.clear();
        Task t(b);
        if (x.register_first)
            assert_string_equal(t.reg(b, 7).c_str(), "K0");
        t.send_raw(b, x.m);
        assert_string_equal(t.next().c_str(), "closed");
        if (!logged(x.logged)) {
            for (const auto &l : g_log)
                fprintf(stderr, "log: %s\n", l.c_str());
            fail_msg("no log line with \"%s\"", x.logged);
        }
        assert_true(logged("cosched: closed the request channel of pid " + std::to_string(getpid())));
        // A malformed request from a registered task unregisters it.
        assert_int_equal(b.local->scheduler().jobs(), 0);
    }
}

// The registrations' queue takes turns between users.
void test_fair_queue(void **)
{
    FairQueue<uid_t, std::string> q;
    assert_true(q.empty());
    for (int i = 1; i <= 5; ++i)
        q.push(1000, "a" + std::to_string(i));
    q.push(2000, "b1");
    assert_int_equal(q.size(), 6);
    assert_string_equal(q.pop().c_str(), "a1");
    q.push(3000, "c1");
    q.push(2000, "b2");
    std::string order;
    while (!q.empty())
        order += q.pop() + " ";
    assert_string_equal(order.c_str(), "b1 a2 c1 b2 a3 a4 a5 ");
    q.push(1000, "a6"); // a key may come back once its turns ended
    assert_string_equal(q.pop().c_str(), "a6");
    assert_true(q.empty());
}

// One user's many registrations do not hold up another user's: while the
// verifier takes 20 ms a check, root queues 30 registrations, then nobody
// one; nobody's is among the first 6 checks (the few root's that ran
// before it was queued, the one running, then its turn), where a first
// come, first served queue made it the 31st, after 600 ms.  Needs root (a
// peer of another uid).
void test_registrations_fair_between_users(void **)
{
    if (geteuid() != 0) {
        std::fprintf(stderr, "skipped: needs root to connect as another uid\n");
        skip();
    }
    struct NoHandler : Channel::Handler {
        bool on_register(int, pid_t, uint32_t, uint32_t, const std::vector<pid_t> &) override
        {
            return false;
        }
        void on_unregister(int, pid_t, uint32_t) override {}
        void on_schedule(int, uint32_t, uint32_t, Sender, uint32_t) override {}
    } handler;
    std::mutex mu;
    std::vector<uid_t> checked; // the order of the checks, by uid
    Verifier slow = [&](pid_t, uid_t uid, uint32_t) {
        {
            std::lock_guard<std::mutex> l(mu);
            checked.push_back(uid);
        }
        usleep(20000);
        return Verdict{"refused by the test", {}};
    };
    event_base *base = event_base_new();
    char tmpl[] = "/tmp/storm-cosched-fair.XXXXXX";
    std::string dir = mkdtemp(tmpl);
    chmod(dir.c_str(), 0755); // nobody reaches the socket (mode 0666)
    std::string path = dir + "/" STORM_COSCHED_SOCKET_NAME;
    auto spin = [&](int ms) {
        timeval tv{0, ms * 1000};
        event_base_loopexit(base, &tv);
        event_base_dispatch(base);
    };
    auto connect_to = [&] {
        int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        sockaddr_un sa{};
        sa.sun_family = AF_UNIX;
        std::memcpy(sa.sun_path, path.c_str(), path.size() + 1);
        return connect(fd, reinterpret_cast<sockaddr *>(&sa), sizeof sa) == 0 ? fd : (close(fd), -1);
    };
    {
        Channel ch(base, path, slow, handler, Logger("cosched-test"));
        ch.start();
        std::string reg = msg(STORM_COSCHED_REGISTER, 0, 7, 0, 0);
        std::vector<int> mine;
        for (int i = 0; i < 30; ++i) {
            int fd = connect_to();
            assert_true(fd >= 0);
            assert_int_equal(send(fd, reg.data(), reg.size(), MSG_NOSIGNAL),
                             static_cast<ssize_t>(reg.size()));
            mine.push_back(fd);
        }
        spin(30); // all 30 accepted and queued; the first is being checked
        pid_t child = fork();
        assert_true(child >= 0);
        if (child == 0) {
            if (setresgid(65534, 65534, 65534) != 0 || setresuid(65534, 65534, 65534) != 0)
                _exit(2);
            int fd = connect_to();
            if (fd < 0 || send(fd, reg.data(), reg.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(reg.size()))
                _exit(3);
            pollfd p{fd, POLLIN, 0};
            _exit(poll(&p, 1, 5000) == 1 ? 0 : 4); // its answer (a refusal) came
        }
        int st = -1;
        for (int i = 0; i < 200 && waitpid(child, &st, WNOHANG) == 0; ++i)
            spin(10);
        spin(10);
        for (int fd : mine)
            close(fd);
        std::lock_guard<std::mutex> l(mu);
        size_t at = std::find(checked.begin(), checked.end(), uid_t{65534}) - checked.begin();
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0 || at >= 6)
            fail_msg("nobody's registration was check %zu of %zu (child status %d)", at, checked.size(), st);
    }
    event_base_free(base);
    std::system(("rm -rf " + dir).c_str());
}

} // namespace

int main()
{
    set_log_sink(capture_sink);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_channel_registration),
        cmocka_unit_test(test_channel_refusals),
        cmocka_unit_test(test_fair_queue),
        cmocka_unit_test(test_registrations_fair_between_users),
    };
    return cmocka_run_group_tests_name("cosched_channel", tests, nullptr, nullptr);
}
