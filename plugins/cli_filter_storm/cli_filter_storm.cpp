// cli_filter/storm: srun --bcast through Storm's broadcast.
//
// The entry points Slurm looks up (CliFilterPlugins=cli_filter/storm),
// loaded by srun, salloc and sbatch; the work is srun's (srun.cpp):
// pre_submit remembers srun's options, post_submit (the job and the step
// exist, before srun sets up and launches the step) starts the broadcast
// and points srun at the copy.  cli_filter is the one hook every supported
// Slurm line calls in srun between the step's creation and its launch: the
// launch plugin type, which Storm used before, was removed in 23.02
// (plugins/cli_filter_storm/README.md).
//
// Client commands print info() lines on the user's terminal, so the
// "loaded" line is logged at verbose level: `srun -v` shows it.
#include "plugins/cli_filter_storm/parts.hpp"

STORM_PLUGIN_IDENTITY("Storm srun --bcast through Storm's broadcast", "cli_filter/storm")

using namespace storm::plugins::cli_filter_storm;

namespace {

struct CliFilterContext {
    storm::Logger log{"cli_filter/storm"};
    SrunBroadcast bcast{log};
};

CliFilterContext *g_ctx = nullptr;

} // namespace

extern "C" int init(void)
{
    return storm::shim::init_context(g_ctx, "cli_filter/storm", [] {
        auto ctx = std::make_unique<CliFilterContext>();
        storm::shim::log_loaded(ctx->log, false, "Storm %s loaded (Slurm %s)", STORM_VERSION,
                                STORM_SLURM_VERSION);
        return ctx;
    });
}

extern "C" int fini(void) { return storm::shim::fini_context(g_ctx); }

extern "C" {

int cli_filter_p_setup_defaults(slurm_opt_t *, bool) { return SLURM_SUCCESS; }

int cli_filter_p_pre_submit(slurm_opt_t *opt, int offset)
{
    if (g_ctx && opt && opt->srun_opt)
        g_ctx->bcast.remember(opt, offset);
    return SLURM_SUCCESS;
}

void cli_filter_p_post_submit(int offset, uint32_t jobid, uint32_t stepid)
{
    if (g_ctx)
        g_ctx->bcast.start(offset, jobid, stepid);
}

} // extern "C"
