// A duration as the timeval libevent's timers take.
#pragma once

#include <chrono>
#include <sys/time.h>

namespace storm {

// Negative durations are zero.
inline timeval to_timeval(std::chrono::microseconds d) noexcept
{
    auto us = d.count() < 0 ? 0 : d.count();
    return timeval{static_cast<time_t>(us / 1000000), static_cast<suseconds_t>(us % 1000000)};
}

} // namespace storm
