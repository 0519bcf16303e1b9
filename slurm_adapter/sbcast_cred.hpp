// Slurm 22.05's sbcast credential, checked by the node agent: the proof
// that a broadcast's sender owns the job and which nodes it may write to.
//
// slurmctld packs it (slurm_cred.c, _pack_sbcast_cred) as, in network byte
// order: ctime, expiration (64 bit), job id, het job id, step id, uid, gid
// (32 bit), user name and gids (length-prefixed), the job's node list
// (a host list), then the signature: a munge credential, made by SlurmUser
// or root, whose payload is exactly the bytes before it (cred/munge).
//
// Every node verifies it with its own munge call.  Several slurmd sharing
// one munged (a virtual cluster) would see the same credential "replayed",
// so a replay is accepted, as Slurm itself does for its multiple-slurmd
// builds: the credential's use is bound to its content (the job's owner,
// checked against the sender's munge-authenticated uid, and its nodes).
//
// Contract: authorize() throws net::AuthError naming the cause (malformed,
// forged, expired, signed by someone else, a node outside slurm.conf).
#pragma once

#include <ctime>
#include <map>
#include <string>
#include <vector>

#include "launch_bcast/authorizer.hpp"
#include "lib/net/munge_auth.hpp"
#include "lib/net/wire.hpp"
#include "slurm_adapter/slurm_nodes.hpp"

namespace storm::shim {

class SbcastAuthorizer : public bcast::Authorizer {
public:
    SbcastAuthorizer(std::string munge_socket, std::vector<uid_t> signers,
                     const std::vector<SlurmNode> &table)
        : munge_(std::move(munge_socket)), signers_(std::move(signers))
    {
        for (size_t i = 0; i < table.size(); ++i)
            index_.emplace(table[i].name, static_cast<uint32_t>(i));
    }

    bcast::Grant authorize(std::string_view cred) override
    {
        bcast::Grant g;
        std::string nodes;
        std::string_view sig, body;
        int64_t expiration = 0;
        try {
            net::Reader r(cred);
            r.u64(); // ctime
            expiration = static_cast<int64_t>(r.u64());
            g.job_id = r.u32();
            r.u32(); // het job id
            g.step_id = r.u32();
            g.uid = r.u32();
            g.gid = r.u32();
            g.user = cstr(r.bytes(1024));
            uint32_t ngids = r.u32();
            if (ngids > 65536)
                throw net::DecodeError("too many groups");
            for (uint32_t i = 0; i < ngids; ++i)
                g.gids.push_back(r.u32());
            nodes = cstr(r.bytes(1u << 20));
            body = cred.substr(0, cred.size() - r.remaining());
            sig = r.bytes(1u << 16);
            r.finish();
        } catch (const net::DecodeError &e) {
            throw net::AuthError(std::string("malformed sbcast credential: ") + e.what());
        }
        while (!sig.empty() && sig.back() == '\0')
            sig.remove_suffix(1);
        auto signed_by = munge_.decode_allow_replay(sig);
        bool signer_ok = false;
        for (uid_t u : signers_)
            signer_ok = signer_ok || signed_by.uid == u;
        if (!signer_ok)
            throw net::AuthError("sbcast credential signed by uid " + std::to_string(signed_by.uid) +
                                 ", not by SlurmUser");
        if (signed_by.payload != body)
            throw net::AuthError("sbcast credential does not match its signature");
        if (expiration < static_cast<int64_t>(std::time(nullptr)))
            throw net::AuthError("sbcast credential of job " + std::to_string(g.job_id) + " expired");
        if (g.uid == 0 && g.user.empty())
            throw net::AuthError("sbcast credential without a user");
        std::vector<uint32_t> idx;
        for (const auto &n : expand_hostlist(nodes.c_str())) {
            auto it = index_.find(n);
            if (it == index_.end())
                throw net::AuthError("node " + n + " of job " + std::to_string(g.job_id) +
                                     " is not in slurm.conf");
            idx.push_back(it->second);
        }
        g.nodes = net::RangeSet::of(idx);
        if (g.nodes.empty())
            throw net::AuthError("sbcast credential of job " + std::to_string(g.job_id) + " names no node");
        return g;
    }

private:
    // packstr: the length counts a trailing NUL.
    static std::string cstr(std::string_view v)
    {
        if (!v.empty() && v.back() == '\0')
            v.remove_suffix(1);
        return std::string(v);
    }
    net::MungeAuth munge_;
    std::vector<uid_t> signers_;
    std::map<std::string, uint32_t> index_;
};

} // namespace storm::shim
