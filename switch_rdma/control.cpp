#include "switch_rdma/control.hpp"

#include "lib/net/unix_client.hpp"

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace storm::rdma::control {

namespace {

net::Writer start(Type t)
{
    net::Writer w;
    w.u8(version);
    w.u8(static_cast<uint8_t>(t));
    return w;
}

bool known(uint8_t t)
{
    switch (static_cast<Type>(t)) {
    case Type::open:
    case Type::close:
    case Type::attach:
    case Type::attached:
    case Type::ok:
    case Type::error:
    case Type::halt:
    case Type::halted:
    case Type::release:
    case Type::ready:
    case Type::failed:
        return true;
    }
    return false;
}

constexpr size_t max_reason = 4096;

} // namespace

std::string open(const Context &c)
{
    auto w = start(Type::open);
    w.bytes(c.encode());
    return w.take();
}

std::string close(uint32_t id, uint32_t job, uint32_t step)
{
    auto w = start(Type::close);
    w.u32(id);
    w.u32(job);
    w.u32(step);
    return w.take();
}

std::string attach(uint32_t id, uint32_t job, uint32_t step, uint32_t rank)
{
    auto w = start(Type::attach);
    w.u32(id);
    w.u32(job);
    w.u32(step);
    w.u32(rank);
    return w.take();
}

std::string attached(const Attached &a)
{
    auto w = start(Type::attached);
    w.u8(static_cast<uint8_t>(a.mode));
    w.u64(a.offset);
    w.u64(a.bytes);
    w.u32(a.packet_size);
    w.u32(a.send_slots);
    w.u32(a.recv_slots);
    w.u32(a.credits);
    w.u64(a.epoch);
    w.u8(a.resident ? 1 : 0);
    return w.take();
}

std::string ok() { return start(Type::ok).take(); }

std::string error(std::string_view reason)
{
    auto w = start(Type::error);
    w.bytes(reason.substr(0, max_reason));
    return w.take();
}

std::string failed(std::string_view reason)
{
    auto w = start(Type::failed);
    w.bytes(reason.substr(0, max_reason));
    return w.take();
}

std::string epoch_message(Type t, uint64_t epoch)
{
    auto w = start(t);
    w.u64(epoch);
    return w.take();
}

Header header(net::Reader &r)
{
    uint8_t v = r.u8();
    if (v != version)
        throw net::DecodeError("control message of version " + std::to_string(v) + " (this is " +
                               std::to_string(version) + ")");
    uint8_t t = r.u8();
    if (!known(t))
        throw net::DecodeError("unknown control message type " + std::to_string(t));
    return Header{static_cast<Type>(t)};
}

Context read_open(net::Reader &r)
{
    auto text = r.bytes(max_message);
    r.finish();
    return Context::decode(text);
}

Ids read_close(net::Reader &r)
{
    Ids i{};
    i.id = r.u32();
    i.job = r.u32();
    i.step = r.u32();
    r.finish();
    return i;
}

Ids read_attach(net::Reader &r)
{
    Ids i{};
    i.id = r.u32();
    i.job = r.u32();
    i.step = r.u32();
    i.rank = r.u32();
    r.finish();
    return i;
}

Attached read_attached(net::Reader &r)
{
    Attached a;
    uint8_t m = r.u8();
    if (m != static_cast<uint8_t>(PoolMode::divided) && m != static_cast<uint8_t>(PoolMode::swapped))
        throw net::DecodeError("unknown pool mode " + std::to_string(m));
    a.mode = static_cast<PoolMode>(m);
    a.offset = r.u64();
    a.bytes = r.u64();
    a.packet_size = r.u32();
    a.send_slots = r.u32();
    a.recv_slots = r.u32();
    a.credits = r.u32();
    a.epoch = r.u64();
    a.resident = r.u8() != 0;
    r.finish();
    return a;
}

std::string read_reason(net::Reader &r)
{
    std::string s(r.bytes(max_reason));
    r.finish();
    return s;
}

uint64_t read_epoch(net::Reader &r)
{
    uint64_t e = r.u64();
    r.finish();
    return e;
}

void request(const std::string &socket_path, const std::string &message, int timeout_ms)
{
    std::string answer = net::unix_request(socket_path, message, timeout_ms);
    net::Reader r(answer);
    Header h = header(r);
    if (h.type == Type::ok)
        return;
    if (h.type == Type::error)
        throw std::runtime_error(read_reason(r));
    throw std::runtime_error("unexpected answer from the node agent at " + socket_path);
}

} // namespace storm::rdma::control
