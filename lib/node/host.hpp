// What the node agent offers each capability's node service.
//
// A capability runs on the node as a service the agent creates through the
// capability's factory (for example gang::make_node_service in
// sched_gang/node_service.hpp).  The factory builds the capability's
// objects on the agent's loop and attaches them to the engine through its
// hooks: Engine::add_sink for the events it owns (a prefix such as
// "gang:"), Engine::on_service_frames for frames clients send it.  It
// never reaches for another capability: what two capabilities share
// (lib/node/) the agent hands to both.
//
// Contract: the agent builds one Host before it creates any service and
// keeps it, the loop and the engine alive until every service is
// destroyed.  Services run on the loop thread; `engine` and `base` are
// never null while a factory runs.
#pragma once

#include <cstdint>
#include <netinet/in.h>
#include <string>
#include <sys/types.h>
#include <vector>

#include "lib/common/log.hpp"
#include "lib/node/step_lister.hpp"

struct event_base;

namespace storm::prim {
class Engine;
}

namespace storm::node {

struct Host {
    event_base *base = nullptr;
    prim::Engine *engine = nullptr;
    // This node's index in the agents' table, the table (addresses with
    // the agent port), and node names by index ("" where unknown).
    uint32_t self = 0;
    std::vector<sockaddr_in> nodes;
    std::vector<std::string> names;
    unsigned fanout = 8; // children per node in the agents' tree
    // The processes of jobs' steps on this node (may be empty: none known).
    StepLister steps;
    // The uids that may speak on the agent's control sockets as Slurm's
    // daemons do (root, SlurmdUser).
    std::vector<uid_t> trusted;
    // The agent's logger: each service names itself with child().
    Logger log{"storm"};

    // This node's name, or its index where the table has no name.
    std::string self_name() const { return self < names.size() ? names[self] : std::to_string(self); }
};

} // namespace storm::node
