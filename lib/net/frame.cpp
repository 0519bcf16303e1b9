#include "lib/net/frame.hpp"

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

} // namespace

const char *msg_type_name(MsgType t) noexcept
{
    switch (t) {
    case MsgType::hello:
        return "hello";
    case MsgType::hello_ok:
        return "hello_ok";
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
    case MsgType::bcast_open:
        return "bcast_open";
    case MsgType::bcast_data:
        return "bcast_data";
    case MsgType::bcast_close:
        return "bcast_close";
    case MsgType::bcast_reply:
        return "bcast_reply";
    case MsgType::xfer_mc:
        return "xfer_mc";
    case MsgType::xfer_nack:
        return "xfer_nack";
    }
    return "unknown";
}

uint32_t max_payload(MsgType t) noexcept
{
    return t == MsgType::xfer || t == MsgType::xfer_mc || t == MsgType::bcast_open || t == MsgType::bcast_data
               ? kMaxDataPayload
               : kMaxControlPayload;
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
    if (type < static_cast<uint8_t>(MsgType::hello) || type > static_cast<uint8_t>(MsgType::xfer_nack))
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
