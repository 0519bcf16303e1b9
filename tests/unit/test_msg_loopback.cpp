// libstormmsg end to end on one machine: the test plays the node agent
// (tests/unit/msg_fixture.hpp: a SOCK_SEQPACKET control socket in a
// temporary directory, a memfd window initialised by init_share, halt /
// release cycles with the window saved, released and restored in between
// while the tasks are stopped) for 3-4 forked tasks talking over 127.0.0.1.
#include "tests/unit/cmocka.hpp"

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <arpa/inet.h>
#include <fcntl.h>
#include <functional>
#include <linux/futex.h>
#include <map>
#include <memory>
#include <poll.h>
#include <random>
#include <sched.h>
#include <string>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include "lib/net/wire.hpp"
#include "switch_rdma/context.hpp"
#include "switch_rdma/control.hpp"
#include "switch_rdma/layout.hpp"
#include "switch_rdma/msg/frames.hpp"
#include "switch_rdma/msg/handshake.hpp"
#include "switch_rdma/msg/storm_msg.h"
#include "switch_rdma/pool_config.hpp"
#include "switch_rdma/window.hpp"
#include "tests/unit/helpers.hpp"
#include "tests/unit/msg_fixture.hpp"

using namespace storm::rdma;
using namespace msg_fixture;
using test_helpers::contains;
using Clock = std::chrono::steady_clock;

