#include "cosched/local.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include <event2/event.h>

#include "lib/common/files.hpp"
#include "lib/common/timeval.hpp"

namespace storm::cosched {

Local::Local(event_base *base, LocalSetup setup, Logger log)
    : base_(base), setup_(std::move(setup)), log_(log.child("cosched")), parts_log_(std::move(log)),
      sched_(setup_.config.slice, setup_.config.gmet,
             setup_.now ? setup_.now : Scheduler::Now(Scheduler::Clock::now),
             setup_.now ? Scheduler::Wall(nullptr) : Scheduler::Wall([] {
                 return std::chrono::duration_cast<std::chrono::microseconds>(
                     std::chrono::system_clock::now().time_since_epoch());
             }))
{
    setup_.enforcer.share_percent = setup_.config.share_percent;
}

Local::~Local()
{
    if (timer_)
        event_free(timer_);
    if (stats_timer_)
        event_free(stats_timer_);
    if (!setup_.stats_path.empty())
        remove_file(setup_.stats_path);
    channel_.reset();  // closes every task's connection, no callbacks
    enforcer_.reset(); // gives every process back its CPU
}

void Local::start()
{
    enforcer_ = setup_.make_enforcer ? setup_.make_enforcer() : make_enforcer(setup_.enforcer, parts_log_);
    channel_ = std::make_unique<Channel>(base_, setup_.socket_path, setup_.verifier,
                                         static_cast<Channel::Handler &>(*this), parts_log_);
    channel_->start();
    timer_ = evtimer_new(base_, on_timer, this);
    if (!timer_)
        throw std::runtime_error("cosched: cannot create its timer");
    arm();
    if (!setup_.stats_path.empty()) {
        stats_timer_ = event_new(base_, -1, EV_PERSIST, on_stats_timer, this);
        timeval one{1, 0};
        if (!stats_timer_ || event_add(stats_timer_, &one) != 0)
            throw std::runtime_error("cosched: cannot create its statistics timer");
        write_stats();
    }
    std::string parts;
    for (const auto &p : setup_.config.partitions)
        parts += (parts.empty() ? "" : ",") + p;
    log_.info("local scheduler for partitions %s: slice %s, GMET %s, %u%% to unscheduled jobs (%s), "
              "requests on %s",
              parts.c_str(), format_duration_us(static_cast<uint64_t>(setup_.config.slice.count())).c_str(),
              format_duration_us(static_cast<uint64_t>(setup_.config.gmet.count())).c_str(),
              setup_.config.share_percent, enforcer_->name(), setup_.socket_path.c_str());
}

size_t Local::tasks(uint32_t job) const
{
    auto it = jobs_.find(job);
    return it == jobs_.end() ? 0 : it->second.size();
}

bool Local::on_register(int conn, pid_t pid, uint32_t job, uint32_t rank, const std::vector<pid_t> &procs)
{
    bool first = !jobs_.count(job);
    jobs_[job].insert(conn);
    if (first) {
        sched_.add(job); // picked at an aligned instant, never here
        stats_dirty_ = true;
    }
    std::vector<pid_t> all = procs;
    if (std::find(all.begin(), all.end(), pid) == all.end())
        all.push_back(pid);
    enforcer_->attach(job, all, sched_.scheduled() == job);
    arm();
    return sched_.scheduled() == job;
}

void Local::on_unregister(int conn, pid_t pid, uint32_t job)
{
    auto it = jobs_.find(job);
    if (it == jobs_.end())
        return;
    it->second.erase(conn);
    if (!it->second.empty())
        return;
    jobs_.erase(it);
    sched_.remove(job); // the next job is picked at the next aligned instant
    enforcer_->release(job);
    stats_dirty_ = true;
    log_.verbose("job %u left (its last task, pid %d, unregistered)", job, pid);
    arm();
}

void Local::on_schedule(int conn, uint32_t job, uint32_t rank, Sender sender, uint32_t count)
{
    apply(sched_.on_request(job, sender), "a message arrival");
    arm();
}

void Local::apply(const std::optional<Scheduler::Switch> &s, const char *why)
{
    stats_dirty_ = true; // requests count even when they switch nothing
    if (!s || s->from == s->to)
        return;
    if (s->from && jobs_.count(s->from)) {
        enforcer_->set_scheduled(s->from, false);
        notify(s->from, false);
    }
    if (s->to && jobs_.count(s->to)) {
        enforcer_->set_scheduled(s->to, true);
        notify(s->to, true);
    }
    log_.verbose("switched from job %u to job %u (%s)", s->from, s->to, why);
}

void Local::notify(uint32_t job, bool scheduled)
{
    auto it = jobs_.find(job);
    if (it != jobs_.end())
        for (int conn : it->second)
            channel_->send_status(conn, scheduled);
}

void Local::arm()
{
    if (!timer_)
        return;
    auto now = setup_.now ? setup_.now() : Scheduler::Clock::now();
    timeval tv =
        to_timeval(std::chrono::duration_cast<std::chrono::microseconds>(sched_.next_deadline() - now));
    evtimer_add(timer_, &tv);
}

void Local::on_timer(int, short, void *arg)
{
    auto *self = static_cast<Local *>(arg);
    self->apply(self->sched_.on_timer(), "the timer");
    self->arm();
}

void Local::on_stats_timer(int, short, void *arg)
{
    auto *self = static_cast<Local *>(arg);
    self->enforcer_->retry();
    // The scheduled job's CPU time grows while nothing else changes.
    if (self->stats_dirty_ || self->sched_.scheduled())
        self->write_stats();
}

void Local::write_stats()
{
    const auto &st = sched_.stats();
    std::string t = "scheduled " + std::to_string(sched_.scheduled()) + "\nswitches " +
                    std::to_string(st.switches) + "\ntimer_switches " + std::to_string(st.timer_switches) +
                    "\nrequest_switches " + std::to_string(st.request_switches) + "\nfalse_requests " +
                    std::to_string(st.false_requests) + "\nearly " + std::to_string(st.early) +
                    "\ntick_held " + std::to_string(st.tick_held) + "\nignored " +
                    std::to_string(st.ignored) + "\n";
    for (const auto &[job, conns] : jobs_)
        t += "job " + std::to_string(job) + " tasks " + std::to_string(conns.size()) + " cpu_ms " +
             std::to_string(sched_.cpu_time(job).count() / 1000) + " scheduled " +
             (sched_.scheduled() == job ? "1" : "0") + "\n";
    if (!replace_file(setup_.stats_path, t, 0644, Spare::keep)) {
        if (stats_dirty_) // once per change, not every second
            log_.error("cannot write %s: %s", setup_.stats_path.c_str(), std::strerror(errno));
    }
    stats_dirty_ = false;
}

} // namespace storm::cosched
