// switch/rdma's parts, as its entry file calls them: the plugin's state in
// whichever process loaded it, the entry points' bodies common to every
// Slurm API generation (switch_rdma.cpp, namespace entry), the jobinfo's
// encoding (jobinfo.cpp), where slurmd keeps its files (slurmd_conf.cpp),
// and the work of each daemon:
//  - slurmctld.cpp: the table of contexts in use, and its restart;
//  - slurmd.cpp: the node agent, built on Slurm's node table and started;
//  - slurmstepd.cpp: the step's context on the node agent, the launch gate,
//    the gang fail-safes around the step.
//
// The entry file of each API generation (the extern "C" switch_p_* symbols
// Slurm looks up, with that generation's signatures) is
// slurm_adapter/api<GEN>/switch_rdma.cpp; it converts Slurm's arguments and
// calls the functions of namespace entry below, which hold the plugin's
// behaviour once for every generation.
//
// Contract: one SwitchContext per process, made by init() and destroyed by
// fini(); every part takes it by reference.  A part may throw unless it
// returns a Slurm code: the entry file runs the throwing ones inside
// storm::shim::guarded(), so no exception reaches Slurm.
#pragma once

#include "slurm_adapter/shim.hpp"

#include <arpa/inet.h>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>

#include "agent/agent_config.hpp"
#include "agent/node_agent.hpp"
#include "sched_gang/step_guard.hpp"
#include "switch_rdma/context_table.hpp"
#include "switch_rdma/step_context.hpp"

// Slurm's controller and step daemon records (and proctrack), as this
// line's adapter reads them.
#include "slurm_api.hpp"

extern "C" {
#include "src/common/pack.h"
}

