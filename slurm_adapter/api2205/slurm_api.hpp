// Slurm's plugin API of the 22.05 line: what the shims need that differs
// between release lines (slurm_adapter/README.md).  The build puts this
// folder on the include path when configure found a Slurm 22.05 source
// tree, so a shim includes "slurm_api.hpp" and never tests a version.
#pragma once

namespace storm::slurm_api {

// The release line this adapter is for, as logs and errors name it.
inline constexpr const char *kLine = "22.05";

} // namespace storm::slurm_api

// ---- gang section (select/gang, sched/gang, slurm_adapter/gang_config.hpp) ----
// Slurm's list types under the names the shims use on every line: List and
// ListIterator (pointer typedefs) on 22.05.  Include this header before
// Slurm's slurmctld headers.
extern "C" {
#include "src/common/list.h"
}

// ---- switch/rdma (plugins/switch_rdma/) ------------------------------------
// Slurm's internal headers switch/rdma reads: the controller's records, the
// step daemon's, proctrack.
extern "C" {
#include "slurm/slurm.h"
#include "src/slurmctld/slurmctld.h"
#include "src/slurmd/slurmstepd/slurmstepd_job.h"
#include "src/slurmd/common/proctrack.h"
}

namespace storm::slurm_api {

using slurm_list = ::List;
using slurm_list_itr = ::ListIterator;

// The error with which slurmctld refuses a step for now, every context
// being in use: srun retries the step.
inline constexpr int kInterconnectBusy = ESLURM_INTERCONNECT_BUSY;
inline constexpr bool kInterconnectBusyRetried = true;

// slurmd reconfigures in place (`scontrol reconfigure`): no new slurmd.
inline constexpr const char *kSlurmdReconfigureEnv = nullptr;

// Slurm's suspend (scontrol suspend) reaches switch plugins through the
// hooks switch_p_job_step_pre_suspend and post_resume.
inline constexpr bool kSwitchSuspendHooks = true;
inline bool step_suspended() { return false; } // the hooks say

} // namespace storm::slurm_api
