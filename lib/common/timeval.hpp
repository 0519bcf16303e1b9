// A duration as the timeval libevent's timers take, and a timer armed only
// while it has work.
#pragma once

#include <chrono>
#include <event2/event.h>
#include <sys/time.h>

namespace storm {

// Negative durations are zero.
inline timeval to_timeval(std::chrono::microseconds d) noexcept
{
    auto us = d.count() < 0 ? 0 : d.count();
    return timeval{static_cast<time_t>(us / 1000000), static_cast<suseconds_t>(us % 1000000)};
}

// Adds timer `ev` (persistent or not) to fire after `d`, unless it is
// already pending: a timer its owner deletes when idle and arms again when
// work comes.
inline void arm_timer(event *ev, std::chrono::microseconds d) noexcept
{
    if (event_pending(ev, EV_TIMEOUT, nullptr))
        return;
    timeval tv = to_timeval(d);
    event_add(ev, &tv);
}

} // namespace storm
