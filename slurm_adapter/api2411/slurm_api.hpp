// Slurm's plugin API of the 24.11 line: what the shims need that differs
// between release lines (slurm_adapter/README.md).  The build puts this
// folder on the include path when configure found a Slurm 24.11 source
// tree, so a shim includes "slurm_api.hpp" and never tests a version.
#pragma once

namespace storm::slurm_api {

// The release line this adapter is for, as logs and errors name it.
inline constexpr const char *kLine = "24.11";

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

namespace storm::slurm_api {

using slurm_list = ::list_t *;
using slurm_list_itr = ::list_itr_t *;

} // namespace storm::slurm_api
