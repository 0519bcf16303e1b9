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
#include "src/common/read_config.h"
}

STORM_PLUGIN_IDENTITY("Storm gang scheduler (wraps sched/backfill)", "sched/gang")

namespace {

const char *backfill_syms[] = {"sched_p_reconfig"};
struct BackfillOps {
    int (*reconfig)(void);
};

// Storm has no scheduler settings yet: every storm_* key is unknown.
void check_params()
{
    storm::ParamList p(slurm_conf.sched_params, "SchedulerParameters", "storm_");
    p.reject_unknown();
}

struct SchedContext {
    storm::Logger log{"sched/gang"};
    storm::shim::WrappedPlugin<BackfillOps> backfill{"sched", "sched/backfill", backfill_syms,
                                                     sizeof(backfill_syms)};
};

SchedContext *g_ctx = nullptr;

} // namespace

extern "C" int init(void)
{
    return storm::shim::init_context(g_ctx, "sched/gang", [] {
        check_params();
        auto ctx = std::make_unique<SchedContext>();
        storm::shim::log_loaded(ctx->log, running_in_daemon(),
                                "Storm %s loaded (Slurm %s); wrapping sched/backfill", STORM_VERSION,
                                STORM_SLURM_VERSION);
        return ctx;
    });
}

extern "C" int fini(void) { return storm::shim::fini_context(g_ctx); }

extern "C" int sched_p_reconfig(void)
{
    return storm::shim::guarded(g_ctx->log, "reconfig", [] {
        check_params();
        return g_ctx->backfill.ops().reconfig();
    });
}
