// COMPARE-AND-WRITE and the variables it reads and writes.
//
// Phase 0: initiator -> the set's first member (which queues the call);
// phase 1: compare down the tree; phase 2: write down the tree.
#include "lib/prim/checksum.hpp"
#include "lib/prim/engine_internal.hpp"

namespace storm::prim {

namespace {

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

struct Engine::CawCall {
    RangeSet set;
    std::string var, wvar;
    Relation rel;
    int64_t value, wval;
    bool write;
    std::function<void(const Engine::Answer &)> reply; // to the caller, with the outcome
    Route route;
};

void Engine::erase_variables(const std::string &prefix)
{
    for (auto it = vars_.lower_bound(prefix);
         it != vars_.end() && it->first.compare(0, prefix.size(), prefix) == 0;)
        it = vars_.erase(it);
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
