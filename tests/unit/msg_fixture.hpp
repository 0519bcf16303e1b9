// The fake node agent of libstormmsg's tests (test_msg_loopback,
// test_msg_cosched): a SOCK_SEQPACKET control socket in a temporary
// directory, a memfd window initialised by init_share, attach answers, halt /
// release cycles with the window saved, released and restored in between
// while the tasks are stopped, for tasks forked by the test; and what the
// tasks report back (shared anonymous memory).
#pragma once

#include "tests/unit/cmocka.hpp"

#include <arpa/inet.h>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <functional>
#include <linux/futex.h>
#include <map>
#include <poll.h>
#include <random>
#include <string>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include "lib/net/fd_passing.hpp"
#include "lib/net/wire.hpp"
#include "switch_rdma/context.hpp"
#include "switch_rdma/control.hpp"
#include "switch_rdma/layout.hpp"
#include "switch_rdma/msg/storm_msg.h"
#include "switch_rdma/pool_config.hpp"
#include "switch_rdma/step_context.hpp"
#include "switch_rdma/window.hpp"

namespace msg_fixture {

using namespace storm::rdma;

// What a forked task reports (shared anonymous memory).
struct Result {
    int status; // 0 ok, 1 failed, -1 not finished
    char error[512];
    uint64_t messages;
    uint64_t rounds;
    struct storm_msg_stats stats;
};
struct Shared {
    std::atomic<uint64_t> switches;
    std::atomic<int> stop_after; // switches after which rank 0 ends the traffic
    Result r[8];
};

inline Shared *shared_block()
{
    void *p = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(p != MAP_FAILED);
    auto *s = new (p) Shared{};
    for (auto &r : s->r)
        r.status = -1;
    return s;
}

inline void report(Result &r, int status, const std::string &err)
{
    r.status = status;
    std::snprintf(r.error, sizeof r.error, "%s", err.c_str());
    storm_msg_stats(&r.stats);
}

// ---- the fake node agent -----------------------------------------------------

// Signals go to spawned tasks only (pid > 0): kill(-1, ...) would reach
// every process the test may signal.
struct Task {
    pid_t pid = -1; // not spawned
    int conn = -1;  // control channel, once attached
    bool alive = true, attached = false;
    std::string failed;
};

// Held while an Agent lives: the test programs that use this fixture
// (make -j runs them side by side) take ports 20000 + 64 * (pid % 128 +
// id) + local, and two of them whose pids differ by the difference of
// their contexts' ids would take the same ones ("cannot listen on port
// 25121 for rank 1: Address already in use").  Given up after 120 s (a
// stuck holder): the test then runs unlocked.
class PortLock {
public:
    PortLock()
    {
        fd_ = open("/tmp/storm-msg-fixture.lock", O_RDONLY | O_CREAT | O_CLOEXEC, 0644);
        for (int i = 0; fd_ >= 0 && i < 12000 && flock(fd_, LOCK_EX | LOCK_NB) != 0; ++i)
            usleep(10000);
    }
    ~PortLock()
    {
        if (fd_ >= 0)
            close(fd_);
    }
    PortLock(const PortLock &) = delete;
    PortLock &operator=(const PortLock &) = delete;

private:
    int fd_ = -1;
};

class Agent {
    PortLock port_lock_; // first: taken before the context's ports, freed after its tasks

public:
    using Clock = std::chrono::steady_clock;

