// A broadcast into a job's nodes as srun and storm-bcast start it: Slurm's
// sbcast credential for the job (from slurmctld, which checks the caller
// may use the job), the agent heading the job's nodes, and munge with the
// daemons' uids as the agent's expected identity.
//
// Contract: needs slurm_conf loaded (every client has it); throws
// bcast::BcastError with the message to show.
#pragma once

#include <cerrno>
#include <cstring>
#include <string>

#include "agent/agent_config.hpp"
#include "launch_bcast/client.hpp"
#include "slurm_adapter/slurm_nodes.hpp"

#include "sbcast_lookup.hpp" // slurm_adapter/api<GEN>/

extern "C" {
#include "slurm/slurm.h"
#include "slurm/slurm_errno.h"
}

namespace storm::shim {

struct BcastTarget {
    std::string cred;      // packed sbcast credential
    std::string node_list; // the job's (or step's) nodes
    uint32_t nodes = 0;
    std::string head; // the node whose agent heads the broadcast
    sockaddr_in agent{};
    uint32_t agent_index = 0;
    bool multicast = false; // the agents multicast data (SwitchParameters storm_mcast)
};

// step: a step id, or NO_VAL for the whole allocation.
inline BcastTarget bcast_target(uint32_t job, uint32_t step, uint32_t het_offset = NO_VAL)
{
    slurm_selected_step_t sel{};
    sel.array_task_id = NO_VAL;
    sel.het_job_offset = het_offset;
    sel.step_id.job_id = job;
    sel.step_id.step_id = step;
    sel.step_id.step_het_comp = NO_VAL;
    job_sbcast_cred_msg_t *msg = nullptr;
    if (slurm_sbcast_lookup(&sel, &msg) != SLURM_SUCCESS || !msg)
        throw bcast::BcastError("cannot get a broadcast credential for job " + std::to_string(job) + ": " +
                                slurm_strerror(errno));
    BcastTarget t;
    t.cred = slurm_api::packed_sbcast_cred(msg);
    t.node_list = msg->node_list ? msg->node_list : "";
    slurm_free_sbcast_cred_msg(msg);

    auto names = expand_hostlist(t.node_list.c_str());
    if (names.empty())
        throw bcast::BcastError("job " + std::to_string(job) + " has no nodes");
    t.nodes = static_cast<uint32_t>(names.size());
    t.head = names.front();
    auto config = agent::AgentConfig::from_switch_parameters(slurm_conf.switch_param);
    t.multicast = config.mcast.enabled();
    auto table = slurm_node_table();
    bool found = false;
    for (size_t i = 0; i < table.size() && !found; ++i)
        if (table[i].name == t.head) {
            t.agent = table[i].sa;
            t.agent.sin_port = htons(config.port);
            t.agent_index = static_cast<uint32_t>(i);
            found = true;
        }
    if (!found)
        throw bcast::BcastError("node " + t.head + " is not in slurm.conf");
    return t;
}

// Points a client at the target: the credential and the head's agent.
inline void aim(bcast::ClientOptions &o, const BcastTarget &t)
{
    o.cred = t.cred;
    o.agent = t.agent;
    o.agent_index = t.agent_index;
    o.agent_name = t.head;
    o.multicast = t.multicast;
    o.nodes = t.nodes;
}

// BcastParameters' DestDir (where relative destinations go), or "".
inline std::string bcast_dest_dir()
{
    const char *p = slurm_conf.bcast_parameters;
    const char *d = p ? strcasestr(p, "DestDir=") : nullptr;
    if (!d)
        return "";
    std::string v(d + 8);
    return v.substr(0, v.find(','));
}

} // namespace storm::shim
