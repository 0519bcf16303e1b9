#include "sched_gang/node_service.hpp"

namespace storm::gang {

std::unique_ptr<Switcher> make_node_service(node::Host &host, const NodeSetup &setup)
{
    SwitcherConfig sc;
    sc.self = host.self;
    sc.journal_dir = setup.journal_dir;
    sc.rescan = std::chrono::milliseconds(1000);
    sc.rt_priority = setup.rt_priority;
    sc.mcast = setup.mcast;
    if (sc.mcast.iface.s_addr == INADDR_ANY)
        sc.mcast.iface = host.nodes.at(host.self).sin_addr;
    sc.freeze.emplace();
    sc.freeze->group = setup.freeze_group;
    sc.signals_only = setup.signals_only;
    sc.lend = setup.lend;
    auto switcher = std::make_unique<Switcher>(host.base, *host.engine, host.steps, sc, host.log);
    switcher->recover();
    host.engine->add_sink("gang:",
                          [sw = switcher.get()](const std::string &ev, uint64_t origin, uint64_t offset,
                                                uint64_t total, std::string_view data, bool) {
                              return sw->on_chunk(ev, origin, offset, total, data);
                          });
    return switcher;
}

} // namespace storm::gang
