// Users' broadcasts on a node agent: the receiver every agent runs and the
// service through which an agent heads the broadcasts its clients send.
//
// make_node_service() creates both on the host's loop, finishes what a
// killed agent left (Receiver::recover), and attaches them to the engine:
// the sink of events "bcast:" (the chunks, at every node) and the service
// frames (protocol.hpp's bcast types, from clients, at the head).
#pragma once

#include <memory>
#include <string>

#include "launch_bcast/authorizer.hpp"
#include "launch_bcast/receiver.hpp"
#include "launch_bcast/service.hpp"
#include "lib/node/host.hpp"

namespace storm::bcast {

struct NodeSetup {
    // Who may broadcast into which nodes (Slurm's sbcast credential in
    // slurmd); required.
    std::unique_ptr<Authorizer> authorizer;
    std::string journal_dir; // where open broadcasts are journaled; "" for none
    std::string gate_socket; // the launch gate's socket (gate.hpp); "" for none
};

class NodeService {
public:
    NodeService(node::Host &host, NodeSetup setup);
    NodeService(const NodeService &) = delete;
    NodeService &operator=(const NodeService &) = delete;

private:
    NodeSetup setup_;
    Receiver receiver_;
    Service service_;
};

// Throws what the receiver's and the service's constructors throw.
std::unique_ptr<NodeService> make_node_service(node::Host &host, NodeSetup setup);

} // namespace storm::bcast
