// XFER-AND-SIGNAL and TEST-EVENT: a transfer cut into chunks that stream
// down the tree within a window, their application on each node (to a
// sink, or assembled into the event's data, which signals the event), the
// unanswered transfers (spread) and the events' counts.  The multicast
// data path of large chunks is xfer_mc.cpp's.
#include <algorithm>
#include <cstring>
#include <random>

#include "lib/prim/engine_internal.hpp"

namespace storm::prim {

namespace {

uint64_t random_id()
{
    static thread_local std::mt19937_64 rng{std::random_device{}()};
    return rng();
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

uint64_t Engine::new_origin() { return random_id(); }

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

void Engine::add_sink(const std::string &prefix, ChunkSink sink)
{
    add_async_sink(prefix, [sink = std::move(sink)](const std::string &event, uint64_t origin,
                                                    uint64_t offset, uint64_t total, const net::DataRef &data,
                                                    bool sealed, ChunkDone done) {
        done(sink(event, origin, offset, total, std::string_view(data.ptr, data.len), sealed));
    });
}

std::shared_ptr<Engine::LocalWait> Engine::apply_chunk(const std::string &event, uint64_t origin,
                                                       uint64_t offset, uint64_t total,
                                                       const net::DataRef &ref, Answer &local, bool sealed)
{
    const std::string_view data(ref.ptr, ref.len);
    for (const auto &sink : sinks_) {
        if (event.compare(0, sink.first.size(), sink.first) != 0)
            continue;
        auto wait = std::make_shared<LocalWait>();
        ChunkDone done = [wait, self = cfg_.self](const std::string &why) {
            if (wait->done)
                return;
            wait->done = true;
            if (!why.empty())
                wait->answer.add_failure(RangeSet::single(self), why);
            if (wait->then) {
                Finish then = std::move(wait->then);
                wait->then = nullptr;
                then(wait->answer);
            }
        };
        try {
            sink.second(event, origin, offset, total, ref, sealed, done);
        } catch (const std::exception &e) {
            done(e.what());
        }
        if (!wait->done)
            return wait;
        local.merge(wait->answer);
        return nullptr;
    }
    if (offset == 0 && data.size() == total && total > 0 && total <= cfg_.max_event_bytes) {
        // The whole transfer in one chunk: nothing to assemble.
        auto &ev = events_[event];
        ev.first++;
        ev.second.assign(data.data(), data.size());
        if (signal_hook_)
            signal_hook_(event, ev.first, ev.second);
        return nullptr;
    }
    auto key = std::make_pair(event, origin);
    auto it = incoming_.find(key);
    if (it == incoming_.end()) {
        if (total > cfg_.max_event_bytes) {
            log_.error("transfer of %llu bytes for event %s exceeds the limit of %zu bytes: refused",
                       static_cast<unsigned long long>(total), event.c_str(), cfg_.max_event_bytes);
            local.failed = local.failed.unite(RangeSet::single(cfg_.self));
            return nullptr;
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
    return nullptr;
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
    auto wait =
        apply_chunk(event, origin, offset, total, net::DataRef{nullptr, data.data(), data.size()}, local);
    std::weak_ptr<Connection> up = c.shared_from_this();
    Finish answer = [this, up, op](const Answer &a) { reply(up, MsgType::xfer_ack, op, a); };
    if (set.size() == 1) { // a leaf: nothing to forward, only its own answer to wait for
        if (!route.unanswered())
            join(std::move(wait), std::move(answer))(local);
        return;
    }
    // Forward the received bytes themselves: no copy per child.
    net::DataRef chunk{c.current_payload(), data.data(), data.size()};
    if (route.unanswered()) {
        spread(set, route, event, origin, chunk);
        return;
    }
    forward_chunk(set, route, origin, event, offset, total, chunk, local,
                  join(std::move(wait), std::move(answer)));
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
        apply_chunk(event, origin, 0, buf->size(), ref, local);
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
        auto wait =
            apply_chunk(event, origin, offset, total, net::DataRef{nullptr, data.ptr, data.len}, local);
        forward_chunk(set, route, origin, event, offset, total, std::move(data), local,
                      join(std::move(wait), std::move(finish)));
        return;
    }
    size_t len = data.len;
    forward(
        set, route, MsgType::xfer,
        [=](const RangeSet &slice) { return xfer_head(slice, route, origin, event, offset, total, len); },
        local, std::move(finish), std::move(data));
}

Engine::Finish Engine::join(std::shared_ptr<LocalWait> wait, Finish finish)
{
    if (!wait)
        return finish;
    std::weak_ptr<bool> alive = alive_;
    return [wait, alive, finish = std::move(finish)](const Answer &children) {
        auto both = [children, finish](const Answer &own) {
            Answer a = own;
            a.merge(children);
            finish(a);
        };
        if (wait->done)
            return both(wait->answer);
        wait->then = [alive, both](const Answer &own) {
            if (!alive.expired() && *alive.lock())
                both(own);
        };
    };
}

void Engine::respread(uint32_t index, bool never_ready)
{
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
}

void Engine::sweep_incoming(std::chrono::steady_clock::time_point stale)
{
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

uint64_t Engine::test_event(const std::string &event, std::string *data) const
{
    auto it = events_.find(event);
    if (it == events_.end())
        return 0;
    if (data)
        *data = it->second.second;
    return it->second.first;
}

bool Engine::wait_event(const std::string &event, uint64_t seen, std::chrono::milliseconds timeout)
{
    return run_until([&] { return test_event(event) > seen; }, timeout);
}

} // namespace storm::prim