namespace {

// ---- the tasks ---------------------------------------------------------------

constexpr int data_tag = 3;

size_t msg_size(uint32_t src, uint32_t dst, uint64_t round)
{
    // 0 .. about three packets of 1 KiB, some exactly on packet boundaries.
    static const size_t sizes[] = {
        0, 1, 24, 100, 1000, 1024 - 32, 1024 - 32 + 1, 2048, 3000, 3 * (1024 - 32)};
    return 24 + sizes[(src * 3 + dst * 5 + round) % 10];
}

struct Payload {
    uint32_t src, dst;
    uint64_t round;
    uint32_t stop;
    uint32_t pad;
};

// All-to-all rounds: each round every task sends one message to every peer
// and receives one from every peer (in order, exactly once, intact); rank 0
// ends the traffic once the agent did `stop_after` switches.
int alltoall_task(Shared *sh)
{
    int rank = -1;
    auto failed = [&](const char *what) {
        report(sh->r[rank < 0 ? 7 : rank], 1, std::string(what) + ": " + storm_msg_error());
        return 1;
    };
    if (init_failed())
        return failed("init");
    rank = storm_msg_rank();
    int n = storm_msg_size();
    std::vector<uint64_t> next(static_cast<size_t>(n), 0);
    std::vector<uint8_t> buf(8192);
    bool stop = false;
    uint64_t round = 0, received = 0;
    while (!stop) {
        uint32_t stop_flag = rank == 0 && sh->switches.load() >= static_cast<uint64_t>(sh->stop_after.load());
        for (int d = 1; d < n; ++d) {
            uint32_t dst = static_cast<uint32_t>((rank + d) % n);
            size_t len = msg_size(static_cast<uint32_t>(rank), dst, round);
            Payload p{static_cast<uint32_t>(rank), dst, round, stop_flag, 0};
            std::memcpy(buf.data(), &p, sizeof p);
            for (size_t i = sizeof p; i < len; ++i)
                buf[i] = static_cast<uint8_t>(rank + round + i);
            if (storm_msg_send(static_cast<int>(dst), data_tag + static_cast<int>(round % 2), buf.data(),
                               len) != 0)
                return failed("send");
        }
        if (stop_flag)
            stop = true;
        for (int k = 1; k < n; ++k) {
            // Odd rounds by source, even ones from any source (a peer is at
            // most one round ahead: the rounds' tags alternate).
            int want = round % 2 ? (rank + n - k) % n : STORM_MSG_ANY;
            int want_tag = data_tag + static_cast<int>(round % 2);
            int src = -1, tag = -1;
            ssize_t got = storm_msg_recv(want, round % 4 == 1 ? STORM_MSG_ANY : want_tag, buf.data(),
                                         buf.size(), &src, &tag);
            if (got < 0)
                return failed("recv");
            Payload p;
            std::memcpy(&p, buf.data(), sizeof p);
            char why[256] = "";
            if (tag != want_tag || src == rank || p.src != static_cast<uint32_t>(src) ||
                p.dst != static_cast<uint32_t>(rank))
                std::snprintf(why, sizeof why, "message from %d tag %d claims %u -> %u", src, tag, p.src,
                              p.dst);
            else if (p.round != next[static_cast<size_t>(src)])
                std::snprintf(why, sizeof why, "from rank %d: round %llu, expected %llu", src,
                              static_cast<unsigned long long>(p.round),
                              static_cast<unsigned long long>(next[static_cast<size_t>(src)]));
            else if (static_cast<size_t>(got) != msg_size(p.src, p.dst, p.round))
                std::snprintf(why, sizeof why, "from rank %d: %zd bytes", src, got);
            else
                for (size_t i = sizeof p; i < static_cast<size_t>(got) && !*why; ++i)
                    if (buf[i] != static_cast<uint8_t>(p.src + p.round + i))
                        std::snprintf(why, sizeof why, "from rank %d round %llu: byte %zu corrupt", src,
                                      static_cast<unsigned long long>(p.round), i);
            if (*why) {
                report(sh->r[rank], 1, why);
                return 1;
            }
            ++next[static_cast<size_t>(src)];
            ++received;
            if (src == 0 && p.stop)
                stop = true;
        }
        ++round;
    }
    if (storm_msg_barrier() != 0)
        return failed("barrier");
    int s, t;
    if (storm_msg_probe(STORM_MSG_ANY, STORM_MSG_ANY, &s, &t) >= 0) {
        report(sh->r[rank], 1, "a message too many from rank " + std::to_string(s));
        return 1;
    }
    if (storm_msg_finalize() != 0)
        return failed("finalize");
    sh->r[rank].messages = received;
    sh->r[rank].rounds = round;
    report(sh->r[rank], 0, "");
    return 0;
}

// ---- the tests ---------------------------------------------------------------

// The agent on the tasks' CPU at real-time priority (when allowed): a task
// that answers is preempted at once, before it runs another line, as the
// node agent (storm_rt_priority) does on a busy node.
struct Preempting {
    cpu_set_t before;
    bool rt = false;
    Preempting()
    {
        sched_getaffinity(0, sizeof before, &before);
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(sched_getcpu(), &one);
        sched_setaffinity(0, sizeof one, &one); // the tasks forked next inherit it
    }
    void realtime()
    {
        sched_param p{};
        p.sched_priority = 1;
        rt = sched_setscheduler(0, SCHED_FIFO | SCHED_RESET_ON_FORK, &p) == 0;
        if (!rt)
            print_message("(not at real-time priority: %s)\n", std::strerror(errno));
    }
    ~Preempting()
    {
        sched_param p{};
        sched_setscheduler(0, SCHED_OTHER, &p);
        sched_setaffinity(0, sizeof before, &before);
    }
};

void run_alltoall(uint32_t ntasks, uint32_t id, int switches, uint32_t nodes, bool stop_at_halted = false)
{
    Shared *sh = shared_block();
    sh->stop_after = switches;
    {
        std::unique_ptr<Preempting> preempt;
        if (stop_at_halted)
            preempt = std::make_unique<Preempting>();
        // A small pool: few credits and a short send queue, so that the
        // tasks stall on credits and the queues are not empty at switches.
        Agent agent(ntasks, id, 16 * 1024 * ntasks, 1024, nodes);
        agent.stop_at_halted = stop_at_halted;
        assert_true(agent.share.credits >= 1);
        for (uint32_t r = 0; r < ntasks; ++r)
            agent.spawn(r, [sh] { return alltoall_task(sh); });
        if (preempt)
            preempt->realtime();
        agent.serve_attach(ntasks);
        std::mt19937 rng(id);
        auto deadline = Clock::now() +
                        std::chrono::seconds(getenv("TEST_DEADLINE") ? atoi(getenv("TEST_DEADLINE")) : 120);
        while (!agent.reap()) {
            assert_true(Clock::now() < deadline);
            if (!agent.cycle(rng)) {
                for (uint32_t r = 0; r < ntasks; ++r)
                    if (!agent.task(r).failed.empty())
                        print_message("rank %u failed: %s\n", r, agent.task(r).failed.c_str());
                fail_msg("a switch failed at epoch %llu", static_cast<unsigned long long>(agent.epoch));
            }
            sh->switches = agent.epoch;
            usleep(rng() % 1000);
        }
        print_message("%s: %u tasks, %llu switches, %llu rounds, %u credits\n", agent.ctx.encode().c_str(),
                      ntasks, static_cast<unsigned long long>(agent.epoch),
                      static_cast<unsigned long long>(sh->r[0].rounds), agent.share.credits);
        uint64_t stalls = 0, waits = 0;
        for (uint32_t r = 0; r < ntasks; ++r) {
            if (!exited_ok(agent.status(r)) || sh->r[r].status != 0)
                fail_msg("rank %u: status %d: %s", r, agent.status(r), sh->r[r].error);
            const Result &res = sh->r[r];
            assert_int_equal(res.messages, res.rounds * (ntasks - 1));
            assert_int_equal(res.rounds, sh->r[0].rounds);
            assert_int_equal(res.stats.credits_missing, 0); // credits back to initial
            assert_int_equal(res.stats.credits, agent.share.credits);
            assert_true(res.stats.halts >= static_cast<uint64_t>(switches) / 2);
            assert_true(res.stats.packets_sent > 0 && res.stats.packets_received > 0);
            stalls += res.stats.credit_stalls;
            waits += res.stats.resident_waits;
            QueueHeader *h = agent.q(r);
            assert_true(h->send_head.load() == h->send_tail.load());
            assert_true(h->recv_head.load() == h->recv_tail.load());
        }
        print_message("credit stalls %llu, resident waits %llu\n", static_cast<unsigned long long>(stalls),
                      static_cast<unsigned long long>(waits));
        assert_true(agent.epoch >= static_cast<uint64_t>(switches));
    }
    munmap(sh, sizeof *sh);
}

void test_alltoall_3_tasks(void **) { run_alltoall(3, 1, 200, 1); }
// Two nodes (127.0.0.1, 127.0.0.2) of two tasks.
void test_alltoall_4_tasks(void **) { run_alltoall(4, 2, 300, 2); }
// Each task stopped the moment it answers halted: its own halt marks must
// be on their way by then, or its peers wait for them until it runs again
// (the round times out, and the test fails).
void test_alltoall_stop_at_halted(void **) { run_alltoall(4, 3, 200, 2, true); }

// A task killed in the middle: the others fail cleanly (no hang) with the
// dead rank named, and tell the agent.
void test_task_killed(void **)
{
    Shared *sh = shared_block();
    sh->stop_after = 1 << 30; // never
    {
        Agent agent(4, 3, 64 * 1024 * 4, 1024);
        for (uint32_t r = 0; r < 4; ++r)
            agent.spawn(r, [sh] { return alltoall_task(sh); });
        agent.serve_attach(4);
        std::mt19937 rng(3);
        for (int i = 0; i < 20; ++i) {
            assert_true(agent.cycle(rng));
            usleep(2000);
        }
        kill(agent.task(2).pid, SIGKILL);
        assert_true(agent.wait_all(20)); // nobody hangs
        agent.collect_failed();
        for (uint32_t r : {0u, 1u, 3u}) {
            assert_int_equal(sh->r[r].status, 1);
            assert_true(WIFEXITED(agent.status(r)) && WEXITSTATUS(agent.status(r)) == 1);
            print_message("rank %u: %s\n", r, sh->r[r].error);
            assert_true(contains(sh->r[r].error, "rank 2"));
            assert_true(contains(agent.task(r).failed, "rank 2"));
        }
    }
    munmap(sh, sizeof *sh);
}

// The API's refusals: no context, an agent refusing the attach, a message
// longer than the buffer (kept, received again), bad arguments.
void test_api_errors(void **)
{
    unsetenv("STORM_CTX");
    assert_int_equal(storm_msg_init(), -1);
    assert_true(contains(storm_msg_error(), "STORM_CTX is not set (is SwitchType=switch/rdma?)"));
    assert_int_equal(storm_msg_rank(), -1);
    assert_int_equal(storm_msg_send(0, 0, "", 0), -1);

    Shared *sh = shared_block();
    {
        Agent agent(2, 4, 64 * 1024 * 2, 1024);
        for (uint32_t r = 0; r < 2; ++r)
            agent.spawn(r, [sh, r] {
                int rc = storm_msg_init();
                report(sh->r[r], rc == 0 ? 0 : 1, storm_msg_error());
                return rc == 0 ? 0 : 1;
            });
        agent.serve_attach(2, "context 4 is not open on this node");
        assert_true(agent.wait_all(10));
        for (uint32_t r = 0; r < 2; ++r)
            assert_true(contains(sh->r[r].error, "refused the attach of rank " + std::to_string(r) +
                                                     " to context 4: context 4 is not open on this node"));
    }
    {
        Agent agent(2, 5, 64 * 1024 * 2, 1024);
        agent.spawn(0, [sh] {
            if (init_failed())
                return 1;
            std::string big(5000, 'x');
            for (size_t i = 0; i < big.size(); ++i)
                big[i] = static_cast<char>(i * 13);
            if (storm_msg_send(1, 9, big.data(), big.size()) != 0 || storm_msg_send(1, 4, "a", 1) != 0 ||
                storm_msg_send(0, 2, "self", 4) != 0)
                return 2;
            char self[8];
            int s, t;
            if (storm_msg_recv(0, 2, self, sizeof self, &s, &t) != 4 || s != 0 || t != 2)
                return 3;
            if (storm_msg_send(1, -3, "", 0) != -1 || storm_msg_send(7, 0, "", 0) != -1)
                return 4;
            return storm_msg_finalize() == 0 ? 0 : 5;
        });
        agent.spawn(1, [sh] {
            if (init_failed())
                return 1;
            char small[100];
            int s = -1, t = -1;
            // Tag 4's message is received first although tag 9's came before.
            if (storm_msg_recv(0, 4, small, sizeof small, &s, &t) != 1 || t != 4)
                return 2;
            if (storm_msg_recv(STORM_MSG_ANY, STORM_MSG_ANY, small, sizeof small, &s, &t) != -1 ||
                errno != EMSGSIZE)
                return 3;
            report(sh->r[1], 0, storm_msg_error());
            if (storm_msg_probe(0, 9, &s, &t) != 5000)
                return 4;
            std::string big(5000, '\0');
            if (storm_msg_recv(0, 9, big.data(), big.size(), &s, &t) != 5000)
                return 5;
            for (size_t i = 0; i < big.size(); ++i)
                if (big[i] != static_cast<char>(i * 13))
                    return 6;
            return storm_msg_finalize() == 0 ? 0 : 7;
        });
        agent.serve_attach(2);
        assert_true(agent.wait_all(20));
        assert_true(exited_ok(agent.status(0)));
        if (!exited_ok(agent.status(1)))
            fail_msg("rank 1 exited %d", WEXITSTATUS(agent.status(1)));
        assert_true(contains(sh->r[1].error, "message of 5000 bytes from rank 0 with tag 9"));
        assert_true(contains(sh->r[1].error, "stays queued"));
    }
    {
        // A header that is not the one announced; an unreachable agent.
        Agent agent(2, 12, 16 * 1024 * 2, 1024);
        agent.q(1)->rank = 7;
        agent.spawn(1, [sh] {
            int rc = storm_msg_init();
            report(sh->r[1], rc == 0 ? 0 : 1, storm_msg_error());
            return 0;
        });
        agent.serve_attach(1);
        assert_true(agent.wait_all(10));
        assert_true(contains(sh->r[1].error,
                             "the queue header does not match the attach answer: rank is 7, expected 1"));
        setenv("STORM_CTX", agent.ctx.encode().c_str(), 1);
        setenv("STORM_POOL_SOCKET", "/nonexistent/storm-pool.sock", 1);
        setenv("SLURM_PROCID", "0", 1);
        assert_int_equal(storm_msg_init(), -1);
        assert_true(
            contains(storm_msg_error(), "cannot reach the node agent at /nonexistent/storm-pool.sock"));
        setenv("SLURM_PROCID", "2", 1);
        assert_int_equal(storm_msg_init(), -1);
        assert_true(contains(storm_msg_error(), "SLURM_PROCID \"2\" is not a rank of the context's 2 tasks"));
        // A context without a key (format version 3: an older slurmctld's)
        // connects no task.
        Context keyless = agent.ctx;
        keyless.key.clear();
        setenv("STORM_CTX", keyless.encode().c_str(), 1);
        assert_true(keyless.encode()[0] == '3');
        setenv("SLURM_PROCID", "0", 1);
        assert_int_equal(storm_msg_init(), -1);
        assert_true(contains(storm_msg_error(),
                             "context 12 of step 1012.0 has no key (format version 3 or older): its tasks' "
                             "connections cannot be authenticated"));
        unsetenv("STORM_CTX");
    }
    {
        // Two tasks in a pool too small for any credit.
        Agent agent(2, 6, 64 * 1024 * 2, 1024);
        agent.share.credits = 0;
        agent.spawn(1, [sh] {
            int rc = storm_msg_init();
            report(sh->r[1], rc == 0 ? 0 : 1, storm_msg_error());
            return 0;
        });
        agent.serve_attach(1);
        assert_true(agent.wait_all(10));
        assert_true(contains(sh->r[1].error, "the pool is too small for 2 tasks"));
    }
    munmap(sh, sizeof *sh);
}

// A task that waits for a peer's mark longer than STORM_MSG_TIMEOUT fails,
// naming the peer, tells the agent, and its peer fails with it.
void test_mark_timeout(void **)
{
    Shared *sh = shared_block();
    {
        Agent agent(2, 10, 16 * 1024 * 2, 1024);
        for (uint32_t r = 0; r < 2; ++r)
            agent.spawn(
                r,
                [sh, r] {
                    if (init_failed())
                        return 2;
                    char b[8];
                    ssize_t n = storm_msg_recv(STORM_MSG_ANY, STORM_MSG_ANY, b, sizeof b, nullptr, nullptr);
                    report(sh->r[r], n < 0 ? 1 : 0, storm_msg_error());
                    return n < 0 ? 1 : 0;
                },
                "", "2");
        agent.serve_attach(2);
        // Only rank 0 is halted: rank 1 never sends its halt mark.
        std::string m = control::epoch_message(control::Type::halt, 1);
        assert_true(send(agent.task(0).conn, m.data(), m.size(), MSG_NOSIGNAL) > 0);
        assert_true(agent.wait_all(15));
        agent.collect_failed();
        print_message("rank 0: %s\nrank 1: %s\n", sh->r[0].error, sh->r[1].error);
        assert_true(contains(agent.task(0).failed, "rank 1's halt mark for epoch 1 did not come within 2 s"));
        assert_true(contains(sh->r[0].error, "rank 1's halt mark for epoch 1"));
        assert_true(contains(sh->r[1].error, "rank 0 failed: rank 1's halt mark"));
        assert_int_equal(sh->r[0].stats.halts, 1);
    }
    munmap(sh, sizeof *sh);
}

// ---- the handshake (switch_rdma/msg/handshake.hpp) ----------------------------

namespace hs = storm::rdma::msg;

// A TCP connection to 127.0.0.1:port, retried until the port listens.
int connect_to(uint16_t port)
{
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sa.sin_port = htons(port);
    for (int i = 0; i < 500; ++i) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (connect(fd, reinterpret_cast<sockaddr *>(&sa), sizeof sa) == 0)
            return fd;
        close(fd);
        usleep(10000);
    }
    fail_msg("nothing listens on port %u", port);
    return -1;
}

