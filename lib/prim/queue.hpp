// Remote queues with global flow control, and heartbeats, built from the
// three primitives exactly as STORM does (seed 000, Algorithms 1-5).
//
// A remote queue NAME of LENGTH slots on a set of nodes lives in the
// nodes' global memory: slot i is the remote event "queue:NAME:i", and each
// node counts what it consumed in the global variable
// "queue:NAME:dequeued".
//
//   AWAIT-SPACE (master): COMPARE-AND-WRITE(set, dequeued >= enqueued -
//     LENGTH + 1) until it holds, with exponential back-off;
//   ENQUEUE (master): AWAIT-SPACE, then XFER-AND-SIGNAL the data into slot
//     enqueued mod LENGTH;
//   DEQUEUE (node): TEST-EVENT on the head slot (its signal count must
//     exceed the laps already consumed), take the data, count it dequeued.
//
// Heartbeats (Algorithms 4, 5) are ENQUEUEs on a queue the nodes drain as
// data arrives, and a Heartbeat master checks with COMPARE-AND-WRITE that
// every node received recent ones: nodes that do not answer, or lag more
// than `tolerance` beats, are reported (found by halving the set), so the
// caller can drain them through Slurm.
//
// Contract: a RemoteQueueMaster is the only writer of its queue and issues
// one ENQUEUE at a time (later ones wait in order); callbacks run on the
// engine's loop.  Data is never dropped: ENQUEUE completes only after every
// node of the set holds it, or reports the nodes that do not.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>

#include "lib/prim/engine.hpp"

struct event;

namespace storm::prim {

class RemoteQueueMaster {
public:
    RemoteQueueMaster(Engine &engine, event_base *base, RangeSet set, std::string name, uint32_t length);
    ~RemoteQueueMaster();

    using Done = std::function<void(const XferResult &)>;
    void enqueue(std::string data, Done done);
    uint64_t enqueued() const noexcept { return enqueued_; }
    // Changes the set later ENQUEUEs go to (a node isolated as faulty).
    void set_nodes(RangeSet set) { set_ = std::move(set); }
    const RangeSet &nodes() const noexcept { return set_; }
    // Per-hop timeout of the queue's operations (default: the engine's).
    void set_timeout(std::chrono::milliseconds t) { timeout_ = t; }
    size_t waiting() const noexcept { return pending_.size(); }

private:
    void next();
    void await_space(int attempt);
    void on_backoff();

    Engine &engine_;
    event_base *base_;
    RangeSet set_;
    std::string name_;
    uint32_t length_;
    uint64_t enqueued_ = 0;
    std::chrono::milliseconds timeout_{};
    bool busy_ = false;
    int attempt_ = 0;
    event *backoff_ = nullptr;
    std::deque<std::pair<std::string, Done>> pending_;
    std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

// Node side of a queue (on the node's own engine).
class RemoteQueueSlave {
public:
    RemoteQueueSlave(Engine &engine, std::string name, uint32_t length);
    // DEQUEUE without blocking: false when the head slot holds nothing new.
    bool try_dequeue(std::string &data);
    uint64_t dequeued() const noexcept { return dequeued_; }

private:
    Engine &engine_;
    std::string name_;
    uint32_t length_;
    uint64_t dequeued_ = 0;
};

// Slot event and counter names of queue `name`.
std::string queue_slot_event(const std::string &name, uint64_t slot);
std::string queue_dequeued_var(const std::string &name);

} // namespace storm::prim
