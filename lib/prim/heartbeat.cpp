#include "lib/prim/heartbeat.hpp"

#include <algorithm>

#include <event2/event.h>

#include "lib/common/timeval.hpp"
#include "lib/net/wire.hpp"

namespace storm::prim {

namespace {
std::string seen_var(const std::string &name) { return "heartbeat:" + name + ":seen"; }
} // namespace

HeartbeatMaster::HeartbeatMaster(Engine &engine, event_base *base, RangeSet set, Config config)
    : engine_(engine), base_(base), set_(set), cfg_(std::move(config)),
      queue_(engine, base, set, "heartbeat:" + cfg_.name, cfg_.queue_length)
{
    if (cfg_.interval.count() <= 0 || cfg_.check_every == 0)
        throw std::invalid_argument("heartbeat: interval and check_every must be positive");
    // A node that does not answer within `tolerance` beats is faulty.
    auto t = std::chrono::duration_cast<std::chrono::milliseconds>(cfg_.interval * cfg_.tolerance);
    queue_.set_timeout(std::max(t, std::chrono::milliseconds(5)));
    timer_ = event_new(
        base_, -1, EV_PERSIST,
        [](evutil_socket_t, short, void *arg) { static_cast<HeartbeatMaster *>(arg)->beat(); }, this);
}

HeartbeatMaster::~HeartbeatMaster()
{
    *alive_ = false;
    if (timer_)
        event_free(timer_);
}

void HeartbeatMaster::start()
{
    timeval tv = to_timeval(cfg_.interval);
    evtimer_add(timer_, &tv);
}

void HeartbeatMaster::stop() { evtimer_del(timer_); }

void HeartbeatMaster::readmit(const RangeSet &nodes)
{
    for (uint32_t n : nodes.members())
        faulty_.erase(n);
    beat_healthy();
}

void HeartbeatMaster::beat_healthy()
{
    std::vector<uint32_t> healthy;
    for (uint32_t n : set_.members())
        if (!faulty_.count(n))
            healthy.push_back(n);
    queue_.set_nodes(RangeSet::of(healthy));
}

void HeartbeatMaster::beat()
{
    ++ticks_;
    if (queue_.waiting() > 0) {
        late_++; // the previous beat is still waiting for space: skip this one
    } else {
        uint64_t seq = ++seq_;
        net::Writer w;
        w.u64(seq);
        std::weak_ptr<bool> alive = alive_;
        queue_.enqueue(w.take(), [this, alive](const XferResult &r) {
            if (!alive.expired() && *alive.lock() && !r.failed.empty())
                report(r.failed); // did not take the beat in time
        });
    }
    if (ticks_ % cfg_.check_every == 0 && !checking_)
        check();
}

void HeartbeatMaster::check()
{
    auto found = std::make_shared<RangeSet>();
    auto outstanding = std::make_shared<int>(0);
    if (queue_.waiting() > 0 && queue_.enqueued() >= cfg_.queue_length) {
        // Held back by a full queue: find who does not drain it.
        checking_ = true;
        int64_t need = static_cast<int64_t>(queue_.enqueued() - cfg_.queue_length + 1);
        bisect(queue_.nodes(), queue_dequeued_var("heartbeat:" + cfg_.name), need, found, outstanding);
    } else if (seq_ > cfg_.tolerance && !queue_.nodes().empty()) {
        checking_ = true;
        bisect(queue_.nodes(), seen_var(cfg_.name), static_cast<int64_t>(seq_ - cfg_.tolerance), found,
               outstanding);
    }
}

// Finds the nodes of `set` whose last beat is older than `need`, or that do
// not answer, with COMPARE-AND-WRITE on halves of the set.
void HeartbeatMaster::bisect(const RangeSet &set, const std::string &var, int64_t need,
                             std::shared_ptr<RangeSet> found, std::shared_ptr<int> outstanding)
{
    ++*outstanding;
    std::weak_ptr<bool> alive = alive_;
    auto t = std::chrono::duration_cast<std::chrono::milliseconds>(cfg_.interval * cfg_.tolerance);
    engine_.compare_and_write(
        set, var, Relation::ge, need, std::nullopt,
        [this, alive, set, var, need, found, outstanding](const CawResult &r) {
            if (alive.expired() || !*alive.lock())
                return;
            *found = found->unite(r.failed);
            // Not answering or lagging somewhere: look closer.
            if (!r.ok || !r.holds) {
                if (set.size() == 1) {
                    *found = found->unite(set);
                } else {
                    uint32_t half = set.size() / 2;
                    bisect(set.slice(0, half), var, need, found, outstanding);
                    bisect(set.slice(half, set.size()), var, need, found, outstanding);
                }
            }
            if (--*outstanding == 0) {
                checking_ = false;
                report(*found);
            }
        },
        std::max(t, std::chrono::milliseconds(5)));
}

void HeartbeatMaster::report(const RangeSet &found)
{
    std::vector<uint32_t> added;
    for (uint32_t n : found.members())
        if (faulty_.insert(n).second)
            added.push_back(n);
    if (added.empty())
        return;
    RangeSet fresh = RangeSet::of(added);
    // Isolate them: the beats of the others must not wait for them.
    beat_healthy();
    if (fault_)
        fault_(fresh, "does not answer, lags more than " + std::to_string(cfg_.tolerance) +
                          " heartbeats or does not drain its heartbeat queue");
}

HeartbeatReceiver::HeartbeatReceiver(Engine &engine, const std::string &name, uint32_t queue_length)
    : engine_(engine), name_(name), prefix_("queue:heartbeat:" + name + ":"),
      queue_(engine, "heartbeat:" + name, queue_length)
{
}

bool HeartbeatReceiver::on_signal(const std::string &event)
{
    if (event.compare(0, prefix_.size(), prefix_) != 0)
        return false;
    std::string data;
    while (queue_.try_dequeue(data)) {
        try {
            net::Reader r(data);
            uint64_t seq = r.u64();
            r.finish();
            if (seq > seen_)
                seen_ = seq;
        } catch (const net::DecodeError &) {
            // not a beat: consumed and ignored
        }
    }
    engine_.set_variable(seen_var(name_), static_cast<int64_t>(seen_));
    return true;
}

} // namespace storm::prim
