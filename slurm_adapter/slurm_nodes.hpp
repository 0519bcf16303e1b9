// Slurm's node table, as Storm's agents and initiators share it.
//
// Every party (the node agents in slurmd, slurmctld, srun, tools) builds the
// same table from the slurm.conf it has loaded: the NodeName lines in file
// order, each expanded in hostlist order, with NodeAddr (or NodeHostname,
// or the name) as the address.  A node's index in this table is its name
// in Storm's protocol (RangeSet).  "DEFAULT" lines are skipped.
//
// Contract: slurm_node_table() requires slurm_conf to be loaded (it is in
// every daemon and client); it throws std::runtime_error if an address does
// not resolve to IPv4 or the line's address list is shorter than its names.
#pragma once

#include <arpa/inet.h>
#include <memory>
#include <netdb.h>
#include <stdexcept>
#include <string>
#include <vector>

#include "lib/net/authenticator.hpp"
#include "lib/net/munge_auth.hpp"

extern "C" {
#include "src/common/hostlist.h"
#include "src/common/read_config.h"
#include "src/common/xmalloc.h"
}

namespace storm::shim {

struct SlurmNode {
    std::string name;
    std::string address;
    sockaddr_in sa; // port left 0: the caller sets the agent port
};

inline std::vector<std::string> expand_hostlist(const char *expr)
{
    std::vector<std::string> out;
    if (!expr)
        return out;
    auto hl = hostlist_create(expr); // a hostlist_t (22.05) or hostlist_t * (later)
    if (!hl)
        throw std::runtime_error(std::string("bad host list \"") + expr + "\"");
    while (char *h = hostlist_shift(hl)) {
        out.emplace_back(h);
        free(h);
    }
    hostlist_destroy(hl);
    return out;
}

inline sockaddr_in resolve_ipv4(const std::string &name, const std::string &addr)
{
    addrinfo hints{}, *res = nullptr;
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    int rc = getaddrinfo(addr.c_str(), nullptr, &hints, &res);
    if (rc != 0 || !res)
        throw std::runtime_error("node " + name + ": address " + addr +
                                 " does not resolve: " + gai_strerror(rc));
    sockaddr_in sa = *reinterpret_cast<sockaddr_in *>(res->ai_addr);
    freeaddrinfo(res);
    return sa;
}

inline std::vector<SlurmNode> slurm_node_table()
{
    slurm_conf_node_t **lines = nullptr;
    int n = slurm_conf_nodename_array(&lines);
    std::vector<SlurmNode> table;
    for (int i = 0; i < n; ++i) {
        const slurm_conf_node_t *l = lines[i];
        if (!l->nodenames || !strcasecmp(l->nodenames, "DEFAULT"))
            continue;
        auto names = expand_hostlist(l->nodenames);
        auto addrs = expand_hostlist(l->addresses   ? l->addresses
                                     : l->hostnames ? l->hostnames
                                                    : l->nodenames);
        if (addrs.size() < names.size())
            throw std::runtime_error(std::string("NodeName=") + l->nodenames +
                                     ": fewer addresses than names");
        for (size_t k = 0; k < names.size(); ++k)
            table.push_back({names[k], addrs[k], resolve_ipv4(names[k], addrs[k])});
    }
    return table;
}

// The node agents' addresses, by index: every node's at the agent port.
inline std::vector<sockaddr_in> agent_addresses(const std::vector<SlurmNode> &table, uint16_t port)
{
    std::vector<sockaddr_in> out;
    for (const auto &n : table) {
        sockaddr_in sa = n.sa;
        sa.sin_port = htons(port);
        out.push_back(sa);
    }
    return out;
}

// Munge authentication between Slurm's daemons (AuthInfo's socket): the
// agents trust SlurmUser and SlurmdUser.
inline std::unique_ptr<net::MungeAuthenticator> daemon_authenticator()
{
    return std::make_unique<net::MungeAuthenticator>(
        net::MungeAuth::socket_from_authinfo(slurm_conf.authinfo),
        std::vector<uid_t>{slurm_conf.slurm_user_id, slurm_conf.slurmd_user_id});
}

} // namespace storm::shim
