#include "lib/net/frame.hpp"

#include <array>
#include <cstdio>
#include <cstring>
#include <endian.h>

namespace storm::net {
namespace {

std::string hex(uint32_t v, int width)
{
    char b[16];
    std::snprintf(b, sizeof b, "0x%0*x", width, v);
    return b;
}

// Whether a receiver knows type `v`: one of MsgType's, or a service frame.
bool known_type(uint8_t v) noexcept
{
    auto t = static_cast<MsgType>(v);
    if (is_service_frame(t))
        return true;
    switch (t) {
    case MsgType::hello:
    case MsgType::hello_ok:
    case MsgType::challenge:
    case MsgType::xfer:
    case MsgType::xfer_ack:
    case MsgType::caw:
    case MsgType::caw_ack:
    case MsgType::heartbeat:
    case MsgType::xfer_mc:
    case MsgType::xfer_nack:
        return true;
    }
    return false;
}

const char *service_name(MsgType t) noexcept
{
    static const auto names = [] {
        std::array<std::array<char, 12>, 2 * kServiceTypes> n{};
        for (unsigned i = 0; i < n.size(); ++i)
            std::snprintf(n[i].data(), n[i].size(), "service#%u", kServiceDataFirst + i);
        return n;
    }();
    return names[static_cast<uint8_t>(t) - kServiceDataFirst].data();
}

} // namespace

const char *msg_type_name(MsgType t) noexcept
{
    if (is_service_frame(t))
        return service_name(t);
    switch (t) {
    case MsgType::hello:
        return "hello";
    case MsgType::hello_ok:
        return "hello_ok";
    case MsgType::challenge:
        return "challenge";
    case MsgType::xfer:
        return "xfer";
    case MsgType::xfer_ack:
        return "xfer_ack";
    case MsgType::caw:
        return "caw";
    case MsgType::caw_ack:
        return "caw_ack";
    case MsgType::heartbeat:
        return "heartbeat";
    case MsgType::xfer_mc:
        return "xfer_mc";
    case MsgType::xfer_nack:
        return "xfer_nack";
    }
    return "unknown";
}

uint32_t max_payload(MsgType t) noexcept
{
    bool data = t == MsgType::xfer || t == MsgType::xfer_mc ||
                (is_service_frame(t) && static_cast<uint8_t>(t) < kServiceControlFirst);
    return data ? kMaxDataPayload : kMaxControlPayload;
}

void encode_header(char *out, MsgType type, uint64_t op, size_t length)
{
    if (length > max_payload(type))
        throw FrameError(std::string(msg_type_name(type)) + " payload of " + std::to_string(length) +
                         " bytes exceeds the limit of " + std::to_string(max_payload(type)));
    uint32_t magic = htobe32(kFrameMagic), len = htobe32(static_cast<uint32_t>(length));
    uint64_t id = htobe64(op);
    std::memcpy(out, &magic, 4);
    out[4] = static_cast<char>(kProtocolVersion);
    out[5] = static_cast<char>(type);
    out[6] = out[7] = 0;
    std::memcpy(out + 8, &len, 4);
    std::memcpy(out + 12, &id, 8);
}

void encode_frame(std::string &out, MsgType type, uint64_t op, std::string_view payload)
{
    char h[kHeaderSize];
    encode_header(h, type, op, payload.size());
    out.append(h, kHeaderSize);
    out.append(payload.data(), payload.size());
}

FrameHeader decode_header(const void *p)
{
    Reader r(p, kHeaderSize);
    uint32_t magic = r.u32();
    if (magic != kFrameMagic)
        throw FrameError("bad magic " + hex(magic, 8) + " (not a Storm peer)");
    uint8_t version = r.u8();
    if (version != kProtocolVersion)
        throw FrameError("protocol version " + std::to_string(version) + " (this agent speaks " +
                         std::to_string(kProtocolVersion) + ")");
    uint8_t type = r.u8();
    if (!known_type(type))
        throw FrameError("unknown message type " + std::to_string(type));
    uint16_t flags = r.u16();
    if (flags)
        throw FrameError("reserved flags set (" + hex(flags, 4) + ")");
    FrameHeader h;
    h.type = static_cast<MsgType>(type);
    h.length = r.u32();
    h.op = r.u64();
    if (h.length > max_payload(h.type))
        throw FrameError(std::string(msg_type_name(h.type)) + " frame of " + std::to_string(h.length) +
                         " bytes exceeds the limit of " + std::to_string(max_payload(h.type)));
    return h;
}

} // namespace storm::net
