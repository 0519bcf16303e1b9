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
    // `silent` of the `watched` nodes are silent at `now`.
    Change update(size_t silent, size_t watched, Clock::time_point now);
    // Whether reports are held now (after the last update()).
    bool holding() const noexcept { return holding_; }
    // How many silent nodes are massive for `watched` (more than this).
    size_t threshold(size_t watched) const;
    std::chrono::milliseconds hold() const noexcept { return hold_; }
    // Since when the current episode lasts (valid while one does).
    Clock::time_point since() const noexcept { return since_; }

private:
    double share_;
    size_t min_;
    std::chrono::milliseconds hold_;
    bool massive_ = false; // an episode is going on
    bool holding_ = false; // and its reports are still held
    Clock::time_point since_{};
};

} // namespace storm::prim
