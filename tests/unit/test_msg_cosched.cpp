// libstormmsg's implicit-coscheduling hooks (switch_rdma/msg/cosched.hpp):
// forked tasks using the library under the fake node agent of
// tests/unit/msg_fixture.hpp, with a fake local scheduler on a real
// SOCK_SEQPACKET socket (lib/node/cosched_protocol.h) that records every request and
// answers registrations as each test says.  Where the status bytes must be
// chosen, the test itself plays rank 1 of the context over TCP (FakePeer):
// it sends frames with the status byte it wants and reads the real task's.
//  - registration at init with the job and rank, UNREGISTER at finalize, a
//    killed task's connection closing (no UNREGISTER);
//  - a refusal or an unreachable agent: one line on stderr, messaging works;
//  - arrivals: from a scheduled sender a SCHEDULE with status 1 and its rank
//    (batched), from an unscheduled one nothing (a false arrival counted),
//    while the receiver is scheduled nothing, from a sender of unknown
//    status a SCHEDULE with status 2; the real task's own frames carry its
//    status;
//  - a malformed status byte (or reserved byte) fails the context, naming
//    the sender; a hello of frame version 1 is refused.
#include <fstream> // before cmocka, whose fail() macro breaks it

#include "tests/unit/cmocka.hpp"

#include <algorithm>
#include <deque>
#include <netinet/in.h>
#include <netinet/tcp.h>

#include "lib/node/cosched_protocol.h"
#include "switch_rdma/msg/cosched.hpp"
#include "switch_rdma/msg/frames.hpp"
#include "switch_rdma/msg/handshake.hpp"
#include "tests/unit/helpers.hpp"
#include "tests/unit/msg_fixture.hpp"

using namespace storm::rdma;
using namespace msg_fixture;
using storm::rdma::msg::Frame;
using test_helpers::contains;
using Clock = std::chrono::steady_clock;
using CoStats = struct storm_msg_cosched_stats; // the function hides the struct's name

namespace {

// ---- the fake local scheduler -------------------------------------------------

struct CoMsg {
    uint8_t version, type, status, zero;
    uint32_t job, rank, count;
};

class FakeCosched {
public:
    struct Conn {
        int fd = -1;
        bool registered = false, eof = false;
        uint32_t rank = UINT32_MAX;
        std::vector<CoMsg> msgs;
        size_t bad = 0; // packets that were not 16 bytes
    };

    FakeCosched()
    {
        char tmpl[] = "/tmp/storm-msgcs-XXXXXX";
        dir_ = mkdtemp(tmpl);
        path_ = dir_ + "/" STORM_COSCHED_SOCKET_NAME;
        lfd_ = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        sockaddr_un sa{};
        sa.sun_family = AF_UNIX;
        std::strcpy(sa.sun_path, path_.c_str());
        assert_int_equal(bind(lfd_, reinterpret_cast<sockaddr *>(&sa), sizeof sa), 0);
        assert_int_equal(listen(lfd_, 16), 0);
    }
    ~FakeCosched()
    {
        for (auto &c : conns)
            if (c.fd >= 0)
                close(c.fd);
        close(lfd_);
        std::system(("rm -rf " + dir_).c_str());
    }
    const std::string &path() const { return path_; }
    const std::string &dir() const { return dir_; }

    // Answers to rank r's REGISTER: ERROR with refuse[r] if set, else OK
    // with scheduled[r] (default not scheduled).
    std::map<uint32_t, bool> scheduled;
    std::map<uint32_t, std::string> refuse;
    std::vector<Conn> conns;

