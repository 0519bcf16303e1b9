// What Storm reads from a Slurm sbcast credential's body, and the readers
// of Slurm's packing the per-line layouts share (src/common/pack.c): a
// string is a u32 length counting a trailing NUL, then its bytes (length 0
// for none); a u32 array is a u32 count, then the values; an identity
// (23.11 and later, src/common/identity.c) is uid, gid, user name, gecos,
// home, shell, the gids (u32 array), the group names (a string array).
//
// Each line's layout is read by read_sbcast_body() in
// slurm_adapter/api<GEN>/sbcast_cred_body.hpp, which throws
// net::DecodeError on malformed input.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lib/net/wire.hpp"

namespace storm::slurm_api {

struct SbcastFields {
    int64_t expiration = 0;
    uint32_t job_id = 0, step_id = 0, uid = 0, gid = 0;
    std::string user;
    std::vector<uint32_t> gids;
    std::string nodes;
};

inline std::string sbcast_str(net::Reader &r, size_t max = 1u << 20)
{
    auto v = r.bytes(max);
    if (!v.empty() && v.back() == '\0')
        v.remove_suffix(1);
    return std::string(v);
}

inline std::vector<uint32_t> sbcast_u32_array(net::Reader &r)
{
    uint32_t n = r.u32();
    if (n > 65536)
        throw net::DecodeError("too many groups");
    std::vector<uint32_t> v;
    v.reserve(n);
    for (uint32_t i = 0; i < n; ++i)
        v.push_back(r.u32());
    return v;
}

inline void sbcast_identity(net::Reader &r, SbcastFields &f)
{
    f.uid = r.u32();
    f.gid = r.u32();
    f.user = sbcast_str(r, 1024);
    for (int i = 0; i < 3; ++i) // gecos, home, shell
        sbcast_str(r, 1u << 16);
    f.gids = sbcast_u32_array(r);
    uint32_t names = r.u32();
    if (names > 65536)
        throw net::DecodeError("too many group names");
    for (uint32_t i = 0; i < names; ++i)
        sbcast_str(r, 1024);
}

} // namespace storm::slurm_api
