// The progress thread: libstormmsg's "NIC" (see endpoint.hpp).
#include "switch_rdma/msg/endpoint.hpp"

#include <cerrno>
#include <cstring>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "lib/net/wire.hpp"
#include "switch_rdma/msg/frames.hpp"

namespace storm::rdma::msg {

namespace {

using Clock = std::chrono::steady_clock;

// Bytes queued towards one peer beyond which injection waits for the socket.
constexpr size_t out_limit = 256 * 1024;

std::string rank_text(uint32_t r) { return "rank " + std::to_string(r); }

} // namespace

void Endpoint::progress_main() noexcept
{
    std::vector<pollfd> fds;
    while (!done_.load() && !failed_.load()) {
        try {
            progress_step();
        } catch (const std::exception &e) {
            abort_peers(e.what());
            fail(e.what());
        }
        if (done_.load() || failed_.load())
            break;
        // Sleep until a socket, the control channel or the application
        // (eventfd) has something; re-check after announcing the sleep.
        prog_sleeping_.store(true, std::memory_order_seq_cst);
        if (progress_has_work()) {
            prog_sleeping_.store(false);
            continue;
        }
        fds.clear();
        fds.push_back({prog_efd_, POLLIN, 0});
        fds.push_back({ctl_fd_, POLLIN, 0});
        fds.push_back({cosched_->fd(), POLLIN, 0}); // -1 when not coscheduled: ignored
        for (auto &p : peers_)
            fds.push_back({p.closed ? -1 : p.fd,
                           static_cast<short>(POLLIN | (p.out.size() > p.out_off ? POLLOUT : 0)), 0});
        int timeout = flush_->waiting() || finalizing_.load() ? 200 : 1000;
        timeout = cosched_->wait_ms(Clock::now(), timeout); // a batched request to send
        int n = poll(fds.data(), fds.size(), timeout);
        prog_sleeping_.store(false);
        if (n < 0 && errno != EINTR) {
            fail(std::string("poll: ") + std::strerror(errno));
            break;
        }
        if (n > 0 && (fds[0].revents & POLLIN)) {
            uint64_t v;
            (void)!::read(prog_efd_, &v, sizeof v);
        }
    }
    done_.store(true);
    wake_app();
}

bool Endpoint::progress_has_work()
{
    for (uint32_t p = 0; p < ntasks_; ++p)
        if (consumed_[p].load(std::memory_order_acquire) != consumed_seen_[p])
            return true;
    if (!flush_->may_inject())
        return false;
    uint64_t head = q_->send_head.load(std::memory_order_relaxed);
    if (q_->send_tail.load(std::memory_order_seq_cst) == head)
        return finalizing_.load() && !bye_sent_; // the bye can go
    PacketHeader h;
    std::memcpy(&h, send_slot_at(head), sizeof h);
    return h.dst < ntasks_ && credits_->can_send(h.dst) &&
           peers_[h.dst].out.size() - peers_[h.dst].out_off < out_limit;
}

void Endpoint::progress_step()
{
    if (cosched_->on())
        cosched_->read_status(); // before the arrivals it applies to
    read_control();
    for (uint32_t p = 0; p < ntasks_ && !failed_.load(); ++p)
        if (p != rank_ && !peers_[p].closed)
            read_peer(p);
    take_consumed(fin_sent_ || (bye_sent_ && finalizing_.load()));
    inject();
    finalize_steps();
    for (uint32_t p = 0; p < ntasks_; ++p)
        if (p != rank_ && !peers_[p].closed)
            flush_out(p);
    send_halted();
    check_timeouts();
    if (cosched_->on())
        cosched_->send_due(Clock::now());
    stats_.credits_missing.store(credits_->short_total(rank_), std::memory_order_relaxed);
}

void Endpoint::control_send(const std::string &m)
{
    if (::send(ctl_fd_, m.data(), m.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(m.size()))
        throw std::runtime_error(std::string("cannot answer the node agent: ") + std::strerror(errno));
}

void Endpoint::answer(Flush::Answer a)
{
    if (a == Flush::Answer::halted) {
        halted_unsent_ = flush_->epoch();
        send_halted();
    } else if (a == Flush::Answer::ready) {
        control_send(control::epoch_message(control::Type::ready, flush_->epoch()));
        wake_app();
    }
}

// The halted answer goes once every byte queued towards the peers (this
// task's halt marks, and whatever preceded them) is in the kernel: from
// there it reaches them even while this task is stopped.
void Endpoint::send_halted()
{
    if (!halted_unsent_)
        return;
    for (uint32_t p = 0; p < ntasks_; ++p)
        if (p != rank_ && !peers_[p].closed) {
            flush_out(p);
            if (peers_[p].out.size() > peers_[p].out_off)
                return; // POLLOUT wakes the progress thread again
        }
    uint64_t e = halted_unsent_;
    halted_unsent_ = 0;
    control_send(control::epoch_message(control::Type::halted, e));
}

void Endpoint::queue_frame(uint32_t p, uint8_t type, uint64_t value, uint32_t refill)
{
    Peer &peer = peers_[p];
    if (peer.closed)
        return;
    Frame f{};
    f.type = type;
    f.status = cosched_->status();
    f.refill = refill;
    f.value = value;
    peer.out.append(reinterpret_cast<const char *>(&f), sizeof f);
}

void Endpoint::queue_marks(uint8_t type, uint64_t epoch)
{
    for (uint32_t p = 0; p < ntasks_; ++p)
        if (p != rank_)
            queue_frame(p, type, epoch);
}

void Endpoint::read_control()
{
    char buf[4096];
    for (;;) {
        ssize_t n = ::recv(ctl_fd_, buf, sizeof buf, MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
                return;
            throw std::runtime_error(std::string("the node agent's control channel failed: ") +
                                     std::strerror(errno));
        }
        if (n == 0)
            throw std::runtime_error("the node agent closed the control channel");
        try {
            net::Reader r(buf, static_cast<size_t>(n));
            auto h = control::header(r);
            if (h.type == control::Type::halt) {
                uint64_t e = control::read_epoch(r);
                stats_.halts.fetch_add(1, std::memory_order_relaxed);
                auto a = flush_->local_halt(e);
                wait_since_ = Clock::now();
                queue_marks(frame_halt, e);
                answer(a);
            } else if (h.type == control::Type::release) {
                uint64_t e = control::read_epoch(r);
                stats_.releases.fetch_add(1, std::memory_order_relaxed);
                auto a = flush_->local_release(e);
                wait_since_ = Clock::now();
                queue_marks(frame_ready, e);
                answer(a);
            } else {
                throw std::runtime_error("unexpected message type " +
                                         std::to_string(static_cast<int>(h.type)) + " from the node agent");
            }
        } catch (const net::DecodeError &e) {
            throw std::runtime_error(std::string("malformed message from the node agent: ") + e.what());
        }
    }
}

void Endpoint::peer_closed(uint32_t p, const std::string &why)
{
    Peer &peer = peers_[p];
    if (peer.closed)
        return;
    peer.closed = true;
    if (!peer.bye)
        throw std::runtime_error(rank_text(p) + " " + why + " (the task died or failed)");
    answer(flush_->peer_gone(p));
    wake_app();
}

void Endpoint::read_peer(uint32_t p)
{
    Peer &peer = peers_[p];
    char buf[64 * 1024];
    bool eof = false; // handled after what came before it
    for (int round = 0; round < 16; ++round) {
        ssize_t n = ::recv(peer.fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
                break;
            peer_closed(p, std::string("broke its connection: ") + std::strerror(errno));
            return;
        }
        if (n == 0) {
            eof = true;
            break;
        }
        peer.in.append(buf, static_cast<size_t>(n));
        if (static_cast<size_t>(n) < sizeof buf)
            break;
    }
    size_t off = 0;
    while (peer.in.size() - off >= sizeof(Frame) && !failed_.load()) {
        Frame f;
        std::memcpy(&f, peer.in.data() + off, sizeof f);
        if (f.status > status_unknown)
            throw std::runtime_error(rank_text(p) + " sent a frame with status byte " +
                                     std::to_string(f.status) + " (0, 1 or 2 expected)");
        if (f.pad[0] || f.pad[1])
            throw std::runtime_error(rank_text(p) + " sent a frame whose reserved bytes are not zero");
        if (f.type == frame_data) {
            if (peer.in.size() - off < sizeof f + sizeof(PacketHeader))
                break;
            PacketHeader h;
            std::memcpy(&h, peer.in.data() + off + sizeof f, sizeof h);
            if (h.len > payload_)
                throw std::runtime_error(rank_text(p) + " sent a packet of " + std::to_string(h.len) +
                                         " bytes (at most " + std::to_string(payload_) + ")");
            if (peer.in.size() - off < sizeof f + sizeof h + h.len)
                break;
            deliver(p, f, h, peer.in.data() + off + sizeof f + sizeof h);
            off += sizeof f + sizeof h + h.len;
            continue;
        }
        if (f.type == frame_abort) {
            if (f.value > max_abort_reason)
                throw std::runtime_error(rank_text(p) + " sent an abort of " + std::to_string(f.value) +
                                         " bytes");
            if (peer.in.size() - off < sizeof f + f.value)
                break;
            throw std::runtime_error(rank_text(p) + " failed: " + peer.in.substr(off + sizeof f, f.value));
        }
        off += sizeof f;
        if (f.refill || f.type == frame_refill)
            credits_->refilled(p, f.refill);
        switch (f.type) {
        case frame_refill:
            break;
        case frame_halt:
            answer(flush_->arrived_halt(p, f.value));
            break;
        case frame_ready:
            answer(flush_->arrived_ready(p, f.value));
            break;
        case frame_bye:
            peer.bye = true;
            wake_app();
            break;
        case frame_fin:
            peer.fin = true;
            wake_app();
            break;
        default:
            throw std::runtime_error(rank_text(p) + " sent an unknown frame type " + std::to_string(f.type));
        }
    }
    peer.in.erase(0, off);
    if (eof) {
        if (!peer.in.empty())
            throw std::runtime_error(rank_text(p) + " closed its connection in the middle of a frame");
        peer_closed(p, "closed its connection");
    }
}

void Endpoint::abort_peers(const std::string &reason) noexcept
{
    // Best effort, briefly: the peers learn why rather than just an EOF.
    std::string why = reason.substr(0, max_abort_reason);
    auto deadline = Clock::now() + std::chrono::milliseconds(200);
    for (uint32_t p = 0; p < ntasks_; ++p) {
        Peer &peer = peers_[p];
        if (p == rank_ || peer.closed || peer.fd < 0)
            continue;
        try {
            queue_frame(p, frame_abort, why.size());
            peer.out += why;
            while (peer.out.size() > peer.out_off && Clock::now() < deadline) {
                ssize_t n = ::send(peer.fd, peer.out.data() + peer.out_off, peer.out.size() - peer.out_off,
                                   MSG_NOSIGNAL | MSG_DONTWAIT);
                if (n > 0) {
                    peer.out_off += static_cast<size_t>(n);
                    continue;
                }
                if (n < 0 && errno != EAGAIN && errno != EINTR)
                    break;
                pollfd pf{peer.fd, POLLOUT, 0};
                poll(&pf, 1, 10);
            }
        } catch (...) {
        }
    }
}

void Endpoint::deliver(uint32_t p, const Frame &f, const PacketHeader &h, const char *data)
{
    if (f.refill)
        credits_->refilled(p, f.refill);
    if (h.src != p || h.dst != rank_)
        throw std::runtime_error(rank_text(p) + " sent a packet from rank " + std::to_string(h.src) +
                                 " to rank " + std::to_string(h.dst));
    if (peers_[p].bye)
        throw std::runtime_error(rank_text(p) + " sent data after its bye");
    if (flush_->peer_halted(p))
        throw std::runtime_error(rank_text(p) + " sent data between its halt and ready marks");
    if (!resident())
        throw std::runtime_error(rank_text(p) + " sent data while the context is swapped out");
    credits_->arrived(p); // throws on a packet without credit
    uint64_t t = q_->recv_tail.load(std::memory_order_relaxed);
    if (t - q_->recv_head.load(std::memory_order_acquire) >= att_.recv_slots)
        throw std::runtime_error("the receive queue is full although " + rank_text(p) +
                                 " had a credit (credits exceed the queue)");
    uint8_t *slot = recv_slot_at(t);
    std::memcpy(slot, &h, sizeof h);
    std::memcpy(slot + sizeof h, data, h.len);
    q_->recv_tail.store(t + 1, std::memory_order_release);
    stats_.packets_received.fetch_add(1, std::memory_order_relaxed);
    cosched_->arrived(p, f.status); // an arrival: maybe a request (cosched.hpp)
    wake_app();
}

void Endpoint::take_consumed(bool all)
{
    for (uint32_t p = 0; p < ntasks_; ++p) {
        if (p == rank_)
            continue;
        uint64_t c = consumed_[p].load(std::memory_order_acquire);
        if (c != consumed_seen_[p]) {
            credits_->consumed(p, static_cast<uint32_t>(c - consumed_seen_[p]));
            consumed_seen_[p] = c;
        }
        if (credits_->refill_due(p, all) && !peers_[p].closed)
            queue_frame(p, frame_refill, 0, credits_->take_refill(p));
    }
}

void Endpoint::inject()
{
    if (!flush_->may_inject() || bye_sent_)
        return;
    bool moved = false;
    uint64_t head = q_->send_head.load(std::memory_order_relaxed);
    uint64_t tail = q_->send_tail.load(std::memory_order_acquire);
    while (head < tail) {
        const uint8_t *slot = send_slot_at(head);
        PacketHeader h;
        std::memcpy(&h, slot, sizeof h);
        if (h.dst >= ntasks_ || h.dst == rank_ || h.src != rank_ || h.len > payload_)
            throw std::runtime_error("corrupt packet in the send queue at index " + std::to_string(head));
        if (!credits_->can_send(h.dst)) {
            if (!stalled_)
                stats_.credit_stalls.fetch_add(1, std::memory_order_relaxed);
            stalled_ = true;
            break;
        }
        Peer &peer = peers_[h.dst];
        if (peer.closed)
            throw std::runtime_error(rank_text(h.dst) + " left before receiving its messages");
        if (peer.out.size() - peer.out_off >= out_limit)
            break;
        stalled_ = false;
        credits_->spend(h.dst);
        queue_frame(h.dst, frame_data, 0, credits_->take_refill(h.dst)); // refills ride along
        peer.out.append(reinterpret_cast<const char *>(slot), sizeof h + h.len);
        ++head;
        moved = true;
        stats_.packets_sent.fetch_add(1, std::memory_order_relaxed);
    }
    if (moved) {
        q_->send_head.store(head, std::memory_order_release);
        wake_app();
    }
}

void Endpoint::flush_out(uint32_t p)
{
    Peer &peer = peers_[p];
    while (peer.out.size() > peer.out_off) {
        ssize_t n = ::send(peer.fd, peer.out.data() + peer.out_off, peer.out.size() - peer.out_off,
                           MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
                break;
            peer.out.clear();
            peer.out_off = 0;
            peer_closed(p, std::string("broke its connection: ") + std::strerror(errno));
            return;
        }
        peer.out_off += static_cast<size_t>(n);
    }
    if (peer.out_off == peer.out.size()) {
        peer.out.clear();
        peer.out_off = 0;
    } else if (peer.out_off > out_limit) {
        peer.out.erase(0, peer.out_off);
        peer.out_off = 0;
    }
}

void Endpoint::finalize_steps()
{
    if (!finalizing_.load())
        return;
    if (!fin_deadline_set_) {
        fin_deadline_ = Clock::now() + std::chrono::seconds(timeout_s_);
        fin_deadline_set_ = true;
    }
    // 1. bye once every packet of the send queue is out (they need credits:
    //    the peers keep draining while they finalize).
    if (!bye_sent_) {
        if (!flush_->may_inject() ||
            q_->send_head.load(std::memory_order_relaxed) != q_->send_tail.load(std::memory_order_acquire))
            return;
        bye_sent_ = true;
        queue_marks(frame_bye, 0);
    }
    // 2. fin once every peer's bye came and the application took every
    //    packet: the last refills go before it.
    if (!fin_sent_) {
        for (uint32_t p = 0; p < ntasks_; ++p)
            if (p != rank_ && !peers_[p].bye && !peers_[p].closed)
                return;
        if (!resident() ||
            q_->recv_head.load(std::memory_order_acquire) != q_->recv_tail.load(std::memory_order_acquire))
            return;
        take_consumed(true);
        fin_sent_ = true;
        queue_marks(frame_fin, 0);
    }
    // 3. done once every peer's fin came and ours is out.
    for (uint32_t p = 0; p < ntasks_; ++p)
        if (p != rank_ && !peers_[p].closed && (!peers_[p].fin || peers_[p].out.size() > peers_[p].out_off))
            return;
    done_.store(true);
}

void Endpoint::check_timeouts()
{
    auto now = Clock::now();
    if (flush_->waiting() && now - wait_since_ > std::chrono::seconds(timeout_s_)) {
        int64_t p = flush_->missing();
        throw std::runtime_error(rank_text(static_cast<uint32_t>(p)) + "'s " +
                                 (flush_->phase() == Flush::Phase::halting ? "halt" : "ready") +
                                 " mark for epoch " + std::to_string(flush_->epoch()) +
                                 " did not come within " + std::to_string(timeout_s_) + " s");
    }
    if (fin_deadline_set_ && !flush_->may_inject())
        fin_deadline_ = now + std::chrono::seconds(timeout_s_); // swapped out: not the peers' fault
    if (fin_deadline_set_ && !done_.load() && now > fin_deadline_) {
        std::string who;
        for (uint32_t p = 0; p < ntasks_ && who.empty(); ++p)
            if (p != rank_ && !peers_[p].closed && !peers_[p].fin)
                who = rank_text(p);
        throw std::runtime_error("finalize: " + (who.empty() ? std::string("the send queue") : who) +
                                 " did not finish within " + std::to_string(timeout_s_) + " s");
    }
}

} // namespace storm::rdma::msg
