// The mass-silence guard of slurmctld's fault detection (fault_monitor.hpp):
// when many watched nodes go silent at once, the likelier cause is the
// observer (slurmctld starved or stopped), the network, or an overload of
// the whole machine that starves every agent -- not that many nodes died
// together.  Draining them all would turn a passing overload into an
// outage, so the reports are held while the silence is massive.
//
// Silence is massive when more than max(share x watched, min_nodes) of the
// watched nodes are silent at once.  From that moment reports are held
// until the silent nodes are no more than that again (most answered: the
// monitor counts the silence of the few still silent from then on, and
// reports those that stay silent for the timeout) or for `hold` at most
// (then every node silent for its timeout is reported, held or not: a real
// failure of a whole rack or switch is reported late, `hold` after it
// began, never never).  An episode ends when the share falls; while it
// lasts, the bound is not re-armed.
//
// `hold` runs on the observer's own time: the caller passes the time it
// could not run so far (`forgiven`, FaultTracker::forgiven(): it waited
// for a CPU or was stopped), and that time is not counted against the
// bound.  On a machine so loaded that slurmctld ran 10 s of each minute,
// 60 s of holding is 60 s of slurmctld watching, not 60 s of it waiting
// (at 1000 virtual nodes with two 1000-task jobs starting, every node
// was released and drained after the wall-clock bound while slurmctld
// had run for a tenth of it).
//
// Pure bookkeeping on the caller's times (no clock, no network): testable
// alone.  Contract: times never go backwards.  Not thread safe.
#pragma once

#include <chrono>
#include <cstddef>

namespace storm::prim {

class MassSilenceGuard {
public:
    using Clock = std::chrono::steady_clock;
    MassSilenceGuard(double share, size_t min_nodes, std::chrono::milliseconds hold);

    enum class Change {
        none,     // as before
        held,     // silence became massive: reports are held from now on
        fell,     // it is no longer: reports resume
        released, // `hold` passed and it still is: reports resume anyway
    };
    // `silent` of the `watched` nodes are silent at `now`; `forgiven`: the
    // caller's time not counted so far (never decreasing, and growing by
    // no more than the time between two calls).
    Change update(size_t silent, size_t watched, Clock::time_point now, Clock::duration forgiven = {});
    // Whether reports are held now (after the last update()).
    bool holding() const noexcept { return holding_; }
    // How many silent nodes are massive for `watched` (more than this).
    size_t threshold(size_t watched) const;
    std::chrono::milliseconds hold() const noexcept { return hold_; }
    // How long the current episode has lasted at `now` on the observer's
    // own time, and since when it lasts by the clock (valid while one
    // does; `forgiven` as for update()).
    Clock::duration lasted(Clock::time_point now, Clock::duration forgiven = {}) const noexcept
    {
        return (now - since_) - (forgiven - forgiven_since_);
    }
    Clock::time_point since() const noexcept { return since_; }

private:
    double share_;
    size_t min_;
    std::chrono::milliseconds hold_;
    bool massive_ = false; // an episode is going on
    bool holding_ = false; // and its reports are still held
    Clock::time_point since_{};
    Clock::duration forgiven_since_{}; // the caller's forgiven time when the episode began
};

} // namespace storm::prim
