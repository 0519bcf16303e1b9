// Real-time scheduling of the calling thread, for the threads that carry
// gang scheduling's strobes (the machine manager's, the node agent's) while
// jobs are gang-scheduled: with CPU-bound jobs on every core, a normal
// thread waits up to a scheduler tick (milliseconds) to run, longer than
// a fine quantum.  The kernel's RT throttling (sched_rt_runtime_us) still
// bounds what such a thread can take.
#pragma once

#include <cerrno>
#include <cstring>
#include <pthread.h>
#include <sched.h>
#include <string>

namespace storm {

// SCHED_FIFO at `priority` (1-99), or back to SCHED_OTHER when 0.  Returns
// "" or why not (EPERM without CAP_SYS_NICE).
inline std::string set_thread_realtime(int priority) noexcept
{
    sched_param p{};
    p.sched_priority = priority;
    int rc = pthread_setschedparam(pthread_self(), priority > 0 ? SCHED_FIFO : SCHED_OTHER, &p);
    return rc == 0 ? std::string() : std::string(std::strerror(rc));
}

// Keeps the calling thread at SCHED_FIFO `priority` exactly while it is
// wanted (never with priority 0).  Call want() from that thread only.
class RealtimeWhile {
public:
    explicit RealtimeWhile(unsigned priority) : priority_(priority) {}
    // Returns "" or, the first time it fails to become real time until it is
    // no longer wanted, why (the thread then stays as it is).
    std::string want(bool on) noexcept
    {
        on = on && priority_ > 0;
        if (on == active_ || (on && failed_))
            return "";
        failed_ = false;
        std::string why = set_thread_realtime(on ? static_cast<int>(priority_) : 0);
        if (why.empty())
            active_ = on;
        else if (on)
            failed_ = true;
        return on ? why : std::string();
    }
    unsigned priority() const noexcept { return priority_; }

private:
    unsigned priority_;
    bool active_ = false, failed_ = false;
};

} // namespace storm
