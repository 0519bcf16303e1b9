// spank/storm: Storm's SPANK plugin (plugstack.conf).
//
// SPANK is the only plugin type that runs in every context of a job:
// srun/sbatch/salloc (local, allocator), slurmstepd (remote) and slurmd.
// These are the entry points Slurm looks up; each does its context's part.
// The plugin logs one line naming itself, its version and the context, and
// registers Storm's user-visible options:
//
//   --storm-cosched  (srun, sbatch, salloc) implicit coscheduling for an
//                    unmodified MPI program: in each task of the job's
//                    steps, slurmstepd's part (slurmstepd.cpp) prepends the
//                    PMPI library libstorm_cosched_pmpi.so to LD_PRELOAD.
//                    The node agent refuses jobs outside
//                    storm_cosched_partitions; the library then says so on
//                    the task's stderr and stays idle.
//
// In slurmd, slurm_spank_init runs before slurmd daemonizes: no thread may
// be started here (the node agent lives in switch/rdma's init()).
//
// Return values: every hook returns 0 (ESPANK_SUCCESS) unless the plugin
// cannot work as configured (an argument in plugstack.conf, the option not
// registered): -1 then.  Since 23.11 a failing SPANK call fails the step,
// and since 25.05 any non-zero value counts as a failure, so nothing that
// only degrades (no PMPI library, LD_PRELOAD too long) returns non-zero:
// it is logged and the task runs without coscheduling.
#include "plugins/spank_storm/parts.hpp"

extern "C" {
extern const char plugin_name[] = "storm";
extern const char plugin_type[] = "spank";
extern const unsigned int plugin_version = SLURM_VERSION_NUMBER;
}

namespace {

const char *context_name(spank_context_t ctx)
{
    switch (ctx) {
    case S_CTX_LOCAL:
        return "local (srun)";
    case S_CTX_REMOTE:
        return "remote (slurmstepd)";
    case S_CTX_ALLOCATOR:
        return "allocator (sbatch/salloc)";
    case S_CTX_SLURMD:
        return "slurmd";
    case S_CTX_JOB_SCRIPT:
        return "job script";
    default:
        return "unknown";
    }
}

int cosched_option(int, const char *, int) { return 0; }

struct spank_option cosched_opt = {
    const_cast<char *>("storm-cosched"),
    nullptr,
    const_cast<char *>("Coschedule this job's MPI tasks with implicit coscheduling (Storm: a PMPI library "
                       "reports message arrivals to each node's local scheduler)"),
    0,
    0,
    cosched_option};

} // namespace

extern "C" int slurm_spank_init(spank_t sp, int ac, char **av)
{
    if (ac > 0) {
        slurm_error("spank/storm: unknown argument \"%s\" in plugstack.conf (spank_storm.so takes none)",
                    av[0]);
        return -1; // a configuration error: fails the caller (srun, the step, slurmd)
    }
    spank_context_t ctx = spank_context();
    // On the user's terminal (srun, sbatch) the line waits until -v is in
    // force: slurm_spank_init_post_opt (sbatch, salloc) or
    // slurm_spank_local_user_init (srun).
    if (ctx != S_CTX_LOCAL && ctx != S_CTX_ALLOCATOR)
        slurm_info("spank/storm: Storm %s loaded in %s", STORM_VERSION, context_name(ctx));
    if (ctx == S_CTX_LOCAL || ctx == S_CTX_ALLOCATOR || ctx == S_CTX_REMOTE) {
        spank_err_t rc = spank_option_register(sp, &cosched_opt);
        if (rc != ESPANK_SUCCESS) {
            slurm_error("spank/storm: cannot register --storm-cosched: %s", spank_strerror(rc));
            return -1;
        }
    }
    return ESPANK_SUCCESS;
}

// In each task (remote context, as the user, before exec): --storm-cosched.
extern "C" int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
    if (spank_option_getopt(sp, &cosched_opt, nullptr) != ESPANK_SUCCESS)
        return ESPANK_SUCCESS; // not given
    return storm::plugins::spank_storm::slurmstepd::preload_cosched(sp);
}

// sbatch/salloc apply -v before this hook; srun only before local_user_init.
extern "C" int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
    if (spank_context() == S_CTX_ALLOCATOR)
        slurm_verbose("spank/storm: Storm %s loaded in %s", STORM_VERSION, context_name(S_CTX_ALLOCATOR));
    return ESPANK_SUCCESS;
}

extern "C" int slurm_spank_local_user_init(spank_t sp, int ac, char **av)
{
    slurm_verbose("spank/storm: Storm %s loaded in %s", STORM_VERSION, context_name(S_CTX_LOCAL));
    return ESPANK_SUCCESS;
}
