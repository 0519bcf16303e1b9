// The body of Slurm 22.05's sbcast credential (the signed bytes before the
// signature), as slurmctld packs it (src/common/slurm_cred.c,
// _pack_sbcast_cred): ctime, expiration (64 bit), job id, het job id, step
// id, uid, gid (32 bit), user name, gids (a u32 array), the job's node list.
// slurm_adapter/sbcast_cred.hpp reads the rest, which every line shares.
#pragma once

#include "slurm_adapter/sbcast_cred_fields.hpp"

namespace storm::slurm_api {

inline SbcastFields read_sbcast_body(net::Reader &r)
{
    SbcastFields f;
    r.u64(); // ctime
    f.expiration = static_cast<int64_t>(r.u64());
    f.job_id = r.u32();
    r.u32(); // het job id
    f.step_id = r.u32();
    f.uid = r.u32();
    f.gid = r.u32();
    f.user = sbcast_str(r);
    f.gids = sbcast_u32_array(r);
    f.nodes = sbcast_str(r);
    return f;
}

} // namespace storm::slurm_api
