// Heartbeats (seed 000, Algorithms 4 and 5) and the fault detection built
// on them (section 2.4.3).
//
// The master ENQUEUEs a beat (its sequence number) on the remote queue
// "heartbeat:NAME" every `interval`; a beat still in flight when the next
// is due is skipped and counted late, so a slow node never makes beats pile
// up.  Each node drains the queue as beats arrive (HeartbeatReceiver) and
// publishes the last sequence it saw in the global variable
// "heartbeat:NAME:seen".  Every `check_every` intervals the master asks, with
// one COMPARE-AND-WRITE, whether every node saw a beat at most `tolerance`
// beats old -- or, when a full queue holds the beats back (global flow
// control: one stalled node stops the beats of all), whether every node
// drained its queue; if not, it halves the set until it has the nodes that
// lag, block or do not answer, reports them to on_fault() and isolates them:
// later beats and checks leave them out (as STORM's master does), until
// readmit() brings them back.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <set>
#include <string>

#include "lib/prim/queue.hpp"

namespace storm::prim {

class HeartbeatMaster {
public:
    struct Config {
        std::string name = "main";
        std::chrono::microseconds interval{100000};
        uint32_t queue_length = 16;
        uint32_t tolerance = 3;   // beats a node may lag before it counts as faulty
        uint32_t check_every = 4; // beats between checks
    };
    HeartbeatMaster(Engine &engine, event_base *base, RangeSet set, Config config);
    ~HeartbeatMaster();

    using FaultHandler = std::function<void(const RangeSet &faulty, const std::string &why)>;
    void on_fault(FaultHandler h) { fault_ = std::move(h); }
    void start();
    void stop();
    void readmit(const RangeSet &nodes);

    uint64_t issued() const noexcept { return seq_; }
    uint64_t late() const noexcept { return late_; }
    const std::set<uint32_t> &faulty() const noexcept { return faulty_; }

private:
    void beat();
    void check();
    void bisect(const RangeSet &set, const std::string &var, int64_t need, std::shared_ptr<RangeSet> found,
                std::shared_ptr<int> outstanding);
    void report(const RangeSet &found);
    void beat_healthy(); // beats go to the set's nodes not found faulty

    Engine &engine_;
    event_base *base_;
    RangeSet set_;
    Config cfg_;
    RemoteQueueMaster queue_;
    event *timer_ = nullptr;
    uint64_t seq_ = 0, late_ = 0, ticks_ = 0;
    bool checking_ = false;
    std::set<uint32_t> faulty_;
    FaultHandler fault_;
    std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

// Node side: drain the heartbeat queue whenever a beat is signalled.
class HeartbeatReceiver {
public:
    HeartbeatReceiver(Engine &engine, const std::string &name, uint32_t queue_length);
    // Call from the engine's signal hook; returns true if `event` was a beat.
    bool on_signal(const std::string &event);
    uint64_t last_seen() const noexcept { return seen_; }

private:
    Engine &engine_;
    std::string name_, prefix_;
    RemoteQueueSlave queue_;
    uint64_t seen_ = 0;
};

} // namespace storm::prim
