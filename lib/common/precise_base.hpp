// A libevent loop whose timers fire when they are due (timerfd), not at the
// next millisecond tick: the gang manager's strobes and the node agent's
// halt waits and stop checks run at quanta of a few milliseconds.
//
// Contract: returns a new event_base (the caller frees it), or nullptr if
// libevent cannot make one.
#pragma once

#include <event2/event.h>

namespace storm {

inline event_base *new_precise_base() noexcept
{
    event_config *ec = event_config_new();
    if (!ec)
        return nullptr;
    event_config_set_flag(ec, EVENT_BASE_FLAG_PRECISE_TIMER);
    event_base *base = event_base_new_with_config(ec);
    event_config_free(ec);
    return base;
}

} // namespace storm
