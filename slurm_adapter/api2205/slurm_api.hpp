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

namespace storm::slurm_api {

using slurm_list = ::List;
using slurm_list_itr = ::ListIterator;

} // namespace storm::slurm_api