    // Accepts, reads and answers for about `ms`.
    void serve(int ms)
    {
        std::vector<pollfd> fds{{lfd_, POLLIN, 0}};
        for (auto &c : conns)
            fds.push_back({c.fd, POLLIN, 0});
        if (poll(fds.data(), fds.size(), ms) <= 0)
            return;
        for (size_t i = 0; i < conns.size(); ++i)
            if (conns[i].fd >= 0 && fds[i + 1].revents)
                read(conns[i]);
        if (fds[0].revents & POLLIN)
            for (int c; (c = accept4(lfd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK)) >= 0;) {
                conns.push_back(Conn{});
                conns.back().fd = c;
            }
    }
    bool serve_until(const std::function<bool()> &done, int seconds)
    {
        auto deadline = Clock::now() + std::chrono::seconds(seconds);
        while (!done()) {
            if (Clock::now() > deadline)
                return false;
            serve(20);
        }
        return true;
    }
    void serve_for(int ms)
    {
        auto end = Clock::now() + std::chrono::milliseconds(ms);
        while (Clock::now() < end)
            serve(10);
    }
    // The connection on which rank r registered (the last one), or null.
    Conn *of(uint32_t r)
    {
        Conn *found = nullptr;
        for (auto &c : conns)
            if (c.registered && c.rank == r)
                found = &c;
        return found;
    }
    std::vector<CoMsg> of_type(uint32_t r, uint8_t type)
    {
        std::vector<CoMsg> v;
        if (Conn *c = of(r))
            for (auto &m : c->msgs)
                if (m.type == type)
                    v.push_back(m);
        return v;
    }
    uint64_t scheduled_count(uint32_t r)
    {
        uint64_t n = 0;
        for (auto &m : of_type(r, STORM_COSCHED_SCHEDULE))
            n += m.count;
        return n;
    }
    void push(uint32_t r, bool on)
    {
        Conn *c = of(r);
        assert_non_null(c);
        unsigned char m[STORM_COSCHED_MSG_SIZE];
        storm_cosched_encode(m, STORM_COSCHED_STATUS, on ? 1 : 0, c->msgs.front().job, 0, 0);
        assert_int_equal(send(c->fd, m, sizeof m, MSG_NOSIGNAL), sizeof m);
    }

private:
    void read(Conn &c)
    {
        unsigned char m[STORM_COSCHED_MAX_MSG];
        for (;;) {
            ssize_t n = recv(c.fd, m, sizeof m, MSG_DONTWAIT);
            if (n < 0 && (errno == EAGAIN || errno == EINTR))
                return;
            if (n <= 0) {
                c.eof = true;
                close(c.fd);
                c.fd = -1;
                return;
            }
            if (n != STORM_COSCHED_MSG_SIZE) {
                ++c.bad;
                continue;
            }
            CoMsg x{m[0],
                    m[1],
                    m[2],
                    m[3],
                    storm_cosched_get32(m + 4),
                    storm_cosched_get32(m + 8),
                    storm_cosched_get32(m + 12)};
            c.msgs.push_back(x);
            if (x.type == STORM_COSCHED_REGISTER && !c.registered) {
                c.registered = true;
                c.rank = x.rank;
                unsigned char a[STORM_COSCHED_MSG_SIZE + 240];
                auto it = refuse.find(x.rank);
                if (it != refuse.end()) {
                    storm_cosched_encode(a, STORM_COSCHED_ERROR, 0, 0, 0, 0);
                    std::memcpy(a + STORM_COSCHED_MSG_SIZE, it->second.data(), it->second.size());
                    send(c.fd, a, STORM_COSCHED_MSG_SIZE + it->second.size(), MSG_NOSIGNAL);
                    close(c.fd); // as the agent does
                    c.fd = -1;
                    c.eof = true;
                    return;
                }
                storm_cosched_encode(a, STORM_COSCHED_OK, scheduled[x.rank] ? 1 : 0, x.job, x.rank, 0);
                send(c.fd, a, STORM_COSCHED_MSG_SIZE, MSG_NOSIGNAL);
            }
        }
    }

    std::string dir_, path_;
    int lfd_ = -1;
};

// ---- rank 1 of a context, played by the test --------------------------------

class FakePeer {
public:
    struct Got {
        uint8_t status;
        uint32_t tag;
        std::string data;
    };

    FakePeer(const Context &ctx, uint32_t credits, uint32_t packet_size)
        : ctx_(ctx), available_(credits), packet_size_(packet_size)
    {
    }
    ~FakePeer()
    {
        if (fd_ >= 0)
            close(fd_);
    }

    // Connects to rank 0 with a hello of `magic`; true once it answered.
    bool connect_to_rank0(int seconds, uint32_t magic = msg::hello_magic)
    {
        sockaddr_in sa{};
        sa.sin_family = AF_INET;
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        sa.sin_port = htons(ctx_.port_for(0));
        auto deadline = Clock::now() + std::chrono::seconds(seconds);
        for (;;) {
            fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
            if (connect(fd_, reinterpret_cast<sockaddr *>(&sa), sizeof sa) == 0)
                break;
            close(fd_);
            fd_ = -1;
            if (Clock::now() > deadline)
                return false;
            usleep(10000);
        }
        int one = 1;
        setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        // The challenge, then a hello proving the key (or one of an older
        // version, which has no proof), then the answer proving it back.
        msg::Challenge c{};
        if (!read_all(&c, sizeof c))
            return false;
        msg::Hello h = msg::make_hello(ctx_, 1, 0, packet_size_, c);
        h.magic = magic;
        write_all(&h, magic == msg::hello_magic ? sizeof h : msg::old_hello_size);
        msg::HelloAck a{};
        return read_all(&a, sizeof a) && msg::check_ack(a, ctx_.key, c, h);
    }
    bool read_all(void *buf, size_t n)
    {
        size_t got = 0;
        while (got < n) {
            pollfd p{fd_, POLLIN, 0};
            if (poll(&p, 1, 5000) != 1)
                return false;
            ssize_t r = recv(fd_, static_cast<char *>(buf) + got, n - got, 0);
            if (r <= 0)
                return false;
            got += static_cast<size_t>(r);
        }
        return true;
    }