    Agent(uint32_t ntasks, uint32_t id, uint64_t pool_size, uint32_t packet_size, uint32_t nodes = 1)
        : ntasks_(ntasks), tasks_(ntasks)
    {
        char tmpl[] = "/tmp/storm-msg-XXXXXX";
        dir_ = mkdtemp(tmpl);
        path_ = dir_ + "/" + control::socket_name;
        lfd_ = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        sockaddr_un sa{};
        sa.sun_family = AF_UNIX;
        std::strcpy(sa.sun_path, path_.c_str());
        assert_int_equal(bind(lfd_, reinterpret_cast<sockaddr *>(&sa), sizeof sa), 0);
        assert_int_equal(listen(lfd_, 64), 0);
        ctx.id = id;
        ctx.job_id = 1000 + id;
        ctx.step_id = 0;
        ctx.uid = getuid();
        ctx.key = context_key(); // what slurmctld draws for each step
        ctx.mode = PoolMode::swapped;
        ctx.divisions = 1;
        // Below Linux's ephemeral ports (32768-60999 by default): in that
        // range a task's port could already be the local end of one of
        // the test's own connections ("Address already in use", about one
        // run in twelve).  The context's block (ids up to 63) ends below
        // 32768 whatever the pid.
        assert_true(id < 64);
        ctx.port_base = 20000 + static_cast<uint32_t>(getpid() % 128) * 64;
        ctx.ntasks = ntasks;
        // `nodes` "nodes" 127.0.0.1, 127.0.0.2...: rank r on node r % nodes
        // (the same local index, hence port, on different addresses).
        for (uint32_t i = 0; i < nodes; ++i) {
            ContextNode n;
            n.addr = htonl(INADDR_LOOPBACK + i);
            for (uint32_t r = i; r < ntasks; r += nodes)
                n.ranks.push_back(r);
            ctx.nodes.push_back(n);
        }
        ctx.validate();
        PoolConfig pc;
        pc.pool_size = pool_size;
        pc.packet_size = packet_size;
        share = task_share(pc, PoolMode::swapped, 1, ntasks, ntasks);
        memfd_ = static_cast<int>(syscall(SYS_memfd_create, "storm-window", 0));
        assert_true(memfd_ >= 0);
        assert_int_equal(ftruncate(memfd_, static_cast<off_t>(share.bytes * ntasks)), 0);
        void *m = mmap(nullptr, share.bytes * ntasks, PROT_READ | PROT_WRITE, MAP_SHARED, memfd_, 0);
        assert_true(m != MAP_FAILED);
        window_ = static_cast<uint8_t *>(m);
        for (uint32_t r = 0; r < ntasks; ++r)
            init_share(q(r), share.bytes, packet_size, share.send_slots, share.recv_slots, share.credits, r,
                       ntasks, true);
        packet_size_ = packet_size;
    }
    ~Agent()
    {
        for (auto &t : tasks_)
            if (t.alive && t.pid > 0) {
                kill(t.pid, SIGKILL);
                waitpid(t.pid, nullptr, 0);
            }
        for (auto &t : tasks_)
            if (t.conn >= 0)
                close(t.conn);
        munmap(window_, share.bytes * ntasks_);
        close(memfd_);
        close(lfd_);
        unlink(path_.c_str());
        rmdir(dir_.c_str());
    }

    QueueHeader *q(uint32_t r) { return reinterpret_cast<QueueHeader *>(window_ + share.bytes * r); }

    // Forks task `rank` running f (its exit status is f's result); a rank
    // whose earlier task exited may be spawned again.
    void spawn(uint32_t rank, const std::function<int()> &f, const std::string &ctx_text = "",
               const char *timeout = "5")
    {
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            close(lfd_);
            setenv("STORM_CTX", (ctx_text.empty() ? ctx.encode() : ctx_text).c_str(), 1);
            setenv("STORM_POOL_SOCKET", path_.c_str(), 1);
            setenv("SLURM_PROCID", std::to_string(rank).c_str(), 1);
            setenv("STORM_MSG_TIMEOUT", timeout, 1);
            int rc = f();
            if (rc != 0) // why, for the test's log
                std::fprintf(stderr, "task %u: exit %d, last error: %s\n", rank, rc, storm_msg_error());
            _exit(rc);
        }
        assert_true(tasks_[rank].pid < 0 || !tasks_[rank].alive);
        detach(rank);
        tasks_[rank] = Task{};
        status_.erase(rank);
        tasks_[rank].pid = pid;
    }

