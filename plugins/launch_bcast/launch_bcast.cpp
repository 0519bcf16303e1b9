// launch/bcast: srun's step launcher with Storm's broadcast in front.
//
// The entry points Slurm looks up, loaded by srun only (LaunchType=
// launch/bcast).  The plugin wraps launch/slurm, loaded through Slurm's
// plugin loader, and forwards every launch_p_* call to it; srun --bcast's
// broadcast is the work of srun.cpp, around create_job_step, step_launch
// and fwd_signal.
//
// srun prints info() lines on the user's terminal, so the "loaded" line is
// logged at verbose level: `srun -v` shows it.
//
// launch/slurm relies on srun's MPIR process table, which srun allocates
// only for a LaunchType containing "slurm"; step_launch allocates it.
#include "plugins/launch_bcast/parts.hpp"

STORM_PLUGIN_IDENTITY("Storm broadcast launcher (wraps launch/slurm)", "launch/bcast")

using namespace storm::plugins::launch_bcast;

namespace {

struct LaunchContext {
    storm::Logger log{"launch/bcast"};
    storm::shim::WrappedPlugin<LaunchOps> slurm_launch{"launch", "launch/slurm", launch_syms,
                                                       sizeof(launch_syms)};
    StepBroadcasts broadcasts{log};
};

LaunchContext *g_ctx = nullptr;

} // namespace

extern "C" int init(void)
{
    return storm::shim::init_context(g_ctx, "launch/bcast", [] {
        auto ctx = std::make_unique<LaunchContext>();
        storm::shim::log_loaded(ctx->log, running_in_daemon(),
                                "Storm %s loaded (Slurm %s); wrapping launch/slurm", STORM_VERSION,
                                STORM_SLURM_VERSION);
        return ctx;
    });
}

extern "C" int fini(void) { return storm::shim::fini_context(g_ctx); }

extern "C" {

int launch_p_setup_srun_opt(char **rest, slurm_opt_t *opt_local)
{
    return g_ctx->slurm_launch.ops().setup_srun_opt(rest, opt_local);
}
int launch_p_handle_multi_prog_verify(int command_pos, slurm_opt_t *opt_local)
{
    return g_ctx->slurm_launch.ops().handle_multi_prog(command_pos, opt_local);
}
int launch_p_create_job_step(srun_job_t *job, bool use_all_cpus, void (*signal_function)(int),
                             sig_atomic_t *destroy_job, slurm_opt_t *opt_local)
{
    int rc =
        g_ctx->slurm_launch.ops().create_job_step(job, use_all_cpus, signal_function, destroy_job, opt_local);
    srun_opt_t *sropt = opt_local ? opt_local->srun_opt : nullptr;
    if (rc != SLURM_SUCCESS || !job || !sropt || !sropt->bcast_flag)
        return rc;
    return g_ctx->broadcasts.plan(job, opt_local);
}
int launch_p_step_launch(srun_job_t *job, slurm_step_io_fds_t *cio_fds, uint32_t *global_rc,
                         slurm_step_launch_callbacks_t *step_callbacks, slurm_opt_t *opt_local)
{
    // srun sets up the MPIR process table only when LaunchType contains
    // "slurm" (src/srun/srun.c), and launch/slurm writes every started task
    // into it: do what srun does for launch/slurm.  srun frees it
    // (mpir_cleanup) whatever the launcher.
    if (!MPIR_proctable)
        mpir_init(job->ntasks);
    return g_ctx->broadcasts.launch(job, global_rc, [&] {
        return g_ctx->slurm_launch.ops().step_launch(job, cio_fds, global_rc, step_callbacks, opt_local);
    });
}
int launch_p_step_wait(srun_job_t *job, bool got_alloc, slurm_opt_t *opt_local)
{
    return g_ctx->slurm_launch.ops().step_wait(job, got_alloc, opt_local);
}
int launch_p_step_terminate(void) { return g_ctx->slurm_launch.ops().step_terminate(); }
void launch_p_print_status(void) { g_ctx->slurm_launch.ops().print_status(); }
void launch_p_fwd_signal(int signal)
{
    // srun ends the step (a second Ctrl-C, SIGTERM, SIGHUP, SIGQUIT, a
    // broken pipe: srun forwards SIGINT or SIGKILL): a program still on its
    // way is not wanted any more.  Cancelled, the broadcast aborts on every
    // node, whose slurmstepd then fail the tasks instead of starting them.
    if (signal == SIGINT || signal == SIGKILL)
        g_ctx->broadcasts.cancel_all();
    g_ctx->slurm_launch.ops().fwd_signal(signal);
}

} // extern "C"
