// Gang scheduling's settings, from slurm.conf:
//
//   SchedulerType=sched/gang
//   SchedulerParameters=storm_gang_quantum=2ms,storm_gang_failsafe=5s,storm_gang_mpl=2
//   SwitchType=switch/rdma                     (the node agents switch the jobs)
//   PartitionName=gang ... OverSubscribe=FORCE:2
//
// Gang partitions are those with OverSubscribe=FORCE:N, N >= 2 (N jobs may
// share a core: the partition's multiprogramming level).  Stock gang
// scheduling must stay off (PreemptMode without GANG).
//
//   storm_gang_quantum   time slot length, 1ms - 60min (default 50ms)
//   storm_gang_failsafe  a node continues every job it stopped after this
//                        long without a strobe, at least 3 quanta and
//                        100ms, at most 1h (default: 5s or 10 quanta,
//                        whichever is longer)
//   storm_gang_mpl       slots in the matrix, 1-64, at most the largest N
//                        of the gang partitions (default: that N)
//   storm_fault_timeout  a node whose agent answers no heartbeat for this
//                        long is drained and set down in Slurm (its jobs
//                        requeued or failed), 0 (off) or 1s - 1h
//                        (default 5s; lib/prim/fault_monitor.hpp)
//
// Contract: GangConfig::parse() throws ConfigError naming the setting, the
// value and what is allowed; the other SchedulerParameters are backfill's.
#pragma once

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "lib/common/params.hpp"
#include "sched_gang/matrix.hpp"

namespace storm::gang {

struct PartitionInfo {
    std::string name;
    bool force = false;     // OverSubscribe=FORCE
    unsigned max_share = 1; // its N
    bool gang() const { return force && max_share >= 2; }
};

struct GangConfig {
    std::chrono::microseconds quantum{50000};
    std::chrono::milliseconds failsafe{5000};
    unsigned mpl = 0;
    std::vector<std::string> partitions; // the gang partitions
    // slurmctld's fault detection (not gang scheduling's: it runs with or
    // without gang partitions); 0 = off.
    std::chrono::milliseconds fault_timeout{kDefaultFaultTimeout};
    static constexpr std::chrono::milliseconds kDefaultFaultTimeout{5000};

    static GangConfig parse(const char *sched_params, const std::vector<PartitionInfo> &parts,
                            bool stock_gang_on, bool switch_rdma)
    {
        ParamList p(sched_params, "SchedulerParameters", "storm_");
        GangConfig c;
        c.quantum =
            std::chrono::microseconds(p.take_duration_us("storm_gang_quantum", 1000, 3600000000ull, 50000));
        uint64_t q = static_cast<uint64_t>(c.quantum.count());
        uint64_t min_fs = std::max<uint64_t>(3 * q, 100000);
        uint64_t def_fs = std::max<uint64_t>(10 * q, 5000000);
        uint64_t fs = p.take_duration_us("storm_gang_failsafe", min_fs,
                                         std::max<uint64_t>(3600000000ull, min_fs), def_fs);
        c.failsafe = std::chrono::milliseconds((fs + 999) / 1000);
        unsigned top = 0;
        std::string top_name;
        for (const auto &pi : parts) {
            if (!pi.gang())
                continue;
            if (pi.max_share > kMaxSlots)
                throw ConfigError("partition " + pi.name +
                                  ": OverSubscribe=FORCE:" + std::to_string(pi.max_share) + " exceeds the " +
                                  std::to_string(kMaxSlots) + " time slots Storm's gang scheduling supports");
            c.partitions.push_back(pi.name);
            if (pi.max_share > top) {
                top = pi.max_share;
                top_name = pi.name;
            }
        }
        bool asked = p.has("storm_gang_mpl");
        c.mpl = static_cast<unsigned>(p.take_uint("storm_gang_mpl", 1, kMaxSlots, std::max(top, 1u)));
        c.fault_timeout = std::chrono::milliseconds(take_fault_timeout(p) / 1000);
        p.reject_unknown();
        if (asked && top == 0)
            throw ConfigError("SchedulerParameters: storm_gang_mpl=" + std::to_string(c.mpl) +
                              " but no partition has OverSubscribe=FORCE:N with N >= 2 to gang-schedule");
        if (c.mpl > top && top)
            throw ConfigError("SchedulerParameters: storm_gang_mpl=" + std::to_string(c.mpl) +
                              " exceeds the " + std::to_string(top) + " jobs per core that partition " +
                              top_name + " allows (OverSubscribe=FORCE:" + std::to_string(top) + ")");
        if (top && stock_gang_on)
            throw ConfigError(
                "PreemptMode includes GANG: Slurm's own gang scheduling would switch the same jobs "
                "as Storm's; remove GANG from PreemptMode");
        if (top && !switch_rdma)
            throw ConfigError("partition " + top_name +
                              " is gang-scheduled (OverSubscribe=FORCE) but SwitchType is not switch/rdma, "
                              "whose node agents switch the jobs");
        return c;
    }

    // storm_fault_timeout: 0 (off), or 1s - 1h, in microseconds.
    static uint64_t take_fault_timeout(ParamList &p)
    {
        const uint64_t def = static_cast<uint64_t>(kDefaultFaultTimeout.count()) * 1000;
        uint64_t us = p.take_duration_us("storm_fault_timeout", 0, 3600000000ull, def);
        if (us != 0 && us < 1000000)
            throw ConfigError("SchedulerParameters: invalid value \"" + format_duration_us(us) +
                              "\" for storm_fault_timeout (allowed: 0 to turn fault detection off, or a "
                              "duration from 1s to 60min with a unit: us, ms, s or min)");
        return us;
    }
};

} // namespace storm::gang
