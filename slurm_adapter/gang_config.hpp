// Storm's gang configuration as slurmctld's sched/gang and select/gang read
// it: SchedulerParameters, the partitions' OverSubscribe, PreemptMode and
// SwitchType.  Callers hold slurmctld's configuration (partition) read lock.
// Throws ConfigError on bad settings.
#pragma once

#include <cstring>
#include <vector>

#include "sched_gang/config.hpp"
#include "slurm_api.hpp"

extern "C" {
#include "src/common/read_config.h"
#include "src/slurmctld/slurmctld.h"
}

namespace storm::shim {

inline std::vector<gang::PartitionInfo> gang_partitions()
{
    std::vector<gang::PartitionInfo> out;
    if (!part_list)
        return out;
    slurm_api::slurm_list_itr it = list_iterator_create(part_list);
    while (auto *p = static_cast<part_record_t *>(list_next(it))) {
        gang::PartitionInfo pi;
        pi.name = p->name ? p->name : "?";
        pi.force = p->max_share & SHARED_FORCE;
        pi.max_share = p->max_share & ~SHARED_FORCE;
        out.push_back(pi);
    }
    list_iterator_destroy(it);
    return out;
}

inline gang::GangConfig read_gang_config()
{
    bool switch_rdma = slurm_conf.switch_type && !std::strcmp(slurm_conf.switch_type, "switch/rdma");
    return gang::GangConfig::parse(slurm_conf.sched_params, gang_partitions(),
                                   slurm_conf.preempt_mode & PREEMPT_MODE_GANG, switch_rdma);
}

} // namespace storm::shim
