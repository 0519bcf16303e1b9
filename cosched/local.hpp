// The local scheduler of implicit coscheduling (seed 001): a component on
// the node agent's loop.
//
// It joins the three parts:
//  - the request channel (channel.hpp): tasks register at MPI_Init (the
//    PMPI library, or libstormmsg), report message arrivals, unregister at
//    MPI_Finalize or by dying (their connection closes);
//  - the decisions (scheduler.hpp): a job is registered while at least one
//    of its tasks is; the timer runs at the scheduler's next_deadline();
//  - the enforcement (enforcer.hpp): at each switch the leaving job drops
//    to its small share and the arriving one gets the CPU; each registered
//    task is told its job's new status (STATUS), which libstormmsg prefixes
//    to what it sends.
//
// Contract: constructed and destroyed on (or before the start of) the loop
// thread; start() throws if the socket cannot be bound.  The destructor
// closes the channel and releases every job (no job stays throttled).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "cosched/channel.hpp"
#include "cosched/config.hpp"
#include "cosched/enforcer.hpp"
#include "cosched/scheduler.hpp"
#include "lib/common/log.hpp"

struct event_base;
struct event;

namespace storm::cosched {

struct LocalSetup {
    std::string socket_path; // <SlurmdSpoolDir>/storm-cosched.sock
    // Where the statistics go (rewritten whole at most once a second when
    // they changed, removed at stop); empty: none.  Lines "key value":
    // scheduled, switches, timer_switches, request_switches,
    // false_requests, early, tick_held, ignored, then one line per registered job:
    // "job <id> tasks <n> cpu_ms <CPU time received> scheduled <0|1>".
    std::string stats_path;
    CoschedConfig config;
    Verifier verifier;      // make_verifier(...) in the agent
    EnforcerSetup enforcer; // share_percent is taken from config
    // Tests: their own enforcer and clock (default: make_enforcer, steady).
    std::function<std::unique_ptr<Enforcer>()> make_enforcer;
    Scheduler::Now now;
};

class Local : private Channel::Handler {
public:
    // `log`: the component's logger (the node agent's); the scheduler's
    // lines add "cosched: ", as do its channel's and enforcer's.
    Local(event_base *base, LocalSetup setup, Logger log);
    ~Local() override;
    Local(const Local &) = delete;
    Local &operator=(const Local &) = delete;

    void start();

    const Scheduler &scheduler() const noexcept { return sched_; }
    const Channel &channel() const noexcept { return *channel_; }
    const Enforcer &enforcer() const noexcept { return *enforcer_; }
    size_t tasks(uint32_t job) const;

private:
    bool on_register(int conn, pid_t pid, uint32_t job, uint32_t rank,
                     const std::vector<pid_t> &procs) override;
    void on_unregister(int conn, pid_t pid, uint32_t job) override;
    void on_schedule(int conn, uint32_t job, uint32_t rank, Sender sender, uint32_t count) override;
    void apply(const std::optional<Scheduler::Switch> &s, const char *why);
    void notify(uint32_t job, bool scheduled);
    void arm();
    static void on_timer(int, short, void *arg);
    static void on_stats_timer(int, short, void *arg);
    void write_stats();

    event_base *base_;
    LocalSetup setup_;
    Logger log_;       // the scheduler's lines: "cosched: "
    Logger parts_log_; // as given, for the channel and the enforcer, which name themselves
    Scheduler sched_;
    std::unique_ptr<Enforcer> enforcer_;
    std::unique_ptr<Channel> channel_;
    event *timer_ = nullptr;
    event *stats_timer_ = nullptr;
    bool stats_dirty_ = true;
    std::map<uint32_t, std::set<int>> jobs_; // job -> its tasks' connections
};

} // namespace storm::cosched
