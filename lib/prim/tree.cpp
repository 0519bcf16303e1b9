// Generic tree forwarding: an operation goes down the tree in slices of
// its set, each hop waits for its children's answers (or their timeout)
// and answers upwards with the aggregate; an agent that cannot be reached
// is routed around, its slice re-split among its own children.  The
// operations (xfer.cpp, xfer_mc.cpp, caw.cpp) give the frames; this file
// owns the hops, their timers and the answers' encoding.
#include <algorithm>

#include "lib/common/timeval.hpp"
#include "lib/prim/engine_internal.hpp"

namespace storm::prim {

namespace {

// Levels of the tree over n members with the given fanout.
unsigned levels(uint32_t n, unsigned fanout)
{
    unsigned l = 1;
    for (uint64_t cap = 1; cap < n; cap = cap * fanout + 1)
        ++l;
    return l;
}

} // namespace

// Adds `from` to `to`, up to kMaxReasons in all.
void add_reasons(Reasons &to, const Reasons &from)
{
    for (const auto &r : from) {
        if (to.size() >= kMaxReasons)
            break;
        to.insert(r);
    }
}

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

void Engine::child_lost(uint32_t index, bool never_ready, const std::string &why)
{
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

void Engine::handle_answer(Connection &c, uint64_t op, std::string_view payload)
{
    auto it = child_ops_.find(op);
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
    hop_answer(op, a);
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

} // namespace storm::prim
