#include "switch_rdma/msg/endpoint.hpp"

#include <algorithm>
#include <arpa/inet.h>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <linux/futex.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>
#include <vector>

#include "lib/net/fd_passing.hpp"
#include "lib/net/wire.hpp"
#include "lib/common/thread_name.hpp"
#include "switch_rdma/msg/frames.hpp"
#include "switch_rdma/msg/handshake.hpp"

namespace storm::rdma::msg {

namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void error(int err, const std::string &what) { throw MsgError(err, what); }

std::string sys(const char *what) { return std::string(what) + ": " + std::strerror(errno); }

long futex(void *addr, int op, uint32_t val, const timespec *ts)
{
    return syscall(SYS_futex, addr, op, val, ts, nullptr, 0);
}

int remaining_ms(Clock::time_point deadline)
{
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    return left < 0 ? 0 : static_cast<int>(left);
}

// Waits for `events` on fd until `deadline`; false on timeout.
bool wait_fd(int fd, short events, Clock::time_point deadline)
{
    for (;;) {
        pollfd p{fd, events, 0};
        int n = poll(&p, 1, remaining_ms(deadline));
        if (n > 0)
            return true;
        if (n == 0)
            return false;
        if (errno != EINTR)
            return false;
    }
}

// Whole buffers over a blocking-mode socket with a deadline.
bool write_all(int fd, const void *buf, size_t n, Clock::time_point deadline)
{
    auto *p = static_cast<const char *>(buf);
    while (n) {
        if (!wait_fd(fd, POLLOUT, deadline))
            return false;
        ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (w <= 0)
            return false;
        p += w;
        n -= static_cast<size_t>(w);
    }
    return true;
}
bool read_all(int fd, void *buf, size_t n, Clock::time_point deadline)
{
    auto *p = static_cast<char *>(buf);
    while (n) {
        if (!wait_fd(fd, POLLIN, deadline))
            return false;
        ssize_t r = ::recv(fd, p, n, MSG_DONTWAIT);
        if (r < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (r <= 0)
            return false;
        p += r;
        n -= static_cast<size_t>(r);
    }
    return true;
}

std::string rank_text(uint32_t r) { return "rank " + std::to_string(r); }

} // namespace

// ---- set-up ----------------------------------------------------------------

Endpoint::Endpoint()
{
    const char *ctx = std::getenv("STORM_CTX");
    if (!ctx || !*ctx)
        error(ENOENT, "no communication context: STORM_CTX is not set (is SwitchType=switch/rdma?)");
    try {
        ctx_ = Context::decode(ctx);
    } catch (const std::exception &e) {
        error(EINVAL, std::string("bad STORM_CTX: ") + e.what());
    }
    // A context of format version 3 or older (an older slurmctld made it)
    // has no key: its tasks could not tell their peers from anyone else.
    if (ctx_.key.empty())
        error(EPROTO, "context " + std::to_string(ctx_.id) + " of step " + std::to_string(ctx_.job_id) + "." +
                          std::to_string(ctx_.step_id) +
                          " has no key (format version 3 or older): its tasks' connections cannot be "
                          "authenticated (slurmctld must be the same Storm as libstormmsg; start the step "
                          "again)");
    const char *sock = std::getenv("STORM_POOL_SOCKET");
    if (!sock || !*sock)
        error(ENOENT, "STORM_POOL_SOCKET is not set: the node agent's control socket is unknown");
    const char *procid = std::getenv("SLURM_PROCID");
    char *end = nullptr;
    unsigned long r = procid ? std::strtoul(procid, &end, 10) : 0;
    if (!procid || !*procid || *end || r >= ctx_.ntasks)
        error(EINVAL, std::string("SLURM_PROCID ") + (procid ? "\"" + std::string(procid) + "\"" : "unset") +
                          " is not a rank of the context's " + std::to_string(ctx_.ntasks) + " tasks");
    rank_ = static_cast<uint32_t>(r);
    ntasks_ = ctx_.ntasks;
    local_ = ctx_.locate(rank_).second;
    if (const char *t = std::getenv("STORM_MSG_TIMEOUT")) {
        long v = std::strtol(t, &end, 10);
        if (!*t || *end || v < 1 || v > 86400)
            error(EINVAL, std::string("STORM_MSG_TIMEOUT=\"") + t + "\": seconds from 1 to 86400 expected");
        timeout_s_ = static_cast<int>(v);
    }
    cosched_ = std::make_unique<Cosched>(rank_, timeout_s_);
    peers_.resize(ntasks_);
    seq_to_.assign(ntasks_, 0);
    seq_from_.assign(ntasks_, 0);
    partial_.resize(ntasks_);
    notified_.assign(ntasks_, 0);
    consumed_seen_.assign(ntasks_, 0);
    consumed_.reset(new std::atomic<uint64_t>[ntasks_]);
    for (uint32_t i = 0; i < ntasks_; ++i)
        consumed_[i].store(0);
    try {
        attach(sock);
        credits_ = std::make_unique<Credits>(ntasks_, att_.credits);
        bool halted = !att_.resident && att_.epoch > 0;
        flush_ = std::make_unique<Flush>(ntasks_, rank_, att_.epoch, halted);
        if (att_.resident)
            check_header();
        connect_peers();
        prog_efd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (prog_efd_ < 0)
            error(errno, sys("eventfd"));
        progress_ = std::thread([this] {
            name_thread("storm-msg");
            progress_main();
        });
        if (!att_.resident) {
            wait_resident();
            check_failed();
            check_header();
        }
    } catch (...) {
        close_all();
        throw;
    }
}

Endpoint::~Endpoint() { close_all(); }

void Endpoint::attach(const std::string &path)
{
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    if (path.size() >= sizeof sa.sun_path)
        error(ENAMETOOLONG, "STORM_POOL_SOCKET path too long: " + path);
    std::memcpy(sa.sun_path, path.c_str(), path.size() + 1);
    ctl_fd_ = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (ctl_fd_ < 0)
        error(errno, sys("socket"));
    if (connect(ctl_fd_, reinterpret_cast<sockaddr *>(&sa), sizeof sa) != 0)
        error(errno, "cannot reach the node agent at " + path + ": " + std::strerror(errno));
    std::string m = control::attach(ctx_.id, ctx_.job_id, ctx_.step_id, rank_);
    if (::send(ctl_fd_, m.data(), m.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(m.size()))
        error(errno, "cannot send to the node agent at " + path + ": " + std::strerror(errno));
    auto deadline = Clock::now() + std::chrono::seconds(timeout_s_);
    if (!wait_fd(ctl_fd_, POLLIN, deadline))
        error(ETIMEDOUT, "the node agent at " + path + " did not answer the attach within " +
                             std::to_string(timeout_s_) + " s");
    std::string buf(64 * 1024, '\0');
    int memfd = -1;
    ssize_t got = net::recv_with_fd(ctl_fd_, buf, memfd);
    struct FdCloser {
        int &fd;
        ~FdCloser()
        {
            if (fd >= 0)
                ::close(fd);
        }
    } closer{memfd};
    if (got <= 0)
        error(ECONNRESET,
              "the node agent at " + path + " closed the connection without answering the attach");
    try {
        net::Reader rd(buf.data(), static_cast<size_t>(got));
        auto h = control::header(rd);
        if (h.type == control::Type::error)
            error(EPERM, "the node agent refused the attach of rank " + std::to_string(rank_) +
                             " to context " + std::to_string(ctx_.id) + ": " + control::read_reason(rd));
        if (h.type != control::Type::attached)
            error(EPROTO, "unexpected answer to the attach from the node agent at " + path);
        att_ = control::read_attached(rd);
    } catch (const net::DecodeError &e) {
        error(EPROTO, std::string("malformed answer to the attach from the node agent: ") + e.what());
    }
    if (memfd < 0)
        error(EPROTO, "the node agent answered the attach without the window's file descriptor");
    if (att_.credits == 0)
        error(ENOBUFS, "the pool is too small for " + std::to_string(ntasks_) +
                           " tasks: 0 credits per sender (raise storm_pool_size or lower storm_packet_size)");
    if (att_.packet_size <= sizeof(PacketHeader) || att_.send_slots == 0 || att_.recv_slots == 0 ||
        share_bytes_needed(att_.packet_size, att_.send_slots, att_.recv_slots) > att_.bytes)
        error(EPROTO, "the node agent announced an impossible share (" + std::to_string(att_.bytes) +
                          " bytes, " + std::to_string(att_.send_slots) + "+" +
                          std::to_string(att_.recv_slots) + " slots of " + std::to_string(att_.packet_size) +
                          ")");
    payload_ = att_.packet_size - static_cast<uint32_t>(sizeof(PacketHeader));
    uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
    uint64_t base = att_.offset & ~(page - 1);
    map_len_ = static_cast<size_t>(att_.offset - base + att_.bytes);
    void *m2 = mmap(nullptr, map_len_, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, static_cast<off_t>(base));
    if (m2 == MAP_FAILED)
        error(errno, sys("mmap of the context's window"));
    map_ = m2;
    q_ = reinterpret_cast<QueueHeader *>(static_cast<uint8_t *>(map_) + (att_.offset - base));
}

void Endpoint::check_header()
{
    auto field = [&](const char *name, uint64_t have, uint64_t want) {
        if (have != want)
            error(EPROTO, std::string("the queue header does not match the attach answer: ") + name + " is " +
                              std::to_string(have) + ", expected " + std::to_string(want));
    };
    field("magic", q_->magic, queue_magic);
    field("version", q_->version, queue_version);
    field("packet_size", q_->packet_size, att_.packet_size);
    field("send_slots", q_->send_slots, att_.send_slots);
    field("recv_slots", q_->recv_slots, att_.recv_slots);
    field("credits", q_->credits, att_.credits);
    field("rank", q_->rank, rank_);
    field("ntasks", q_->ntasks, ntasks_);
}

void Endpoint::connect_peers()
{
    auto deadline = Clock::now() + std::chrono::seconds(timeout_s_);
    auto [node, local] = ctx_.locate(rank_);
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (lfd < 0)
        error(errno, sys("socket"));
    struct Closer {
        int fd;
        ~Closer() { ::close(fd); }
    } lcloser{lfd};
    int one = 1;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = ctx_.nodes[node].addr;
    sa.sin_port = htons(ctx_.port_for(local));
    if (bind(lfd, reinterpret_cast<sockaddr *>(&sa), sizeof sa) != 0 || listen(lfd, SOMAXCONN) != 0)
        error(errno, "cannot listen on port " + std::to_string(ctx_.port_for(local)) + " for " +
                         rank_text(rank_) + ": " + std::strerror(errno));
    auto ready = [&](uint32_t p, int fd) {
        int fl = fcntl(fd, F_GETFL);
        fcntl(fd, F_SETFL, fl | O_NONBLOCK);
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        peers_[p].fd = fd;
    };
    // Downwards: connect to every lower rank.
    for (uint32_t p = 0; p < rank_; ++p) {
        auto [pn, pl] = ctx_.locate(p);
        sockaddr_in pa{};
        pa.sin_family = AF_INET;
        pa.sin_addr.s_addr = ctx_.nodes[pn].addr;
        pa.sin_port = htons(ctx_.port_for(pl));
        int fd;
        for (;;) {
            fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
            if (fd < 0)
                error(errno, sys("socket"));
            if (connect(fd, reinterpret_cast<sockaddr *>(&pa), sizeof pa) == 0)
                break;
            int e = errno;
            ::close(fd);
            if (Clock::now() >= deadline)
                error(ETIMEDOUT, "cannot connect to " + rank_text(p) + " within " +
                                     std::to_string(timeout_s_) + " s: " + std::strerror(e));
            usleep(20000);
        }
        // The challenge, then our hello, then the answer that proves p
        // holds the key too (a process that bound p's port first does not).
        Challenge c{};
        if (!read_all(fd, &c, sizeof c, deadline)) {
            ::close(fd);
            error(ECONNREFUSED, rank_text(p) + " sent no challenge to " + rank_text(rank_) +
                                    " (it closed the connection, or did not answer within " +
                                    std::to_string(timeout_s_) + " s: a libstormmsg before frame version " +
                                    std::to_string(frame_version) + "?)");
        }
        if (std::string why = check_challenge(c); !why.empty()) {
            ::close(fd);
            error(EPROTO, "the challenge of " + rank_text(p) + " to " + rank_text(rank_) + ": " + why);
        }
        Hello h = make_hello(ctx_, rank_, p, att_.packet_size, c);
        HelloAck a{};
        if (!write_all(fd, &h, sizeof h, deadline) || !read_all(fd, &a, sizeof a, deadline)) {
            ::close(fd);
            error(ECONNREFUSED,
                  rank_text(p) + " refused or did not answer the connection of " + rank_text(rank_));
        }
        if (!check_ack(a, ctx_.key, c, h)) {
            ::close(fd);
            error(EACCES, "the answer of " + rank_text(p) + " (port " + std::to_string(ctx_.port_for(pl)) +
                              ") does not prove the context's key: another process holds its port");
        }
        ready(p, fd);
    }
    // Upwards: accept every higher rank.  Anyone may connect to the port,
    // so the hellos are read side by side, each within 5 s of its accept,
    // at most kMaxHellos at once (the oldest closed for a newer one): a
    // connection that says nothing holds up no peer.  A hello must prove
    // the context's key over the challenge sent on its own connection
    // (handshake.hpp).  Refusals other than silence are printed on stderr
    // (the first kMaxPrinted) and named in the error if the peers do not
    // all come.
    constexpr size_t kMaxHellos = 64, kMaxPrinted = 8;
    struct Waiting {
        int fd;
        Clock::time_point until;
        Challenge c;
        Hello h;
        size_t got;
        std::string from; // the peer's address
    };
    std::vector<Waiting> waiting;
    struct CloseWaiting {
        std::vector<Waiting> &w;
        ~CloseWaiting()
        {
            for (auto &x : w)
                ::close(x.fd);
        }
    } wcloser{waiting};
    uint32_t expected = ntasks_ - 1 - rank_;
    std::string refused;
    size_t refusals = 0;
    auto refuse = [&](size_t i, const std::string &why) {
        std::string line = why + " (from " + waiting[i].from + ")";
        ::close(waiting[i].fd);
        waiting.erase(waiting.begin() + static_cast<long>(i));
        if (why != "no hello" && refusals < kMaxPrinted)
            std::fprintf(stderr, "storm_msg: %s of step %u.%u refused a connection: %s\n",
                         rank_text(rank_).c_str(), ctx_.job_id, ctx_.step_id, line.c_str());
        if (refusals++ < kMaxPrinted)
            refused += (refused.empty() ? "" : "; ") + line;
    };
    while (expected) {
        auto now = Clock::now();
        if (now >= deadline)
            error(ETIMEDOUT, std::to_string(expected) + " peers of higher rank did not connect to " +
                                 rank_text(rank_) + " within " + std::to_string(timeout_s_) + " s" +
                                 (refused.empty()
                                      ? ""
                                      : " (refused: " + refused +
                                            (refusals > kMaxPrinted
                                                 ? "; and " + std::to_string(refusals - kMaxPrinted) + " more"
                                                 : "") +
                                            ")"));
        for (size_t i = waiting.size(); i-- > 0;)
            if (now >= waiting[i].until)
                refuse(i, "no hello");
        auto wake = deadline;
        std::vector<pollfd> fds{{lfd, POLLIN, 0}};
        for (const auto &x : waiting) {
            fds.push_back({x.fd, POLLIN, 0});
            wake = std::min(wake, x.until);
        }
        int n = poll(fds.data(), fds.size(), remaining_ms(wake));
        if (n < 0 && errno != EINTR)
            error(errno, sys("poll"));
        if (n <= 0)
            continue;
        // Hellos first (fds[i + 1] is waiting[i]), from the last, since a
        // refusal removes its entry.
        for (size_t i = waiting.size(); i-- > 0;) {
            if (!fds[i + 1].revents)
                continue;
            Waiting &x = waiting[i];
            ssize_t r =
                ::recv(x.fd, reinterpret_cast<char *>(&x.h) + x.got, sizeof x.h - x.got, MSG_DONTWAIT);
            if (r < 0 && (errno == EINTR || errno == EAGAIN))
                continue;
            if (r <= 0) {
                refuse(i, "no hello");
                continue;
            }
            x.got += static_cast<size_t>(r);
            Verdict v = check_hello(x.h, x.got, x.c, ctx_, rank_, att_.packet_size);
            if (v.what == Verdict::more)
                continue;
            const Hello &h = x.h;
            if (v.what == Verdict::accepted && (h.src <= rank_ || h.src >= ntasks_ || peers_[h.src].fd >= 0))
                v = Verdict{Verdict::refused,
                            "unexpected ranks " + std::to_string(h.src) + " -> " + std::to_string(h.dst)};
            if (v.what == Verdict::refused) {
                refuse(i, v.why);
                continue;
            }
            HelloAck a = make_ack(ctx_.key, x.c, h);
            int fd = x.fd;
            uint32_t src = h.src;
            waiting.erase(waiting.begin() + static_cast<long>(i));
            if (!write_all(fd, &a, sizeof a, deadline)) {
                ::close(fd);
                continue;
            }
            ready(src, fd);
            --expected;
        }
        if (fds[0].revents & POLLIN) {
            sockaddr_in from{};
            socklen_t flen = sizeof from;
            int fd = accept4(lfd, reinterpret_cast<sockaddr *>(&from), &flen, SOCK_CLOEXEC);
            if (fd < 0)
                continue;
            if (waiting.size() == kMaxHellos)
                refuse(0, "more than " + std::to_string(kMaxHellos) + " connections without a hello");
            char a[INET_ADDRSTRLEN] = "?";
            inet_ntop(AF_INET, &from.sin_addr, a, sizeof a);
            Waiting w{
                fd, std::min(deadline, Clock::now() + std::chrono::seconds(5)), make_challenge(), Hello{},
                0,  std::string(a) + ":" + std::to_string(ntohs(from.sin_port))};
            // A fresh socket's buffer takes the 40 bytes at once.
            if (::send(fd, &w.c, sizeof w.c, MSG_NOSIGNAL | MSG_DONTWAIT) !=
                static_cast<ssize_t>(sizeof w.c)) {
                ::close(fd);
                continue;
            }
            waiting.push_back(std::move(w));
        }
    }
}

void Endpoint::close_all() noexcept
{
    if (progress_.joinable()) {
        done_.store(true);
        wake_progress();
        uint64_t one = 1;
        if (prog_efd_ >= 0)
            (void)!::write(prog_efd_, &one, sizeof one);
        progress_.join();
    }
    for (auto &p : peers_)
        if (p.fd >= 0) {
            ::close(p.fd);
            p.fd = -1;
        }
    if (ctl_fd_ >= 0)
        ::close(ctl_fd_);
    if (cosched_)
        cosched_->end(); // UNREGISTER, once the progress thread is gone
    if (prog_efd_ >= 0)
        ::close(prog_efd_);
    ctl_fd_ = prog_efd_ = -1;
    if (map_)
        munmap(map_, map_len_);
    map_ = nullptr;
}

// ---- waking ------------------------------------------------------------------

void Endpoint::wake_app() noexcept
{
    app_seq_.fetch_add(1, std::memory_order_seq_cst);
    if (app_waiters_.load(std::memory_order_seq_cst))
        futex(&app_seq_, FUTEX_WAKE_PRIVATE, INT_MAX, nullptr);
}

void Endpoint::wake_progress() noexcept
{
    if (prog_sleeping_.load(std::memory_order_seq_cst)) {
        uint64_t one = 1;
        (void)!::write(prog_efd_, &one, sizeof one);
    }
}

void Endpoint::wait_app(uint32_t seen, bool for_resident)
{
    if (for_resident) {
        // Swapped out: the agent FUTEX_WAKEs the (shared) resident word.
        stats_.resident_waits.fetch_add(1, std::memory_order_relaxed);
        timespec ts{0, 100 * 1000 * 1000};
        futex(&q_->resident, FUTEX_WAIT, 0, &ts);
        return;
    }
    app_waiters_.fetch_add(1, std::memory_order_seq_cst);
    if (app_seq_.load(std::memory_order_seq_cst) == seen) {
        timespec ts{1, 0};
        futex(&app_seq_, FUTEX_WAIT_PRIVATE, seen, &ts);
    }
    app_waiters_.fetch_sub(1, std::memory_order_seq_cst);
}

void Endpoint::wait_resident()
{
    while (!resident()) {
        check_failed();
        wait_app(0, true);
    }
}

void Endpoint::fail(const std::string &reason) noexcept
{
    {
        std::lock_guard<std::mutex> l(fail_mu_);
        if (failed_.load())
            return;
        fail_reason_ = reason;
        failed_.store(true);
    }
    // Tell the agent at once (it stops waiting for this task's answers):
    // the application may exit as soon as its call returns -1.
    if (ctl_fd_ >= 0) {
        std::string m = control::failed(reason);
        (void)!::send(ctl_fd_, m.data(), m.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    wake_app();
}

void Endpoint::check_failed()
{
    if (!failed_.load(std::memory_order_acquire))
        return;
    std::lock_guard<std::mutex> l(fail_mu_);
    error(EPIPE, fail_reason_);
}

// ---- application side ------------------------------------------------------

void Endpoint::drain()
{
    if (!resident())
        return;
    uint64_t h = q_->recv_head.load(std::memory_order_relaxed);
    uint64_t t = q_->recv_tail.load(std::memory_order_acquire);
    if (h == t)
        return;
    std::vector<uint32_t> took(ntasks_, 0);
    for (; h < t; ++h) {
        const uint8_t *slot = recv_slot_at(h);
        PacketHeader ph;
        std::memcpy(&ph, slot, sizeof ph);
        auto bad = [&](const std::string &why) {
            std::string r = "corrupt packet in the receive queue at index " + std::to_string(h) + ": " + why;
            fail(r);
            error(EPROTO, r);
        };
        if (ph.src >= ntasks_ || ph.src == rank_ || ph.dst != rank_ || ph.len > payload_)
            bad("source " + std::to_string(ph.src) + ", destination " + std::to_string(ph.dst) + ", length " +
                std::to_string(ph.len));
        if (ph.seq != seq_from_[ph.src])
            bad("packet " + std::to_string(ph.seq) + " of " + rank_text(ph.src) + " where " +
                std::to_string(seq_from_[ph.src]) + " was expected");
        ++seq_from_[ph.src];
        Partial &pa = partial_[ph.src];
        if (ph.flags & packet_first) {
            if (pa.active)
                bad("a new message of " + rank_text(ph.src) + " before the end of the previous one");
            pa.active = true;
            pa.tag = ph.tag;
            pa.msg_len = ph.msg_len;
            pa.data.clear();
            pa.data.reserve(ph.msg_len);
        } else if (!pa.active || pa.tag != ph.tag) {
            bad("a continuation without its message's first packet from " + rank_text(ph.src));
        }
        pa.data.append(reinterpret_cast<const char *>(slot) + sizeof ph, ph.len);
        if (pa.data.size() > pa.msg_len)
            bad("message of " + rank_text(ph.src) + " longer than announced");
        if (ph.flags & packet_last) {
            if (pa.data.size() != pa.msg_len)
                bad("message of " + rank_text(ph.src) + " shorter than announced");
            messages_.push_back(Message{ph.src, pa.tag, std::move(pa.data)});
            pa = Partial{};
            stats_.messages_received.fetch_add(1, std::memory_order_relaxed);
        }
        ++took[ph.src];
    }
    q_->recv_head.store(h, std::memory_order_release);
    // Only now may the progress thread return the credits.
    bool notify = false;
    for (uint32_t p = 0; p < ntasks_; ++p)
        if (took[p]) {
            uint64_t c = consumed_[p].fetch_add(took[p], std::memory_order_release) + took[p];
            if (c - notified_[p] >= credits_->threshold() || finalizing_.load()) {
                notified_[p] = c;
                notify = true;
            }
        }
    if (notify)
        wake_progress();
}

void Endpoint::write_packet(uint32_t dst, uint32_t tag, const uint8_t *data, uint32_t len, uint32_t msg_len,
                            uint32_t flags)
{
    for (;;) {
        uint32_t seen = app_seq_.load(std::memory_order_seq_cst);
        check_failed();
        if (!resident()) {
            wait_app(0, true);
            continue;
        }
        uint64_t tail = q_->send_tail.load(std::memory_order_relaxed);
        if (tail - q_->send_head.load(std::memory_order_acquire) < att_.send_slots) {
            uint8_t *slot = send_slot_at(tail);
            PacketHeader h{rank_, dst, tag, len, msg_len, flags, seq_to_[dst]++};
            std::memcpy(slot, &h, sizeof h);
            if (len)
                std::memcpy(slot + sizeof h, data, len);
            q_->send_tail.store(tail + 1, std::memory_order_seq_cst);
            wake_progress();
            return;
        }
        // The send queue is full: keep taking what arrives meanwhile, so that
        // the peers' credits come back (two senders never wait for each other).
        {
            std::lock_guard<std::mutex> l(recv_mu_);
            drain();
        }
        wake_progress();
        wait_app(seen, false);
    }
}

void Endpoint::send(uint32_t dst, uint32_t tag, const void *buf, size_t len)
{
    check_failed();
    if (dst >= ntasks_)
        error(EINVAL,
              "destination rank " + std::to_string(dst) + " is not in [0, " + std::to_string(ntasks_) + ")");
    if (len > UINT32_MAX)
        error(EMSGSIZE, "message of " + std::to_string(len) + " bytes: at most 4 GiB - 1");
    if (finalizing_.load())
        error(EINVAL, "send after storm_msg_finalize()");
    auto *p = static_cast<const uint8_t *>(buf);
    if (dst == rank_) {
        std::lock_guard<std::mutex> l(recv_mu_);
        messages_.push_back(Message{rank_, tag, std::string(reinterpret_cast<const char *>(p), len)});
        stats_.messages_sent.fetch_add(1, std::memory_order_relaxed);
        stats_.messages_received.fetch_add(1, std::memory_order_relaxed);
        wake_app();
        return;
    }
    std::lock_guard<std::mutex> l(send_mu_);
    size_t off = 0;
    do {
        uint32_t n = static_cast<uint32_t>(std::min<size_t>(payload_, len - off));
        uint32_t flags = (off == 0 ? packet_first : 0) | (off + n == len ? packet_last : 0);
        write_packet(dst, tag, p + off, n, static_cast<uint32_t>(len), flags);
        off += n;
    } while (off < len);
    stats_.messages_sent.fetch_add(1, std::memory_order_relaxed);
}

std::deque<Endpoint::Message>::iterator Endpoint::match(int src, int64_t tag, bool internal)
{
    for (auto it = messages_.begin(); it != messages_.end(); ++it) {
        if (src >= 0 && it->src != static_cast<uint32_t>(src))
            continue;
        if (tag >= 0 ? it->tag != static_cast<uint32_t>(tag) : (!internal && it->tag >= internal_tags))
            continue;
        if (!internal && it->tag >= internal_tags)
            continue;
        return it;
    }
    return messages_.end();
}

size_t Endpoint::recv(int src, int64_t tag, void *buf, size_t cap, uint32_t *out_src, uint32_t *out_tag,
                      bool internal)
{
    if (src < -1 || (src >= 0 && static_cast<uint32_t>(src) >= ntasks_))
        error(EINVAL,
              "source rank " + std::to_string(src) + " is not in [0, " + std::to_string(ntasks_) + ")");
    std::unique_lock<std::mutex> l(recv_mu_);
    for (;;) {
        uint32_t seen = app_seq_.load(std::memory_order_seq_cst);
        drain();
        auto it = match(src, tag, internal);
        if (it != messages_.end()) {
            size_t n = it->data.size();
            if (n > cap)
                error(EMSGSIZE, "the message of " + std::to_string(n) + " bytes from " + rank_text(it->src) +
                                    " with tag " + std::to_string(it->tag) + " does not fit the buffer of " +
                                    std::to_string(cap) +
                                    " bytes: it stays queued, receive it with a buffer of at least " +
                                    std::to_string(n) + " bytes");
            if (n)
                std::memcpy(buf, it->data.data(), n);
            if (out_src)
                *out_src = it->src;
            if (out_tag)
                *out_tag = it->tag;
            messages_.erase(it);
            return n;
        }
        check_failed();
        bool swapped = !resident();
        l.unlock();
        wait_app(seen, swapped);
        l.lock();
    }
}

int64_t Endpoint::probe(int src, int64_t tag, uint32_t *out_src, uint32_t *out_tag)
{
    std::lock_guard<std::mutex> l(recv_mu_);
    drain();
    auto it = match(src, tag, false);
    if (it == messages_.end()) {
        check_failed();
        return -1;
    }
    if (out_src)
        *out_src = it->src;
    if (out_tag)
        *out_tag = it->tag;
    return static_cast<int64_t>(it->data.size());
}

void Endpoint::barrier()
{
    if (ntasks_ == 1)
        return;
    if (rank_ == 0) {
        for (uint32_t r = 1; r < ntasks_; ++r)
            recv(static_cast<int>(r), barrier_tag, nullptr, 0, nullptr, nullptr, true);
        for (uint32_t r = 1; r < ntasks_; ++r)
            send(r, barrier_tag, nullptr, 0);
    } else {
        send(0, barrier_tag, nullptr, 0);
        recv(0, barrier_tag, nullptr, 0, nullptr, nullptr, true);
    }
}

void Endpoint::finalize()
{
    struct Closer {
        Endpoint *e;
        ~Closer() { e->close_all(); }
    } closer{this};
    check_failed();
    {
        std::lock_guard<std::mutex> l(send_mu_); // no send in the middle of a message
        finalizing_.store(true);
    }
    wake_progress();
    uint64_t one = 1;
    (void)!::write(prog_efd_, &one, sizeof one);
    // Keep taking what arrives until the progress thread exchanged bye and
    // fin with every peer (it gives up after the timeout).
    std::unique_lock<std::mutex> l(recv_mu_);
    for (;;) {
        uint32_t seen = app_seq_.load(std::memory_order_seq_cst);
        drain();
        if (done_.load())
            break;
        check_failed();
        bool swapped = !resident();
        l.unlock();
        wake_progress();
        wait_app(seen, swapped);
        l.lock();
    }
    check_failed();
}

} // namespace storm::rdma::msg
