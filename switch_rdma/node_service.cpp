#include "switch_rdma/node_service.hpp"

namespace storm::rdma {

std::unique_ptr<Pool> make_node_service(node::Host &host, const NodeSetup &setup, const PoolConfig &config,
                                        std::shared_ptr<node::Admissions> admissions,
                                        std::function<bool(pid_t)> stopped)
{
    PoolSetup ps;
    ps.socket_path = setup.socket_path;
    ps.stats_path = setup.stats_path;
    ps.self_addr = host.nodes.at(host.self).sin_addr.s_addr;
    ps.trusted = host.trusted;
    ps.config = config;
    ps.admissions = std::move(admissions);
    ps.is_stopped = std::move(stopped);
    auto pool = std::make_unique<Pool>(host.base, std::move(ps), host.log);
    pool->start();
    return pool;
}

} // namespace storm::rdma
