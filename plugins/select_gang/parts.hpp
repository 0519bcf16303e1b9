// select/gang's part, as its entry file (select_gang.cpp) calls it: the
// packing of gang jobs into the gang matrix's slots (slurmctld.cpp), the
// plugin's only work of its own.  Slurm loads every select plugin in
// slurmctld, srun and slurmd, but calls job_test in slurmctld alone.
//
// Contract: one GangPacking per process, made by init() and destroyed by
// fini().  job_test() takes cons_tres's job_test as `cons_tres` (run on
// the bitmap as it then is), returns what cons_tres returned, and throws
// nothing.
#pragma once

#include "slurm_adapter/shim.hpp"

#include <functional>
#include <mutex>

#include "sched_gang/matrix.hpp"
#include "sched_gang/packing.hpp"

extern "C" {
#include "src/common/select.h"
#include "src/slurmctld/slurmctld.h"
}

namespace storm::plugins::select_gang {

class GangPacking {
public:
    explicit GangPacking(const Logger &log) : log(log) {}

    // select_p_job_test: a gang job started now gets packing's nodes if
    // cons_tres accepts them, every other one cons_tres's choice.  `bitmap`
    // is in/out as for cons_tres (the chosen nodes).
    int job_test(job_record_t *job_ptr, bitstr_t *bitmap, uint32_t min_nodes, uint16_t mode,
                 List preemptee_candidates, List *preemptee_job_list, const std::function<int()> &cons_tres);

private:
    gang::Placement pack(bitstr_t *bitmap, uint32_t count);

    Logger log;
    std::mutex mu;
    gang::Matrix matrix{gang::kMaxSlots}; // mirrors sched/gang's
};

} // namespace storm::plugins::select_gang
