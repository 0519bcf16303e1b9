// Implicit coscheduling's hooks in libstormmsg (cosched/README.md, seed 001
// section 3): a task's connection to its node's local scheduler and the
// decisions its progress thread makes on each arrival.
//
// Contract:
//  - Cosched(rank, timeout) runs in storm_msg_init(), before the task
//    attaches to its context.  With STORM_COSCHED_SOCKET in the environment
//    it connects there (SOCK_SEQPACKET, lib/node/cosched_protocol.h), REGISTERs for
//    job SLURM_JOB_ID as `rank`, and waits up to `timeout` seconds for the
//    answer: OK gives the job's status.  Anything else (no SLURM_JOB_ID, no
//    agent, ERROR, no or a strange answer) prints one line on stderr,
//    "storm_msg: implicit coscheduling refused for rank R of job J: <the
//    agent's reason> (messaging continues without it)" or "storm_msg:
//    implicit coscheduling off for rank R of job J: <why>", and leaves the
//    task uncoscheduled: status() is unknown (2), nothing is ever sent.
//    Without STORM_COSCHED_SOCKET nothing is printed, nothing changes.
//  - The progress thread (only it, between init and the end) calls
//    read_status() (the agent's STATUS pushes, non-blocking), arrived() for
//    every data frame with its sender's status byte, and send_due(): at
//    most one SCHEDULE per interval (STORM_COSCHED_INTERVAL_US, default
//    10 ms), never while the job is scheduled, standing for every counted
//    arrival since the last one.  It never blocks on the socket: a full
//    socket keeps the arrivals for the next request.  A broken connection
//    or a malformed message from the agent turns coscheduling off (one line
//    on stderr); the messaging is never failed by it.
//  - status() (any thread): the byte every frame carries.
//  - end() after the progress thread stopped (finalize, or a failed init):
//    UNREGISTER and close.  A task that dies is unregistered by the kernel
//    closing its connection.
// Decisions (Requests, without I/O), for a data frame from rank src whose
// status byte is s, while this task's job is not scheduled:
//    s = 1 (scheduled)      counted: a SCHEDULE with status 1, rank src
//    s = 2 (unknown)        counted: status 2 (the agent takes it as
//                           scheduled, as for the PMPI library: a sender
//                           that is not coscheduled runs all the time)
//    s = 0 (not scheduled)  a false arrival: counted in the statistics,
//                           never sent.  The agent would ignore a status-0
//                           request anyway (it never preempts); deciding
//                           here, as the paper does, saves the send and the
//                           agent's wake-up on the arrivals that are most
//                           frequent while a job is descheduled.
// While the job is scheduled arrivals are not counted, and a STATUS push
// that says scheduled forgets the pending ones.  One request merges
// arrivals: its status is 1 if any of them came from a scheduled sender
// (else 2), its rank the last such sender, its count all of them.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

#include "switch_rdma/msg/frames.hpp"

namespace storm::rdma::msg {

// The batching of requests, without I/O (progress thread only).
class CoschedRequests {
public:
    using Clock = std::chrono::steady_clock;
    struct Request {
        uint8_t status = status_unknown;
        uint32_t rank = 0;
        uint32_t count = 0;
    };
    enum class Arrival { ignored, counted, false_arrival };

    explicit CoschedRequests(std::chrono::microseconds interval, Clock::time_point now)
        : interval_(interval), last_(now - interval)
    {
    }

    // A data frame from `src` with status byte `sender` while this job is
    // scheduled or not.
    Arrival arrived(uint32_t src, uint8_t sender, bool scheduled)
    {
        if (scheduled)
            return Arrival::ignored;
        if (sender == status_not_scheduled)
            return Arrival::false_arrival;
        if (!pending_.count || (sender == status_scheduled && pending_.status != status_scheduled)) {
            pending_.status = sender;
            pending_.rank = src;
        } else if (sender == pending_.status) {
            pending_.rank = src;
        }
        if (pending_.count < UINT32_MAX)
            ++pending_.count;
        return Arrival::counted;
    }
    // The job became scheduled (pending arrivals are forgotten) or not.
    void status_changed(bool scheduled)
    {
        if (scheduled)
            pending_ = Request{};
    }
    uint32_t pending() const noexcept { return pending_.count; }
    // Whether a request may go at `now` (something pending, the interval
    // since the last attempt passed).
    bool due(Clock::time_point now) const { return pending_.count && now - last_ >= interval_; }
    const Request &request() const noexcept { return pending_; }
    // The request went out (true) or found the socket full (false: kept,
    // retried after the interval).
    void attempted(Clock::time_point now, bool sent)
    {
        last_ = now;
        if (sent)
            pending_ = Request{};
    }
    // Until the next request may go (zero if one is due), or `none` when
    // nothing is pending.
    Clock::duration wait(Clock::time_point now, Clock::duration none) const
    {
        if (!pending_.count)
            return none;
        auto left = last_ + interval_ - now;
        return left < Clock::duration::zero() ? Clock::duration::zero() : left;
    }

private:
    std::chrono::microseconds interval_;
    Clock::time_point last_;
    Request pending_;
};

struct CoschedStats {
    std::atomic<uint64_t> status_pushes{0}, arrivals{0}, false_arrivals{0}, requests{0}, requests_deferred{0};
    std::atomic<uint32_t> pending{0};
};

class Cosched {
public:
    using Clock = CoschedRequests::Clock;

    Cosched(uint32_t rank, int timeout_s);
    ~Cosched();
    Cosched(const Cosched &) = delete;
    Cosched &operator=(const Cosched &) = delete;

    bool on() const noexcept { return fd_ >= 0; }
    int fd() const noexcept { return fd_; }
    uint8_t status() const noexcept { return status_.load(std::memory_order_relaxed); }
    const CoschedStats &stats() const noexcept { return stats_; }

    // progress thread
    void read_status() noexcept;
    void arrived(uint32_t src, uint8_t sender) noexcept;
    void send_due(Clock::time_point now) noexcept;
    // Milliseconds the progress thread may sleep before send_due() has
    // something to do (at most `most`).
    int wait_ms(Clock::time_point now, int most) const noexcept;

    void end() noexcept;

private:
    void enroll(const char *path, int timeout_s); // connect, REGISTER, the answer
    void say(const std::string &what) const noexcept;
    void off(const std::string &why) noexcept;
    void set_status(bool scheduled) noexcept;

    uint32_t rank_;
    uint32_t job_ = 0;
    int fd_ = -1;
    std::atomic<uint8_t> status_{status_unknown};
    CoschedRequests requests_;
    CoschedStats stats_;
};

} // namespace storm::rdma::msg
