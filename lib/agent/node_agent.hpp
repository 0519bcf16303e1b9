// The node agent: Storm's resident thread inside slurmd.
//
// It owns one libevent loop on which the node-side mechanisms (strobe
// receiver, process switcher, broadcast receiver, buffer pool, local
// coscheduler) will register their events.  For now the loop holds only its
// own control channel.
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
//  - With a network, start() also binds the agent port and runs STORM's
//    primitives (lib/prim) on the loop; each signalled remote event has
//    the variables "event:<name>" (how many times) and "crc:<name>" (the
//    CRC-32C of its data) that COMPARE-AND-WRITE can test, so an initiator
//    can check with one COMPARE-AND-WRITE that a whole set holds the data
//    (Engine::variable).
//    It also receives the heartbeats of queue "main" (prim/heartbeat.hpp),
//    and, given an authorizer, users' broadcasts: it heads those its
//    clients send and receives everyone's (launch_bcast).  Given a step
//    lister, it switches gang-scheduled jobs on the machine manager's
//    strobes (sched_gang/switcher.hpp).  Given a pool socket, it owns the
//    node's buffer pool and the steps' communication contexts, halted,
//    swapped and released at each switch (switch_rdma/pool.hpp).  Given a
//    coscheduling socket and storm_cosched_partitions, it runs the local
//    scheduler of implicit coscheduling (cosched/local.hpp); a failure to
//    start it is logged and leaves the rest of the agent running.  The
//    pool records which jobs have a coscheduled context open here
//    (admissions()), and only those may register with the local scheduler:
//    without the pool, none may.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>
#include <thread>

#include "lib/agent/agent_config.hpp"
#include "cosched/local.hpp"
#include "launch_bcast/receiver.hpp"
#include "launch_bcast/service.hpp"
#include "lib/common/log.hpp"
#include "lib/net/authenticator.hpp"
#include "lib/prim/engine.hpp"
#include "lib/prim/heartbeat.hpp"
#include "sched_gang/switcher.hpp"
#include "switch_rdma/pool.hpp"

struct event_base;
struct event;

namespace storm::agent {

// Where this agent sits among the others: the node table (addresses with
// the agent port set), its own index, and how connections authenticate.
struct AgentNetwork {
    std::vector<sockaddr_in> nodes;
    uint32_t self;
    std::unique_ptr<net::Authenticator> auth;
    // Users' broadcasts (launch_bcast), when an authorizer is given: node
    // names by index, where open broadcasts are journaled, and the launch
    // gate's socket ("" for none; pool_trusted below may ask it).
    std::unique_ptr<bcast::Authorizer> authorizer;
    std::vector<std::string> names;
    std::string journal_dir;
    std::string bcast_gate_socket;
    // Gang scheduling (sched_gang), when a lister is given: the processes
    // of the jobs' steps, and where the switched jobs are journaled.
    gang::StepLister step_lister;
    std::string gang_journal_dir;
    // The cgroup (per slurmd, under slurmd's own) holding the jobs' freezer
    // groups: they switch jobs when AgentConfig::gang_freeze is set, and
    // those a crashed agent left are thawed at start either way.
    std::string gang_freeze_group = "storm-gang";
    // Communication contexts (switch_rdma), when a socket path is given:
    // the control socket, the statistics file, and who may open contexts.
    std::string pool_socket;
    std::string pool_stats;
    std::vector<uid_t> pool_trusted;
    // Implicit coscheduling (cosched/), when a socket path is given and
    // storm_cosched_partitions is set: the request socket, and the cgroup
    // (per slurmd) under which the jobs' cpu cgroups are made.  The pool
    // above admits the jobs (their coscheduled contexts), the step lister
    // checks which processes are theirs.
    std::string cosched_socket;
    std::string cosched_group;
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
    const cosched::Admissions &admissions() const noexcept { return *admissions_; }

private:
    enum class Control : char { ping = 'p', stop = 's' };
    static void on_control(int fd, short what, void *arg);
    void run() noexcept;
    bool send(Control c) noexcept;

    AgentConfig config_;
    Logger log_;
    std::optional<AgentNetwork> network_;
    std::unique_ptr<prim::Engine> engine_; // on base_; created by start()
    std::unique_ptr<prim::HeartbeatReceiver> heartbeat_;
    std::unique_ptr<bcast::Receiver> bcast_receiver_;
    std::unique_ptr<bcast::Service> bcast_service_;
    std::unique_ptr<gang::Switcher> switcher_;
    std::unique_ptr<rdma::Pool> pool_;
    std::unique_ptr<cosched::Local> cosched_;
    // Written by pool_, read by cosched_'s verifier (its worker thread).
    std::shared_ptr<cosched::Admissions> admissions_ = std::make_shared<cosched::Admissions>();
    event_base *base_ = nullptr;
    event *control_ev_ = nullptr;
    int control_[2] = {-1, -1}; // [0] read by the loop, [1] written by callers
    std::thread thread_;
    std::atomic<bool> running_{false};
    std::atomic<uint64_t> wakeups_{0};
};

} // namespace storm::agent
