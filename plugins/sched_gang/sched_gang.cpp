// sched/gang: Storm's machine manager inside slurmctld.
//
// The entry points Slurm looks up.  The plugin wraps sched/backfill so that
// sites keep backfill scheduling: init() loads sched/backfill through
// Slurm's own plugin loader (which starts the backfill thread),
// sched_p_reconfig() forwards to it and fini() unloads it (which stops the
// thread), after the machine manager stopped.  Storm's settings in
// SchedulerParameters carry the prefix "storm_" (sched_gang/config.hpp);
// the others are backfill's.  The gang scheduling itself is slurmctld.cpp's.
#include "plugins/sched_gang/parts.hpp"
#include "slurm_adapter/gang_config.hpp"

STORM_PLUGIN_IDENTITY("Storm gang scheduler (wraps sched/backfill)", "sched/gang")

using storm::plugins::sched_gang::FaultWatch;
using storm::plugins::sched_gang::GangMachine;

namespace {

const char *backfill_syms[] = {"sched_p_reconfig"};
struct BackfillOps {
    int (*reconfig)(void);
};

struct SchedContext {
    storm::Logger log{"sched/gang"};
    storm::shim::WrappedPlugin<BackfillOps> backfill{"sched", "sched/backfill", backfill_syms,
                                                     sizeof(backfill_syms)};
    GangMachine machine{log}; // stopped before backfill is unloaded
    FaultWatch fault{log};    // stopped first
};

SchedContext *g_ctx = nullptr;

} // namespace

extern "C" int init(void)
{
    return storm::shim::init_context(g_ctx, "sched/gang", [] {
        auto config = storm::shim::read_gang_config();
        auto ctx = std::make_unique<SchedContext>();
        storm::shim::log_loaded(ctx->log, running_in_daemon(),
                                "Storm %s loaded (Slurm %s); wrapping sched/backfill", STORM_VERSION,
                                STORM_SLURM_VERSION);
        ctx->machine.init(config);
        if (running_in_slurmctld())
            ctx->fault.configure(config.fault_timeout);
        return ctx;
    });
}

extern "C" int fini(void) { return storm::shim::fini_context(g_ctx); }

extern "C" int sched_p_reconfig(void)
{
    return storm::shim::guarded(g_ctx->log, "reconfig", [] {
        auto config = storm::shim::read_gang_config();
        g_ctx->machine.reconfigure(config);
        if (running_in_slurmctld())
            g_ctx->fault.configure(config.fault_timeout);
        return g_ctx->backfill.ops().reconfig();
    });
}
