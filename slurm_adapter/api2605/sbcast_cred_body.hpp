// The body of Slurm 26.05's sbcast credential (the signed bytes before the
// signature), as cred/munge packs it (src/plugins/cred/common/
// cred_common.c, sbcast_cred_pack, protocol 25.11 and later, unchanged in 26.05): the step id
// (pack_step_id: sluid 64 bit, job, step, het component 32 bit), the
// owner's identity (src/common/identity.c, pack_identity), ctime,
// expiration (64 bit), het job id, the job's node list.
// slurm_adapter/sbcast_cred.hpp reads the rest, which every line shares.
#pragma once

#include "slurm_adapter/sbcast_cred_fields.hpp"

namespace storm::slurm_api {

inline SbcastFields read_sbcast_body(net::Reader &r)
{
    SbcastFields f;
    r.u64(); // sluid
    f.job_id = r.u32();
    f.step_id = r.u32();
    r.u32(); // het component
    sbcast_identity(r, f);
    r.u64(); // ctime
    f.expiration = static_cast<int64_t>(r.u64());
    r.u32(); // het job id
    f.nodes = sbcast_str(r);
    return f;
}

} // namespace storm::slurm_api
