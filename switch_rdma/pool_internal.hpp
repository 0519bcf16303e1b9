// What the buffer pool's sources (pool.cpp, pool_control.cpp,
// pool_contexts.cpp, pool_switch.cpp, pool_stats.cpp) share, and nothing
// else includes: a control connection (Pool::Client), an open context's
// window and its place in the switch protocol (Pool::Window), and two small
// helpers.
//
// Contract:
//  - A Client is owned by Pool::clients_ (by its fd) from its accept to
//    drop(); `task` and the ids are set once, by a successful attach.
//  - A Window is owned by Pool::windows_ (by context id) from open to close
//    (or the pool's end), always added and erased through add_window() /
//    erase_window().  It owns its memfd, its mapping and its stop and pin
//    timers: its destructor frees the timers, unmaps the window (which
//    unlocks it) and closes the memfd.  The tasks keep their own mappings of it.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <sys/mman.h>
#include <sys/types.h>
#include <unistd.h>
#include <vector>

#include <event2/event.h>

#include "switch_rdma/context.hpp"
#include "switch_rdma/layout.hpp"
#include "switch_rdma/pool.hpp"
#include "switch_rdma/pool_config.hpp"

namespace storm::rdma {

struct Pool::Client {
    int fd = -1;
    event *ev = nullptr;
    uid_t uid = 0;
    pid_t pid = 0;
    // Set once the client attached as a task.
    bool task = false;
    uint32_t ctx = 0;
    uint32_t local = 0;
    uint32_t rank = 0;
};

struct Pool::Window {
    Context ctx;
    uint32_t local_tasks = 0;
    TaskShare share;
    int memfd = -1;
    uint8_t *base = nullptr;
    uint64_t bytes = 0;
    bool resident = false;
    bool pinned = false; // locked in memory: from its first task's attach on
    // Pinning in slices on the loop (Pool::pin_some): bytes locked so far,
    // and the timer that locks the next slice (null when none is due).
    uint64_t pinned_bytes = 0;
    event *pin_timer = nullptr;
    bool failed = false;
    std::string unusable; // why its tasks cannot communicate (no window)
    // Swapped contexts: where the context is in the switch protocol.
    //  out      in its backing store, halted at `epoch`
    //  halted   in the pool, halted at `epoch`, waiting for a release
    //  halting  in the pool, halt{epoch} sent, `waiting` tasks to answer
    //  running  in the pool, released (divided contexts always are)
    enum class State { out, halted, halting, running } state = State::running;
    uint64_t epoch = 0;       // of its last halt (1 before the first release)
    std::set<int> waiting;    // tasks (fds) whose halt the switch waits for
    std::set<int> halted_fds; // tasks (fds) halted at `epoch`
    std::chrono::steady_clock::time_point halt_sent{};
    std::set<int> not_ready; // tasks (fds) that have not answered release
    std::chrono::steady_clock::time_point release_sent{};
    std::vector<std::string> backing; // per share, while not resident
    std::map<uint32_t, int> attached; // local index -> client fd
    // A swap-out waiting for its tasks' threads to stop (wait_stopped()):
    // the timer, when it gives up, and its next delay (0: not waiting).
    Pool *pool = nullptr;
    event *stop_timer = nullptr;
    std::chrono::steady_clock::time_point stop_until{};
    uint32_t stop_delay_us = 0;
    QueueHeader *header(uint32_t local) const
    {
        return reinterpret_cast<QueueHeader *>(base + uint64_t{local} * share.bytes);
    }
    ~Window()
    {
        if (stop_timer)
            event_free(stop_timer);
        if (pin_timer)
            event_free(pin_timer);
        if (base)
            munmap(base, bytes);
        if (memfd >= 0)
            ::close(memfd);
    }
};

namespace pool_detail {

// Microseconds since `t0`, clamped to [0, UINT32_MAX].
inline uint32_t micros_since(std::chrono::steady_clock::time_point t0)
{
    auto d =
        std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0).count();
    return d < 0 ? 0 : d > UINT32_MAX ? UINT32_MAX : static_cast<uint32_t>(d);
}

// "<job>.<step>" of a context, as the log lines name it.
inline std::string step_name(const Context &c)
{
    return std::to_string(c.job_id) + "." + std::to_string(c.step_id);
}

} // namespace pool_detail

} // namespace storm::rdma
