// switch/rdma: communication contexts for job steps, and the home of the
// node agent inside slurmd.
//
// The entry points Slurm looks up, each converting its arguments and
// dispatching to the part of the daemon it runs in (parts.hpp).  Slurm
// loads switch plugins in four places, and each switch_p_* call runs in one:
//  - slurmctld (the configured SwitchType), under its job write lock:
//    build_jobinfo gives each step a context, job_step_complete and
//    job_complete free it, libstate_save/restore and job_step_allocated
//    keep the table across a restart (slurmctld.cpp);
//  - srun, slurmd and slurmstepd unpack/pack the jobinfo: the step's
//    context, or none (jobinfo.cpp);
//  - slurmstepd (the configured one), for each step with a context:
//    job_init, job_attach and job_postfini open it on the node agent, pass
//    it to the tasks and close it; job_init also holds an srun --bcast
//    step until its program is in place, and the suspend hooks mark a step
//    Slurm suspended for the gang fail-safes (slurmstepd.cpp);
//  - slurmd, which loads EVERY switch_*.so in PluginDir after daemonizing
//    and calls its init(): with SwitchType=switch/rdma, init() starts the
//    node agent and fini() stops it (slurmd.cpp).
// Batch, extern and interactive steps get no jobinfo from Slurm; srun's
// steps outside an allocation and steps without tasks get a jobinfo without
// a context, and slurmstepd then does nothing for them.
#include "plugins/switch_rdma/parts.hpp"

#include <cerrno>
#include <cstring>

extern "C" {
#include "src/common/read_config.h"
}

STORM_PLUGIN_IDENTITY("Storm communication contexts (switch/rdma)", "switch/rdma")
extern "C" {
extern const uint32_t plugin_id = 150; // unique among switch plugins (>= 100)
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

switch_jobinfo_t *as_switch_jobinfo(JobInfo *info) { return reinterpret_cast<switch_jobinfo_t *>(info); }

} // namespace

extern "C" int init(void)
{
    return storm::shim::init_context(g_ctx, "switch/rdma", [] {
        auto ctx = std::make_unique<SwitchContext>();
        const char *prog = slurm_prog_name ? slurm_prog_name : "unknown";
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
            ctx->agent = slurmd::start_node_agent(ctx->config, ctx->log);
        return ctx;
    });
}

// Stops the node agent, if any.
extern "C" int fini(void) { return storm::shim::fini_context(g_ctx); }

