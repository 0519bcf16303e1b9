#include "lib/prim/fault_monitor.hpp"

#include <algorithm>

#include <event2/event.h>

#include "lib/common/run_delay.hpp"
#include "lib/common/seconds.hpp"
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
    c.mass_hold = std::max(timeout * 6, milliseconds(60000));
    return c;
}

std::set<uint32_t> blamed_roots(const RangeSet &set, const RangeSet &failed, unsigned fanout)
{
    std::set<uint32_t> out;
    if (failed.empty() || set.empty() || fanout == 0)
        return out;
    // The tree of net::split_children, on positions in the set.
    std::vector<uint32_t> members = set.members();
    std::vector<uint32_t> before(members.size() + 1, 0); // failed members before each position
    for (size_t i = 0; i < members.size(); ++i)
        before[i + 1] = before[i] + (failed.contains(members[i]) ? 1 : 0);
    struct Slice {
        uint32_t lo, hi; // positions [lo, hi); lo is the slice's root
        bool parent_failed;
    };
    std::vector<Slice> todo{{0, static_cast<uint32_t>(members.size()), false}};
    while (!todo.empty()) {
        Slice s = todo.back();
        todo.pop_back();
        if (before[s.hi] == before[s.lo])
            continue; // all of it answered
        bool root_failed = before[s.lo + 1] != before[s.lo];
        if (root_failed && !s.parent_failed)
            out.insert(members[s.lo]);
        uint32_t rest = s.hi - s.lo - 1;
        uint32_t k = std::min<uint32_t>(fanout, rest);
        uint32_t pos = s.lo + 1;
        for (uint32_t c = 0; c < k; ++c) {
            uint32_t len = rest / k + (c < rest % k ? 1 : 0);
            todo.push_back({pos, pos + len, root_failed});
            pos += len;
        }
    }
    return out;
}

FaultMonitor::FaultMonitor(Engine &engine, event_base *base, FaultConfig config, Logger log)
    : engine_(engine), base_(base), cfg_(config), log_(std::move(log)),
      // Not run for 4 intervals (and half the timeout): starved, not the nodes' fault.
      tracker_(cfg_.timeout, std::max(cfg_.interval * 4, cfg_.timeout / 2)),
      guard_(cfg_.mass_share, cfg_.mass_min, cfg_.mass_hold)
{
    if (cfg_.timeout.count() <= 0 || cfg_.interval.count() <= 0 || cfg_.answer.count() <= 0 ||
        cfg_.max_probes == 0)
        throw std::invalid_argument(
            "fault monitor: timeout, interval, answer and the probes at once must be positive");
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
    for (auto *s : {&probing_, &blamed_})
        for (auto it = s->begin(); it != s->end();)
            it = nodes.count(*it) ? std::next(it) : s->erase(it);
    arm_timer(timer_, cfg_.interval);
}

void FaultMonitor::tick()
{
    auto now = Clock::now();
    // This thread's own wait for a CPU since the last tick (none where the
    // kernel does not count it): not the nodes' silence.
    std::chrono::nanoseconds waited{};
    if (auto d = thread_run_delay()) {
        if (last_delay_)
            waited = *d - *last_delay_;
        last_delay_ = d;
    }
    tracker_.tick(now, waited);
    starved(now);
    guard(now);
    if (!guard_.holding())
        for (const auto &f : tracker_.expire(now)) {
            blamed_.erase(f.node);
            if (failed_)
                failed_(f.node, f.silent);
        }
    round();
    // The blamed suspects, probed in turn from where the last tick stopped.
    std::vector<uint32_t> order(blamed_.lower_bound(next_probe_), blamed_.end());
    order.insert(order.end(), blamed_.begin(), blamed_.lower_bound(next_probe_));
    for (uint32_t n : order) {
        if (probing_.size() >= cfg_.max_probes)
            break;
        if (probing_.count(n))
            continue;
        next_probe_ = n + 1;
        probe(n);
    }
}

// At most one warning a minute, once the forgiven time has grown by a
// whole timeout since the last: detection is late by that much, and the
// machine running this controller is overloaded.
void FaultMonitor::starved(Clock::time_point now)
{
    auto forgiven = tracker_.forgiven();
    if (told_at_ == Clock::time_point{}) {
        told_at_ = now;
        told_forgiven_ = forgiven;
        return;
    }
    auto more = forgiven - told_forgiven_;
    if (more < cfg_.timeout || now - told_at_ < std::chrono::minutes(1))
        return;
    log_.warning("this controller's fault detection could not run for %s of the last %s (it waited for a CPU, "
                 "or was stopped): that time is not counted against any node, and detection is late by as much",
                 tenths_of_seconds(std::chrono::duration_cast<milliseconds>(more)).c_str(),
                 tenths_of_seconds(std::chrono::duration_cast<milliseconds>(now - told_at_)).c_str());
    told_at_ = now;
    told_forgiven_ = forgiven;
}

