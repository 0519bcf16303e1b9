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

} // namespace storm
