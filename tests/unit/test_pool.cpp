// The node's buffer pool (switch_rdma/pool.hpp) against fake slurmstepd and
// fake tasks on its real control socket: who may open, close and attach;
// the pool's accounting and credits; halt / swap / release with queue
// contents saved and restored exactly; a swap whose tasks are not stopped
// yet waits on a timer, the loop going on, and completes once they are; a
// corrupt queue index or a task that never halts fails its context without
// blocking the switch; a context out of the pool still sends its halt marks
// before its job stops; the jobs of open coscheduled contexts are admitted
// to coscheduling.
#include <fstream>
#include <string>

#include "tests/unit/cmocka.hpp"

#include <algorithm>
#include <arpa/inet.h>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include <event2/event.h>

#include "lib/net/fd_passing.hpp"
#include "switch_rdma/control.hpp"
#include "switch_rdma/layout.hpp"
#include "switch_rdma/pool.hpp"
#include "tests/unit/helpers.hpp"

using namespace storm;
using namespace storm::rdma;
using namespace std::chrono_literals;
using test_helpers::contains;

namespace {

in_addr_t addr(const char *a)
{
    in_addr ia{};
    inet_pton(AF_INET, a, &ia);
    return ia.s_addr;
}

Context context(uint32_t id, uint32_t job, PoolMode mode, uint32_t divisions, uint32_t ntasks, uint32_t local)
{
    Context c;
    c.id = id;
    c.job_id = job;
    c.step_id = 0;
    c.uid = 0;
    c.mode = mode;
    c.divisions = divisions;
    c.port_base = 40000;
    c.ntasks = ntasks;
    ContextNode me{addr("10.9.0.1"), {}}, other{addr("10.9.0.2"), {}};
    for (uint32_t r = 0; r < ntasks; ++r)
        (r < local ? me : other).ranks.push_back(r);
    c.nodes.push_back(me);
    if (!other.ranks.empty())
        c.nodes.push_back(other);
    return c;
}

struct Bench {
    event_base *base = event_base_new();
    std::string dir;
    std::unique_ptr<Pool> pool;
    std::shared_ptr<node::Admissions> admissions = std::make_shared<node::Admissions>();
    bool tasks_stopped = true;
    Bench(std::vector<uid_t> trusted = {0}, uint64_t pool_size = 1 << 20)
    {
        char tmpl[] = "/tmp/storm-pool-test.XXXXXX";
        dir = mkdtemp(tmpl);
        chmod(dir.c_str(), 0755); // fake tasks of other uids reach the socket
        PoolSetup s;
        s.socket_path = dir + "/storm-pool.sock";
        s.stats_path = dir + "/storm-pool.stats";
        s.self_addr = addr("10.9.0.1");
        s.trusted = std::move(trusted);
        s.config.pool_size = pool_size;
        s.config.packet_size = 1024;
        s.config.halt_wait_us = 50000;
        s.is_stopped = [this](pid_t) { return tasks_stopped; }; // the fake tasks are this process
        s.admissions = admissions;
        pool = std::make_unique<Pool>(base, s, Logger("pool"));
        pool->start();
    }
    ~Bench()
    {
        pool.reset();
        event_base_free(base);
        std::system(("rm -rf " + dir).c_str());
    }
    std::string sock() const { return dir + "/storm-pool.sock"; }
    // Runs the loop while a child process or thread talks to the pool.
    void spin(std::chrono::milliseconds t = 20ms)
    {
        timeval tv{0, static_cast<suseconds_t>(t.count() * 1000)};
        event_base_loopexit(base, &tv);
        event_base_dispatch(base);
    }
    // control::request from a forked child (the pool answers on this loop).
    std::string request(const std::string &msg, uid_t as = 0)
    {
        int p[2];
        assert_int_equal(pipe(p), 0);
        pid_t pid = fork();
        if (pid == 0) {
            close(p[0]);
            if (as && setuid(as) != 0)
                _exit(2);
            std::string out = "ok";
            try {
                control::request(sock(), msg, 3000);
            } catch (const std::exception &e) {
                out = e.what();
            }
            if (write(p[1], out.data(), out.size()) < 0)
                _exit(3);
            _exit(0);
        }
        close(p[1]);
        int st = 0;
        for (int i = 0; i < 300 && waitpid(pid, &st, WNOHANG) == 0; ++i)
            spin(10ms);
        char buf[4096];
        ssize_t n = read(p[0], buf, sizeof buf);
        close(p[0]);
        return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "(no answer)";
    }
};

// A fake task: its control channel, and its share once attached.
struct Task {
    int fd = -1;
    control::Attached a;
    uint8_t *map = nullptr;
    size_t map_len = 0;
    std::string error;
    ~Task()
    {
        if (map)
            munmap(map, map_len);
        if (fd >= 0)
            close(fd);
    }
    QueueHeader *q() const { return reinterpret_cast<QueueHeader *>(map + a.offset); }
    // Sends attach and lets the pool answer.
    bool attach(Bench &b, uint32_t id, uint32_t job, uint32_t rank)
    {
        fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        sockaddr_un sa{};
        sa.sun_family = AF_UNIX;
        std::strcpy(sa.sun_path, b.sock().c_str());
        if (connect(fd, reinterpret_cast<sockaddr *>(&sa), sizeof sa) != 0)
            return false;
        std::string m = control::attach(id, job, 0, rank);
        if (send(fd, m.data(), m.size(), 0) != static_cast<ssize_t>(m.size()))
            return false;
        b.spin();
        std::string buf(4096, '\0');
        int mfd = -1;
        ssize_t n = net::recv_with_fd(fd, buf, mfd, MSG_DONTWAIT);
        if (n <= 0)
            return false;
        net::Reader r(buf.data(), static_cast<size_t>(n));
        auto h = control::header(r);
        if (h.type == control::Type::error) {
            error = control::read_reason(r);
            if (mfd >= 0)
                close(mfd);
            return false;
        }
        a = control::read_attached(r);
        if (mfd < 0)
            return false;
        map_len = static_cast<size_t>(a.offset + a.bytes);
        void *p = mmap(nullptr, map_len, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
        close(mfd);
        if (p == MAP_FAILED)
            return false;
        map = static_cast<uint8_t *>(p);
        return true;
    }
    // The next control message: its type and epoch ("" if none).
    std::string next(Bench &b)
    {
        b.spin();
        char buf[4096];
        ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n == 0)
            return "closed";
        if (n < 0)
            return "";
        net::Reader r(buf, static_cast<size_t>(n));
        auto h = control::header(r);
        return std::string(1, static_cast<char>(h.type)) + std::to_string(control::read_epoch(r));
    }
    void say(Bench &b, control::Type t, uint64_t e)
    {
        std::string m = control::epoch_message(t, e);
        assert_int_equal(send(fd, m.data(), m.size(), 0), static_cast<ssize_t>(m.size()));
        b.spin();
    }
};

std::string stats(Bench &b)
{
    b.spin(1100ms);
    FILE *f = std::fopen((b.dir + "/storm-pool.stats").c_str(), "r");
    if (!f)
        return "";
    char buf[4096];
    size_t n = std::fread(buf, 1, sizeof buf, f);
    std::fclose(f);
    return std::string(buf, n);
}

// Two swapped contexts (1 of job `job`, 2 of job `job` + 1), one task of
// each attached; job's comes in and is released.
void open_pair(Bench &b, uint32_t job, Task &a, Task &bt)
{
    Context ca = context(1, job, PoolMode::swapped, 1, 2, 1),
            cb = context(2, job + 1, PoolMode::swapped, 1, 2, 1);
    assert_string_equal(b.request(control::open(ca)).c_str(), "ok");
    assert_string_equal(b.request(control::open(cb)).c_str(), "ok");
    assert_true(a.attach(b, 1, job, 0));
    assert_true(bt.attach(b, 2, job + 1, 0));
    b.pool->swap({}, {job}, 2);
    b.pool->release({job}, 2);
    assert_string_equal(a.next(b).c_str(), "G1");
    a.say(b, control::Type::ready, 1);
}

void test_open_close_rules(void **)
{
    Bench b({0});
    Context c = context(3, 100, PoolMode::divided, 2, 2, 1);
    // Only slurmstepd's uids open and close.
    assert_true(contains(b.request(control::open(c), 65534), "only slurmstepd may open"));
    assert_int_equal(b.pool->contexts(), 0);
    assert_string_equal(b.request(control::open(c)).c_str(), "ok");
    assert_int_equal(b.pool->contexts(), 1);
    assert_int_equal(b.pool->used_bytes(), (1 << 20) / 2);
    assert_string_equal(b.request(control::open(c)).c_str(), "ok"); // again: idempotent
    // A node not in the context.
    Context away = c;
    away.id = 4;
    away.nodes.erase(away.nodes.begin());
    away.nodes[0].ranks = {0, 1};
    assert_true(contains(b.request(control::open(away)), "is not among the context's nodes"));
    // The pool is full: n=2 leaves room for one more half.
    Context c5 = context(5, 101, PoolMode::divided, 2, 2, 1),
            c6 = context(6, 102, PoolMode::divided, 2, 2, 1);
    assert_string_equal(b.request(control::open(c5)).c_str(), "ok");
    // A full pool does not refuse the step: it runs, and its tasks learn why
    // they cannot communicate.
    assert_string_equal(b.request(control::open(c6)).c_str(), "ok");
    Task tf;
    assert_false(tf.attach(b, 6, 102, 0));
    assert_true(contains(tf.error, "the pool is full"));
    assert_string_equal(b.request(control::close(6, 102, 0)).c_str(), "ok");
    // Too many senders for the credits: 8 divisions, 64 tasks.
    Context big = context(7, 103, PoolMode::divided, 8, 64, 1);
    assert_string_equal(b.request(control::open(big)).c_str(), "ok"); // the step runs
    Task tb;
    assert_false(tb.attach(b, 7, 103, 0)); // its tasks cannot communicate: why
    assert_true(contains(tb.error, "leaves no credit for 64 tasks"));
    // Close: unknown, wrong uid, then right.
    assert_true(contains(b.request(control::close(9, 100, 0)), "no context 9"));
    assert_true(contains(b.request(control::close(3, 100, 0), 65534), "only slurmstepd may close"));
    assert_string_equal(b.request(control::close(3, 100, 0)).c_str(), "ok");
    assert_int_equal(b.pool->contexts(), 2); // 5 and the one without credit
    // A malformed message closes that connection and nothing else.
    assert_true(contains(b.request(std::string("\x01Zjunk", 6)), "closed the connection"));
    assert_true(contains(b.request("\x07"), "closed the connection"));
    assert_int_equal(b.pool->contexts(), 2);
}

// kB of this process's memory locked (the pool runs in it).
long locked_kb()
{
    std::ifstream in("/proc/self/status");
    std::string line;
    while (std::getline(in, line))
        if (line.rfind("VmLck:", 0) == 0)
            return std::stol(line.substr(6));
    return -1;
}

void test_attach_rules(void **)
{
    Bench b;
    long before = locked_kb();
    Context c = context(1, 200, PoolMode::divided, 1, 4, 2);
    assert_string_equal(b.request(control::open(c)).c_str(), "ok");
    // The window is locked when a task first attaches, not at open.
    assert_int_equal(locked_kb(), before);
    Task t0, t0again, t3, wrong;
    assert_true(t0.attach(b, 1, 200, 0));
    if (geteuid() == 0) // (others may lock only RLIMIT_MEMLOCK)
        assert_true(locked_kb() > before);
    assert_true(t0.a.resident);
    assert_int_equal(t0.a.mode, PoolMode::divided);
    assert_int_equal(t0.q()->magic, queue_magic);
    assert_int_equal(t0.q()->rank, 0);
    assert_int_equal(t0.q()->resident.load(), 1);
    // credits = recv slots / (n * p) with n = 1, p = 4
    assert_int_equal(t0.a.credits, t0.a.recv_slots / 4);
    assert_false(t0again.attach(b, 1, 200, 0));
    assert_true(contains(t0again.error, "already attached"));
    assert_false(t3.attach(b, 1, 200, 3));
    assert_true(contains(t3.error, "has no task on this node"));
    assert_false(wrong.attach(b, 1, 201, 1));
    assert_true(contains(wrong.error, "no context 1 of step 201.0"));
    // A task that leaves frees its rank.
    close(t0.fd);
    t0.fd = -1;
    b.spin();
    Task t0b;
    assert_true(t0b.attach(b, 1, 200, 0));
}

// A large window is locked in slices, the loop free between them: a task
// attaching to a window of 256 MiB is answered before any of it is
// locked, the locking takes at least 64 passes of the loop (4 MiB each),
// and the whole window ends locked.  (Locked in one mlock(), the pass that
// answered the attach had locked all of it first: 0.27 s of the loop, up
// to 1 s under load.)  Counts, not times: the machine may be loaded.
// Needs root (others may lock only RLIMIT_MEMLOCK).
void test_pinning_in_slices(void **)
{
    if (geteuid() != 0) {
        std::fprintf(stderr, "skipped: needs root to lock 256 MiB\n");
        skip();
    }
    constexpr uint64_t big = 256ull << 20;
    constexpr long big_kb = static_cast<long>(big / 1024);
    Bench b({0}, big);
    Context c = context(1, 300, PoolMode::divided, 1, 1, 1);
    assert_string_equal(b.request(control::open(c)).c_str(), "ok");
    long before = locked_kb();
    Task t;
    t.fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    std::strcpy(sa.sun_path, b.sock().c_str());
    assert_int_equal(connect(t.fd, reinterpret_cast<sockaddr *>(&sa), sizeof sa), 0);
    std::string m = control::attach(1, 300, 0, 0);
    assert_int_equal(send(t.fd, m.data(), m.size(), 0), static_cast<ssize_t>(m.size()));
    long locked_at_answer = -1, locked = 0;
    int locking_passes = 0;
    double longest = 0;
    auto t0 = std::chrono::steady_clock::now();
    while (std::chrono::steady_clock::now() - t0 < 60s && (locked_at_answer < 0 || locked < big_kb)) {
        auto p0 = std::chrono::steady_clock::now();
        event_base_loop(b.base, EVLOOP_ONCE | EVLOOP_NONBLOCK); // one pass
        longest =
            std::max(longest, std::chrono::duration<double>(std::chrono::steady_clock::now() - p0).count());
        long now = locked_kb() - before;
        if (now > locked)
            ++locking_passes;
        locked = now;
        pollfd pf{t.fd, POLLIN, 0};
        if (locked_at_answer < 0 && poll(&pf, 1, 0) == 1)
            locked_at_answer = locked;
        usleep(200);
    }
    std::fprintf(stderr,
                 "attach answered with %ld kB locked; %ld kB locked in %d passes of the loop, the longest "
                 "%.3f s\n",
                 locked_at_answer, locked, locking_passes, longest);
    assert_int_equal(locked_at_answer, 0);
    assert_true(locking_passes >= static_cast<int>(big / (4 << 20)));
    assert_true(locked >= big_kb);
}

// Writes `k` recognisable packets into the share's send and receive rings.
void fill(QueueHeader *q, uint32_t k, uint8_t mark)
{
    for (uint32_t i = 0; i < k; ++i) {
        std::memset(send_slot(q, q->send_tail + i), mark + i, q->packet_size);
        std::memset(recv_slot(q, q->recv_tail + i), mark + 100 + i, q->packet_size);
    }
    q->send_tail += k;
    q->recv_tail += k;
}
bool holds(QueueHeader *q, uint32_t k, uint8_t mark)
{
    if (q->send_tail - q->send_head != k || q->recv_tail - q->recv_head != k)
        return false;
    for (uint32_t i = 0; i < k; ++i)
        if (send_slot(q, q->send_head + i)[7] != static_cast<uint8_t>(mark + i) ||
            recv_slot(q, q->recv_head + i)[7] != static_cast<uint8_t>(mark + 100 + i))
            return false;
    return true;
}

void test_swap(void **)
{
    Bench b;
    Context ca = context(1, 300, PoolMode::swapped, 1, 2, 1),
            cb = context(2, 301, PoolMode::swapped, 1, 2, 1);
    assert_string_equal(b.request(control::open(ca)).c_str(), "ok");
    assert_string_equal(b.request(control::open(cb)).c_str(), "ok");
    // Swapped contexts start halted at epoch 1, out of the pool: the first
    // switch that runs their job brings them in and releases them.
    assert_int_equal(b.pool->resident_context(), -1);
    // Until a task attaches, no job's tasks need stopping for a swap: the
    // switcher may lend the node (sched_gang/switcher.hpp).
    assert_false(b.pool->follows({300, 301}));
    Task a, bt;
    assert_true(a.attach(b, 1, 300, 0));
    assert_true(b.pool->follows({300, 999}));
    assert_false(b.pool->follows({301, 999}));
    assert_true(bt.attach(b, 2, 301, 0));
    assert_false(a.a.resident);
    assert_int_equal(a.a.epoch, 1);
    assert_int_equal(bt.q()->resident.load(), 0); // its pages are not in the pool
    b.pool->swap({}, {300}, 4);
    b.pool->release({300}, 4);
    assert_int_equal(b.pool->resident_context(), 1);
    assert_string_equal(a.next(b).c_str(), "G1");
    a.say(b, control::Type::ready, 1);
    // credits = recv slots / p: the whole pool for 2 senders
    assert_int_equal(a.a.credits, a.a.recv_slots / 2);
    assert_true(a.a.bytes > (1 << 20) - 4096);
    fill(a.q(), 5, 10);
    // Job 300 leaves: halt, and the switch waits until it answers.
    assert_true(b.pool->halt({300}, 7));
    assert_string_equal(a.next(b).c_str(), "H7");
    assert_string_equal(bt.next(b).c_str(), "");
    a.say(b, control::Type::halted, 7);
    // Its task still running (not stopped yet): its queues stay.
    b.tasks_stopped = false;
    b.pool->swap({300}, {301}, 7);
    assert_int_equal(b.pool->resident_context(), 1);
    b.tasks_stopped = true;
    b.pool->swap({300}, {301}, 7);
    assert_int_equal(b.pool->resident_context(), 2);
    // Out of the pool's accounting; its pages stay (a task stopped inside
    // its queues resumes on them).
    assert_int_equal(a.q()->resident.load(), 1);
    assert_true(holds(a.q(), 5, 10));
    assert_int_equal(bt.q()->resident.load(), 1);
    assert_int_equal(bt.q()->magic, queue_magic);
    b.pool->release({301}, 7);
    assert_string_equal(bt.next(b).c_str(), "G1");
    bt.say(b, control::Type::ready, 1);
    fill(bt.q(), 3, 50);
    // Back: job 301 leaves, 300 comes back with its packets exactly, and
    // release{7} ends its halt{7}.  A new manager's small strobe numbers
    // still give increasing epochs.
    assert_true(b.pool->halt({301}, 1));
    assert_string_equal(bt.next(b).c_str(), "H2");
    bt.say(b, control::Type::halted, 2);
    b.pool->swap({301}, {300}, 3);
    b.pool->release({300}, 3);
    assert_string_equal(a.next(b).c_str(), "G7");
    assert_int_equal(a.q()->resident.load(), 1);
    assert_true(holds(a.q(), 5, 10));
    a.say(b, control::Type::ready, 7);
    std::string st = stats(b);
    assert_true(contains(st, "swaps 3\n"));
    assert_true(contains(st, "halt_count 2\n"));
    assert_true(contains(st, "release_count 3\n"));
    assert_true(contains(st, "failures 0\n"));
    // Valid packets only: 5 send (+1 being written) + 5 recv, 3 (+1) + 3.
    // (and 1 send slot for each at open)
    assert_true(contains(st, "packets_saved 20\n"));
    // Bt's comes back too.
    assert_true(b.pool->halt({300}, 9));
    assert_string_equal(a.next(b).c_str(), "H9");
    a.say(b, control::Type::halted, 9);
    b.pool->swap({300}, {301}, 9);
    assert_true(holds(bt.q(), 3, 50));
}

void test_failures(void **)
{
    Bench b;
    Context ca = context(1, 400, PoolMode::swapped, 1, 2, 1),
            cb = context(2, 401, PoolMode::swapped, 1, 2, 1);
    assert_string_equal(b.request(control::open(ca)).c_str(), "ok");
    assert_string_equal(b.request(control::open(cb)).c_str(), "ok");
    Task a, bt;
    assert_true(a.attach(b, 1, 400, 0));
    assert_true(bt.attach(b, 2, 401, 0));
    b.pool->swap({}, {400}, 2);
    b.pool->release({400}, 2);
    assert_string_equal(a.next(b).c_str(), "G1");
    // A task that does not answer its halt within storm_pool_halt_wait:
    // the switch goes on without swapping it out (it holds the pool), and
    // when its answer comes, it leaves the pool and the running job's
    // context comes in and is released.
    auto t0 = std::chrono::steady_clock::now();
    assert_true(b.pool->halt({400}, 3));
    assert_string_equal(a.next(b).c_str(), "H3");
    b.spin(100ms);
    assert_true(std::chrono::steady_clock::now() - t0 < 1s);
    b.pool->swap({400}, {401}, 3);
    b.pool->release({401}, 3);
    assert_int_equal(b.pool->resident_context(), 1);
    assert_string_equal(bt.next(b).c_str(), "");
    a.say(b, control::Type::halted, 3);
    assert_int_equal(b.pool->resident_context(), 2);
    assert_string_equal(bt.next(b).c_str(), "G1");
    bt.say(b, control::Type::ready, 1);
    // A corrupt queue index: the context fails, its packets are not copied,
    // and the pool goes on with the other.
    bt.q()->send_tail = bt.q()->send_head + 1000000;
    assert_true(b.pool->halt({401}, 5));
    assert_string_equal(bt.next(b).c_str(), "H5");
    bt.say(b, control::Type::halted, 5);
    b.pool->swap({401}, {400}, 5);
    b.pool->release({400}, 5);
    assert_string_equal(bt.next(b).c_str(), "closed");
    assert_int_equal(b.pool->resident_context(), 1);
    assert_string_equal(a.next(b).c_str(), "G3");
    // A failed context never blocks a switch again.
    assert_false(b.pool->halt({401}, 6));
    std::string st = stats(b);
    assert_true(contains(st, "failures 1\n"));
    // A task reporting failure fails its context (a divided one: the
    // swapped one holds the whole pool now).
    assert_string_equal(b.request(control::close(1, 400, 0)).c_str(), "ok");
    Context cc = context(3, 402, PoolMode::divided, 1, 2, 1);
    assert_string_equal(b.request(control::open(cc)).c_str(), "ok");
    Task c;
    assert_true(c.attach(b, 3, 402, 0));
    std::string m = control::failed("rank 1 closed its connection");
    assert_int_equal(send(c.fd, m.data(), m.size(), 0), static_cast<ssize_t>(m.size()));
    assert_string_equal(c.next(b).c_str(), "closed");
    Task c2;
    assert_false(c2.attach(b, 3, 402, 0));
    assert_true(contains(c2.error, "the context has failed"));
}

// A context out of the pool on this node (another holds it) whose job
// leaves: its tasks still send halt marks to the nodes where it is
// resident, so the switch waits for them (at most storm_pool_halt_wait)
// before their job is stopped.
void test_halt_out_of_pool(void **)
{
    Bench b;
    Task a, bt;
    open_pair(b, 900, a, bt);
    assert_int_equal(b.pool->resident_context(), 1);
    // Job 901 leaves (it ran elsewhere); its context never came in here.
    assert_true(b.pool->halt({901}, 3));
    assert_string_equal(bt.next(b).c_str(), "H3");
    assert_true(b.pool->switch_halting()); // waiting for its marks
    bt.say(b, control::Type::halted, 3);
    assert_false(b.pool->switch_halting());
    assert_string_equal(a.next(b).c_str(), "");      // 900 did not leave
    assert_int_equal(b.pool->resident_context(), 1); // nothing swapped
    // A task that never answers holds the switch at most the halt wait
    // (50 ms here); its late answer changes nothing.
    auto t0 = std::chrono::steady_clock::now();
    assert_true(b.pool->halt({901}, 4));
    assert_string_equal(bt.next(b).c_str(), "H4");
    while (b.pool->switch_halting() && std::chrono::steady_clock::now() - t0 < 2s)
        b.spin(5ms);
    assert_false(b.pool->switch_halting());
    assert_true(std::chrono::steady_clock::now() - t0 >= 45ms);
    bt.say(b, control::Type::halted, 4);
    assert_false(b.pool->switch_halting());
    assert_int_equal(b.pool->resident_context(), 1);
    // The resident context's own halt still counts alone in the stage
    // statistics (the marks of one out of the pool are not a swap stage).
    assert_true(b.pool->halt({900}, 5));
    a.say(b, control::Type::halted, 5);
    assert_false(b.pool->switch_halting());
    assert_true(contains(stats(b), "halt_count 1\n"));
}

// A loop event that counts its firings (the loop stays responsive).
struct Ticker {
    event *ev;
    int ticks = 0;
    explicit Ticker(event_base *base)
    {
        ev = event_new(
            base, -1, EV_PERSIST, [](int, short, void *arg) { ++static_cast<Ticker *>(arg)->ticks; }, this);
        timeval ms{0, 1000};
        event_add(ev, &ms);
    }
    ~Ticker() { event_free(ev); }
};

std::vector<std::string> g_log;
void capture_sink(LogLevel, const char *line) { g_log.emplace_back(line); }
bool logged(const std::string &part)
{
    for (const auto &l : g_log)
        if (contains(l, part))
            return true;
    return false;
}

// Tasks not stopped yet when the switch swaps: the swap waits on a timer,
// not on the loop (other events fire meanwhile), and completes once they
// stop, the running job's context coming in and being released; a context
// whose job runs again meanwhile is never copied; one whose tasks do not
// stop within 100 ms stays in the pool, as a halt that outlasts its switch
// does when its tasks do not stop.
void test_swap_waits_for_stop(void **)
{
    Bench b;
    Task a, bt;
    open_pair(b, 700, a, bt);
    fill(a.q(), 4, 20);

    // Job 700 leaves; its task is not stopped yet.
    assert_true(b.pool->halt({700}, 3));
    assert_string_equal(a.next(b).c_str(), "H3");
    a.say(b, control::Type::halted, 3);
    b.tasks_stopped = false;
    auto t0 = std::chrono::steady_clock::now();
    b.pool->swap({700}, {701}, 3);
    b.pool->release({701}, 3);
    // The switch did not wait: one that waited for the task would take until
    // it stops or 100 ms (the bound is loose: another process may hold this
    // test's core for tens of milliseconds).
    assert_true(std::chrono::steady_clock::now() - t0 < 80ms);
    assert_int_equal(b.pool->resident_context(), 1);
    {
        Ticker tick(b.base);
        t0 = std::chrono::steady_clock::now();
        b.spin(30ms);
        // The loop ran the whole time: the ticker fired again and again
        // (libevent's timers are coarser than 1 ms here).
        assert_true(tick.ticks >= 3);
        assert_true(std::chrono::steady_clock::now() - t0 < 120ms); // not 30 + 100
    }
    assert_int_equal(b.pool->resident_context(), 1); // still waiting, nothing copied
    assert_string_equal(bt.next(b).c_str(), "");
    // Its task stops: the swap completes from the timer soon after.
    b.tasks_stopped = true;
    b.spin(30ms);
    assert_int_equal(b.pool->resident_context(), 2);
    assert_true(holds(a.q(), 4, 20));
    assert_string_equal(bt.next(b).c_str(), "G1"); // its job runs already
    bt.say(b, control::Type::ready, 1);
    fill(bt.q(), 2, 60);

    // Job 701 leaves, not stopped yet, and runs again before it stops: its
    // context is never copied, and the next switch releases it.
    assert_true(b.pool->halt({701}, 4));
    assert_string_equal(bt.next(b).c_str(), "H4");
    bt.say(b, control::Type::halted, 4);
    b.tasks_stopped = false;
    b.pool->swap({701}, {700}, 4);
    b.pool->release({700}, 4);
    b.spin(5ms);
    assert_true(b.pool->halt({700}, 5)); // 700's context is out of the pool: its marks
    assert_string_equal(a.next(b).c_str(), "H5");
    a.say(b, control::Type::halted, 5);
    assert_false(b.pool->switch_halting());
    b.pool->swap({700}, {701}, 5);
    b.pool->release({701}, 5);
    assert_string_equal(bt.next(b).c_str(), "G4");
    b.tasks_stopped = true;
    b.spin(30ms);
    assert_int_equal(b.pool->resident_context(), 2);
    assert_string_equal(a.next(b).c_str(), "");
    bt.say(b, control::Type::ready, 4);

    // Tasks that never stop within 100 ms: the context stays in the pool,
    // with one line naming the task; stopping later changes nothing until
    // the next switch.
    g_log.clear();
    set_log_sink(capture_sink);
    assert_true(b.pool->halt({701}, 6));
    assert_string_equal(bt.next(b).c_str(), "H6");
    bt.say(b, control::Type::halted, 6);
    b.tasks_stopped = false;
    t0 = std::chrono::steady_clock::now();
    b.pool->swap({701}, {700}, 6);
    b.pool->release({700}, 6);
    assert_true(std::chrono::steady_clock::now() - t0 < 80ms);
    b.spin(150ms);
    set_log_sink(nullptr);
    assert_true(logged("rdma: context 2: rank 0 (pid " + std::to_string(getpid()) +
                       ") is not stopped: the context stays in the pool"));
    b.tasks_stopped = true;
    b.spin(30ms);
    assert_int_equal(b.pool->resident_context(), 2);
    assert_true(holds(bt.q(), 2, 60));
    b.pool->swap({}, {700}, 7);
    b.pool->release({700}, 7);
    assert_int_equal(b.pool->resident_context(), 1);
    assert_string_equal(a.next(b).c_str(), "G5");
    a.say(b, control::Type::ready, 5);

    // A halt that outlasts its switch, its task not stopped when it answers:
    // the context leaves the pool once the task stops.
    assert_true(b.pool->halt({700}, 8));
    assert_string_equal(a.next(b).c_str(), "H8");
    b.spin(60ms); // past storm_pool_halt_wait: the switch goes on
    b.pool->swap({700}, {701}, 8);
    b.pool->release({701}, 8);
    assert_int_equal(b.pool->resident_context(), 1);
    b.tasks_stopped = false;
    a.say(b, control::Type::halted, 8);
    assert_int_equal(b.pool->resident_context(), 1);
    b.tasks_stopped = true;
    b.spin(30ms);
    assert_int_equal(b.pool->resident_context(), 2);
    assert_string_equal(bt.next(b).c_str(), "G6");
}

// A task that attaches after the context's first halt is halted at the
// current epoch at once, so that it sends the halt marks its peers expect.
void test_late_attach(void **)
{
    Bench b;
    Context c = context(1, 500, PoolMode::swapped, 1, 3, 2);
    assert_string_equal(b.request(control::open(c)).c_str(), "ok");
    Task t0, t1;
    assert_true(t0.attach(b, 1, 500, 0));
    b.pool->swap({}, {500}, 3);
    b.pool->release({500}, 3);
    assert_string_equal(t0.next(b).c_str(), "G1");
    assert_true(b.pool->halt({500}, 9));
    assert_string_equal(t0.next(b).c_str(), "H9");
    t0.say(b, control::Type::halted, 9);
    // The halt is not over: rank 1, attaching now, must halt too.
    assert_true(t1.attach(b, 1, 500, 1));
    assert_false(t1.a.resident);
    assert_int_equal(t1.a.epoch, 1);
    assert_string_equal(t1.next(b).c_str(), "H9"); // from halted at 1 to halted at 9
    t1.say(b, control::Type::halted, 9);
    b.pool->swap({500}, {}, 9);
    assert_int_equal(b.pool->resident_context(), -1);
    // Back in: both are released at 9; a third attaching now is halted at
    // 9 at once, and released when it answers.
    b.pool->swap({}, {500}, 10);
    b.pool->release({500}, 10);
    assert_string_equal(t0.next(b).c_str(), "G9");
    assert_string_equal(t1.next(b).c_str(), "G9");
}

// The pool records the jobs of the open coscheduled contexts (what the
// local scheduler's verifier admits), per job, from slurmstepd's open to
// its close; nothing else enters them.
void test_cosched_admissions(void **)
{
    auto b = std::make_unique<Bench>();
    auto &adm = *b->admissions;
    Context plain = context(1, 600, PoolMode::divided, 4, 2, 1);
    Context co = context(2, 601, PoolMode::divided, 4, 2, 1);
    co.cosched = true;
    // A context that is not coscheduled admits nothing; the task's user
    // cannot open one (only slurmstepd's uids may).
    assert_string_equal(b->request(control::open(plain)).c_str(), "ok");
    assert_false(adm.admitted(600));
    assert_true(contains(b->request(control::open(co), 65534), "only slurmstepd may open"));
    assert_false(adm.admitted(601));
    assert_int_equal(adm.jobs(), 0);
    // slurmstepd opens a coscheduled one: admitted; asking again counts once.
    assert_string_equal(b->request(control::open(co)).c_str(), "ok");
    assert_true(adm.admitted(601));
    assert_string_equal(b->request(control::open(co)).c_str(), "ok");
    assert_int_equal(adm.steps(601), 1);
    // A second step of the job: admitted while either is open.
    Context co2 = co;
    co2.id = 3;
    co2.step_id = 1;
    assert_string_equal(b->request(control::open(co2)).c_str(), "ok");
    assert_int_equal(adm.steps(601), 2);
    assert_string_equal(b->request(control::close(2, 601, 0)).c_str(), "ok");
    assert_true(adm.admitted(601));
    assert_int_equal(adm.steps(601), 1);
    // A close for another step, or by a task's uid, changes nothing.
    assert_true(contains(b->request(control::close(3, 601, 7)), "no context 3"));
    assert_true(contains(b->request(control::close(3, 601, 1), 65534), "only slurmstepd may close"));
    assert_int_equal(adm.steps(601), 1);
    assert_string_equal(b->request(control::close(3, 601, 1)).c_str(), "ok");
    assert_false(adm.admitted(601));
    assert_int_equal(adm.jobs(), 0);
    // A refused open (this node is not among its nodes) admits nothing.
    Context away = co;
    away.id = 4;
    away.job_id = 602;
    away.nodes.erase(away.nodes.begin());
    away.nodes[0].ranks = {0, 1};
    assert_true(contains(b->request(control::open(away)), "is not among the context's nodes"));
    assert_false(adm.admitted(602));
    // One opened without a window (no credit) still admits its job: the
    // step runs.
    Context nocredit = context(5, 603, PoolMode::divided, 8, 64, 1);
    nocredit.cosched = true;
    assert_string_equal(b->request(control::open(nocredit)).c_str(), "ok");
    assert_true(adm.admitted(603));
    // An id given to a new step (slurmstepd of the old one never closed
    // it): the old job's admission goes with its context.
    Context reuse = context(5, 604, PoolMode::swapped, 1, 2, 1);
    assert_string_equal(b->request(control::open(reuse)).c_str(), "ok");
    assert_false(adm.admitted(603));
    assert_false(adm.admitted(604)); // not coscheduled
    // A swapped coscheduled context (out of the pool) admits as well, and
    // the pool's end forgets every admission.
    Context sw = context(6, 605, PoolMode::swapped, 1, 2, 1);
    sw.cosched = true;
    assert_string_equal(b->request(control::open(sw)).c_str(), "ok");
    assert_true(adm.admitted(605));
    auto keep = b->admissions;
    b.reset();
    assert_false(keep->admitted(605));
    assert_int_equal(keep->jobs(), 0);
}

} // namespace

int main()
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_open_close_rules),   cmocka_unit_test(test_attach_rules),
        cmocka_unit_test(test_pinning_in_slices),  cmocka_unit_test(test_swap),
        cmocka_unit_test(test_failures),           cmocka_unit_test(test_swap_waits_for_stop),
        cmocka_unit_test(test_halt_out_of_pool),   cmocka_unit_test(test_late_attach),
        cmocka_unit_test(test_cosched_admissions),
    };
    return cmocka_run_group_tests(tests, nullptr, nullptr);
}