    // The status byte of every frame sent from now on.
    uint8_t status = msg::status_unknown;

    // One message of one packet (waits for a credit).
    void send_message(uint32_t tag, const std::string &data)
    {
        auto deadline = Clock::now() + std::chrono::seconds(10);
        while (available_ == 0) {
            assert_true(Clock::now() < deadline);
            pump(20);
        }
        --available_;
        Frame f{};
        f.type = msg::frame_data;
        f.status = status;
        f.refill = owed_;
        owed_ = 0;
        auto len = static_cast<uint32_t>(data.size());
        PacketHeader h{1, 0, tag, len, len, packet_first | packet_last, seq_++};
        std::string out(reinterpret_cast<const char *>(&f), sizeof f);
        out.append(reinterpret_cast<const char *>(&h), sizeof h);
        out += data;
        write_all(out.data(), out.size());
    }
    void send_raw(const Frame &f, const void *more = nullptr, size_t n = 0)
    {
        std::string out(reinterpret_cast<const char *>(&f), sizeof f);
        if (n)
            out.append(static_cast<const char *>(more), n);
        write_all(out.data(), out.size());
    }

    // Reads what rank 0 sent for about `ms`: its messages (whose credits
    // go back at once), refills, an abort.
    void pump(int ms)
    {
        pollfd p{fd_, POLLIN, 0};
        if (closed || poll(&p, 1, ms) != 1)
            return;
        char buf[65536];
        ssize_t n = recv(fd_, buf, sizeof buf, MSG_DONTWAIT);
        if (n <= 0) {
            closed = n == 0 || (errno != EAGAIN && errno != EINTR);
            return;
        }
        in_.append(buf, static_cast<size_t>(n));
        for (;;) {
            if (in_.size() < sizeof(Frame))
                break;
            Frame f;
            std::memcpy(&f, in_.data(), sizeof f);
            if (f.type == msg::frame_data) {
                if (in_.size() < sizeof f + sizeof(PacketHeader))
                    break;
                PacketHeader h;
                std::memcpy(&h, in_.data() + sizeof f, sizeof h);
                if (in_.size() < sizeof f + sizeof h + h.len)
                    break;
                available_ += f.refill;
                got.push_back(Got{f.status, h.tag, in_.substr(sizeof f + sizeof h, h.len)});
                in_.erase(0, sizeof f + sizeof h + h.len);
                frame_statuses.push_back(f.status);
                // Consumed at once: its credit goes back now.
                Frame r{};
                r.type = msg::frame_refill;
                r.status = status;
                r.refill = 1;
                send_raw(r);
                continue;
            }
            if (f.type == msg::frame_abort) {
                if (in_.size() < sizeof f + f.value)
                    break;
                abort = in_.substr(sizeof f, f.value);
                in_.erase(0, sizeof f + f.value);
                continue;
            }
            available_ += f.refill;
            frame_statuses.push_back(f.status);
            in_.erase(0, sizeof f);
        }
    }
    // The next message rank 0 sent (within `seconds`).
    bool next(Got &out, int seconds)
    {
        auto deadline = Clock::now() + std::chrono::seconds(seconds);
        while (got.empty() && !closed) {
            if (Clock::now() > deadline)
                return false;
            pump(20);
        }
        if (got.empty())
            return false;
        out = got.front();
        got.pop_front();
        return true;
    }
    // Sends one message, returns rank 0's echo (its coscheduling stats).
    CoStats echo(uint32_t tag, uint8_t *echo_status = nullptr)
    {
        send_message(tag, "ping");
        Got g{};
        if (!next(g, 10))
            fail_msg("no echo from rank 0 (abort: %s)", abort.c_str());
        assert_int_equal(g.tag, tag);
        assert_int_equal(g.data.size(), sizeof(CoStats));
        CoStats cs;
        std::memcpy(&cs, g.data.data(), sizeof cs);
        if (echo_status)
            *echo_status = g.status;
        return cs;
    }

