// switch/rdma's entry points for Slurm's 25.11 switch API
// (src/interfaces/switch.c's syms[]): each converts its arguments and calls
// the body every generation shares (plugins/switch_rdma/switch_rdma.cpp,
// which also holds init, fini and the plugin's identity).
//
// Against 24.11: the names are jobinfo_* and stepinfo_*; stepinfo_build
// takes the job's switch info instead of the layout (the step record has
// it); setup_special_steps says whether batch, extern and interactive steps
// get switch info (not from switch/rdma); job_start may refuse a job
// (test_only first); job_channel names a channel per node (none).  A step
// refused its context now always fails with ESLURM_INTERCONNECT_FAILURE
// (Slurm no longer has ESLURM_INTERCONNECT_BUSY, on which srun retried):
// a step beyond storm_ctx_max contexts fails instead of waiting.
#include "plugins/switch_rdma/parts.hpp"

extern "C" {
#include "src/common/read_config.h"
}

using namespace storm::plugins::switch_rdma;

extern "C" {

// ---- slurmctld: the table across restarts ----------------------------------

int switch_p_save(void) { return entry::save(slurm_conf.state_save_location); }
int switch_p_restore(bool recover) { return entry::restore(slurm_conf.state_save_location, recover); }

// ---- the job's switch info: none (Slurm frees none: it never has one) -------

void switch_p_jobinfo_pack(void *switch_jobinfo, buf_t *buffer, uint16_t protocol_version) {}
int switch_p_jobinfo_unpack(void **switch_jobinfo, buf_t *buffer, uint16_t protocol_version)
{
    *switch_jobinfo = nullptr;
    return SLURM_SUCCESS;
}
void switch_p_jobinfo_free(void *switch_jobinfo) {}

// ---- the step's switch info: its Context, or none ---------------------------

// slurmctld, at step creation under the job write lock (only for a step
// with a layout).
int switch_p_stepinfo_build(void **stepinfo, void *switch_jobinfo, step_record_t *step_ptr)
{
    *stepinfo = entry::alloc();
    return entry::build(*stepinfo, step_ptr ? step_ptr->step_layout : nullptr, step_ptr);
}

void switch_p_stepinfo_duplicate(void *source, void **dest) { entry::duplicate(source, dest); }
void switch_p_stepinfo_free(void *stepinfo) { entry::free_info(stepinfo); }
void switch_p_stepinfo_pack(void *stepinfo, buf_t *buffer, uint16_t protocol_version)
{
    entry::pack(stepinfo, buffer);
}
// In slurmctld (its job state loading) this holds the step's context again.
int switch_p_stepinfo_unpack(void **stepinfo, buf_t *buffer, uint16_t protocol_version)
{
    return entry::unpack(stepinfo, buffer, true);
}

// Batch, extern and interactive steps: no switch info, no job_init.
bool switch_p_setup_special_steps(void) { return false; }

// ---- slurmstepd hooks around the tasks --------------------------------------

int switch_p_job_preinit(stepd_step_rec_t *step) { return SLURM_SUCCESS; }

// Root, before the tasks start.
int switch_p_job_init(stepd_step_rec_t *step)
{
    return entry::job_init(step, step->switch_step ? step->switch_step->data : nullptr);
}

// Root, after every process of the step is killed (also when job_init
// failed).
int switch_p_job_postfini(stepd_step_rec_t *step) { return entry::postfini(step); }

// In each task, as its user, before exec.
int switch_p_job_attach(void *stepinfo, char ***env, uint32_t nodeid, uint32_t procid, uint32_t nnodes,
                        uint32_t nprocs, uint32_t rank)
{
    return entry::attach(stepinfo, env);
}

// ---- slurmctld step and job bookkeeping (job write lock held) --------------

int switch_p_job_step_complete(void *stepinfo, char *nodelist) { return entry::step_complete(stepinfo); }
int switch_p_job_start(job_record_t *job_ptr, bool test_only) { return SLURM_SUCCESS; }
void switch_p_job_complete(job_record_t *job_ptr)
{
    if (job_ptr)
        entry::job_complete(job_ptr->job_id);
}
uint32_t switch_p_job_channel(job_record_t *job_ptr, char *node_name) { return NO_VAL; }

// ---- nothing for the job container, the extern step ------------------------

int switch_p_fs_init(stepd_step_rec_t *step) { return SLURM_SUCCESS; }
void switch_p_extern_step_fini(uint32_t job_id) {}

} // extern "C"