    // Answers attach requests until `n` tasks attached (or the deadline).
    void serve_attach(uint32_t n, const std::string &refuse = "")
    {
        auto deadline = Clock::now() + std::chrono::seconds(20);
        uint32_t done = 0;
        while (done < n) {
            assert_true(Clock::now() < deadline);
            pollfd p{lfd_, POLLIN, 0};
            if (poll(&p, 1, 100) <= 0)
                continue;
            int c = accept4(lfd_, nullptr, nullptr, SOCK_CLOEXEC);
            assert_true(c >= 0);
            pollfd pc{c, POLLIN, 0};
            assert_int_equal(poll(&pc, 1, 10000), 1);
            char buf[4096];
            ssize_t got = recv(c, buf, sizeof buf, 0);
            assert_true(got > 0);
            storm::net::Reader rd(buf, static_cast<size_t>(got));
            assert_true(control::header(rd).type == control::Type::attach);
            auto ids = control::read_attach(rd);
            assert_int_equal(ids.id, ctx.id);
            assert_true(ids.rank < ntasks_);
            ++done;
            if (!refuse.empty()) {
                std::string m = control::error(refuse);
                send(c, m.data(), m.size(), MSG_NOSIGNAL);
                close(c);
                continue;
            }
            control::Attached a;
            a.mode = PoolMode::swapped;
            a.offset = share.bytes * ids.rank;
            a.bytes = share.bytes;
            a.packet_size = packet_size_;
            a.send_slots = share.send_slots;
            a.recv_slots = share.recv_slots;
            a.credits = share.credits;
            a.epoch = epoch;
            a.resident = attach_resident;
            std::string m = control::attached(a);
            assert_true(storm::net::send_with_fd(c, m, memfd_) == static_cast<ssize_t>(m.size()));
            tasks_[ids.rank].conn = c;
            tasks_[ids.rank].attached = true;
        }
    }

