// The Engine's frame: construction, listening, the connections to peers
// and from clients, frame dispatch and the periodic sweep (engine.hpp is the
// contract; the operations are in tree.cpp, xfer.cpp, xfer_mc.cpp and
// caw.cpp).
#include "lib/prim/engine.hpp"

#include <algorithm>
#include <arpa/inet.h>
#include <cerrno>
#include <system_error>

#include <event2/event.h>
#include <event2/listener.h>

#include "lib/common/timeval.hpp"

namespace storm::prim {

using net::Connection;
using net::MsgType;

Engine::Engine(event_base *base, EngineConfig config, net::Authenticator &auth, Logger log)
    : base_(base), cfg_(std::move(config)), auth_(auth), log_(std::move(log)),
      mc_log_(log_.child("multicast"))
{
    if (cfg_.fanout < 1 || cfg_.chunk_size == 0 || cfg_.chunk_size > net::kMaxDataPayload - 1024 ||
        cfg_.window == 0)
        throw std::invalid_argument("engine: fanout, chunk size and window must be positive (chunk at most " +
                                    std::to_string(net::kMaxDataPayload - 1024) + " bytes)");
    if (cfg_.self != EngineConfig::kNotANode && cfg_.self >= cfg_.nodes.size())
        throw std::invalid_argument("engine: self index beyond the node table");
    // Reclaims transfers whose initiator stopped sending (it died, or gave
    // up): nothing half-received stays in memory.
    sweep_ = event_new(
        base_, -1, EV_PERSIST, [](evutil_socket_t, short, void *arg) { static_cast<Engine *>(arg)->sweep(); },
        this);
    timeval tv = to_timeval(cfg_.timeout);
    evtimer_add(sweep_, &tv);
    if (cfg_.auth_threads > 0)
        auth_offload_ = std::make_unique<net::AuthOffload>(base_, cfg_.auth_threads);
    if (cfg_.hello_timeout.count() <= 0 || cfg_.max_unauthenticated == 0 ||
        cfg_.max_unauthenticated_per_address == 0)
        throw std::invalid_argument("engine: the hello deadline and the caps on unauthenticated connections "
                                    "must be positive");
    // Closes accepted connections whose hello is late: checked four times
    // per deadline, so none stays more than 1.25 deadlines.
    hello_sweep_ = event_new(
        base_, -1, EV_PERSIST,
        [](evutil_socket_t, short, void *arg) { static_cast<Engine *>(arg)->sweep_hellos(); }, this);
    timeval hv = to_timeval(std::max(cfg_.hello_timeout / 4, std::chrono::milliseconds(1)));
    evtimer_add(hello_sweep_, &hv);
}

void Engine::forget_unauthenticated(const net::Connection &c)
{
    auto it = unauthenticated_.find(&c);
    if (it == unauthenticated_.end())
        return;
    auto a = unauthenticated_by_addr_.find(it->second.addr);
    if (a != unauthenticated_by_addr_.end() && --a->second == 0)
        unauthenticated_by_addr_.erase(a);
    unauthenticated_.erase(it);
}

void Engine::sweep_hellos()
{
    auto now = std::chrono::steady_clock::now();
    std::vector<std::shared_ptr<net::Connection>> late;
    for (const auto &c : accepted_) {
        auto it = unauthenticated_.find(c.get());
        if (it != unauthenticated_.end() && now - it->second.since >= cfg_.hello_timeout)
            late.push_back(c);
    }
    if (!late.empty()) {
        char first[INET_ADDRSTRLEN] = "?";
        in_addr a{unauthenticated_[late.front().get()].addr};
        inet_ntop(AF_INET, &a, first, sizeof first);
        closing_quietly_ = true;
        for (auto &c : late)
            c->close("no hello within the deadline");
        closing_quietly_ = false;
        hello_expired_ += late.size();
        log_.warning("closed %zu connections that sent no valid hello within %lld ms (the first from %s)",
                     late.size(), static_cast<long long>(cfg_.hello_timeout.count()), first);
    }
    if (refused_ != refused_logged_ && now - refusal_log_ >= std::chrono::seconds(10)) {
        log_.warning("refused %llu connections at accept: at most %u connections may be unauthenticated "
                     "at once, %u from one address (%zu are now)",
                     static_cast<unsigned long long>(refused_ - refused_logged_), cfg_.max_unauthenticated,
                     cfg_.max_unauthenticated_per_address, unauthenticated_.size());
        refused_logged_ = refused_;
        refusal_log_ = now;
    }
}

void Engine::sweep()
{
    auto stale = std::chrono::steady_clock::now() - 3 * cfg_.timeout;
    sweep_mc(stale);
    sweep_incoming(stale);
}

Engine::~Engine()
{
    *alive_ = false;
    mcast_.reset(); // no more completions or sends
    if (mc_timer_)
        event_free(mc_timer_);
    if (sweep_)
        event_free(sweep_);
    if (hello_sweep_)
        event_free(hello_sweep_);
    if (listener_)
        evconnlistener_free(listener_);
    hops_.clear();
    auto peers = std::move(peers_);
    auto accepted = std::move(accepted_);
    for (auto &p : peers)
        p.second->close("agent shutting down");
    for (auto &c : accepted)
        const_cast<Connection &>(*c).close("agent shutting down");
}

void Engine::listen()
{
    if (cfg_.self == EngineConfig::kNotANode)
        throw std::logic_error("engine: an initiator that is not a node does not listen");
    const sockaddr_in &a = cfg_.nodes[cfg_.self];
    listener_ = evconnlistener_new_bind(
        base_,
        [](evconnlistener *, evutil_socket_t fd, sockaddr *, int, void *arg) {
            static_cast<Engine *>(arg)->on_accept(fd);
        },
        this, LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, 1024,
        reinterpret_cast<const sockaddr *>(&a), sizeof a);
    if (!listener_)
        throw std::system_error(errno, std::generic_category(),
                                "engine: cannot listen on port " + std::to_string(ntohs(a.sin_port)));
    mc_start(a);
}

void Engine::on_accept(int fd)
{
    // Caps on connections that have not proved who they are: over either,
    // the connection is closed before anything is read from it.
    sockaddr_in from{};
    socklen_t len = sizeof from;
    in_addr_t addr =
        getpeername(fd, reinterpret_cast<sockaddr *>(&from), &len) == 0 && from.sin_family == AF_INET
            ? from.sin_addr.s_addr
            : 0;
    auto by_addr = unauthenticated_by_addr_.find(addr);
    if (unauthenticated_.size() >= cfg_.max_unauthenticated ||
        (by_addr != unauthenticated_by_addr_.end() &&
         by_addr->second >= cfg_.max_unauthenticated_per_address)) {
        evutil_closesocket(fd);
        if (++refused_ - refused_logged_ == 1 &&
            std::chrono::steady_clock::now() - refusal_log_ >= std::chrono::seconds(10)) {
            char a[INET_ADDRSTRLEN] = "?";
            inet_ntop(AF_INET, &from.sin_addr, a, sizeof a);
            log_.warning("refused a connection from %s at accept: at most %u connections may be "
                         "unauthenticated at once, %u from one address (further refusals are counted, "
                         "logged every 10 s)",
                         a, cfg_.max_unauthenticated, cfg_.max_unauthenticated_per_address);
            refused_logged_ = refused_;
            refusal_log_ = std::chrono::steady_clock::now();
        }
        return;
    }
    std::shared_ptr<Connection> c;
    try {
        c = Connection::accept(base_, fd, cfg_.self, auth_, static_cast<bool>(service_frames_),
                               auth_offload_.get());
    } catch (const std::exception &e) {
        log_.error("cannot accept a connection: %s", e.what());
        return;
    }
    accepted_.insert(c);
    unauthenticated_[c.get()] = Unauthenticated{std::chrono::steady_clock::now(), addr};
    ++unauthenticated_by_addr_[addr];
    std::weak_ptr<bool> alive = alive_;
    c->on_ready([this, alive](Connection &conn) {
        if (!alive.expired() && *alive.lock())
            forget_unauthenticated(conn);
    });
    c->on_frame([this](Connection &conn, const net::FrameHeader &h, std::string_view p) {
        on_frame(conn, h, p, true);
    });
    c->on_close([this, alive](Connection &conn, const std::string &why) {
        if (alive.expired() || !*alive.lock())
            return;
        forget_unauthenticated(conn);
        if ((!conn.ready() || !conn.closed_by_peer()) && !closing_quietly_) {
            ++rejected_;
            log_.error("%s", why.c_str());
        }
        if (service_closed_ && conn.ready())
            service_closed_(conn);
        accepted_.erase(conn.shared_from_this());
    });
}

std::shared_ptr<Connection> Engine::peer(uint32_t index)
{
    auto it = peers_.find(index);
    if (it != peers_.end() && !it->second->closed())
        return it->second;
    if (index >= cfg_.nodes.size())
        throw std::out_of_range("node index " + std::to_string(index) + " beyond the node table");
    auto down = down_.find(index);
    if (down != down_.end() && std::chrono::steady_clock::now() < down->second.until)
        throw std::runtime_error("failed recently");
    auto c = Connection::connect(base_, cfg_.nodes[index], index, auth_, auth_offload_.get());
    std::weak_ptr<bool> alive = alive_;
    c->on_frame([this](Connection &conn, const net::FrameHeader &h, std::string_view p) {
        on_frame(conn, h, p, false);
    });
    c->on_close([this, alive](Connection &conn, const std::string &why) {
        if (!alive.expired() && *alive.lock())
            on_peer_closed(conn, why);
    });
    c->on_ready([this, alive](Connection &conn) {
        if (!alive.expired() && *alive.lock()) {
            unready_sends_.erase(conn.peer()); // delivered to a live agent from now on
            down_.erase(conn.peer());
        }
    });
    peers_[index] = c;
    return c;
}

void Engine::on_peer_closed(Connection &c, const std::string &why)
{
    uint32_t index = c.peer();
    bool never_ready = !c.ready();
    auto pit = peers_.find(index);
    if (pit != peers_.end() && pit->second.get() == &c)
        peers_.erase(pit);
    Down &down = down_[index];
    // The daemon is down or restarting: it refused the connection, closed
    // it, or died with bytes unread, which resets it -- and once a write of
    // ours took the ECONNRESET, the next one sees EPIPE.
    if (c.closed_by_peer() || c.error() == ECONNREFUSED || c.error() == ECONNRESET || c.error() == EPIPE)
        down.pause = std::min(down.pause.count() ? 2 * down.pause : kFirstRetry, cfg_.timeout);
    else
        down.pause = cfg_.timeout;
    down.until = std::chrono::steady_clock::now() + down.pause;
    respread(index, never_ready);
    child_lost(index, never_ready, why);
}

void Engine::on_frame(Connection &c, const net::FrameHeader &h, std::string_view payload, bool accepted)
{
    if (net::is_service_frame(h.type)) {
        if (!accepted)
            throw net::FrameError("a service frame from an agent this one connected to");
        if (!service_frames_)
            throw net::FrameError("no service on this agent takes it");
        service_frames_(c, h, payload);
        return;
    }
    if (!c.trusted())
        throw net::FrameError("from uid " + std::to_string(c.peer_uid()) +
                              ", which is not a Slurm daemon: users may only send service frames");
    switch (h.type) {
    case MsgType::xfer:
        handle_xfer(c, h.op, payload);
        break;
    case MsgType::xfer_mc:
        handle_xfer_mc(c, h.op, payload);
        break;
    case MsgType::xfer_nack:
        handle_xfer_nack(c, h.op, payload);
        break;
    case MsgType::caw:
        handle_caw(c, h.op, payload);
        break;
    case MsgType::xfer_ack:
    case MsgType::caw_ack:
        handle_answer(c, h.op, payload);
        break;
    case MsgType::heartbeat:
        break;
    default:
        throw net::FrameError("unexpected frame type");
    }
}

bool Engine::run_until(const std::function<bool()> &done, std::chrono::milliseconds timeout)
{
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!done()) {
        if (std::chrono::steady_clock::now() >= deadline)
            return false;
        // Wake at least every 10 ms to check the deadline.
        timeval tv{0, 10000};
        event_base_loopexit(base_, &tv);
        event_base_loop(base_, EVLOOP_ONCE);
    }
    return true;
}

} // namespace storm::prim
