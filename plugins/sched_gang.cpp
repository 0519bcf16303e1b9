// sched/gang: Storm's machine manager inside slurmctld.
//
// Slurm-facing shim.  It wraps sched/backfill so that sites keep backfill
// scheduling: init() loads sched/backfill through Slurm's own plugin loader
// (which starts the backfill thread), sched_p_reconfig() forwards to it and
// fini() unloads it (which stops the thread).  Storm's settings in
// SchedulerParameters carry the prefix "storm_"; the others are backfill's.
//
// The gang matrix and the strobe (sched_gang/) hang off this context.
#include "plugins/common/shim.hpp"

#include "lib/common/params.hpp"

extern "C" {
#include "src/common/plugin.h"
#include "src/common/read_config.h"
}

STORM_PLUGIN_IDENTITY("Storm gang scheduler (wraps sched/backfill)", "sched/gang")

namespace {

const char *backfill_syms[] = {"sched_p_reconfig"};
struct BackfillOps {
    int (*reconfig)(void);
};
static_assert(sizeof(BackfillOps) == sizeof(backfill_syms), "backfill_syms and BackfillOps differ");

struct SchedContext {
    storm::Logger log{"sched/gang"};
    BackfillOps backfill_ops{};
    plugin_context_t *backfill = nullptr;

    ~SchedContext()
    {
        if (backfill)
            plugin_context_destroy(backfill);
    }
};

SchedContext *g_ctx = nullptr;

// Storm has no scheduler settings yet: every storm_* key is unknown.
void check_params()
{
    storm::ParamList p(slurm_conf.sched_params, "SchedulerParameters", "storm_");
    p.reject_unknown();
}

} // namespace

extern "C" int init(void)
{
    storm::shim::install_slurm_log();
    storm::Logger log{"sched/gang"};
    return storm::shim::guarded(log, "init", [] {
        auto ctx = std::make_unique<SchedContext>();
        check_params();
        ctx->backfill = plugin_context_create("sched", "sched/backfill",
                                              reinterpret_cast<void **>(&ctx->backfill_ops),
                                              backfill_syms, sizeof(backfill_syms));
        if (!ctx->backfill)
            throw std::runtime_error("cannot load sched/backfill from PluginDir");
        storm::shim::log_loaded(ctx->log, "Storm %s loaded (Slurm %s); wrapping sched/backfill", STORM_VERSION,
                      STORM_SLURM_VERSION);
        g_ctx = ctx.release();
        return SLURM_SUCCESS;
    });
}

extern "C" int fini(void)
{
    delete g_ctx;
    g_ctx = nullptr;
    return SLURM_SUCCESS;
}

extern "C" int sched_p_reconfig(void)
{
    if (!g_ctx)
        return SLURM_ERROR;
    return storm::shim::guarded(g_ctx->log, "reconfig", [] {
        check_params();
        return g_ctx->backfill_ops.reconfig();
    });
}
