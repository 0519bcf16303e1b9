// Communication contexts on a node agent: the node's buffer pool.
//
// make_node_service() creates the pool on the host's loop and binds its
// control socket (slurmstepd opens and closes the steps' contexts there).
// The pool is the node's node::SwitchHook: the agent connects it to the
// gang switcher's node::SwitchControl where both run.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "lib/node/admissions.hpp"
#include "lib/node/host.hpp"
#include "switch_rdma/pool.hpp"

namespace storm::rdma {

struct NodeSetup {
    std::string socket_path; // the pool's control socket; required
    std::string stats_path;  // its statistics file; "" for none
};

// `stopped`: whether every thread of a task's process is stopped or held
// otherwise (empty: /proc's state).  `admissions`: where the pool records
// the jobs of open coscheduled contexts (may be null).  Throws what Pool's
// constructor and start() throw.
std::unique_ptr<Pool> make_node_service(node::Host &host, const NodeSetup &setup, const PoolConfig &config,
                                        std::shared_ptr<node::Admissions> admissions,
                                        std::function<bool(pid_t)> stopped);

} // namespace storm::rdma
