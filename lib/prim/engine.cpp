#include "lib/prim/engine.hpp"

#include <algorithm>
#include <arpa/inet.h>
#include <cerrno>
#include <cstring>
#include <random>
#include <system_error>

#include <event2/event.h>
#include <event2/listener.h>

#include "lib/common/timeval.hpp"
#include "lib/prim/checksum.hpp"

namespace storm::prim {

using net::Connection;
using net::MsgType;
using net::Reader;
using net::Writer;

namespace {

constexpr size_t kMaxName = 255;

uint64_t random_id()
{
    static thread_local std::mt19937_64 rng{std::random_device{}()};
    return rng();
}

// Levels of the tree over n members with the given fanout.
unsigned levels(uint32_t n, unsigned fanout)
{
    unsigned l = 1;
    for (uint64_t cap = 1; cap < n; cap = cap * fanout + 1)
        ++l;
    return l;
}

bool holds(int64_t have, Relation rel, int64_t value)
{
    switch (rel) {
    case Relation::ge:
        return have >= value;
    case Relation::lt:
        return have < value;
    case Relation::eq:
        return have == value;
    case Relation::ne:
        return have != value;
    }
    return false;
}

} // namespace

namespace {

// Adds `from` to `to`, up to kMaxReasons in all.
void add_reasons(Reasons &to, const Reasons &from)
{
    for (const auto &r : from) {
        if (to.size() >= kMaxReasons)
            break;
        to.insert(r);
    }
}

// The outcome of a transfer of `event` that `failed` nodes do not hold.
XferResult xfer_result(const RangeSet &failed, const Reasons &reasons, const std::string &event)
{
    XferResult r;
    r.ok = failed.empty();
    r.failed = failed;
    r.reasons = reasons;
    if (!r.ok)
        r.error = "nodes " + failed.str() + " do not hold " + event;
    return r;
}

} // namespace

void Engine::Answer::add_failure(const RangeSet &nodes, const std::string &why)
{
    failed = failed.unite(nodes);
    holds = false;
    if (reasons.size() < kMaxReasons)
        reasons.emplace(nodes.nth(0), why.substr(0, kMaxReason));
}

void Engine::Answer::merge(const Answer &a)
{
    if (!a.failed.empty())
        failed = failed.unite(a.failed);
    holds = holds && a.holds;
    if (!a.reasons.empty())
        add_reasons(reasons, a.reasons);
}

uint64_t Engine::new_origin() { return random_id(); }

struct Engine::Hop {
    MsgType type;
    unsigned fanout;
    std::function<std::string(const RangeSet &)> body;
    net::DataRef data; // appended to every frame of the hop, by reference (xfer_mc: kept for repairs)
    // xfer_mc: the announcement with the data, for a child that asks
    std::function<std::string(const RangeSet &)> repair;
    // What each frame of the hop carries after its body.
    net::DataRef in_frames() const { return type == MsgType::xfer_mc ? net::DataRef{} : data; }
    Answer answer;
    Finish finish;
    unsigned waiting = 0;
    event *timer = nullptr;
    struct TimerArg {
        Engine *engine;
        uint64_t op;
    } timer_arg{};
    ~Hop()
    {
        if (timer)
            event_free(timer);
    }
};

struct Engine::Transfer {
    RangeSet set;
    std::chrono::milliseconds timeout{};
    std::string event;
    std::shared_ptr<const std::string> data;
    uint64_t origin;
    size_t next = 0; // offset of the next chunk to send
    unsigned inflight = 0;
    bool started = false;
    RangeSet failed;
    Reasons reasons;
    XferDone done;
};

struct Engine::Incoming {
    std::string buf; // reserved for `total`; grows as chunks come, in order (no zero fill)
    uint64_t total = 0;
    uint64_t received = 0;
    std::chrono::steady_clock::time_point last; // when the last chunk came
};

struct Engine::CawCall {
    RangeSet set;
    std::string var, wvar;
    Relation rel;
    int64_t value, wval;
    bool write;
    std::function<void(const Engine::Answer &)> reply; // to the caller, with the outcome
    Route route;
};

Engine::Engine(event_base *base, EngineConfig config, net::Authenticator &auth, Logger log)
    : base_(base), cfg_(std::move(config)), auth_(auth), log_(std::move(log))
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
}

void Engine::sweep()
{
    auto stale = std::chrono::steady_clock::now() - 3 * cfg_.timeout;
    if (mcast_)
        mcast_->expire(3 * cfg_.timeout);
    // Announcements whose data neither came nor was sent on request (the
    // parent gave up on this node): the transfer failed upstream.
    std::vector<uint64_t> stuck;
    for (auto &[origin, q] : mc_waits_)
        if (!q.empty() && q.front().arrived < stale) {
            const McChunk &c = q.front().chunk;
            log_.error(
                "transfer %016llx of event %s: chunk at %llu never came (by multicast nor from the parent): "
                "dropped%s",
                static_cast<unsigned long long>(origin), c.event.c_str(),
                static_cast<unsigned long long>(c.offset),
                q.size() > 1 ? (", with the " + std::to_string(q.size() - 1) + " announced after it").c_str()
                             : "");
            stuck.push_back(origin);
        }
    for (uint64_t origin : stuck) {
        for (auto &w : mc_waits_[origin])
            if (mcast_)
                mcast_->forget(w.chunk.origin, w.chunk.offset);
        mc_waits_.erase(origin);
    }
    for (auto it = incoming_.begin(); it != incoming_.end();) {
        if (it->second->last < stale) {
            log_.error("transfer %016llx of event %s stopped at %llu of %zu bytes: dropped",
                       static_cast<unsigned long long>(it->first.second), it->first.first.c_str(),
                       static_cast<unsigned long long>(it->second->received),
                       static_cast<size_t>(it->second->total));
            it = incoming_.erase(it);
        } else {
            ++it;
        }
    }
}

