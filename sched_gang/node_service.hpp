// Gang scheduling on a node agent: the process switcher.
//
// make_node_service() creates the switcher on the host's loop, continues
// what a killed agent left stopped (Switcher::recover), and attaches it to
// the engine as the sink of events "gang:" (tables and strobes).  The
// switcher is the node's node::SwitchControl; the agent connects it to the
// communication contexts' hook (node::SwitchHook) where both run.
#pragma once

#include <memory>
#include <string>

#include "lib/net/mcast.hpp"
#include "lib/node/host.hpp"
#include "sched_gang/switcher.hpp"

namespace storm::gang {

struct NodeSetup {
    std::string journal_dir; // where the switched jobs are journaled; "" for none
    // The cgroup (per slurmd, under slurmd's own) holding the jobs' freezer
    // groups: they switch jobs unless `signals_only`, and those a crashed
    // agent left are thawed at start either way.
    std::string freeze_group = "storm-gang";
    bool signals_only = false; // storm_gang_stop=signal
    bool lend = true;          // storm_gang_lend
    unsigned rt_priority = 0;  // storm_rt_priority
    // Strobes by multicast where storm_mcast is set; joined on this node's
    // address unless an interface is given.
    net::McastConfig mcast;
};

// Throws what Switcher's constructor throws.  Needs host.steps.
std::unique_ptr<Switcher> make_node_service(node::Host &host, const NodeSetup &setup);

} // namespace storm::gang
