// Slurm 24.11 in srun, as cli_filter/storm sees it: the command srun runs
// (its argc/argv live in slurm_opt_t itself (opt->argc/argv; srun_opt_t lost them in 23.02)), and whether
// srun is ending the step. Used by plugins/cli_filter_storm/srun.cpp.
#pragma once

extern "C" {
#include "src/common/slurm_opt.h"
// srun_probe.c of this folder: 1 once srun ended the step it launches (a
// signal), 0 while it has not, -1 when this line's srun does not tell.
int storm_srun_step_aborted(void);
}

namespace storm::slurm_api {

inline int &srun_argc(slurm_opt_t *o) { return o->argc; }
inline char **&srun_argv(slurm_opt_t *o) { return o->argv; }

} // namespace storm::slurm_api
