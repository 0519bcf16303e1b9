// spank/storm's part, as its entry file (spank_storm.cpp) calls it: the
// work in slurmstepd's tasks (slurmstepd.cpp).  The other contexts (srun,
// sbatch/salloc, slurmd) only register the option and log the plugin's
// line, which the entry file does.
//
// Contract: returns ESPANK_SUCCESS (0) on every path (any other value
// fails the task: negative ones on every line, positive ones too since
// 25.05), logs what it could not do into slurmd.log; throws nothing.
#pragma once

extern "C" {
#include <slurm/spank.h>
}

namespace storm::plugins::spank_storm::slurmstepd {

// In a task of a job given --storm-cosched (remote context, as the user,
// before exec): the PMPI library first in LD_PRELOAD.
int preload_cosched(spank_t sp) noexcept;

} // namespace storm::plugins::spank_storm::slurmstepd
