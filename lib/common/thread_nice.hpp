// The nice value of one thread (Linux gives each thread its own): the node
// agent's loop runs above the rest of slurmd, and the threads it starts for
// a user's work (broadcast file workers) go back to the process's own.
//
// A new thread inherits its creator's nice value, so a thread created by a
// raised thread is raised too until it calls reset_thread_nice().
#pragma once

#include <cerrno>
#include <cstring>
#include <string>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace storm {

// Sets the calling thread's nice value (-20 to 19).  Returns "" or why not
// (EACCES without CAP_SYS_NICE when it would lower it).
inline std::string set_thread_nice(int nice) noexcept
{
    auto tid = static_cast<id_t>(syscall(SYS_gettid));
    if (setpriority(PRIO_PROCESS, tid, nice) != 0)
        return std::strerror(errno);
    return "";
}

// Gives the calling thread the nice value of the process's first thread
// (which Storm never changes).  Returns "" or why not.
inline std::string reset_thread_nice() noexcept
{
    errno = 0;
    int nice = getpriority(PRIO_PROCESS, static_cast<id_t>(getpid()));
    if (nice == -1 && errno != 0)
        return std::strerror(errno);
    return set_thread_nice(nice);
}

} // namespace storm
