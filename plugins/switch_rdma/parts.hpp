// switch/rdma's parts, as its entry file (switch_rdma.cpp) calls them: the
// plugin's state in whichever process loaded it, the jobinfo's encoding
// (jobinfo.cpp), where slurmd keeps its files (slurmd_conf.cpp), and the
// work of each daemon:
//  - slurmctld.cpp: the table of contexts in use, and its restart;
//  - slurmd.cpp: the node agent, built on Slurm's node table and started;
//  - slurmstepd.cpp: the step's context on the node agent, the launch gate,
//    the gang fail-safes around the step.
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

#include "agent/agent_config.hpp"
#include "agent/node_agent.hpp"
#include "sched_gang/step_guard.hpp"
#include "switch_rdma/context_table.hpp"
#include "switch_rdma/step_context.hpp"

extern "C" {
#include "src/common/pack.h"
#include "src/slurmctld/slurmctld.h"
#include "src/slurmd/slurmstepd/slurmstepd_job.h"
}

namespace storm::plugins::switch_rdma {

// slurmctld: the contexts in use.  Slurm calls under its job lock; the
// mutex covers libstate_save at shutdown.
struct SlurmctldState {
    std::mutex mu;
    rdma::ContextTable table;
    bool sweep_pending = false;                 // drop stale restored entries at the next step
    std::map<std::string, in_addr_t> addresses; // NodeAddr -> IPv4
};

// slurmstepd: the context job_init opened on the node agent; the guard that
// continues the step if the gang agent dies and stays away; whether Slurm
// suspended the step (scontrol suspend: its SIGSTOP stays).
struct SlurmstepdState {
    std::optional<rdma::Context> opened;
    std::unique_ptr<gang::StepGuard> guard;
    std::atomic<bool> slurm_suspended{false};
    bool marked = false; // the step's mark for the agent (mark_suspended)
};

struct SwitchContext {
    Logger log{"switch/rdma"};
    Logger gang_log{log.child("gang")}; // the step's gang fail-safes
    bool configured = false;            // SwitchType names this plugin
    storm::agent::AgentConfig config;
    std::unique_ptr<storm::agent::NodeAgent> agent; // slurmd
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
