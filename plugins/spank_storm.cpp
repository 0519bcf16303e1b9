// spank/storm: Storm's SPANK plugin (plugstack.conf).
//
// SPANK is the only plugin type that runs in every context of a job:
// srun/sbatch/salloc (local, allocator), slurmstepd (remote) and slurmd.
// Storm's user-visible srun/sbatch options (broadcast, coscheduling
// interposition) will be registered here.  For now it registers none and
// logs one line naming itself, its version and the context.
//
// In slurmd, slurm_spank_init runs before slurmd daemonizes: no thread may
// be started here (the node agent lives in switch/rdma's init()).
extern "C" {
#include <slurm/spank.h>
}

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

} // namespace

extern "C" int slurm_spank_init(spank_t sp, int ac, char **av)
{
    if (ac > 0) {
        slurm_error("spank/storm: unknown argument \"%s\" in plugstack.conf (spank_storm.so takes none)",
                    av[0]);
        return -1; // SPANK callers treat only a negative value as failure
    }
    spank_context_t ctx = spank_context();
    // On the user's terminal (srun, sbatch) the line waits until -v is in
    // force: slurm_spank_init_post_opt (sbatch, salloc) or
    // slurm_spank_local_user_init (srun).
    if (ctx != S_CTX_LOCAL && ctx != S_CTX_ALLOCATOR)
        slurm_info("spank/storm: Storm %s loaded in %s", STORM_VERSION, context_name(ctx));
    return ESPANK_SUCCESS;
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
