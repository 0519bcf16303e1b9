// The frame: the unit every connection between Storm's daemons carries.
//
//   offset size field
//        0    4 magic    0x53544f52 ("STOR")
//        4    1 version  kProtocolVersion
//        5    1 type     MsgType
//        6    2 flags    reserved, must be 0
//        8    4 length   payload bytes that follow the header
//       12    8 op       operation id (matches requests and replies)
//   (20 bytes, network byte order, then `length` bytes of payload)
//
// Contract: decode_header() validates everything a receiver must know
// before it reads a payload (magic, version, a known type, zero flags, a
// length within the type's limit) and throws FrameError naming what is
// wrong; a receiver closes the connection on FrameError and never acts on
// the frame.
//
// Service frames: the types kServiceDataFirst to kServiceLast are reserved
// for the services above lib/prim, which name their own types in the range
// with service_data(n) and service_control(n).  lib/net carries them, and
// lib/prim's engine hands every one to the handler a service registered,
// without knowing whose they are.  A service frame's payload limit is its
// class's: kMaxDataPayload for service_data(), kMaxControlPayload for
// service_control().
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

#include "lib/net/wire.hpp"

namespace storm::net {

constexpr uint32_t kFrameMagic = 0x53544f52;
constexpr uint8_t kProtocolVersion = 3; // 2: types 8-11 retired, 32-63 service frames; 3: challenge
constexpr size_t kHeaderSize = 20;
// Largest payload of a data frame (one broadcast chunk plus its header).
constexpr uint32_t kMaxDataPayload = 16u << 20;
// Largest payload of any control frame.
constexpr uint32_t kMaxControlPayload = 64u << 10;

enum class MsgType : uint8_t {
    hello = 1,    // client -> server: munge credential (authentication)
    hello_ok = 2, // server -> client: accepted
    xfer = 3,     // XFER-AND-SIGNAL down the tree (data)
    xfer_ack = 4, // completion up the tree, with failed nodes
    caw = 5,      // COMPARE-AND-WRITE down the tree
    caw_ack = 6,  // result up the tree
    heartbeat = 7,
    challenge = 8, // server -> client, first: the nonce the client's hello must bind (version 3)
    // 9-11: unused since version 2.
    // XFER-AND-SIGNAL whose data travels by multicast (lib/net/mcast.hpp):
    xfer_mc = 12,   // down the tree: a chunk's announcement and seal (its data only as a repair)
    xfer_nack = 13, // up one hop: the chunk's data did not arrive, send it over this connection
    // 32-63: service frames (below), named by the services themselves.
};

// The range of service frames: kServiceTypes types of each class.
constexpr unsigned kServiceTypes = 16;
constexpr uint8_t kServiceDataFirst = 32;    // 32-47: payloads up to kMaxDataPayload
constexpr uint8_t kServiceControlFirst = 48; // 48-63: payloads up to kMaxControlPayload
constexpr uint8_t kServiceLast = kServiceControlFirst + kServiceTypes - 1;

constexpr bool is_service_frame(MsgType t) noexcept
{
    return static_cast<uint8_t>(t) >= kServiceDataFirst && static_cast<uint8_t>(t) <= kServiceLast;
}

// A service's n-th type of data (n < kServiceTypes; else std::out_of_range,
// which fails the build where the type is a constant).
constexpr MsgType service_data(unsigned n)
{
    return n < kServiceTypes ? static_cast<MsgType>(kServiceDataFirst + n)
                             : throw std::out_of_range("service data frame types are 0 to 15");
}

// A service's n-th control type (n < kServiceTypes; else std::out_of_range).
constexpr MsgType service_control(unsigned n)
{
    return n < kServiceTypes ? static_cast<MsgType>(kServiceControlFirst + n)
                             : throw std::out_of_range("service control frame types are 0 to 15");
}

class FrameError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

struct FrameHeader {
    MsgType type = MsgType::hello;
    uint32_t length = 0;
    uint64_t op = 0;
};

// A type's name; a service frame's is "service#<type>" ("service#32").
const char *msg_type_name(MsgType t) noexcept;
// The payload limit of a type: kMaxDataPayload for xfer, xfer_mc and the
// service data types, else kMaxControlPayload.
uint32_t max_payload(MsgType t) noexcept;

// Writes the kHeaderSize bytes of a frame's header at out.  Throws
// FrameError if `length` exceeds the type's payload limit.
void encode_header(char *out, MsgType type, uint64_t op, size_t length);

// Appends a header and `payload` to out.  Throws FrameError if the payload
// exceeds the type's limit.
void encode_frame(std::string &out, MsgType type, uint64_t op, std::string_view payload);

// Validates and decodes the kHeaderSize bytes at p.
FrameHeader decode_header(const void *p);

} // namespace storm::net
