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
//    node (it gets nearly all the CPU), from and to the aligned instants
//    below when the switch was taken at one.  A job registered later
//    starts with the least CPU time of the registered ones (as CFS's
//    min_vruntime), so it neither starves the others nor waits a lifetime.
//    Jobs are compared in whole slices of CPU time: two nodes whose
//    histories differed a little (a job that left, or registered, on
//    either side of a tick) come back to equal counts, where the tie-break
//    below makes them agree again.  Compared to the microsecond, the
//    counts never tie, and two nodes stayed locked in opposite phases for
//    good (measured: three light jobs per node took minutes instead of
//    10 s).
//  - Every decision but a request's is taken at an instant aligned on the
//    wall clock (whenever the timer really fired): nodes whose clocks are
//    synchronised (NTP, as on any
//    cluster) and that hold the same jobs then take the same decisions at
//    the same moments, which coschedules those jobs with no message at all.
//    An implicit scheduler that picks at registration or on arrival
//    instead locked two nodes in opposite phases (vn1 running A while vn2
//    ran B, then the reverse at every tick; bench-cosched measured 1.4x
//    slower than uncoordinated sharing).
//  - Timer: at every multiple of `slice` the job with the least CPU time
//    is picked; among equals, the one at (the tick's number since the
//    epoch) modulo (how many are equal), in job id order: the same on every
//    node, and each in turn.  The scheduled job is charged first, so it is
//    picked again only if it still has the least.  Because the pick is
//    always the least-served job, no job starves.
//  - Start: a job that registers on a node where none is scheduled is
//    picked at the next multiple of `join` (min(slice, 100 ms)) on the wall
//    clock, as the least served of those registered then; likewise when
//    the scheduled job leaves.  Meanwhile the jobs share the CPU evenly (no
//    job holds the big share), so nobody waits idle.
//  - GMET: a job is never preempted (by the timer or a request) before it
//    ran `gmet` since it was scheduled.  A tick that comes earlier is
//    decided when the GMET ends.  A request that comes earlier is dropped
//    (counted in `early`), as in the paper: the arrivals reported just
//    after a switch were sent before it.
//  - Requests: a request for a job that is not scheduled switches to it at
//    once (GMET permitting) if its sender's job was scheduled
//    (Sender::scheduled).  A request whose sender was not scheduled is a
//    false request (its peer ran on its small share) and never preempts.
//    A request whose sender's status is unknown (Sender::unknown: the PMPI
//    hooks cannot see it; see cosched/README.md) may be either, and the
//    unscheduled jobs' ranks report arrivals all the time: it switches only
//    away from a job that a request scheduled, never from one picked at an
//    aligned instant (counted in `tick_held`).
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
        uint64_t false_requests = 0, early = 0, ignored = 0, tick_held = 0;
    };

    // wall: the wall clock as time since the epoch (the instants are its
    // multiples); default: now's own time since its epoch (tests).  Read
    // once: later instants follow the steady clock.
    using Wall = std::function<std::chrono::microseconds()>;
    Scheduler(std::chrono::microseconds slice, std::chrono::microseconds gmet, Now now = Clock::now,
              Wall wall = nullptr);

    // A job's first task registered (it is picked at an aligned instant,
    // never here).  Adding a known job does nothing.
    void add(uint32_t job);
    // Its last task left; returns the switch away from it (to 0) if it was
    // scheduled: the next job is picked at the next aligned instant.
    std::optional<Switch> remove(uint32_t job);
    // The timer fired (at or after next_deadline()): the start pick, the
    // tick, or a tick that came during the GMET.
    std::optional<Switch> on_timer();
    // A message-driven schedule request from a task of `job`.
    std::optional<Switch> on_request(uint32_t job, Sender sender);

    // When on_timer() has something to do next: the next tick, the start
    // pick, or the end of the GMET when a tick waits for it.
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
    };
    void charge(Clock::time_point at);
    // The least served job; ties broken by the number of the slice `at`
    // falls in (the same on every node).
    uint32_t least_served(Clock::time_point at) const;
    Switch switch_to(uint32_t job, Clock::time_point at);
    bool gmet_passed(Clock::time_point now) const { return !current_ || now >= scheduled_at_ + gmet_; }
    // The next multiple of `period` on the wall clock, as a steady time.
    Clock::time_point next_multiple(Clock::time_point now, std::chrono::microseconds period) const;

    std::chrono::microseconds slice_, gmet_, join_;
    Now now_;
    Wall wall_;
    std::map<uint32_t, Job> jobs_;
    uint32_t current_ = 0;
    Clock::time_point epoch_{}; // steady time of wall-clock 0
    Clock::time_point scheduled_at_{}, charged_at_{}, next_tick_{};
    std::optional<Clock::time_point> start_at_; // the start pick's instant
    std::optional<Clock::time_point> tick_at_;  // a tick waiting for the GMET
    bool by_request_ = false;                   // the scheduled job came by a request
    Stats stats_;
};

} // namespace storm::cosched
