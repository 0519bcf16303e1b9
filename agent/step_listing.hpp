// The processes of jobs' steps on this node, as the host's StepLister
// (lib/node/step_lister.hpp) hands them to the capabilities, listing again
// only the steps that need it.
//
// Listing one step is the slow part: a request to its slurmstepd, then
// either a read of the step's process tree (the host's `list` with
// proctrack/pgid, whose container listing reads every /proc entry of the
// host: on 1000 virtual nodes sharing one /proc, each node's listing read
// all of the others' processes too) or slurmstepd's listing of proctrack's
// container.  The gang switcher lists the steps of its jobs every second
// or so; where the freezer holds them, the
// processes a listing found are in their job's group from then on and the
// processes they start are born there.  So, given the caller's HeldTest:
//  - a step whose last listing found processes, every one of them held, is
//    settled: it is not listed again while it runs; the processes of that
//    listing that are still held (one read of /proc/PID/cgroup each, by
//    the HeldTest) are handed back in its place;
//  - a settled step none of whose listed processes is held any more (they
//    exited) is listed again, and so is any step seen for the first time;
//  - a step that ended is forgotten.
// Without a HeldTest (coscheduling's verifier) every step is listed.
//
// What a settled step's listing would still find and this leaves out: a
// process that joins the step's container from outside its job's group
// (proctrack/cgroup: one placed into the step's cgroup by hand).
//
// Contract: `steps` and `list` may block briefly and throw (the call then
// throws); `list` returns nullopt for a step that ended or cannot be
// reached.  Thread safe: the gang scanner and coscheduling's worker may
// call at once; the lists run outside the lock.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sys/types.h>
#include <tuple>
#include <vector>

#include "lib/node/step_lister.hpp"

namespace storm::agent {

class StepListing {
public:
    struct Step {
        uint32_t job = 0, step = 0, het = 0; // Slurm's step id (with its heterogeneous component)
        bool operator<(const Step &o) const
        {
            return std::tie(job, step, het) < std::tie(o.job, o.step, o.het);
        }
    };
    using Steps = std::function<std::vector<Step>()>;
    using List = std::function<std::optional<std::vector<pid_t>>(const Step &)>;

    StepListing(Steps steps, List list) : steps_(std::move(steps)), list_(std::move(list)) {}

    // The StepLister's call: the processes of the steps of `jobs`, by job.
    std::map<uint32_t, std::vector<pid_t>> operator()(const std::set<uint32_t> &jobs,
                                                      const node::HeldTest &held);

    // Steps listed in full so far, and steps settled now (tests, status).
    uint64_t listings() const;
    size_t settled() const;

private:
    Steps steps_;
    List list_;
    mutable std::mutex mu_;
    std::map<Step, std::vector<pid_t>> settled_; // each settled step's last listing
    uint64_t listings_ = 0;
};

} // namespace storm::agent
