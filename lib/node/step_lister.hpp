// How a node-side service learns which processes belong to a job's steps.
//
// Shared by gang scheduling (the switcher stops and continues exactly
// these) and implicit coscheduling (the verifier admits only these), and
// provided by the node agent's host: in slurmd it asks each step's
// slurmstepd (proctrack's container).
//
// Contract: the processes of the steps (not batch, not extern) of each of
// `jobs` on this node, by job.  Called from a service's worker thread,
// never from the agent's loop: it may block briefly (slurmstepd answers
// over a unix socket) and may throw; a job with no step here is absent.
//
// `held`, where given, says which processes the caller already holds (the
// gang switcher: those in their job's freezer group, where the processes
// they start are born).  Listing a step can cost its slurmstepd a read of
// every /proc entry of the host (proctrack/pgid), so a step whose last
// listing held only such processes need not be listed again while it
// runs: for it the lister may hand back those of its processes `held`
// still holds, and leave out the ones they started since.  Every other
// step, a new one included, is listed in full.  Without `held` every step
// is listed in full.  `held` may be called from the lister's thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <sys/types.h>
#include <vector>

namespace storm::node {

using HeldTest = std::function<bool(uint32_t job, pid_t pid)>;
using StepLister =
    std::function<std::map<uint32_t, std::vector<pid_t>>(const std::set<uint32_t> &jobs, const HeldTest &held)>;

} // namespace storm::node
