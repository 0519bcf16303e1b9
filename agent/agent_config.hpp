// The node agent's settings, read from slurm.conf's SwitchParameters.
//
//   SwitchParameters=storm_agent_port=6830,storm_fanout=8,storm_rt_priority=10
//   SwitchParameters=...,storm_agent_nice=-10
//   SwitchParameters=...,storm_mcast=239.255.77.1:6831,storm_mcast_mtu=1500
//   SwitchParameters=...,storm_gang_stop=freeze|signal,storm_gang_lend=yes|no
//
// Every key in SwitchParameters is Storm's when SwitchType=switch/rdma, so
// unknown keys are errors (ConfigError names the key and the known ones).
#pragma once

#include <cstdint>

#include "lib/common/params.hpp"
#include "lib/net/mcast.hpp"
#include "cosched/config.hpp"
#include "switch_rdma/pool_config.hpp"

namespace storm::agent {

struct AgentConfig {
    static constexpr uint16_t default_port = 6830;
    static constexpr unsigned default_fanout = 8;

    uint16_t port = default_port;     // TCP port every node agent listens on
    unsigned fanout = default_fanout; // children per node in the agents' k-ary tree
    // SCHED_FIFO priority of the threads that carry gang strobes (node
    // agent, machine manager) while jobs are gang-scheduled; 0 = never RT.
    static constexpr unsigned default_rt_priority = 10;
    unsigned rt_priority = default_rt_priority;
    // The nice value of the agent's loop thread (-20 to 19; slurmd's other
    // threads keep theirs).  Above the node's other work by default, so
    // that heartbeats, strobes and a broadcast's control messages are
    // answered in time on a node busy launching or running jobs (the
    // threads that write a user's files run at slurmd's own).
    static constexpr int default_nice = -10;
    int nice = default_nice;
    // How the gang switcher stops and continues jobs: the cgroup v2 freezer
    // where it can be used, with signals as the fallback (freeze, the
    // default), or signals only (sched_gang/freezer.hpp).
    bool gang_freeze = true;
    // Whether a gang slot with nothing to run on this node (its jobs have
    // no process here: ended, or between steps) leaves the node to the
    // jobs that run instead of idling it (sched_gang/switcher.hpp).
    bool gang_lend = true;
    // The node's buffer pool and the step contexts (switch_rdma/).
    rdma::PoolConfig pool;
    // Implicit coscheduling's local scheduler (cosched/config.hpp); off
    // unless storm_cosched_partitions is given.
    cosched::CoschedConfig cosched;
    // Multicast data path of large transfers (lib/net/mcast.hpp): off
    // unless storm_mcast=GROUP:PORT is given.
    net::McastConfig mcast;

    // Throws ConfigError on a bad value or an unknown key.  `text` may be null.
    static AgentConfig from_switch_parameters(const char *text)
    {
        ParamList p(text, "SwitchParameters", "");
        AgentConfig c;
        c.port = static_cast<uint16_t>(p.take_uint("storm_agent_port", 1, 65535, default_port));
        c.fanout = static_cast<unsigned>(p.take_uint("storm_fanout", 2, 64, default_fanout));
        c.rt_priority = static_cast<unsigned>(p.take_uint("storm_rt_priority", 0, 99, default_rt_priority));
        c.nice = static_cast<int>(p.take_int("storm_agent_nice", -20, 19, default_nice));
        c.pool.take(p);
        c.cosched.take(p);
        std::string group =
            p.take_string("storm_mcast", "a multicast group and port, e.g. 239.255.77.1:6831", "");
        if (!group.empty()) {
            try {
                net::parse_mcast_group(group, c.mcast.group, c.mcast.port);
                if (c.mcast.port == 65535)
                    throw std::invalid_argument("gang strobes use PORT+1: PORT at most 65534");
            } catch (const std::invalid_argument &e) {
                throw ConfigError("SwitchParameters: invalid value \"" + group + "\" for storm_mcast (" +
                                  e.what() + "; allowed: GROUP:PORT, e.g. 239.255.77.1:6831)");
            }
        }
        c.mcast.mtu = static_cast<unsigned>(p.take_uint("storm_mcast_mtu", 576, 65535, c.mcast.mtu));
        c.mcast.wait =
            std::chrono::milliseconds(p.take_duration_us("storm_mcast_wait", 1000, 10000000, 30000) / 1000);
        c.gang_freeze = p.take_choice("storm_gang_stop", {"freeze", "signal"}, "freeze") == "freeze";
        c.gang_lend = p.take_choice("storm_gang_lend", {"yes", "no"}, "yes") == "yes";
        p.reject_unknown();
        return c;
    }
};

} // namespace storm::agent
