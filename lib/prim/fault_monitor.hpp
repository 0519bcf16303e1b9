// Fault detection by heartbeats (seed 000, section 2.4.3), as slurmctld
// runs it against every node agent: a dead or hung node is found within
// seconds and reported once.
//
// Every `interval` the monitor beats the watched nodes with one
// COMPARE-AND-WRITE down the tree (each live agent answers; the tree
// and-s the answers).  A node that did not answer is a suspect, but not
// every suspect is to blame: when an interior agent of the tree is slow or
// dead, every node it serves is silent with it.  So the monitor plans the
// tree the beat travelled (blamed_roots(): net::split_children over the
// set, as the engine does) and blames only the roots of the silent
// subtrees -- silent nodes whose parent answered (or that head the set).
//   - A blamed suspect leaves the beats and is probed alone (a
//     COMPARE-AND-WRITE on that one node, straight to it), at most
//     `max_probes` at once, in turn.  It is the one node whose silence is
//     its own; probing it alone cannot blame it for another agent.
//   - The nodes it hid stay in the beats: the next beat's tree, planned
//     without the blamed node, takes them through other agents, over the
//     connections the agents keep between them.  A slow interior agent
//     costs one probe, not one new munge-authenticated connection from
//     slurmctld per node of its subtree (at 1000 nodes, fanout 8, about
//     15 of them: what drained whole subtrees of alive nodes when an srun
//     of 1000 nodes starved a few agents).  If the re-planned tree hides
//     some of them again, its own roots are blamed in turn.
// A round's answer can come late: a slow agent holds its parent's answer
// for the hop timeouts below it (at 1000 nodes, fanout 8 and `answer` a
// third of the timeout, a round that finds a silent interior agent lasts
// longer than the timeout).  So a suspect is never reported before it
// could answer again: a blamed node not before `answer` after it was
// blamed (its probe's time), a hidden one not before a whole timeout after
// the round that first hid it (it may never have been asked).
// A suspect that answers (a beat or a probe) is healthy again and back in
// the beats; one that answered nothing for `timeout`, past that chance, is
// reported to on_failed(), once (FaultTracker): the caller takes it out of
// service and out of watch().  A round still in flight when the next is due is
// skipped, so a slow cluster is never beaten faster than it answers.
//
// The controller's own starvation: time the monitor's thread could not run
// (it waited for a CPU, per run_delay.hpp, or it was stopped) is not
// counted against any node (FaultTracker::tick): on a machine too loaded
// to read the answers, detection comes late rather than wrong.  A warning
// says so, at most once a minute.
//
// Mass silence (MassSilenceGuard, fault_guard.hpp): while more than
// max(mass_share x watched, mass_min) of the watched nodes are suspects
// due to be reported within half a timeout, no node is reported (a warning says why): many nodes silent
// together is far likelier this controller, the network or an overload of
// the whole machine than many deaths.  Reports resume when the silent
// nodes are few again -- the silence of those still silent then counts
// from that moment, since an overload comes and goes in waves and its dips
// are no time to report (at 1000 virtual nodes, 253 silent fell to 51, 3 s
// later rose to 186 again, and the 45 reported in that dip were alive) --
// or after `mass_hold` at most, their silence counted whole: a real failure
// that wide (a rack) is reported `mass_hold` late, never never.  The hold
// runs on this controller's own time: what it could not run is left out
// of it as of the nodes' silence.
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
#include <optional>
#include <set>

#include "lib/prim/engine.hpp"
#include "lib/prim/fault_guard.hpp"
#include "lib/prim/fault_tracker.hpp"

struct event_base;
struct event;

namespace storm::prim {

struct FaultConfig {
    std::chrono::milliseconds timeout{5000};
    // Defaults from the timeout (for_timeout()).
    std::chrono::milliseconds interval{500}; // between beats, and between probes of a suspect
    std::chrono::milliseconds answer{1500};  // per hop: how long a beat or probe waits for its answer
    unsigned max_probes = 16;                // blamed suspects probed at once, at most
    // The mass-silence guard: reports held while more than
    // max(mass_share x watched, mass_min) nodes are silent, for mass_hold
    // at most.
    double mass_share = 0.1;
    unsigned mass_min = 8;
    std::chrono::milliseconds mass_hold{60000};

    // A beat every timeout/10 (100 ms to 1 s), answers awaited a third of
    // the timeout (200 ms to 3 s): a suspect is probed several times before
    // it can be reported.  Mass silence: 10% of the nodes and more than 8,
    // held for 6 timeouts and at least 60 s.
    static FaultConfig for_timeout(std::chrono::milliseconds timeout);
};

// The nodes of `set` to blame for the silence of `failed` after an
// operation travelled the tree of `set` at `fanout` (net::split_children):
// each failed node whose parent in that tree answered, and the set's head
// if it failed.  The other failed nodes may only have been hidden by a
// failed ancestor.
std::set<uint32_t> blamed_roots(const RangeSet &set, const RangeSet &failed, unsigned fanout);

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
    void forget(uint32_t node)
    {
        tracker_.forget(node);
        blamed_.erase(node);
    }

    const FaultTracker &tracker() const noexcept { return tracker_; }
    const MassSilenceGuard &guard() const noexcept { return guard_; }
    // Suspects blamed for their own silence (probed alone).
    const std::set<uint32_t> &blamed() const noexcept { return blamed_; }
    uint64_t rounds() const noexcept { return rounds_; }
    uint64_t skipped() const noexcept { return skipped_; }
    uint64_t probes() const noexcept { return probes_; }

private:
    void tick();
    void guard(FaultTracker::Clock::time_point now);
    void starved(FaultTracker::Clock::time_point now);
    void round();
    void beaten(const RangeSet &set, const CawResult &r);
    void probe(uint32_t node);

    Engine &engine_;
    event_base *base_;
    FaultConfig cfg_;
    Logger log_;
    FaultTracker tracker_;
    MassSilenceGuard guard_;
    event *timer_ = nullptr;
    Failed failed_;
    bool in_flight_ = false;
    std::set<uint32_t> blamed_;
    std::set<uint32_t> probing_;
    uint32_t next_probe_ = 0; // probes go round the blamed suspects from here
    uint64_t rounds_ = 0, skipped_ = 0, probes_ = 0;
    std::optional<std::chrono::nanoseconds> last_delay_; // this thread's run delay at the last tick
    FaultTracker::Clock::time_point told_at_{};          // the last warning about it (or the first tick)
    FaultTracker::Clock::duration told_forgiven_{};
    std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

} // namespace storm::prim
