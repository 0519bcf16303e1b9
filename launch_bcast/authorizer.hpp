// Who may broadcast into which nodes: the check of a broadcast's credential.
//
// Slurm's sbcast credential (slurm_adapter/sbcast_cred.hpp checks it in
// slurmd) names a job, its owner and its nodes, and is signed by
// slurmctld; unit tests use a fake.
//
// Contract: authorize() returns the grant the credential carries only if it
// is genuine and unexpired, and throws net::AuthError saying why not.  It
// blocks while munged answers (as long as its patience allows) and runs
// once per broadcast per node: on the node's worker of the broadcast, and
// on the head's event loop for the sender's request.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <sys/types.h>
#include <vector>

#include "lib/net/munge_auth.hpp"
#include "lib/net/rangeset.hpp"

namespace storm::bcast {

struct Grant {
    uint32_t job_id = 0;
    uint32_t step_id = 0;
    uid_t uid = 0;
    gid_t gid = 0;
    std::vector<gid_t> gids; // supplementary groups (may be empty: looked up)
    std::string user;
    net::RangeSet nodes; // the job's nodes, as indices into the node table
};

class Authorizer {
public:
    virtual ~Authorizer() = default;
    // `patience`: how long a busy munged is waited for (munge_auth.hpp):
    // Patience::loop on an event loop, Patience::worker(_for) on a thread
    // of its own.  Safe to call from several threads at once.
    virtual Grant authorize(std::string_view cred, const net::Patience &patience) = 0;
};

} // namespace storm::bcast
