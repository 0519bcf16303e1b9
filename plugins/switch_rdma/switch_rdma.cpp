// switch/rdma: communication contexts for job steps, and the home of the
// node agent inside slurmd.
//
// This file: the plugin's identity, init() and fini(), and the bodies of
// the entry points every Slurm API generation shares (namespace entry,
// parts.hpp).  The extern "C" switch_p_* symbols, whose names and
// signatures differ between generations, are in
// slurm_adapter/api<GEN>/switch_rdma.cpp, each converting Slurm's
// arguments and calling entry::.  Slurm loads switch plugins in four
// places, and each entry point runs in one:
//  - slurmctld (the configured SwitchType), under its job write lock: a
//    step's build gives it a context, its completion and its job's free
//    it, and the table survives a restart: saved and restored, each
//    recovered step holding its id again (22.05: job_step_allocated; from
//    24.11: Slurm unpacks each step's switch info when it loads the job
//    state, and unpack() holds the id) (slurmctld.cpp);
//  - srun, slurmd and slurmstepd unpack/pack the step's switch info: its
//    context, or none (jobinfo.cpp);
//  - slurmstepd (the configured one), for each step with a context:
//    job_init, job_attach and job_postfini open it on the node agent, pass
//    it to the tasks and close it; job_init also holds an srun --bcast
//    step until its program is in place, and the gang fail-safes leave a
//    step Slurm suspended stopped (slurmstepd.cpp);
//  - slurmd, which loads EVERY switch_*.so in PluginDir after daemonizing
//    and after reading its configuration (every line, 22.05 to 26.05), and
//    calls its init(): with SwitchType=switch/rdma, init() starts the node
//    agent and fini() stops it (slurmd.cpp).
// Batch, extern and interactive steps get no switch info from Slurm;
// srun's steps outside an allocation and steps without tasks get one
// without a context, and slurmstepd then does nothing for them.
#include "plugins/switch_rdma/parts.hpp"

#include <cerrno>
#include <cstring>

extern "C" {
#include "src/common/read_config.h"
}

STORM_PLUGIN_IDENTITY("Storm communication contexts (switch/rdma)", "switch/rdma")
extern "C" {
extern const uint32_t plugin_id = 150; // unique among switch plugins (>= 100; Slurm's own: 100-105)
}

using namespace storm::plugins::switch_rdma;
using storm::shim::guarded;

namespace {

SwitchContext *g_ctx = nullptr;

// Restores errno on scope exit: step_create reads errno after cleaning up a
// refused step, which calls job_step_complete and free_jobinfo.
struct KeepErrno {
    int saved = errno;
    ~KeepErrno() { errno = saved; }
};

} // namespace

extern "C" int init(void)
{
    return storm::shim::init_context(g_ctx, "switch/rdma", [] {
        auto ctx = std::make_unique<SwitchContext>();
        const char *prog = program_invocation_short_name;
        ctx->configured = slurm_conf.switch_type && !std::strcmp(slurm_conf.switch_type, "switch/rdma");
        if (!ctx->configured) {
            // slurmd loads every switch plugin; another one is in charge.
            storm::shim::log_loaded(
                ctx->log, running_in_daemon(),
                "Storm %s loaded in %s (Slurm %s); not the configured SwitchType (%s), idle", STORM_VERSION,
                prog, STORM_SLURM_VERSION, slurm_conf.switch_type ? slurm_conf.switch_type : "none");
            return ctx;
        }
        ctx->config = storm::agent::AgentConfig::from_switch_parameters(slurm_conf.switch_param);
        ctx->ctld.table.set_capacity(ctx->config.pool.context_max);
        storm::shim::log_loaded(ctx->log, running_in_daemon(), "Storm %s loaded in %s (Slurm %s)",
                                STORM_VERSION, prog, STORM_SLURM_VERSION);
        if (running_in_slurmd())
            ctx->agent = std::make_unique<slurmd::NodeAgentRunner>(ctx->config, ctx->log);
        return ctx;
    });
}

// Stops the node agent, if any.
extern "C" int fini(void) { return storm::shim::fini_context(g_ctx); }

