// switch/rdma's entry points for Slurm's 22.05 switch API
// (src/common/switch.c's syms[]): each converts its arguments and calls the
// body every generation shares (plugins/switch_rdma/switch_rdma.cpp, which
// also holds init, fini and the plugin's identity).
//
// What this generation has that the later ones lost: a jobinfo allocated
// before it is built (alloc_jobinfo), job_step_allocated for each step
// slurmctld recovers at restart (the step's context is held again there),
// and the suspend hooks around Slurm's own suspend (scontrol suspend),
// with which slurmstepd marks the step for the gang fail-safes.
#include "plugins/switch_rdma/parts.hpp"

#include <cerrno>

using namespace storm::plugins::switch_rdma;

namespace {
switch_jobinfo_t *as_switch_jobinfo(void *info) { return static_cast<switch_jobinfo_t *>(info); }
} // namespace

extern "C" {

int switch_p_reconfig(void) { return entry::reconfig(); }

// ---- slurmctld: the table across restarts ----------------------------------

int switch_p_libstate_save(char *dir_name) { return entry::save(dir_name); }
int switch_p_libstate_restore(char *dir_name, bool recover) { return entry::restore(dir_name, recover); }
int switch_p_libstate_clear(void)
{
    entry::clear();
    return SLURM_SUCCESS;
}

// ---- the jobinfo: a step's Context, or none ---------------------------------

int switch_p_alloc_jobinfo(switch_jobinfo_t **switch_job, uint32_t job_id, uint32_t step_id)
{
    *switch_job = as_switch_jobinfo(entry::alloc());
    return SLURM_SUCCESS;
}

// slurmctld, at step creation under the job write lock (srun calls it too,
// without a step record, for steps outside an allocation: no context).
int switch_p_build_jobinfo(switch_jobinfo_t *switch_job, slurm_step_layout_t *step_layout,
                           step_record_t *step_ptr)
{
    return entry::build(switch_job, step_layout, step_ptr);
}

int switch_p_duplicate_jobinfo(switch_jobinfo_t *source, switch_jobinfo_t **dest)
{
    void *copy = nullptr;
    int rc = entry::duplicate(source, &copy);
    *dest = as_switch_jobinfo(copy);
    return rc;
}

void switch_p_free_jobinfo(switch_jobinfo_t *switch_job) { entry::free_info(switch_job); }

int switch_p_pack_jobinfo(switch_jobinfo_t *switch_job, buf_t *buffer, uint16_t protocol_version)
{
    return entry::pack(switch_job, buffer);
}

// job_step_allocated holds a recovered step's context: not here.
int switch_p_unpack_jobinfo(switch_jobinfo_t **switch_job, buf_t *buffer, uint16_t protocol_version)
{
    void *info = nullptr;
    int rc = entry::unpack(&info, buffer, false);
    *switch_job = as_switch_jobinfo(info);
    return rc;
}

// No keys: Slurm's generic code asks none of switch/rdma.
int switch_p_get_jobinfo(switch_jobinfo_t *switch_job, int key, void *resulting_data)
{
    errno = EINVAL;
    return SLURM_ERROR;
}

// ---- slurmstepd hooks around the tasks --------------------------------------

int switch_p_job_preinit(stepd_step_rec_t *job) { return SLURM_SUCCESS; }

// Root, before the tasks start.
int switch_p_job_init(stepd_step_rec_t *job)
{
    return entry::job_init(job, job->switch_job ? job->switch_job->data : nullptr);
}

// In each task, as its user, before exec.
int switch_p_job_attach(switch_jobinfo_t *jobinfo, char ***env, uint32_t nodeid, uint32_t procid,
                        uint32_t nnodes, uint32_t nprocs, uint32_t rank)
{
    return entry::attach(jobinfo, env);
}

// Root, after the tasks (some of their processes may remain): nothing; the
// context is closed in postfini, once every process is gone.
int switch_p_job_fini(switch_jobinfo_t *jobinfo) { return SLURM_SUCCESS; }

// Root, after every process of the step is killed (also when job_init
// failed).
int switch_p_job_postfini(stepd_step_rec_t *job) { return entry::postfini(job); }

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
    entry::pre_suspend(job);
    return SLURM_SUCCESS;
}
int switch_p_job_step_post_suspend(stepd_step_rec_t *job) { return SLURM_SUCCESS; }
int switch_p_job_step_pre_resume(stepd_step_rec_t *job) { return SLURM_SUCCESS; }
int switch_p_job_step_post_resume(stepd_step_rec_t *job)
{
    entry::post_resume(job);
    return SLURM_SUCCESS;
}

// ---- slurmctld step bookkeeping (job write lock held) ----------------------

int switch_p_job_step_complete(switch_jobinfo_t *jobinfo, char *nodelist)
{
    return entry::step_complete(jobinfo);
}

int switch_p_job_step_allocated(switch_jobinfo_t *jobinfo, char *nodelist)
{
    return entry::step_allocated(jobinfo);
}

void switch_p_job_complete(uint32_t job_id) { entry::job_complete(job_id); }

} // extern "C"
