#include "lib/prim/fault_guard.hpp"

#include <cmath>
#include <stdexcept>

namespace storm::prim {

MassSilenceGuard::MassSilenceGuard(double share, size_t min_nodes, std::chrono::milliseconds hold)
    : share_(share), min_(min_nodes), hold_(hold)
{
    if (!(share > 0 && share <= 1) || hold.count() < 0)
        throw std::invalid_argument(
            "mass-silence guard: the share must be in (0, 1] and the hold not negative");
}

size_t MassSilenceGuard::threshold(size_t watched) const
{
    auto by_share = static_cast<size_t>(std::floor(share_ * static_cast<double>(watched)));
    return by_share > min_ ? by_share : min_;
}

MassSilenceGuard::Change MassSilenceGuard::update(size_t silent, size_t watched, Clock::time_point now,
                                                  Clock::duration forgiven)
{
    bool massive = silent > threshold(watched);
    if (massive && !massive_) {
        massive_ = true;
        since_ = now;
        forgiven_since_ = forgiven;
        holding_ = hold_.count() > 0;
        return holding_ ? Change::held : Change::released;
    }
    if (!massive && massive_) {
        massive_ = false;
        bool was = holding_;
        holding_ = false;
        return was ? Change::fell : Change::none;
    }
    if (massive_ && holding_ && lasted(now, forgiven) >= hold_) {
        holding_ = false;
        return Change::released;
    }
    return Change::none;
}

} // namespace storm::prim
