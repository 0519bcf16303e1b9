// The node agent: Storm's resident thread inside slurmd.
//
// It owns one libevent loop, the primitives' engine on it (lib/prim) and
// the node side of each capability, which it composes here and nowhere
// else: each capability offers a factory (make_node_service in its
// node_service.hpp) that builds its service on the loop and attaches it to
// the engine; what two capabilities share (lib/node/) the agent hands to
// both.  lib/README.md says how a new capability plugs in.
//
// Contract:
//  - One NodeAgent per slurmd process, created by switch/rdma's init() when
//    SwitchType=switch/rdma, destroyed by its fini().
//  - start() spawns the loop thread and returns once the loop is running;
//    it throws std::system_error / std::runtime_error if it cannot.
//  - stop() asks the loop to exit, joins the thread and is idempotent; the
//    destructor calls it.  Both may be called from any thread but the
//    agent's own.
//  - wakeups() counts control messages the loop has handled: a liveness
//    probe for tests.
//  - Without a network the loop holds only the agent's control channel.
//    With one, start() also binds the agent port and runs STORM's
//    primitives (lib/prim) on the loop; each signalled remote event has
//    the variables "event:<name>" (how many times) and "crc:<name>" (the
//    CRC-32C of its data) that COMPARE-AND-WRITE can test, so an initiator
//    can check with one COMPARE-AND-WRITE that a whole set holds the data
//    (Engine::variable).  It receives the heartbeats of queue "main"
//    (prim/heartbeat.hpp), and runs each capability the network sets up:
//     - `bcast`: users' broadcasts (launch_bcast/node_service.hpp): it heads
//       those its clients send and receives everyone's;
//     - `gang`: gang scheduling (sched_gang/node_service.hpp): it switches
//       gang-scheduled jobs on the machine manager's strobes;
//     - `pool`: the node's buffer pool and the steps' communication
//       contexts (switch_rdma/node_service.hpp), halted, swapped and
//       released at each switch where gang scheduling runs too;
//     - `cosched`, where storm_cosched_partitions is set: the local
//       scheduler of implicit coscheduling (cosched/node_service.hpp).
//    A failure to start the pool or the local scheduler is logged as a
//    warning and leaves the rest of the agent running.  The pool records
//    which jobs have a coscheduled context open here (admissions()), and
//    only those may register with the local scheduler: without the pool,
//    none may.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>
#include <thread>

#include "agent/agent_config.hpp"
#include "cosched/node_service.hpp"
#include "launch_bcast/node_service.hpp"
#include "lib/common/log.hpp"
#include "lib/net/authenticator.hpp"
#include "lib/node/admissions.hpp"
#include "lib/node/host.hpp"
#include "lib/prim/engine.hpp"
#include "lib/prim/heartbeat.hpp"
#include "sched_gang/node_service.hpp"
#include "switch_rdma/node_service.hpp"

struct event_base;
struct event;

namespace storm::agent {

// Where this agent sits among the others (the node table with the agent
// port set, its own index, how connections authenticate), what it knows
// of the node, and which capabilities it runs (those set up).
struct AgentNetwork {
    std::vector<sockaddr_in> nodes;
    uint32_t self = 0;
    std::unique_ptr<net::Authenticator> auth;
    std::vector<std::string> names; // node names by index (may be empty)
    node::StepLister step_lister;   // the processes of jobs' steps here (may be empty)
    std::vector<uid_t> trusted;     // may speak on the control sockets (root, SlurmdUser)
    // An accepted connection's hello must come within this (slurmd: Slurm's
    // MessageTimeout, at least 10 s: at 2048 virtual nodes a parent's
    // hello, two munge calls on a munged shared by many nodes, took longer
    // than 10 s on 176 nodes, and the first broadcast failed there).
    std::chrono::milliseconds hello_timeout{10000};
    std::optional<bcast::NodeSetup> bcast;
    std::optional<gang::NodeSetup> gang; // storm_gang_* and storm_rt_priority come from AgentConfig
    std::optional<rdma::NodeSetup> pool;
    std::optional<cosched::NodeSetup> cosched; // runs only where storm_cosched_partitions is set
};

class NodeAgent {
public:
    // Without a network the agent runs its loop only (unit tests, and a
    // slurmd whose own node is not in the table).
    NodeAgent(const AgentConfig &config, const Logger &log, std::optional<AgentNetwork> network = {});
    ~NodeAgent();
    NodeAgent(const NodeAgent &) = delete;
    NodeAgent &operator=(const NodeAgent &) = delete;

    void start();
    void stop() noexcept;

    bool running() const noexcept { return running_.load(); }
    // Sends a no-op control message; returns false if the agent is stopped.
    bool ping() noexcept;
    uint64_t wakeups() const noexcept { return wakeups_.load(); }
    const AgentConfig &config() const noexcept { return config_; }
    // The jobs admitted to implicit coscheduling on this node (thread safe).
    const node::Admissions &admissions() const noexcept { return *admissions_; }

private:
    enum class Control : char { ping = 'p', stop = 's' };
    static void on_control(int fd, short what, void *arg);
    void run() noexcept;
    bool send(Control c) noexcept;
    void start_services();

    AgentConfig config_;
    Logger log_;
    std::optional<AgentNetwork> network_;
    std::unique_ptr<prim::Engine> engine_; // on base_; created by start()
    node::Host host_;                      // what the services get; set by start()
    std::unique_ptr<prim::HeartbeatReceiver> heartbeat_;
    std::unique_ptr<bcast::NodeService> bcast_;
    std::unique_ptr<gang::Switcher> switcher_;
    std::unique_ptr<rdma::Pool> pool_;
    std::unique_ptr<cosched::Local> cosched_;
    // Written by pool_, read by cosched_'s verifier (its worker thread).
    std::shared_ptr<node::Admissions> admissions_ = std::make_shared<node::Admissions>();
    event_base *base_ = nullptr;
    event *control_ev_ = nullptr;
    int control_[2] = {-1, -1}; // [0] read by the loop, [1] written by callers
    std::thread thread_;
    std::atomic<bool> running_{false};
    std::atomic<uint64_t> wakeups_{0};
};

} // namespace storm::agent
