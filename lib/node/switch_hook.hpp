// The gang switch as other services of a node see it.
//
// Gang scheduling (sched_gang/switcher.hpp) switches a node's jobs on each
// strobe; communication contexts (switch_rdma/pool.hpp) must halt, swap
// and release their buffers around that switch.  Neither capability names
// the other: the switcher calls a SwitchHook, the hook answers through
// SwitchControl, and the node agent (agent/) connects the two.
//
// Threading: every call of both interfaces runs on the agent's loop
// thread, except SwitchControl::rescan(), which is thread safe.
#pragma once

#include <cstdint>
#include <set>

namespace storm::node {

// What else happens at a switch, beside stopping and continuing processes.
class SwitchHook {
public:
    virtual ~SwitchHook() = default;
    // The jobs `leaving` (running, about to be stopped) must halt their
    // communication first.  Returns false when none has anything to halt
    // (the switch goes on at once), true when the switch must wait until
    // the hook calls SwitchControl::halted() (which it must do, at the
    // latest when its own time limit passes).
    // `quantum_us` is the table's quantum: a wait should stay well within it.
    virtual bool halt(const std::set<uint32_t> &leaving, uint64_t seq, uint32_t quantum_us) = 0;
    // With `leaving` stopped and before `running` (the slot's jobs) are
    // continued: swap the buffers.
    virtual void swap(const std::set<uint32_t> &leaving, const std::set<uint32_t> &running, uint64_t seq) = 0;
    // After `running` were continued.
    virtual void release(const std::set<uint32_t> &running, uint64_t seq) = 0;
    // Whether one of `jobs` has tasks here that must be stopped at every
    // switch as on every other node (a swapped context's attached tasks):
    // then the node lends no slot (sched_gang's SwitcherConfig::lend).  A
    // node that lends still calls halt / swap / release as every node does.
    virtual bool follows(const std::set<uint32_t> &jobs) const = 0;
};

// What the hook may ask of the switcher.
class SwitchControl {
public:
    virtual ~SwitchControl() = default;
    // The answer to SwitchHook::halt(): the leaving jobs have halted (or
    // failed to); the switch goes on.
    virtual void halted() = 0;
    // A step of a job may be starting on this node (slurmstepd opened its
    // communication context): look for its processes now rather than at
    // the next periodic scan.  Thread safe.
    virtual void rescan() = 0;
};

} // namespace storm::node
