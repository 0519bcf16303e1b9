// The step's own fail-safe, in slurmstepd: a job the node agent stopped
// must not stay stopped because the agent (slurmd) died and is not back.
//
// The agent's own fail-safe (no strobe for storm_gang_failsafe: continue
// everything) runs inside slurmd, so it dies with it: a slurmd killed, or
// crashed, while a job of the gang matrix was frozen or stopped on its node
// would leave that job stopped until slurmd started again.  Each step's
// slurmstepd therefore watches the agent that switches its job: the agent
// records who it is (`<journal_dir>/agent`: slurmd's pid, its start time,
// the fail-safe time) beside its journal of switched jobs
// (`<journal_dir>/jobs`).  Once the journal lists the step's job and the
// recorded process has been gone for the fail-safe time, the guard
// continues the step's processes, once per outage.  An agent started again
// rewrites both files and takes the job back (it continues what its
// predecessor stopped, then switches again); a clean stop removes them.
//
// Threading: a StepGuard owns one thread, which polls every `poll` and
// calls `resume` from it; the destructor stops and joins it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <sys/types.h>
#include <thread>

#include "lib/common/log.hpp"

namespace storm::gang {

// What the agent records of itself beside its journal.
struct AgentRecord {
    pid_t pid = 0;
    unsigned long long start = 0; // /proc/PID/stat's starttime (clock ticks since boot)
    uint32_t failsafe_ms = 0;
};
constexpr const char *kAgentRecord = "agent";
// The journal: the ids of the jobs the agent switches, one per line.
constexpr const char *kJournal = "jobs";

// "PID START FAILSAFE_MS\n".
std::string format_agent_record(const AgentRecord &r);
// Parses it; nullopt if malformed.
std::optional<AgentRecord> parse_agent_record(const std::string &text);
// This process's record.
AgentRecord own_agent_record(uint32_t failsafe_ms);
// Whether the process `r` names runs (the same pid and start time).
bool agent_alive(const AgentRecord &r);
// The jobs a journal's text lists (up to anything that is not an id).
std::set<uint32_t> journal_jobs(const std::string &journal);

// Jobs Slurm suspended (scontrol suspend).  From pre_suspend to post_resume
// (or the step's end), each step's slurmstepd marks its step
// (`<journal_dir>/suspended.<job>.<step>`, holding its own record: pid and
// start time): Slurm's SIGSTOP holds it.  The agent's fail-safes (a new
// agent continuing what its predecessor stopped, no strobe for the
// fail-safe time, the agent stopping) leave such a job's processes stopped
// (a freezer group is still thawed: Slurm's stop holds inside it) for
// Slurm to resume: the table that would tell the agent may not have come
// yet.  A mark whose slurmstepd is gone counts for nothing and is removed.
std::string suspended_mark_name(uint32_t job, uint32_t step);
// Writes (`on`) or removes this process's mark of job.step in `dir`.
// False with errno set if it could not be written.
bool mark_suspended(const std::string &dir, uint32_t job, uint32_t step, bool on);
// The jobs a live slurmstepd marked a step of in `dir` (one pass over it).
std::set<uint32_t> suspended_by_slurm(const std::string &dir);

// The guard's decision, apart from its thread and files.
class GuardState {
public:
    // One observation: whether the journal lists the job, whether its
    // agent runs, that agent's fail-safe time.  True when the step must be
    // continued now: listed, and no live agent for the fail-safe time
    // since it was last seen alive (or since the guard started).  Once per
    // outage: true again only after an agent was seen alive again.
    bool observe(std::chrono::steady_clock::time_point now, bool listed, bool alive,
                 std::chrono::milliseconds failsafe);

private:
    std::optional<std::chrono::steady_clock::time_point> gone_since_;
    bool resumed_ = false;
};

struct StepGuardConfig {
    std::string journal_dir; // the agent's (SlurmdSpoolDir/storm-gang)
    uint32_t job = 0;
    std::string step; // "J.S", for messages
    std::chrono::milliseconds poll{250};
};

class StepGuard {
public:
    // `resume` continues the step's processes and returns how many it
    // continued; it runs on the guard's thread.  `log`: the component's
    // logger (slurmstepd's switch/rdma); the guard's lines add "gang: ".
    StepGuard(StepGuardConfig cfg, std::function<size_t()> resume, Logger log);
    ~StepGuard();
    StepGuard(const StepGuard &) = delete;
    StepGuard &operator=(const StepGuard &) = delete;

    // How many times the guard continued the step.
    unsigned resumes() const noexcept;

private:
    void run() noexcept;

    StepGuardConfig cfg_;
    std::function<size_t()> resume_;
    Logger log_;
    mutable std::mutex mu_;
    std::condition_variable cv_;
    bool stop_ = false;
    unsigned resumes_ = 0;
    std::thread thread_;
};

} // namespace storm::gang
