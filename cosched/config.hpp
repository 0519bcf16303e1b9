// Implicit coscheduling's settings (seed 001), in slurm.conf's
// SwitchParameters beside the node agent's:
//
//   SwitchType=switch/rdma
//   SwitchParameters=storm_cosched_partitions=work:debug,storm_cosched_slice=15s,
//                    storm_cosched_gmet=5s,storm_cosched_share=1
//
// Why SwitchParameters: the local scheduler lives in the node agent inside
// slurmd, and slurmd already parses SwitchParameters (switch/rdma's init())
// and rejects unknown keys there; SchedulerParameters is slurmctld's.
//
//   storm_cosched_partitions  the partitions whose jobs are coscheduled,
//                             separated by ':' (SwitchParameters' items are
//                             separated by ','); absent = off on every node
//   storm_cosched_slice       the timer's period: at each tick the job that
//                             received the least CPU time is scheduled;
//                             10ms - 1h (default 15s, the paper's Fig. 2)
//   storm_cosched_gmet        guaranteed minimum execution time: a newly
//                             scheduled job is not preempted before it;
//                             0 - storm_cosched_slice (default 5s)
//   storm_cosched_share       percent of the CPU each unscheduled job keeps
//                             so that it can notice messages; 1 - 50
//                             (default 1, the paper's 1%)
//
// Contract: take() consumes these keys from `p` and throws ConfigError
// naming the key, the value and what is allowed.
#pragma once

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "lib/common/params.hpp"

namespace storm::cosched {

struct CoschedConfig {
    std::vector<std::string> partitions; // empty: coscheduling is off
    std::chrono::microseconds slice{15000000};
    std::chrono::microseconds gmet{5000000};
    unsigned share_percent = 1;

    bool enabled() const noexcept { return !partitions.empty(); }
    bool covers(const std::string &partition) const
    {
        for (const auto &p : partitions)
            if (p == partition)
                return true;
        return false;
    }

    void take(ParamList &p)
    {
        std::string list = p.take_string("storm_cosched_partitions",
                                         "partition names separated by ':' (e.g. work:debug)", "");
        partitions.clear();
        size_t start = 0;
        while (!list.empty()) {
            size_t colon = list.find(':', start);
            std::string name =
                list.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
            if (name.empty() || name.find_first_of(" \t=") != std::string::npos)
                throw ConfigError("SwitchParameters: invalid value \"" + list +
                                  "\" for storm_cosched_partitions (allowed: partition names separated by "
                                  "':', none empty)");
            partitions.push_back(name);
            if (colon == std::string::npos)
                break;
            start = colon + 1;
        }
        slice = std::chrono::microseconds(p.take_duration_us("storm_cosched_slice", 10000, 3600000000ull,
                                                             static_cast<uint64_t>(slice.count())));
        uint64_t max_gmet = static_cast<uint64_t>(slice.count());
        uint64_t def_gmet = std::min<uint64_t>(static_cast<uint64_t>(gmet.count()), max_gmet);
        gmet = std::chrono::microseconds(p.take_duration_us("storm_cosched_gmet", 0, max_gmet, def_gmet));
        share_percent = static_cast<unsigned>(p.take_uint("storm_cosched_share", 1, 50, share_percent));
    }
};

} // namespace storm::cosched
