// This node's slurmd as switch/rdma finds it in slurmd and in slurmstepd:
// its node name, its spool directory (SlurmdSpoolDir, %n expanded) and the
// gang switcher's journal there, its pid file.
//
// slurmd exports its `conf` (and so does slurmstepd, the same slurmd_conf_t
// read from slurmd); it is looked up at run time because this plugin is
// also loaded by processes that have none, where these throw
// std::runtime_error.
#include "plugins/switch_rdma/parts.hpp"

#include <dlfcn.h>

extern "C" {
#include "src/slurmd/slurmd/slurmd.h"
}

namespace storm::plugins::switch_rdma {

std::string slurmd_node_name()
{
    auto **c = static_cast<slurmd_conf_t **>(dlsym(RTLD_DEFAULT, "conf"));
    if (!c || !*c || !(*c)->node_name)
        throw std::runtime_error("cannot find this slurmd's node name");
    return (*c)->node_name;
}

std::string slurmd_spool_dir()
{
    auto **c = static_cast<slurmd_conf_t **>(dlsym(RTLD_DEFAULT, "conf"));
    if (!c || !*c || !(*c)->spooldir)
        throw std::runtime_error("cannot find this slurmd's spool directory");
    return (*c)->spooldir;
}

// SlurmdPidFile as slurmd expanded it ("" if none).
std::string slurmd_pid_file()
{
    auto **c = static_cast<slurmd_conf_t **>(dlsym(RTLD_DEFAULT, "conf"));
    if (!c || !*c)
        throw std::runtime_error("cannot find this slurmd's configuration");
    return (*c)->pidfile ? (*c)->pidfile : "";
}

// Where the gang switcher journals the jobs it switches, and records itself
// (step_guard.hpp).
std::string gang_journal_dir() { return slurmd_spool_dir() + "/storm-gang"; }

} // namespace storm::plugins::switch_rdma
