// How long the calling thread has waited for a CPU: runnable, on a run
// queue, but not running (the kernel's schedstat, second field, in ns).
// A thread that watches others by the clock (fault detection) subtracts
// this from what it saw: while it waited, an answer could sit unread in its
// socket, and nobody it watches can be blamed for that time.
//
// Contract: reads /proc/thread-self/schedstat of the calling thread, a
// few microseconds; std::nullopt where the kernel keeps no such count
// (CONFIG_SCHED_INFO off) or /proc is not mounted.  Never throws.
#pragma once

#include <chrono>
#include <cstdio>
#include <fcntl.h>
#include <optional>
#include <unistd.h>

namespace storm {

inline std::optional<std::chrono::nanoseconds> thread_run_delay() noexcept
{
    int fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return std::nullopt;
    char buf[128];
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return std::nullopt;
    buf[n] = '\0';
    unsigned long long on_cpu = 0, waited = 0;
    if (std::sscanf(buf, "%llu %llu", &on_cpu, &waited) != 2)
        return std::nullopt;
    return std::chrono::nanoseconds(static_cast<long long>(waited));
}

} // namespace storm