    // Sends `t` (halt or release) for `e` to every attached task and waits
    // for `answer` from each; a task that closes its channel detaches, one
    // that answers failed{} is recorded.  False if a task failed or did not
    // answer within 15 s.
    bool round(control::Type t, control::Type answer, uint64_t e,
               const std::function<void(uint32_t)> &on_answer = nullptr)
    {
        std::string m = control::epoch_message(t, e);
        std::vector<bool> waiting(ntasks_, false);
        for (uint32_t r = 0; r < ntasks_; ++r)
            if (tasks_[r].conn >= 0) {
                if (send(tasks_[r].conn, m.data(), m.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(m.size()))
                    waiting[r] = true;
                else
                    detach(r);
            }
        auto deadline = Clock::now() + std::chrono::seconds(15);
        bool ok = true;
        for (;;) {
            std::vector<pollfd> fds;
            std::vector<uint32_t> who;
            for (uint32_t r = 0; r < ntasks_; ++r)
                if (waiting[r] && tasks_[r].conn >= 0) {
                    fds.push_back({tasks_[r].conn, POLLIN, 0});
                    who.push_back(r);
                }
            if (fds.empty())
                return ok;
            if (Clock::now() > deadline)
                return false;
            if (poll(fds.data(), fds.size(), 100) <= 0)
                continue;
            for (size_t i = 0; i < fds.size(); ++i) {
                if (!fds[i].revents)
                    continue;
                uint32_t r = who[i];
                char buf[8192];
                ssize_t got = recv(tasks_[r].conn, buf, sizeof buf, MSG_DONTWAIT);
                if (got <= 0) {
                    detach(r);
                    waiting[r] = false;
                    continue;
                }
                storm::net::Reader rd(buf, static_cast<size_t>(got));
                auto h = control::header(rd);
                if (h.type == control::Type::failed) {
                    tasks_[r].failed = control::read_reason(rd);
                    waiting[r] = false;
                    ok = false;
                } else {
                    assert_true(h.type == answer);
                    assert_int_equal(control::read_epoch(rd), e);
                    waiting[r] = false;
                    if (on_answer)
                        on_answer(r);
                }
            }
        }
    }

    // One gang switch out and in: halt, stop the tasks, save / release /
    // restore every share, continue them, release.  With stop_at_halted,
    // each task is stopped as soon as it answers its halt, as the node
    // agent of a node whose tasks all answered does while other nodes'
    // tasks still wait for their peers' halt marks.
    bool stop_at_halted = false;
    bool cycle(std::mt19937 &rng)
    {
        ++epoch;
        std::vector<uint32_t> stopped;
        auto stop = [&](uint32_t r) {
            if (tasks_[r].alive && tasks_[r].pid > 0 && kill(tasks_[r].pid, SIGSTOP) == 0) {
                int st;
                if (waitpid(tasks_[r].pid, &st, WUNTRACED) == tasks_[r].pid && WIFSTOPPED(st))
                    stopped.push_back(r);
                else
                    exited(r, st);
            }
        };
        if (!round(control::Type::halt, control::Type::halted, epoch,
                   stop_at_halted ? std::function<void(uint32_t)>(stop) : nullptr)) {
            for (uint32_t r : stopped)
                kill(tasks_[r].pid, SIGCONT);
            return false;
        }
        if (!stop_at_halted)
            for (uint32_t r = 0; r < ntasks_; ++r)
                stop(r);
        bool valid_only = rng() % 2;
        for (uint32_t r = 0; r < ntasks_; ++r) {
            QueueHeader *h = q(r);
            h->resident.store(0);
            std::string store;
            save_share(h, share.bytes, packet_size_, share.send_slots, share.recv_slots, valid_only, store);
            if (rng() % 2)
                std::memset(static_cast<void *>(h), 0, share.bytes);
            else
                assert_int_equal(fallocate(memfd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                                           static_cast<off_t>(share.bytes * r),
                                           static_cast<off_t>(share.bytes)),
                                 0);
            assert_int_equal(h->magic, 0); // released: reads as zero
            restore_share(h, share.bytes, store);
            assert_int_equal(h->resident.load(), 0);
        }
        for (uint32_t r : stopped)
            kill(tasks_[r].pid, SIGCONT);
        if (rng() % 4 == 0)
            usleep(2000); // the tasks run while swapped out: they must wait
        for (uint32_t r = 0; r < ntasks_; ++r) {
            q(r)->resident.store(1);
            syscall(SYS_futex, &q(r)->resident, FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
        }
        return round(control::Type::release, control::Type::ready, epoch);
    }

    void detach(uint32_t r)
    {
        if (tasks_[r].conn >= 0)
            close(tasks_[r].conn);
        tasks_[r].conn = -1;
    }
    void exited(uint32_t r, int st)
    {
        tasks_[r].alive = false;
        status_[r] = st;
    }
    // Reaps the tasks that exited; true once all did.
    bool reap()
    {
        bool all = true;
        for (uint32_t r = 0; r < ntasks_; ++r) {
            if (!tasks_[r].alive || tasks_[r].pid < 0)
                continue;
            int st;
            pid_t p = waitpid(tasks_[r].pid, &st, WNOHANG);
            if (p == tasks_[r].pid && (WIFEXITED(st) || WIFSIGNALED(st)))
                exited(r, st);
            else
                all = false;
        }
        return all;
    }
    // Waits for every task to exit (kills them after `seconds`); false if
    // one had to be killed.
    bool wait_all(int seconds)
    {
        auto deadline = Clock::now() + std::chrono::seconds(seconds);
        while (!reap()) {
            if (Clock::now() > deadline) {
                for (auto &t : tasks_)
                    if (t.alive && t.pid > 0)
                        kill(t.pid, SIGKILL);
                reap();
                return false;
            }
            usleep(10000);
        }
        return true;
    }
    // Drains failed{} messages the tasks sent on their channels.
    void collect_failed()
    {
        for (uint32_t r = 0; r < ntasks_; ++r) {
            char buf[8192];
            while (tasks_[r].conn >= 0) {
                ssize_t got = recv(tasks_[r].conn, buf, sizeof buf, MSG_DONTWAIT);
                if (got <= 0) {
                    detach(r);
                    break;
                }
                storm::net::Reader rd(buf, static_cast<size_t>(got));
                if (control::header(rd).type == control::Type::failed)
                    tasks_[r].failed = control::read_reason(rd);
            }
        }
    }
    int status(uint32_t r) const
    {
        auto it = status_.find(r);
        return it == status_.end() ? -1 : it->second;
    }
    Task &task(uint32_t r) { return tasks_[r]; }

    Context ctx;
    TaskShare share;
    uint64_t epoch = 0;
    bool attach_resident = true;

private:
    uint32_t ntasks_;
    std::vector<Task> tasks_;
    std::map<uint32_t, int> status_;
    std::string dir_, path_;
    int lfd_ = -1, memfd_ = -1;
    uint8_t *window_ = nullptr;
    uint32_t packet_size_ = 0;
};

// storm_msg_init() failed; says why on stderr, for the test's log.
inline bool init_failed()
{
    if (storm_msg_init() == 0)
        return false;
    std::fprintf(stderr, "storm_msg_init: %s\n", storm_msg_error());
    return true;
}

inline bool exited_ok(int st) { return st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0; }

} // namespace msg_fixture
