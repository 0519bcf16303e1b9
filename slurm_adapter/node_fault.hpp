// Storm's fault detection as slurmctld sees it: which nodes Slurm has in
// service (those Storm beats), and a node Storm found dead taken out of
// service the way Slurm takes a node that stopped responding.
//
// The calls are the same on every line Storm supports (drain_nodes,
// set_node_down_ptr and the node state tests are unchanged from 22.05 to
// 26.05; set_node_down_ptr kills the node's jobs through
// kill_running_job_by_node_name up to 24.11 and
// kill_running_job_by_node_ptr from 25.11), so they live here rather than
// in slurm_adapter/api<GEN>/.
//
// Contract: in_service() needs slurmctld's node read lock; fail_node()
// its job, node and partition write locks (those of scontrol update
// NodeName=, which drains nodes too), taken with fault_lock().
#pragma once

#include <string>
#include <vector>

#include "slurm_adapter/ctld_lock.hpp"
#include "slurm_api.hpp"

extern "C" {
#include "src/slurmctld/slurmctld.h"
}

namespace storm::shim {

// The locks fail_node() needs: scontrol update's (job, node and partition
// write, federation read) and the configuration read lock Slurm's own
// "Not responding" path holds.
inline slurmctld_lock_t fault_lock()
{
    return ctld_lock(WRITE_LOCK, WRITE_LOCK, WRITE_LOCK, READ_LOCK, READ_LOCK);
}

// Whether Slurm has node `name` in service: known, registered since
// slurmctld started (not UNKNOWN: at a cluster's boot slurmctld may start
// before the slurmds) and responding (not NO_RESPOND: a node resumed by an
// administrator is beaten once Slurm heard from it), and neither down,
// drained or draining, failing, a future node, powered down or powering up
// or down, nor rebooting.  Storm beats these only: a node Slurm took out
// of service (or Storm did) is never reported again until it is back.
inline bool in_service(const std::string &name)
{
    node_record_t *n = find_node_record(const_cast<char *>(name.c_str()));
    return n && !IS_NODE_UNKNOWN(n) && !IS_NODE_NO_RESPOND(n) && !IS_NODE_DOWN(n) && !IS_NODE_DRAIN(n) &&
           !IS_NODE_FAIL(n) && !IS_NODE_FUTURE(n) && !IS_NODE_POWERED_DOWN(n) && !IS_NODE_POWERING_DOWN(n) &&
           !IS_NODE_POWERING_UP(n) && !IS_NODE_REBOOT_ISSUED(n);
}

// Node `name` set down with `reason`: Slurm kills its jobs and requeues
// those that may be requeued, as for a node that stopped responding; then
// drained (as SlurmUser), so that it stays out of service until an
// administrator resumes it.  In this order the reason is written once on
// every line: drain_nodes keeps a reason already there, while from 24.11
// set_node_down_ptr appends its own to one drain_nodes set (it read
// "storm: ... : storm: ...").  False if Slurm has no such node or it is
// out of service already.
inline bool fail_node(const std::string &name, const std::string &reason)
{
    if (!in_service(name))
        return false;
    node_record_t *n = find_node_record(const_cast<char *>(name.c_str()));
    std::string nm = name, why = reason;
    set_node_down_ptr(n, why.data());
    return drain_nodes(nm.data(), why.data(), slurm_conf.slurm_user_id) == SLURM_SUCCESS;
}

} // namespace storm::shim