namespace storm::plugins::switch_rdma::entry {

SwitchContext &context() { return *g_ctx; }

// New SwitchParameters: the context count, the pool's settings and, in
// slurmctld, the coscheduled partitions for new steps (a running node
// agent keeps its local scheduler's settings until slurmd restarts).
int reconfig()
{
    if (!g_ctx->configured)
        return SLURM_SUCCESS;
    return guarded(g_ctx->log, "reconfig", [] {
        slurmctld::reconfigure(*g_ctx,
                               storm::agent::AgentConfig::from_switch_parameters(slurm_conf.switch_param));
        return SLURM_SUCCESS;
    });
}

// ---- slurmctld: the table across restarts ----------------------------------

int save(const char *dir)
{
    if (!g_ctx->configured || !running_in_slurmctld())
        return SLURM_SUCCESS;
    return guarded(g_ctx->log, "state save", [&] {
        if (!dir)
            throw std::runtime_error("no StateSaveLocation");
        slurmctld::save_state(*g_ctx, dir);
        return SLURM_SUCCESS;
    });
}

int restore(const char *dir, bool recover)
{
    if (!g_ctx->configured || !running_in_slurmctld())
        return SLURM_SUCCESS;
    return guarded(g_ctx->log, "state restore", [&] {
        if (!dir)
            throw std::runtime_error("no StateSaveLocation");
        slurmctld::restore_state(*g_ctx, dir, recover);
        return SLURM_SUCCESS;
    });
}

void clear() { slurmctld::clear_state(*g_ctx); }

// ---- the switch info: a step's Context, or none -----------------------------

void *alloc() { return new JobInfo; }

int build(void *info, const slurm_step_layout_t *layout, step_record_t *step)
{
    if (!g_ctx->configured || !step || !step->job_ptr)
        return SLURM_SUCCESS;
    if (!running_in_slurmctld()) {
        // From 24.05 a job's steps may be created by its step manager
        // (slurmstepd, SlurmctldParameters=enable_stepmgr or --stepmgr):
        // the table of ids lives in slurmctld, so those steps get none.
        if (running_in_slurmstepd())
            g_ctx->log.warning("step %s: created by the job's step manager, which cannot hand out "
                               "communication contexts (slurmctld does): none for this step",
                               step_name(step->job_ptr->job_id, step->step_id.step_id).c_str());
        return SLURM_SUCCESS;
    }
    int refused = guarded(
        g_ctx->log, "build", [&] { return slurmctld::build_jobinfo(*g_ctx, jobinfo_of(info), layout, step); },
        ESLURM_INTERCONNECT_FAILURE);
    if (refused == SLURM_SUCCESS)
        return SLURM_SUCCESS;
    errno = refused;
    return SLURM_ERROR;
}

int duplicate(void *source, void **dest)
{
    *dest = nullptr;
    return guarded(g_ctx->log, "duplicate", [&] {
        JobInfo *src = jobinfo_of(source);
        *dest = src ? new JobInfo(*src) : new JobInfo;
        return SLURM_SUCCESS;
    });
}

void free_info(void *info)
{
    KeepErrno keep;
    delete static_cast<JobInfo *>(info);
}

int pack(void *info, buf_t *buffer)
{
    return guarded(g_ctx->log, "pack", [&] {
        pack_jobinfo(jobinfo_of(info), buffer);
        return SLURM_SUCCESS;
    });
}

int unpack(void **info, buf_t *buffer, bool recover)
{
    *info = nullptr;
    return guarded(g_ctx->log, "unpack", [&] {
        auto unpacked = unpack_jobinfo(buffer);
        if (recover && g_ctx->configured && running_in_slurmctld())
            slurmctld::recover_step(*g_ctx, unpacked.get());
        *info = unpacked.release();
        return SLURM_SUCCESS;
    });
}

// ---- slurmstepd hooks around the tasks --------------------------------------

// Root, before the tasks start.
int job_init(stepd_step_rec_t *step, void *info)
{
    JobInfo *mine = nullptr;
    int rc = guarded(g_ctx->log, "job_init", [&] {
        mine = jobinfo_of(info);
        return SLURM_SUCCESS;
    });
    return rc == SLURM_SUCCESS ? slurmstepd::job_init(*g_ctx, step, mine) : rc;
}

// In each task, as its user, before exec.
int attach(void *info, char ***env)
{
    return guarded(g_ctx->log, "job_attach",
                   [&] { return slurmstepd::attach(*g_ctx, jobinfo_of(info), env); });
}

// Root, after every process of the step is killed (also when job_init
// failed).
int postfini(stepd_step_rec_t *step) { return slurmstepd::postfini(*g_ctx, step); }

void pre_suspend(stepd_step_rec_t *step) { slurmstepd::pre_suspend(*g_ctx, step); }
void post_resume(stepd_step_rec_t *step) { slurmstepd::post_resume(*g_ctx, step); }

// ---- slurmctld step bookkeeping (job write lock held) ----------------------

int step_complete(void *info)
{
    KeepErrno keep;
    if (!running_in_slurmctld())
        return SLURM_SUCCESS;
    return guarded(g_ctx->log, "job_step_complete", [&] {
        slurmctld::release_step(*g_ctx, jobinfo_of(info));
        return SLURM_SUCCESS;
    });
}

int step_allocated(void *info)
{
    if (!running_in_slurmctld())
        return SLURM_SUCCESS;
    return guarded(g_ctx->log, "job_step_allocated", [&] {
        slurmctld::recover_step(*g_ctx, jobinfo_of(info));
        return SLURM_SUCCESS;
    });
}

void job_complete(uint32_t job_id)
{
    if (!g_ctx->configured || !running_in_slurmctld())
        return;
    guarded(g_ctx->log, "job_complete", [&] {
        slurmctld::release_job(*g_ctx, job_id);
        return SLURM_SUCCESS;
    });
}

} // namespace storm::plugins::switch_rdma::entry
