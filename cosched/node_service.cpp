#include "cosched/node_service.hpp"

namespace storm::cosched {

std::unique_ptr<Local> make_node_service(node::Host &host, const NodeSetup &setup,
                                         const CoschedConfig &config,
                                         std::shared_ptr<const node::Admissions> admissions)
{
    LocalSetup cs;
    cs.socket_path = setup.socket_path;
    cs.stats_path = setup.socket_path.substr(0, setup.socket_path.rfind('/') + 1) + "storm-cosched.stats";
    cs.config = config;
    cs.verifier = make_verifier(host.steps, std::move(admissions), config.partitions);
    if (!setup.group.empty())
        cs.enforcer.group = setup.group;
    auto local = std::make_unique<Local>(host.base, std::move(cs), host.log);
    local->start();
    return local;
}

} // namespace storm::cosched
