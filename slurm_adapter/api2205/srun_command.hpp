// Slurm 22.05 in srun, as cli_filter/storm sees it: the command srun runs
// (its argc/argv live in srun_opt_t (opt->srun_opt->argc/argv)), and whether srun is ending the step.
// Used by plugins/cli_filter_storm/srun.cpp.
#pragma once

extern "C" {
#include "src/common/slurm_opt.h"
// srun_probe.c of this folder: 1 once srun ended the step it launches (a
// signal), 0 while it has not, -1 when this line's srun does not tell.
// The first call hooks srun's launch plugin table (see there).
int storm_srun_step_aborted(void);
}

namespace storm::slurm_api {

inline int &srun_argc(slurm_opt_t *o) { return o->srun_opt->argc; }
inline char **&srun_argv(slurm_opt_t *o) { return o->srun_opt->argv; }

} // namespace storm::slurm_api
