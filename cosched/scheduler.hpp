// The local scheduler's decisions (implicit coscheduling, seed 001 section
// 3): which of the jobs registered on this node is scheduled.  No I/O and
// an injectable clock: cosched/local.hpp applies the decisions.
//
// The paper's requests map to:
//   CMDREG  add(job)            a job's first task on this node registered
//   CMDOUT  remove(job)         its last task unregistered (or died)
//   CMDCSW  on_timer()          the timer daemon's context switch
//   CMDSCH  on_request(job, s)  a task of `job` saw a message arrive from
//                               a sender whose job was scheduled (s) or not
//
// Rules:
//  - CPU time: the scheduled job is charged the wall time it holds the
//    node (it gets nearly all the CPU).  A job registered later starts
//    with the least CPU time of the registered ones (as CFS's min_vruntime),
//    so it neither starves the others nor waits a lifetime.
//  - The first job registered on an idle node is scheduled at once; when
//    the scheduled job leaves, the one with the least CPU time follows at
//    once.  Neither waits for a GMET.
//  - Timer: every `slice` (a fixed period since construction, not since the
//    last switch, so that message-driven switches cannot postpone it) the
//    job with the least CPU time received is picked, ties going to the one
//    waiting longest; the scheduled job is charged first, so it is picked
//    again only if it still has the least.  Because the pick is always the
//    least-served job, no job starves.
//  - GMET: a job is never preempted (by the timer or a request) before it
//    ran `gmet` since it was scheduled.  A timer tick or a request that
//    comes earlier is remembered and decided when the GMET ends (the
//    timer's pick wins over a request then; a later request replaces an
//    earlier one).  next_deadline() says when to call on_timer() again.
//  - Requests: a request for a job that is not scheduled switches to it
//    only if its sender's job was scheduled (Sender::scheduled) or its
//    status is unknown (Sender::unknown: the PMPI hooks cannot see it; see
//    cosched/README.md).  A request whose sender was not scheduled is a
//    false request (its peer ran on its 1% share) and never preempts.
//
// Contract: single-threaded.  Decisions are returned as Switch values
// (from = 0 when nothing was scheduled, to = 0 when nothing is now); the
// caller applies them.  Job ids are Slurm's, never 0.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>

namespace storm::cosched {

enum class Sender : uint8_t { not_scheduled = 0, scheduled = 1, unknown = 2 };

class Scheduler {
public:
    using Clock = std::chrono::steady_clock;
    using Now = std::function<Clock::time_point()>;

    struct Switch {
        uint32_t from = 0;
        uint32_t to = 0;
    };
    struct Stats {
        uint64_t switches = 0, timer_switches = 0, request_switches = 0;
        uint64_t false_requests = 0, deferred = 0, ignored = 0;
    };

    Scheduler(std::chrono::microseconds slice, std::chrono::microseconds gmet, Now now = Clock::now);

    // A job's first task registered; returns the switch to it when the node
    // was idle.  Adding a known job does nothing.
    std::optional<Switch> add(uint32_t job);
    // Its last task left; returns the switch away from it if it was
    // scheduled (to the least-served job, or to 0).
    std::optional<Switch> remove(uint32_t job);
    // The timer fired (at or after next_deadline()); a deferred decision
    // whose GMET ended is taken here too.
    std::optional<Switch> on_timer();
    // A message-driven schedule request from a task of `job`.
    std::optional<Switch> on_request(uint32_t job, Sender sender);

    // When on_timer() has something to do next: the next tick, or the end
    // of the GMET when a decision waits for it.
    Clock::time_point next_deadline() const;

    uint32_t scheduled() const noexcept { return current_; }
    bool registered(uint32_t job) const { return jobs_.count(job) != 0; }
    size_t jobs() const noexcept { return jobs_.size(); }
    // CPU time received so far (the scheduled job's charged up to now).
    std::chrono::microseconds cpu_time(uint32_t job) const;
    const Stats &stats() const noexcept { return stats_; }

private:
    struct Job {
        std::chrono::microseconds cpu{0};
        Clock::time_point waiting_since; // when it last lost (or never had) the node
    };
    void charge(Clock::time_point now);
    uint32_t least_served() const;
    Switch switch_to(uint32_t job, Clock::time_point now);
    bool gmet_passed(Clock::time_point now) const { return !current_ || now >= scheduled_at_ + gmet_; }

    std::chrono::microseconds slice_, gmet_;
    Now now_;
    std::map<uint32_t, Job> jobs_;
    uint32_t current_ = 0;
    Clock::time_point scheduled_at_{}, charged_at_{}, next_tick_{};
    bool timer_pending_ = false;
    uint32_t request_pending_ = 0;
    Stats stats_;
};

} // namespace storm::cosched
