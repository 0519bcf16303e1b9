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
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <sys/types.h>
#include <vector>

namespace storm::node {

using StepLister = std::function<std::map<uint32_t, std::vector<pid_t>>(const std::set<uint32_t> &jobs)>;

} // namespace storm::node
