// Which watched nodes have gone silent for the fault timeout: the
// bookkeeping of slurmctld's fault detection (fault_monitor.hpp), apart
// from any network or clock so that it can be tested alone.
//
// Each watched node is healthy, suspect (it missed a beat: it did not
// answer a round, or the answer of its subtree did not come) or failed (it
// answered nothing, neither beat nor probe, for `timeout` since the last
// time it did, and had the chance the caller gave it when it became a
// suspect: suspect(node, not_before) -- a node whose silence was only
// seen late, or whose answer another node may have hidden, is not
// reported before it could answer again).  A suspect that answers again is healthy again.  A failed
// node is reported once by expire() and stays failed, whatever it answers
// later: only watch() leaving it out (the resource manager took it out of
// service) and taking it back (an administrator put it back), or forget(),
// start it afresh.  A node that starts being watched counts as having
// answered at that moment.
//
// Time the caller itself did not run does not count against any node: a
// controller that was not running cannot tell who was silent, and the
// answers may be waiting unread in its sockets.  Two measures of it, the
// larger taken at each tick(): the gap since the last tick when it is
// longer than `stall` (the process was stopped, or starved outright), and
// the caller's own wait for a CPU since the last tick (`waited`, from
// run_delay.hpp), which also catches a thread starved in many short waits
// by a machine overloaded as a whole -- every answer then comes late with
// it.
//
// Contract: times never go backwards; node numbers are the caller's.  Not
// thread safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <set>
#include <vector>

namespace storm::prim {

class FaultTracker {
public:
    using Clock = std::chrono::steady_clock;
    FaultTracker(std::chrono::milliseconds timeout, std::chrono::milliseconds stall);

    enum class State { healthy, suspect, failed };

    // The nodes to watch from now on.  Returns those that were not watched
    // before (they start healthy, as having answered at `now`).
    std::vector<uint32_t> watch(const std::set<uint32_t> &nodes, Clock::time_point now);
    // Starts `node` afresh at its next watch() (it is no longer watched).
    void forget(uint32_t node) { nodes_.erase(node); }

    // `node` answered at `now`: a suspect is healthy again (true).
    bool alive(uint32_t node, Clock::time_point now);
    // `node` missed a beat: healthy nodes become suspect (true), not to be
    // reported before `not_before` (whatever their silence then); a
    // suspect keeps the later of its own and `not_before`.
    bool suspect(uint32_t node, Clock::time_point not_before = {});
    // Every suspect's silence counts from `now` on (a mass silence just
    // ended: its time is no one node's fault).
    void restart_silence(Clock::time_point now);
    // Called at least every `stall` by the caller's timer; `waited`: how
    // long the caller's thread waited for a CPU since its last tick.
    void tick(Clock::time_point now, std::chrono::nanoseconds waited = {});
    // The time forgiven so far (never counted against any node).
    Clock::duration forgiven() const noexcept { return forgiven_; }

    struct Failure {
        uint32_t node;
        std::chrono::milliseconds silent; // since it last answered
    };
    // Suspects silent for `timeout` or more (and past their not_before):
    // now failed, each reported once.
    std::vector<Failure> expire(Clock::time_point now);
    // How many suspects expire() would report at `by` (the same times).
    size_t due(Clock::time_point by) const;

    std::vector<uint32_t> in_state(State s) const;
    bool watched(uint32_t node) const { return nodes_.count(node) != 0; }
    size_t size() const noexcept { return nodes_.size(); } // watched nodes
    State state(uint32_t node) const { return nodes_.at(node).state; }
    std::chrono::milliseconds timeout() const { return timeout_; }

private:
    struct Node {
        State state = State::healthy;
        Clock::time_point last_ok;
        Clock::time_point not_before{}; // of a suspect's report
        bool due(Clock::time_point now, std::chrono::milliseconds timeout) const
        {
            return state == State::suspect && now - last_ok >= timeout && now >= not_before;
        }
    };
    std::chrono::milliseconds timeout_, stall_;
    std::map<uint32_t, Node> nodes_;
    Clock::time_point last_tick_{};
    Clock::duration forgiven_{};
};

} // namespace storm::prim
