// Slurm 26.05: the sbcast credential slurm_sbcast_lookup() returns
// (job_sbcast_cred_msg_t's sbcast_cred: void * in slurm.h since 23.11, pack_sbcast_cred in
// src/interfaces/cred.h), packed as the nodes receive it.  Used by slurm_adapter/bcast_job.hpp.
#pragma once

#include <string>

extern "C" {
#include "slurm/slurm.h"
#include "src/common/pack.h"
#include "src/interfaces/cred.h"
#include "src/common/slurm_protocol_api.h"
}

namespace storm::slurm_api {

inline std::string packed_sbcast_cred(const job_sbcast_cred_msg_t *msg)
{
    buf_t *b = init_buf(4096);
    pack_sbcast_cred(static_cast<sbcast_cred_t *>(msg->sbcast_cred), b, SLURM_PROTOCOL_VERSION);
    std::string cred(get_buf_data(b), get_buf_offset(b));
    free_buf(b);
    return cred;
}

} // namespace storm::slurm_api