Engine::~Engine()
{
    *alive_ = false;
    mcast_.reset(); // no more completions or sends
    if (mc_timer_)
        event_free(mc_timer_);
    if (sweep_)
        event_free(sweep_);
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
    if (cfg_.mcast.enabled()) {
        net::McastConfig mc = cfg_.mcast;
        if (mc.iface.s_addr == INADDR_ANY)
            mc.iface = a.sin_addr;
        try {
            mcast_ = std::make_unique<net::Mcast>(base_, mc, cfg_.self, log_);
            mcast_->on_complete([this](uint64_t origin, uint64_t) {
                if (mc_waits_.count(origin))
                    mc_pump(origin);
            });
            mc_timer_ = event_new(
                base_, -1, 0,
                [](evutil_socket_t, short, void *arg) { static_cast<Engine *>(arg)->mc_check(); }, this);
            if (!mc_timer_)
                throw std::runtime_error("cannot make its repair timer");
            char group[INET_ADDRSTRLEN] = "?";
            inet_ntop(AF_INET, &mc.group, group, sizeof group);
            log_.info("multicast data path on group %s:%u, AES-GCM by %s", group, mc.port,
                      net::cipher_description().c_str());
        } catch (const std::exception &e) {
            mcast_.reset();
            log_.error("multicast is off on this node, transfers use the tree alone: %s", e.what());
        }
    }
}

