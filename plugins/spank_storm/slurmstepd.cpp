// spank/storm in slurmstepd: --storm-cosched's PMPI library in the tasks.
//
// In each task of the job's steps (not the batch script, not the extern
// step), libstorm_cosched_pmpi.so is prepended to LD_PRELOAD, so that the
// tasks register with the node's local scheduler at MPI_Init and report
// message arrivals (cosched/README.md).  A missing library is logged and
// the task runs without it.
extern "C" {
#include <slurm/slurm.h> // SLURM_MAX_NORMAL_STEP_ID
}
#include "plugins/spank_storm/parts.hpp"

#include <cerrno>
#include <cstring>
#include <string>
#include <unistd.h>

#ifndef STORM_COSCHED_PMPI
#define STORM_COSCHED_PMPI "/usr/local/lib/storm/libstorm_cosched_pmpi.so"
#endif

namespace storm::plugins::spank_storm::slurmstepd {

int preload_cosched(spank_t sp) noexcept
{
    uint32_t step = 0;
    if (spank_get_item(sp, S_JOB_STEPID, &step) != ESPANK_SUCCESS || step > SLURM_MAX_NORMAL_STEP_ID)
        return ESPANK_SUCCESS; // the batch script and the extern step run no MPI
    const char *lib = STORM_COSCHED_PMPI;
    if (access(lib, R_OK) != 0) {
        slurm_error("spank/storm: --storm-cosched: cannot read %s: %s (the task runs without coscheduling)",
                    lib, std::strerror(errno));
        return ESPANK_SUCCESS;
    }
    char old[4096] = "";
    std::string value = lib;
    spank_err_t rc = spank_getenv(sp, "LD_PRELOAD", old, sizeof old);
    if (rc == ESPANK_SUCCESS && old[0] && !std::strstr(old, lib))
        value += std::string(" ") + old;
    else if (rc == ESPANK_SUCCESS && std::strstr(old, lib))
        value = old;
    else if (rc == ESPANK_NOSPACE) {
        slurm_error("spank/storm: --storm-cosched: LD_PRELOAD is longer than 4096 bytes: left alone");
        return ESPANK_SUCCESS;
    }
    rc = spank_setenv(sp, "LD_PRELOAD", value.c_str(), 1);
    if (rc != ESPANK_SUCCESS)
        slurm_error("spank/storm: --storm-cosched: cannot set LD_PRELOAD: %s", spank_strerror(rc));
    return ESPANK_SUCCESS;
}

} // namespace storm::plugins::spank_storm::slurmstepd
