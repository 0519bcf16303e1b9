// Implicit coscheduling (cosched/): the scheduler's decisions on a fake
// clock (GMET, least-CPU fairness, no starvation, false requests), the
// settings, the request channel against fake tasks on its real socket
// (malformed requests, a process registering for a job it is not part of,
// a job without a coscheduled context whatever its environment claims),
// and both enforcers on a real child process.
// <fstream> before cmocka.h, whose fail() macro breaks it.
#include <fstream>

#include "tests/unit/cmocka.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include <event2/event.h>

#include "cosched/local.hpp"
#include "lib/node/cosched_protocol.h"
#include "agent/agent_config.hpp"
#include "tests/unit/helpers.hpp"

using namespace storm;
using namespace storm::cosched;
using namespace std::chrono_literals;
using test_helpers::contains;
using test_helpers::error_of;

namespace {

std::vector<std::string> g_log;
void capture_sink(LogLevel, const char *line) { g_log.emplace_back(line); }
bool logged(const std::string &part)
{
    return std::any_of(g_log.begin(), g_log.end(), [&](const std::string &l) { return contains(l, part); });
}

bool none(const std::optional<Scheduler::Switch> &s) { return !s.has_value(); }

struct FakeClock {
    Scheduler::Clock::time_point t = Scheduler::Clock::time_point{} + std::chrono::hours(1);
    Scheduler::Now now()
    {
        return [this] { return t; };
    }
};

// ---- decisions ----------------------------------------------------------------

void test_gmet_and_early_requests(void **)
{
    FakeClock c; // at a multiple of every period
    Scheduler s(10s, 2s, c.now());
    auto t0 = c.t;
    s.add(1);
    s.add(2);
    // Nothing is picked at registration: at the next multiple of 100 ms.
    assert_int_equal(s.scheduled(), 0);
    assert_true(s.next_deadline() == t0 + 100ms);
    assert_true(none(s.on_timer()));
    c.t += 100ms;
    auto sw = s.on_timer();
    assert_true(sw && sw->from == 0 && sw->to == 1); // equal CPU: the lowest id
    c.t += 1s;
    // During job 1's GMET: dropped, as in the paper (its arrivals were
    // sent before the switch); nothing is decided when the GMET ends.
    assert_true(none(s.on_request(2, Sender::scheduled)));
    assert_int_equal(s.stats().early, 1);
    assert_true(s.next_deadline() == t0 + 10s); // the next tick, not the GMET's end
    // After the GMET a request switches at once.
    c.t += 1500ms;
    sw = s.on_request(2, Sender::scheduled);
    assert_true(sw && sw->from == 1 && sw->to == 2);
    assert_int_equal(s.cpu_time(1).count(), 2500000);
    // Job 2's GMET protects it in turn.
    c.t += 1s;
    assert_true(none(s.on_request(1, Sender::scheduled)));
    assert_int_equal(s.stats().early, 2);
    // The tick at 10 s: job 1 has had 2.5 s, job 2 7.4 s, both less than a
    // slice: a tie, broken by the tick's number since the epoch (361, odd:
    // the second of jobs 1 and 2), the same on every node: 2 is kept.
    c.t = s.next_deadline();
    assert_true(c.t == t0 + 10s);
    assert_true(none(s.on_timer()));
    assert_int_equal(s.scheduled(), 2);
    assert_int_equal(s.stats().request_switches, 1);
    assert_int_equal(s.stats().timer_switches, 1); // the start pick
    // A request at 19.5 s: the tick at 20 s falls in job 1's GMET and is
    // decided at its end, at 21.5 s: job 2 has had 16.9 s (one whole slice),
    // job 1 4.5 s: 1 is kept.
    c.t = t0 + 19500ms;
    sw = s.on_request(1, Sender::scheduled);
    assert_true(sw && sw->to == 1);
    c.t = t0 + 20s;
    assert_true(none(s.on_timer()));
    assert_true(s.next_deadline() == t0 + 21500ms);
    c.t = s.next_deadline();
    assert_true(none(s.on_timer()));
    assert_int_equal(s.scheduled(), 1);
    assert_int_equal(s.cpu_time(2).count(), 16900000);
    assert_true(s.next_deadline() == t0 + 30s);
    // At 30 s: job 1 has had 13 s, one slice as job 2: the tick's number
    // (363, odd) gives job 2.
    c.t = s.next_deadline();
    sw = s.on_timer();
    assert_true(sw && sw->from == 1 && sw->to == 2);
}

// Two nodes whose counts differ (mirrored: each ran the other job longer)
// come back to the same decisions once the counts are equal in whole
// slices.
void test_nodes_heal(void **)
{
    FakeClock c;
    auto t0 = c.t;
    Scheduler a(1s, 0us, c.now()), b(1s, 0us, c.now());
    for (Scheduler *x : {&a, &b}) {
        x->add(1);
        x->add(2);
    }
    c.t = t0 + 100ms;
    a.on_timer();
    b.on_timer();
    assert_int_equal(a.scheduled(), b.scheduled());
    // A request (libstormmsg, scheduled sender) moves b alone; at the
    // tick at 1 s, a has given job 1 0.9 s and b job 2 0.85 s: each picks
    // the other job, and their counts are mirrored.
    c.t = t0 + 150ms;
    b.on_request(a.scheduled() == 1 ? 2 : 1, Sender::scheduled);
    assert_int_not_equal(a.scheduled(), b.scheduled());
    int agree = 0;
    for (int i = 0; i < 10; ++i) {
        c.t = a.next_deadline();
        a.on_timer();
        b.on_timer();
        agree += a.scheduled() == b.scheduled();
        if (i >= 2) // from 3 s on: equal in whole slices, the same tie-break
            assert_int_equal(a.scheduled(), b.scheduled());
    }
    assert_true(agree >= 8);
}

// Two nodes holding the same jobs, registered in different orders at
// different moments, with their wall clocks in step: they pick the same
// job at every instant, with no message between them.
void test_nodes_agree(void **)
{
    FakeClock c;
    auto t0 = c.t;
    Scheduler a(500ms, 100ms, c.now()), b(500ms, 100ms, c.now());
    c.t += 7ms;
    a.add(12);
    c.t += 3ms;
    b.add(11);
    a.add(11);
    c.t += 20ms;
    b.add(13);
    b.add(12);
    a.add(13);
    std::map<uint32_t, int> picked;
    for (int i = 0; i < 200; ++i) {
        // The timers fire late by different amounts on the two nodes.
        if (i < 100) // (a job leaving at different moments may shift one pick)
            assert_true(a.next_deadline() == b.next_deadline());
        c.t = std::max(a.next_deadline(), b.next_deadline()) + std::chrono::microseconds(137 * (i % 7));
        a.on_timer();
        c.t += std::chrono::microseconds(290);
        b.on_timer();
        assert_int_equal(a.scheduled(), b.scheduled());
        picked[a.scheduled()]++;
        if (i == 100) { // a job leaves, a bit later on b
            a.remove(12);
            c.t += 5ms;
            b.remove(12);
        }
        // Ranks of unscheduled jobs report arrivals (PMPI: status unknown).
        for (uint32_t j : {11u, 12u, 13u})
            if (a.registered(j) && j != a.scheduled())
                a.on_request(j, Sender::unknown);
    }
    assert_true(c.t > t0 + 90s);
    assert_int_equal(a.stats().request_switches, 0);
    assert_true(a.stats().tick_held > 100);
    assert_in_range(picked[11], 70, 120);
    assert_in_range(picked[13], 70, 120);
    assert_true(a.cpu_time(11) - a.cpu_time(13) < 1s && a.cpu_time(13) - a.cpu_time(11) < 1s);
}

void test_false_requests_never_preempt(void **)
{
    FakeClock c;
    Scheduler s(10s, 1s, c.now());
    s.add(1);
    s.add(2);
    c.t = s.next_deadline();
    s.on_timer();
    assert_int_equal(s.scheduled(), 1);
    c.t += 3s;
    assert_true(none(s.on_request(2, Sender::not_scheduled)));
    assert_true(none(s.on_request(2, Sender::not_scheduled)));
    assert_int_equal(s.stats().false_requests, 2);
    assert_int_equal(s.scheduled(), 1);
    assert_true(none(s.on_request(1, Sender::scheduled))); // already scheduled
    assert_true(none(s.on_request(9, Sender::scheduled))); // not registered
    assert_int_equal(s.stats().ignored, 2);
    // The PMPI hooks' requests (status unknown) do not move a job picked
    // at an aligned instant; a scheduled sender's do.
    assert_true(none(s.on_request(2, Sender::unknown)));
    assert_int_equal(s.stats().tick_held, 1);
    auto sw = s.on_request(2, Sender::scheduled);
    assert_true(sw && sw->to == 2);
    // Job 2 came by a request: an unknown sender's request may move it.
    c.t += 2s;
    sw = s.on_request(1, Sender::unknown);
    assert_true(sw && sw->to == 1);
}

void test_least_cpu_fairness(void **)
{
    FakeClock c;
    Scheduler s(1s, 200ms, c.now());
    for (uint32_t j = 1; j <= 3; ++j)
        s.add(j);
    std::map<uint32_t, int> picked;
    for (int i = 0; i < 300; ++i) {
        c.t = s.next_deadline();
        if (auto sw = s.on_timer())
            picked[sw->to]++;
    }
    for (uint32_t j = 1; j <= 3; ++j) {
        assert_in_range(picked[j], 99, 101);
        auto cpu = s.cpu_time(j);
        assert_in_range(cpu.count(), 99000000, 101000000);
    }
    // A job that arrives late starts with the least CPU time of the others,
    // not 0: it does not take the node for 100 slices.
    s.add(4);
    int runs4 = 0;
    for (int i = 0; i < 8; ++i) {
        c.t = s.next_deadline();
        s.on_timer();
        runs4 += s.scheduled() == 4;
    }
    assert_in_range(runs4, 1, 3);
}

void test_no_starvation_under_requests(void **)
{
    // Jobs 1 and 2 send each other requests all the time; job 3 never
    // does.  The timer still gives job 3 the node at every tick it is the
    // least served, for at least a GMET.
    FakeClock c;
    Scheduler s(10s, 2s, c.now());
    s.add(1);
    s.add(2);
    s.add(3);
    for (int ms = 0; ms < 1000 * 1000; ms += 100) {
        c.t += 100ms;
        s.on_timer();
        if (ms % 500 == 0)
            s.on_request(s.scheduled() == 1 ? 2 : 1, Sender::scheduled);
    }
    auto total = s.cpu_time(1) + s.cpu_time(2) + s.cpu_time(3);
    assert_true(s.cpu_time(3) * 100 >= total * 15);
    assert_true(s.stats().timer_switches >= 90);
}

void test_remove(void **)
{
    FakeClock c;
    Scheduler s(10s, 5s, c.now());
    s.add(1);
    c.t = s.next_deadline();
    s.on_timer();
    assert_int_equal(s.scheduled(), 1);
    c.t += 1s;
    s.add(2);
    s.add(3);
    auto sw = s.remove(1); // no GMET for a job that left
    assert_true(sw && sw->from == 1 && sw->to == 0);
    assert_int_equal(s.scheduled(), 0);
    assert_true(none(s.remove(1)));
    assert_true(s.next_deadline() == c.t + 100ms); // the next pick
    c.t += 100ms;
    sw = s.on_timer();
    assert_true(sw && sw->from == 0 && sw->to == 2);
    assert_true(none(s.remove(3))); // not scheduled: no switch
    sw = s.remove(2);
    assert_true(sw && sw->to == 0);
    assert_int_equal(s.jobs(), 0);
    c.t += 1s;
    assert_true(none(s.on_timer()));
}

// ---- settings -------------------------------------------------------------------

void test_config(void **)
{
    auto c = agent::AgentConfig::from_switch_parameters(nullptr);
    assert_false(c.cosched.enabled());
    assert_int_equal(c.cosched.slice.count(), 15000000);
    assert_int_equal(c.cosched.gmet.count(), 5000000);
    assert_int_equal(c.cosched.share_percent, 1);
    c = agent::AgentConfig::from_switch_parameters("storm_cosched_partitions=work:debug,storm_cosched_slice="
                                                   "2s,storm_cosched_gmet=500ms,storm_cosched_share=5");
    assert_true(c.cosched.enabled() && c.cosched.covers("debug") && !c.cosched.covers("gang"));
    assert_int_equal(c.cosched.slice.count(), 2000000);
    assert_int_equal(c.cosched.gmet.count(), 500000);
    assert_int_equal(c.cosched.share_percent, 5);
    // A slice shorter than the default GMET lowers the GMET's default.
    c = agent::AgentConfig::from_switch_parameters("storm_cosched_slice=1s");
    assert_int_equal(c.cosched.gmet.count(), 1000000);
    auto err = [](const char *text) {
        return error_of<ConfigError>([&] { agent::AgentConfig::from_switch_parameters(text); });
    };
    std::string e = err("storm_cosched_slice=5ms");
    assert_true(contains(e, "storm_cosched_slice") && contains(e, "\"5ms\"") && contains(e, "10ms"));
    e = err("storm_cosched_slice=1s,storm_cosched_gmet=2s");
    assert_true(contains(e, "storm_cosched_gmet") && contains(e, "\"2s\"") && contains(e, "1s"));
    e = err("storm_cosched_share=0");
    assert_true(contains(e, "storm_cosched_share") && contains(e, "1 to 50"));
    e = err("storm_cosched_share=51");
    assert_true(contains(e, "storm_cosched_share"));
    e = err("storm_cosched_gmet=fast");
    assert_true(contains(e, "storm_cosched_gmet"));
    e = err("storm_cosched_partitions=work::debug");
    assert_true(contains(e, "storm_cosched_partitions") && contains(e, "work::debug"));
    e = err("storm_cosched_partitions");
    assert_true(contains(e, "storm_cosched_partitions"));
    e = err("storm_cosched_timeslice=1s");
    assert_true(contains(e, "unknown key storm_cosched_timeslice") && contains(e, "storm_cosched_slice"));
}

// ---- the channel ----------------------------------------------------------------

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
            [this](const std::set<uint32_t> &jobs) {
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
    b.admissions->open(7);
    b.admissions->open(8);
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
    b.admissions->open(7);
    b.admissions->open(9);
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
        b.admissions->open(10);
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

// ---- enforcement ----------------------------------------------------------------

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
        cmocka_unit_test(test_gmet_and_early_requests),
        cmocka_unit_test(test_nodes_agree),
        cmocka_unit_test(test_nodes_heal),
        cmocka_unit_test(test_false_requests_never_preempt),
        cmocka_unit_test(test_least_cpu_fairness),
        cmocka_unit_test(test_no_starvation_under_requests),
        cmocka_unit_test(test_remove),
        cmocka_unit_test(test_config),
        cmocka_unit_test(test_channel_registration),
        cmocka_unit_test(test_channel_refusals),
        cmocka_unit_test(test_nice_enforcer),
        cmocka_unit_test(test_cgroup_enforcer),
    };
    return cmocka_run_group_tests_name("cosched", tests, nullptr, nullptr);
}