// Reads exactly n bytes within 5 s; false on end of stream or timeout.
bool read_n(int fd, void *buf, size_t n)
{
    auto *p = static_cast<char *>(buf);
    while (n) {
        pollfd pf{fd, POLLIN, 0};
        if (poll(&pf, 1, 5000) != 1)
            return false;
        ssize_t r = recv(fd, p, n, 0);
        if (r <= 0)
            return false;
        p += r;
        n -= static_cast<size_t>(r);
    }
    return true;
}

// Whether the other end closes the connection within 5 s without sending
// another byte (what a refused hello gets).
bool closed_without_answer(int fd)
{
    char c;
    pollfd pf{fd, POLLIN, 0};
    return poll(&pf, 1, 5000) == 1 && recv(fd, &c, 1, 0) == 0;
}

// What a task printed on stderr (redirected to `path`).
std::string file_text(const std::string &path)
{
    std::string s;
    if (FILE *f = std::fopen(path.c_str(), "r")) {
        char b[4096];
        size_t n;
        while ((n = std::fread(b, 1, sizeof b, f)) > 0)
            s.append(b, n);
        std::fclose(f);
    }
    return s;
}

size_t count(const std::string &s, const std::string &what)
{
    size_t n = 0;
    for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1))
        ++n;
    return n;
}

