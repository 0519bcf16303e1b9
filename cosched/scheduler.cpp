#include "cosched/scheduler.hpp"

#include <algorithm>
#include <stdexcept>
#include <vector>

namespace storm::cosched {

Scheduler::Scheduler(std::chrono::microseconds slice, std::chrono::microseconds gmet, Now now, Wall wall)
    : slice_(slice), gmet_(gmet), join_(std::min(slice, std::chrono::microseconds{100000})),
      now_(std::move(now)), wall_(std::move(wall))
{
    if (slice_.count() <= 0 || gmet_.count() < 0 || gmet_ > slice_)
        throw std::invalid_argument("cosched: the slice must be positive and the GMET within it");
    auto t = now_();
    auto w = wall_ ? wall_() : std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch());
    epoch_ = t - w;
    next_tick_ = next_multiple(t, slice_);
}

Scheduler::Clock::time_point Scheduler::next_multiple(Clock::time_point now,
                                                      std::chrono::microseconds period) const
{
    auto w = std::chrono::duration_cast<std::chrono::microseconds>(now - epoch_);
    return now + (period - w % period);
}

void Scheduler::charge(Clock::time_point at)
{
    if (current_ && at > charged_at_) {
        auto it = jobs_.find(current_);
        if (it != jobs_.end())
            it->second.cpu += std::chrono::duration_cast<std::chrono::microseconds>(at - charged_at_);
    }
    if (at > charged_at_ || !current_)
        charged_at_ = at;
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

uint32_t Scheduler::least_served(Clock::time_point at) const
{
    std::vector<uint32_t> least; // in id order (jobs_ is ordered)
    int64_t min = 0;
    for (const auto &[id, j] : jobs_) {
        int64_t slices = j.cpu / slice_; // whole slices: see the header
        if (least.empty() || slices < min) {
            least.assign(1, id);
            min = slices;
        } else if (slices == min)
            least.push_back(id);
    }
    if (least.empty())
        return 0;
    auto n = std::chrono::duration_cast<std::chrono::microseconds>(at - epoch_) / slice_;
    return least[static_cast<size_t>(n % static_cast<int64_t>(least.size()))];
}

Scheduler::Switch Scheduler::switch_to(uint32_t job, Clock::time_point at)
{
    charge(at);
    Switch s{current_, job};
    current_ = job;
    scheduled_at_ = at;
    charged_at_ = at;
    tick_at_.reset();
    start_at_.reset();
    by_request_ = false;
    ++stats_.switches;
    return s;
}

void Scheduler::add(uint32_t job)
{
    if (!job || jobs_.count(job))
        return;
    // The least CPU time of the others.
    Job j;
    bool first = true;
    for (const auto &[id, o] : jobs_) {
        j.cpu = first ? o.cpu : std::min(j.cpu, o.cpu);
        first = false;
    }
    jobs_[job] = j;
    if (!current_ && !start_at_)
        start_at_ = next_multiple(now_(), join_);
}

std::optional<Scheduler::Switch> Scheduler::remove(uint32_t job)
{
    auto it = jobs_.find(job);
    if (it == jobs_.end())
        return std::nullopt;
    jobs_.erase(it);
    if (current_ != job)
        return std::nullopt;
    current_ = 0;
    tick_at_.reset();
    by_request_ = false;
    ++stats_.switches;
    if (!jobs_.empty())
        start_at_ = next_multiple(now_(), join_);
    return Switch{job, 0};
}

std::optional<Scheduler::Switch> Scheduler::on_timer()
{
    auto now = now_();
    if (now >= next_tick_) {
        // One decision however many periods passed (the loop was busy).
        auto at = next_tick_;
        auto behind = (now - next_tick_) / slice_;
        next_tick_ += slice_ * (behind + 1);
        if (current_ && jobs_.size() > 1)
            tick_at_ = at;
    }
    if (!current_) {
        if (!start_at_ || now < *start_at_ || jobs_.empty())
            return std::nullopt;
        auto at = *start_at_;
        ++stats_.timer_switches;
        return switch_to(least_served(at), at);
    }
    if (!tick_at_ || !gmet_passed(now))
        return std::nullopt; // next_deadline() is the GMET's end
    // Decided at the tick's instant, or at the GMET's end if that is later
    // (the tie-break still counts the tick's slice).
    auto at = std::max(*tick_at_, scheduled_at_ + gmet_);
    charge(at);
    uint32_t next = least_served(*tick_at_);
    tick_at_.reset();
    if (!next)
        return std::nullopt;
    if (next == current_) {
        by_request_ = false; // kept at the tick
        return std::nullopt;
    }
    ++stats_.timer_switches;
    return switch_to(next, at);
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
    if (sender == Sender::unknown && !by_request_) {
        ++stats_.tick_held;
        return std::nullopt;
    }
    auto now = now_();
    if (!gmet_passed(now)) {
        ++stats_.early;
        return std::nullopt;
    }
    ++stats_.request_switches;
    Switch s = switch_to(job, now);
    by_request_ = true;
    return s;
}

Scheduler::Clock::time_point Scheduler::next_deadline() const
{
    auto d = next_tick_;
    if (!current_ && start_at_)
        d = std::min(d, *start_at_);
    if (current_ && tick_at_)
        d = std::min(d, std::max(*tick_at_, scheduled_at_ + gmet_));
    return d;
}

} // namespace storm::cosched
