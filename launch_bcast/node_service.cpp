#include "launch_bcast/node_service.hpp"

namespace storm::bcast {
namespace {

ReceiverConfig receiver_config(const node::Host &host, const NodeSetup &setup)
{
    ReceiverConfig c;
    c.self = host.self;
    c.node_name = host.self_name();
    c.journal_dir = setup.journal_dir;
    c.gate_socket = setup.gate_socket;
    c.gate_trusted = host.trusted;
    return c;
}

ServiceConfig service_config(const node::Host &host)
{
    ServiceConfig c;
    c.self = host.self;
    c.names = host.names;
    c.control_fanout = host.fanout;
    return c;
}

} // namespace

NodeService::NodeService(node::Host &host, NodeSetup setup)
    : setup_(std::move(setup)),
      receiver_(host.base, *host.engine, *setup_.authorizer, receiver_config(host, setup_), host.log),
      service_(host.base, *host.engine, *setup_.authorizer, service_config(host), host.log)
{
    receiver_.recover();
    host.engine->add_async_sink("bcast:",
                                [this](const std::string &ev, uint64_t origin, uint64_t, uint64_t,
                                       const net::DataRef &data, bool sealed, prim::Engine::ChunkDone done) {
                                    receiver_.on_chunk(ev, origin, data, sealed, std::move(done));
                                });
    host.engine->on_service_frames([this](net::Connection &c, const net::FrameHeader &h,
                                          std::string_view p) { service_.on_frame(c, h, p); },
                                   [this](net::Connection &c) { service_.on_closed(c); });
}

std::unique_ptr<NodeService> make_node_service(node::Host &host, NodeSetup setup)
{
    return std::make_unique<NodeService>(host, std::move(setup));
}

} // namespace storm::bcast
