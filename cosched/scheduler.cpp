#include "cosched/scheduler.hpp"

#include <algorithm>
#include <stdexcept>

namespace storm::cosched {

Scheduler::Scheduler(std::chrono::microseconds slice, std::chrono::microseconds gmet, Now now)
    : slice_(slice), gmet_(gmet), now_(std::move(now))
{
    if (slice_.count() <= 0 || gmet_.count() < 0 || gmet_ > slice_)
        throw std::invalid_argument("cosched: the slice must be positive and the GMET within it");
    next_tick_ = now_() + slice_;
}

void Scheduler::charge(Clock::time_point now)
{
    if (current_ && now > charged_at_) {
        auto it = jobs_.find(current_);
        if (it != jobs_.end())
            it->second.cpu += std::chrono::duration_cast<std::chrono::microseconds>(now - charged_at_);
    }
    charged_at_ = now;
}

std::chrono::microseconds Scheduler::cpu_time(uint32_t job) const
{
    auto it = jobs_.find(job);
    if (it == jobs_.end())
        return std::chrono::microseconds{0};
    auto t = it->second.cpu;
    if (job == current_) {
        auto now = now_();
        if (now > charged_at_)
            t += std::chrono::duration_cast<std::chrono::microseconds>(now - charged_at_);
    }
    return t;
}

uint32_t Scheduler::least_served() const
{
    uint32_t best = 0;
    const Job *b = nullptr;
    for (const auto &[id, j] : jobs_) {
        if (!b || j.cpu < b->cpu) {
            best = id;
            b = &j;
            continue;
        }
        if (j.cpu > b->cpu)
            continue;
        // Ties: the one waiting longest; the scheduled job is not waiting.
        bool j_waits = id != current_, b_waits = best != current_;
        if ((j_waits && !b_waits) || (j_waits == b_waits && j.waiting_since < b->waiting_since)) {
            best = id;
            b = &j;
        }
    }
    return best;
}

Scheduler::Switch Scheduler::switch_to(uint32_t job, Clock::time_point now)
{
    charge(now);
    Switch s{current_, job};
    if (current_ && current_ != job) {
        auto it = jobs_.find(current_);
        if (it != jobs_.end())
            it->second.waiting_since = now;
    }
    current_ = job;
    scheduled_at_ = now;
    request_pending_ = 0;
    timer_pending_ = false;
    ++stats_.switches;
    return s;
}

std::optional<Scheduler::Switch> Scheduler::add(uint32_t job)
{
    if (!job || jobs_.count(job))
        return std::nullopt;
    auto now = now_();
    charge(now);
    Job j;
    j.waiting_since = now;
    if (!jobs_.empty()) {
        j.cpu = jobs_.begin()->second.cpu;
        for (const auto &[id, o] : jobs_)
            j.cpu = std::min(j.cpu, o.cpu);
    }
    jobs_[job] = j;
    if (!current_)
        return switch_to(job, now);
    return std::nullopt;
}

std::optional<Scheduler::Switch> Scheduler::remove(uint32_t job)
{
    auto it = jobs_.find(job);
    if (it == jobs_.end())
        return std::nullopt;
    auto now = now_();
    charge(now);
    jobs_.erase(it);
    if (request_pending_ == job)
        request_pending_ = 0;
    if (current_ != job)
        return std::nullopt;
    current_ = 0;
    if (jobs_.empty()) {
        timer_pending_ = false;
        request_pending_ = 0;
        ++stats_.switches;
        return Switch{job, 0};
    }
    Switch s = switch_to(least_served(), now);
    s.from = job;
    return s;
}

std::optional<Scheduler::Switch> Scheduler::on_timer()
{
    auto now = now_();
    if (now >= next_tick_) {
        // One decision however many periods passed (the loop was busy).
        auto behind = (now - next_tick_) / slice_;
        next_tick_ += slice_ * (behind + 1);
        if (jobs_.size() > 1 || (jobs_.size() == 1 && !current_))
            timer_pending_ = true;
    }
    if (!timer_pending_ && !request_pending_)
        return std::nullopt;
    if (!gmet_passed(now))
        return std::nullopt; // next_deadline() is the GMET's end
    charge(now);
    if (timer_pending_) {
        timer_pending_ = false;
        request_pending_ = 0;
        uint32_t next = least_served();
        if (!next || next == current_)
            return std::nullopt;
        ++stats_.timer_switches;
        return switch_to(next, now);
    }
    uint32_t job = request_pending_;
    request_pending_ = 0;
    if (!jobs_.count(job) || job == current_)
        return std::nullopt;
    ++stats_.request_switches;
    return switch_to(job, now);
}

std::optional<Scheduler::Switch> Scheduler::on_request(uint32_t job, Sender sender)
{
    if (!jobs_.count(job) || job == current_) {
        ++stats_.ignored;
        return std::nullopt;
    }
    if (sender == Sender::not_scheduled) {
        ++stats_.false_requests;
        return std::nullopt;
    }
    auto now = now_();
    if (!gmet_passed(now)) {
        request_pending_ = job;
        ++stats_.deferred;
        return std::nullopt;
    }
    ++stats_.request_switches;
    return switch_to(job, now);
}

Scheduler::Clock::time_point Scheduler::next_deadline() const
{
    if ((timer_pending_ || request_pending_) && current_)
        return std::min(next_tick_, scheduled_at_ + gmet_);
    return next_tick_;
}

} // namespace storm::cosched
