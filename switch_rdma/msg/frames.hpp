// What tasks of a context send each other over their TCP connections (the
// "network" of libstormmsg; the progress threads are the NICs).
//
// Connection set-up (handshake.hpp): rank i connects to every rank j < i
// (j's node address, port ctx.port_for(j's local index)); j sends a
// challenge, i a hello that proves the context's key over it, j checks it
// (the frame format's version, its own context, job, step, the key,
// itself as destination, a rank above its own not connected yet) and
// answers a HelloAck that proves the key in turn, or closes the connection.
// Then a stream of frames, each a Frame, in both directions:
//   data   Frame{'D', refill} + PacketHeader + header.len bytes: one packet
//          (needs a credit); `refill` piggybacks consumed packets of the
//          receiver's
//   refill Frame{'R', refill}: credits returned
//   halt   Frame{'H', value=epoch}, ready Frame{'Y', value=epoch}: the
//          switch marks (no credit: counted, never stored)
//   bye    Frame{'B'}: no more data from me (finalize)
//   fin    Frame{'F'}: my last refills are out; I close once every peer's
//          fin came
//   abort  Frame{'X', value=length} + that many bytes: the sender's context
//          failed, for this reason (its peers fail too, naming it)
// Every frame, of every type, carries the sender's coscheduling status in
// its header (`status`, seed 001's status byte, cosched/README.md): 1 its
// job was scheduled on its node when the frame was queued, 0 it was not
// (the task ran on its small share), 2 unknown (the task is not
// coscheduled).  It sits in front of the packet, so it arrives whatever the
// message's length (0 included) and whatever length the receiver asks for.
// Only data frames are arrivals for coscheduling (a message of k packets
// counts k, a zero-length message or a barrier's one); the others are the
// library's own flow control and switch marks.  A status above 2 or a
// reserved byte that is not zero is a malformed frame: the receiver fails
// the context, naming the sender.
// Fields are in the senders' byte order: the Hello's `order` field rejects a
// peer of another byte order.
#pragma once

#include <cstddef>
#include <cstdint>

namespace storm::rdma::msg {

// The frame format's version, named by the handshake's magic: "STM" and
// the version's digit.  Version 1 ("STMH") had no status byte; version 2
// added it; version 3 (the same frames) the challenge and the hello's
// proof of the key (handshake.hpp).
constexpr uint32_t frame_version = 3;
constexpr uint32_t hello_magic = 0x53544d30 + frame_version; // "STM3"
constexpr uint32_t hello_magic_v2 = 0x53544d32;              // "STM2"
constexpr uint32_t hello_magic_v1 = 0x53544d48;              // "STMH"
constexpr uint32_t byte_order = 0x01020304;

enum FrameType : uint8_t {
    frame_data = 'D',
    frame_refill = 'R',
    frame_halt = 'H',
    frame_ready = 'Y',
    frame_bye = 'B',
    frame_fin = 'F',
    frame_abort = 'X',
};

constexpr size_t max_abort_reason = 4096;

// The sender's coscheduling status in Frame::status.
constexpr uint8_t status_not_scheduled = 0;
constexpr uint8_t status_scheduled = 1;
constexpr uint8_t status_unknown = 2;

struct Frame {
    uint8_t type;
    uint8_t status; // the sender's: status_not_scheduled, _scheduled, _unknown
    uint8_t pad[2]; // zero
    uint32_t refill;
    uint64_t value;
};
static_assert(sizeof(Frame) == 16, "frames are packed by hand");

} // namespace storm::rdma::msg
