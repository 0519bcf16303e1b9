// Slurm's sbcast credential, checked by the node agent: the proof that a
// broadcast's sender owns the job and which nodes it may write to.
//
// slurmctld packs it as a body, then the signature: a munge credential
// (a packed string), made by SlurmUser or root, whose payload is exactly
// the body's bytes (cred/munge).  The body's layout differs between
// release lines: each line's adapter reads it
// (slurm_adapter/api<GEN>/sbcast_cred_body.hpp): expiration, job and step
// ids, the owner (uid, gid, user name, gids), the job's node list.
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
#include "sbcast_cred_body.hpp"
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

    bcast::Grant authorize(std::string_view cred, const net::Patience &patience) override
    {
        bcast::Grant g;
        std::string nodes;
        std::string_view sig, body;
        int64_t expiration = 0;
        try {
            net::Reader r(cred);
            auto f = slurm_api::read_sbcast_body(r);
            expiration = f.expiration;
            g.job_id = f.job_id;
            g.step_id = f.step_id;
            g.uid = f.uid;
            g.gid = f.gid;
            g.user = std::move(f.user);
            g.gids = std::move(f.gids);
            nodes = std::move(f.nodes);
            body = cred.substr(0, cred.size() - r.remaining());
            sig = r.bytes(1u << 16);
            r.finish();
        } catch (const net::DecodeError &e) {
            throw net::AuthError(std::string("malformed sbcast credential: ") + e.what());
        }
        while (!sig.empty() && sig.back() == '\0')
            sig.remove_suffix(1);
        auto signed_by = munge_.decode_allow_replay(sig, patience);
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
    net::MungeAuth munge_;
    std::vector<uid_t> signers_;
    std::map<std::string, uint32_t> index_;
};

} // namespace storm::shim
