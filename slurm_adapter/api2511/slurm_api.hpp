// Slurm's plugin API of the 25.11 line: what the shims need that differs
// between release lines (slurm_adapter/README.md).  The build puts this
// folder on the include path when configure found a Slurm 25.11 source
// tree, so a shim includes "slurm_api.hpp" and never tests a version.
#pragma once

namespace storm::slurm_api {

// The release line this adapter is for, as logs and errors name it.
inline constexpr const char *kLine = "25.11";

} // namespace storm::slurm_api

// ---- gang section (select/gang, sched/gang, slurm_adapter/gang_config.hpp) ----
// Slurm's list types under the names the shims use on every line: list_t
// and list_itr_t (struct typedefs, used through pointers) since 23.11.
// Include this header before Slurm's slurmctld headers:
// src/common/extra_constraints.h (which slurmctld.h includes since 23.11)
// names a struct member `operator`, a C++ keyword; it is read here once
// with the member renamed (the layout is unchanged; nothing of Storm's uses
// the member), and its include guard keeps later includes from reading it
// again.
extern "C" {
#include "src/common/data.h"
#include "src/common/list.h"
#define operator operator_
#include "src/common/extra_constraints.h"
#undef operator
}

// ---- switch/rdma (plugins/switch_rdma/) ------------------------------------
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
#include "src/interfaces/acct_gather.h"
#include "src/interfaces/proctrack.h"
}

namespace storm::slurm_api {

using slurm_list = ::list_t *;
using slurm_list_itr = ::list_itr_t *;

// The error with which slurmctld refuses a step for now, every context
// being in use: this line has no ESLURM_INTERCONNECT_BUSY (srun retried on
// it), and any refusal of switch_p_stepinfo_build fails the step with
// ESLURM_INTERCONNECT_FAILURE.
inline constexpr int kInterconnectBusy = ESLURM_INTERCONNECT_FAILURE;
inline constexpr bool kInterconnectBusyRetried = false;

// The variable in the environment of the new slurmd that `scontrol
// reconfigure` execs while the old one still runs (slurmd.c).
inline constexpr const char *kSlurmdReconfigureEnv = "SLURMD_RECONF";

// Slurm's suspend (scontrol suspend) no longer reaches switch plugins
// (their hooks went in 23.11); in slurmstepd, acct_gather_suspend_test() is
// its record of the step's: set before the step's SIGTSTP and SIGSTOP,
// cleared before its SIGCONT (slurmstepd's req.c).
inline constexpr bool kSwitchSuspendHooks = false;
inline bool step_suspended() { return acct_gather_suspend_test(); }

} // namespace storm::slurm_api