// Only a task of the step, which holds the context's key, opens a
// connection to a task, and each side proves the key to the other:
//  1. a process that holds rank 0's port (it bound it first) and answers
//     rank 1's hello without the key: rank 1 refuses it (and the test
//     keeps the real hello rank 1 sent it);
//  2. the real rank 0 then refuses, naming each on its stderr: a hello of
//     the previous version without any proof (what any user could send
//     before: the right ids and ranks were enough), one proving a guessed
//     key, rank 1's real hello of step 1 replayed, and one of another
//     context; then the real rank 1 connects and the step runs.
void test_forged_hellos_refused(void **)
{
    Shared *sh = shared_block();
    char tmpl[] = "/tmp/storm-msg-err-XXXXXX";
    int efd = mkstemp(tmpl);
    assert_true(efd >= 0);
    std::string err_path = tmpl;
    {
        Agent agent(2, 13, 16 * 1024 * 2, 1024);
        const Context &ctx = agent.ctx;
        auto task = [sh](uint32_t r, int err_fd) {
            return [sh, r, err_fd] {
                if (err_fd >= 0)
                    dup2(err_fd, 2);
                if (init_failed()) {
                    report(sh->r[r], 1, storm_msg_error());
                    return 1;
                }
                int rc = storm_msg_barrier() == 0 && storm_msg_finalize() == 0 ? 0 : 1;
                report(sh->r[r], rc, storm_msg_error());
                return rc;
            };
        };

        // 1. rank 0's port held by the test, which does not prove the key.
        int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        int one = 1;
        setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        sockaddr_in sa{};
        sa.sin_family = AF_INET;
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        sa.sin_port = htons(ctx.port_for(0));
        assert_int_equal(bind(lfd, reinterpret_cast<sockaddr *>(&sa), sizeof sa), 0);
        assert_int_equal(listen(lfd, 4), 0);
        agent.spawn(1, task(1, -1));
        agent.serve_attach(1);
        pollfd pl{lfd, POLLIN, 0};
        assert_int_equal(poll(&pl, 1, 10000), 1);
        int c1 = accept(lfd, nullptr, nullptr);
        assert_true(c1 >= 0);
        hs::Challenge ch1 = hs::make_challenge();
        assert_int_equal(send(c1, &ch1, sizeof ch1, MSG_NOSIGNAL), sizeof ch1);
        hs::Hello captured{};
        assert_true(read_n(c1, &captured, sizeof captured));
        assert_int_equal(captured.src, 1);
        assert_int_equal(captured.dst, 0);
        // It is a real hello: it proves the key over this challenge.
        assert_true(hs::check_hello(captured, sizeof captured, ch1, ctx, 0, 1024).what ==
                    hs::Verdict::accepted);
        hs::HelloAck fake{hs::hello_magic, 1, {}};
        assert_int_equal(send(c1, &fake, sizeof fake, MSG_NOSIGNAL), sizeof fake);
        assert_true(agent.wait_all(20));
        assert_int_equal(sh->r[1].status, 1);
        if (!contains(sh->r[1].error,
                      "the answer of rank 0 (port " + std::to_string(ctx.port_for(0)) +
                          ") does not prove the context's key: another process holds its port"))
            fail_msg("rank 1: %s", sh->r[1].error);
        close(c1);
        close(lfd);

        // 2. the real rank 0.
        agent.spawn(0, task(0, efd));
        agent.serve_attach(1);
        // 2a. the previous version's hello: the right ids, no proof.  Sent
        // at once, as that version did (its acceptor sent nothing first).
        int fd = connect_to(ctx.port_for(0));
        struct {
            uint32_t magic, order, id, job, step, src, dst, packet_size;
        } v2{hs::hello_magic_v2, hs::byte_order, ctx.id, ctx.job_id, ctx.step_id, 1, 0, 1024};
        assert_int_equal(send(fd, &v2, sizeof v2, MSG_NOSIGNAL), sizeof v2);
        hs::Challenge ch{};
        assert_true(read_n(fd, &ch, sizeof ch)); // not a HelloAck: a challenge
        assert_true(hs::check_challenge(ch).empty());
        assert_true(closed_without_answer(fd));
        close(fd);
        // 2b. a guessed key.
        fd = connect_to(ctx.port_for(0));
        assert_true(read_n(fd, &ch, sizeof ch));
        Context guess = ctx;
        guess.key = context_key();
        hs::Hello h = hs::make_hello(guess, 1, 0, 1024, ch);
        assert_int_equal(send(fd, &h, sizeof h, MSG_NOSIGNAL), sizeof h);
        assert_true(closed_without_answer(fd));
        close(fd);
        // 2c. rank 1's real hello, replayed.
        fd = connect_to(ctx.port_for(0));
        assert_true(read_n(fd, &ch, sizeof ch));
        assert_int_equal(send(fd, &captured, sizeof captured, MSG_NOSIGNAL), sizeof captured);
        assert_true(closed_without_answer(fd));
        close(fd);
        // 2d. another context (with this one's key).
        fd = connect_to(ctx.port_for(0));
        assert_true(read_n(fd, &ch, sizeof ch));
        Context other = ctx;
        other.id = 99;
        h = hs::make_hello(other, 1, 0, 1024, ch);
        assert_int_equal(send(fd, &h, sizeof h, MSG_NOSIGNAL), sizeof h);
        assert_true(closed_without_answer(fd));
        close(fd);
        // The real rank 1.
        agent.spawn(1, task(1, -1));
        agent.serve_attach(1);
        assert_true(agent.wait_all(20));
        for (uint32_t r = 0; r < 2; ++r)
            if (sh->r[r].status != 0)
                fail_msg("rank %u: %s", r, sh->r[r].error);
        std::string err = file_text(err_path);
        std::fprintf(stderr, "%s", err.c_str());
        std::string head =
            "storm_msg: rank 0 of step " + std::to_string(ctx.job_id) + ".0 refused a connection: ";
        assert_int_equal(count(err, head), 4);
        assert_int_equal(count(err, "rank 1 speaks frame version 2, this task version 3"), 1);
        assert_int_equal(count(err,
                               "rank 1's hello does not prove the context's key (a forged or replayed hello) "
                               "(from 127.0.0.1:"),
                         2);
        assert_int_equal(
            count(err, "context 99 of step " + std::to_string(ctx.job_id) + ".0 is not this one"), 1);
    }
    close(efd);
    unlink(err_path.c_str());
    munmap(sh, sizeof *sh);
}

