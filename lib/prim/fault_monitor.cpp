#include "lib/prim/fault_monitor.hpp"

#include <algorithm>

#include <event2/event.h>

#include "lib/common/timeval.hpp"

namespace storm::prim {

namespace {
using std::chrono::milliseconds;
using Clock = FaultTracker::Clock;

// Never written: it reads 0 on every agent, so "ge 0" holds wherever an
// agent answers.
const char *const kBeatVar = "fault:beat";
} // namespace

FaultConfig FaultConfig::for_timeout(milliseconds timeout)
{
    FaultConfig c;
    c.timeout = timeout;
    c.interval = std::clamp(timeout / 10, milliseconds(100), milliseconds(1000));
    c.answer = std::clamp(timeout / 3, milliseconds(200), milliseconds(3000));
    return c;
}

FaultMonitor::FaultMonitor(Engine &engine, event_base *base, FaultConfig config, Logger log)
    : engine_(engine), base_(base), cfg_(config), log_(std::move(log)),
      // Not run for 4 intervals (and half the timeout): starved, not the nodes' fault.
      tracker_(cfg_.timeout, std::max(cfg_.interval * 4, cfg_.timeout / 2))
{
    if (cfg_.timeout.count() <= 0 || cfg_.interval.count() <= 0 || cfg_.answer.count() <= 0)
        throw std::invalid_argument("fault monitor: timeout, interval and answer must be positive");
    timer_ = event_new(
        base_, -1, EV_PERSIST,
        [](evutil_socket_t, short, void *a) { static_cast<FaultMonitor *>(a)->tick(); }, this);
    if (!timer_)
        throw std::runtime_error("fault monitor: cannot register its timer");
}

FaultMonitor::~FaultMonitor()
{
    *alive_ = false;
    if (timer_)
        event_free(timer_);
}

void FaultMonitor::watch(const std::set<uint32_t> &nodes)
{
    tracker_.watch(nodes, Clock::now());
    for (auto it = probing_.begin(); it != probing_.end();)
        it = nodes.count(*it) ? std::next(it) : probing_.erase(it);
    if (!event_pending(timer_, EV_TIMEOUT, nullptr)) {
        timeval tv = to_timeval(cfg_.interval);
        event_add(timer_, &tv);
    }
}

void FaultMonitor::tick()
{
    auto now = Clock::now();
    tracker_.tick(now);
    for (const auto &f : tracker_.expire(now))
        if (failed_)
            failed_(f.node, f.silent);
    round();
    for (uint32_t n : tracker_.in_state(FaultTracker::State::suspect))
        probe(n);
}

void FaultMonitor::round()
{
    auto healthy = tracker_.in_state(FaultTracker::State::healthy);
    if (healthy.empty())
        return;
    if (in_flight_) {
        ++skipped_;
        return;
    }
    in_flight_ = true;
    ++rounds_;
    RangeSet set = RangeSet::of(healthy);
    std::weak_ptr<bool> alive = alive_;
    engine_.compare_and_write(
        set, kBeatVar, Relation::ge, 0, std::nullopt,
        [this, alive, set](const CawResult &r) {
            if (alive.expired())
                return;
            in_flight_ = false;
            auto now = Clock::now();
            // A round that failed without naming anyone tells nothing.
            if (!r.ok && r.failed.empty())
                return;
            std::vector<uint32_t> missed;
            for (uint32_t n : set.members()) {
                if (!r.failed.contains(n))
                    tracker_.alive(n, now);
                else if (tracker_.suspect(n))
                    missed.push_back(n);
            }
            if (!missed.empty())
                log_.verbose("no answer to a heartbeat from %s: probing them alone",
                             RangeSet::of(missed).str().c_str());
        },
        cfg_.answer);
}

void FaultMonitor::probe(uint32_t node)
{
    if (!probing_.insert(node).second)
        return; // the last probe is still out
    std::weak_ptr<bool> alive = alive_;
    engine_.compare_and_write(
        RangeSet::single(node), kBeatVar, Relation::ge, 0, std::nullopt,
        [this, alive, node](const CawResult &r) {
            if (alive.expired())
                return;
            if (!probing_.erase(node))
                return; // no longer watched
            if (r.ok && tracker_.alive(node, Clock::now()))
                log_.verbose("node %u answers again: back in the heartbeats", node);
        },
        cfg_.answer);
}

} // namespace storm::prim
