// XFER-AND-SIGNAL by multicast: the node heading a wide set multicasts
// each large chunk once, sealed, and sends down the tree only its
// announcement (xfer_mc); each node takes the bytes from multicast if they
// match the seal, else asks its parent for them (xfer_nack), and applies
// the chunks of a transfer in the order of their announcements.  The
// socket, the seal and the reassembly are lib/net/mcast.hpp's; the tree,
// its answers and its routing around dead agents are tree.cpp's.
#include <algorithm>
#include <arpa/inet.h>
#include <cstring>

#include "lib/common/timeval.hpp"
#include "lib/prim/engine_internal.hpp"

namespace storm::prim {

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

void Engine::mc_start(const sockaddr_in &addr)
{
    if (!cfg_.mcast.enabled())
        return;
    net::McastConfig mc = cfg_.mcast;
    if (mc.iface.s_addr == INADDR_ANY)
        mc.iface = addr.sin_addr;
    try {
        mcast_ = std::make_unique<net::Mcast>(base_, mc, cfg_.self, log_);
        mcast_->on_complete([this](uint64_t origin, uint64_t) {
            if (mc_waits_.count(origin))
                mc_pump(origin);
        });
        mc_timer_ = event_new(
            base_, -1, 0, [](evutil_socket_t, short, void *arg) { static_cast<Engine *>(arg)->mc_check(); },
            this);
        if (!mc_timer_)
            throw std::runtime_error("cannot make its repair timer");
        char group[INET_ADDRSTRLEN] = "?";
        inet_ntop(AF_INET, &mc.group, group, sizeof group);
        log_.info("multicast data path on group %s:%u, AES-GCM by %s", group, mc.port,
                  net::cipher_description().c_str());
    } catch (const std::exception &e) {
        mcast_.reset();
        log_.warning("multicast is off on this node, transfers use the tree alone: %s", e.what());
    }
}

void Engine::sweep_mc(std::chrono::steady_clock::time_point stale)
{
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
}

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
        mc_log_.warning("cannot seal a chunk (%s): sending it over the tree", e.what());
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
        std::shared_ptr<LocalWait> wait;
        try {
            // A multicast chunk's buffer is its own (the sink may keep it);
            // a repair's bytes lie in a connection's input.
            wait = apply_chunk(x.chunk.event, x.chunk.origin, x.chunk.offset, x.chunk.total,
                               sealed ? d : net::DataRef{nullptr, d.ptr, d.len}, local, sealed);
        } catch (const std::exception &e) {
            local.add_failure(RangeSet::single(cfg_.self), e.what());
        }
        std::weak_ptr<Connection> wup = x.up;
        uint64_t op = x.op;
        forward_mc(
            x.chunk, local,
            join(std::move(wait), [this, wup, op](const Answer &a) { reply(wup, MsgType::xfer_ack, op, a); }),
            d);
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

} // namespace storm::prim