extern "C" {

// New SwitchParameters: the context count, the pool's settings and, in
// slurmctld, the coscheduled partitions for new steps (a running node
// agent keeps its local scheduler's settings until slurmd restarts).
int switch_p_reconfig(void)
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

int switch_p_libstate_save(char *dir_name)
{
    if (!g_ctx->configured || !running_in_slurmctld())
        return SLURM_SUCCESS;
    return guarded(g_ctx->log, "libstate_save", [&] {
        slurmctld::save_state(*g_ctx, dir_name);
        return SLURM_SUCCESS;
    });
}

int switch_p_libstate_restore(char *dir_name, bool recover)
{
    if (!g_ctx->configured || !running_in_slurmctld())
        return SLURM_SUCCESS;
    return guarded(g_ctx->log, "libstate_restore", [&] {
        slurmctld::restore_state(*g_ctx, dir_name, recover);
        return SLURM_SUCCESS;
    });
}

int switch_p_libstate_clear(void)
{
    slurmctld::clear_state(*g_ctx);
    return SLURM_SUCCESS;
}

// ---- the jobinfo: a step's Context, or none ---------------------------------

int switch_p_alloc_jobinfo(switch_jobinfo_t **switch_job, uint32_t job_id, uint32_t step_id)
{
    return guarded(g_ctx->log, "alloc_jobinfo", [&] {
        *switch_job = as_switch_jobinfo(new JobInfo);
        return SLURM_SUCCESS;
    });
}

// slurmctld, at step creation under the job write lock (srun calls it too,
// without a step record, for steps outside an allocation: no context).
int switch_p_build_jobinfo(switch_jobinfo_t *switch_job, slurm_step_layout_t *step_layout,
                           step_record_t *step_ptr)
{
    if (!g_ctx->configured || !step_ptr || !step_ptr->job_ptr || !running_in_slurmctld())
        return SLURM_SUCCESS;
    int refused = guarded(
        g_ctx->log, "build_jobinfo",
        [&] { return slurmctld::build_jobinfo(*g_ctx, jobinfo_of(switch_job), step_layout, step_ptr); },
        ESLURM_INTERCONNECT_FAILURE);
    if (refused == SLURM_SUCCESS)
        return SLURM_SUCCESS;
    slurm_seterrno(refused);
    return SLURM_ERROR;
}

int switch_p_duplicate_jobinfo(switch_jobinfo_t *source, switch_jobinfo_t **dest)
{
    return guarded(g_ctx->log, "duplicate_jobinfo", [&] {
        JobInfo *src = jobinfo_of(source);
        *dest = as_switch_jobinfo(src ? new JobInfo(*src) : new JobInfo);
        return SLURM_SUCCESS;
    });
}

void switch_p_free_jobinfo(switch_jobinfo_t *switch_job)
{
    KeepErrno keep;
    delete static_cast<JobInfo *>(static_cast<void *>(switch_job));
}

int switch_p_pack_jobinfo(switch_jobinfo_t *switch_job, buf_t *buffer, uint16_t protocol_version)
{
    return guarded(g_ctx->log, "pack_jobinfo", [&] {
        pack_jobinfo(jobinfo_of(switch_job), buffer);
        return SLURM_SUCCESS;
    });
}

int switch_p_unpack_jobinfo(switch_jobinfo_t **switch_job, buf_t *buffer, uint16_t protocol_version)
{
    *switch_job = nullptr;
    return guarded(g_ctx->log, "unpack_jobinfo", [&] {
        *switch_job = as_switch_jobinfo(unpack_jobinfo(buffer).release());
        return SLURM_SUCCESS;
    });
}

// No keys: Slurm's generic code asks none of switch/rdma.
int switch_p_get_jobinfo(switch_jobinfo_t *switch_job, int key, void *resulting_data)
{
    slurm_seterrno(EINVAL);
    return SLURM_ERROR;
}

// ---- slurmstepd hooks around the tasks --------------------------------------

int switch_p_job_preinit(stepd_step_rec_t *job) { return SLURM_SUCCESS; }

// Root, before the tasks start.
int switch_p_job_init(stepd_step_rec_t *job)
{
    JobInfo *info = nullptr;
    int rc = guarded(g_ctx->log, "job_init", [&] {
        info = jobinfo_of(job->switch_job ? job->switch_job->data : nullptr);
        return SLURM_SUCCESS;
    });
    return rc == SLURM_SUCCESS ? slurmstepd::job_init(*g_ctx, job, info) : rc;
}

// In each task, as its user, before exec.
int switch_p_job_attach(switch_jobinfo_t *jobinfo, char ***env, uint32_t nodeid, uint32_t procid,
                        uint32_t nnodes, uint32_t nprocs, uint32_t rank)
{
    return guarded(g_ctx->log, "job_attach",
                   [&] { return slurmstepd::attach(*g_ctx, jobinfo_of(jobinfo), env); });
}

// Root, after the tasks (some of their processes may remain): nothing; the
// context is closed in postfini, once every process is gone.
int switch_p_job_fini(switch_jobinfo_t *jobinfo) { return SLURM_SUCCESS; }

// Root, after every process of the step is killed (also when job_init
// failed).
int switch_p_job_postfini(stepd_step_rec_t *job) { return slurmstepd::postfini(*g_ctx, job); }

// scontrol suspend/resume hooks (not used for gang scheduling: see README).
int switch_p_job_suspend_test(switch_jobinfo_t *jobinfo) { return SLURM_SUCCESS; }
void switch_p_job_suspend_info_get(switch_jobinfo_t *jobinfo, void *suspend_info) {}
void switch_p_job_suspend_info_pack(void *suspend_info, buf_t *buffer, uint16_t protocol_version) {}
int switch_p_job_suspend_info_unpack(void **suspend_info, buf_t *buffer, uint16_t protocol_version)
{
    return SLURM_SUCCESS;
}
void switch_p_job_suspend_info_free(void *suspend_info) {}
int switch_p_job_suspend(void *suspend_info, int max_wait) { return SLURM_SUCCESS; }
int switch_p_job_resume(void *suspend_info, int max_wait) { return SLURM_SUCCESS; }
int switch_p_job_step_pre_suspend(stepd_step_rec_t *job)
{
    slurmstepd::pre_suspend(*g_ctx, job);
    return SLURM_SUCCESS;
}
int switch_p_job_step_post_suspend(stepd_step_rec_t *job) { return SLURM_SUCCESS; }
int switch_p_job_step_pre_resume(stepd_step_rec_t *job) { return SLURM_SUCCESS; }
int switch_p_job_step_post_resume(stepd_step_rec_t *job)
{
    slurmstepd::post_resume(*g_ctx, job);
    return SLURM_SUCCESS;
}

// ---- slurmctld step bookkeeping (job write lock held) ----------------------

int switch_p_job_step_complete(switch_jobinfo_t *jobinfo, char *nodelist)
{
    KeepErrno keep;
    if (!running_in_slurmctld())
        return SLURM_SUCCESS;
    return guarded(g_ctx->log, "job_step_complete", [&] {
        slurmctld::release_step(*g_ctx, jobinfo_of(jobinfo));
        return SLURM_SUCCESS;
    });
}

int switch_p_job_step_allocated(switch_jobinfo_t *jobinfo, char *nodelist)
{
    if (!running_in_slurmctld())
        return SLURM_SUCCESS;
    return guarded(g_ctx->log, "job_step_allocated", [&] {
        slurmctld::recover_step(*g_ctx, jobinfo_of(jobinfo));
        return SLURM_SUCCESS;
    });
}

void switch_p_job_complete(uint32_t job_id)
{
    if (!g_ctx->configured || !running_in_slurmctld())
        return;
    guarded(g_ctx->log, "job_complete", [&] {
        slurmctld::release_job(*g_ctx, job_id);
        return SLURM_SUCCESS;
    });
}

} // extern "C"
