// Fault detection by heartbeats (seed 000, section 2.4.3), as slurmctld
// runs it against every node agent: a dead or hung node is found within
// seconds and reported once.
//
// Every `interval` the monitor beats the healthy watched nodes with one
// COMPARE-AND-WRITE down the tree (each live agent answers; the tree
// and-s the answers).  The nodes that did not answer -- a dead or hung
// agent, and those its subtree hid -- become suspects and leave the
// beats; each suspect is then probed alone (a COMPARE-AND-WRITE on that
// one node, straight to it, never through another agent), once per
// interval.  A suspect that answers is healthy again and back in the beats;
// one that answered nothing for `timeout` is reported to on_failed(), once
// (FaultTracker): the caller takes it out of service and out of watch().
// A round still in flight when the next is due is skipped, so a slow
// cluster is never beaten faster than it answers.
//
// Why not the remote heartbeat queue (heartbeat.hpp): its global flow
// control needs every node of the set at the same sequence, and a node
// readmitted after isolation (or an agent restarted) holds older counters:
// it would hold the queue back for every other node.  The beats here keep
// no state on the nodes, so nodes come and go freely.
//
// Threading: everything runs on the engine's loop thread; callbacks too.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <set>

#include "lib/prim/engine.hpp"
#include "lib/prim/fault_tracker.hpp"

struct event_base;
struct event;

namespace storm::prim {

struct FaultConfig {
    std::chrono::milliseconds timeout{5000};
    // Defaults from the timeout (for_timeout()).
    std::chrono::milliseconds interval{500}; // between beats, and between probes of a suspect
    std::chrono::milliseconds answer{1500};  // per hop: how long a beat or probe waits for its answer

    // A beat every timeout/10 (100 ms to 1 s), answers awaited a third of
    // the timeout (200 ms to 3 s): a suspect is probed several times before
    // it can be reported.
    static FaultConfig for_timeout(std::chrono::milliseconds timeout);
};

class FaultMonitor {
public:
    FaultMonitor(Engine &engine, event_base *base, FaultConfig config, Logger log);
    ~FaultMonitor();
    FaultMonitor(const FaultMonitor &) = delete;
    FaultMonitor &operator=(const FaultMonitor &) = delete;

    // A node silent for `silent` (at least the timeout): called once.
    using Failed = std::function<void(uint32_t node, std::chrono::milliseconds silent)>;
    void on_failed(Failed f) { failed_ = std::move(f); }

    // The nodes to beat from now on (those in service); new ones start
    // healthy, those left out are forgotten.  Starts the beats at the
    // first call.
    void watch(const std::set<uint32_t> &nodes);
    // `node` starts afresh at its next watch() (taken out of service).
    void forget(uint32_t node) { tracker_.forget(node); }

    const FaultTracker &tracker() const noexcept { return tracker_; }
    uint64_t rounds() const noexcept { return rounds_; }
    uint64_t skipped() const noexcept { return skipped_; }

private:
    void tick();
    void round();
    void probe(uint32_t node);

    Engine &engine_;
    event_base *base_;
    FaultConfig cfg_;
    Logger log_;
    FaultTracker tracker_;
    event *timer_ = nullptr;
    Failed failed_;
    bool in_flight_ = false;
    std::set<uint32_t> probing_;
    uint64_t rounds_ = 0, skipped_ = 0;
    std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

} // namespace storm::prim