// Connections that never say hello (anyone can open them: the port is
// known) hold up no peer: rank 1's hello is read beside them, and the step
// starts at once (it took 5 s when hellos were read one connection at a
// time, each given 5 s).
void test_idle_connections_hold_up_no_peer(void **)
{
    Shared *sh = shared_block();
    {
        Agent agent(2, 12, 16 * 1024 * 2, 1024);
        auto task = [sh](uint32_t r) {
            return [sh, r] {
                if (init_failed()) {
                    report(sh->r[r], 1, storm_msg_error());
                    return 1;
                }
                int rc = storm_msg_barrier() == 0 && storm_msg_finalize() == 0 ? 0 : 1;
                report(sh->r[r], rc, storm_msg_error());
                return rc;
            };
        };
        agent.spawn(0, task(0));
        agent.serve_attach(1);
        sockaddr_in sa{};
        sa.sin_family = AF_INET;
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        sa.sin_port = htons(agent.ctx.port_for(0));
        std::vector<int> idle;
        for (int i = 0; i < 400 && idle.size() < 3; ++i) {
            int fd = socket(AF_INET, SOCK_STREAM, 0);
            if (connect(fd, reinterpret_cast<sockaddr *>(&sa), sizeof sa) == 0) {
                idle.push_back(fd);
                continue;
            }
            close(fd);
            usleep(10000);
        }
        assert_int_equal(idle.size(), 3);
        auto t0 = std::chrono::steady_clock::now();
        agent.spawn(1, task(1));
        agent.serve_attach(1);
        assert_true(agent.wait_all(30));
        double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        for (uint32_t r = 0; r < 2; ++r)
            if (sh->r[r].status != 0)
                fail_msg("rank %u: %s", r, sh->r[r].error);
        if (took > 4)
            fail_msg("the step took %.1f s to start beside 3 idle connections", took);
        for (int fd : idle)
            close(fd);
    }
    munmap(sh, sizeof *sh);
}

