// A job step's communication context, as slurmctld builds it
// (switch_p_build_jobinfo): the pool mode and divisions its partition
// calls for, its nodes and ranks, and the refusals.
//
//   mode       swapped in a partition Storm gang-schedules (SchedulerType=
//              sched/gang, OverSubscribe=FORCE:n with n >= 2) unless
//              storm_pool_mode=divided; divided otherwise
//   divisions  divided: the partition's n (OverSubscribe=FORCE:n), 1
//              without FORCE; swapped: 1
//   cosched    the partition is among storm_cosched_partitions: the node
//              agents admit the job's tasks to implicit coscheduling
//   key        random bytes of its own (context.hpp): its tasks prove
//              them to each other when they connect
//
// Contract: make_context() returns the context without its id (the caller
// allocates one from its ContextTable, see context_table.hpp) or throws
// StepRefused with the reason, phrased for slurmctld's log after
// "switch/rdma: step J.S: ".  It does not depend on Slurm.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include "switch_rdma/context.hpp"
#include "switch_rdma/pool_config.hpp"

namespace storm::rdma {

class StepRefused : public std::runtime_error {
public:
    // busy: the step could run later (every context is in use), so srun
    // should retry; otherwise the step can never run as asked.
    StepRefused(const std::string &why, bool busy) : std::runtime_error(why), busy_(busy) {}
    bool busy() const noexcept { return busy_; }

private:
    bool busy_;
};

struct StepShape {
    uint32_t job_id = 0;
    uint32_t step_id = 0;
    uint32_t uid = 0;
    bool gang = false;    // Storm gang-schedules the step's partition
    uint32_t force_n = 0; // the partition's OverSubscribe=FORCE:n or YES:n; 0 or 1 without sharing
    bool cosched = false; // the partition is among storm_cosched_partitions
    uint32_t ntasks = 0;
    std::vector<ContextNode> nodes;
    std::vector<std::string> node_names; // for messages; may be empty
};

// The mode and divisions for a step of `s`'s partition.
PoolMode mode_for(const PoolConfig &pool, const StepShape &s) noexcept;
uint32_t divisions_for(const PoolConfig &pool, const StepShape &s) noexcept;

// The step's context, id 0, with a new key (context_key()); throws
// StepRefused (more than max_local_tasks tasks on a node, no credit left
// by the pool), std::invalid_argument (an inconsistent layout) or
// std::system_error (no random bytes).
Context make_context(const PoolConfig &pool, const StepShape &s);

// context_key_bytes from the kernel's CSPRNG (getrandom, which blocks only
// until the pool is first seeded at boot); throws std::system_error.
std::string context_key();

// The refusal when all of `context_max` ids are in use.
StepRefused contexts_exhausted(uint32_t context_max);

} // namespace storm::rdma
