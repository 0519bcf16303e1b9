// switch/rdma's entry points for Slurm's 24.11 switch API
// (src/interfaces/switch.c's syms[]): each converts its arguments and calls
// the body every generation shares (plugins/switch_rdma/switch_rdma.cpp,
// which also holds init, fini and the plugin's identity).
//
// Against 22.05: a step's switch info is its "stepinfo", which
// build_stepinfo allocates itself; the per-job "jobinfo" is another thing,
// which switch/rdma does not use (none is packed); the state is saved to
// and restored from StateSaveLocation without a directory argument;
// job_step_allocated, reconfig and the suspend hooks are gone.  A step
// slurmctld recovers at restart holds its context again when Slurm unpacks
// its stepinfo from the job state (Slurm unpacks a stepinfo in slurmctld
// for that only).  slurmctld restarts on `scontrol reconfigure`, and so the
// plugin rereads SwitchParameters in init().  A Slurm suspend is known to
// the gang fail-safes from slurmstepd's own record of it instead
// (plugins/switch_rdma/slurmstepd.cpp: watch_suspend).
#include "plugins/switch_rdma/parts.hpp"

extern "C" {
#include "src/common/read_config.h"
}

using namespace storm::plugins::switch_rdma;

extern "C" {

// ---- slurmctld: the table across restarts ----------------------------------

int switch_p_save(void) { return entry::save(slurm_conf.state_save_location); }
int switch_p_restore(bool recover) { return entry::restore(slurm_conf.state_save_location, recover); }

// ---- the job's switch info: none --------------------------------------------

void switch_p_pack_jobinfo(void *switch_jobinfo, buf_t *buffer, uint16_t protocol_version) {}
int switch_p_unpack_jobinfo(void **switch_jobinfo, buf_t *buffer, uint16_t protocol_version)
{
    *switch_jobinfo = nullptr;
    return SLURM_SUCCESS;
}

// ---- the step's switch info: its Context, or none ---------------------------

// slurmctld, at step creation under the job write lock.  Refused with
// errno ESLURM_INTERCONNECT_BUSY when every id is in use: srun retries.
int switch_p_build_stepinfo(void **stepinfo, slurm_step_layout_t *step_layout, step_record_t *step_ptr)
{
    *stepinfo = entry::alloc();
    return entry::build(*stepinfo, step_layout, step_ptr);
}

void switch_p_duplicate_stepinfo(void *source, void **dest) { entry::duplicate(source, dest); }
void switch_p_free_stepinfo(void *stepinfo) { entry::free_info(stepinfo); }
void switch_p_pack_stepinfo(void *stepinfo, buf_t *buffer, uint16_t protocol_version)
{
    entry::pack(stepinfo, buffer);
}
// In slurmctld (its job state loading) this holds the step's context again.
int switch_p_unpack_stepinfo(void **stepinfo, buf_t *buffer, uint16_t protocol_version)
{
    return entry::unpack(stepinfo, buffer, true);
}

// ---- slurmstepd hooks around the tasks --------------------------------------

int switch_p_job_preinit(stepd_step_rec_t *step) { return SLURM_SUCCESS; }

// Root, before the tasks start (not for batch and interactive steps).
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
void switch_p_job_start(job_record_t *job_ptr) {}
void switch_p_job_complete(job_record_t *job_ptr)
{
    if (job_ptr)
        entry::job_complete(job_ptr->job_id);
}

// ---- nothing for the job container, the extern step ------------------------

int switch_p_fs_init(stepd_step_rec_t *step) { return SLURM_SUCCESS; }
void switch_p_extern_stepinfo(void **stepinfo, job_record_t *job_ptr) {}
void switch_p_extern_step_fini(uint32_t job_id) {}

} // extern "C"
