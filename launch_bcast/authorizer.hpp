// Who may broadcast into which nodes: the check of a broadcast's credential.
//
// Slurm's sbcast credential (slurm_adapter/sbcast_cred.hpp checks it in
// slurmd) names a job, its owner and its nodes, and is signed by
// slurmctld; unit tests use a fake.
//
// Contract: authorize() returns the grant the credential carries only if it
// is genuine and unexpired, and throws net::AuthError saying why not.  It
// may block briefly (munge) and runs once per broadcast per node.
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
    virtual Grant authorize(std::string_view cred) = 0;
};

} // namespace storm::bcast