void Engine::on_accept(int fd)
{
    std::shared_ptr<Connection> c;
    try {
        c = Connection::accept(base_, fd, cfg_.self, auth_, static_cast<bool>(user_frames_));
    } catch (const std::exception &e) {
        log_.error("cannot accept a connection: %s", e.what());
        return;
    }
    accepted_.insert(c);
    std::weak_ptr<bool> alive = alive_;
    c->on_frame(
        [this](Connection &conn, const net::FrameHeader &h, std::string_view p) { on_frame(conn, h, p); });
    c->on_close([this, alive](Connection &conn, const std::string &why) {
        if (alive.expired() || !*alive.lock())
            return;
        if (!conn.ready() || !conn.closed_by_peer()) {
            ++rejected_;
            log_.error("%s", why.c_str());
        }
        if (user_closed_ && conn.ready())
            user_closed_(conn);
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
    auto c = Connection::connect(base_, cfg_.nodes[index], index, auth_);
    std::weak_ptr<bool> alive = alive_;
    c->on_frame(
        [this](Connection &conn, const net::FrameHeader &h, std::string_view p) { on_frame(conn, h, p); });
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

// ---- generic tree forwarding ---------------------------------------------

Route Route::decode(net::Reader &r)
{
    Route route{r.u8(), r.u32()};
    if (route.fanout < 1 || route.fanout > 64 || route.timeout_ms > 3600000)
        throw net::FrameError("fanout " + std::to_string(route.fanout) + " or hop timeout " +
                              std::to_string(route.timeout_ms) + " ms out of range");
    return route;
}

Route Engine::route(unsigned fanout, std::chrono::milliseconds timeout) const
{
    auto ms = (timeout.count() > 0 ? timeout : cfg_.timeout).count();
    return Route{static_cast<uint8_t>(fanout), static_cast<uint32_t>(std::min<long long>(ms, 3600000))};
}

void Engine::forward(const RangeSet &set, Route route, MsgType type,
                     std::function<std::string(const RangeSet &)> body, Answer local, Finish finish,
                     net::DataRef data, std::function<std::string(const RangeSet &)> repair)
{
    auto hop = std::make_shared<Hop>();
    hop->repair = std::move(repair);
    hop->type = type;
    hop->fanout = route.fanout;
    hop->body = std::move(body);
    hop->data = std::move(data);
    hop->answer = std::move(local);
    hop->finish = std::move(finish);
    uint64_t op = next_op();
    hops_[op] = hop;
    each_child(
        set, route.fanout, false,
        [&](const RangeSet &slice, const std::shared_ptr<Connection> &c) {
            uint64_t child_op = next_op();
            child_ops_[child_op] = {op, slice};
            hop->waiting++;
            c->send(type, child_op, hop->body(slice), hop->in_frames());
        },
        [&](uint32_t root, const std::string &why) {
            hop->answer.add_failure(RangeSet::single(root), "agent unreachable: " + why);
        });
    if (hop->waiting == 0) {
        hops_.erase(op);
        hop->finish(hop->answer);
        return;
    }
    hop->timer_arg = {this, op};
    hop->timer = evtimer_new(
        base_,
        [](evutil_socket_t, short, void *arg) {
            auto *ta = static_cast<Hop::TimerArg *>(arg);
            ta->engine->hop_timeout(ta->op);
        },
        &hop->timer_arg);
    // A timeout per level below: a node heading `set` waits one more than
    // its children, so that their own timeouts (which blame only the late
    // slice) answer first.  A pure initiator, or a node sending the whole
    // set to its head, sits one level above that head and waits one more
    // again: otherwise both expire together, and a head a little late in
    // passing on one slow child's failure got all its nodes blamed.
    bool heads = !set.empty() && set.nth(0) == cfg_.self;
    timeval tv = to_timeval(std::chrono::milliseconds(static_cast<long long>(route.timeout_ms) *
                                                      (levels(set.size(), route.fanout) + (heads ? 0 : 1))));
    evtimer_add(hop->timer, &tv);
}

void Engine::hop_answer(uint64_t child_op, const Answer &a)
{
    auto it = child_ops_.find(child_op);
    if (it == child_ops_.end())
        return; // late answer after a timeout
    uint64_t op = it->second.first;
    child_ops_.erase(it);
    auto hit = hops_.find(op);
    if (hit == hops_.end())
        return;
    auto hop = hit->second;
    hop->answer.merge(a);
    if (--hop->waiting == 0) {
        hops_.erase(hit);
        hop->finish(hop->answer);
    }
}

void Engine::hop_child_failed(uint64_t op, uint64_t child_op, const std::string &why)
{
    auto it = child_ops_.find(child_op);
    if (it == child_ops_.end())
        return;
    RangeSet slice = it->second.second;
    child_ops_.erase(it);
    auto hit = hops_.find(op);
    if (hit == hops_.end())
        return;
    auto hop = hit->second;
    hop->answer.add_failure(slice, slice.size() > 1
                                       ? why + " (and the " + std::to_string(slice.size() - 1) + " node" +
                                             (slice.size() > 2 ? "s" : "") + " it serves)"
                                       : why);
    if (--hop->waiting == 0) {
        hops_.erase(hit);
        hop->finish(hop->answer);
    }
}

void Engine::hop_timeout(uint64_t op)
{
    std::vector<uint64_t> late;
    for (const auto &kv : child_ops_)
        if (kv.second.first == op)
            late.push_back(kv.first);
    for (uint64_t c : late) {
        log_.error("agent %u: no answer within the timeout, its %u nodes count as failed",
                   child_ops_[c].second.nth(0), child_ops_[c].second.size());
        hop_child_failed(op, c, "no answer within the timeout");
    }
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
    // Unanswered transfers queued for an agent that never answered the
    // connection: route them around it, to its children.
    auto un = unready_sends_.find(index);
    if (un != unready_sends_.end()) {
        auto sends = std::move(un->second);
        unready_sends_.erase(un);
        if (never_ready)
            for (auto &u : sends)
                for (auto &sub : net::split_children(u.slice, u.route.fanout))
                    spread(sub, u.route, u.event, u.origin, u.data, true);
    }
    std::vector<std::pair<uint64_t, uint64_t>> affected; // (hop op, child op)
    for (const auto &kv : child_ops_)
        if (kv.second.second.nth(0) == index)
            affected.emplace_back(kv.second.first, kv.first);
    if (!affected.empty())
        log_.error("%s", why.c_str());
    for (auto [op, child_op] : affected) {
        auto hit = hops_.find(op);
        auto cit = child_ops_.find(child_op);
        if (hit == hops_.end() || cit == child_ops_.end())
            continue;
        if (!never_ready) {
            hop_child_failed(op, child_op, why);
            continue;
        }
        // Could not reach it at all: route around it to its children.
        auto hop = hit->second;
        RangeSet slice = cit->second.second;
        child_ops_.erase(cit);
        hop->waiting--;
        hop->answer.add_failure(RangeSet::single(index), "agent unreachable: " + why);
        for (auto &sub : net::split_children(slice, hop->fanout)) {
            uint32_t root = sub.nth(0);
            try {
                auto pc = peer(root);
                uint64_t nop = next_op();
                child_ops_[nop] = {op, sub};
                hop->waiting++;
                pc->send(hop->type, nop, hop->body(sub), hop->in_frames());
            } catch (const std::exception &e) {
                hop->answer.failed = hop->answer.failed.unite(sub);
            }
        }
        if (hop->waiting == 0) {
            hops_.erase(op);
            hop->finish(hop->answer);
        }
    }
}

void Engine::reply(const std::weak_ptr<Connection> &to, MsgType type, uint64_t op, const Answer &a)
{
    if (auto c = to.lock())
        reply(*c, type, op, a);
}

void Engine::reply(Connection &c, MsgType type, uint64_t op, const Answer &a)
{
    if (c.closed())
        return;
    Writer w;
    a.failed.encode(w);
    w.u8(a.holds ? 1 : 0);
    w.u16(static_cast<uint16_t>(a.reasons.size()));
    for (const auto &r : a.reasons) {
        w.u32(r.first);
        w.bytes(r.second);
    }
    c.send(type, op, w.data());
}

void Engine::on_frame(Connection &c, const net::FrameHeader &h, std::string_view payload)
{
    switch (h.type) {
    case MsgType::bcast_open:
    case MsgType::bcast_data:
    case MsgType::bcast_close:
        if (!user_frames_)
            throw net::FrameError("this agent takes no broadcast requests");
        user_frames_(c, h, payload);
        return;
    default:
        break;
    }
    if (!c.trusted())
        throw net::FrameError("from uid " + std::to_string(c.peer_uid()) +
                              ", which is not a Slurm daemon: users may only ask for broadcasts");
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
    case MsgType::caw_ack: {
        auto it = child_ops_.find(h.op);
        if (it != child_ops_.end() && it->second.second.nth(0) != c.peer())
            throw net::FrameError("answer for an operation sent to another agent");
        Reader r(payload);
        Answer a;
        a.failed = RangeSet::decode(r);
        a.holds = r.u8() != 0;
        unsigned n = r.u16();
        if (n > kMaxReasons)
            throw net::FrameError("answer with " + std::to_string(n) + " reasons");
        for (unsigned i = 0; i < n; ++i) {
            uint32_t node = r.u32();
            a.reasons[node] = std::string(r.bytes(kMaxReason));
        }
        r.finish();
        hop_answer(h.op, a);
        break;
    }
    case MsgType::heartbeat:
        break;
    default:
        throw net::FrameError("unexpected frame type");
    }
}

// ---- XFER-AND-SIGNAL -------------------------------------------------------

namespace {

// Everything of an xfer payload but the data, which follows the last field
// (its length) by reference.
std::string xfer_head(const RangeSet &set, const Route &route, uint64_t origin, const std::string &event,
                      uint64_t offset, uint64_t total, size_t len)
{
    Writer w;
    w.reserve(4 + 8 * set.ranges().size() + 5 + 8 + 4 + event.size() + 8 + 8 + 4);
    set.encode(w);
    route.encode(w);
    w.u64(origin);
    w.bytes(event);
    w.u64(offset);
    w.u64(total);
    w.u32(static_cast<uint32_t>(len));
    return w.take();
}

} // namespace

void Engine::xfer_and_signal(const RangeSet &set, const std::string &remote_event, std::string data,
                             XferDone done, std::chrono::milliseconds timeout)
{
    if (remote_event.empty() || remote_event.size() > kMaxName)
        throw std::invalid_argument("event name must have 1 to 255 bytes");
    if (data.size() > cfg_.max_event_bytes)
        throw std::invalid_argument("transfer of " + std::to_string(data.size()) +
                                    " bytes exceeds the limit of " + std::to_string(cfg_.max_event_bytes));
    auto t = std::make_shared<Transfer>();
    t->set = set;
    t->event = remote_event;
    t->data = std::make_shared<const std::string>(std::move(data));
    t->origin = random_id();
    t->done = std::move(done);
    t->timeout = timeout;
    if (set.empty()) {
        t->done(XferResult{true, {}, "", {}});
        return;
    }
    start_chunks(t);
}

void Engine::start_chunks(const std::shared_ptr<Transfer> &t)
{
    std::weak_ptr<bool> alive = alive_;
    while (t->inflight < cfg_.window && (t->next < t->data->size() || !t->started)) {
        t->started = true;
        size_t off = t->next;
        size_t len = std::min(cfg_.chunk_size, t->data->size() - off);
        t->next += len;
        t->inflight++;
        net::DataRef chunk{t->data, t->data->data() + off, len};
        unsigned fanout = t->data->size() > cfg_.chunk_size ? cfg_.data_fanout : cfg_.fanout;
        send_chunk(t->set, fanout, t->timeout, t->event, t->origin, off, t->data->size(), chunk,
                   [this, t, alive](const XferResult &a) {
                       if (alive.expired() || !*alive.lock())
                           return;
                       t->failed = t->failed.unite(a.failed);
                       add_reasons(t->reasons, a.reasons);
                       t->inflight--;
                       if (t->next < t->data->size()) {
                           start_chunks(t);
                       } else if (t->inflight == 0) {
                           auto done = std::move(t->done);
                           done(xfer_result(t->failed, t->reasons, t->event));
                       }
                   });
    }
}

void Engine::apply_chunk(const std::string &event, uint64_t origin, uint64_t offset, uint64_t total,
                         std::string_view data, Answer &local, bool sealed)
{
    for (const auto &sink : sinks_) {
        if (event.compare(0, sink.first.size(), sink.first) != 0)
            continue;
        std::string why;
        try {
            why = sink.second(event, origin, offset, total, data, sealed);
        } catch (const std::exception &e) {
            why = e.what();
        }
        if (!why.empty())
            local.add_failure(RangeSet::single(cfg_.self), why);
        return;
    }
    if (offset == 0 && data.size() == total && total > 0 && total <= cfg_.max_event_bytes) {
        // The whole transfer in one chunk: nothing to assemble.
        auto &ev = events_[event];
        ev.first++;
        ev.second.assign(data.data(), data.size());
        if (signal_hook_)
            signal_hook_(event, ev.first, ev.second);
        return;
    }
    auto key = std::make_pair(event, origin);
    auto it = incoming_.find(key);
    if (it == incoming_.end()) {
        if (total > cfg_.max_event_bytes) {
            log_.error("transfer of %llu bytes for event %s exceeds the limit of %zu bytes: refused",
                       static_cast<unsigned long long>(total), event.c_str(), cfg_.max_event_bytes);
            local.failed = local.failed.unite(RangeSet::single(cfg_.self));
            return;
        }
        auto in = std::make_shared<Incoming>();
        in->buf.reserve(total);
        in->total = total;
        it = incoming_.emplace(key, in).first;
    }
    auto &in = *it->second;
    in.last = std::chrono::steady_clock::now();
    if (offset > in.total || data.size() > in.total - offset || in.total != total)
        throw net::DecodeError("chunk [" + std::to_string(offset) + ", +" + std::to_string(data.size()) +
                               ") outside the transfer of " + std::to_string(in.total) + " bytes");
    if (offset == in.buf.size()) {
        in.buf.append(data.data(), data.size());
    } else { // out of order: fill the gap, which a later chunk overwrites
        if (offset + data.size() > in.buf.size())
            in.buf.resize(offset + data.size());
        std::memcpy(in.buf.data() + offset, data.data(), data.size());
    }
    in.received += data.size();
    if (in.received >= total) {
        auto &ev = events_[event];
        ev.first++;
        in.buf.resize(total);
        ev.second = std::move(in.buf);
        incoming_.erase(it);
        if (signal_hook_)
            signal_hook_(event, ev.first, ev.second);
    }
}

void Engine::handle_xfer(Connection &c, uint64_t op, std::string_view payload)
{
    Reader r(payload);
    RangeSet set = RangeSet::decode(r);
    Route route = Route::decode(r);
    uint64_t origin = r.u64();
    std::string event(r.bytes(kMaxName));
    uint64_t offset = r.u64(), total = r.u64();
    std::string_view data = r.bytes(net::kMaxDataPayload);
    r.finish();
    if (set.empty() || set.nth(0) != cfg_.self)
        throw net::FrameError("xfer for set " + set.str() + " sent to agent " + std::to_string(cfg_.self));
    if (event.empty())
        throw net::FrameError("xfer without an event name");
    Answer local;
    if (route.unanswered() && (offset != 0 || total != data.size()))
        throw net::FrameError("an unanswered transfer in pieces");
    apply_chunk(event, origin, offset, total, data, local);
    if (set.size() == 1) { // a leaf: nothing to forward or wait for
        if (!route.unanswered())
            reply(c, MsgType::xfer_ack, op, local);
        return;
    }
    // Forward the received bytes themselves: no copy per child.
    net::DataRef chunk{c.current_payload(), data.data(), data.size()};
    if (route.unanswered()) {
        spread(set, route, event, origin, chunk);
        return;
    }
    std::weak_ptr<Connection> up = c.shared_from_this();
    forward_chunk(set, route, origin, event, offset, total, chunk, local,
                  [this, up, op](const Answer &a) { reply(up, MsgType::xfer_ack, op, a); });
}

void Engine::xfer_unacked(const RangeSet &set, const std::string &event, std::string data)
{
    if (event.empty() || event.size() > kMaxName)
        throw std::invalid_argument("event name must have 1 to 255 bytes");
    if (data.size() > cfg_.chunk_size)
        throw std::invalid_argument("an unacknowledged transfer takes one chunk");
    if (set.empty())
        return;
    auto buf = std::make_shared<const std::string>(std::move(data));
    net::DataRef ref{buf, buf->data(), buf->size()};
    uint64_t origin = random_id();
    if (set.nth(0) == cfg_.self) {
        Answer local;
        apply_chunk(event, origin, 0, buf->size(), *buf, local);
    }
    spread(set, Route{static_cast<uint8_t>(std::clamp(cfg_.fanout, 1u, 64u)), 0}, event, origin, ref);
}

void Engine::spread(const RangeSet &set, Route route, const std::string &event, uint64_t origin,
                    const net::DataRef &data, bool whole)
{
    each_child(
        set, route.fanout, whole,
        [&](const RangeSet &slice, const std::shared_ptr<Connection> &c) {
            c->send(MsgType::xfer, next_op(), xfer_head(slice, route, origin, event, 0, data.len, data.len),
                    data);
            if (!c->ready())
                unready_sends_[slice.nth(0)].push_back({slice, route, event, origin, data});
        },
        [](uint32_t, const std::string &) {});
}

void Engine::each_child(
    const RangeSet &set, unsigned fanout, bool whole,
    const std::function<void(const RangeSet &, const std::shared_ptr<Connection> &)> &send,
    const std::function<void(uint32_t, const std::string &)> &unreachable)
{
    // A pure initiator, or a node initiating for a set it does not head,
    // sends the whole set to its first member; a node heading the set
    // sends the slices below itself.
    std::vector<RangeSet> todo; // a stack: the next slice last
    if (!whole && !set.empty() && set.nth(0) == cfg_.self) {
        todo = net::split_children(set, fanout);
        std::reverse(todo.begin(), todo.end());
    } else if (!set.empty()) {
        todo.push_back(set);
    }
    while (!todo.empty()) {
        RangeSet slice = std::move(todo.back());
        todo.pop_back();
        uint32_t root = slice.nth(0);
        try {
            send(slice, peer(root));
        } catch (const std::exception &e) {
            // Unreachable at once: route around it.
            if (down_.count(root) == 0)
                log_.error("agent %u unreachable (%s): routing around it", root, e.what());
            unreachable(root, e.what());
            for (auto &sub : net::split_children(slice, fanout))
                todo.push_back(std::move(sub));
        }
    }
}

void Engine::send_chunk(const RangeSet &set, unsigned fanout, std::chrono::milliseconds timeout,
                        const std::string &event, uint64_t origin, uint64_t offset, uint64_t total,
                        net::DataRef data, XferDone done)
{
    if (event.empty() || event.size() > kMaxName)
        throw std::invalid_argument("event name must have 1 to 255 bytes");
    if (set.empty()) {
        done(XferResult{true, {}, "", {}});
        return;
    }
    Route route = this->route(std::clamp(fanout, 1u, 64u), timeout);
    Answer local;
    std::weak_ptr<bool> alive = alive_;
    Finish finish = [done = std::move(done), event, alive](const Answer &a) {
        if (alive.expired() || !*alive.lock())
            return;
        done(xfer_result(a.failed, a.reasons, event));
    };
    if (set.nth(0) == cfg_.self) {
        apply_chunk(event, origin, offset, total, std::string_view(data.ptr, data.len), local);
        forward_chunk(set, route, origin, event, offset, total, std::move(data), local, std::move(finish));
        return;
    }
    size_t len = data.len;
    forward(
        set, route, MsgType::xfer,
        [=](const RangeSet &slice) { return xfer_head(slice, route, origin, event, offset, total, len); },
        local, std::move(finish), std::move(data));
}

// ---- XFER-AND-SIGNAL by multicast ------------------------------------------

namespace {

// An xfer_mc payload: an xfer's fields (xfer_head), the chunk's seal, and
// the data itself only in a repair (its length, then the bytes by reference).
std::string xfer_mc_head(const RangeSet &set, const Route &route, uint64_t origin, const std::string &event,
                         uint64_t offset, uint64_t total, size_t len, const net::ChunkSeal &seal,
                         bool with_data)
{
    Writer w;
    w.raw(seal.key, sizeof seal.key);
    w.raw(seal.tag, sizeof seal.tag);
    w.u32(static_cast<uint32_t>(with_data ? len : 0));
    return xfer_head(set, route, origin, event, offset, total, len) + w.data();
}

} // namespace

void Engine::mc_count(uint64_t McastCounters::*field)
{
    uint64_t v = ++(mc_.*field);
    const char *name = field == &McastCounters::sent       ? "mcast:sent"
                       : field == &McastCounters::received ? "mcast:received"
                       : field == &McastCounters::repaired ? "mcast:repaired"
                                                           : "mcast:repairs_served";
    vars_[name] = static_cast<int64_t>(v);
}

void Engine::forward_chunk(const RangeSet &set, Route route, uint64_t origin, const std::string &event,
                           uint64_t offset, uint64_t total, net::DataRef chunk, Answer local, Finish finish)
{
    size_t len = chunk.len;
    auto by_tree = [&] {
        forward(
            set, route, MsgType::xfer,
            [=](const RangeSet &slice) { return xfer_head(slice, route, origin, event, offset, total, len); },
            std::move(local), std::move(finish), std::move(chunk));
    };
    // Multicast pays for large transfers to several nodes.  Every agent of
    // the cluster receives the group's datagrams, so a set of fewer than
    // half of them keeps to the tree.  Every chunk of one transfer takes
    // the same path, so announcements keep their order (a transfer
    // streamed chunk by chunk, of unknown total 0, always).
    bool big = total >= cfg_.mcast.min_chunk || total == 0;
    bool wide = set.size() >= 3 && 2 * static_cast<size_t>(set.size()) >= cfg_.nodes.size();
    if (!mcast_ || route.unanswered() || !big || !wide || len == 0)
        return by_tree();
    // Only announcements and answers travel the tree now: a wide one (few
    // hops), whatever narrow tree the caller chose for the data.
    route.fanout = static_cast<uint8_t>(std::clamp(std::max<unsigned>(route.fanout, cfg_.fanout), 1u, 64u));
    McChunk c{set, route, origin, offset, total, static_cast<uint32_t>(len), event, {}};
    auto sealed = std::make_shared<std::string>(len, '\0');
    try {
        c.seal = net::seal_chunk(chunk.ptr, len, sealed->data());
    } catch (const std::exception &e) {
        log_.error("multicast: cannot seal a chunk (%s): sending it over the tree", e.what());
        return by_tree();
    }
    // The announcement leaves once the bytes are in the kernel, behind them.
    mcast_->send(
        origin, offset, net::DataRef{sealed, sealed->data(), len},
        [this, c, chunk = std::move(chunk), local = std::move(local), finish = std::move(finish)]() mutable {
            mc_count(&McastCounters::sent);
            forward_mc(c, std::move(local), std::move(finish), std::move(chunk));
        });
}

void Engine::forward_mc(const McChunk &c, Answer local, Finish finish, net::DataRef data)
{
    auto frame = [c](bool with_data) {
        return [c, with_data](const RangeSet &slice) {
            return xfer_mc_head(slice, c.route, c.origin, c.event, c.offset, c.total, c.len, c.seal,
                                with_data);
        };
    };
    forward(c.set, c.route, MsgType::xfer_mc, frame(false), std::move(local), std::move(finish),
            std::move(data), frame(true));
}

void Engine::handle_xfer_mc(Connection &c, uint64_t op, std::string_view payload)
{
    Reader r(payload);
    McWait w;
    McChunk &k = w.chunk;
    k.set = RangeSet::decode(r);
    k.route = Route::decode(r);
    k.origin = r.u64();
    k.event = std::string(r.bytes(kMaxName));
    k.offset = r.u64();
    k.total = r.u64();
    k.len = r.u32();
    std::string_view key = r.raw(net::kMcastKey), tag = r.raw(net::kMcastTag);
    std::string_view data = r.bytes(net::kMaxDataPayload);
    r.finish();
    if (k.set.empty() || k.set.nth(0) != cfg_.self)
        throw net::FrameError("xfer_mc for set " + k.set.str() + " sent to agent " +
                              std::to_string(cfg_.self));
    if (k.event.empty())
        throw net::FrameError("xfer_mc without an event name");
    if (k.route.unanswered())
        throw net::FrameError("an unanswered multicast transfer");
    // total 0: a streamed transfer, whose offsets are sequence numbers
    if (k.len == 0 || k.len > net::kMaxDataPayload ||
        (k.total != 0 && (k.offset > k.total || k.len > k.total - k.offset)))
        throw net::FrameError("xfer_mc chunk [" + std::to_string(k.offset) + ", +" + std::to_string(k.len) +
                              ") outside a transfer of " + std::to_string(k.total) + " bytes");
    if (!data.empty() && data.size() != k.len)
        throw net::FrameError("xfer_mc repair of " + std::to_string(data.size()) + " bytes for a chunk of " +
                              std::to_string(k.len));
    std::memcpy(k.seal.key, key.data(), key.size());
    std::memcpy(k.seal.tag, tag.data(), tag.size());
    uint64_t origin = k.origin;
    if (!data.empty()) {
        // A repair, which parents send only when asked: of an announcement
        // still waiting, or else of one whose bytes came meanwhile.
        auto it = mc_waits_.find(origin);
        if (it == mc_waits_.end())
            return;
        for (auto &e : it->second)
            if (e.op == op && e.up.lock().get() == &c) {
                e.data = net::DataRef{c.current_payload(), data.data(), data.size()};
                mc_pump(origin);
                return;
            }
        return;
    }
    w.up = c.shared_from_this();
    w.op = op;
    w.arrived = std::chrono::steady_clock::now();
    mc_waits_[origin].push_back(std::move(w));
    mc_pump(origin);
}

void Engine::mc_arm()
{
    if (!evtimer_pending(mc_timer_, nullptr)) {
        timeval tv = to_timeval(cfg_.mcast.wait);
        evtimer_add(mc_timer_, &tv);
    }
}

void Engine::mc_pump(uint64_t origin)
{
    if (mc_pumping_) {
        mc_repump_.insert(origin); // a completion while draining: after this pump
        return;
    }
    auto it = mc_waits_.find(origin);
    if (it == mc_waits_.end())
        return;
    mc_pumping_ = true;
    auto &q = it->second;
    bool drained = false;
    while (!q.empty()) {
        McWait &w = q.front();
        const McChunk &k = w.chunk;
        auto up = w.up.lock();
        if (!up || up->closed()) {
            // The parent is gone, and with it whoever waits for our
            // answer: its own parent counts this subtree as failed.
            if (mcast_)
                mcast_->forget(k.origin, k.offset);
            q.pop_front();
            continue;
        }
        net::DataRef d = w.data;
        bool sealed = false; // the bytes passed their sender's seal here (see ChunkSink)
        if (!d.len && mcast_) {
            if (auto buf = mcast_->take(k.origin, k.offset, k.len, k.seal)) {
                d = net::DataRef{buf, buf.get(), k.len};
                sealed = true;
                mc_count(&McastCounters::received);
            } else if (!drained) {
                drained = true; // the bytes may be queued on the socket, unread
                mcast_->drain();
                continue;
            }
        } else if (d.len) {
            mc_count(&McastCounters::repaired);
        }
        if (!d.len) {
            if (mcast_) {
                mc_arm();
            } else if (!w.nacked) { // no multicast here: ask at once
                w.nacked = true;
                up->send(MsgType::xfer_nack, w.op, "");
            }
            break;
        }
        McWait x = std::move(w);
        q.pop_front();
        Answer local;
        try {
            apply_chunk(x.chunk.event, x.chunk.origin, x.chunk.offset, x.chunk.total,
                        std::string_view(d.ptr, d.len), local, sealed);
        } catch (const std::exception &e) {
            local.add_failure(RangeSet::single(cfg_.self), e.what());
        }
        std::weak_ptr<Connection> wup = x.up;
        uint64_t op = x.op;
        forward_mc(
            x.chunk, local, [this, wup, op](const Answer &a) { reply(wup, MsgType::xfer_ack, op, a); }, d);
    }
    if (q.empty())
        mc_waits_.erase(it);
    mc_pumping_ = false;
    while (!mc_repump_.empty()) {
        uint64_t next = *mc_repump_.begin();
        mc_repump_.erase(mc_repump_.begin());
        if (next != origin)
            mc_pump(next);
    }
    mc_reads();
}

void Engine::mc_reads()
{
    if (!mcast_)
        return;
    if (mc_waits_.empty())
        mcast_->hold_reads();
    else
        mcast_->resume_reads();
}

void Engine::mc_check()
{
    auto now = std::chrono::steady_clock::now();
    bool waiting = false;
    for (auto &[origin, q] : mc_waits_)
        for (auto &w : q) {
            if (w.data.len || w.nacked)
                continue;
            if (now - w.arrived < cfg_.mcast.wait) {
                waiting = true;
                continue;
            }
            if (mcast_ && mcast_->complete(w.chunk.origin, w.chunk.offset))
                continue; // here, waiting behind an earlier chunk
            auto up = w.up.lock();
            if (up && !up->closed()) {
                w.nacked = true;
                up->send(MsgType::xfer_nack, w.op, "");
            }
        }
    if (waiting)
        mc_arm();
}

void Engine::handle_xfer_nack(Connection &c, uint64_t op, std::string_view payload)
{
    if (!payload.empty())
        throw net::FrameError("xfer_nack with a payload");
    auto it = child_ops_.find(op);
    if (it == child_ops_.end())
        return; // answered or timed out meanwhile
    if (it->second.second.nth(0) != c.peer())
        throw net::FrameError("repair request for an operation sent to another agent");
    auto hit = hops_.find(it->second.first);
    if (hit == hops_.end())
        return;
    auto &hop = hit->second;
    if (hop->type != MsgType::xfer_mc || !hop->repair)
        throw net::FrameError("repair request for an operation without multicast data");
    mc_count(&McastCounters::repairs_served);
    c.send(MsgType::xfer_mc, op, hop->repair(it->second.second), hop->data);
}

void Engine::erase_variables(const std::string &prefix)
{
    for (auto it = vars_.lower_bound(prefix);
         it != vars_.end() && it->first.compare(0, prefix.size(), prefix) == 0;)
        it = vars_.erase(it);
}

uint64_t Engine::test_event(const std::string &event, std::string *data) const
{
    auto it = events_.find(event);
    if (it == events_.end())
        return 0;
    if (data)
        *data = it->second.second;
    return it->second.first;
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

bool Engine::wait_event(const std::string &event, uint64_t seen, std::chrono::milliseconds timeout)
{
    return run_until([&] { return test_event(event) > seen; }, timeout);
}

int64_t Engine::variable(const std::string &name) const
{
    auto it = vars_.find(name);
    if (it != vars_.end())
        return it->second;
    // An event's count and checksum, worked out when asked for: nothing
    // is spent on them as transfers arrive.
    auto derived = [&](std::string_view prefix) -> const std::pair<uint64_t, std::string> * {
        if (name.compare(0, prefix.size(), prefix) != 0)
            return nullptr;
        auto ev = events_.find(name.substr(prefix.size()));
        return ev == events_.end() ? nullptr : &ev->second;
    };
    if (auto *ev = derived("event:"))
        return static_cast<int64_t>(ev->first);
    if (auto *ev = derived("crc:"))
        return static_cast<int64_t>(crc32c(ev->second));
    return 0;
}

// ---- COMPARE-AND-WRITE -----------------------------------------------------
//
// Phase 0: initiator -> the set's first member (which queues the call);
// phase 1: compare down the tree; phase 2: write down the tree.

namespace {

std::string caw_body(const RangeSet &set, const Route &route, uint8_t phase, const std::string &var,
                     Relation rel, int64_t value, const std::string &wvar, int64_t wval, bool write)
{
    Writer w;
    set.encode(w);
    route.encode(w);
    w.u8(phase);
    w.bytes(var);
    w.u8(static_cast<uint8_t>(rel));
    w.u64(static_cast<uint64_t>(value));
    w.u8(write ? 1 : 0);
    w.bytes(wvar);
    w.u64(static_cast<uint64_t>(wval));
    return w.take();
}

} // namespace

void Engine::compare_and_write(const RangeSet &set, const std::string &variable, Relation rel, int64_t value,
                               std::optional<Write> write, CawDone done, std::chrono::milliseconds timeout)
{
    if (variable.empty() || variable.size() > kMaxName ||
        (write && (write->variable.empty() || write->variable.size() > kMaxName)))
        throw std::invalid_argument("variable names must have 1 to 255 bytes");
    if (set.empty()) {
        done(CawResult{true, true, false, {}, ""});
        return;
    }
    std::string wvar = write ? write->variable : "";
    int64_t wval = write ? write->value : 0;
    bool w = write.has_value();
    Route route = this->route(cfg_.fanout, timeout);
    // The root answers phase 0 with holds = relation held everywhere, and
    // failed = nodes that did not answer; "written" is holds && write &&
    // nothing failed.
    auto finish = [done, w](const Answer &a) {
        CawResult r;
        r.ok = a.failed.empty();
        r.holds = r.ok && a.holds;
        r.written = r.holds && w;
        r.failed = a.failed;
        if (!r.ok)
            r.error = "nodes " + a.failed.str() + " did not answer";
        done(r);
    };
    if (set.nth(0) == cfg_.self) {
        // This node heads the set: it serialises the call itself.
        caw_queue_.push_back(std::make_shared<CawCall>(
            CawCall{set, variable, wvar, rel, value, wval, w, std::move(finish), route}));
        caw_next();
        return;
    }
    forward(
        set, route, MsgType::caw,
        [=](const RangeSet &s) { return caw_body(s, route, 0, variable, rel, value, wvar, wval, w); },
        Answer{}, std::move(finish));
}

bool Engine::caw_local(uint8_t phase, const std::string &var, Relation rel, int64_t value,
                       const std::string &wvar, int64_t wval)
{
    if (phase == 2) {
        vars_[wvar] = wval;
        return true;
    }
    return holds(variable(var), rel, value);
}

void Engine::handle_caw(Connection &c, uint64_t op, std::string_view payload)
{
    Reader r(payload);
    RangeSet set = RangeSet::decode(r);
    Route route = Route::decode(r);
    if (route.unanswered())
        throw net::FrameError("COMPARE-AND-WRITE without answers");
    uint8_t phase = r.u8();
    std::string var(r.bytes(kMaxName));
    uint8_t rel_raw = r.u8();
    int64_t value = static_cast<int64_t>(r.u64());
    bool write = r.u8() != 0;
    std::string wvar(r.bytes(kMaxName));
    int64_t wval = static_cast<int64_t>(r.u64());
    r.finish();
    if (phase > 2 || rel_raw < 1 || rel_raw > 4)
        throw net::FrameError("caw with phase " + std::to_string(phase) + " and relation " +
                              std::to_string(rel_raw));
    if (set.empty() || set.nth(0) != cfg_.self)
        throw net::FrameError("caw for set " + set.str() + " sent to agent " + std::to_string(cfg_.self));
    Relation rel = static_cast<Relation>(rel_raw);
    std::weak_ptr<Connection> up = c.shared_from_this();
    if (phase == 0) {
        auto call = std::make_shared<CawCall>(
            CawCall{set, var, wvar, rel, value, wval, write,
                    [this, up, op](const Answer &a) { reply(up, MsgType::caw_ack, op, a); }, route});
        caw_queue_.push_back(call);
        caw_next();
        return;
    }
    Answer local;
    local.holds = caw_local(phase, var, rel, value, wvar, wval);
    if (set.size() == 1) { // a leaf
        reply(c, MsgType::caw_ack, op, local);
        return;
    }
    forward(
        set, route, MsgType::caw,
        [=](const RangeSet &s) { return caw_body(s, route, phase, var, rel, value, wvar, wval, write); },
        local, [this, up, op](const Answer &a) { reply(up, MsgType::caw_ack, op, a); });
}

void Engine::caw_next()
{
    if (caw_busy_ || caw_queue_.empty())
        return;
    caw_busy_ = true;
    auto call = caw_queue_.front();
    caw_queue_.erase(caw_queue_.begin());
    std::weak_ptr<bool> alive = alive_;
    auto finish_call = [this, call, alive](const Answer &a) {
        if (alive.expired() || !*alive.lock())
            return;
        call->reply(a);
        caw_busy_ = false;
        caw_next();
    };
    Answer local;
    local.holds = caw_local(1, call->var, call->rel, call->value, call->wvar, call->wval);
    auto body1 = [call](const RangeSet &s) {
        return caw_body(s, call->route, 1, call->var, call->rel, call->value, call->wvar, call->wval,
                        call->write);
    };
    forward(call->set, call->route, MsgType::caw, body1, local, [this, call, finish_call](const Answer &a1) {
        if (!a1.failed.empty() || !a1.holds || !call->write) {
            finish_call(a1);
            return;
        }
        Answer local2;
        local2.holds = caw_local(2, call->var, call->rel, call->value, call->wvar, call->wval);
        auto body2 = [call](const RangeSet &s) {
            return caw_body(s, call->route, 2, call->var, call->rel, call->value, call->wvar, call->wval,
                            call->write);
        };
        forward(call->set, call->route, MsgType::caw, body2, local2, [finish_call](const Answer &a2) {
            Answer a = a2;
            a.holds = a2.failed.empty(); // the compare held; the answer says whether the write reached all
            finish_call(a);
        });
    });
}

} // namespace storm::prim