void FaultMonitor::guard(Clock::time_point now)
{
    // Suspects to be reported within half a timeout: a subtree hidden for
    // a round by a slow agent, answering through the next tree, is not a
    // mass silence (nor a warning).
    size_t silent = tracker_.due(now + cfg_.timeout / 2);
    size_t watched = tracker_.size();
    auto forgiven = tracker_.forgiven();
    switch (guard_.update(silent, watched, now, forgiven)) {
    case MassSilenceGuard::Change::none:
        break;
    case MassSilenceGuard::Change::held:
        log_.warning("%zu of the %zu watched nodes are silent at once (more than %zu): this controller, the "
                     "network or an overload of the whole machine is far likelier than that many dead nodes; "
                     "no node is reported until at most %zu are silent, or for %s at most",
                     silent, watched, guard_.threshold(watched), guard_.threshold(watched),
                     tenths_of_seconds(guard_.hold()).c_str());
        break;
    case MassSilenceGuard::Change::fell:
        // A mass silence comes and goes in waves on an overloaded machine:
        // its dips are no time to report whoever is still silent.  Their
        // silence counts from here.
        tracker_.restart_silence(now);
        log_.warning("%zu of the %zu watched nodes are silent now (at most %zu) after %s of mass silence: "
                     "reports resume; a node still silent is reported once silent for the timeout from now",
                     silent, watched, guard_.threshold(watched),
                     tenths_of_seconds(std::chrono::duration_cast<milliseconds>(guard_.lasted(now, forgiven))).c_str());
        break;
    case MassSilenceGuard::Change::released:
        log_.warning("%zu of the %zu watched nodes are still silent after %s of mass silence (%s of it "
                     "watched, the time this controller could not run left out): no longer held, the nodes "
                     "silent for the timeout are reported (a failure this wide is real)",
                     silent, watched, tenths_of_seconds(std::chrono::duration_cast<milliseconds>(now - guard_.since())).c_str(),
                     tenths_of_seconds(guard_.hold()).c_str());
        break;
    }
}

void FaultMonitor::round()
{
    // Every watched node but the failed ones and the blamed suspects.
    std::vector<uint32_t> beat = tracker_.in_state(FaultTracker::State::healthy);
    for (uint32_t n : tracker_.in_state(FaultTracker::State::suspect))
        if (!blamed_.count(n))
            beat.push_back(n);
    if (beat.empty())
        return;
    if (in_flight_) {
        ++skipped_;
        return;
    }
    in_flight_ = true;
    ++rounds_;
    RangeSet set = RangeSet::of(std::move(beat));
    std::weak_ptr<bool> alive = alive_;
    engine_.compare_and_write(
        set, kBeatVar, Relation::ge, 0, std::nullopt,
        [this, alive, set](const CawResult &r) {
            if (alive.expired())
                return;
            in_flight_ = false;
            beaten(set, r);
        },
        cfg_.answer);
}

void FaultMonitor::beaten(const RangeSet &set, const CawResult &r)
{
    auto now = Clock::now();
    // A round that failed without naming anyone tells nothing.
    if (!r.ok && r.failed.empty())
        return;
    std::set<uint32_t> roots = blamed_roots(set, r.failed, engine_.fanout());
    std::vector<uint32_t> blamed, hidden;
    for (uint32_t n : set.members()) {
        if (!tracker_.watched(n))
            continue;
        if (!r.failed.contains(n)) {
            tracker_.alive(n, now);
            continue;
        }
        // Late news: the round may have lasted longer than the timeout (a
        // slow agent holds its parent's answer for the hop timeouts below
        // it), so a node is never reported before it could answer again.
        // A blamed node has `answer` for a probe of its own; a hidden one,
        // which may never have been asked, the whole timeout from the round
        // that hid it first (not again while it stays a suspect).
        bool healthy = tracker_.state(n) == FaultTracker::State::healthy;
        if (roots.count(n)) {
            tracker_.suspect(n, now + cfg_.answer);
            if (tracker_.state(n) == FaultTracker::State::suspect && blamed_.insert(n).second)
                blamed.push_back(n);
        } else {
            tracker_.suspect(n, healthy ? now + cfg_.timeout : Clock::time_point{});
            if (tracker_.state(n) == FaultTracker::State::suspect)
                hidden.push_back(n);
        }
    }
    if (!blamed.empty())
        log_.verbose("no answer to a heartbeat from %s: probing them alone; the %zu nodes they served, "
                     "silent with them, beaten through other agents",
                     RangeSet::of(blamed).str().c_str(), hidden.size());
}

void FaultMonitor::probe(uint32_t node)
{
    if (!probing_.insert(node).second)
        return; // the last probe is still out
    ++probes_;
    std::weak_ptr<bool> alive = alive_;
    engine_.compare_and_write(
        RangeSet::single(node), kBeatVar, Relation::ge, 0, std::nullopt,
        [this, alive, node](const CawResult &r) {
            if (alive.expired())
                return;
            if (!probing_.erase(node))
                return; // no longer watched
            if (r.ok && tracker_.alive(node, Clock::now())) {
                blamed_.erase(node);
                log_.verbose("node %u answers again: back in the heartbeats", node);
            }
        },
        cfg_.answer);
}

} // namespace storm::prim