// A context of one task: messages to itself, a barrier, switches, finalize.
void test_single_task(void **)
{
    Shared *sh = shared_block();
    {
        Agent agent(1, 13, 16 * 1024, 1024);
        agent.spawn(0, [sh] {
            if (init_failed() || storm_msg_size() != 1 || storm_msg_rank() != 0)
                return 1;
            std::string big(10000, 'q');
            for (int i = 0; i < 100; ++i) {
                if (storm_msg_send(0, i, big.data(), big.size()) != 0)
                    return 2;
                int s, t;
                if (storm_msg_recv(STORM_MSG_ANY, i, big.data(), big.size(), &s, &t) != 10000 || s != 0 ||
                    t != i)
                    return 3;
                if (storm_msg_barrier() != 0)
                    return 4;
                usleep(1000);
            }
            if (storm_msg_finalize() != 0)
                return 5;
            report(sh->r[0], 0, "");
            return 0;
        });
        agent.serve_attach(1);
        std::mt19937 rng(13);
        while (!agent.reap())
            assert_true(agent.cycle(rng));
        assert_true(exited_ok(agent.status(0)));
        assert_int_equal(sh->r[0].stats.packets_sent, 0);
        assert_int_equal(sh->r[0].stats.messages_received, 100);
    }
    munmap(sh, sizeof *sh);
}

