#include "lib/prim/fault_tracker.hpp"

#include <algorithm>

namespace storm::prim {

FaultTracker::FaultTracker(std::chrono::milliseconds timeout, std::chrono::milliseconds stall)
    : timeout_(timeout), stall_(stall)
{
}

std::vector<uint32_t> FaultTracker::watch(const std::set<uint32_t> &nodes, Clock::time_point now)
{
    for (auto it = nodes_.begin(); it != nodes_.end();)
        it = nodes.count(it->first) ? std::next(it) : nodes_.erase(it);
    std::vector<uint32_t> added;
    for (uint32_t n : nodes)
        if (nodes_.emplace(n, Node{State::healthy, now}).second)
            added.push_back(n);
    return added;
}

bool FaultTracker::alive(uint32_t node, Clock::time_point now)
{
    auto it = nodes_.find(node);
    if (it == nodes_.end() || it->second.state == State::failed)
        return false;
    it->second.last_ok = now;
    bool back = it->second.state == State::suspect;
    it->second.state = State::healthy;
    return back;
}

bool FaultTracker::suspect(uint32_t node, Clock::time_point not_before)
{
    auto it = nodes_.find(node);
    if (it == nodes_.end() || it->second.state == State::failed)
        return false;
    if (it->second.state == State::suspect) {
        it->second.not_before = std::max(it->second.not_before, not_before);
        return false;
    }
    it->second.state = State::suspect;
    it->second.not_before = not_before;
    return true;
}

void FaultTracker::restart_silence(Clock::time_point now)
{
    for (auto &[n, node] : nodes_)
        if (node.state == State::suspect)
            node.last_ok = std::max(node.last_ok, now);
}

void FaultTracker::tick(Clock::time_point now, std::chrono::nanoseconds waited)
{
    if (last_tick_ != Clock::time_point{}) {
        // We did not run for `lost`: nobody can be blamed for it.
        auto gap = now - last_tick_;
        Clock::duration own = std::max(std::chrono::duration_cast<Clock::duration>(waited), Clock::duration::zero());
        Clock::duration lost = gap > stall_ ? gap : std::min(own, gap);
        if (lost > Clock::duration::zero()) {
            forgiven_ += lost;
            for (auto &[n, node] : nodes_) {
                // (never past now: a node that answered within the gap is
                // not forgiven time before it answered)
                node.last_ok = std::max(node.last_ok, std::min(node.last_ok + lost, now));
                if (node.not_before != Clock::time_point{})
                    node.not_before += lost;
            }
        }
    }
    last_tick_ = now;
}

std::vector<FaultTracker::Failure> FaultTracker::expire(Clock::time_point now)
{
    std::vector<Failure> out;
    for (auto &[n, node] : nodes_) {
        if (!node.due(now, timeout_))
            continue;
        node.state = State::failed;
        out.push_back({n, std::chrono::duration_cast<std::chrono::milliseconds>(now - node.last_ok)});
    }
    return out;
}

std::vector<uint32_t> FaultTracker::in_state(State s) const
{
    std::vector<uint32_t> out;
    for (const auto &[n, node] : nodes_)
        if (node.state == s)
            out.push_back(n);
    return out;
}

size_t FaultTracker::due(Clock::time_point by) const
{
    size_t n = 0;
    for (const auto &[i, node] : nodes_)
        if (node.due(by, timeout_))
            ++n;
    return n;
}

} // namespace storm::prim
