// Implicit coscheduling on a node agent: the local scheduler.
//
// make_node_service() creates the local scheduler on the host's loop and
// binds its request socket.  Only jobs the admissions record (a
// coscheduled context open on this node: the pool writes them) whose
// processes the host's step lister reports may register.
#pragma once

#include <memory>
#include <string>

#include "cosched/config.hpp"
#include "cosched/local.hpp"
#include "lib/node/admissions.hpp"
#include "lib/node/host.hpp"

namespace storm::cosched {

struct NodeSetup {
    std::string socket_path; // the request socket; its statistics go beside it
    std::string group;       // the cgroup (per slurmd) of the jobs' cpu cgroups; "" for the default
};

// Throws what Local's constructor and start() throw.
std::unique_ptr<Local> make_node_service(node::Host &host, const NodeSetup &setup,
                                         const CoschedConfig &config,
                                         std::shared_ptr<const node::Admissions> admissions);

} // namespace storm::cosched
