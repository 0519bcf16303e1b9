#include "lib/prim/fault_tracker.hpp"

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

bool FaultTracker::suspect(uint32_t node)
{
    auto it = nodes_.find(node);
    if (it == nodes_.end() || it->second.state != State::healthy)
        return false;
    it->second.state = State::suspect;
    return true;
}

void FaultTracker::tick(Clock::time_point now)
{
    if (last_tick_ != Clock::time_point{} && now - last_tick_ > stall_) {
        // We did not run for `gap`: nobody can be blamed for it.
        auto gap = now - last_tick_;
        for (auto &[n, node] : nodes_)
            node.last_ok += gap;
    }
    last_tick_ = now;
}

std::vector<FaultTracker::Failure> FaultTracker::expire(Clock::time_point now)
{
    std::vector<Failure> out;
    for (auto &[n, node] : nodes_) {
        if (node.state != State::suspect || now - node.last_ok < timeout_)
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

} // namespace storm::prim
