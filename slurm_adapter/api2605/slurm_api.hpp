// Slurm's plugin API of the 26.05 line: what the shims need that differs
// between release lines (slurm_adapter/README.md).  The build puts this
// folder on the include path when configure found a Slurm 26.05 source
// tree, so a shim includes "slurm_api.hpp" and never tests a version.
#pragma once

namespace storm::slurm_api {

// The release line this adapter is for, as logs and errors name it.
inline constexpr const char *kLine = "26.05";

} // namespace storm::slurm_api

// ---- switch/rdma (plugins/switch_rdma/) ------------------------------------
// slurm_load_job(job_info_msg_t **, slurm_step_id_t, uint16_t) on this line.
// Slurm's internal headers switch/rdma reads: the controller's records, the
// step daemon's, proctrack (src/interfaces/ from 23.02).  From 24.11
// src/common/extra_constraints.h, which slurmctld.h includes, names a struct
// member "operator", which C++ cannot read: it is read first, the member
// renamed (the layout is the same; Storm never uses it).
extern "C" {
#include "slurm/slurm.h"
#include "src/common/data.h"
#define operator operator_
#include "src/common/extra_constraints.h"
#undef operator
#include "src/slurmctld/slurmctld.h"
#include "src/slurmd/slurmstepd/slurmstepd_job.h"
#include "src/interfaces/proctrack.h"
}

namespace storm::slurm_api {

// The error with which slurmctld refuses a step for now, every context
// being in use: this line has no ESLURM_INTERCONNECT_BUSY (srun retried on
// it), and any refusal of switch_p_stepinfo_build fails the step with
// ESLURM_INTERCONNECT_FAILURE.
inline constexpr int kInterconnectBusy = ESLURM_INTERCONNECT_FAILURE;
inline constexpr bool kInterconnectBusyRetried = false;

// The variable in the environment of the new slurmd that `scontrol
// reconfigure` execs while the old one still runs (slurmd.c).
inline constexpr const char *kSlurmdReconfigureEnv = "SLURMD_RECONF";

// Job `job_id`'s record as slurmctld has it (an RPC, from any daemon or
// client): SLURM_SUCCESS and *resp (slurm_free_job_info_msg), or Slurm's
// error (errno set).
inline int load_job(job_info_msg_t **resp, uint32_t job_id)
{
    slurm_step_id_t id{};
    id.job_id = job_id;
    id.step_het_comp = NO_VAL;
    id.step_id = NO_VAL;
    return slurm_load_job(resp, id, SHOW_ALL);
}

} // namespace storm::slurm_api