    std::deque<Got> got;
    std::vector<uint8_t> frame_statuses; // of every frame rank 0 sent
    std::string abort;
    bool closed = false;

private:
    void write_all(const void *p, size_t n)
    {
        auto *c = static_cast<const char *>(p);
        while (n) {
            ssize_t w = send(fd_, c, n, MSG_NOSIGNAL);
            if (w < 0 && errno == EINTR)
                continue;
            assert_true(w > 0);
            c += w;
            n -= static_cast<size_t>(w);
        }
    }

    Context ctx_;
    int fd_ = -1;
    uint32_t available_, packet_size_;
    uint32_t owed_ = 0;
    uint64_t seq_ = 0;
    std::string in_;
};

// ---- the tasks -----------------------------------------------------------------

constexpr int stop_tag = 99;

void cosched_env(const std::string &sock, uint32_t job, const char *interval_us = nullptr)
{
    setenv("SLURM_JOB_ID", std::to_string(job).c_str(), 1);
    setenv(STORM_COSCHED_SOCKET_ENV, sock.c_str(), 1);
    if (interval_us)
        setenv(STORM_COSCHED_INTERVAL_ENV, interval_us, 1);
}

// Rank 0 under a FakePeer: answers every message of rank 1 with its
// coscheduling statistics (same tag) until the stop tag.
int echo_task(Result &r)
{
    if (storm_msg_init() != 0) {
        report(r, 1, storm_msg_error());
        return 1;
    }
    for (;;) {
        char buf[64];
        int s, t;
        if (storm_msg_recv(1, STORM_MSG_ANY, buf, sizeof buf, &s, &t) < 0) {
            report(r, 1, storm_msg_error());
            return 2;
        }
        if (t == stop_tag)
            break;
        CoStats cs{};
        if (storm_msg_cosched_stats(&cs) != 0 || storm_msg_send(1, t, &cs, sizeof cs) != 0) {
            report(r, 1, storm_msg_error());
            return 3;
        }
    }
    report(r, 0, "");
    return 0;
}

std::string slurp(const std::string &path)
{
    std::ifstream in(path);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

size_t lines(const std::string &s) { return static_cast<size_t>(std::count(s.begin(), s.end(), '\n')); }

template <class T> T *shared_array(size_t n)
{
    void *p = mmap(nullptr, sizeof(T) * n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(p != MAP_FAILED);
    return static_cast<T *>(std::memset(p, 0, sizeof(T) * n));
}

void expect_msg(const CoMsg &m, uint8_t type, uint8_t status, uint32_t job, uint32_t rank)
{
    assert_int_equal(m.version, STORM_COSCHED_VERSION);
    assert_int_equal(m.type, type);
    assert_int_equal(m.status, status);
    assert_int_equal(m.zero, 0);
    assert_int_equal(m.job, job);
    assert_int_equal(m.rank, rank);
}

// ---- the tests ---------------------------------------------------------------

// (a) storm_msg_init registers (job SLURM_JOB_ID, the task's rank) and
// learns the job's status; finalize unregisters; between them, rank 1 (not
// scheduled) asks for its job on rank 0's (scheduled) messages, rank 0
// (scheduled) never asks.  A killed task's connection just closes.
void test_register_unregister(void **)
{
    Shared *sh = shared_block();
    auto *cs = shared_array<CoStats>(4); // [rank]: at init, [2 + rank]: after finalize
    {
        FakeCosched co;
        co.scheduled[0] = true;
        co.scheduled[1] = false;
        Agent agent(2, 22, 16 * 1024 * 2, 1024);
        std::string sock = co.path();
        for (uint32_t r = 0; r < 2; ++r)
            agent.spawn(r, [sh, cs, r, sock] {
                cosched_env(sock, 1077);
                Result &res = sh->r[r];
                if (storm_msg_init() != 0 || storm_msg_cosched_stats(&cs[r]) != 0) {
                    report(res, 1, storm_msg_error());
                    return 1;
                }
                char b[8];
                bool ok = r == 0 ? storm_msg_send(1, 5, "hi", 2) == 0
                                 : storm_msg_recv(0, 5, b, sizeof b, nullptr, nullptr) == 2;
                if (!ok || storm_msg_barrier() != 0 || storm_msg_finalize() != 0 ||
                    storm_msg_cosched_stats(&cs[2 + r]) != 0) {
                    report(res, 1, storm_msg_error());
                    return 2;
                }
                report(res, 0, "");
                return 0;
            });
        // Each task waits for the answer to its registration before it
        // attaches to its context.
        assert_true(co.serve_until([&] { return co.of(0) && co.of(1); }, 10));
        agent.serve_attach(2);
        assert_true(co.serve_until([&] { return co.of(0)->eof && co.of(1)->eof; }, 20));
        assert_true(agent.wait_all(10));
        for (uint32_t r = 0; r < 2; ++r)
            if (!exited_ok(agent.status(r)))
                fail_msg("rank %u: %s", r, sh->r[r].error);
        for (uint32_t r = 0; r < 2; ++r) {
            auto &msgs = co.of(r)->msgs;
            assert_true(msgs.size() >= 2);
            expect_msg(msgs.front(), STORM_COSCHED_REGISTER, 0, 1077, r);
            assert_int_equal(msgs.front().count, 0);
            expect_msg(msgs.back(), STORM_COSCHED_UNREGISTER, 0, 1077, r);
            assert_int_equal(co.of(r)->bad, 0);
            assert_int_equal(cs[r].status, r == 0 ? 1 : 0); // as the agent answered
            assert_int_equal(cs[2 + r].status, 2);          // unregistered
        }
        // Rank 0 was scheduled: it sent nothing else.
        assert_int_equal(co.of(0)->msgs.size(), 2);
        assert_int_equal(cs[2].arrivals + cs[2].false_arrivals + cs[2].requests, 0);
        // Rank 1 was not: rank 0's message and its barrier release are two
        // arrivals from a scheduled sender; at least the first went out at
        // once (status 1, sender rank 0).
        auto reqs = co.of_type(1, STORM_COSCHED_SCHEDULE);
        assert_true(!reqs.empty());
        for (auto &m : reqs) {
            expect_msg(m, STORM_COSCHED_SCHEDULE, STORM_COSCHED_SCHEDULED, 1077, 0);
            assert_true(m.count >= 1);
        }
        assert_int_equal(cs[3].arrivals, 2);
        assert_int_equal(cs[3].false_arrivals, 0);
        assert_int_equal(cs[3].requests, reqs.size());
        assert_true(co.scheduled_count(1) <= 2);
        assert_int_equal(co.of(1)->msgs.size(), 2 + reqs.size());
    }
    {
        // A task killed while registered: its connection closes, no UNREGISTER.
        FakeCosched co;
        Agent agent(1, 23, 16 * 1024, 1024);
        std::string sock = co.path();
        agent.spawn(0, [sh, sock] {
            cosched_env(sock, 1076);
            if (storm_msg_init() != 0) {
                report(sh->r[0], 1, storm_msg_error());
                return 1;
            }
            report(sh->r[0], 0, "");
            for (;;)
                pause();
        });
        assert_true(co.serve_until([&] { return co.of(0) != nullptr; }, 10));
        agent.serve_attach(1);
        auto deadline = Clock::now() + std::chrono::seconds(10);
        while (sh->r[0].status != 0) {
            assert_true(Clock::now() < deadline);
            usleep(10000);
        }
        assert_true(agent.task(0).pid > 0);
        kill(agent.task(0).pid, SIGKILL);
        assert_true(co.serve_until([&] { return co.of(0)->eof; }, 10));
        assert_int_equal(co.of(0)->msgs.size(), 1);
        expect_msg(co.of(0)->msgs[0], STORM_COSCHED_REGISTER, 0, 1076, 0);
        agent.wait_all(5);
    }
    munmap(cs, sizeof(CoStats) * 4);
    munmap(sh, sizeof *sh);
}

// (b) A refused registration, an unreachable agent: one line each on the
// task's stderr naming the reason, and the messaging works all the same;
// without STORM_COSCHED_SOCKET, not a word.
void test_refused_registration(void **)
{
    Shared *sh = shared_block();
    auto *cs = shared_array<CoStats>(3);
    {
        FakeCosched co;
        const std::string why =
            "cannot register for job 1078: job 1078's partition \"debug\" is not coscheduled";
        co.refuse[1] = why;
        Agent agent(3, 24, 16 * 1024 * 3, 1024);
        std::string sock = co.path(), dir = co.dir();
        for (uint32_t r = 0; r < 3; ++r)
            agent.spawn(r, [sh, cs, r, sock, dir] {
                if (!freopen((dir + "/err." + std::to_string(r)).c_str(), "w", stderr))
                    return 9;
                if (r == 0)
                    cosched_env("/nonexistent/" STORM_COSCHED_SOCKET_NAME, 1078);
                else if (r == 1)
                    cosched_env(sock, 1078);
                else
                    unsetenv(STORM_COSCHED_SOCKET_ENV);
                Result &res = sh->r[r];
                if (storm_msg_init() != 0) {
                    report(res, 1, storm_msg_error());
                    return 1;
                }
                // Every rank sends its rank to every other and checks theirs.
                for (int d = 0; d < 3; ++d)
                    if (d != static_cast<int>(r) && storm_msg_send(d, 7, &r, sizeof r) != 0) {
                        report(res, 1, storm_msg_error());
                        return 2;
                    }
                for (int k = 0; k < 2; ++k) {
                    uint32_t v = 99;
                    int s = -1;
                    if (storm_msg_recv(STORM_MSG_ANY, 7, &v, sizeof v, &s, nullptr) != sizeof v ||
                        v != static_cast<uint32_t>(s)) {
                        report(res, 1, storm_msg_error());
                        return 3;
                    }
                }
                if (storm_msg_cosched_stats(&cs[r]) != 0 || storm_msg_barrier() != 0 ||
                    storm_msg_finalize() != 0) {
                    report(res, 1, storm_msg_error());
                    return 4;
                }
                report(res, 0, "");
                return 0;
            });
        assert_true(co.serve_until([&] { return co.of(1) != nullptr; }, 10));
        agent.serve_attach(3);
        assert_true(agent.wait_all(20));
        for (uint32_t r = 0; r < 3; ++r) {
            if (!exited_ok(agent.status(r)))
                fail_msg("rank %u exited %d: %s", r, agent.status(r), sh->r[r].error);
            assert_int_equal(cs[r].status, 2); // not coscheduled
            assert_int_equal(cs[r].arrivals + cs[r].false_arrivals + cs[r].requests, 0);
            // Two messages, and the barrier's (rank 0 gathers two, the others get one).
            assert_int_equal(sh->r[r].stats.messages_received, r == 0 ? 4 : 3);
        }
        std::string e0 = slurp(dir + "/err.0"), e1 = slurp(dir + "/err.1"), e2 = slurp(dir + "/err.2");
        print_message("rank 0: %srank 1: %s", e0.c_str(), e1.c_str());
        assert_int_equal(lines(e1), 1);
        assert_string_equal(e1.c_str(), ("storm_msg: implicit coscheduling refused for rank 1 of job 1078: " +
                                         why + " (messaging continues without it)\n")
                                            .c_str());
        assert_int_equal(lines(e0), 1);
        assert_true(contains(e0,
                             "storm_msg: implicit coscheduling off for rank 0 of job 1078: cannot reach the "
                             "node agent at /nonexistent/" STORM_COSCHED_SOCKET_NAME ": "));
        assert_true(e2.empty());
        // The refused task's connection: its registration only.
        assert_int_equal(co.of(1)->msgs.size(), 1);
        assert_int_equal(co.conns.size(), 1);
    }
    munmap(cs, sizeof(CoStats) * 3);
    munmap(sh, sizeof *sh);
}

// (c) The status byte travels.  Rank 0 is a real task, not scheduled at
// first; the test plays rank 1 and chooses the status byte of its frames.
void test_status_byte(void **)
{
    Shared *sh = shared_block();
    {
        FakeCosched co;
        co.scheduled[0] = false;
        Agent agent(2, 25, 16 * 1024 * 2, 1024);
        std::string sock = co.path();
        agent.spawn(0, [sh, sock] {
            cosched_env(sock, 1079, "200000"); // at most one request per 200 ms
            return echo_task(sh->r[0]);
        });
        assert_true(co.serve_until([&] { return co.of(0) != nullptr; }, 10));
        agent.serve_attach(1);
        FakePeer peer(agent.ctx, agent.share.credits, 1024);
        assert_true(peer.connect_to_rank0(10));
        auto requests = [&] { return co.of_type(0, STORM_COSCHED_SCHEDULE); };

        // 1. From a scheduled sender to an unscheduled receiver: requests
        //    with status 1 and the sender's rank, batched; the refills the
        //    test sends (status 1 too) are not arrivals.  Rank 0's own frames
        //    say it is not scheduled.
        peer.status = msg::status_scheduled;
        CoStats s{};
        uint8_t st = 9;
        for (uint32_t i = 0; i < 3; ++i)
            peer.send_message(1, "x");
        for (uint32_t i = 0; i < 3; ++i) {
            FakePeer::Got g{};
            assert_true(peer.next(g, 10));
            assert_int_equal(g.status, msg::status_not_scheduled);
            std::memcpy(&s, g.data.data(), sizeof s);
        }
        assert_int_equal(s.status, 0);
        assert_true(co.serve_until([&] { return co.scheduled_count(0) >= 3; }, 5));
        co.serve_for(300); // more than the interval: nothing more comes
        assert_int_equal(co.scheduled_count(0), 3);
        auto r1 = requests();
        print_message("3 arrivals from a scheduled sender: %zu request(s)\n", r1.size());
        assert_true(r1.size() >= 1 && r1.size() <= 2); // batched (first at once, the rest within 200 ms)
        for (auto &m : r1)
            expect_msg(m, STORM_COSCHED_SCHEDULE, STORM_COSCHED_SCHEDULED, 1079, 1);
        s = peer.echo(2, &st);
        assert_int_equal(s.arrivals, 4);
        assert_int_equal(s.false_arrivals, 0);

        // 2. From an unscheduled sender: no request, false arrivals counted.
        co.serve_for(300);
        size_t before = requests().size();
        uint64_t counted = co.scheduled_count(0);
        peer.status = msg::status_not_scheduled;
        for (int i = 0; i < 3; ++i)
            s = peer.echo(3);
        co.serve_for(300);
        assert_int_equal(requests().size(), before);
        assert_int_equal(s.false_arrivals, 3);
        assert_int_equal(s.arrivals, 4);
        assert_int_equal(s.pending, 0);

        // 3. While the receiver is scheduled: nothing, whatever the sender.
        co.push(0, true);
        for (int i = 0; i < 100 && (s.status != 1 || st != msg::status_scheduled); ++i) {
            s = peer.echo(4, &st); // status 0 frames: never a request
            usleep(10000);
        }
        assert_int_equal(s.status, 1);
        assert_int_equal(st, msg::status_scheduled); // rank 0's frames say so now
        assert_int_equal(s.status_pushes, 1);
        uint64_t falses = s.false_arrivals;
        peer.status = msg::status_scheduled;
        for (int i = 0; i < 3; ++i)
            s = peer.echo(5, &st);
        peer.status = msg::status_unknown;
        s = peer.echo(5, &st);
        co.serve_for(300);
        assert_int_equal(requests().size(), before);
        assert_int_equal(co.scheduled_count(0), counted);
        assert_int_equal(s.arrivals, 4);
        assert_int_equal(s.false_arrivals, falses);

        // 4. Descheduled again: a sender of unknown status (not
        //    coscheduled) asks with status 2.
        co.push(0, false);
        peer.status = msg::status_not_scheduled;
        for (int i = 0; i < 100 && s.status != 0; ++i) {
            s = peer.echo(6);
            usleep(10000);
        }
        assert_int_equal(s.status, 0);
        co.serve_for(300);
        peer.status = msg::status_unknown;
        s = peer.echo(7);
        assert_true(co.serve_until([&] { return requests().size() > before; }, 5));
        auto r4 = requests();
        expect_msg(r4.back(), STORM_COSCHED_SCHEDULE, STORM_COSCHED_UNKNOWN, 1079, 1);
        assert_int_equal(r4.back().count, 1);

        for (uint8_t x : peer.frame_statuses)
            assert_true(x <= msg::status_unknown);
        peer.send_message(stop_tag, "");
        assert_true(agent.wait_all(10));
        if (!exited_ok(agent.status(0)))
            fail_msg("rank 0: %s", sh->r[0].error);
        assert_int_equal(co.of(0)->bad, 0);
    }
    munmap(sh, sizeof *sh);
}

// (d) A frame whose status byte is not 0, 1 or 2 (or whose reserved bytes
// are not zero) fails the receiver's context, naming the sender, like any
// malformed frame; a hello of frame version 1 is refused.
void test_malformed_status_byte(void **)
{
    for (int variant = 0; variant < 2; ++variant) {
        Shared *sh = shared_block();
        FakeCosched co;
        Agent agent(2, static_cast<uint32_t>(26 + variant), 16 * 1024 * 2, 1024);
        std::string sock = co.path();
        agent.spawn(0, [sh, sock] {
            cosched_env(sock, 1080);
            return echo_task(sh->r[0]);
        });
        assert_true(co.serve_until([&] { return co.of(0) != nullptr; }, 10));
        agent.serve_attach(1);
        if (variant == 0) {
            FakePeer old(agent.ctx, agent.share.credits, 1024);
            assert_false(old.connect_to_rank0(10, msg::hello_magic_v1)); // closed, no answer
        }
        FakePeer peer(agent.ctx, agent.share.credits, 1024);
        assert_true(peer.connect_to_rank0(10));
        peer.status = msg::status_scheduled;
        peer.echo(1); // a good frame first
        Frame f{};
        std::string want;
        if (variant == 0) {
            f.type = msg::frame_data;
            f.status = 7;
            PacketHeader h{1, 0, 1, 0, 0, packet_first | packet_last, 1};
            peer.send_raw(f, &h, sizeof h);
            want = "rank 1 sent a frame with status byte 7 (0, 1 or 2 expected)";
        } else {
            f.type = msg::frame_refill;
            f.status = msg::status_scheduled;
            f.pad[1] = 1;
            peer.send_raw(f);
            want = "rank 1 sent a frame whose reserved bytes are not zero";
        }
        assert_true(agent.wait_all(10));
        agent.collect_failed();
        for (int i = 0; i < 50 && !peer.closed; ++i)
            peer.pump(20);
        print_message("rank 0: %s\n", sh->r[0].error);
        assert_int_equal(sh->r[0].status, 1);
        assert_true(WIFEXITED(agent.status(0)) && WEXITSTATUS(agent.status(0)) == 2);
        assert_true(contains(sh->r[0].error, want));
        assert_true(contains(agent.task(0).failed, want));
        assert_true(contains(peer.abort, want)); // its peer learns why
        munmap(sh, sizeof *sh);
    }
}

// The batching of requests, without I/O.
void test_requests_batching(void **)
{
    using R = msg::CoschedRequests;
    using namespace std::chrono_literals;
    auto t0 = Clock::now();
    R q(10ms, t0);
    assert_false(q.due(t0));
    assert_true(q.wait(t0, 1s) == Clock::duration(1s)); // nothing pending
    // Scheduled: nothing counted.
    assert_true(q.arrived(3, msg::status_scheduled, true) == R::Arrival::ignored);
    assert_true(q.arrived(3, msg::status_not_scheduled, false) == R::Arrival::false_arrival);
    assert_int_equal(q.pending(), 0);
    // Unknown then scheduled senders merge into one request: status 1, the
    // scheduled sender's rank, both counted; a later unknown sender keeps
    // status 1 and rank 5.
    assert_true(q.arrived(4, msg::status_unknown, false) == R::Arrival::counted);
    assert_true(q.arrived(5, msg::status_scheduled, false) == R::Arrival::counted);
    assert_true(q.arrived(6, msg::status_unknown, false) == R::Arrival::counted);
    assert_true(q.due(t0)); // the first goes at once
    assert_int_equal(q.request().status, msg::status_scheduled);
    assert_int_equal(q.request().rank, 5);
    assert_int_equal(q.request().count, 3);
    q.attempted(t0, true);
    assert_int_equal(q.pending(), 0);
    // The next one waits for the interval.
    q.arrived(7, msg::status_unknown, false);
    assert_false(q.due(t0 + 5ms));
    assert_true(q.wait(t0 + 5ms, 1s) == Clock::duration(5ms));
    assert_true(q.due(t0 + 10ms));
    assert_int_equal(q.request().status, msg::status_unknown);
    assert_int_equal(q.request().rank, 7);
    // A full socket keeps them, retried after the interval.
    q.attempted(t0 + 10ms, false);
    assert_int_equal(q.pending(), 1);
    assert_false(q.due(t0 + 15ms));
    q.arrived(8, msg::status_scheduled, false);
    assert_true(q.due(t0 + 20ms));
    assert_int_equal(q.request().count, 2);
    assert_int_equal(q.request().rank, 8);
    // Scheduled now: the pending arrivals are forgotten.
    q.status_changed(true);
    assert_int_equal(q.pending(), 0);
    assert_false(q.due(t0 + 1s));
}

} // namespace

int main()
{
    signal(SIGPIPE, SIG_IGN);
    if (const char *f = getenv("TEST_FILTER"))
        cmocka_set_test_filter(f);
    const CMUnitTest tests[] = {
        cmocka_unit_test(test_requests_batching),     cmocka_unit_test(test_register_unregister),
        cmocka_unit_test(test_refused_registration),  cmocka_unit_test(test_status_byte),
        cmocka_unit_test(test_malformed_status_byte),
    };
    return cmocka_run_group_tests_name("msg_cosched", tests, nullptr, nullptr);
}