// A task attached while its context is swapped out (resident 0, halted at
// the agent's epoch) waits in storm_msg_init until the context is released.
void test_attach_swapped_out(void **)
{
    Shared *sh = shared_block();
    {
        Agent agent(2, 9, 16 * 1024 * 2, 1024);
        agent.epoch = 4;
        agent.attach_resident = false;
        for (uint32_t r = 0; r < 2; ++r)
            agent.q(r)->resident = 0;
        for (uint32_t r = 0; r < 2; ++r)
            agent.spawn(r, [sh, r] {
                if (init_failed()) {
                    report(sh->r[r], 1, storm_msg_error());
                    return 1;
                }
                char b[16] = "hello";
                int peer = 1 - static_cast<int>(r);
                if (storm_msg_send(peer, 1, b, 6) != 0 ||
                    storm_msg_recv(peer, 1, b, sizeof b, nullptr, nullptr) != 6 ||
                    storm_msg_finalize() != 0) {
                    report(sh->r[r], 1, storm_msg_error());
                    return 1;
                }
                report(sh->r[r], 0, "");
                return 0;
            });
        agent.serve_attach(2);
        usleep(100000);
        for (uint32_t r = 0; r < 2; ++r)
            assert_int_equal(sh->r[r].status, -1); // still waiting in init
        for (uint32_t r = 0; r < 2; ++r) {
            agent.q(r)->resident.store(1);
            syscall(SYS_futex, &agent.q(r)->resident, FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
        }
        assert_true(agent.round(control::Type::release, control::Type::ready, 4));
        assert_true(agent.wait_all(20));
        for (uint32_t r = 0; r < 2; ++r)
            if (sh->r[r].status != 0)
                fail_msg("rank %u: %s", r, sh->r[r].error);
        assert_int_equal(sh->r[0].stats.releases, 1);
    }
    munmap(sh, sizeof *sh);
}

// The programs built on the library (tests/integration/msg_alltoall,
// contrib/bench/msg_bw) run as tasks under this agent, through switches.
std::string built(const char *rel)
{
    const char *b = getenv("STORM_BUILDDIR");
    std::string path = std::string(b ? b : ".") + "/" + rel;
    return access(path.c_str(), X_OK) == 0 ? path : "";
}

void run_program(uint32_t ntasks, uint32_t id, const std::vector<std::string> &argv)
{
    Agent agent(ntasks, id, 16 * 1024 * ntasks, 1024);
    for (uint32_t r = 0; r < ntasks; ++r)
        agent.spawn(r, [&argv] {
            std::vector<char *> a;
            for (auto &s : argv)
                a.push_back(const_cast<char *>(s.c_str()));
            a.push_back(nullptr);
            execv(a[0], a.data());
            return 127;
        });
    agent.serve_attach(ntasks);
    std::mt19937 rng(id);
    auto deadline = Clock::now() + std::chrono::seconds(120);
    while (!agent.reap()) {
        assert_true(Clock::now() < deadline);
        assert_true(agent.cycle(rng));
        usleep(rng() % 3000);
    }
    print_message("%s: %llu switches\n", argv[0].c_str(), static_cast<unsigned long long>(agent.epoch));
    for (uint32_t r = 0; r < ntasks; ++r)
        if (!exited_ok(agent.status(r)))
            fail_msg("%s: rank %u exited with status %d", argv[0].c_str(), r, agent.status(r));
}

void test_programs(void **)
{
    std::string alltoall = built("tests/integration/msg_alltoall"), bw = built("contrib/bench/msg_bw");
    if (alltoall.empty() || bw.empty())
        skip();
    run_program(4, 7, {alltoall, "300", "6000"});
    run_program(2, 8, {bw, "-n", "300", "64", "4096", "65536"});
}

} // namespace

int main()
{
    signal(SIGPIPE, SIG_IGN);
    if (const char *f = getenv("TEST_FILTER"))
        cmocka_set_test_filter(f);
    const CMUnitTest tests[] = {
        cmocka_unit_test(test_api_errors),
        cmocka_unit_test(test_alltoall_3_tasks),
        cmocka_unit_test(test_alltoall_4_tasks),
        cmocka_unit_test(test_alltoall_stop_at_halted),
        cmocka_unit_test(test_task_killed),
        cmocka_unit_test(test_mark_timeout),
        cmocka_unit_test(test_forged_hellos_refused),
        cmocka_unit_test(test_idle_connections_hold_up_no_peer),
        cmocka_unit_test(test_single_task),
        cmocka_unit_test(test_attach_swapped_out),
        cmocka_unit_test(test_programs),
    };
    return cmocka_run_group_tests_name("msg_loopback", tests, nullptr, nullptr);
}
