// select/gang's parts, as its entry file calls them.  The entry points
// differ between Slurm's plugin API generations (the select ops table
// shrank in 23.11 and 25.05, job_test's arguments changed in 23.11), so
// each generation has its own entry file,
// slurm_adapter/api<GEN>/select_gang.cpp; what they share is here:
//
//  - GangPacking (slurmctld.cpp): the packing of gang jobs into the gang
//    matrix's slots, the plugin's only work of its own.  job_test is called
//    in slurmctld alone (up to 24.11 Slurm also loads select plugins in
//    slurmd, slurmstepd and clients; from 25.05 slurmctld alone loads the
//    SelectType plugin).
//  - Context and init_select(): the plugin's one context, which loads
//    select/cons_tres through Slurm's plugin loader (the generation's ops
//    table `Ops`, filled in the order of `syms`).
//
// Contract: one context per process, made by init() and destroyed by
// fini().  job_test() takes cons_tres's job_test as `cons_tres` (run on
// the bitmap as it then is), returns what cons_tres returned, and throws
// nothing.
#pragma once

#include "slurm_adapter/shim.hpp"

#include <functional>
#include <memory>
#include <mutex>

#include "sched_gang/matrix.hpp"
#include "sched_gang/packing.hpp"
#include "slurm_api.hpp"

extern "C" {
#include "src/slurmctld/slurmctld.h"
}

namespace storm::plugins::select_gang {

using storm::slurm_api::slurm_list;

class GangPacking {
public:
    explicit GangPacking(const Logger &log) : log(log) {}

    // select_p_job_test: a gang job started now (`run_now`: mode is
    // SELECT_MODE_RUN_NOW without flags) gets packing's nodes if cons_tres
    // accepts them, every other one cons_tres's choice.  `bitmap` is
    // in/out as for cons_tres (the chosen nodes).
    int job_test(job_record_t *job_ptr, bitstr_t *bitmap, uint32_t min_nodes, bool run_now,
                 slurm_list preemptee_candidates, slurm_list *preemptee_job_list,
                 const std::function<int()> &cons_tres);

private:
    gang::Placement pack(bitstr_t *bitmap, uint32_t count);

    Logger log;
    std::mutex mu;
    gang::Matrix matrix{gang::kMaxSlots}; // mirrors sched/gang's
};

// The plugin's context: select/cons_tres, loaded (its init() run) by the
// constructor and unloaded by the destructor, and the packing.
template <class Ops> struct Context {
    Context(const char **syms, size_t syms_size) : cons_tres{"select", "select/cons_tres", syms, syms_size} {}
    Logger log{"select/gang"};
    shim::WrappedPlugin<Ops> cons_tres;
    GangPacking packing{log};
};

// The body of init(): the context made into `global`, and the plugin's one
// "loaded" line.
template <class Ops> int init_select(Context<Ops> *&global, const char **syms, size_t syms_size) noexcept
{
    return shim::init_context(global, "select/gang", [&] {
        auto ctx = std::make_unique<Context<Ops>>(syms, syms_size);
        shim::log_loaded(ctx->log, running_in_slurmctld(),
                         "Storm %s loaded (Slurm %s); delegating to select/cons_tres, packing gang jobs",
                         STORM_VERSION, STORM_SLURM_VERSION);
        return ctx;
    });
}

} // namespace storm::plugins::select_gang