namespace storm::plugins::switch_rdma {

namespace slurmd {
class NodeAgentRunner;
} // namespace slurmd

// slurmctld: the contexts in use.  Slurm calls under its job lock; the
// mutex covers libstate_save at shutdown.
struct SlurmctldState {
    std::mutex mu;
    rdma::ContextTable table;
    bool sweep_pending = false;                 // drop stale restored entries at the next step
    std::map<std::string, in_addr_t> addresses; // NodeAddr -> IPv4
};

// slurmstepd: the thread that follows a Slurm suspend where Slurm has no
// suspend hooks (slurmstepd.cpp: watch_suspend); join() stops it.
struct SuspendWatch {
    std::atomic<bool> stop{false};
    std::thread thread;
    void join()
    {
        stop = true;
        if (thread.joinable())
            thread.join();
    }
    ~SuspendWatch() { join(); }
};

// slurmstepd: the context job_init opened on the node agent; the guard that
// continues the step if the gang agent dies and stays away; whether Slurm
// suspended the step (scontrol suspend: its SIGSTOP stays).
struct SlurmstepdState {
    std::optional<rdma::Context> opened;
    std::unique_ptr<gang::StepGuard> guard;
    std::atomic<bool> slurm_suspended{false};
    bool marked = false; // the step's mark for the agent (mark_suspended)
    SuspendWatch watch;  // last: stopped first
};

struct SwitchContext {
    Logger log{"switch/rdma"};
    Logger gang_log{log.child("gang")}; // the step's gang fail-safes
    bool configured = false;            // SwitchType names this plugin
    storm::agent::AgentConfig config;
    std::unique_ptr<slurmd::NodeAgentRunner> agent; // slurmd
    SlurmctldState ctld;
    SlurmstepdState stepd;
};

// A step's switch info: its context, or none.
struct JobInfo {
    static constexpr uint32_t magic_value = 0x53524458; // "SRDX"
    uint32_t magic = magic_value;
    std::optional<rdma::Context> ctx;
};

// Slurm's switch info as ours (null stays null); throws std::logic_error
// for another plugin's.
inline JobInfo *jobinfo_of(void *p)
{
    auto *j = static_cast<JobInfo *>(p);
    if (j && j->magic != JobInfo::magic_value)
        throw std::logic_error("switch info of another plugin");
    return j;
}

// "J.S", as every line about a step names it.
inline std::string step_name(uint32_t job, uint32_t step)
{
    return std::to_string(job) + "." + std::to_string(step);
}

// jobinfo.cpp: the packed form srun, slurmd and slurmstepd pass on.
void pack_jobinfo(const JobInfo *info, buf_t *buffer);
std::unique_ptr<JobInfo> unpack_jobinfo(buf_t *buffer); // throws on a bad one

// slurmd_conf.cpp: this node's slurmd, in slurmd and slurmstepd (throw
// where the process has no slurmd configuration).
std::string slurmd_node_name();
std::string slurmd_spool_dir();
std::string gang_journal_dir();
std::string slurmd_pid_file(); // "" if none

// switch_rdma.cpp: the bodies of the entry points, for every API
// generation.  None throws; each returns a Slurm code where it has one.
// "info" is Slurm's opaque switch info (a step's, 24.11's "stepinfo"):
// ours, or null for none.
namespace entry {
SwitchContext &context(); // the one init() made (init() must have succeeded)
int reconfig();
// slurmctld's table across a restart: `dir` is StateSaveLocation.
int save(const char *dir);
int restore(const char *dir, bool recover);
void clear();
// A new JobInfo without a context (never null).
void *alloc();
// slurmctld: a step's context into `info` (a JobInfo from alloc()), or
// SLURM_ERROR with errno set (ESLURM_INTERCONNECT_BUSY when every id is in
// use, ESLURM_INTERCONNECT_FAILURE otherwise).  Anywhere else (srun, the
// step manager in slurmstepd), or for a job without a step record: none.
int build(void *info, const slurm_step_layout_t *layout, step_record_t *step);
int duplicate(void *source, void **dest);
void free_info(void *info); // keeps errno (step_create reads it after freeing a refused step)
int pack(void *info, buf_t *buffer);
// Unpacks into *info (null on failure).  In slurmctld, where Slurm unpacks
// a step's switch info only when it loads its job state, with `recover`
// the step's context is held again (what 22.05's job_step_allocated did).
int unpack(void **info, buf_t *buffer, bool recover);
// slurmstepd, around the tasks (info: the step's, or null).
int job_init(stepd_step_rec_t *step, void *info);
int attach(void *info, char ***env);
int postfini(stepd_step_rec_t *step);
void pre_suspend(stepd_step_rec_t *step);
void post_resume(stepd_step_rec_t *step);
// slurmctld's bookkeeping, under its job write lock.
int step_complete(void *info);
int step_allocated(void *info);
void job_complete(uint32_t job_id);
} // namespace entry

namespace slurmctld {
// New SwitchParameters: the settings for new steps, the table's capacity.
void reconfigure(SwitchContext &s, const agent::AgentConfig &config);
void save_state(SwitchContext &s, const char *dir);
void restore_state(SwitchContext &s, const char *dir, bool recover);
void clear_state(SwitchContext &s);
// A step's context into `info`: SLURM_SUCCESS, or the errno Slurm is to
// see (ESLURM_INTERCONNECT_BUSY when every id is in use) after one log line.
int build_jobinfo(SwitchContext &s, JobInfo *info, const slurm_step_layout_t *layout,
                  const step_record_t *step);
void release_step(SwitchContext &s, const JobInfo *info); // job_step_complete
void recover_step(SwitchContext &s, const JobInfo *info); // job_step_allocated
void release_job(SwitchContext &s, uint32_t job_id);      // job_complete
} // namespace slurmctld

namespace slurmd {
// The node agent on Slurm's node table, started.
std::unique_ptr<agent::NodeAgent> start_node_agent(const agent::AgentConfig &config, const Logger &log);

// This slurmd's node agent: started at once, or, in the new slurmd of an
// `scontrol reconfigure` (from 23.11 slurmd execs a new slurmd, which
// loads the plugins while the old one, whose agent holds the agents' port
// and sockets, still runs until the new one is up), on a thread of its own
// once the old slurmd has exited.  The destructor stops the thread and the
// agent.  Construction throws if the agent cannot start at once; a
// deferred start that fails is logged (the node then has no agent).
class NodeAgentRunner {
public:
    NodeAgentRunner(const agent::AgentConfig &config, const Logger &log);
    ~NodeAgentRunner();
    NodeAgentRunner(const NodeAgentRunner &) = delete;
    NodeAgentRunner &operator=(const NodeAgentRunner &) = delete;

private:
    std::unique_ptr<agent::NodeAgent> agent_;
    std::atomic<bool> stop_{false};
    std::thread waiter_;
};
} // namespace slurmd

namespace slurmstepd {
// These return a Slurm code and log their failures, but attach, which throws.
int job_init(SwitchContext &s, stepd_step_rec_t *job, const JobInfo *info);
int attach(SwitchContext &s, const JobInfo *info, char ***env);
int postfini(SwitchContext &s, stepd_step_rec_t *job);
void pre_suspend(SwitchContext &s, stepd_step_rec_t *job);
void post_resume(SwitchContext &s, stepd_step_rec_t *job);
} // namespace slurmstepd

} // namespace storm::plugins::switch_rdma
